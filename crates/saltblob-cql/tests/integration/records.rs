//! Record semantics of the backend itself: lightweight transactions, ordered scans, commit order.

use std::sync::Arc;

use bytes::Bytes;
use saltblob_core::conformance::{data, small_config};
use saltblob_core::{
    BlobStore, ChunkStore, Namespace, Precondition, Previous, PutCondition, PutOptions, RecordWrite,
};

use crate::connect;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_record_writes_are_lightweight_transactions() {
    maybe_skip!();
    let store = connect("").await;
    for ns in [Namespace::Manifest, Namespace::Reclaim] {
        let key = format!("lwt-{:016x}", rand::random::<u64>());
        let k = key.as_bytes();
        assert_eq!(
            store
                .put_record(ns, k, b("v1"), &Precondition::Absent)
                .await
                .unwrap(),
            RecordWrite::Done(Previous::Absent)
        );
        assert_eq!(
            store
                .put_record(ns, k, b("v2"), &Precondition::Absent)
                .await
                .unwrap(),
            RecordWrite::ConditionFailed(Some(b("v1")))
        );
        assert_eq!(
            store
                .put_record(ns, k, b("v2"), &Precondition::Equals(b("nope")))
                .await
                .unwrap(),
            RecordWrite::ConditionFailed(Some(b("v1")))
        );
        assert_eq!(
            store
                .put_record(ns, k, b("v2"), &Precondition::Equals(b("v1")))
                .await
                .unwrap(),
            RecordWrite::Done(Previous::Value(b("v1")))
        );
        assert_eq!(store.get_record(ns, k).await.unwrap(), Some(b("v2")));
        assert_eq!(
            store
                .delete_record(ns, k, &Precondition::Equals(b("v1")))
                .await
                .unwrap(),
            RecordWrite::ConditionFailed(Some(b("v2")))
        );
        assert_eq!(
            store
                .delete_record(ns, k, &Precondition::Equals(b("v2")))
                .await
                .unwrap(),
            RecordWrite::Done(Previous::Value(b("v2")))
        );
        assert_eq!(store.get_record(ns, k).await.unwrap(), None);
        assert_eq!(
            store
                .put_record(ns, k, b("v3"), &Precondition::Equals(b("v2")))
                .await
                .unwrap(),
            RecordWrite::ConditionFailed(None),
            "if-equal on a missing record"
        );
        // Plain writes report Previous::Unknown (reports_previous = false).
        assert_eq!(
            store
                .put_record(ns, k, b("v4"), &Precondition::None)
                .await
                .unwrap(),
            RecordWrite::Done(Previous::Unknown)
        );
        assert_eq!(
            store
                .delete_record(ns, k, &Precondition::None)
                .await
                .unwrap(),
            RecordWrite::Done(Previous::Unknown)
        );
        assert_eq!(store.get_record(ns, k).await.unwrap(), None);
    }
    assert!(!store.info().reports_previous);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_records_scan_in_key_order_by_prefix() {
    maybe_skip!();
    let store = connect("").await;
    let p = format!("scan-{:016x}/", rand::random::<u64>());
    let mut keys: Vec<Vec<u8>> = (0..40u8)
        .map(|i| [p.as_bytes(), &[i * 6], b"x"].concat())
        .collect();
    keys.push([p.as_bytes(), &[0xff, 0xff]].concat());
    for k in keys.iter().rev() {
        store
            .put_record(
                Namespace::Reclaim,
                k,
                Bytes::from_static(b"v"),
                &Precondition::None,
            )
            .await
            .unwrap();
    }
    // A key just past the prefix must not show up.
    let past = [&p.as_bytes()[..p.len() - 1], b"0"].concat();
    store
        .put_record(
            Namespace::Reclaim,
            &past,
            Bytes::from_static(b"v"),
            &Precondition::None,
        )
        .await
        .unwrap();
    let all = store
        .scan_records(Namespace::Reclaim, p.as_bytes(), None, 1000)
        .await
        .unwrap();
    let got: Vec<Vec<u8>> = all.iter().map(|(k, _)| k.to_vec()).collect();
    assert_eq!(
        got, keys,
        "every key of the prefix, in byte order, and nothing else"
    );
    let page = store
        .scan_records(Namespace::Reclaim, p.as_bytes(), Some(&keys[9]), 5)
        .await
        .unwrap();
    let got: Vec<Vec<u8>> = page.iter().map(|(k, _)| k.to_vec()).collect();
    assert_eq!(
        got,
        keys[10..15].to_vec(),
        "start_after is exclusive, limit respected"
    );
    for k in keys.iter().chain([&past]) {
        store
            .delete_record(Namespace::Reclaim, k, &Precondition::None)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_and_conditional_commits_order_by_time() {
    maybe_skip!();
    let store = BlobStore::new(Arc::new(connect("").await), small_config()).unwrap();
    let key = format!("order-{:016x}/k", rand::random::<u64>());
    for i in 0..20u64 {
        // A plain put, then at once a conditional one: the conditional commit is the later, and must win.
        let plain = store
            .put(&key, data(100, i), &PutOptions::new())
            .await
            .unwrap();
        let cond = PutOptions::new().with_condition(PutCondition::IfVersion(plain.version));
        let second = store.put(&key, data(200, i), &cond).await.unwrap();
        assert_eq!(
            store.head(&key).await.unwrap().version,
            second.version,
            "round {i}: the LWT commit is current"
        );
        // And a plain put right after a conditional one wins too.
        let third = store
            .put(&key, data(300, i), &PutOptions::new())
            .await
            .unwrap();
        assert_eq!(
            store.head(&key).await.unwrap().version,
            third.version,
            "round {i}: the later plain commit is current"
        );
    }
}
