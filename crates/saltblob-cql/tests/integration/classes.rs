//! Priority classes on the cluster backend: each class's chunk writes draw from a budget of their own per host
//! (`inflight_per_host` for foreground classes and for writes outside any class, `bulk_inflight_per_host` for
//! background ones).

use std::sync::Arc;

use saltblob_core::schedule::SchedulerConfig;
use saltblob_core::{BlobStore, PriorityClass, PutOptions, StoreConfig};

use crate::connect;

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn chunk_writes_use_the_budget_of_their_class() {
    let cql = Arc::new(connect("inflight_per_host=16MiB&bulk_inflight_per_host=8MiB").await);
    let scheduler = SchedulerConfig::default()
        .with_class("reports", 2000)
        .with_class("backfill", 50);
    let store = BlobStore::new(
        cql.clone(),
        StoreConfig::default().with_scheduler(scheduler),
    )
    .unwrap();
    let unscheduled = BlobStore::new(
        cql.clone(),
        StoreConfig::default().with_scheduler(SchedulerConfig::off()),
    )
    .unwrap();
    let prefix = format!("classes-{:016x}", rand::random::<u64>());
    let data = bytes::Bytes::from(vec![7u8; 3 * MIB]);
    let puts = ["interactive", "bulk", "reports", "backfill"].map(|class| {
        let options = PutOptions::new().with_priority(PriorityClass::new(class).unwrap());
        let (store, data, key) = (&store, data.clone(), format!("{prefix}/{class}"));
        async move { store.put(key, data, &options).await }
    });
    futures::future::try_join_all(puts).await.unwrap();
    unscheduled
        .put(format!("{prefix}/none"), data.clone(), &PutOptions::new())
        .await
        .unwrap();
    for key in ["interactive", "bulk", "reports", "backfill", "none"] {
        assert_eq!(
            store.get(format!("{prefix}/{key}")).await.unwrap(),
            data,
            "{key}"
        );
    }

    let budgets = cql.write_budgets();
    let host = budgets
        .first()
        .and_then(|b| b.host)
        .expect("the owner is known on one node");
    let listed: Vec<(Option<&str>, usize, usize)> = budgets
        .iter()
        .map(|b| {
            assert_eq!(b.host, Some(host), "one node: {budgets:?}");
            (b.class.as_deref(), b.capacity, b.inflight)
        })
        .collect();
    assert_eq!(
        listed,
        [
            (None, 16 * MIB, 0),
            (Some("backfill"), 8 * MIB, 0),
            (Some("bulk"), 8 * MIB, 0),
            (Some("interactive"), 16 * MIB, 0),
            (Some("reports"), 16 * MIB, 0),
        ],
        "one budget per class (background ones at bulk_inflight_per_host), all given back"
    );
}
