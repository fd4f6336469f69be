//! The listing index (schema format 2; `docs/format.md`, "Listing index"): every blob key in key order, in range
//! partitions that split as they grow, so that a listing page reads a bounded number of rows whatever the number
//! of keys, and a delimiter listing skips a common prefix with one range read.
//!
//! - Table `listing ((range), key)`: one partition per key range, the keys of `[start, next start)` in order (a
//!   regular column `present` carries each row's write time).
//! - Table `listing_ranges ((scope), start)`: the directory, one partition, one row per range: where it starts,
//!   its id, and whether it is still `Moving` (split from another range, its source, whose rows of its span may
//!   not all be copied yet: a reader merges both). The first range, which starts at the empty key and is
//!   [`ROOT_RANGE`], has no row: every directory has it.
//! - Table `listing_counts (range)`: a counter per range, the rows written less those deleted, as the processes
//!   tallied them: the hint that a range is due for a split.
//!
//! **Kept with the manifests, by write time.** A manifest write (`crate::backend`) first writes the key's index
//! row with the timestamp the manifest write will carry, then the manifest; a manifest delete deletes the
//! manifest, then the index row with the delete's timestamp. Both tables resolve each key by the latest timestamp,
//! so the index holds every key whose manifest is present (a listing never misses a committed key); a writer that
//! dies between the two writes leaves an index row without a manifest, which a listing skips (it reads each
//! listed key's manifest) and removes once it is older than the commit window ([`STALE_AFTER`]), with a delete
//! at that row's own write time, which cannot remove a newer write. A conditional (Paxos) write, whose timestamp
//! the cluster chooses, writes its index row again with that timestamp once it is read back.
//!
//! **Splits** (`split.rs`): a range past [`crate::config::ListingConfig::max_rows`] rows (as counted when written)
//! is split at even points by the maintenance that gc runs: the new ranges' directory rows are written `Moving`,
//! naming the range as their source; every process reads the directory again within
//! [`crate::config::ListingConfig::refresh`] and writes keys of a new span into its new range, and readers read a
//! `Moving` range together with its source. Once [`crate::config::ListingConfig::split_wait`] has passed, a later
//! maintenance copies the source's rows of the span (each with its own write time, so that no newer write or
//! delete is undone), marks the range `Done` and clears the copied rows from the source. `build.rs` builds the
//! index of a keyspace written by a format-1 build (`saltblob upgrade`) and reconciles it with the manifests;
//! `stale.rs` finds (and deletes) rows without a manifest; `crate::index_check` compares index and manifests for `fsck`.

mod build;
mod split;
mod stale;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use saltblob_core::Result;

use saltblob_core::backend::Namespace;

use scylla::statement::batch::{Batch, BatchType};

use crate::clock::next_timestamp;
pub use crate::directory::{Directory, ROOT_RANGE, RangeEntry, RangeState};
use crate::session::Cluster;
use crate::statements::{LimitRow, V, key_values};
use crate::{error, lwt};

pub(crate) use self::build::build;
pub use self::build::{BuildReport, BuildSteps};
pub use self::split::SplitReport;
pub(crate) use self::split::maintain;
pub(crate) use self::stale::sweep_stale;

/// The first range, implicit in every directory: it starts at the empty key.
pub(crate) fn root() -> RangeEntry {
    RangeEntry {
        start: Bytes::new(),
        id: Bytes::from_static(&ROOT_RANGE),
        state: RangeState::Done,
        source: None,
        since: 0,
    }
}

/// The directory's partition (one per keyspace).
pub(crate) const SCOPE: i8 = 0;

/// A directory row as read: start, range id, state, source, and the write time of the state.
type DirectoryRow = (Bytes, Bytes, i8, Option<Bytes>, Option<i64>);

/// How long an index row without a manifest may be a put in flight (its manifest write still to land): the
/// commit window of the core's protocols (`docs/guarantees.md`). An older one is stale, and a listing removes it.
pub const STALE_AFTER: Duration = Duration::from_secs(600);

/// Keys read per index request of a listing, at least.
const READ_AT_LEAST: usize = 64;

impl Cluster {
    /// The directory, read again when the copy at hand is older than
    /// [`crate::config::ListingConfig::refresh`].
    pub(crate) async fn directory(&self) -> Result<Arc<Directory>> {
        let mut cached = self.directory.lock().await;
        if let Some((dir, at)) = cached.as_ref()
            && at.elapsed() < self.config.listing.refresh
        {
            return Ok(Arc::clone(dir));
        }
        let dir = Arc::new(self.read_directory().await?);
        *cached = Some((Arc::clone(&dir), Instant::now()));
        Ok(dir)
    }

    /// Reads the directory from the cluster.
    pub(crate) async fn read_directory(&self) -> Result<Directory> {
        let what = "reading the listing directory";
        let pager = self
            .session
            .execute_iter(self.st.listing.directory.clone(), (SCOPE,))
            .await
            .map_err(|e| error::driver(format!("{what}: {e}"), true, e))?;
        let rows: Vec<DirectoryRow> = pager
            .rows_stream::<DirectoryRow>()
            .map_err(|e| error::shape(what, e))?
            .try_collect()
            .await
            .map_err(|e| error::driver(format!("{what}: {e}"), true, e))?;
        let mut entries = rows
            .into_iter()
            .map(|(start, id, state, source, since)| {
                Ok(RangeEntry {
                    start,
                    id,
                    state: RangeState::of(state)?,
                    source,
                    since: since.unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // The first range is implicit: it starts at the empty key and is never split away.
        if entries.first().is_none_or(|e| !e.start.is_empty()) {
            entries.insert(0, root());
        }
        Ok(Directory { entries })
    }

    /// Writes a directory row unless one starts there already; returns whether it did.
    pub(crate) async fn add_range(&self, entry: &RangeEntry) -> Result<bool> {
        let values = range_values(entry);
        let what = "adding a range to the listing directory";
        let (applied, _) = lwt::execute(self, what, &self.st.listing.add_range, values).await?;
        Ok(applied)
    }

    /// Writes the directory rows of `entries` in one conditional batch (all or none: a writer never sees some of a
    /// split's new ranges without the others), unless one of them starts where a range does already; returns
    /// whether they were written.
    pub(crate) async fn add_ranges(&self, entries: &[RangeEntry]) -> Result<bool> {
        let mut batch = Batch::new(BatchType::Logged);
        for _ in entries {
            batch.append_statement(self.st.listing.add_range.clone());
        }
        batch.set_consistency(self.config.write_consistency);
        batch.set_serial_consistency(Some(self.config.serial_consistency));
        batch.set_is_idempotent(false);
        let values: Vec<Vec<V>> = entries.iter().map(range_values).collect();
        let what = || "adding ranges to the listing directory".to_owned();
        let result = self
            .run(what, false, || self.session.batch(&batch, &values))
            .await?;
        Ok(lwt::outcome(result, "adding ranges to the listing directory")?.0)
    }

    /// Writes record `key` of the meta namespace, plainly.
    pub(crate) async fn put_meta(&self, key: &[u8], value: Bytes) -> Result<()> {
        let mut row = key_values(Namespace::Meta, key);
        row.extend([V::Blob(value), V::Big(next_timestamp())]);
        let what = || "write of a meta record".to_owned();
        let st = &self.st.records(Namespace::Meta).put;
        self.run(what, true, || self.session.execute_unpaged(st, &row))
            .await
            .map(drop)
    }

    /// Deletes record `key` of the meta namespace, plainly.
    pub(crate) async fn delete_meta(&self, key: &[u8]) -> Result<()> {
        let mut row = vec![V::Big(next_timestamp())];
        row.extend(key_values(Namespace::Meta, key));
        let what = || "delete of a meta record".to_owned();
        let st = &self.st.records(Namespace::Meta).delete;
        self.run(what, true, || self.session.execute_unpaged(st, &row))
            .await
            .map(drop)
    }

    /// Writes the index row of `key` with write time `ts` (the manifest write's), in the range the directory
    /// gives it.
    pub(crate) async fn index_insert(&self, key: &[u8], ts: i64) -> Result<()> {
        let dir = self.directory().await?;
        let range = &dir.entries[dir.range_of(key)].id;
        self.index_write_in(range, Bytes::copy_from_slice(key), ts)
            .await
    }

    /// Writes row `key` of range partition `range` with write time `ts`.
    pub(crate) async fn index_write_in(&self, range: &Bytes, key: Bytes, ts: i64) -> Result<()> {
        let values = (range.clone(), key, ts);
        let what = || "write of a listing index row".to_owned();
        self.run(what, true, || {
            self.session
                .execute_unpaged(&self.st.listing.insert, &values)
        })
        .await?;
        self.count(range, 1).await;
        Ok(())
    }

    /// Deletes the index row of `key` written at or before `ts` (the manifest delete's timestamp, or the row's
    /// own write time).
    pub(crate) async fn index_remove(&self, key: &[u8], ts: i64) -> Result<()> {
        let dir = self.directory().await?;
        let range = &dir.entries[dir.range_of(key)].id;
        self.index_remove_in(range, key, ts).await
    }

    /// Deletes row `key` of range partition `range` written at or before `ts`.
    pub(crate) async fn index_remove_in(&self, range: &Bytes, key: &[u8], ts: i64) -> Result<()> {
        let values = (ts, range.clone(), Bytes::copy_from_slice(key));
        let what = || "delete of a listing index row".to_owned();
        self.run(what, true, || {
            self.session
                .execute_unpaged(&self.st.listing.delete, &values)
        })
        .await?;
        self.count(range, -1).await;
        Ok(())
    }

    /// Adds `delta` to this process's tally of range `range`'s rows, and adds the tally to the counters when due.
    async fn count(&self, range: &Bytes, delta: i64) {
        let due = {
            let mut counts = self
                .counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            counts.note(range, delta);
            counts.take(false)
        };
        if let Some(due) = due {
            self.add_counts(due).await;
        }
    }

    /// Adds this process's tally to the counters now if `force`, else when due; failures are logged (the counters
    /// are hints).
    pub(crate) async fn flush_counts(&self, force: bool) {
        let due = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(force);
        if let Some(due) = due {
            self.add_counts(due).await;
        }
    }

    async fn add_counts(&self, tally: std::collections::HashMap<Bytes, i64>) {
        for (range, delta) in tally {
            if let Err(e) = self.add_count(&range, delta).await {
                tracing::debug!("could not add to a listing range's counter (a hint only): {e}");
            }
        }
    }

    /// Adds `delta` to the counter of range `range`.
    pub(crate) async fn add_count(&self, range: &Bytes, delta: i64) -> Result<()> {
        if delta == 0 {
            return Ok(());
        }
        let values = (scylla::value::Counter(delta), range.clone());
        let what = || "update of a listing range's counter".to_owned();
        self.run(what, false, || {
            self.session
                .execute_unpaged(&self.st.listing.add_count, &values)
        })
        .await
        .map(drop)
    }

    /// Every range's counter: the rows written less those deleted, as the processes added them up.
    pub(crate) async fn range_counts(&self) -> Result<std::collections::HashMap<Bytes, i64>> {
        let what = "reading the listing ranges' counters";
        let pager = self
            .session
            .execute_iter(self.st.listing.counts.clone(), ())
            .await
            .map_err(|e| error::driver(format!("{what}: {e}"), true, e))?;
        pager
            .rows_stream::<(Bytes, Option<scylla::value::Counter>)>()
            .map_err(|e| error::shape(what, e))?
            .map_ok(|(range, rows)| (range, rows.map_or(0, |c| c.0)))
            .try_collect()
            .await
            .map_err(|e| error::driver(format!("{what}: {e}"), true, e))
    }

    /// The keys of the index from `from` (inclusive), below `until` (exclusive) when given, in order, at least
    /// `want` of them when there are and no more, each with its write time (a range partition is read at least
    /// [`READ_AT_LEAST`] rows at a time; those past `want` are dropped). A range still `Moving` is
    /// read together with the range before it.
    pub(crate) async fn index_keys(
        &self,
        from: &[u8],
        until: Option<&[u8]>,
        want: usize,
    ) -> Result<Vec<(Bytes, i64)>> {
        let dir = self.directory().await?;
        let mut out: Vec<(Bytes, i64)> = Vec::new();
        let mut i = dir.range_of(from);
        let mut lower = Bytes::copy_from_slice(from);
        while let Some(entry) = dir.entries.get(i)
            && out.len() < want
        {
            if entry.start > lower {
                lower = entry.start.clone();
            }
            if until.is_some_and(|u| lower.as_ref() >= u) {
                break;
            }
            let upper = match (dir.end_of(i), until) {
                (Some(end), Some(u)) => Some(if end.as_ref() < u { &end[..] } else { u }),
                (Some(end), None) => Some(&end[..]),
                (None, u) => u,
            };
            let left = (want - out.len()).max(READ_AT_LEAST);
            let cut = |rows: &Vec<(Bytes, i64)>| rows.len() >= left;
            let rows = self.read_range(&entry.id, &lower, upper, left).await?;
            let (rows, more) = match &entry.source {
                Some(source) if entry.state == RangeState::Moving => {
                    let old = self.read_range(source, &lower, upper, left).await?;
                    let more = cut(&rows) || cut(&old);
                    (merge(rows, old, left), more)
                }
                _ => {
                    let more = cut(&rows);
                    (rows, more)
                }
            };
            if let Some((last, _)) = rows.last() {
                lower = successor(last);
            }
            out.extend(rows);
            if !more {
                i += 1;
            }
        }
        out.truncate(want);
        Ok(out)
    }

    /// Those of `keys` that range partition `range` holds.
    pub(crate) async fn index_has(&self, range: &Bytes, keys: Vec<Bytes>) -> Result<Vec<Bytes>> {
        self.index_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let values = (range.clone(), keys);
        let what = || "read of the listing index".to_owned();
        let result = self
            .run(what, true, || {
                self.session
                    .execute_unpaged(&self.st.listing.has_keys, &values)
            })
            .await?;
        let rows = result
            .into_rows_result()
            .map_err(|e| error::shape("listing index lookup", e))?;
        rows.rows::<(Bytes,)>()
            .map_err(|e| error::shape("listing index lookup", e))?
            .map(|row| {
                row.map(|(k,)| k)
                    .map_err(|e| error::shape("listing index lookup", e))
            })
            .collect()
    }

    /// Rows of range partition `range` from `lower` (inclusive) below `upper`, at most `limit` (at least 1).
    pub(crate) async fn read_range(
        &self,
        range: &Bytes,
        lower: &[u8],
        upper: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, i64)>> {
        let limit = i32::try_from(limit.max(1)).unwrap_or(i32::MAX);
        let mut values = vec![
            V::Blob(range.clone()),
            V::Blob(Bytes::copy_from_slice(lower)),
        ];
        let st = match upper {
            Some(u) => {
                values.push(V::Blob(Bytes::copy_from_slice(u)));
                &self.st.listing.read_below
            }
            None => &self.st.listing.read_from,
        };
        self.index_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let what = || "read of the listing index".to_owned();
        let result = self
            .run(what, true, || {
                self.session
                    .execute_unpaged(st, LimitRow(values.clone(), limit))
            })
            .await?;
        let rows = result
            .into_rows_result()
            .map_err(|e| error::shape("listing index read", e))?;
        rows.rows::<(Bytes, Option<i64>)>()
            .map_err(|e| error::shape("listing index read", e))?
            .map(|row| {
                let (key, ts) = row.map_err(|e| error::shape("listing index read", e))?;
                Ok((key, ts.unwrap_or(0)))
            })
            .collect()
    }
}

/// The values of `entry`'s directory row, as the statement that adds it binds them.
fn range_values(entry: &RangeEntry) -> Vec<V> {
    vec![
        V::Tiny(SCOPE),
        V::Blob(entry.start.clone()),
        V::Blob(entry.id.clone()),
        V::Tiny(entry.state.tag()),
        V::OptBlob(entry.source.clone()),
    ]
}

/// Two key-ordered lists of index rows merged in order, a key in both once (its later write time), and no key past
/// the last of a list that was cut (read with `limit` and full: a key beyond its last could be missing from it).
fn merge(a: Vec<(Bytes, i64)>, b: Vec<(Bytes, i64)>, limit: usize) -> Vec<(Bytes, i64)> {
    let bound = [&a, &b]
        .into_iter()
        .filter(|rows| rows.len() >= limit)
        .filter_map(|rows| rows.last().map(|(k, _)| k.clone()))
        .min();
    let mut all: Vec<(Bytes, i64)> = a.into_iter().chain(b).collect();
    all.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    all.dedup_by(|later, earlier| later.0 == earlier.0);
    if let Some(bound) = bound {
        all.retain(|(k, _)| *k <= bound);
    }
    all
}

/// The smallest key greater than every key starting with `prefix`, or `None` if there is none.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The smallest key after `key`.
pub(crate) fn successor(key: &[u8]) -> Bytes {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    Bytes::from(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(starts: &[&str]) -> Directory {
        Directory {
            entries: starts
                .iter()
                .enumerate()
                .map(|(i, s)| RangeEntry {
                    start: Bytes::copy_from_slice(s.as_bytes()),
                    id: Bytes::from(vec![i as u8; 16]),
                    state: RangeState::Done,
                    source: None,
                    since: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn keys_fall_in_the_range_that_starts_at_or_before_them() {
        let d = dir(&["", "g", "p"]);
        assert_eq!(d.range_of(b""), 0);
        assert_eq!(d.range_of(b"a"), 0);
        assert_eq!(d.range_of(b"g"), 1);
        assert_eq!(d.range_of(b"ozzz"), 1);
        assert_eq!(d.range_of(b"p"), 2);
        assert_eq!(d.range_of(b"\xff"), 2);
        assert_eq!(d.end_of(0).map(|b| &b[..]), Some(&b"g"[..]));
        assert_eq!(d.end_of(2), None);
    }

    #[test]
    fn merged_rows_are_ordered_once_each_and_stop_where_a_cut_list_may_miss_keys() {
        let rows = |v: &[(&str, i64)]| -> Vec<(Bytes, i64)> {
            v.iter()
                .map(|(k, t)| (Bytes::copy_from_slice(k.as_bytes()), *t))
                .collect()
        };
        let merged = merge(rows(&[("a", 1), ("c", 5)]), rows(&[("b", 2), ("c", 7)]), 10);
        assert_eq!(merged, rows(&[("a", 1), ("b", 2), ("c", 7)]));
        let full: Vec<(Bytes, i64)> = (0..READ_AT_LEAST)
            .map(|i| (Bytes::from(format!("k{i:03}")), 1))
            .collect();
        let last = full.last().map(|(k, _)| k.clone()).unwrap();
        let merged = merge(full, rows(&[("k999", 1)]), READ_AT_LEAST);
        assert_eq!(merged.last().map(|(k, _)| k.clone()), Some(last));
    }
}
