//! On the three-node cluster (`TEST_CQL_CLUSTER=127.0.0.1,127.0.0.2,127.0.0.3`, started with
//! `scripts/cassandra.sh start3`) at rf=3 and QUORUM: 64 MiB blobs are written and read with one node killed,
//! and their chunks are spread over the salts; a pass over every manifest and fsck read every key with that node
//! down; then a checked mixed load of concurrent clients keeps running
//! while a node is killed with SIGKILL and restarted: no operation fails (the client's retries absorb the
//! loss) and the history checker finds nothing lost, torn or stale.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use saltblob_check::{MemorySink, SizeMix, WorkloadConfig, check, final_reads, key_set, run};
use saltblob_core::conformance::data;
use saltblob_core::{BlobStore, LayoutPolicy, PutOptions, StoreConfig};
use saltblob_cql::{CqlConfig, CqlStore};

fn cassandra_script(args: &[&str]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cassandra.sh");
    let status = Command::new("bash")
        .arg(&script)
        .args(args)
        .status()
        .expect("run cassandra.sh");
    assert!(status.success(), "cassandra.sh {args:?} failed: {status}");
}

/// One test, two phases in order: both kill node 2, so they must not run at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs three nodes: set TEST_CQL_CLUSTER=127.0.0.1,127.0.0.2,127.0.0.3 and pass --include-ignored"]
async fn quorum_survives_a_killed_node() {
    let hosts = std::env::var("TEST_CQL_CLUSTER")
        .ok()
        .filter(|h| !h.is_empty())
        .expect("this test needs three nodes: set TEST_CQL_CLUSTER=127.0.0.1,127.0.0.2,127.0.0.3 (scripts/cassandra.sh start3)");
    let ks = format!("saltblob_cluster_{:08x}", rand::random::<u32>());
    let url = format!("cql://{hosts}/{ks}?rf=3&consistency=quorum");
    let backend = CqlStore::connect(CqlConfig::from_url(&url).expect("url"))
        .await
        .expect("connect");
    the_ring_is_what_the_nodes_say(&backend, &hosts).await;
    let store = BlobStore::new(Arc::new(backend), StoreConfig::default()).expect("store");
    big_blobs_with_a_node_down(&store).await;
    checked_load_while_a_node_is_killed_and_restarted(&store).await;
}

/// The ring `saltblob plan` reads, with all three nodes up: at rf 3 every range is on all three, so losing any
/// two nodes (one rack here) exposes every blob; at rf 1 each node holds the ranges its tokens end.
async fn the_ring_is_what_the_nodes_say(rf3: &CqlStore, hosts: &str) {
    let tokens = crate::ring::node_tokens(rf3).await;
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    let ring = rf3.ring().expect("ring");
    crate::ring::check_ring(&ring, &tokens, 3);
    assert_eq!((ring.racks(), ring.pairs().len()), (1, 3));
    let one = [(1, saltblob_core::Tally { count: 1, bytes: 1 })];
    let (_, _, risk) = ring.worst_pair(&one).expect("a worst pair");
    // Every range is on both nodes of any pair: the shares add up to the whole ring (to rounding).
    assert!((1.0 - risk.keys_at_risk).abs() < 1e-9, "{risk:?}");
    assert!((1.0 - risk.keys_quorum_lost).abs() < 1e-9, "{risk:?}");

    let ks = format!("saltblob_ring_{:08x}", rand::random::<u32>());
    let rf1 =
        CqlStore::connect(CqlConfig::from_url(&format!("cql://{hosts}/{ks}?rf=1")).expect("url"))
            .await
            .expect("connect at rf 1");
    crate::ring::check_ring(&rf1.ring().expect("ring"), &tokens, 1);
}

async fn big_blobs_with_a_node_down(store: &BlobStore) {
    let before = data(64 << 20, 1);
    store
        .put("before", before.clone(), &PutOptions::new())
        .await
        .expect("put with all nodes up");
    let d = store.describe("before").await.expect("describe");
    // 64 chunks of the backend's large chunk size (1 MiB), one per salt.
    assert_eq!((d.layout_kind, d.bytes_per_salt.len()), ("salted", 64));
    assert!(
        d.bytes_per_salt.iter().all(|b| *b > 0),
        "every salt holds chunks"
    );

    let small: Vec<String> = (0..300).map(|i| format!("pass/{i:03}")).collect();
    for k in &small {
        store
            .put(k.as_str(), &b"small"[..], &PutOptions::new())
            .await
            .expect("small put with all nodes up");
    }

    cassandra_script(&["kill", "2"]);
    cassandra_script(&["wait-down", "2"]);
    let outcome = async {
        passes_with_a_node_down(store, &small).await?;
        let t = Instant::now();
        let during = data(64 << 20, 2);
        store
            .put("during", during.clone(), &PutOptions::new())
            .await
            .map_err(|e| format!("put with node 2 down: {e}"))?;
        let put = t.elapsed();
        let t = Instant::now();
        let got = store
            .get("during")
            .await
            .map_err(|e| format!("get with node 2 down: {e}"))?;
        let get = t.elapsed();
        if got != during {
            return Err("64 MiB read back with node 2 down differs".to_owned());
        }
        let old = store
            .get("before")
            .await
            .map_err(|e| format!("get of the earlier blob with node 2 down: {e}"))?;
        if old != before {
            return Err("earlier 64 MiB blob read back with node 2 down differs".to_owned());
        }
        println!("node 2 down: 64 MiB put {put:?}, get {get:?} at QUORUM, rf=3");
        Ok::<(), String>(())
    }
    .await;
    cassandra_script(&["restart", "2"]);
    outcome.expect("QUORUM operations with one node down");
    assert_eq!(
        store.get("during").await.expect("get after restart").len(),
        64 << 20
    );
}

/// With node 2 down, a pass over every manifest reads every range (from its other replicas): every key once, no
/// range unread; fsck, the listing index check included, finds nothing wrong.
async fn passes_with_a_node_down(store: &BlobStore, small: &[String]) -> Result<(), String> {
    use futures::StreamExt;
    use saltblob_core::{FsckOptions, PassEvent, PassOptions};
    let t = Instant::now();
    let plan = store
        .plan_pass(b"")
        .await
        .map_err(|e| format!("pass plan with node 2 down: {e}"))?;
    let mut events = store.pass(&plan, &PassOptions::new());
    let mut keys = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            PassEvent::Page(page) => keys.extend(page.entries.into_iter().map(|e| e.key)),
            PassEvent::Unread { range, error } => {
                return Err(format!("range {range} unread with node 2 down: {error}"));
            }
        }
    }
    drop(events);
    keys.sort();
    let before = keys.len();
    keys.dedup();
    let mut want: Vec<bytes::Bytes> = small
        .iter()
        .map(|k| bytes::Bytes::from(k.clone()))
        .collect();
    want.push(bytes::Bytes::from("before"));
    want.sort();
    if keys != want || before != keys.len() {
        return Err(format!(
            "pass with node 2 down read {before} key(s), {} distinct, want the {} written",
            keys.len(),
            want.len()
        ));
    }
    let pass = t.elapsed();
    let t = Instant::now();
    let report = store
        .fsck(&FsckOptions::new())
        .await
        .map_err(|e| format!("fsck with node 2 down: {e}"))?;
    let index = report.index.clone().ok_or("fsck did not check the index")?;
    if !report.damaged.is_empty() || !index.missing.is_empty() || report.blobs != 301 {
        return Err(format!("fsck with node 2 down: {report:?}"));
    }
    println!(
        "node 2 down: pass over {} ranges read {} keys in {pass:?}; fsck of {} blobs (index {} entries) in {:?}",
        plan.range_count(),
        keys.len(),
        report.blobs,
        index.entries,
        t.elapsed()
    );
    Ok(())
}

async fn checked_load_while_a_node_is_killed_and_restarted(store: &BlobStore) {
    let sink = MemorySink::new();
    let keys = key_set("node-loss/", 4);
    let mut load = WorkloadConfig::new(keys.clone());
    load.clients = 4;
    // Inline, one-partition and salted values (the fan-out threshold is 8 MiB).
    load.sizes = SizeMix::boundaries(&LayoutPolicy::default(), 10 << 20);
    load.duration = None;
    load.seed = rand::random();
    let stop = load.stop.clone();
    let running = tokio::spawn({
        let (store, sink) = (store.clone(), Arc::new(sink.clone()));
        async move { run(store, &load, sink).await }
    });
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed_at = t.elapsed();
    cassandra_script_async(&["kill", "2"]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let restart_at = t.elapsed();
    cassandra_script_async(&["restart", "2"]).await;
    let up_at = t.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.stop();
    let stats = running.await.expect("workload task");
    let reads = final_reads(store.clone(), &keys, Arc::new(sink.clone())).await;
    let report = check(&sink.history());
    println!(
        "node loss under load: node 2 SIGKILLed at {killed_at:.1?}, restarted at {restart_at:.1?}, up at {up_at:.1?}; \
         load: {stats}; final reads: {reads}; checker: {}",
        report.summary()
    );
    assert!(report.is_clean(), "{:#?}", report.violations);
    let history = sink.history();
    let errors: Vec<&str> = history
        .ops
        .iter()
        .filter_map(|op| match &op.outcome {
            Some(saltblob_check::Outcome::Failed { error, .. }) => Some(error.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        (stats.failed, reads.failed, &errors[..errors.len().min(20)]),
        (0, 0, &[][..]),
        "no operation fails after the client's retries"
    );
    assert!(stats.puts > 0 && stats.gets_with_value > 0, "{stats}");
}

async fn cassandra_script_async(args: &'static [&'static str]) {
    tokio::task::spawn_blocking(move || cassandra_script(args))
        .await
        .expect("cassandra.sh task");
}
