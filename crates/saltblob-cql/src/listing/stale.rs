//! Stale rows of the listing index: rows whose manifest is absent, older than [`super::STALE_AFTER`] (a put in
//! flight writes its row first). Listings skip them; `fsck` counts them and `fsck --repair` and `saltblob upgrade
//! --reconcile` delete them ([`sweep_stale`]), each at its own write time.

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use saltblob_core::Result;
use saltblob_core::backend::Namespace;

use super::{Directory, STALE_AFTER, prefix_successor, successor};
use crate::clock::next_timestamp;
use crate::session::Cluster;

/// Index rows read per page, and manifests looked up at once, of the sweep.
const SWEEP_PAGE: usize = 1000;
/// Manifests looked up at once.
const LOOKUPS_IN_FLIGHT: usize = 32;

/// What [`sweep_stale`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sweep {
    /// Index rows read.
    pub(crate) entries: u64,
    /// Rows without a manifest, older than [`STALE_AFTER`].
    pub(crate) stale: u64,
    /// Stale rows deleted.
    pub(crate) removed: u64,
}

/// Reads every index row under `prefix`, range partition by range partition, and looks up each row's manifest:
/// counts the rows without one that are older than [`STALE_AFTER`] and, with `remove`, deletes them at their own
/// write time (which cannot remove a newer write).
pub(crate) async fn sweep_stale(
    cluster: &Cluster,
    dir: &Directory,
    prefix: &[u8],
    remove: bool,
) -> Result<Sweep> {
    let horizon =
        next_timestamp().saturating_sub(i64::try_from(STALE_AFTER.as_micros()).unwrap_or(i64::MAX));
    let until = prefix_successor(prefix);
    let mut sweep = Sweep::default();
    for (i, entry) in dir.entries.iter().enumerate() {
        let end = match (dir.end_of(i), &until) {
            (Some(end), Some(u)) => Some(end.as_ref().min(u.as_slice())),
            (Some(end), None) => Some(end.as_ref()),
            (None, u) => u.as_deref(),
        };
        let mut lower = entry.start.clone().max(Bytes::copy_from_slice(prefix));
        if end.is_some_and(|e| lower.as_ref() >= e) {
            continue;
        }
        loop {
            let page = cluster
                .read_range(&entry.id, &lower, end, SWEEP_PAGE)
                .await?;
            let full = page.len() >= SWEEP_PAGE;
            let last = page.last().map(|(k, _)| k.clone());
            sweep.entries += page.len() as u64;
            let stale: Vec<(bool, bool)> = stream::iter(page)
                .map(|(key, ts)| async move {
                    if ts > horizon
                        || cluster
                            .get_record(Namespace::Manifest, &key)
                            .await?
                            .is_some()
                    {
                        return Ok::<_, saltblob_core::Error>((false, false));
                    }
                    if remove {
                        cluster.index_remove_in(&entry.id, &key, ts).await?;
                    }
                    Ok((true, remove))
                })
                .buffer_unordered(LOOKUPS_IN_FLIGHT)
                .try_collect()
                .await?;
            sweep.stale += stale.iter().filter(|(s, _)| *s).count() as u64;
            sweep.removed += stale.iter().filter(|(_, r)| *r).count() as u64;
            match last {
                Some(last) if full => lower = successor(&last),
                _ => break,
            }
        }
    }
    Ok(sweep)
}
