//! The listing index ([`crate::listing`]) checked against the manifests (`fsck`, through
//! [`saltblob_core::ChunkStore::check_index`]), both ways, in bounded memory:
//!
//! - **Every manifest has its row.** A pass over the manifests' token ranges (module `crate::ranges`, several at once)
//!   reads their keys; the keys of a page that fall under the prefix are looked up in the index, one `key IN ?`
//!   read per range partition they fall in (a `Moving` range's source too). A key found in neither is checked
//!   again on its own before it is reported: the manifest's write time, then the index, then the write time once
//!   more. A put writes the index row before its manifest and a delete removes the manifest before the row, so a
//!   key is missing only if the same manifest (one write time) was there before and after an index read that
//!   lacked it. One window remains: a conditional put, whose write time the cluster chooses, writes its row again
//!   with that time just after its commit; a check that falls in between reports the key, and the repair's write
//!   is the one that put makes. The repair writes the row with the manifest's own write time, so that a later
//!   delete still wins; if a delete of the row at or after that time shadows it (a row deleted by hand), it
//!   writes the row again with the current time, which at worst (the key deleted meanwhile) leaves a stale row.
//! - **Every row has its manifest.** The range partitions under the prefix are read in pages and each row's
//!   manifest looked up; a row without one, older than [`crate::listing::STALE_AFTER`] (a put in flight writes its row
//!   first), is stale. (The rows a `Moving` range's source still holds of its span are swept once the move is
//!   done.) Listings skip such rows; the repair deletes them at their own write time
//!   ([`crate::listing::sweep_stale`], which `saltblob upgrade --reconcile` shares).

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use saltblob_core::Result;
use saltblob_core::backend::{IndexCheck, Namespace, ScanRange};

use crate::clock::next_timestamp;
use crate::listing::{RangeState, successor, sweep_stale};
use crate::session::Cluster;

/// Manifests per page of the pass.
const PAGE: usize = 1000;
/// Keys per `IN` read of one range partition.
const IN_KEYS: usize = 256;
/// Index reads (of keys) at once.
const LOOKUPS_IN_FLIGHT: usize = 32;

/// Checks the index against the manifests under `prefix` (see the module documentation).
pub(crate) async fn check(cluster: &Cluster, prefix: &[u8], repair: bool) -> Result<IndexCheck> {
    let plan = crate::ranges::plan(cluster)?;
    let in_flight = plan.in_flight.max(1);
    let per_range: Vec<(u64, Vec<Bytes>)> = stream::iter(plan.ranges)
        .map(|range| missing_in_range(cluster, range, prefix))
        .buffer_unordered(in_flight)
        .try_collect()
        .await?;
    let mut report = IndexCheck {
        name: "listing index".to_owned(),
        ..IndexCheck::default()
    };
    let mut candidates = Vec::new();
    for (manifests, missing) in per_range {
        report.manifests += manifests;
        candidates.extend(missing);
    }
    candidates.sort_unstable();
    for key in candidates {
        if let Some(ts) = confirmed_missing(cluster, &key).await? {
            if repair {
                restore(cluster, &key, ts).await?;
                report.restored += 1;
            }
            report.missing.push(key);
        }
    }
    let dir = cluster.read_directory().await?;
    let sweep = sweep_stale(cluster, &dir, prefix, repair).await?;
    report.entries = sweep.entries;
    report.stale = sweep.stale;
    report.stale_removed = sweep.removed;
    if repair {
        cluster.flush_counts(true).await;
    }
    Ok(report)
}

/// Reads one token range of the manifests; returns how many it holds under `prefix`, and those of their keys
/// that the index lacked when looked up.
async fn missing_in_range(
    cluster: &Cluster,
    range: ScanRange,
    prefix: &[u8],
) -> Result<(u64, Vec<Bytes>)> {
    let mut after: Option<Bytes> = None;
    let mut manifests = 0u64;
    let mut missing = Vec::new();
    loop {
        let page = crate::ranges::read(cluster, &range, after.as_deref(), PAGE).await?;
        after = page.records.last().map(|(k, _)| k.clone()).or(after);
        let keys: Vec<Bytes> = page
            .records
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k.starts_with(prefix))
            .collect();
        manifests += keys.len() as u64;
        missing.extend(absent_from_index(cluster, keys).await?);
        if page.done {
            return Ok((manifests, missing));
        }
    }
}

/// Those of `keys` that no range partition which may hold them has (their range, and its source while it is
/// `Moving`).
async fn absent_from_index(cluster: &Cluster, mut keys: Vec<Bytes>) -> Result<Vec<Bytes>> {
    if keys.is_empty() {
        return Ok(keys);
    }
    let dir = cluster.directory().await?;
    keys.sort_unstable();
    // (partition, keys) to look up: the keys of each range, also in its source while it moves.
    let mut reads: Vec<(Bytes, Vec<Bytes>)> = Vec::new();
    for run in keys.chunk_by(|a, b| dir.range_of(a) == dir.range_of(b)) {
        let Some(entry) = run.first().and_then(|k| dir.entries.get(dir.range_of(k))) else {
            continue;
        };
        for part in run.chunks(IN_KEYS) {
            reads.push((entry.id.clone(), part.to_vec()));
            if let Some(source) = &entry.source
                && entry.state == RangeState::Moving
            {
                reads.push((source.clone(), part.to_vec()));
            }
        }
    }
    let found: Vec<Vec<Bytes>> = stream::iter(reads)
        .map(|(partition, keys)| async move { cluster.index_has(&partition, keys).await })
        .buffer_unordered(LOOKUPS_IN_FLIGHT)
        .try_collect()
        .await?;
    let found: std::collections::HashSet<Bytes> = found.into_iter().flatten().collect();
    keys.retain(|k| !found.contains(k));
    Ok(keys)
}

/// The manifest's write time if `key` is missing from the index: the same manifest read before and after an
/// index read that lacked the key; `None` when a concurrent put or delete explains what was seen.
async fn confirmed_missing(cluster: &Cluster, key: &[u8]) -> Result<Option<i64>> {
    let Some(before) = cluster.write_time(Namespace::Manifest, key).await? else {
        return Ok(None);
    };
    let listed = cluster.index_keys(key, Some(&successor(key)), 1).await?;
    if listed.iter().any(|(k, _)| k.as_ref() == key) {
        return Ok(None);
    }
    let after = cluster.write_time(Namespace::Manifest, key).await?;
    Ok((after == Some(before)).then_some(before))
}

/// Writes the index row of `key`, whose manifest has write time `ts`, back: at `ts`, then, if a deletion at or
/// after `ts` shadows that write, at the current time.
async fn restore(cluster: &Cluster, key: &[u8], ts: i64) -> Result<()> {
    cluster.index_insert(key, ts).await?;
    let listed = cluster.index_keys(key, Some(&successor(key)), 1).await?;
    if !listed.iter().any(|(k, _)| k.as_ref() == key) {
        cluster.index_insert(key, next_timestamp()).await?;
    }
    Ok(())
}
