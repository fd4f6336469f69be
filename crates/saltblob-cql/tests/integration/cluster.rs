//! On the three-node cluster (`TEST_CQL_CLUSTER=127.0.0.1,127.0.0.2,127.0.0.3`, started with
//! `scripts/cassandra.sh start3`) at rf=3 and QUORUM: 64 MiB blobs are written and read with one node killed,
//! and their chunks are spread over the salts.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use saltblob_core::conformance::data;
use saltblob_core::{BlobStore, PutOptions, StoreConfig};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_reads_and_writes_survive_a_killed_node() {
    let Some(hosts) = std::env::var("TEST_CQL_CLUSTER")
        .ok()
        .filter(|h| !h.is_empty())
    else {
        eprintln!(
            "skipped: set TEST_CQL_CLUSTER=127.0.0.1,127.0.0.2,127.0.0.3 (scripts/cassandra.sh start3)"
        );
        return;
    };
    let ks = format!("saltblob_cluster_{:08x}", rand::random::<u32>());
    let url = format!("cql://{hosts}/{ks}?rf=3&consistency=quorum");
    let backend = CqlStore::connect(CqlConfig::from_url(&url).expect("url"))
        .await
        .expect("connect");
    let store = BlobStore::new(Arc::new(backend), StoreConfig::default()).expect("store");

    let before = data(64 << 20, 1);
    store
        .put("before", before.clone(), &PutOptions::new())
        .await
        .expect("put with all nodes up");
    let d = store.describe("before").await.expect("describe");
    assert_eq!((d.layout_kind, d.bytes_per_salt.len()), ("salted", 100));
    assert!(
        d.bytes_per_salt.iter().all(|b| *b > 0),
        "every salt holds chunks"
    );

    cassandra_script(&["kill", "2"]);
    cassandra_script(&["wait-down", "2"]);
    let outcome = async {
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
