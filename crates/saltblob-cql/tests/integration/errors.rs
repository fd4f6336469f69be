//! Bad input and an unfit cluster: each a clear error, nothing half-created.

use std::time::{Duration, Instant};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_hosts_fail_within_the_connect_timeout() {
    maybe_skip!();
    let t0 = Instant::now();
    let config = CqlConfig::from_url("cql://127.0.0.1:1/ks?connect_timeout=2s").unwrap();
    let err = CqlStore::connect(config)
        .await
        .expect_err("nothing listens on port 1");
    let m = err.to_string();
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        m.contains("cannot connect") && m.contains("127.0.0.1:1"),
        "{m}"
    );
    eprintln!("unreachable: {m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_factor_larger_than_the_cluster_creates_nothing() {
    maybe_skip!();
    let ks = fresh_keyspace();
    let host = cluster().unwrap_or_default();
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
async fn existing_keyspace_with_too_large_rf_fails_saying_why() {
    maybe_skip!();
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
    let host = cluster().unwrap_or_default();
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
async fn consistency_that_cannot_be_met_is_explained() {
    maybe_skip!();
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
async fn unknown_data_center_is_refused() {
    maybe_skip!();
    let host = cluster().unwrap_or_default();
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
