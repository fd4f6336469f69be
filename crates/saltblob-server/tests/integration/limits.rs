//! The server as hostile or faulty clients meet it: connections that send nothing or part of a request or of an
//! HTTP/2 preface, idle HTTP/1.1 and HTTP/2 connections, a client that stops reading a GET, a body that stops
//! arriving, more connections and requests than the caps allow, the metrics port; and signed and unsigned
//! `aws-chunked` uploads with a tampered chunk signature, a missing final chunk, one huge declared chunk.
//! Timeouts are set short (hundreds of ms) so that each test takes about a second.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::client::{Reply, base64, crc32, send_raw};
use crate::forge::{self, Body, Forged};
use crate::{StoreKind, TestServer};

/// The value of the metric line that starts with `name` (labels included), 0 when absent.
fn figure(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A server on the memory store whose timeouts are `first`, `idle` and `io`.
async fn server_with(first: Duration, idle: Duration, io: Duration) -> TestServer {
    let s = TestServer::start_with(StoreKind::Memory, |c| c.with_timeouts(first, idle, io)).await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    s
}

/// Reads from `stream` until the server closes it (EOF or reset), at most `within`; returns how long it took,
/// or `None` if the connection was still open then.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    let until = tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    until.await.ok().map(|()| start.elapsed())
}

/// A connection that sends nothing, one byte of an HTTP/2 preface, half of one, or part of an HTTP/1.1 request
/// is closed at the first-request deadline (hyper-util's version detection waits forever otherwise: F4).
#[tokio::test]
async fn silent_and_partial_connections_are_closed_at_the_first_request_deadline() {
    let s = server_with(
        Duration::from_millis(300),
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .await;
    let sends: [&[u8]; 4] = [
        b"",
        b"P",
        b"PRI * HTTP/2.0\r\n",
        b"GET /bkt HTTP/1.1\r\nHost: x\r\n",
    ];
    let mut streams = Vec::new();
    for bytes in sends {
        let mut stream = TcpStream::connect(s.client.addr).await.expect("connect");
        stream.write_all(bytes).await.expect("write");
        streams.push(stream);
    }
    for (bytes, stream) in sends.iter().zip(&mut streams) {
        let took = closed_within(stream, Duration::from_secs(10)).await;
        println!(
            "sent {:?}: closed after {took:?}",
            String::from_utf8_lossy(bytes)
        );
        assert!(
            took.is_some(),
            "sent {bytes:?}: the connection is still open"
        );
    }
    let text = s.metrics().await;
    assert!(
        figure(
            &text,
            "saltblob_s3_connections_closed_total{reason=\"first_request\"}"
        ) >= 3,
        "{text}"
    );
}

/// HTTP/1.1 and HTTP/2 connections with no request in flight are closed after the idle timeout; HTTP/2 has
/// no such timer of its own (F4).
#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    // A first-request deadline far longer than the idle timeout: the idle one must not wait for it.
    let s = server_with(
        Duration::from_secs(60),
        Duration::from_millis(400),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(s.client.put("/bkt/k", &b"v"[..]).await.status, 200);

    // HTTP/1.1: one request, then nothing.
    let mut stream = TcpStream::connect(s.client.addr).await.expect("connect");
    let request = format!("GET /bkt/k HTTP/1.1\r\nHost: {}\r\n\r\n", s.client.addr);
    stream.write_all(request.as_bytes()).await.expect("write");
    let took = closed_within(&mut stream, Duration::from_secs(10)).await;
    println!("HTTP/1.1 idle connection closed after {took:?}");
    assert!(took.is_some(), "the idle HTTP/1.1 connection is still open");

    // HTTP/2 (prior knowledge): one request, then the connection idles, answering the server's pings.
    let stream = TcpStream::connect(s.client.addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let request = s.client.call("GET", "/bkt/k").into_request();
    let (mut parts, body) = request.into_parts();
    parts.version = http::Version::HTTP_2;
    parts.uri = format!("http://{}/bkt/k", s.client.addr)
        .parse()
        .expect("uri");
    parts.headers.remove("host");
    let response = sender
        .send_request(http::Request::from_parts(parts, body))
        .await
        .expect("h2 response");
    assert_eq!(response.status(), 200);
    drop(response);
    let start = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
    println!("HTTP/2 idle connection closed after {:?}", start.elapsed());
    assert!(ended.is_ok(), "the idle HTTP/2 connection is still open");
    let text = s.metrics().await;
    assert!(
        figure(
            &text,
            "saltblob_s3_connections_closed_total{reason=\"idle\"}"
        ) >= 2,
        "{text}"
    );
}

/// A client that stops reading a GET is dropped after the IO timeout (hyper would wait for the socket to drain
/// forever, holding the read's memory: F10), and the download, cut mid-body, is counted and logged as aborted
/// (499), not as a 200 (F21).
#[tokio::test]
async fn a_client_that_stops_reading_a_get_is_dropped_and_counted_aborted() {
    let s = server_with(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_millis(500),
    )
    .await;
    let size = 24 << 20;
    assert_eq!(s.client.put("/bkt/big", vec![7u8; size]).await.status, 200);
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(16 << 10).expect("small buffer");
    let stream = socket.connect(s.client.addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let response = sender
        .send_request(s.client.call("GET", "/bkt/big").into_request())
        .await
        .expect("response head");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut read = 0;
    while read < 64 << 10 {
        let frame = http_body_util::BodyExt::frame(&mut body)
            .await
            .expect("a frame")
            .expect("data");
        read += frame.data_ref().map_or(0, Bytes::len);
    }
    // The client now reads nothing more, and keeps the connection open.
    let start = Instant::now();
    let mut dropped = false;
    while start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let text = s.metrics().await;
        if figure(
            &text,
            "saltblob_s3_connections_closed_total{reason=\"write\"}",
        ) >= 1
            && figure(
                &text,
                "saltblob_s3_requests_total{op=\"GetObject\",status=\"499\"}",
            ) == 1
        {
            dropped = true;
            break;
        }
    }
    println!(
        "a stalled reader (read {read} bytes) was dropped after {:?}",
        start.elapsed()
    );
    assert!(
        dropped,
        "the stalled reader is still served:\n{}",
        s.metrics().await
    );
    drop(body);
}

/// A request body that stops arriving fails with `400 RequestTimeout` after the IO timeout, and stores nothing.
#[tokio::test]
async fn a_body_that_stops_arriving_times_out_and_stores_nothing() {
    let s = server_with(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_millis(300),
    )
    .await;
    let (tx, rx) = mpsc::channel(2);
    let client = s.client.clone();
    let put = tokio::spawn(async move {
        client
            .call("PUT", "/bkt/stalled")
            .stream(rx, 2 << 20)
            .send()
            .await
    });
    tx.send(Bytes::from(vec![1u8; 1 << 20]))
        .await
        .expect("send");
    let r = tokio::time::timeout(forge::PROMPT, put)
        .await
        .expect("answered")
        .expect("reply");
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "RequestTimeout"),
        "{}",
        r.text()
    );
    drop(tx);
    assert_eq!(
        s.client.call("HEAD", "/bkt/stalled").send().await.status,
        404
    );
}

/// Connections beyond `max_connections` are closed at once (not served); one becomes free when another ends.
#[tokio::test]
async fn connections_beyond_the_cap_are_not_served() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c.with_caps(3, 100)).await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(s.client.addr).await.expect("connect"));
    }
    // Give the server the time to take them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = TcpStream::connect(s.client.addr)
        .await
        .expect("the kernel accepts");
    let took = closed_within(&mut extra, Duration::from_secs(5)).await;
    println!("a connection beyond the cap was closed after {took:?}");
    assert!(took.is_some(), "a 4th connection is served");
    assert!(figure(&s.metrics().await, "saltblob_s3_connections_refused_total") >= 1);
    drop(held.pop());
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let request = s
            .client
            .call("GET", "/bkt")
            .query("list-type", "2")
            .into_request();
        let attempt = tokio::time::timeout(Duration::from_secs(5), async {
            let stream = TcpStream::connect(s.client.addr).await.ok()?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .ok()?;
            tokio::spawn(conn);
            sender.send_request(request).await.ok()
        });
        if let Ok(Some(response)) = attempt.await
            && response.status() == 200
        {
            served = true;
            break;
        }
    }
    assert!(served, "a freed slot is not reused");
}

/// Requests beyond `max_requests` (CORS preflights too) are answered `503 SlowDown` at once; the ones in flight
/// are unharmed.
#[tokio::test]
async fn requests_beyond_the_cap_are_answered_slow_down() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c.with_caps(100, 2)).await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    let mut puts = Vec::new();
    for key in ["a", "b"] {
        let (tx, rx) = mpsc::channel(2);
        let client = s.client.clone();
        let path = format!("/bkt/{key}");
        puts.push((
            tx,
            tokio::spawn(async move { client.call("PUT", &path).stream(rx, 4).send().await }),
        ));
    }
    for (tx, _) in &puts {
        tx.send(Bytes::from_static(b"ab")).await.expect("send");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = tokio::time::timeout(forge::PROMPT, s.client.get("/bkt/a"))
        .await
        .expect("at once");
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "SlowDown"),
        "{}",
        r.text()
    );
    assert_eq!(r.xml("RequestId").len(), 1);
    // A browser's preflight (unsigned, answered before the S3 service) is held to the cap too.
    let r = tokio::time::timeout(
        forge::PROMPT,
        s.client
            .call("OPTIONS", "/bkt/a")
            .anonymous()
            .header("origin", "https://app.example")
            .header("access-control-request-method", "GET")
            .send(),
    )
    .await
    .expect("at once");
    assert_eq!(
        (r.status, r.code().as_str()),
        (503, "SlowDown"),
        "{}",
        r.text()
    );
    for (tx, put) in puts {
        tx.send(Bytes::from_static(b"cd")).await.expect("send");
        drop(tx);
        assert_eq!(put.await.expect("put").status, 200);
    }
    assert_eq!(s.client.get("/bkt/a").await.body.as_ref(), b"abcd");
    assert_eq!(
        figure(&s.metrics().await, "saltblob_s3_requests_shed_total"),
        2
    );
}

/// The metrics listener closes a client that does not finish its request head in time, and serves at most 16
/// connections at once (F4).
#[tokio::test]
async fn the_metrics_listener_has_a_header_timeout_and_a_connection_cap() {
    let s = server_with(
        Duration::from_millis(300),
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .await;
    let mut partial = TcpStream::connect(s.metrics_addr).await.expect("connect");
    partial
        .write_all(b"GET /metrics HTTP/1.1\r\nHo")
        .await
        .expect("write");
    let took = closed_within(&mut partial, Duration::from_secs(10)).await;
    println!("a partial metrics request was closed after {took:?}");
    assert!(took.is_some(), "the partial metrics request is still open");

    let s = server_with(
        Duration::from_secs(20),
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut stream = TcpStream::connect(s.metrics_addr).await.expect("connect");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .expect("write");
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = TcpStream::connect(s.metrics_addr)
        .await
        .expect("the kernel accepts");
    assert!(
        closed_within(&mut extra, Duration::from_secs(5))
            .await
            .is_some(),
        "a 17th metrics connection is served"
    );
}

/// The framed body of a signed `aws-chunked` upload of `chunks` (each signed in turn), ending with the final
/// chunk unless `final_chunk` is false; `tamper` flips a byte of that chunk's signature.
pub(crate) fn signed_chunked(
    s: &TestServer,
    path: &str,
    chunks: &[&[u8]],
    final_chunk: bool,
    tamper: Option<usize>,
) -> http::Request<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>> {
    let mut forged = Forged::new(&s.client, "PUT", path);
    forged.payload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_owned();
    let decoded: usize = chunks.iter().map(|c| c.len()).sum();
    forged.headers = vec![
        ("content-encoding".to_owned(), "aws-chunked".to_owned()),
        (
            "x-amz-decoded-content-length".to_owned(),
            decoded.to_string(),
        ),
    ];
    let signed = forged.sign();
    let mut signer = signed.chunks;
    let mut body = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut framed = signer.frame(chunk);
        if tamper == Some(i) {
            let at = framed.iter().position(|b| *b == b'=').expect("signature") + 1;
            framed[at] = if framed[at] == b'0' { b'1' } else { b'0' };
        }
        body.extend_from_slice(&framed);
    }
    if final_chunk {
        body.extend_from_slice(&signer.frame(b""));
    }
    let mut headers = signed.headers;
    headers.push(("content-length".to_owned(), body.len().to_string()));
    forged.request(&headers, Body::Bytes(Bytes::from(body)))
}

/// Sends `request` and waits (at most [`forge::PROMPT`]) for its answer.
pub(crate) async fn put_reply(
    s: &TestServer,
    request: http::Request<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>,
) -> Reply {
    tokio::time::timeout(forge::PROMPT, send_raw(s.client.addr, request))
        .await
        .expect("answered")
}

/// Signed `aws-chunked` uploads (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`): a valid one is stored; one with a
/// tampered chunk signature, one without its final chunk (which s3s alone would take as complete) and one
/// declaring a 96 MiB chunk (refused at its header, before s3s buffers any of it: F8) store nothing.
#[tokio::test]
async fn signed_chunked_uploads_are_verified_and_bounded() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c).await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    let a = vec![b'a'; 70_000];
    let b = vec![b'b'; 70_000];
    let chunks: [&[u8]; 3] = [&a, &b, b"tail"];
    let r = put_reply(&s, signed_chunked(&s, "/bkt/valid", &chunks, true, None)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let stored = s.client.get("/bkt/valid").await;
    assert_eq!(stored.body.len(), 140_004);

    let r = put_reply(
        &s,
        signed_chunked(&s, "/bkt/tampered", &chunks, true, Some(1)),
    )
    .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "SignatureDoesNotMatch"),
        "{}",
        r.text()
    );
    let r = put_reply(
        &s,
        signed_chunked(&s, "/bkt/unfinished", &chunks, false, None),
    )
    .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "IncompleteBody"),
        "{}",
        r.text()
    );

    // One declared 96 MiB chunk: its header, then nothing; the answer comes at once.
    let mut forged = Forged::new(&s.client, "PUT", "/bkt/huge");
    forged.payload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_owned();
    forged.headers = vec![
        ("content-encoding".to_owned(), "aws-chunked".to_owned()),
        (
            "x-amz-decoded-content-length".to_owned(),
            (96 << 20).to_string(),
        ),
    ];
    let signed = forged.sign();
    let mut headers = signed.headers;
    headers.push(("content-length".to_owned(), ((96 << 20) + 200).to_string()));
    let (tx, rx) = mpsc::channel(1);
    tx.send(Bytes::from(format!(
        "{:x};chunk-signature={}\r\n",
        96 << 20,
        "0".repeat(64)
    )))
    .await
    .expect("send");
    let r = put_reply(&s, forged.request(&headers, Body::Stream(rx))).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "InvalidRequest"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("16 MiB"), "{}", r.text());
    drop(tx);
    for key in ["tampered", "unfinished", "huge"] {
        assert_eq!(
            s.client
                .call("HEAD", &format!("/bkt/{key}"))
                .send()
                .await
                .status,
            404,
            "{key}"
        );
    }
}

/// An unsigned `aws-chunked` upload (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, as botocore sends) with one large
/// declared chunk streams into the store as it arrives, rather than being held whole by s3s (F8); its trailer
/// checksum is still verified, and a body without its final chunk stores nothing.
#[tokio::test]
async fn unsigned_chunked_uploads_stream_one_large_chunk() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c).await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    let data: Vec<u8> = (0..24u32 << 20).map(|i| (i % 251) as u8).collect();
    let trailer = format!(
        "x-amz-checksum-crc32:{}\r\n\r\n",
        base64(&crc32(&data).to_be_bytes())
    );
    let head = format!("{:x}\r\n", data.len());
    let framed_len = head.len() + data.len() + 2 + 3 + trailer.len();
    let headers_for = |path: &str| {
        let mut forged = Forged::new(&s.client, "PUT", path);
        forged.payload = "STREAMING-UNSIGNED-PAYLOAD-TRAILER".to_owned();
        forged.headers = vec![
            ("content-encoding".to_owned(), "aws-chunked".to_owned()),
            (
                "x-amz-decoded-content-length".to_owned(),
                data.len().to_string(),
            ),
            (
                "x-amz-trailer".to_owned(),
                "x-amz-checksum-crc32".to_owned(),
            ),
        ];
        let mut headers = forged.sign().headers;
        headers.push(("content-length".to_owned(), framed_len.to_string()));
        (forged, headers)
    };
    let stored_bytes = || -> u64 {
        s.store
            .scheduler_stats()
            .classes
            .iter()
            .map(|c| c.bytes)
            .sum()
    };

    let (forged, headers) = headers_for("/bkt/streamed");
    let (tx, rx) = mpsc::channel(4);
    let request = forged.request(&headers, Body::Stream(rx));
    let addr = s.client.addr;
    let put = tokio::spawn(async move { send_raw(addr, request).await });
    let before = stored_bytes();
    tx.send(Bytes::from(head.clone())).await.expect("send");
    for piece in data[..20 << 20].chunks(1 << 20) {
        tx.send(Bytes::copy_from_slice(piece)).await.expect("send");
    }
    // 20 of the chunk's 24 MiB are sent: the store has them before the chunk ends.
    let mut reached = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        reached = stored_bytes() - before;
        if reached >= 8 << 20 {
            break;
        }
    }
    println!(
        "with 20 MiB of one 24 MiB chunk sent, the store had {} MiB",
        reached >> 20
    );
    assert!(
        reached >= 8 << 20,
        "the chunk is held back: {reached} bytes reached the store"
    );
    tx.send(Bytes::copy_from_slice(&data[20 << 20..]))
        .await
        .expect("send");
    tx.send(Bytes::from(format!("\r\n0\r\n{trailer}")))
        .await
        .expect("send");
    drop(tx);
    let r = tokio::time::timeout(forge::PROMPT, put)
        .await
        .expect("answered")
        .expect("reply");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        s.client.get("/bkt/streamed").await.body == data,
        "stored intact"
    );

    // The same body cut before its final chunk.
    let (forged, headers) = headers_for("/bkt/unfinished");
    let mut body = head.into_bytes();
    body.extend_from_slice(&data);
    body.extend_from_slice(b"\r\n");
    let mut headers = headers;
    headers.retain(|(k, _)| k != "content-length");
    headers.push(("content-length".to_owned(), body.len().to_string()));
    let r = put_reply(&s, forged.request(&headers, Body::Bytes(Bytes::from(body)))).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "IncompleteBody"),
        "{}",
        r.text()
    );
    assert_eq!(
        s.client.call("HEAD", "/bkt/unfinished").send().await.status,
        404
    );
}
