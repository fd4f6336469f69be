//! Building the listing index from the manifests (`saltblob upgrade` of a keyspace written by a format-1 build),
//! and reconciling the two (`saltblob upgrade --reconcile`: the repair of an index that a fault left behind).
//!
//! A build first plans the directory when it has none: one pass over the manifests' keys counts them and keeps a
//! uniform sample (the keys of smallest hash, in bounded memory), and the directory gets a range per
//! [`crate::config::ListingConfig::max_rows`] / 2 keys, cut at the sample's quantiles, so that no range partition
//! is ever written past its bound. A second pass writes every manifest's index row with the manifest's own write
//! time (a later write or delete of the key, made meanwhile, wins in both tables). That pass records the driver's
//! paging state after each page in the meta namespace, and an interrupted build resumes from it. Reconciling adds
//! the rows the second pass writes to an existing index, then removes rows whose manifest is absent and that are
//! older than [`super::STALE_AFTER`], each at its own write time (`stale.rs`, which `fsck` shares).

use std::collections::BinaryHeap;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use saltblob_core::Result;
use saltblob_core::backend::Namespace;
use saltblob_core::version::VersionId;
use scylla::response::PagingState;

use super::{Directory, RangeEntry, RangeState};
use crate::error;
use crate::session::Cluster;

/// Keys kept to plan the directory.
const SAMPLE: usize = 20_000;
/// Index rows written at once.
const WRITE_CONCURRENCY: usize = 64;
/// Key of the build's progress (the paging state of its pass over the manifests) in the meta namespace.
const PROGRESS_KEY: &[u8] = b"listing-build-progress";

/// What a build of the listing index did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildReport {
    /// Manifests read (this run; a resumed build does not count those before).
    pub manifests: u64,
    /// Ranges in the directory at the end.
    pub ranges: usize,
    /// Whether the directory was planned by this run.
    pub planned: bool,
    /// Whether this run resumed an interrupted one.
    pub resumed: bool,
    /// Index rows removed because their manifest was absent (reconcile only).
    pub stale_removed: u64,
    /// Whether the build went through every manifest (false: it stopped after the pages it was allowed, and
    /// resumes from there).
    pub complete: bool,
}

/// How far one run of a build goes: all of it, or (to show that an interrupted build resumes) at most `pages`
/// pages of `rows` manifests each.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuildSteps {
    /// At most this many pages, then stop as an interrupted build would.
    pub pages: Option<usize>,
    /// Manifests per page; `None`: the scan's own.
    pub rows: Option<i32>,
}

/// Builds the listing index from the manifests, first planning its directory when `plan_first` (a keyspace that
/// had no index); with `reconcile`, also removes stale rows.
///
/// # Errors
/// A store error; the build resumes from its last page when run again.
pub(crate) async fn build(
    cluster: &Cluster,
    plan_first: bool,
    reconcile: bool,
    steps: BuildSteps,
) -> Result<BuildReport> {
    let mut report = BuildReport::default();
    let mut dir = cluster.read_directory().await?;
    // A directory of the root range alone, before the build's first page: plan it (a resumed build has its plan).
    let progress = cluster.get_record(Namespace::Meta, PROGRESS_KEY).await?;
    if plan_first && dir.entries.len() == 1 && progress.is_none() {
        report.planned = true;
        dir = plan(cluster).await?;
    }
    report.ranges = dir.entries.len();
    cluster.directory.invalidate().await;
    report.resumed = progress.is_some();
    let mut paging = progress.map_or_else(PagingState::start, |raw| {
        PagingState::new_from_raw_bytes(raw.as_ref())
    });
    let mut scan = cluster.st.listing.manifest_times.clone();
    if let Some(rows) = steps.rows {
        scan.set_page_size(rows);
    }
    let mut pages = 0usize;
    loop {
        if steps.pages.is_some_and(|max| pages >= max) {
            return Ok(report);
        }
        pages += 1;
        let what = || "reading the manifests' keys and write times".to_owned();
        let (result, next) = cluster
            .run(what, true, || {
                cluster
                    .session
                    .execute_single_page(&scan, (), paging.clone())
            })
            .await?;
        let rows: Vec<(Bytes, Option<i64>)> = result
            .into_rows_result()
            .map_err(|e| error::shape("manifest scan", e))?
            .rows::<(Bytes, Option<i64>)>()
            .map_err(|e| error::shape("manifest scan", e))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| error::shape("manifest scan", e))?;
        report.manifests += rows.len() as u64;
        stream::iter(rows.into_iter().filter_map(|(k, ts)| Some((k, ts?))))
            .map(|(key, ts)| async move { cluster.index_insert(&key, ts).await })
            .buffer_unordered(WRITE_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        match next.into_paging_control_flow() {
            std::ops::ControlFlow::Break(()) => break,
            std::ops::ControlFlow::Continue(state) => {
                if let Some(raw) = state.as_bytes_slice() {
                    let raw = Bytes::copy_from_slice(raw);
                    cluster.put_meta(PROGRESS_KEY, raw).await?;
                }
                paging = state;
            }
        }
    }
    if reconcile {
        report.stale_removed = super::sweep_stale(cluster, &dir, b"", true).await?.removed;
    }
    cluster.delete_meta(PROGRESS_KEY).await?;
    cluster.flush_counts(true).await;
    report.ranges = cluster.read_directory().await?.entries.len();
    report.complete = true;
    Ok(report)
}

/// Plans and writes the directory of an index being built: one pass over the manifests' keys.
async fn plan(cluster: &Cluster) -> Result<Directory> {
    let (count, sample) = sample_keys(cluster).await?;
    let per_range = (cluster.config.listing.max_rows / 2).max(1);
    let mut entries = Vec::new();
    for start in boundaries(sample, count, per_range) {
        entries.push(RangeEntry {
            start,
            id: Bytes::copy_from_slice(&VersionId::generate().to_be_bytes()),
            state: RangeState::Done,
            source: None,
            since: 0,
        });
    }
    for entry in &entries {
        cluster.add_range(entry).await?;
    }
    cluster.read_directory().await
}

/// The number of manifests, and a uniform sample of at most [`SAMPLE`] of their keys (those of smallest hash).
async fn sample_keys(cluster: &Cluster) -> Result<(u64, Vec<Bytes>)> {
    let what = "counting the manifests";
    let pager = cluster
        .session
        .execute_iter(cluster.st.scan_manifest_keys.clone(), ())
        .await
        .map_err(|e| error::driver(format!("{what}: {e}"), true, e))?;
    let mut rows = pager
        .rows_stream::<(Bytes,)>()
        .map_err(|e| error::shape(what, e))?;
    let mut heap: BinaryHeap<(u64, Bytes)> = BinaryHeap::new();
    let mut count = 0u64;
    while let Some(row) = rows.next().await {
        let (key,) = row.map_err(|e| error::driver(format!("{what}: {e}"), true, e))?;
        count += 1;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        heap.push((hasher.finish(), key));
        if heap.len() > SAMPLE {
            heap.pop();
        }
    }
    Ok((count, heap.into_iter().map(|(_, k)| k).collect()))
}

/// Range starts that cut `count` keys, of which `sample` is a uniform sample, into ranges of about `per_range`:
/// the sample's quantiles, none empty, none repeated.
fn boundaries(mut sample: Vec<Bytes>, count: u64, per_range: u64) -> Vec<Bytes> {
    sample.sort();
    let ranges = count.div_ceil(per_range.max(1));
    if ranges <= 1 || sample.is_empty() {
        return Vec::new();
    }
    let n = sample.len() as u64;
    let mut out: Vec<Bytes> = (1..ranges)
        .filter_map(|k| {
            let at = usize::try_from(k * n / ranges).ok()?;
            sample.get(at).cloned()
        })
        .filter(|k| !k.is_empty())
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_are_the_samples_quantiles() {
        let sample: Vec<Bytes> = (0..100)
            .rev()
            .map(|i| Bytes::from(format!("k{i:03}")))
            .collect();
        assert!(
            boundaries(sample.clone(), 1000, 1000).is_empty(),
            "one range"
        );
        assert_eq!(boundaries(sample.clone(), 1000, 500), [Bytes::from("k050")]);
        assert_eq!(
            boundaries(sample, 1000, 250),
            ["k025", "k050", "k075"].map(Bytes::from)
        );
        assert!(boundaries(Vec::new(), 1000, 10).is_empty());
    }
}
