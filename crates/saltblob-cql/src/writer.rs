//! Chunk writes: a `put_chunks` call is cut into requests of one partition each (one insert, or an unlogged
//! batch of at most [`CqlConfig::batch_bytes`]), which wait for room in the budget of the node that owns their
//! partition for the request's priority class ([`Throttle`], [`Lane`]) and then run.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use saltblob_core::backend::{BlobRef, ChunkWrite};
use saltblob_core::schedule::{ClassTag, current_class};
use saltblob_core::{Error, KeyDisplay, Result};
use scylla::statement::batch::{Batch, BatchType};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::CqlConfig;
use crate::error::NAME;
use crate::schema::CHUNKS;
use crate::session::Cluster;

/// Bytes counted for each chunk in a batch besides its data (key, version, salt, index, timestamp, framing).
const ROW_OVERHEAD: usize = 64;

/// One request of a `put_chunks` call: chunks of one partition, sent alone or as one unlogged batch.
pub(crate) struct WriteUnit {
    salt: u32,
    chunks: Vec<ChunkWrite>,
    bytes: usize,
}

/// Cuts the chunks of one `put_chunks` call of `blob` into requests: per salt (partition), in order, batches
/// of at most `batch_bytes` (a larger chunk alone).
pub(crate) fn plan(blob: &BlobRef, chunks: Vec<ChunkWrite>, batch_bytes: usize) -> Vec<WriteUnit> {
    let mut by_salt: BTreeMap<u32, Vec<ChunkWrite>> = BTreeMap::new();
    for c in chunks {
        by_salt.entry(c.salt).or_default().push(c);
    }
    let row_overhead = ROW_OVERHEAD + blob.key.len();
    let mut units = Vec::new();
    for (salt, chunks) in by_salt {
        let mut unit = WriteUnit {
            salt,
            chunks: Vec::new(),
            bytes: 0,
        };
        for c in chunks {
            let size = c.data.len() + row_overhead;
            if !unit.chunks.is_empty() && unit.bytes + size > batch_bytes {
                units.push(std::mem::replace(
                    &mut unit,
                    WriteUnit {
                        salt,
                        chunks: Vec::new(),
                        bytes: 0,
                    },
                ));
            }
            unit.bytes += size;
            unit.chunks.push(c);
        }
        if !unit.chunks.is_empty() {
            units.push(unit);
        }
    }
    units
}

/// A node's address; `None` when the owner of a partition is not known (its writes share one budget).
type Host = Option<(IpAddr, u16)>;

/// Which budget of its host a chunk write draws from: its priority class's own, or, outside any class, the one
/// budget every write had before classes existed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Lane {
    /// The class's name; `None` outside any class.
    class: Option<String>,
    /// Whether the class is background work ([`ClassTag::is_background`]).
    background: bool,
}

impl Lane {
    /// The lane of a request in `class` (`None`: outside any class, e.g. with the scheduler off).
    pub(crate) fn of(class: Option<&ClassTag>) -> Self {
        Self {
            class: class.map(|c| c.name().to_owned()),
            background: class.is_some_and(ClassTag::is_background),
        }
    }

    /// The lane of the request running on this task (read before work moves to another task).
    pub(crate) fn current() -> Self {
        Self::of(current_class().as_ref())
    }
}

/// One chunk-write budget of a [`crate::CqlStore`]: the bytes one class may have in flight to one host, from
/// [`crate::CqlStore::write_budgets`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteBudget {
    /// The host (the partition's first replica); `None` for partitions whose owner was not known.
    pub host: Option<SocketAddr>,
    /// The priority class; `None` for writes outside any class (the scheduler off).
    pub class: Option<String>,
    /// Bytes allowed in flight.
    pub capacity: usize,
    /// Bytes in flight now.
    pub inflight: usize,
}

/// Bounds the bytes of chunk writes in flight to each host, separately for each priority class, so that
/// background writes never take the budget of interactive ones.
pub(crate) struct Throttle {
    per_host: usize,
    background_per_host: usize,
    budgets: Mutex<HashMap<(Host, Lane), Arc<Semaphore>>>,
}

impl Throttle {
    /// A throttle allowing, per host, [`CqlConfig::inflight_per_host`] bytes to each foreground class and to
    /// writes outside any class, and [`CqlConfig::bulk_budget`] bytes to each background class.
    pub(crate) fn new(config: &CqlConfig) -> Self {
        Self {
            per_host: config.inflight_per_host,
            background_per_host: config.bulk_budget(),
            budgets: Mutex::new(HashMap::new()),
        }
    }

    /// The bytes `lane` may have in flight to one host.
    fn capacity(&self, lane: &Lane) -> usize {
        if lane.background {
            self.background_per_host
        } else {
            self.per_host
        }
    }

    /// The budget of `lane` on `host`, created on first use.
    fn budget(&self, host: Host, lane: &Lane) -> Result<(Arc<Semaphore>, usize)> {
        let capacity = self.capacity(lane);
        let mut budgets = self
            .budgets
            .lock()
            .map_err(|_| Error::backend(NAME, "throttle lock poisoned", false))?;
        let semaphore = budgets
            .entry((host, lane.clone()))
            .or_insert_with(|| Arc::new(Semaphore::new(capacity)));
        Ok((Arc::clone(semaphore), capacity))
    }

    /// Waits until `bytes` more (at least 1, at most the whole budget) of `lane` may be in flight to `host`.
    async fn acquire(&self, host: Host, lane: &Lane, bytes: usize) -> Result<OwnedSemaphorePermit> {
        let (semaphore, capacity) = self.budget(host, lane)?;
        let permits = u32::try_from(bytes.clamp(1, capacity)).unwrap_or(u32::MAX);
        semaphore
            .acquire_many_owned(permits)
            .await
            .map_err(|_| Error::backend(NAME, "throttle closed", false))
    }

    /// The budgets used so far, by host and class.
    pub(crate) fn snapshot(&self) -> Vec<WriteBudget> {
        let budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<WriteBudget> = budgets
            .iter()
            .map(|((host, lane), semaphore)| {
                let capacity = self.capacity(lane);
                WriteBudget {
                    host: host.map(SocketAddr::from),
                    class: lane.class.clone(),
                    capacity,
                    inflight: capacity.saturating_sub(semaphore.available_permits()),
                }
            })
            .collect();
        out.sort_by(|a, b| (a.host, &a.class).cmp(&(b.host, &b.class)));
        out
    }
}

/// The node that owns a chunk partition (its primary replica), for per-host backpressure.
fn owner(cluster: &Cluster, key: &Bytes, version: &Bytes, salt: i32) -> Host {
    let values = (0i64, key, version, salt);
    let token = cluster
        .st
        .delete_chunks
        .calculate_token(&values)
        .ok()
        .flatten()?;
    let state = cluster.session.get_cluster_state();
    let replicas = state.get_token_endpoints(&cluster.config.keyspace, CHUNKS, token);
    replicas
        .first()
        .map(|(node, _)| (node.address.ip(), node.address.port()))
}

/// Writes `unit` of version `version` (big-endian bytes) of `blob`, stamped `ts`, once its owner has room.
pub(crate) async fn write_unit(
    cluster: &Cluster,
    throttle: &Throttle,
    blob: &BlobRef,
    version: &Bytes,
    ts: i64,
    lane: &Lane,
    unit: WriteUnit,
) -> Result<()> {
    let salt = i32::try_from(unit.salt)
        .map_err(|_| Error::invalid("salt", format!("{} is over 2^31", unit.salt)))?;
    let owner = owner(cluster, &blob.key, version, salt);
    let _permit = throttle.acquire(owner, lane, unit.bytes).await?;
    let rows = unit
        .chunks
        .iter()
        .map(|c| {
            let idx = i64::try_from(c.index)
                .map_err(|_| Error::invalid("chunk index", format!("{} is over 2^63", c.index)))?;
            Ok((
                blob.key.clone(),
                version.clone(),
                salt,
                idx,
                c.data.clone(),
                ts,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let what = || {
        format!(
            "write of {} chunk(s) ({} bytes, salt {}) of key \"{}\" version {}",
            rows.len(),
            unit.bytes,
            unit.salt,
            KeyDisplay::from(&blob.key[..]),
            blob.version
        )
    };
    if let [row] = rows.as_slice() {
        cluster
            .run(what, true, || {
                cluster.session.execute_unpaged(&cluster.st.put_chunk, row)
            })
            .await?;
    } else {
        let mut batch = Batch::new(BatchType::Unlogged);
        for _ in &rows {
            batch.append_statement(cluster.st.put_chunk.clone());
        }
        batch.set_is_idempotent(true);
        batch.set_consistency(cluster.config.write_consistency);
        cluster
            .run(what, true, || cluster.session.batch(&batch, &rows))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    const MIB: usize = 1 << 20;

    fn lane(class: &str, background: bool) -> Lane {
        Lane {
            class: Some(class.to_owned()),
            background,
        }
    }

    fn host(last: u8) -> Host {
        Some((IpAddr::from([10, 0, 0, last]), 9042))
    }

    fn throttle() -> Throttle {
        Throttle::new(
            &CqlConfig::new(["h:9042"], "ks")
                .with_inflight_per_host(16 * MIB)
                .with_bulk_inflight_per_host(8 * MIB),
        )
    }

    /// Whether `bytes` of `lane` to `host` are admitted right away (the permit is dropped at once).
    fn admitted_now(throttle: &Throttle, host: Host, lane: &Lane, bytes: usize) -> bool {
        match throttle.acquire(host, lane, bytes).now_or_never() {
            Some(permit) => permit.is_ok(),
            None => false,
        }
    }

    #[test]
    fn budgets_by_class() {
        let t = throttle();
        let unclassified = Lane::current();
        assert_eq!(
            unclassified,
            Lane::of(None),
            "no class outside a scheduled task"
        );
        assert_eq!(
            (
                t.capacity(&unclassified),
                t.capacity(&lane("interactive", false)),
                t.capacity(&lane("reports", false)),
                t.capacity(&lane("bulk", true)),
                t.capacity(&lane("backfill", true)),
            ),
            (16 * MIB, 16 * MIB, 16 * MIB, 8 * MIB, 8 * MIB)
        );
        let t = Throttle::new(&CqlConfig::new(["h:9042"], "ks").with_inflight_per_host(32 * MIB));
        assert_eq!(
            t.capacity(&lane("bulk", true)),
            32 * MIB,
            "bulk defaults to inflight_per_host"
        );
    }

    #[test]
    fn bulk_writes_never_take_the_budget_of_other_classes() {
        let t = throttle();
        let bulk = lane("bulk", true);
        let interactive = lane("interactive", false);
        let held = t
            .acquire(host(1), &bulk, 64 * MIB)
            .now_or_never()
            .expect("an empty budget admits at once")
            .expect("acquired");
        assert_eq!(
            held.num_permits(),
            8 * MIB,
            "a request larger than the budget takes all of it"
        );
        assert!(
            !admitted_now(&t, host(1), &bulk, 1),
            "bulk waits for its own budget"
        );
        assert!(admitted_now(&t, host(1), &interactive, 16 * MIB));
        assert!(admitted_now(&t, host(1), &lane("backfill", true), 8 * MIB));
        assert!(admitted_now(&t, host(1), &Lane::of(None), 16 * MIB));
        assert!(
            admitted_now(&t, host(2), &bulk, 8 * MIB),
            "other hosts have their own"
        );
        assert!(admitted_now(&t, None, &bulk, 8 * MIB));
        let budgets = t.snapshot();
        let bulk_on_1 = budgets
            .iter()
            .find(|b| b.host == host(1).map(SocketAddr::from) && b.class.as_deref() == Some("bulk"))
            .expect("listed");
        assert_eq!((bulk_on_1.capacity, bulk_on_1.inflight), (8 * MIB, 8 * MIB));
        assert_eq!(budgets.len(), 6, "{budgets:?}");
        drop(held);
        assert!(admitted_now(&t, host(1), &bulk, 8 * MIB));
        assert!(t.snapshot().iter().all(|b| b.inflight == 0));
    }
}
