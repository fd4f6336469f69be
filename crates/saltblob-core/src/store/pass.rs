//! Passes over the manifests of a store ([`BlobStore::pass`]): every blob once, read a page at a time with the
//! manifests' values, for the work that visits them all (census, fsck, gc's expiry, relayout, encrypt, rekey).
//!
//! The rule: a pass over the **whole store** reads it by the ranges its backend splits its manifests into
//! ([`crate::backend::ChunkStore::manifest_ranges`]: token ranges on a cluster, one range in key order on an
//! embedded store), several at once, in no key order; a pass under a **prefix** reads one range, the prefix's
//! keys in key order (a listing). Where a pass stands is kept per range ([`PassProgress`]: pending, after a key,
//! done), which a caller may save as text and resume from, so that an interrupted pass reads no range twice and
//! skips none. A range whose reads still fail after retries is reported ([`PassEvent::Unread`]) and stays where it
//! stood, never passed over in silence.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};

use crate::backend::{Namespace, ScanRange};
use crate::base::error::{Error, Result};
use crate::base::retry::Backoff;
use crate::base::shown::{escape_key, hex, unescape_key, unhex};
use crate::format::manifest::Manifest;
use crate::schedule;
use crate::store::BlobStore;

/// Manifest records read per page of a range.
pub const PASS_PAGE: usize = 1000;

/// How a page read that failed with a retryable error is tried again, on a backend that does not retry by itself:
/// 4 attempts, after 100, 400 and 1600 ms.
const PAGE_READ: Backoff = Backoff::new(4, Duration::from_millis(100)).growing(4);

/// The first line of a pass's progress as text ([`PassProgress::to_text`]).
const TEXT_FORMAT: &str = "saltblob-pass 1";

/// Where one range of a pass stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeState {
    /// Not read yet.
    Pending,
    /// Handled up to this key, the last one handled, in the range's order: the pass resumes right after it.
    After(Bytes),
    /// Read and handled to its end.
    Done,
}

/// Where a pass stands, range by range: made by [`BlobStore::plan_pass`], read by [`BlobStore::pass`], moved on
/// by its caller as it handles what the pass reads ([`PassProgress::record_page`], [`PassProgress::record_key`]),
/// and kept as text between runs ([`PassProgress::to_text`], [`PassProgress::from_text`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassProgress {
    /// The prefix of the pass: empty for the whole store.
    prefix: Bytes,
    /// The ranges, in the backend's order, each with where it stands.
    ranges: Vec<(ScanRange, RangeState)>,
    /// Ranges read at once unless the options say otherwise: the backend's choice.
    in_flight: usize,
}

impl PassProgress {
    /// The prefix of the pass: empty for the whole store.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The ranges, in order, with where each stands.
    pub fn ranges(&self) -> impl Iterator<Item = (&ScanRange, &RangeState)> {
        self.ranges.iter().map(|(r, s)| (r, s))
    }

    /// How many ranges the backend serves well at once: what [`BlobStore::pass`] reads at once unless its options
    /// say otherwise.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How many ranges the pass has.
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// How many ranges are done.
    pub fn ranges_done(&self) -> usize {
        self.ranges
            .iter()
            .filter(|(_, s)| *s == RangeState::Done)
            .count()
    }

    /// Whether every range is done.
    pub fn is_complete(&self) -> bool {
        self.ranges_done() == self.ranges.len()
    }

    /// Whether the pass reads its keys in key order: one range under a prefix, or a backend that does not split
    /// (a resume after a key then means what it says, as `--after KEY` does).
    pub fn is_ordered(&self) -> bool {
        matches!(self.ranges.as_slice(), [(range, _)] if range.is_ordered())
    }

    /// Records that every entry of `page` (a page of this pass) has been handled: its range stands after the last
    /// key the page read, or is done if the page was its last.
    pub fn record_page(&mut self, page: &PassPage) {
        if page.done {
            self.set(page.range, RangeState::Done);
        } else if let Some(last) = &page.last {
            self.set(page.range, RangeState::After(last.clone()));
        }
    }

    /// Records that `key`, an entry of range `range`, and every entry before it in that range have been handled:
    /// for a caller that keeps its progress entry by entry (a pass that writes, so that none is done twice).
    pub fn record_key(&mut self, range: usize, key: &Bytes) {
        self.set(range, RangeState::After(key.clone()));
    }

    /// Sets the state of range `range` (one of this pass's), unless it is done already.
    fn set(&mut self, range: usize, state: RangeState) {
        if let Some((_, current)) = self.ranges.get_mut(range)
            && *current != RangeState::Done
        {
            *current = state;
        }
    }

    /// The progress as text, to save between runs: a first line naming the format, then `prefix KEY`,
    /// `in_flight N`, and one line per range, `range DESCRIPTOR STATE`, the descriptor in hex (`ordered` for
    /// [`ScanRange::ordered`]) and the state `pending`, `done` or `after KEY`; keys escaped as
    /// [`crate::escape_key`] writes them.
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "{TEXT_FORMAT}\nprefix {}\nin_flight {}\n",
            escape_key(&self.prefix),
            self.in_flight
        );
        for (range, state) in &self.ranges {
            let descriptor = if range.is_ordered() {
                "ordered".to_owned()
            } else {
                hex(range.as_bytes())
            };
            let state = match state {
                RangeState::Pending => "pending".to_owned(),
                RangeState::Done => "done".to_owned(),
                RangeState::After(key) => format!("after {}", escape_key(key)),
            };
            let _ = writeln!(text, "range {descriptor} {state}");
        }
        text
    }

    /// Reads back what [`PassProgress::to_text`] wrote.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the line that is not of the format.
    pub fn from_text(text: &str) -> Result<Self> {
        let mut lines = text.lines().enumerate();
        let bad =
            |n: usize, why: &str| Error::invalid("pass progress", format!("line {}: {why}", n + 1));
        match lines.next() {
            Some((_, TEXT_FORMAT)) => {}
            _ => {
                return Err(bad(0, &format!("the first line is not \"{TEXT_FORMAT}\"")));
            }
        }
        let mut prefix = None;
        let mut in_flight = None;
        let mut ranges = Vec::new();
        for (n, line) in lines {
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "prefix" => {
                    prefix = Some(Bytes::from(unescape_key(rest).map_err(|e| bad(n, &e))?));
                }
                "in_flight" => {
                    let ranges: usize = rest
                        .parse()
                        .map_err(|_| bad(n, "in_flight is not a number"))?;
                    in_flight = Some(ranges.max(1));
                }
                "range" => {
                    let (descriptor, state) = rest
                        .split_once(' ')
                        .ok_or_else(|| bad(n, "a range line is `range DESCRIPTOR STATE`"))?;
                    let range = match descriptor {
                        "ordered" => ScanRange::ordered(),
                        hexed => ScanRange::from_bytes(
                            unhex(hexed).ok_or_else(|| bad(n, "the descriptor is not hex"))?,
                        ),
                    };
                    let state = match state.split_once(' ') {
                        None if state == "pending" => RangeState::Pending,
                        None if state == "done" => RangeState::Done,
                        Some(("after", key)) => RangeState::After(Bytes::from(
                            unescape_key(key).map_err(|e| bad(n, &e))?,
                        )),
                        _ => return Err(bad(n, "the state is `pending`, `done` or `after KEY`")),
                    };
                    ranges.push((range, state));
                }
                "" => {}
                other => return Err(bad(n, &format!("unknown line \"{other}\""))),
            }
        }
        let (Some(prefix), Some(in_flight)) = (prefix, in_flight) else {
            return Err(Error::invalid(
                "pass progress",
                "the prefix or in_flight line is missing",
            ));
        };
        let ordered = ranges.iter().filter(|(r, _)| r.is_ordered()).count();
        if ranges.is_empty() || (ordered > 0 && ranges.len() > 1) {
            return Err(Error::invalid(
                "pass progress",
                "a pass has one ordered range or ranges of its backend, at least one",
            ));
        }
        if !prefix.is_empty() && ordered == 0 {
            return Err(Error::invalid(
                "pass progress",
                "a pass under a prefix reads one ordered range",
            ));
        }
        Ok(Self {
            prefix,
            ranges,
            in_flight,
        })
    }
}

/// Options of [`BlobStore::pass`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct PassOptions {
    /// Ranges read at once. Defaults to `None`: as many as the backend serves well
    /// ([`crate::backend::ScanPlan::in_flight`]).
    pub in_flight: Option<usize>,
    /// Whether expired blobs are read too (gc's expiry pass, fsck). Defaults to `false`: as a listing, a pass
    /// leaves them out (a manifest that does not decode is always read, with its error).
    pub expired: bool,
}

impl PassOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`PassOptions::in_flight`] (at least 1).
    pub fn with_in_flight(mut self, ranges: usize) -> Self {
        self.in_flight = Some(ranges.max(1));
        self
    }

    /// Sets [`PassOptions::expired`].
    pub fn with_expired(mut self, expired: bool) -> Self {
        self.expired = expired;
        self
    }
}

/// A blob read by a pass.
#[derive(Debug)]
pub struct PassEntry {
    /// The key.
    pub key: Bytes,
    /// The manifest record as stored.
    pub record: Bytes,
    /// The manifest, or [`Error::Corrupt`] when the record does not decode.
    pub manifest: Result<Manifest>,
}

/// One page of one range of a pass.
#[derive(Debug)]
pub struct PassPage {
    /// The range, by its position in the pass's [`PassProgress`].
    pub range: usize,
    /// The blobs of the page, in the range's order.
    pub entries: Vec<PassEntry>,
    /// The last key the page read, expired blobs included (`None`: it read none).
    pub last: Option<Bytes>,
    /// Whether the page is the range's last.
    pub done: bool,
}

/// What a pass reads ([`BlobStore::pass`]).
#[derive(Debug)]
pub enum PassEvent {
    /// A page of a range, in order within its range.
    Page(PassPage),
    /// Range `range` could not be read on from where it stood: its reads failed after retries. Its pages before
    /// this were delivered; it stays where its caller's progress has it, for a resumed pass to read again.
    Unread {
        /// The range, by its position in the pass's [`PassProgress`].
        range: usize,
        /// The last error.
        error: Error,
    },
}

impl BlobStore {
    /// Where a pass over the blobs whose key starts with `prefix` starts: every range pending. For the whole
    /// store (an empty prefix), the ranges the backend splits its manifests into; under a prefix, one range in
    /// key order (see the [module rule](crate::store::pass)).
    ///
    /// # Errors
    /// What the backend returns when asked for its ranges (a cluster whose ring is not known yet).
    pub async fn plan_pass(&self, prefix: &[u8]) -> Result<PassProgress> {
        let plan = if prefix.is_empty() {
            self.inner.backend.manifest_ranges().await?
        } else {
            crate::backend::ScanPlan::ordered()
        };
        if plan.ranges.is_empty() {
            return Err(Error::internal(
                "plan_pass",
                format!(
                    "backend {} split its manifests into no range",
                    self.inner.info.name
                ),
            ));
        }
        Ok(PassProgress {
            prefix: Bytes::copy_from_slice(prefix),
            ranges: plan
                .ranges
                .into_iter()
                .map(|r| (r, RangeState::Pending))
                .collect(),
            in_flight: plan.in_flight.max(1),
        })
    }

    /// Reads every range of `progress` that is not done, from where it stands: pages of each range in its order,
    /// the ranges several at once ([`PassOptions::in_flight`]) and interleaved, in the store's maintenance class
    /// (its default class, else `bulk`). Each range ends with its last page, or with [`PassEvent::Unread`] when its
    /// reads failed after retries. Memory stays bounded: a page per range in flight. The stream does not move
    /// `progress` on: its caller records what it handled ([`PassProgress::record_page`]).
    pub fn pass<'a>(
        &'a self,
        progress: &PassProgress,
        opts: &PassOptions,
    ) -> BoxStream<'a, PassEvent> {
        let in_flight = opts.in_flight.unwrap_or(progress.in_flight).max(1);
        let todo: Vec<(usize, ScanRange, Option<Bytes>)> = progress
            .ranges
            .iter()
            .enumerate()
            .filter_map(|(i, (range, state))| match state {
                RangeState::Done => None,
                RangeState::Pending => Some((i, range.clone(), None)),
                RangeState::After(key) => Some((i, range.clone(), Some(key.clone()))),
            })
            .collect();
        let prefix = progress.prefix.clone();
        let expired = opts.expired;
        stream::iter(todo)
            .map(move |(index, range, after)| {
                self.range_events(index, range, after, prefix.clone(), expired)
            })
            .flatten_unordered(in_flight)
            .boxed()
    }

    /// The pages of one range from `after`, then its end or the failure that stopped it.
    fn range_events(
        &self,
        index: usize,
        range: ScanRange,
        after: Option<Bytes>,
        prefix: Bytes,
        expired: bool,
    ) -> BoxStream<'_, PassEvent> {
        let class = self.maintenance_class();
        // `None` once the range ended; else where it stands.
        stream::unfold(Some(after), move |state| {
            let (range, prefix, class) = (range.clone(), prefix.clone(), class.clone());
            async move {
                let after = state?;
                let read = schedule::in_class(
                    class,
                    self.read_range_page(&range, &prefix, after.as_deref()),
                )
                .await;
                match read {
                    Ok((records, done)) => {
                        let last = records.last().map(|(k, _)| k.clone()).or(after);
                        let page = PassPage {
                            range: index,
                            entries: self.pass_entries(records, expired),
                            last: last.clone(),
                            done,
                        };
                        Some((PassEvent::Page(page), (!done).then_some(last)))
                    }
                    Err(error) => Some((
                        PassEvent::Unread {
                            range: index,
                            error,
                        },
                        None,
                    )),
                }
            }
        })
        .boxed()
    }

    /// One page of `range` after `after`, retried; whether it was the range's last.
    async fn read_range_page(
        &self,
        range: &ScanRange,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> Result<(Vec<(Bytes, Bytes)>, bool)> {
        let backoff = if self.inner.info.retries_internally {
            Backoff::ONCE
        } else {
            PAGE_READ
        };
        let backend = &self.inner.backend;
        backoff
            .run(|| async move {
                if range.is_ordered() {
                    let records = backend
                        .scan_records(Namespace::Manifest, prefix, after, PASS_PAGE)
                        .await?;
                    let done = records.len() < PASS_PAGE;
                    Ok((records, done))
                } else {
                    let page = backend.scan_manifest_range(range, after, PASS_PAGE).await?;
                    Ok((page.records, page.done))
                }
            })
            .await
    }

    /// The entries of `records`, decoded; expired ones left out unless `expired`.
    fn pass_entries(&self, records: Vec<(Bytes, Bytes)>, expired: bool) -> Vec<PassEntry> {
        let now = self.inner.now_micros();
        records
            .into_iter()
            .map(|(key, record)| {
                let manifest = self.inner.decode_manifest(&key, &record);
                PassEntry {
                    key,
                    record,
                    manifest,
                }
            })
            .filter(|e| expired || !matches!(&e.manifest, Ok(m) if m.is_expired(now)))
            .collect()
    }
}

/// The error of a pass that left ranges unread: how many of how many, and the first one's error as the cause.
pub(crate) fn unread_error(
    backend: &'static str,
    what: &str,
    unread: Vec<(usize, Error)>,
    ranges: usize,
) -> Error {
    let count = unread.len();
    let (first, retryable, source) = match unread.into_iter().next() {
        Some((range, e)) => (format!("range {range}: {e}"), e.is_retryable(), Some(e)),
        None => (String::new(), false, None),
    };
    Error::Backend {
        backend,
        message: format!(
            "{what}: {count} of {ranges} range(s) of the manifests unread after retries, the first {first}"
        ),
        retryable,
        source: source.map(|e| Box::new(e) as crate::base::error::BoxError),
    }
}

#[cfg(test)]
mod tests;
