//! How the ledger's records spread over partitions: the shard of a blob key, one of [`SHARDS`].

/// Shards of the intents and of each bucket of the reclaim queue: one byte of the key. With 256, a mixed run's
/// record writes spread so that no partition takes more than about 1/256 of them. Part of the format.
pub(crate) const SHARDS: usize = 256;

/// The shard of blob key `key`: the first byte of its BLAKE3 hash (keys of one prefix spread evenly).
pub(crate) fn shard_of(key: &[u8]) -> u8 {
    blake3::hash(key).as_bytes()[0]
}

/// Every shard, in order.
pub(crate) fn all() -> impl Iterator<Item = u8> {
    (0..=u8::MAX).take(SHARDS)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use futures::StreamExt;

    use super::*;
    use crate::backend::Namespace;
    use crate::backend::counting::CountingStore;
    use crate::state::config::PutOptions;
    use crate::store::BlobStore;

    /// A mixed run of chunked puts, overwrites and deletes of 6000 keys: no partition of the internal records
    /// takes more than 1% of their writes (intents by the shard of their key, reclaim entries by bucket and
    /// shard). Before the shards, the intents' one partition took every put's writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mixed_runs_record_writes_spread_over_partitions() {
        let backend = Arc::new(CountingStore::new(Arc::new(
            crate::backend::memory::MemoryStore::new(),
        )));
        let config =
            crate::conformance::small_config().with_grace(std::time::Duration::from_secs(600));
        let store = BlobStore::new(backend.clone(), config).expect("store");
        let value = Bytes::from(vec![5u8; 5000]);
        let ops = (0..12_000).map(|i| (i % 6000, i >= 6000 && i % 2 == 0));
        futures::stream::iter(ops)
            .for_each_concurrent(32, |(k, delete)| {
                let (store, value) = (store.clone(), value.clone());
                async move {
                    let key = format!("mixed/{k:06}");
                    if delete {
                        store.delete(&key).await.expect("delete");
                    } else {
                        store
                            .put(&key, value, &PutOptions::new())
                            .await
                            .expect("put");
                    }
                }
            })
            .await;
        let busiest = backend.busiest().expect("writes");
        let (part, most, total) = (busiest.partition.clone(), busiest.writes, busiest.total);
        let share = busiest.share();
        println!(
            "busiest partition {part:?}: {most} of {total} record writes ({:.3}%)",
            share * 100.0
        );
        assert!(
            backend.writes_to(Namespace::ShardedIntent) >= 12_000,
            "every put's intent"
        );
        assert!(
            backend.writes_to(Namespace::ReclaimBucket) >= 6000,
            "every replaced version"
        );
        assert_eq!(
            backend.writes_to(Namespace::Intent) + backend.writes_to(Namespace::Reclaim),
            0
        );
        assert!(share <= 0.01, "{part:?} took {most} of {total} writes");
    }

    /// Keys of one prefix spread over every shard, none taking much more than its share.
    #[test]
    fn keys_spread_over_the_shards() {
        let mut counts = [0u32; SHARDS];
        for i in 0..SHARDS * 100 {
            counts[usize::from(shard_of(format!("logs/2026/12/{i:08}").as_bytes()))] += 1;
        }
        let max = counts.iter().copied().max().unwrap_or(0);
        let min = counts.iter().copied().min().unwrap_or(0);
        assert!(min > 50 && max < 160, "min {min}, max {max} of 100 each");
        assert_eq!(all().count(), SHARDS);
    }
}
