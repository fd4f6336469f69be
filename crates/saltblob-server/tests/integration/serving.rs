//! The server as a whole: metrics after requests, and graceful shutdown (requests in flight finish; a put
//! whose body did not end never commits).

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::{StoreKind, TestServer, stopped};

#[tokio::test]
async fn metrics_count_requests_bytes_and_classes() {
    let s = TestServer::with_bucket("bkt").await;
    let large = vec![1u8; 9 << 20];
    assert_eq!(s.client.put("/bkt/large", large.clone()).await.status, 200);
    assert_eq!(s.client.get("/bkt/large").await.body.len(), large.len());
    assert_eq!(s.client.get("/bkt/missing").await.status, 404);
    let text = s.metrics().await;
    for expected in [
        "saltblob_s3_requests_total{op=\"CreateBucket\",status=\"200\"} 1\n",
        "saltblob_s3_requests_total{op=\"PutObject\",status=\"200\"} 1\n",
        "saltblob_s3_requests_total{op=\"GetObject\",status=\"200\"} 1\n",
        "saltblob_s3_requests_total{op=\"GetObject\",status=\"404\"} 1\n",
        "saltblob_s3_request_duration_seconds_count{op=\"GetObject\",class=\"bulk\"} 1\n",
        "saltblob_s3_request_duration_seconds_count{op=\"GetObject\",class=\"interactive\"} 1\n",
        "saltblob_s3_requests_in_flight 0\n",
        "saltblob_scheduler_admitted_total{class=\"bulk\"}",
        "saltblob_gc_runs_total{result=\"ok\"} 0\n",
    ] {
        assert!(text.contains(expected), "{expected} missing from\n{text}");
    }
    let figure = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(figure("saltblob_s3_bytes_in_total") >= large.len() as u64);
    assert!(figure("saltblob_s3_bytes_out_total") >= large.len() as u64);
}

#[tokio::test]
async fn gc_runs_periodically_and_reports() {
    let s = TestServer::start_with(StoreKind::Memory, |c| {
        c.with_gc_every(Some(Duration::from_millis(100)))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let text = s.metrics().await;
    let runs: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("saltblob_gc_runs_total{result=\"ok\"} ")?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    assert!(runs >= 1, "{text}");
}

/// Starts a put of `len` bytes of `/bkt/key` whose body the test feeds through the returned sender.
fn streamed_put(
    s: &TestServer,
    key: &str,
    len: u64,
) -> (
    mpsc::Sender<Bytes>,
    tokio::task::JoinHandle<crate::client::Reply>,
) {
    let (tx, rx) = mpsc::channel(4);
    let client = s.client.clone();
    let path = format!("/bkt/{key}");
    let reply = tokio::spawn(async move { client.call("PUT", &path).stream(rx, len).send().await });
    (tx, reply)
}

#[tokio::test]
async fn a_shutdown_lets_a_put_in_flight_finish() {
    let mut s = TestServer::with_bucket("bkt").await;
    let half = Bytes::from(vec![5u8; 1 << 20]);
    let (tx, reply) = streamed_put(&s, "inflight", 2 << 20);
    tx.send(half.clone()).await.expect("send");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let server = s.shut_down();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !server.is_finished(),
        "the server waits for the request in flight"
    );
    assert!(
        tokio::net::TcpStream::connect(s.client.addr).await.is_err(),
        "no new connection is accepted"
    );
    tx.send(half).await.expect("send");
    drop(tx);
    let reply = reply.await.expect("reply");
    assert_eq!(reply.status, 200, "{}", reply.text());
    stopped(server).await;
    let stored = s.store.get("s3/o/bkt/inflight").await.expect("stored");
    assert_eq!(stored.len(), 2 << 20);
}

#[tokio::test]
async fn a_put_whose_body_does_not_end_never_commits() {
    let mut s = TestServer::start_with(StoreKind::Rocks, |c| {
        c.with_shutdown_timeout(Duration::from_millis(300))
    })
    .await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    // The client goes away in the middle of the body.
    let (tx, reply) = streamed_put(&s, "abandoned", 4 << 20);
    tx.send(Bytes::from(vec![1u8; 1 << 20]))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(200)).await;
    reply.abort();
    drop(tx);
    // A body still unfinished when the shutdown times out.
    let (tx2, _reply2) = streamed_put(&s, "cut-by-shutdown", 4 << 20);
    tx2.send(Bytes::from(vec![2u8; 1 << 20]))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stopped(s.shut_down()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    for key in ["s3/o/bkt/abandoned", "s3/o/bkt/cut-by-shutdown"] {
        assert!(
            matches!(
                s.store.head(key).await,
                Err(saltblob::Error::NotFound { .. })
            ),
            "{key} must not be stored"
        );
    }
    drop(tx2);
}

/// An empty PUT that expects `100 Continue` (botocore sends one for every empty object) is answered with
/// `Connection: close`, so that botocore does not reuse the connection it would misread next (see
/// `empty_body_expects_continue` in handler.rs); a PUT with a body keeps its connection.
#[tokio::test]
async fn an_empty_put_expecting_continue_closes_its_connection() {
    let s = TestServer::with_bucket("bkt").await;
    for (body, closes) in [("", true), ("x", false)] {
        let request = s
            .client
            .call("PUT", "/bkt/k")
            .header("expect", "100-continue")
            .body(body)
            .into_request();
        let r = crate::client::send_raw(s.client.addr, request).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let connection = r
            .headers
            .get("connection")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert_eq!(
            connection == "close",
            closes,
            "body {body:?}: {:?}",
            r.headers
        );
    }
}

/// A log writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log of this test binary, captured by a process-wide subscriber (set on first use). A thread-local one
/// (`set_default`) missed events now and then: tracing caches per call site whether anyone listens, and other
/// tests' threads hit the same call sites meanwhile. Tests pick their lines by a bucket name of their own.
fn captured_log() -> &'static Captured {
    static LOG: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        captured
    })
}

/// One access-log line per request, with the operation, key, status, bytes and access key id, never a
/// secret or a signature.
#[tokio::test]
async fn the_access_log_has_one_line_per_request_without_secrets() {
    let captured = captured_log();
    let s = TestServer::with_bucket("logbkt").await;
    assert_eq!(
        s.client.put("/logbkt/logged", &b"12345"[..]).await.status,
        200
    );
    let url = s.client.presign_get(
        "/logbkt/logged",
        std::time::SystemTime::now(),
        Duration::from_secs(60),
    );
    let request = http::Request::get(url)
        .header("host", s.client.addr.to_string())
        .body(http_body_util::BodyExt::boxed(http_body_util::Full::new(
            Bytes::new(),
        )))
        .expect("request");
    assert_eq!(
        crate::client::send_raw(s.client.addr, request).await.status,
        200
    );
    drop(s);
    let log = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("saltblob_server::access") && l.contains("bucket=\"logbkt\""))
        .collect();
    assert_eq!(lines.len(), 3, "{log}");
    let put = lines[1];
    for field in [
        "op=\"PutObject\"",
        "bucket=\"logbkt\"",
        "key=\"logged\"",
        "status=200",
        "bytes_in=5",
        "access_key=\"AKIDTEST\"",
        "class=\"interactive\"",
        "duration_ms=",
    ] {
        assert!(put.contains(field), "{field} missing from {put}");
    }
    assert!(
        lines[2].contains("op=\"GetObject\"") && lines[2].contains("bytes_out=5"),
        "{}",
        lines[2]
    );
    assert!(
        !log.contains(crate::SECRET),
        "the secret in the log:\n{log}"
    );
    for secret in ["Signature", "X-Amz-"] {
        assert!(
            lines.iter().all(|l| !l.contains(secret)),
            "{secret} in the access log:\n{log}"
        );
    }
}

/// The access log says how each body came: `payload` names its `x-amz-content-sha256` (`sha256` for a signed
/// hash; the AWS SDKs' signed `aws-chunked` bodies, which boto3 and awscli never send, by their name) and
/// `chunk_signatures` counts its signed chunks, the final one included. tests/s3/test_java_sdk.py reads both to
/// show that the AWS SDK for Java sent the bodies it is run for.
#[tokio::test]
async fn the_access_log_names_the_payload_and_counts_signed_chunks() {
    let captured = captured_log();
    let s = TestServer::with_bucket("payloadbkt").await;
    assert_eq!(
        s.client
            .put("/payloadbkt/hashed", &b"12345"[..])
            .await
            .status,
        200
    );
    let a = vec![b'a'; 70_000];
    let chunks: [&[u8]; 2] = [&a, b"tail"];
    let request = crate::limits::signed_chunked(&s, "/payloadbkt/chunked", &chunks, true, None);
    let r = crate::limits::put_reply(&s, request).await;
    assert_eq!(r.status, 200, "{}", r.text());
    drop(s);
    let log = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    let line = |key: &str| {
        log.lines()
            .find(|l| {
                l.contains("saltblob_server::access")
                    && l.contains("bucket=\"payloadbkt\"")
                    && l.contains(&format!("key=\"{key}\""))
            })
            .unwrap_or_else(|| panic!("no access log line for {key} in\n{log}"))
            .to_owned()
    };
    let hashed = line("hashed");
    assert!(
        hashed.contains("payload=\"sha256\"") && hashed.contains("chunk_signatures=0"),
        "{hashed}"
    );
    let chunked = line("chunked");
    assert!(
        chunked.contains("payload=\"STREAMING-AWS4-HMAC-SHA256-PAYLOAD\"")
            && chunked.contains("chunk_signatures=3"),
        "{chunked}"
    );
}

/// An HTTP/1.1 response given before the request body was read to its end says `Connection: close` (hyper
/// closes that connection): a PUT to a missing bucket whose body has not come (boto3 waits for `100 Continue`)
/// is answered at once. Without the header, urllib3 (under boto3) sent its next request on the closed
/// connection and got "Remote end closed connection without response". A body read to its end keeps the
/// connection.
#[tokio::test]
async fn a_response_before_the_body_is_read_closes_the_connection() {
    let s = TestServer::with_bucket("keepbkt").await;
    let (tx, rx) = mpsc::channel(1);
    let call = s
        .client
        .call("PUT", "/nobucket/k")
        .header("expect", "100-continue")
        .stream(rx, 5)
        .send();
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("answered without the body");
    drop(tx);
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchBucket"));
    assert_eq!(r.header("connection"), "close");

    let (tx, rx) = mpsc::channel(1);
    tx.send(Bytes::from_static(b"12345")).await.expect("send");
    drop(tx);
    let ok = s
        .client
        .call("PUT", "/keepbkt/k")
        .stream(rx, 5)
        .send()
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("connection"), "");
    let small = s.client.put("/keepbkt/small", &b"xyz"[..]).await;
    assert_eq!((small.status, small.header("connection")), (200, ""));
}

/// A request is labelled with the class the store ran it in, by the store's rule: a small object on a store whose
/// URL sets `priority=bulk` is put and read in `bulk` (the store's class wins over the layout's), and so is a
/// bucket operation; on a default store they are `interactive`. The access log and the latency histogram say so.
#[tokio::test]
async fn requests_are_labelled_with_the_class_the_store_ran() {
    let captured = captured_log();
    for (url, bucket, class, other) in [
        (
            "memory://?priority=bulk",
            "classbulk",
            "bulk",
            "interactive",
        ),
        ("memory://", "classdefault", "interactive", "bulk"),
    ] {
        let s = TestServer::start_with(StoreKind::Url(url), |c| c).await;
        assert_eq!(
            s.client
                .call("PUT", &format!("/{bucket}"))
                .send()
                .await
                .status,
            200
        );
        let path = format!("/{bucket}/small");
        assert_eq!(s.client.put(&path, &b"12345"[..]).await.status, 200);
        assert_eq!(s.client.get(&path).await.body, &b"12345"[..]);
        let text = s.metrics().await;
        // CreateBucket reads or writes no blob: it runs, and is labelled, in the store's default class.
        for op in ["CreateBucket", "PutObject", "GetObject"] {
            let count = |class: &str| {
                format!(
                    "saltblob_s3_request_duration_seconds_count{{op=\"{op}\",class=\"{class}\"}} 1\n"
                )
            };
            assert!(
                text.contains(&count(class)),
                "{url}: {} missing from\n{text}",
                count(class)
            );
            assert!(
                !text.contains(&count(other)),
                "{url}: {} in\n{text}",
                count(other)
            );
        }
        drop(s);
        let log = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
        let get = log
            .lines()
            .find(|l| {
                l.contains("saltblob_server::access")
                    && l.contains(&format!("bucket=\"{bucket}\""))
                    && l.contains("op=\"GetObject\"")
            })
            .unwrap_or_else(|| panic!("no GetObject line for {bucket} in\n{log}"));
        assert!(get.contains(&format!("class=\"{class}\"")), "{url}: {get}");
    }
}
