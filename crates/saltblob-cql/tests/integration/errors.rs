//! Bad input and an unfit cluster: each a clear error, nothing half-created.

use std::time::Duration;

use saltblob_core::conformance::{data, small_config};
use saltblob_core::{BlobStore, Error, PutOptions};
use saltblob_cql::{CqlConfig, CqlStore};

use crate::{cluster, connect};

async fn keyspace_exists(store: &CqlStore, ks: &str) -> bool {
    let rows = store
        .session()
        .query_unpaged(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?",
            (ks,),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    rows.rows_num() > 0
}

fn fresh_keyspace() -> String {
    format!("saltblob_it_x{:012x}", rand::random::<u64>() >> 16)
}

/// A refused connection fails at once, and a host that accepts connections but never answers fails by the
/// connect timeout. No cluster is needed. The clock is Tokio's paused one: it jumps to the next timer as soon as
/// nothing else can run, so the timeout passes without real waiting and its length is measured exactly, with
/// no margin for a slow machine (it replaces a wall-clock bound of "under 6 s").
#[tokio::test(start_paused = true)]
async fn unreachable_hosts_fail_within_the_connect_timeout() {
    let config = CqlConfig::from_url("cql://127.0.0.1:1/ks?connect_timeout=2s").unwrap();
    let m = CqlStore::connect(config)
        .await
        .expect_err("nothing listens on port 1")
        .to_string();
    assert!(
        m.contains("cannot connect") && m.contains("127.0.0.1:1"),
        "{m}"
    );

    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let config = CqlConfig::from_url(&format!("cql://{address}/ks?connect_timeout=2s")).unwrap();
    let t0 = tokio::time::Instant::now();
    let m = CqlStore::connect(config)
        .await
        .expect_err("the host never answers")
        .to_string();
    let waited = t0.elapsed();
    assert!(
        (Duration::from_secs(2)..=Duration::from_secs(4)).contains(&waited),
        "gave up after {waited:?} of the paused clock, not by the 2 s timeout (+2 s for the whole connect): {m}"
    );
    assert!(
        m.contains("cannot connect") && m.contains(&address.to_string()),
        "{m}"
    );
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn replication_factor_larger_than_the_cluster_creates_nothing() {
    let ks = fresh_keyspace();
    let host = cluster();
    let config = CqlConfig::from_url(&format!("cql://{host}/{ks}?rf=5")).unwrap();
    match CqlStore::connect(config).await {
        Err(e @ Error::InvalidArgument { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("rf=5") && m.contains("node(s)") && m.contains("was not created"),
                "{m}"
            );
            eprintln!("rf too large: {m}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let probe = connect("").await;
    assert!(
        !keyspace_exists(&probe, &ks).await,
        "keyspace {ks} must not exist"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn existing_keyspace_with_too_large_rf_fails_saying_why() {
    let probe = connect("").await;
    let ks = fresh_keyspace();
    let dc = probe.datacenter().to_owned();
    probe
        .session()
        .query_unpaged(
            format!("CREATE KEYSPACE {ks} WITH replication = {{'class': 'NetworkTopologyStrategy', '{dc}': 3}}"),
            (),
        )
        .await
        .unwrap();
    let host = cluster();
    let explains = |m: &str| {
        m.contains("replication factor 3")
            && m.contains("only 1 node(s)")
            && m.contains("ALTER KEYSPACE")
    };

    // Reading at the default LOCAL_QUORUM, connecting (which reads the schema marker) already fails.
    let config = CqlConfig::from_url(&format!("cql://{host}/{ks}?attempts=2")).unwrap();
    let err = CqlStore::connect(config)
        .await
        .expect_err("LOCAL_QUORUM of rf 3 on one node");
    let m = err.to_string();
    assert!(err.is_retryable() && explains(&m), "{m}");
    eprintln!("rf 3 on a smaller cluster, connect: {m}");

    // Reading at ONE connects; the first write (LOCAL_QUORUM) fails and says why.
    let config = CqlConfig::from_url(&format!(
        "cql://{host}/{ks}?attempts=2&read_consistency=one"
    ))
    .unwrap();
    let backend = CqlStore::connect(config)
        .await
        .expect("connect reading at ONE");
    let store = BlobStore::new(std::sync::Arc::new(backend), small_config()).unwrap();
    let err = store
        .put("k", data(10, 1), &PutOptions::new())
        .await
        .expect_err("LOCAL_QUORUM of rf 3 on one node");
    let m = err.to_string();
    assert!(err.is_retryable() && explains(&m), "{m}");
    eprintln!("rf 3 on a smaller cluster, first write: {m}");
    assert!(
        matches!(store.head("k").await, Err(Error::NotFound { .. })),
        "nothing committed"
    );
    probe
        .session()
        .query_unpaged(format!("DROP KEYSPACE {ks}"), ())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn consistency_that_cannot_be_met_is_explained() {
    connect("").await; // the shared keyspace exists
    let explains = |m: &str| m.contains("THREE") && m.contains("use a lower consistency");
    let config = CqlConfig::from_url(&crate::url("consistency=three&attempts=1")).unwrap();
    let m = CqlStore::connect(config)
        .await
        .expect_err("reading at THREE on one node")
        .to_string();
    assert!(explains(&m), "{m}");
    eprintln!("consistency three, connect: {m}");

    let config = CqlConfig::from_url(&crate::url("write_consistency=three&attempts=1")).unwrap();
    let backend = CqlStore::connect(config)
        .await
        .expect("reads at LOCAL_QUORUM are fine");
    let store = BlobStore::new(std::sync::Arc::new(backend), small_config()).unwrap();
    let m = store
        .put("k", data(10, 1), &PutOptions::new())
        .await
        .expect_err("THREE on one node")
        .to_string();
    assert!(explains(&m), "{m}");
    eprintln!("consistency three, first write: {m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn unknown_data_center_is_refused() {
    let host = cluster();
    let config =
        CqlConfig::from_url(&format!("cql://{host}/{}?dc=mars", fresh_keyspace())).unwrap();
    let m = CqlStore::connect(config)
        .await
        .expect_err("no such dc")
        .to_string();
    assert!(
        m.contains("\"mars\" is not a data center") && m.contains("datacenter1"),
        "{m}"
    );
}
