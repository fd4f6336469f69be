//! Range reads and listing by prefix.

use std::sync::Arc;

use bytes::Bytes;

use super::{data, prefix, small_config, store};
use crate::backend::ChunkStore;
use crate::base::error::Error;
use crate::state::config::PutOptions;
use crate::store::ListEntry;

pub async fn range_reads(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("range");
    for (size, name) in [(50_000u64, "salted"), (20_000, "single"), (700, "inline")] {
        let key = format!("{p}{name}");
        let payload = data(size as usize, size);
        store
            .put(&key, payload.clone(), &PutOptions::new())
            .await
            .expect("put");
        let ranges = [
            0..1,
            0..size,
            size - 1..size,
            size..size,
            10..10,
            4095.min(size - 2)..4097.min(size),
            4096.min(size - 1)..8192.min(size),
            3..size - 3,
            (size / 2)..(size / 2 + 4096 * 3).min(size),
        ];
        for r in ranges {
            let got = store
                .get_range(&key, r.clone())
                .await
                .unwrap_or_else(|e| panic!("{name} {r:?}: {e}"));
            assert_eq!(
                &got[..],
                &payload[r.start as usize..r.end as usize],
                "{name} range {r:?}"
            );
        }
        for bad in [size..size + 1, 0..size + 1, size + 10..size + 20] {
            match store.get_range(&key, bad.clone()).await {
                Err(Error::RangeNotSatisfiable { size: s, .. }) => assert_eq!(s, size),
                other => panic!("{name} {bad:?}: expected RangeNotSatisfiable, got {other:?}"),
            }
        }
    }
}

pub async fn list_by_prefix(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("list");
    for k in ["a/1", "a/2", "a/3/x", "ab", "b/1"] {
        store
            .put(format!("{p}{k}"), data(10, 1), &PutOptions::new())
            .await
            .expect("put");
    }
    store
        .put(format!("{p}a/big"), data(70_000, 2), &PutOptions::new())
        .await
        .expect("put");
    let keys = |entries: Vec<ListEntry>| -> Vec<String> {
        entries
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.key).into_owned())
            .collect()
    };
    let a = keys(store.list(format!("{p}a/")).await.expect("list"));
    assert_eq!(
        a,
        ["a/1", "a/2", "a/3/x", "a/big"].map(|k| format!("{p}{k}")),
        "prefix a/ excludes ab and b/"
    );
    assert_eq!(keys(store.list(&p).await.expect("list")).len(), 6);
    assert!(
        store
            .list(format!("{p}zzz"))
            .await
            .expect("list")
            .is_empty()
    );
    let entries = store.list(format!("{p}a/big")).await.expect("list");
    assert_eq!(
        entries
            .first()
            .and_then(|e| e.manifest.as_ref().ok())
            .map(|m| m.size),
        Some(70_000),
        "entries carry manifests"
    );
    // More than one page.
    let many = format!("{p}many/");
    for i in 0..600 {
        store
            .put(
                format!("{many}{i:04}"),
                Bytes::from(vec![1u8; 3]),
                &PutOptions::new(),
            )
            .await
            .expect("put");
    }
    let listed = keys(store.list(&many).await.expect("list many"));
    assert_eq!(listed.len(), 600);
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "listing is in key order"
    );
    store.delete(format!("{many}0300")).await.expect("delete");
    assert_eq!(
        store.list(&many).await.expect("list").len(),
        599,
        "deleted keys are not listed"
    );
}
