//! Chunk writes: a `put_chunks` call is cut into requests of one partition each (one insert, or an unlogged
//! batch of at most [`CqlConfig::batch_bytes`]), which wait for room in the budget of the node that owns their
//! partition ([`Throttle`]) and then run.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use saltblob_core::backend::{BlobRef, ChunkWrite};
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

/// Bounds the bytes of chunk writes in flight to each host.
pub(crate) struct Throttle {
    per_host: usize,
    hosts: Mutex<HashMap<Host, Arc<Semaphore>>>,
}

impl Throttle {
    /// A throttle allowing [`CqlConfig::inflight_per_host`] bytes in flight to each host.
    pub(crate) fn new(config: &CqlConfig) -> Self {
        Self {
            per_host: config.inflight_per_host,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until `bytes` more (at least 1, at most the whole budget) may be in flight to `host`.
    async fn acquire(&self, host: Host, bytes: usize) -> Result<OwnedSemaphorePermit> {
        let semaphore = {
            let mut hosts = self
                .hosts
                .lock()
                .map_err(|_| Error::backend(NAME, "throttle lock poisoned", false))?;
            Arc::clone(
                hosts
                    .entry(host)
                    .or_insert_with(|| Arc::new(Semaphore::new(self.per_host))),
            )
        };
        let permits = u32::try_from(bytes.clamp(1, self.per_host)).unwrap_or(u32::MAX);
        semaphore
            .acquire_many_owned(permits)
            .await
            .map_err(|_| Error::backend(NAME, "throttle closed", false))
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
    unit: WriteUnit,
) -> Result<()> {
    let salt = i32::try_from(unit.salt)
        .map_err(|_| Error::invalid("salt", format!("{} is over 2^31", unit.salt)))?;
    let owner = owner(cluster, &blob.key, version, salt);
    let _permit = throttle.acquire(owner, unit.bytes).await?;
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
