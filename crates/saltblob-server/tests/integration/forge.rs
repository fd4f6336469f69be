//! Hand-made requests for the attack tests, written from AWS's specifications (independent of s3s): SigV4 with a
//! chosen credential scope and signed headers, presigned URLs with raw parameters, Signature Version 2 (header
//! and query), and signed `aws-chunked` bodies (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`) whose chunk signatures a
//! test may tamper with.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::client::{Client, amz_dates, base64, canonical_query, hex, hmac, uri_encode};

/// The hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// SigV4's signing key of `secret` for `date`, `region` and `service`.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    key
}

/// What signing a request fixed: the seed signature and what chunk signatures chain from.
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub chunks: ChunkSigner,
}

/// Signs `aws-chunked` chunks, each chained to the one before (the first to the request's seed signature).
pub struct ChunkSigner {
    key: Vec<u8>,
    amz_date: String,
    scope: String,
    previous: String,
}

impl ChunkSigner {
    /// The signature of the next chunk, `data`.
    pub fn sign(&mut self, data: &[u8]) -> String {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{}\n{}",
            self.amz_date,
            self.scope,
            self.previous,
            sha256_hex(b""),
            sha256_hex(data)
        );
        self.previous = hex(&hmac(&self.key, to_sign.as_bytes()));
        self.previous.clone()
    }

    /// The framed chunk `data` (`SIZE;chunk-signature=SIG\r\nDATA\r\n`), signed.
    pub fn frame(&mut self, data: &[u8]) -> Vec<u8> {
        let signature = self.sign(data);
        let mut out = format!("{:x};chunk-signature={signature}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// A SigV4 header-signed request whose scope service and signed headers the test chooses.
pub struct Forged<'a> {
    pub client: &'a Client,
    pub method: &'static str,
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Sent and signed.
    pub headers: Vec<(String, String)>,
    /// Headers left out of SignedHeaders (still sent), e.g. `host` or `x-amz-date`.
    pub unsigned: Vec<&'static str>,
    pub service: &'static str,
    /// The `x-amz-content-sha256` value.
    pub payload: String,
}

impl<'a> Forged<'a> {
    /// A request for `method` `path` signed as a client would, with an empty body.
    pub fn new(client: &'a Client, method: &'static str, path: &str) -> Self {
        Self {
            client,
            method,
            path: path.to_owned(),
            query: Vec::new(),
            headers: Vec::new(),
            unsigned: Vec::new(),
            service: "s3",
            payload: sha256_hex(b""),
        }
    }

    /// Every header to send, `authorization` included, and the chunk signer.
    pub fn sign(&self) -> Signed {
        let c = self.client;
        let (amz_date, date) = amz_dates(SystemTime::now());
        let mut headers = self.headers.clone();
        headers.push(("host".to_owned(), c.addr.to_string()));
        headers.push(("x-amz-date".to_owned(), amz_date.clone()));
        headers.push(("x-amz-content-sha256".to_owned(), self.payload.clone()));
        let mut signed: Vec<(String, String)> = headers
            .iter()
            .filter(|(k, _)| k != "content-length" && !self.unsigned.contains(&k.as_str()))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        signed.sort();
        let canonical_headers: String = signed.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let names: Vec<&str> = signed.iter().map(|(k, _)| k.as_str()).collect();
        let canonical = format!(
            "{}\n{}\n{}\n{canonical_headers}\n{}\n{}",
            self.method,
            self.path,
            canonical_query(&self.query),
            names.join(";"),
            self.payload
        );
        let scope = format!("{date}/{}/{}/aws4_request", c.region, self.service);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        let key = signing_key(&c.secret, &date, &c.region, self.service);
        let seed = hex(&hmac(&key, to_sign.as_bytes()));
        headers.push((
            "authorization".to_owned(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={}, Signature={seed}",
                c.access_key,
                names.join(";")
            ),
        ));
        Signed {
            headers,
            chunks: ChunkSigner {
                key,
                amz_date,
                scope,
                previous: seed,
            },
        }
    }

    /// The request with `headers` and `body`.
    pub fn request(
        &self,
        headers: &[(String, String)],
        body: Body,
    ) -> http::Request<BoxBody<Bytes, Infallible>> {
        let uri = if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, canonical_query(&self.query))
        };
        raw_request(self.method, &uri, headers, body)
    }
}

/// A request body: in memory, or streamed from a channel (the test decides when, or whether, it ends).
pub enum Body {
    Bytes(Bytes),
    Stream(mpsc::Receiver<Bytes>),
}

/// A request of `method` `uri` with exactly `headers` and `body`.
pub fn raw_request(
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    body: Body,
) -> http::Request<BoxBody<Bytes, Infallible>> {
    let body: BoxBody<Bytes, Infallible> = match body {
        Body::Bytes(bytes) => Full::new(bytes).boxed(),
        Body::Stream(mut rx) => BodyExt::boxed(StreamBody::new(
            futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
                .map(|b| Ok::<_, Infallible>(Frame::data(b))),
        )),
    };
    let mut request = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        request = request.header(k, v);
    }
    request.body(body).expect("request")
}

/// A presigned URL (path and query) for `method` `path` whose `X-Amz-Expires` is `expires` as written, for
/// scope `service`, signing the headers `signed` (name, value) — which the request must then send — and the
/// extra query parameters `extra`.
pub fn presign(
    client: &Client,
    method: &str,
    path: &str,
    expires: &str,
    service: &str,
    signed: &[(&str, String)],
    extra: &[(&str, &str)],
) -> String {
    let (amz_date, date) = amz_dates(SystemTime::now());
    let scope = format!("{date}/{}/{service}/aws4_request", client.region);
    let mut names: Vec<&str> = signed.iter().map(|(k, _)| *k).collect();
    names.sort_unstable();
    let mut query: Vec<(String, String)> = vec![
        ("X-Amz-Algorithm".to_owned(), "AWS4-HMAC-SHA256".to_owned()),
        (
            "X-Amz-Credential".to_owned(),
            format!("{}/{scope}", client.access_key),
        ),
        ("X-Amz-Date".to_owned(), amz_date.clone()),
        ("X-Amz-Expires".to_owned(), expires.to_owned()),
        ("X-Amz-SignedHeaders".to_owned(), names.join(";")),
    ];
    query.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let mut headers: Vec<(String, String)> = signed
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.trim().to_owned()))
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let canonical = format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{}\nUNSIGNED-PAYLOAD",
        canonical_query(&query),
        names.join(";")
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let key = signing_key(&client.secret, &date, &client.region, service);
    query.push((
        "X-Amz-Signature".to_owned(),
        hex(&hmac(&key, to_sign.as_bytes())),
    ));
    format!("{path}?{}", canonical_query(&query))
}

/// The SigV2 signature (base64 HMAC-SHA1) of `to_sign` with `secret`.
fn sigv2(secret: &str, to_sign: &str) -> String {
    let mut mac =
        <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(to_sign.as_bytes());
    base64(&mac.finalize().into_bytes())
}

/// The `Authorization` header of a SigV2 request `method` `path` dated `date` (an HTTP date), with no
/// Content-MD5, Content-Type or `x-amz-*` headers.
pub fn sigv2_header(client: &Client, method: &str, path: &str, date: &str) -> String {
    let to_sign = format!("{method}\n\n\n{date}\n{path}");
    format!(
        "AWS {}:{}",
        client.access_key,
        sigv2(&client.secret, &to_sign)
    )
}

/// A SigV2 presigned URL for GET `path` valid until Unix time `expires`.
pub fn sigv2_presign(client: &Client, path: &str, expires: u64) -> String {
    let signature = sigv2(&client.secret, &format!("GET\n\n\n{expires}\n{path}"));
    format!(
        "{path}?AWSAccessKeyId={}&Expires={expires}&Signature={}",
        uri_encode(&client.access_key),
        uri_encode(&signature)
    )
}

/// How long the attack tests wait for an answer that must come at once.
pub const PROMPT: Duration = Duration::from_secs(10);
