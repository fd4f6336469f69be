//! The checker: finds the reads a correct store could not have returned.
//!
//! Writes (puts and deletes) are **acknowledged** when they completed without error; failed and
//! indeterminate writes may or may not have taken effect, at any time between their invocation and their
//! [`Op::end`]. Every successful get is checked against the writes of its key:
//!
//! - [`ViolationKind::Corrupt`]: the get failed with a corruption error.
//! - [`ViolationKind::Torn`]: its bytes failed verification, or a small value matches no put of that key
//!   and length.
//! - [`ViolationKind::Unknown`]: a whole value no put wrote to that key.
//! - [`ViolationKind::Future`]: the value of a put invoked after the get completed.
//! - [`ViolationKind::Refused`]: the value of a conditional put that was refused (its condition did not hold).
//! - [`ViolationKind::Stale`]: the value of a put P although an acknowledged write W completed before the get
//!   was invoked and W was invoked after P ended: P was certainly overwritten or deleted before the get
//!   began (last committed wins; deletes are not undone).
//! - [`ViolationKind::Lost`]: NotFound although an acknowledged put P completed before the get was invoked
//!   and no delete or removal of a version (of any outcome, but a removal that found no such version) invoked
//!   before the get completed ended after P was invoked.
//!
//! **Kept versions.** A put is keeping ([`OpKind::PutKeeping`]) or plain ([`OpKind::Put`]); a version V is
//! known by the acknowledged put P that reported creating it ([`OpResult::PutVersion`]). V stays readable by
//! its id until it is *destroyed*: removed ([`OpKind::RemoveVersion`] of V), or replaced while current by a
//! plain put or a delete. V is current from P on until any put or delete replaces it, and again whenever a
//! removal of the current version promotes it (the newest kept version becomes current). A removal **may
//! promote** unless it found no such version or was acknowledged as promoting nothing
//! ([`OpResult::RemoveVersion::promoted`] `None`) and overlapped no removal that may promote (one that finds
//! the version it removed made current by another removes it again, promoting). A plain put or delete X (of any
//! outcome but refused, other than P) **may destroy** V unless it is *shielded*: an acknowledged keeping put K
//! was invoked after P ended and completed before X was invoked (V was no longer current after K), and no
//! removal that may promote, invoked before X ended, ended after K was invoked (none could have made V current
//! again before X). Gets by version ([`OpKind::GetVersion`]) of a V no recorded put created are not judged;
//! the others:
//!
//! - [`ViolationKind::WrongVersion`]: a value that is not exactly P's (value id and length, or the bytes of a
//!   small value).
//! - [`ViolationKind::LostVersion`]: no such version although P completed before the get was invoked and
//!   nothing invoked before the get completed may have destroyed V: no removal of V (of any outcome, but one
//!   that found no such version) and no unshielded plain put or delete that ended after P was invoked.
//! - [`ViolationKind::Resurrected`]: P's value although a removal of V that found it was acknowledged before
//!   the get was invoked, unless a removal that may promote, invoked before that one completed, ended after
//!   the get was invoked: it may have promoted V just before that one removed it, and be about to remove it
//!   again (`BlobStore::remove_version` on concurrent removals). Plain gets of P's value are judged by the same
//!   rule.
//! - [`ViolationKind::Torn`], [`ViolationKind::Corrupt`] and [`ViolationKind::Future`] as for plain gets.
//!
//! A plain get may return a value certainly replaced (the *stale* rule above) if its version may have been
//! promoted back since: it is not stale when a keeping put (of any outcome but refused) that ended after P
//! was invoked was invoked before the get completed, and a removal that may promote, invoked before the get
//! completed, ended after every acknowledged write the stale rule names was invoked. Without keeping puts and
//! removals, the rules for plain gets are those above, unchanged.
//!
//! A value may have been written by several puts: a small value matches every put of the same bytes, and a
//! whole value may be put by several operations on purpose (an S3 CompleteMultipartUpload sent again, each
//! request recorded as a put of the upload's value). The get is a violation only if every candidate is. Times are
//! microseconds: two operations are only ordered when one's completion is strictly before the other's
//! invocation, so events within the same microsecond count as concurrent (no false alarm from the clock's
//! resolution).

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use crate::history::{GetResult, History, Op, OpId, OpKind, OpResult, Outcome};
use crate::value::{ValueId, from_hex, generate, header_len};

/// The kinds of violation, each a read a correct store cannot return.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// NotFound although an acknowledged put certainly preceded the get and no delete could have followed it.
    Lost,
    /// Bytes no put wrote whole: failed verification, or a small value matching no put.
    Torn,
    /// A value certainly overwritten or deleted before the get began.
    Stale,
    /// The get failed with a corruption error (missing chunk, checksum or digest mismatch, undecodable).
    Corrupt,
    /// A whole value whose id was never put to the key.
    Unknown,
    /// The value of a put invoked after the get completed.
    Future,
    /// The value of a conditional put that was refused, so it never took effect.
    Refused,
    /// A get by version returned a value other than the one the put that created the version wrote.
    WrongVersion,
    /// A get by version found no such version although it was certainly created and nothing could have
    /// removed or destroyed it.
    LostVersion,
    /// A version's value read after an acknowledged removal of that version certainly preceded the get.
    Resurrected,
}

impl ViolationKind {
    /// Every kind, in the order of [`Report::summary`].
    pub const ALL: [ViolationKind; 10] = [
        ViolationKind::Lost,
        ViolationKind::Torn,
        ViolationKind::Stale,
        ViolationKind::Corrupt,
        ViolationKind::Unknown,
        ViolationKind::Future,
        ViolationKind::Refused,
        ViolationKind::WrongVersion,
        ViolationKind::LostVersion,
        ViolationKind::Resurrected,
    ];

    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Lost => "lost",
            ViolationKind::Torn => "torn",
            ViolationKind::Stale => "stale",
            ViolationKind::Corrupt => "corrupt",
            ViolationKind::Unknown => "unknown",
            ViolationKind::Future => "future",
            ViolationKind::Refused => "refused",
            ViolationKind::WrongVersion => "wrong_version",
            ViolationKind::LostVersion => "lost_version",
            ViolationKind::Resurrected => "resurrected",
        }
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One get a correct store could not have returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// What is wrong.
    pub kind: ViolationKind,
    /// The key read.
    pub key: String,
    /// The get.
    pub op: OpId,
    /// The evidence: the value read, the writes involved, their times.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} get {} of {:?}: {}",
            self.kind, self.op, self.key, self.detail
        )
    }
}

/// What the checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Operations in the history.
    pub ops: usize,
    /// Puts, keeping or not.
    pub puts: usize,
    /// Gets, plain or by version.
    pub gets: usize,
    /// Deletes.
    pub deletes: usize,
    /// Removals of a version.
    pub removals: usize,
    /// Operations that completed without error.
    pub ok: usize,
    /// Operations that returned an error.
    pub failed: usize,
    /// Conditional puts refused by their condition.
    pub refused: usize,
    /// Operations without completion.
    pub indeterminate: usize,
    /// Successful gets that returned a value (whole or small, torn ones excluded).
    pub gets_with_value: usize,
    /// Successful gets that returned NotFound.
    pub gets_not_found: usize,
    /// History lines that did not parse or pair ([`History`]'s malformed, truncated, orphan and duplicate
    /// counts): not violations, but a history with many is suspect.
    pub unpaired_events: usize,
    /// Every violation, in the order of the gets' invocations.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Number of violations of `kind`.
    pub fn count(&self, kind: ViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }

    /// Whether there is no violation.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// One line: operation counts by kind and outcome, violation counts by kind.
    pub fn summary(&self) -> String {
        let violations: Vec<String> = ViolationKind::ALL
            .iter()
            .map(|k| format!("{k} {}", self.count(*k)))
            .collect();
        format!(
            "ops {} (puts {}, gets {}, deletes {}, removals {}): ok {}, failed {}, refused {}, indeterminate {}; \
             violations: {}",
            self.ops,
            self.puts,
            self.gets,
            self.deletes,
            self.removals,
            self.ok,
            self.failed,
            self.refused,
            self.indeterminate,
            violations.join(", ")
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Times sorted by one field, with the running maximum of another: answers "the largest `b` among entries
/// whose `a` is below `t`" in logarithmic time.
#[derive(Default)]
struct PrefixMax {
    keys: Vec<u64>,
    max: Vec<u64>,
}

impl PrefixMax {
    fn new(mut pairs: Vec<(u64, u64)>) -> Self {
        pairs.sort_unstable();
        let mut running = 0;
        let (keys, max) = pairs
            .into_iter()
            .map(|(a, b)| {
                running = running.max(b);
                (a, running)
            })
            .unzip();
        Self { keys, max }
    }

    /// The largest second field among entries whose first field is `< t`.
    fn max_below(&self, t: u64) -> Option<u64> {
        let n = self.keys.partition_point(|a| *a < t);
        n.checked_sub(1).map(|i| self.max[i])
    }

    /// The largest second field among entries whose first field is `<= t`.
    fn max_up_to(&self, t: u64) -> Option<u64> {
        let n = self.keys.partition_point(|a| *a <= t);
        n.checked_sub(1).map(|i| self.max[i])
    }
}

/// The writes of one key, indexed for the per-get rules.
#[derive(Default)]
struct KeyIndex<'a> {
    /// The puts of each whole value (usually one), by invocation.
    puts: HashMap<ValueId, Vec<&'a Op>>,
    /// Puts of values too short for a header, by their bytes.
    small_puts: HashMap<Vec<u8>, Vec<&'a Op>>,
    /// Acknowledged writes: (completion, invocation).
    acked_writes: PrefixMax,
    /// Acknowledged puts: (completion, invocation).
    acked_puts: PrefixMax,
    /// Deletes of any outcome, and removals that may have taken effect: (invocation, end).
    deletes: PrefixMax,
    writes: Vec<&'a Op>,
    /// The acknowledged put that reported creating each version (the first, should several).
    created: HashMap<&'a str, &'a Op>,
    /// Removals of each version, of any outcome.
    removals: HashMap<&'a str, Vec<&'a Op>>,
    /// Removals that may have promoted a kept version ([`may_promote`]): (invocation, end).
    promoters: PrefixMax,
    /// Keeping puts of any outcome but refused: (invocation, end).
    keeping: PrefixMax,
    /// Acknowledged keeping puts: (completion, invocation).
    acked_keeping: PrefixMax,
    /// The earliest invocation of something that may have destroyed each created version (see the module
    /// documentation); absent when nothing may have.
    destroyed_from: HashMap<&'a str, u64>,
}

/// Whether `op` is a removal that may have taken effect: any but one that found no such version.
fn may_remove(op: &Op) -> bool {
    matches!(op.kind, OpKind::RemoveVersion { .. })
        && !matches!(
            op.outcome,
            Some(Outcome::Ok(OpResult::RemoveVersion { found: false, .. }))
        )
}

/// The (invocation, end) of those of `removals` (one key's, each of which may have taken effect) that may have
/// made a kept version current: one that reported a promotion ([`OpResult::RemoveVersion::promoted`]), one
/// that failed or is indeterminate, and one acknowledged as promoting nothing that overlapped (through a chain
/// of overlapping removals) one of those, as it may have found the version it removed made current by the
/// other meanwhile and removed it again, promoting another (`BlobStore::remove_version`).
fn may_promote(mut removals: Vec<&Op>) -> Vec<(u64, u64)> {
    removals.sort_by_key(|r| r.invoke);
    let direct = |r: &Op| {
        !matches!(
            r.outcome,
            Some(Outcome::Ok(OpResult::RemoveVersion { promoted: None, .. }))
        )
    };
    let mut out = Vec::new();
    let mut group: Vec<(u64, u64)> = Vec::new();
    let (mut group_end, mut group_promotes) = (0, false);
    for r in removals {
        if !group.is_empty() && r.invoke > group_end {
            if group_promotes {
                out.append(&mut group);
            }
            group.clear();
            group_promotes = false;
        }
        group_end = if group.is_empty() {
            r.end
        } else {
            group_end.max(r.end)
        };
        group_promotes |= direct(r);
        group.push((r.invoke, r.end));
    }
    if group_promotes {
        out.append(&mut group);
    }
    out
}

/// Whether `op` is a plain put or delete that may have taken effect (any outcome but refused).
fn may_replace_unkept(op: &Op) -> bool {
    matches!(op.kind, OpKind::Put { .. } | OpKind::Delete { .. }) && !op.is_refused()
}

fn index(history: &History) -> HashMap<&str, KeyIndex<'_>> {
    let mut raw: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in &history.ops {
        if !op.kind.is_read() {
            raw.entry(op.kind.key()).or_default().push(op);
        }
    }
    raw.into_iter()
        .map(|(key, writes)| {
            let mut ix = KeyIndex::default();
            let (mut acked_writes, mut acked_puts, mut deletes) = (vec![], vec![], vec![]);
            let (mut promoters, mut keeping, mut acked_keeping) = (vec![], vec![], vec![]);
            for op in &writes {
                let acked = op.is_ok().then_some((op.end, op.invoke));
                match &op.kind {
                    OpKind::Put { id, len, .. } | OpKind::PutKeeping { id, len, .. } => {
                        let (id, len) = (*id, *len);
                        ix.puts.entry(id).or_default().push(op);
                        if header_len(key.as_bytes()).is_none_or(|h| len < h as u64) {
                            let bytes = generate(key.as_bytes(), id, len as usize).to_vec();
                            ix.small_puts.entry(bytes).or_default().push(op);
                        }
                        acked_puts.extend(acked);
                        acked_writes.extend(acked);
                        if let Some(version) = op.created_version() {
                            ix.created.entry(version).or_insert(op);
                        }
                        if matches!(op.kind, OpKind::PutKeeping { .. }) {
                            if !op.is_refused() {
                                keeping.push((op.invoke, op.end));
                            }
                            acked_keeping.extend(acked);
                        }
                    }
                    OpKind::Delete { .. } => {
                        deletes.push((op.invoke, op.end));
                        acked_writes.extend(acked);
                    }
                    OpKind::RemoveVersion { version, .. } => {
                        ix.removals.entry(version.as_str()).or_default().push(op);
                        if may_remove(op) {
                            deletes.push((op.invoke, op.end));
                            promoters.push(*op);
                        }
                    }
                    OpKind::Get { .. } | OpKind::GetVersion { .. } => {}
                }
            }
            ix.acked_writes = PrefixMax::new(acked_writes);
            ix.acked_puts = PrefixMax::new(acked_puts);
            ix.deletes = PrefixMax::new(deletes);
            ix.promoters = PrefixMax::new(may_promote(promoters));
            ix.keeping = PrefixMax::new(keeping);
            ix.acked_keeping = PrefixMax::new(acked_keeping);
            ix.writes = writes;
            ix.destroyed_from = ix
                .created
                .iter()
                .filter_map(|(version, put)| Some((*version, destroyed_from(&ix, version, put)?)))
                .collect();
            (key, ix)
        })
        .collect()
}

/// The earliest invocation of an operation that may have destroyed `version`, created by `put`: a removal of
/// it that may have taken effect, or a plain put or delete that may have replaced it while it was current
/// (not shielded by a keeping put; see the module documentation). `None` when nothing may have.
fn destroyed_from(ix: &KeyIndex<'_>, version: &str, put: &Op) -> Option<u64> {
    let removed = ix
        .removals
        .get(version)
        .into_iter()
        .flatten()
        .filter(|r| may_remove(r))
        .map(|r| r.invoke)
        .min();
    let replacers = || {
        ix.writes
            .iter()
            .filter(|w| may_replace_unkept(w) && w.id != put.id)
    };
    // One invoked before the put and ended after its invocation may follow it: never shielded, as no keeping
    // put can be ordered between the two.
    let overlapping = replacers()
        .filter(|w| w.invoke < put.invoke && w.end >= put.invoke)
        .map(|w| w.invoke)
        .min();
    let shielded = |w: &Op| {
        // The latest-invoked acknowledged keeping put that completed before `w` began: the best shield.
        let Some(keeper) = ix.acked_keeping.max_below(w.invoke) else {
            return false;
        };
        keeper > put.end && ix.promoters.max_up_to(w.end).is_none_or(|r| r < keeper)
    };
    // `writes` are in invocation order: the first unshielded one from the put's invocation on is the earliest.
    let later = replacers()
        .filter(|w| w.invoke >= put.invoke)
        .find(|w| !shielded(w))
        .map(|w| w.invoke);
    [removed, overlapping, later].into_iter().flatten().min()
}

fn time(t: u64) -> String {
    if t == u64::MAX {
        "never".to_owned()
    } else {
        t.to_string()
    }
}

fn describe(op: &Op) -> String {
    let outcome = match &op.outcome {
        None => "indeterminate",
        Some(Outcome::Ok(_)) => "ok",
        Some(Outcome::Failed { .. }) => "failed",
        Some(Outcome::Refused { .. }) => "refused",
    };
    format!(
        "{} {} ({outcome}, invoked {}, ended {})",
        op.kind.name(),
        op.id,
        op.invoke,
        time(op.end)
    )
}

/// Whether `get` may have returned the value of `put`; if not, why.
fn check_candidate(get: &Op, put: &Op, ix: &KeyIndex<'_>) -> Option<(ViolationKind, String)> {
    if put.is_refused() {
        return Some((
            ViolationKind::Refused,
            format!(
                "returned the value of {}, whose condition did not hold",
                describe(put)
            ),
        ));
    }
    if put.invoke > get.end {
        return Some((
            ViolationKind::Future,
            format!(
                "returned the value of {}, which began after the get ended at {}",
                describe(put),
                get.end
            ),
        ));
    }
    let latest = ix.acked_writes.max_below(get.invoke);
    if let Some(latest) = latest.filter(|l| *l > put.end)
        && !may_be_promoted(get, put, latest, ix)
    {
        return Some(stale(get, put, ix));
    }
    put.created_version()
        .and_then(|version| check_resurrected(get, put, version, ix))
}

/// Whether the version `put` wrote may have been kept, then made current again by a removal that may have taken
/// effect after every acknowledged write that completed before `get` began (the latest invoked at `latest`).
fn may_be_promoted(get: &Op, put: &Op, latest: u64, ix: &KeyIndex<'_>) -> bool {
    ix.keeping
        .max_up_to(get.end)
        .is_some_and(|end| end >= put.invoke)
        && ix
            .promoters
            .max_up_to(get.end)
            .is_some_and(|end| end >= latest)
}

/// The stale violation of `get` returning the value of `put`, with an overwriting write as evidence.
fn stale(get: &Op, put: &Op, ix: &KeyIndex<'_>) -> (ViolationKind, String) {
    let by = ix
        .writes
        .iter()
        .find(|w| {
            w.is_ok()
                && !matches!(w.kind, OpKind::RemoveVersion { .. })
                && w.end < get.invoke
                && w.invoke > put.end
        })
        .map_or_else(|| "an acknowledged write".to_owned(), |w| describe(w));
    (
        ViolationKind::Stale,
        format!(
            "returned the value of {}, but {by} replaced it before the get began at {}",
            describe(put),
            get.invoke
        ),
    )
}

/// Whether `get`, which returned the value of `put` (that created `version`), read it after an acknowledged
/// removal of that version that found it, with no other removal that may have promoted it in flight.
fn check_resurrected(
    get: &Op,
    put: &Op,
    version: &str,
    ix: &KeyIndex<'_>,
) -> Option<(ViolationKind, String)> {
    let removal = ix.removals.get(version)?.iter().find(|r| {
        matches!(
            r.outcome,
            Some(Outcome::Ok(OpResult::RemoveVersion { found: true, .. }))
        ) && r.end < get.invoke
            && ix
                .promoters
                .max_up_to(r.end)
                .is_none_or(|end| end < get.invoke)
    })?;
    Some((
        ViolationKind::Resurrected,
        format!(
            "returned the value of {} (version {version}), but {} removed that version before the get began at \
             {} and no other removal was in flight",
            describe(put),
            describe(removal),
            get.invoke
        ),
    ))
}

/// Checks a get by version `version` that returned `result`.
fn check_version_get(
    get: &Op,
    version: &str,
    result: &GetResult,
    ix: &KeyIndex<'_>,
    report: &mut Report,
) -> Option<(ViolationKind, String)> {
    let put = ix.created.get(version).copied();
    match result {
        GetResult::NotFound => {
            report.gets_not_found += 1;
            let put = put.filter(|p| p.end < get.invoke)?;
            let from = ix.destroyed_from.get(version).copied().unwrap_or(u64::MAX);
            if from <= get.end {
                return None;
            }
            Some((
                ViolationKind::LostVersion,
                format!(
                    "no version {version}, but {} created it before the get began at {} and nothing that may \
                     have removed or replaced it without keeping it began before the get ended at {}",
                    describe(put),
                    get.invoke,
                    get.end
                ),
            ))
        }
        GetResult::Torn { reason, len } => Some((
            ViolationKind::Torn,
            format!("read {len} bytes of version {version} that fail verification: {reason}"),
        )),
        GetResult::Value {
            id,
            len,
            small_bytes_hex,
        } => {
            report.gets_with_value += 1;
            let put = put?;
            let (want_id, want_len) = put.kind.put_value()?;
            let matches = *len == want_len
                && match id {
                    Some(id) => *id == want_id,
                    None => small_bytes_hex
                        .as_deref()
                        .and_then(from_hex)
                        .is_some_and(|b| {
                            b == generate(put.kind.key().as_bytes(), want_id, want_len as usize)
                        }),
                };
            if !matches {
                let got = match id {
                    Some(id) => format!("value {id}"),
                    None => format!(
                        "small value {:?}",
                        small_bytes_hex.as_deref().unwrap_or_default()
                    ),
                };
                return Some((
                    ViolationKind::WrongVersion,
                    format!(
                        "returned {got} ({len} bytes) for version {version}, which {} created with value \
                         {want_id} ({want_len} bytes)",
                        describe(put)
                    ),
                ));
            }
            if put.invoke > get.end {
                return Some((
                    ViolationKind::Future,
                    format!(
                        "returned version {version} of {}, which began after the get ended at {}",
                        describe(put),
                        get.end
                    ),
                ));
            }
            check_resurrected(get, put, version, ix)
        }
    }
}

fn check_not_found(get: &Op, ix: &KeyIndex<'_>) -> Option<(ViolationKind, String)> {
    let last_put_invoke = ix.acked_puts.max_below(get.invoke)?;
    if ix
        .deletes
        .max_up_to(get.end)
        .is_some_and(|d| d >= last_put_invoke)
    {
        return None;
    }
    let put = ix
        .writes
        .iter()
        .find(|w| {
            w.is_ok()
                && w.kind.put_value().is_some()
                && w.end < get.invoke
                && w.invoke == last_put_invoke
        })
        .map_or_else(|| "an acknowledged put".to_owned(), |w| describe(w));
    Some((
        ViolationKind::Lost,
        format!(
            "NotFound, but {put} completed before the get began at {} and no delete could have followed it",
            get.invoke
        ),
    ))
}

/// The operations on the key of `violation` that overlap its get widened by `margin_micros` on both sides,
/// by invocation time: the evidence to print when a check fails.
pub fn context<'a>(history: &'a History, violation: &Violation, margin_micros: u64) -> Vec<&'a Op> {
    let Some(get) = history.ops.iter().find(|op| op.id == violation.op) else {
        return Vec::new();
    };
    let (from, to) = (
        get.invoke.saturating_sub(margin_micros),
        get.end.saturating_add(margin_micros),
    );
    history
        .ops
        .iter()
        .filter(|op| op.kind.key() == violation.key && op.end >= from && op.invoke <= to)
        .collect()
}

/// One line describing `op`: kind, id, outcome, times and what it wrote or read.
pub fn describe_op(op: &Op) -> String {
    let version = match (&op.kind, &op.outcome) {
        (OpKind::GetVersion { version, .. } | OpKind::RemoveVersion { version, .. }, _) => {
            format!(" version {version}")
        }
        _ => String::new(),
    };
    let what = match (&op.kind, &op.outcome) {
        (OpKind::Put { id, len, .. } | OpKind::PutKeeping { id, len, .. }, outcome) => {
            match outcome {
                Some(Outcome::Ok(OpResult::PutVersion { version })) => {
                    format!(" value {id} ({len} bytes) → version {version}")
                }
                _ => format!(" value {id} ({len} bytes)"),
            }
        }
        (_, Some(Outcome::Ok(OpResult::RemoveVersion { found, promoted }))) => {
            match (found, promoted) {
                (false, _) => " → no such version".to_owned(),
                (true, Some(p)) => format!(" → removed, {p} current"),
                (true, None) => " → removed".to_owned(),
            }
        }
        (_, Some(Outcome::Ok(OpResult::Get(GetResult::NotFound)))) => " → not found".to_owned(),
        (_, Some(Outcome::Ok(OpResult::Get(GetResult::Value { id, len, .. })))) => match id {
            Some(id) => format!(" → value {id} ({len} bytes)"),
            None => format!(" → small value ({len} bytes)"),
        },
        (_, Some(Outcome::Ok(OpResult::Get(GetResult::Torn { len, .. })))) => {
            format!(" → torn ({len} bytes)")
        }
        (_, Some(Outcome::Failed { error, .. })) => format!(" → {error}"),
        _ => String::new(),
    };
    format!("{}{version}{what}", describe(op))
}

/// Checks every get of `history` (see the module documentation for the rules).
pub fn check(history: &History) -> Report {
    let ix = index(history);
    let empty = KeyIndex::default();
    let mut report = Report {
        ops: history.ops.len(),
        unpaired_events: history.malformed_lines
            + history.truncated_lines
            + history.orphan_completions
            + history.duplicate_events,
        ..Report::default()
    };
    for op in &history.ops {
        match op.kind {
            OpKind::Put { .. } | OpKind::PutKeeping { .. } => report.puts += 1,
            OpKind::Get { .. } | OpKind::GetVersion { .. } => report.gets += 1,
            OpKind::Delete { .. } => report.deletes += 1,
            OpKind::RemoveVersion { .. } => report.removals += 1,
        }
        match &op.outcome {
            None => report.indeterminate += 1,
            Some(Outcome::Ok(_)) => report.ok += 1,
            Some(Outcome::Failed { .. }) => report.failed += 1,
            Some(Outcome::Refused { .. }) => report.refused += 1,
        }
        let (key, version) = match &op.kind {
            OpKind::Get { key } => (key, None),
            OpKind::GetVersion { key, version } => (key, Some(version.as_str())),
            _ => continue,
        };
        let kix = ix.get(key.as_str()).unwrap_or(&empty);
        let found = match (&op.outcome, version) {
            (
                Some(Outcome::Failed {
                    error,
                    corrupt: true,
                }),
                _,
            ) => Some((ViolationKind::Corrupt, format!("get failed: {error}"))),
            (Some(Outcome::Ok(OpResult::Get(result))), None) => {
                check_get(op, result, kix, &mut report)
            }
            (Some(Outcome::Ok(OpResult::Get(result))), Some(version)) => {
                check_version_get(op, version, result, kix, &mut report)
            }
            _ => None,
        };
        if let Some((kind, detail)) = found {
            report.violations.push(Violation {
                kind,
                key: key.clone(),
                op: op.id,
                detail,
            });
        }
    }
    report
}

fn check_get(
    get: &Op,
    result: &GetResult,
    ix: &KeyIndex<'_>,
    report: &mut Report,
) -> Option<(ViolationKind, String)> {
    match result {
        GetResult::NotFound => {
            report.gets_not_found += 1;
            check_not_found(get, ix)
        }
        GetResult::Torn { reason, len } => Some((
            ViolationKind::Torn,
            format!("read {len} bytes that fail verification: {reason}"),
        )),
        GetResult::Value {
            id: Some(id), len, ..
        } => {
            report.gets_with_value += 1;
            match ix.puts.get(id) {
                None => Some((
                    ViolationKind::Unknown,
                    format!("returned value {id} ({len} bytes), which no put wrote to this key"),
                )),
                Some(puts) => {
                    let mut first = None;
                    for put in puts {
                        let found = match put.kind {
                            OpKind::Put { len: put_len, .. } if put_len != *len => Some((
                                ViolationKind::Unknown,
                                format!(
                                    "returned value {id} of {len} bytes, but {} wrote {put_len} bytes",
                                    describe(put)
                                ),
                            )),
                            _ => check_candidate(get, put, ix),
                        };
                        match found {
                            None => return None,
                            Some(v) => {
                                first.get_or_insert(v);
                            }
                        }
                    }
                    first
                }
            }
        }
        GetResult::Value {
            id: None,
            len,
            small_bytes_hex,
        } => {
            report.gets_with_value += 1;
            let hex = small_bytes_hex.as_deref().unwrap_or_default();
            let Some(bytes) = from_hex(hex).filter(|b| b.len() as u64 == *len) else {
                return Some((
                    ViolationKind::Torn,
                    format!("small value of {len} bytes recorded as {hex:?}, which is not its hex"),
                ));
            };
            let candidates = ix.small_puts.get(&bytes).map_or(&[][..], Vec::as_slice);
            let mut first = None;
            for put in candidates {
                match check_candidate(get, put, ix) {
                    None => return None,
                    Some(v) => {
                        first.get_or_insert(v);
                    }
                }
            }
            first.or_else(|| {
                Some((
                    ViolationKind::Torn,
                    format!("small value {hex:?} ({len} bytes) matches no put of that length to this key"),
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests;
