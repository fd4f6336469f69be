//! `saltblob bench` through `saltblob serve`: the isolation phases on an S3 endpoint, driven by object_store's
//! S3 client against the server run in-process on port 0 over a memory store.

use saltblob::{BlobStore, StoreConfig};
use saltblob_server::{AccessKey, ServerConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::tiny::{PHASES, bench_args, check_isolation};

const BUCKET: &str = "bench";
const AKID: &str = "AKIDBENCH";
const SECRET: &str = "bench-secret";

/// A server on 127.0.0.1:0 over a fresh memory store with bucket [`BUCKET`]; stopped when dropped.
struct Server {
    store: BlobStore,
    url: String,
    metrics: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start() -> Self {
        // Blobs of 1 MiB or more fan out, so that the bench's 2 MiB ones are bulk (its 16 KiB ones interactive).
        let policy = StoreConfig::default().policy.with_fanout_threshold(1 << 20);
        let store = saltblob::open("memory://", StoreConfig::default().with_policy(policy))
            .await
            .expect("memory store");
        assert!(
            saltblob_server::create_bucket(&store, BUCKET)
                .await
                .expect("bucket created")
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind metrics");
        let (addr, metrics_addr) = (
            listener.local_addr().expect("addr"),
            metrics.local_addr().expect("metrics addr"),
        );
        let config =
            ServerConfig::new(vec![AccessKey::new(AKID, SECRET)]).with_metrics_listener(metrics);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(saltblob_server::run(
            listener,
            config,
            store.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            store,
            url: format!(
                "s3+http://{addr}/{BUCKET}?aws_access_key_id={AKID}&aws_secret_access_key={SECRET}&aws_unsigned_payload=true"
            ),
            metrics: metrics_addr,
            stop: Some(stop),
            task,
        }
    }

    /// The server's Prometheus text.
    async fn metrics(&self) -> String {
        let mut conn = TcpStream::connect(self.metrics).await.expect("metrics");
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n")
            .await
            .expect("request");
        let mut text = String::new();
        conn.read_to_string(&mut text).await.expect("response");
        text
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .expect("server task")
            .expect("server stopped cleanly");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_isolation_phases_run_through_saltblob_serve_with_a_real_s3_client() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("s3.json");
    let plot_path = dir.path().join("s3.svg");
    let (j, p) = (
        json_path.to_string_lossy().into_owned(),
        plot_path.to_string_lossy().into_owned(),
    );
    let args = bench_args(&["--mixed", "0.5", "--json", &j, "--plot", &p]);
    let report = saltblob_bench::bench(&server.url, &args, true)
        .await
        .expect("bench runs through S3");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("json written"))
            .expect("valid json");
    // No credentials anywhere in what the bench shows, the client's other settings as given.
    let shown = json["store"].as_str().expect("store");
    assert!(!shown.contains(SECRET) && !shown.contains(AKID), "{shown}");
    assert!(
        shown.starts_with("s3+http://127.0.0.1:")
            && shown.ends_with(
                "/bench?aws_access_key_id=REDACTED&aws_secret_access_key=REDACTED&aws_unsigned_payload=true"
            ),
        "{shown}"
    );
    assert_eq!(json["config"]["backend"], saltblob_bench::bench::S3_BACKEND);
    let svg = std::fs::read_to_string(&plot_path).expect("plot written");
    assert!(
        svg.contains("paced: small P99"),
        "the plot has no paced panel"
    );
    // The phases of --mixed, as on a store.
    let names: Vec<&str> = report.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, PHASES[6..]);
    for p in &report.phases {
        assert_eq!(p.errors, 0, "{}: {:?}", p.name, p.error_messages);
        assert!(p.ops > 0, "{} ran nothing", p.name);
    }
    check_isolation(&json, 1);
    // Through S3 the cluster's allowance applies (+20 / +30 ms), not the embedded one.
    let goals = &json["isolation"]["paced"][0]["goals"];
    assert_eq!(goals["small_p99_excess_ms_max"], 20.0, "{goals}");
    // Every object the bench wrote is gone, in the bucket and in the store under it.
    assert!(
        json["cleanup"]["deleted_keys"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{}",
        json["cleanup"]
    );
    assert_eq!(json["cleanup"]["problems"], serde_json::json!([]));
    let left = server
        .store
        .list(saltblob_server::OBJECT_PREFIX)
        .await
        .expect("list");
    assert!(left.is_empty(), "objects left behind: {left:?}");
    // The server ran the small objects' requests as interactive and the large ones' as bulk.
    let metrics = server.metrics().await;
    for (op, class) in [
        ("PutObject", "interactive"),
        ("GetObject", "interactive"),
        ("PutObject", "bulk"),
        ("GetObject", "bulk"),
    ] {
        let series =
            format!("saltblob_s3_request_duration_seconds_count{{op=\"{op}\",class=\"{class}\"}}");
        let count = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|n| n.trim().parse::<u64>().ok());
        assert!(count.is_some_and(|n| n > 0), "{series} missing:\n{metrics}");
    }
    server.stop().await;
}

#[tokio::test]
async fn an_s3_endpoint_is_refused_what_only_a_store_can_do_before_any_request() {
    // Nothing listens here: each case must fail before a request is sent.
    let url = "s3+http://127.0.0.1:9/bench?aws_access_key_id=A&aws_secret_access_key=S";
    for (extra, says) in [
        (&[][..], "--mixed"),
        (&["--mixed", "1", "--unchunked"][..], "--unchunked"),
        (&["--mixed", "1", "--encrypt"], "--encrypt"),
        (&["--mixed", "1", "--chunk-size", "1MiB"], "--chunk-size"),
        (&["--mixed", "1", "--stream-mb", "8"], "--stream-mb"),
    ] {
        let err = saltblob_bench::bench(url, &bench_args(extra), true)
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(says), "{extra:?}: {err}");
    }
    for (bad, says) in [
        ("s3+http://127.0.0.1:9/", "names no bucket"),
        (
            "s3+http://127.0.0.1:9/a/b?aws_access_key_id=A",
            "names no bucket",
        ),
        ("s3+http://127.0.0.1:9/bench?no_such_key=1", "no_such_key"),
    ] {
        let err = saltblob_bench::bench(bad, &bench_args(&["--mixed", "1"]), true)
            .await
            .expect_err("refused");
        assert!(err.to_string().contains(says), "{bad}: {err}");
    }
}
