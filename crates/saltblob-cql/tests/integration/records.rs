//! What only the CQL backend does at the record level. The record semantics every backend shares
//! (preconditions, namespaces, ordered scans and paging, the order of plain and conditional commits) are in the
//! conformance suite (`saltblob_core::conformance::records`), which runs here too.

use bytes::Bytes;
use saltblob_core::{ChunkStore, Namespace, Precondition, Previous, RecordWrite};

use crate::connect;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn plain_record_writes_do_not_read_what_they_replace() {
    let store = connect("").await;
    // A plain write is not a lightweight transaction: it cannot see the value it replaces.
    assert!(!store.info().reports_previous);
    for ns in [Namespace::Manifest, Namespace::Reclaim] {
        let key = format!("plain-{:016x}", rand::random::<u64>());
        let k = key.as_bytes();
        let value = Bytes::from_static(b"v");
        for _ in 0..2 {
            assert_eq!(
                store
                    .put_record(ns, k, value.clone(), &Precondition::None)
                    .await
                    .unwrap(),
                RecordWrite::Done(Previous::Unknown),
                "{ns:?}: plain put"
            );
        }
        assert_eq!(
            store
                .delete_record(ns, k, &Precondition::None)
                .await
                .unwrap(),
            RecordWrite::Done(Previous::Unknown),
            "{ns:?}: plain delete"
        );
        assert_eq!(store.get_record(ns, k).await.unwrap(), None);
    }
}
