//! The listing directory as a process holds it ([`Directory`]: every range of the listing index by start, see
//! [`crate::listing`]) and the copy the session keeps ([`DirectoryCache`]), read again once older than
//! [`crate::config::ListingConfig::refresh`]. A leaf below the session: reading and changing the directory is
//! [`crate::listing`]'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use saltblob_core::Result;

use crate::error;

/// The id of the first range, which starts at the empty key.
pub const ROOT_RANGE: [u8; 16] = [0; 16];

/// A range's state in the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeState {
    /// Its rows are all in its own partition.
    Done,
    /// Split from the range before it: rows of its span may still be only in that range's partition.
    Moving,
}

impl RangeState {
    pub(crate) fn tag(self) -> i8 {
        match self {
            RangeState::Done => 0,
            RangeState::Moving => 1,
        }
    }

    pub(crate) fn of(tag: i8) -> Result<Self> {
        match tag {
            0 => Ok(RangeState::Done),
            1 => Ok(RangeState::Moving),
            other => Err(error::malformed(
                "listing directory",
                format!("unknown range state {other}"),
            )),
        }
    }
}

/// One range of the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeEntry {
    /// Its first key (inclusive); the next range's start ends it.
    pub start: Bytes,
    /// Its partition in `listing`.
    pub id: Bytes,
    /// Whether its rows are all in its partition.
    pub state: RangeState,
    /// While `Moving`: the partition of the range it was split from, which may still hold rows of its span.
    pub source: Option<Bytes>,
    /// When its state was written (Unix µs, the row's write time): a `Moving` range is finished once
    /// [`crate::config::ListingConfig::split_wait`] has passed since.
    pub since: i64,
}

/// The directory: every range, by start, the first starting at the empty key.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    pub(crate) entries: Vec<RangeEntry>,
}

impl Directory {
    /// The index of the range that holds `key`.
    pub(crate) fn range_of(&self, key: &[u8]) -> usize {
        self.entries
            .partition_point(|e| e.start.as_ref() <= key)
            .saturating_sub(1)
    }

    /// Where range `i` ends (exclusive), `None` for the last one.
    pub(crate) fn end_of(&self, i: usize) -> Option<&Bytes> {
        self.entries.get(i + 1).map(|e| &e.start)
    }

    /// The ranges, by start.
    pub fn entries(&self) -> &[RangeEntry] {
        &self.entries
    }
}

/// The directory as this process last read it, and when. Readers and writers of one process share it; one of
/// them refreshes it at a time (it holds the lock meanwhile).
pub(crate) struct DirectoryCache {
    cached: tokio::sync::Mutex<Option<(Arc<Directory>, Instant)>>,
}

impl DirectoryCache {
    pub(crate) fn new() -> Self {
        Self {
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The copy at hand and when it was read; hold the guard to replace it.
    pub(crate) async fn lock(
        &self,
    ) -> tokio::sync::MutexGuard<'_, Option<(Arc<Directory>, Instant)>> {
        self.cached.lock().await
    }

    /// Forgets the directory: the next use reads it again (after this process changed it).
    pub(crate) async fn invalidate(&self) {
        *self.cached.lock().await = None;
    }
}

/// Index rows a process wrote (+1) and deleted (-1) per range since it last added them to the ranges' counters.
#[derive(Debug)]
pub(crate) struct PendingCounts {
    by_range: HashMap<Bytes, i64>,
    changes: u64,
    since: Instant,
}

/// Changes after which a process adds its tally to the counters.
const FLUSH_CHANGES: u64 = 1000;
/// Time after which it does, whatever the changes.
const FLUSH_AFTER: Duration = Duration::from_secs(10);

impl PendingCounts {
    pub(crate) fn new() -> Self {
        Self {
            by_range: HashMap::new(),
            changes: 0,
            since: Instant::now(),
        }
    }

    /// Adds `delta` rows to range `range`'s tally.
    pub(crate) fn note(&mut self, range: &Bytes, delta: i64) {
        *self.by_range.entry(range.clone()).or_default() += delta;
        self.changes += 1;
    }

    /// The tally, taken, when it is due (or `force`d) and not empty.
    pub(crate) fn take(&mut self, force: bool) -> Option<HashMap<Bytes, i64>> {
        let due = force || self.changes >= FLUSH_CHANGES || self.since.elapsed() >= FLUSH_AFTER;
        if !due || self.by_range.is_empty() {
            return None;
        }
        self.changes = 0;
        self.since = Instant::now();
        Some(std::mem::take(&mut self.by_range))
    }
}
