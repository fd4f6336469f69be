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
/// `empty_body_expects_continue` in serve.rs); a PUT with a body keeps its connection.
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
