//! A small S3 client for the tests: SigV4 header signing and presigned URLs (written from AWS's specification,
//! independent of s3s's verifier), one HTTP/1.1 connection per request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

/// What the server answered.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// A header as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The S3 error code in the body (`<Code>…</Code>`), "" if none.
    pub fn code(&self) -> String {
        self.xml("Code").into_iter().next().unwrap_or_default()
    }

    /// The text of every `<tag>…</tag>` in the body, in order.
    pub fn xml(&self, tag: &str) -> Vec<String> {
        let text = self.text();
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        let mut out = Vec::new();
        let mut rest = text.as_str();
        while let Some(start) = rest.find(&open) {
            rest = &rest[start + open.len()..];
            let Some(end) = rest.find(&close) else { break };
            out.push(rest[..end].to_owned());
            rest = &rest[end + close.len()..];
        }
        out
    }
}

/// Credentials and where the server is.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub access_key: String,
    pub secret: String,
    pub region: String,
}

/// How a request's payload is declared in its signature.
enum Payload {
    /// Its SHA-256 (the body is in memory).
    Signed,
    /// A literal `x-amz-content-sha256` value (UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER).
    Literal(&'static str),
    /// Not signed at all (anonymous).
    Anonymous,
}

/// One request being built.
pub struct Call<'a> {
    client: &'a Client,
    method: &'static str,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Bytes,
    stream: Option<mpsc::Receiver<Bytes>>,
    payload: Payload,
}

impl Client {
    /// A request to `path` (already %-encoded as it goes on the wire, e.g. `/bucket/a%20b`).
    pub fn call(&self, method: &'static str, path: &str) -> Call<'_> {
        Call {
            client: self,
            method,
            path: path.to_owned(),
            query: Vec::new(),
            headers: Vec::new(),
            body: Bytes::new(),
            stream: None,
            payload: Payload::Signed,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call("GET", path).send().await
    }

    pub async fn put(&self, path: &str, body: impl Into<Bytes>) -> Reply {
        self.call("PUT", path).body(body).send().await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call("DELETE", path).send().await
    }

    /// A presigned GET URL (path and query) for `path`, signed at `at`, valid for `expires`.
    pub fn presign_get(&self, path: &str, at: SystemTime, expires: Duration) -> String {
        let (amz_date, date) = amz_dates(at);
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let mut query = vec![
            ("X-Amz-Algorithm".to_owned(), "AWS4-HMAC-SHA256".to_owned()),
            (
                "X-Amz-Credential".to_owned(),
                format!("{}/{scope}", self.access_key),
            ),
            ("X-Amz-Date".to_owned(), amz_date.clone()),
            ("X-Amz-Expires".to_owned(), expires.as_secs().to_string()),
            ("X-Amz-SignedHeaders".to_owned(), "host".to_owned()),
        ];
        let headers = vec![("host".to_owned(), self.addr.to_string())];
        let signature = self.signature(
            "GET",
            path,
            &query,
            &headers,
            "UNSIGNED-PAYLOAD",
            &amz_date,
            &date,
        );
        query.push(("X-Amz-Signature".to_owned(), signature));
        format!("{path}?{}", canonical_query(&query))
    }

    /// The SigV4 signature of a canonical request.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of SigV4's canonical request"
    )]
    fn signature(
        &self,
        method: &str,
        path: &str,
        query: &[(String, String)],
        headers: &[(String, String)],
        payload_hash: &str,
        amz_date: &str,
        date: &str,
    ) -> String {
        let mut headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        headers.sort();
        let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        let canonical = format!(
            "{method}\n{path}\n{}\n{canonical_headers}\n{}\n{payload_hash}",
            canonical_query(query),
            signed.join(";")
        );
        let scope = format!("{date}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let mut key = hmac(format!("AWS4{}", self.secret).as_bytes(), date.as_bytes());
        for part in [self.region.as_str(), "s3", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        hex(&hmac(&key, to_sign.as_bytes()))
    }
}

impl Call<'_> {
    pub fn query(mut self, key: &str, value: &str) -> Self {
        self.query.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn header(mut self, key: &str, value: &str) -> Self {
        self.headers.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends the body as it arrives on `rx` (chunked transfer, UNSIGNED-PAYLOAD) with Content-Length `len`.
    pub fn stream(mut self, rx: mpsc::Receiver<Bytes>, len: u64) -> Self {
        self.stream = Some(rx);
        self.payload = Payload::Literal("UNSIGNED-PAYLOAD");
        self.header("content-length", &len.to_string())
    }

    /// Declares the payload with this literal `x-amz-content-sha256` instead of its hash.
    pub fn payload(mut self, literal: &'static str) -> Self {
        self.payload = Payload::Literal(literal);
        self
    }

    /// Sends no signature.
    pub fn anonymous(mut self) -> Self {
        self.payload = Payload::Anonymous;
        self
    }

    pub async fn send(self) -> Reply {
        let addr = self.client.addr;
        send_raw(addr, self.into_request()).await
    }

    /// The signed request.
    pub fn into_request(self) -> http::Request<BoxBody<Bytes, Infallible>> {
        let client = self.client;
        let mut headers = self.headers.clone();
        headers.push(("host".to_owned(), client.addr.to_string()));
        if self.stream.is_none() && !headers.iter().any(|(k, _)| k == "content-length") {
            headers.push(("content-length".to_owned(), self.body.len().to_string()));
        }
        let payload_hash = match self.payload {
            Payload::Signed => Some(hex(&Sha256::digest(&self.body))),
            Payload::Literal(literal) => Some(literal.to_owned()),
            Payload::Anonymous => None,
        };
        if let Some(payload_hash) = payload_hash {
            let (amz_date, date) = amz_dates(SystemTime::now());
            headers.push(("x-amz-date".to_owned(), amz_date.clone()));
            headers.push(("x-amz-content-sha256".to_owned(), payload_hash.clone()));
            let signed: Vec<(String, String)> = headers
                .iter()
                .filter(|(k, _)| k != "content-length")
                .cloned()
                .collect();
            let signature = client.signature(
                self.method,
                &self.path,
                &self.query,
                &signed,
                &payload_hash,
                &amz_date,
                &date,
            );
            let mut names: Vec<String> =
                signed.iter().map(|(k, _)| k.to_ascii_lowercase()).collect();
            names.sort();
            headers.push((
                "authorization".to_owned(),
                format!(
                    "AWS4-HMAC-SHA256 Credential={}/{date}/{}/s3/aws4_request, SignedHeaders={}, Signature={signature}",
                    client.access_key,
                    client.region,
                    names.join(";")
                ),
            ));
        }
        let uri = if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, canonical_query(&self.query))
        };
        let body: BoxBody<Bytes, Infallible> = match self.stream {
            Some(rx) => BodyExt::boxed(StreamBody::new(
                tokio_stream(rx).map(|b| Ok::<_, Infallible>(Frame::data(b))),
            )),
            None => Full::new(self.body).boxed(),
        };
        let mut request = http::Request::builder().method(self.method).uri(uri);
        for (k, v) in &headers {
            request = request.header(k, v);
        }
        request.body(body).expect("request")
    }
}

/// Sends `request` on a new connection to `addr`.
pub async fn send_raw(
    addr: SocketAddr,
    request: http::Request<BoxBody<Bytes, Infallible>>,
) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    send_on(stream, request).await
}

/// Sends `request` on `stream` (HTTP/1.1).
pub async fn send_on<S>(stream: S, request: http::Request<BoxBody<Bytes, Infallible>>) -> Reply
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    try_send_on(stream, request)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Sends `request` on a new connection to `addr`; a transport failure (connection refused or cut, body cut
/// short) is returned, not a panic, for tests that record what the server answered.
pub async fn try_send_raw(
    addr: SocketAddr,
    request: http::Request<BoxBody<Bytes, Infallible>>,
) -> Result<Reply, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    try_send_on(stream, request).await
}

/// [`send_on`], returning a transport failure. The connection is closed when the returned future completes or
/// is dropped (a task sending it aborted: the client goes away).
pub async fn try_send_on<S>(
    stream: S,
    request: http::Request<BoxBody<Bytes, Infallible>>,
) -> Result<Reply, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let _conn = AbortOnDrop(tokio::spawn(conn));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("response: {e}"))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("status {status}, body cut: {e}"))?
        .to_bytes();
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The receiver as a stream.
fn tokio_stream(mut rx: mpsc::Receiver<Bytes>) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// SigV4's canonical query string: sorted, every name and value %-encoded.
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k), uri_encode(v)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// %-encodes every byte but the unreserved characters.
pub fn uri_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `x-amz-date` (`YYYYMMDDTHHMMSSZ`) and the date (`YYYYMMDD`) of `at`.
pub fn amz_dates(at: SystemTime) -> (String, String) {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let date = format!("{year:04}{month:02}{day:02}");
    let time = format!("{:02}{:02}{:02}", rest / 3600, rest % 3600 / 60, rest % 60);
    (format!("{date}T{time}Z"), date)
}

/// CRC32 (IEEE), for `x-amz-checksum-crc32` values.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Base64 (standard alphabet, padded).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn helpers_match_known_values() {
    assert_eq!(
        amz_dates(SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600)).0,
        "20130524T000000Z"
    );
    assert_eq!(crc32(b"hello world"), 0x0d4a_1185);
    assert_eq!(base64(&crc32(b"hello world").to_be_bytes()), "DUoRhQ==");
    assert_eq!(base64(b"ab"), "YWI=");
}
