//! The maintenance of the listing index, which gc runs after each pass ([`saltblob_core::ChunkStore::maintain`]):
//! ranges past [`crate::config::ListingConfig::max_rows`] rows are split, and splits whose wait is over are
//! finished. It never waits: a split is begun by one maintenance and finished by a later one. One runs at a time
//! (a lease row in the meta namespace, written with a lightweight transaction and a TTL).
//!
//! What a range holds is counted as it is written: each process adds up the index rows it writes and deletes per
//! range, and adds its tally to the range's counter in `listing_counts` now and then. A counter over the bound is
//! only a hint (an overwrite counts as a row): the maintenance counts the range's rows before it splits, and
//! corrects the counter.
//!
//! A split of range R at keys m1 < m2 < … writes a `Moving` directory row for each new range (naming R as its
//! source). Every process reads the directory again within [`crate::config::ListingConfig::refresh`] and writes
//! the keys of a new span into its new range, readers read a `Moving` range together with its source, and once
//! [`crate::config::ListingConfig::split_wait`] has passed (a writer that read the directory earlier has issued its
//! write by then: the commit window's assumption), a maintenance copies R's rows of each new span into the new
//! range, each with its own write time (so that a newer write or delete made there meanwhile stays), marks the
//! range `Done`, and deletes the copied rows from R.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use saltblob_core::backend::Namespace;
use saltblob_core::version::VersionId;
use saltblob_core::{Error, Result};

use super::{Directory, RangeEntry, RangeState, SCOPE, successor};
use crate::clock::next_timestamp;
use crate::session::Cluster;
use crate::statements::{V, key_values};
use crate::{error, lwt};

/// Keys read per request when a range is counted or copied.
const PAGE: usize = 5000;
/// Rows copied at once.
const COPY_CONCURRENCY: usize = 32;
/// Key of the maintenance lease in the meta namespace.
const LEASE_KEY: &[u8] = b"listing-maintenance";
/// How long a maintenance lease holds (a maintainer that dies frees it by then).
const LEASE_TTL: Duration = Duration::from_secs(3600);

/// What one maintenance of the listing index did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitReport {
    /// Ranges in the directory when it started.
    pub ranges: usize,
    /// Ranges whose rows were counted (their counter was over the bound).
    pub counted: usize,
    /// Rows of the largest range counted.
    pub largest_counted: u64,
    /// New ranges begun by splits (`Moving` until a later maintenance finishes them).
    pub new_ranges: usize,
    /// Moves finished.
    pub moves_finished: usize,
    /// Rows copied into finished ranges.
    pub rows_copied: u64,
    /// Whether another maintenance held the lease (nothing was done).
    pub skipped: bool,
}

/// Runs one maintenance of the listing index, unless another runs (then `skipped`).
///
/// # Errors
/// A store error; the lease is then released (or expires), and a later maintenance goes on from where this one
/// stopped.
pub(crate) async fn maintain(cluster: &Cluster) -> Result<SplitReport> {
    cluster.flush_counts(true).await;
    let token = Bytes::copy_from_slice(&VersionId::generate().to_be_bytes());
    if !take_lease(cluster, &token).await? {
        return Ok(SplitReport {
            skipped: true,
            ..SplitReport::default()
        });
    }
    let outcome = run(cluster).await;
    release_lease(cluster, &token).await;
    if outcome
        .as_ref()
        .is_ok_and(|r| r.new_ranges + r.moves_finished > 0)
    {
        cluster.directory.invalidate().await;
    }
    outcome
}

async fn run(cluster: &Cluster) -> Result<SplitReport> {
    let dir = cluster.read_directory().await?;
    let mut report = SplitReport {
        ranges: dir.entries.len(),
        ..SplitReport::default()
    };
    let config = &cluster.config.listing;
    let ripe = next_timestamp()
        .saturating_sub(i64::try_from(config.split_wait.as_micros()).unwrap_or(i64::MAX));
    for i in 0..dir.entries.len() {
        let entry = &dir.entries[i];
        if entry.state == RangeState::Moving && entry.since <= ripe {
            report.rows_copied += finish_move(cluster, &dir, i).await?;
            report.moves_finished += 1;
        }
    }
    let counts = cluster.range_counts().await?;
    for (i, entry) in dir.entries.iter().enumerate() {
        let counted = counts.get(&entry.id).copied().unwrap_or(0);
        if counted <= i64::try_from(config.max_rows).unwrap_or(i64::MAX) || busy(&dir, i) {
            continue;
        }
        let (rows, boundaries) = count(cluster, &dir, i).await?;
        report.counted += 1;
        report.largest_counted = report.largest_counted.max(rows);
        let rows_i = i64::try_from(rows).unwrap_or(i64::MAX);
        if rows <= config.max_rows {
            cluster.add_count(&entry.id, rows_i - counted).await?;
            continue;
        }
        let points = split_points(&boundaries, rows, config.max_rows / 2);
        let per_piece = rows_i / i64::try_from(points.len() + 1).unwrap_or(1);
        let new: Vec<RangeEntry> = points
            .into_iter()
            .map(|start| RangeEntry {
                start,
                id: Bytes::copy_from_slice(&VersionId::generate().to_be_bytes()),
                state: RangeState::Moving,
                source: Some(entry.id.clone()),
                since: 0,
            })
            .collect();
        // All of a split's new ranges at once: a writer that saw only some would put a key of a later one in an
        // earlier one, where its reads never look.
        if new.is_empty() || !cluster.add_ranges(&new).await? {
            continue;
        }
        report.new_ranges += new.len();
        for piece in &new {
            cluster.add_count(&piece.id, per_piece).await?;
        }
        cluster.add_count(&entry.id, per_piece - counted).await?;
    }
    Ok(report)
}

/// Whether range `i` takes part in a move (a source, or just before a `Moving` range): it must not split
/// meanwhile.
fn busy(dir: &Directory, i: usize) -> bool {
    let id = &dir.entries[i].id;
    dir.entries[i].state == RangeState::Moving
        || dir
            .entries
            .iter()
            .any(|e| e.state == RangeState::Moving && e.source.as_ref() == Some(id))
}

/// The rows of range `i`, and the first key of each page of them with the rows before it: pages of an eighth of
/// the bound (at most [`PAGE`]), so that a split can cut the range within an eighth of a piece.
async fn count(cluster: &Cluster, dir: &Directory, i: usize) -> Result<(u64, Vec<(u64, Bytes)>)> {
    let entry = &dir.entries[i];
    let end = dir.end_of(i).cloned();
    let per_page = usize::try_from(cluster.config.listing.max_rows / 8)
        .unwrap_or(PAGE)
        .clamp(1, PAGE);
    let mut lower = entry.start.clone();
    let mut rows = 0u64;
    let mut boundaries = Vec::new();
    loop {
        let page = cluster
            .read_range(&entry.id, &lower, end.as_deref(), per_page)
            .await?;
        if let Some((first, _)) = page.first() {
            boundaries.push((rows, first.clone()));
        }
        rows += page.len() as u64;
        match page.last() {
            Some((last, _)) if page.len() >= per_page => lower = successor(last),
            _ => return Ok((rows, boundaries)),
        }
    }
}

/// Where a range of `rows` rows, whose page boundaries are `boundaries` (rows before, first key), is cut so that
/// each piece holds about `per_piece` rows: the boundary nearest each multiple of it (never the range's first
/// key).
fn split_points(boundaries: &[(u64, Bytes)], rows: u64, per_piece: u64) -> Vec<Bytes> {
    let pieces = rows.div_ceil(per_piece.max(1)).max(2);
    let per_piece = rows / pieces;
    let mut points: Vec<Bytes> = (1..pieces)
        .filter_map(|k| {
            let target = k * per_piece;
            boundaries
                .iter()
                .skip(1)
                .min_by_key(|(before, _)| before.abs_diff(target))
                .map(|(_, key)| key.clone())
        })
        .collect();
    points.dedup();
    points
}

/// Copies the rows of `Moving` range `i`'s span from its source, marks it `Done` and deletes the copied rows from
/// the source; returns the rows copied.
async fn finish_move(cluster: &Cluster, dir: &Directory, i: usize) -> Result<u64> {
    let entry = &dir.entries[i];
    let source = entry
        .source
        .clone()
        .ok_or_else(|| error::malformed("listing directory", "a moving range names no source"))?;
    let end = dir.end_of(i).cloned();
    let mut lower = entry.start.clone();
    let mut copied = 0u64;
    loop {
        let page = cluster
            .read_range(&source, &lower, end.as_deref(), PAGE)
            .await?;
        let full = page.len() >= PAGE;
        let last = page.last().map(|(k, _)| k.clone());
        copied += page.len() as u64;
        stream::iter(page)
            .map(|(key, ts)| cluster.index_write_in(&entry.id, key, ts))
            .buffer_unordered(COPY_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        match last {
            Some(last) if full => lower = successor(&last),
            _ => break,
        }
    }
    let values = vec![
        V::Tiny(SCOPE),
        V::Blob(entry.start.clone()),
        V::Blob(entry.id.clone()),
    ];
    let what = "marking a listing range done";
    let (applied, _) =
        lwt::execute(cluster, what, &cluster.st.listing.finish_range, values).await?;
    if !applied {
        return Err(Error::backend(
            error::NAME,
            format!(
                "the listing range starting at {:?} changed while its rows were moved",
                entry.start
            ),
            true,
        ));
    }
    // The copies are in place and read: the source's rows of the span go (its reads stop at the span anyway).
    let mut values = vec![
        V::Big(next_timestamp()),
        V::Blob(source),
        V::Blob(entry.start.clone()),
    ];
    let st = match end {
        Some(end) => {
            values.push(V::Blob(end));
            &cluster.st.listing.clear_below
        }
        None => &cluster.st.listing.clear_from,
    };
    let what = || "clearing moved rows of the listing index".to_owned();
    cluster
        .run(what, true, || cluster.session.execute_unpaged(st, &values))
        .await?;
    Ok(copied)
}

/// Takes the maintenance lease for `token`; false when another maintenance holds it.
async fn take_lease(cluster: &Cluster, token: &Bytes) -> Result<bool> {
    let mut values = key_values(Namespace::Meta, LEASE_KEY);
    values.push(V::Blob(token.clone()));
    values.push(V::Int(
        i32::try_from(LEASE_TTL.as_secs()).unwrap_or(i32::MAX),
    ));
    let what = "taking the listing maintenance lease";
    let (applied, _) = lwt::execute(cluster, what, &cluster.st.listing.take_lease, values).await?;
    Ok(applied)
}

/// Releases the lease `token` holds; a failure is logged (it expires).
async fn release_lease(cluster: &Cluster, token: &Bytes) {
    let mut values = key_values(Namespace::Meta, LEASE_KEY);
    values.push(V::Blob(token.clone()));
    let st = &cluster.st.records(Namespace::Meta).delete_if_equal;
    let what = "releasing the listing maintenance lease";
    if let Err(e) = lwt::execute(cluster, what, st, values).await {
        tracing::warn!("could not release the listing maintenance lease (it expires): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cut_near_even_pieces_at_page_boundaries() {
        let boundaries: Vec<(u64, Bytes)> = (0..10)
            .map(|p| (p * 100, Bytes::from(format!("k{:04}", p * 100))))
            .collect();
        assert_eq!(split_points(&boundaries, 1000, 500), [Bytes::from("k0500")]);
        assert_eq!(
            split_points(&boundaries, 1000, 250),
            ["k0200", "k0500", "k0700"].map(Bytes::from)
        );
        assert!(
            split_points(&boundaries[..1], 100, 10).is_empty(),
            "never the first key"
        );
    }
}
