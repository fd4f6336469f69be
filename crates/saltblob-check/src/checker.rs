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
//!   and no delete (of any outcome) invoked before the get completed ended after P was invoked.
//!
//! A small value may match several puts; the get is a violation only if every candidate is. Times are
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
}

impl ViolationKind {
    /// Every kind, in the order of [`Report::summary`].
    pub const ALL: [ViolationKind; 7] = [
        ViolationKind::Lost,
        ViolationKind::Torn,
        ViolationKind::Stale,
        ViolationKind::Corrupt,
        ViolationKind::Unknown,
        ViolationKind::Future,
        ViolationKind::Refused,
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
    /// Puts.
    pub puts: usize,
    /// Gets.
    pub gets: usize,
    /// Deletes.
    pub deletes: usize,
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
            "ops {} (puts {}, gets {}, deletes {}): ok {}, failed {}, refused {}, indeterminate {}; violations: {}",
            self.ops,
            self.puts,
            self.gets,
            self.deletes,
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
    puts: HashMap<ValueId, &'a Op>,
    /// Puts of values too short for a header, by their bytes.
    small_puts: HashMap<Vec<u8>, Vec<&'a Op>>,
    /// Acknowledged writes: (completion, invocation).
    acked_writes: PrefixMax,
    /// Acknowledged puts: (completion, invocation).
    acked_puts: PrefixMax,
    /// Deletes of any outcome: (invocation, end).
    deletes: PrefixMax,
    writes: Vec<&'a Op>,
}

fn index(history: &History) -> HashMap<&str, KeyIndex<'_>> {
    let mut raw: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in &history.ops {
        if !matches!(op.kind, OpKind::Get { .. }) {
            raw.entry(op.kind.key()).or_default().push(op);
        }
    }
    raw.into_iter()
        .map(|(key, writes)| {
            let mut ix = KeyIndex::default();
            let (mut acked_writes, mut acked_puts, mut deletes) = (vec![], vec![], vec![]);
            for op in &writes {
                let acked = op.is_ok().then_some((op.end, op.invoke));
                match op.kind {
                    OpKind::Put { id, len, .. } => {
                        ix.puts.entry(id).or_insert(op);
                        if header_len(key.as_bytes()).is_none_or(|h| len < h as u64) {
                            let bytes = generate(key.as_bytes(), id, len as usize).to_vec();
                            ix.small_puts.entry(bytes).or_default().push(op);
                        }
                        acked_puts.extend(acked);
                    }
                    OpKind::Delete { .. } => deletes.push((op.invoke, op.end)),
                    OpKind::Get { .. } => {}
                }
                acked_writes.extend(acked);
            }
            ix.acked_writes = PrefixMax::new(acked_writes);
            ix.acked_puts = PrefixMax::new(acked_puts);
            ix.deletes = PrefixMax::new(deletes);
            ix.writes = writes;
            (key, ix)
        })
        .collect()
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
    let latest = ix.acked_writes.max_below(get.invoke)?;
    if latest <= put.end {
        return None;
    }
    // Violation: find one overwriting write for the evidence.
    let by = ix
        .writes
        .iter()
        .find(|w| w.is_ok() && w.end < get.invoke && w.invoke > put.end)
        .map_or_else(|| "an acknowledged write".to_owned(), |w| describe(w));
    Some((
        ViolationKind::Stale,
        format!(
            "returned the value of {}, but {by} replaced it before the get began at {}",
            describe(put),
            get.invoke
        ),
    ))
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
                && matches!(w.kind, OpKind::Put { .. })
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
    let what = match (&op.kind, &op.outcome) {
        (OpKind::Put { id, len, .. }, _) => format!(" value {id} ({len} bytes)"),
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
    format!("{}{what}", describe(op))
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
            OpKind::Put { .. } => report.puts += 1,
            OpKind::Get { .. } => report.gets += 1,
            OpKind::Delete { .. } => report.deletes += 1,
        }
        match &op.outcome {
            None => report.indeterminate += 1,
            Some(Outcome::Ok(_)) => report.ok += 1,
            Some(Outcome::Failed { .. }) => report.failed += 1,
            Some(Outcome::Refused { .. }) => report.refused += 1,
        }
        let OpKind::Get { key } = &op.kind else {
            continue;
        };
        let kix = ix.get(key.as_str()).unwrap_or(&empty);
        let found = match &op.outcome {
            Some(Outcome::Failed {
                error,
                corrupt: true,
            }) => Some((ViolationKind::Corrupt, format!("get failed: {error}"))),
            Some(Outcome::Ok(OpResult::Get(result))) => check_get(op, result, kix, &mut report),
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
                Some(put) => match put.kind {
                    OpKind::Put { len: put_len, .. } if put_len != *len => Some((
                        ViolationKind::Unknown,
                        format!(
                            "returned value {id} of {len} bytes, but {} wrote {put_len} bytes",
                            describe(put)
                        ),
                    )),
                    _ => check_candidate(get, put, ix),
                },
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
mod tests {
    use super::*;
    use crate::history::Event;
    use crate::value::{Identified, to_hex, verify};

    /// Builds histories by hand: each op given as (invoke, complete or None) times.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
        next: u64,
    }

    const W: u64 = 77;
    const K: &str = "k";

    impl H {
        fn op(&mut self, kind: OpKind, at: u64, done: Option<(u64, Outcome)>) -> OpId {
            let op = OpId {
                client: W,
                seq: self.next,
            };
            self.next += 1;
            self.events.push(Event::Invoke { op, at, kind });
            if let Some((at, outcome)) = done {
                self.events.push(Event::Complete { op, at, outcome });
            }
            op
        }

        /// A put of a whole value (len 100); returns its value id.
        fn put(&mut self, at: u64, done: Option<(u64, bool)>) -> ValueId {
            self.put_len(at, done, 100)
        }

        fn put_len(&mut self, at: u64, done: Option<(u64, bool)>, len: u64) -> ValueId {
            let id = ValueId {
                writer: W,
                seq: self.next,
            };
            let done = done.map(|(t, ok)| {
                (
                    t,
                    if ok {
                        Outcome::Ok(OpResult::Put)
                    } else {
                        failed()
                    },
                )
            });
            self.op(
                OpKind::Put {
                    key: K.into(),
                    id,
                    len,
                },
                at,
                done,
            );
            id
        }

        /// A conditional put refused at `done`, of a whole value (len 100) or a small one.
        fn refused_put(&mut self, at: u64, done: u64, len: u64) -> ValueId {
            let id = ValueId {
                writer: W,
                seq: self.next,
            };
            let refused = Outcome::Refused {
                error: "precondition failed".into(),
            };
            let kind = OpKind::Put {
                key: K.into(),
                id,
                len,
            };
            self.op(kind, at, Some((done, refused)));
            id
        }

        fn delete(&mut self, at: u64, done: Option<(u64, bool)>) {
            let done = done.map(|(t, ok)| {
                (
                    t,
                    if ok {
                        Outcome::Ok(OpResult::Delete { found: true })
                    } else {
                        failed()
                    },
                )
            });
            self.op(OpKind::Delete { key: K.into() }, at, done);
        }

        fn get(&mut self, at: u64, done: u64, result: GetResult) {
            self.op(
                OpKind::Get { key: K.into() },
                at,
                Some((done, Outcome::Ok(OpResult::Get(result)))),
            );
        }

        fn get_value(&mut self, at: u64, done: u64, id: ValueId) {
            self.get(
                at,
                done,
                GetResult::Value {
                    id: Some(id),
                    len: 100,
                    small_bytes_hex: None,
                },
            );
        }

        fn report(&self) -> Report {
            let r = check(&History::from_events(self.events.clone()));
            println!("{}", r.summary());
            for v in &r.violations {
                println!("  {v}");
            }
            r
        }

        fn kinds(&self) -> Vec<ViolationKind> {
            self.report().violations.iter().map(|v| v.kind).collect()
        }
    }

    fn failed() -> Outcome {
        Outcome::Failed {
            error: "timeout".into(),
            corrupt: false,
        }
    }

    #[test]
    fn sequential_reads_of_the_last_write_are_fine() {
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        h.get_value(20, 30, a);
        let b = h.put(40, Some((50, true)));
        h.get_value(60, 70, b);
        h.delete(80, Some((90, true)));
        h.get(100, 110, GetResult::NotFound);
        h.get(0, 5, GetResult::NotFound);
        let r = h.report();
        assert!(r.is_clean());
        assert_eq!((r.ops, r.puts, r.gets, r.deletes), (7, 2, 4, 1));
        assert_eq!((r.ok, r.gets_with_value, r.gets_not_found), (7, 2, 2));
    }

    #[test]
    fn concurrent_puts_may_each_win() {
        let mut h = H::default();
        let a = h.put(0, Some((50, true)));
        let b = h.put(10, Some((40, true)));
        h.get_value(60, 70, a);
        h.get_value(80, 90, b); // may not flip back in a linearizable store, but each alone is fine
        assert!(h.kinds().is_empty());
        // A read overlapping a later put may return either.
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        let b = h.put(20, Some((40, true)));
        h.get_value(30, 35, a);
        h.get_value(30, 36, b);
        assert!(h.kinds().is_empty());
    }

    #[test]
    fn stale_reads_of_overwritten_values_are_flagged() {
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        h.put(20, Some((30, true)));
        h.get_value(40, 50, a);
        assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
        let r = h.report();
        assert!(r.violations[0].detail.contains("replaced it"), "{r:?}");
    }

    #[test]
    fn deletes_are_not_undone() {
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        h.delete(20, Some((30, true)));
        h.get_value(40, 50, a);
        assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    }

    #[test]
    fn failed_and_indeterminate_writes_may_or_may_not_take_effect() {
        // A failed overwrite does not make the old value stale; an unacknowledged put may be read.
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        let b = h.put(20, Some((30, false)));
        let c = h.put(25, None);
        h.delete(26, Some((27, false)));
        h.get_value(40, 50, a);
        h.get_value(60, 70, b);
        h.get_value(80, 90, c);
        h.get_value(100, 110, a);
        assert!(h.kinds().is_empty());
        // A value read after an acknowledged write that followed an indeterminate put is still fine:
        // the indeterminate put may take effect later.
        let mut h = H::default();
        let c = h.put(0, None);
        h.put(20, Some((30, true)));
        h.get_value(40, 50, c);
        assert!(h.kinds().is_empty());
    }

    #[test]
    fn barriers_end_indeterminate_puts() {
        let mut h = H::default();
        let c = h.put(0, None);
        h.events.push(Event::Barrier { at: 10 });
        h.put(20, Some((30, true)));
        h.get_value(40, 50, c);
        assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    }

    #[test]
    fn values_from_the_future_are_flagged() {
        let mut h = H::default();
        let id = ValueId { writer: W, seq: 1 };
        h.get_value(0, 10, id);
        assert_eq!(h.put(20, Some((30, true))), id);
        assert_eq!(h.kinds(), vec![ViolationKind::Future]);
    }

    #[test]
    fn unknown_values_are_flagged() {
        let mut h = H::default();
        h.put(0, Some((10, true)));
        h.get_value(20, 30, ValueId { writer: 1, seq: 1 });
        // Known id, wrong length.
        let b = h.put(40, Some((50, true)));
        h.get(
            60,
            70,
            GetResult::Value {
                id: Some(b),
                len: 99,
                small_bytes_hex: None,
            },
        );
        assert_eq!(
            h.kinds(),
            vec![ViolationKind::Unknown, ViolationKind::Unknown]
        );
    }

    #[test]
    fn lost_acknowledged_puts_are_flagged() {
        let mut h = H::default();
        h.put(0, Some((10, true)));
        h.get(20, 30, GetResult::NotFound);
        assert_eq!(h.kinds(), vec![ViolationKind::Lost]);
    }

    #[test]
    fn not_found_is_fine_when_a_delete_may_follow_the_put() {
        for delete in [
            Some((30, true)),  // acknowledged, overlapping the get
            Some((15, false)), // failed
            None,              // indeterminate
        ] {
            let mut h = H::default();
            h.put(0, Some((10, true)));
            h.delete(12, delete);
            h.get(20, 40, GetResult::NotFound);
            assert!(h.kinds().is_empty(), "{delete:?}");
        }
        // A delete concurrent with the put may take effect after it.
        let mut h = H::default();
        h.delete(0, Some((8, true)));
        h.put(5, Some((10, true)));
        h.get(20, 30, GetResult::NotFound);
        assert!(h.kinds().is_empty());
        // But a delete that ended before the put began cannot, nor one begun after the get ended.
        let mut h = H::default();
        h.delete(0, Some((4, true)));
        h.put(5, Some((10, true)));
        h.get(20, 30, GetResult::NotFound);
        h.delete(35, None);
        assert_eq!(h.kinds(), vec![ViolationKind::Lost]);
        // Events in the same microsecond are concurrent: a delete invoked as the get ends may precede it.
        let mut h = H::default();
        h.put(0, Some((10, true)));
        h.get(20, 30, GetResult::NotFound);
        h.delete(30, Some((31, true)));
        assert!(h.kinds().is_empty());
        // ... as may a put completing as the get begins, or one begun as the get ends.
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        h.put(15, Some((20, true)));
        h.get_value(20, 30, a);
        assert!(h.kinds().is_empty());
        let mut h = H::default();
        h.op(
            OpKind::Get { key: K.into() },
            0,
            Some((
                10,
                Outcome::Ok(OpResult::Get(GetResult::Value {
                    id: Some(ValueId { writer: W, seq: 1 }),
                    len: 100,
                    small_bytes_hex: None,
                })),
            )),
        );
        h.put(10, Some((20, true)));
        assert!(h.kinds().is_empty());
        // An unacknowledged put proves nothing.
        let mut h = H::default();
        h.put(0, Some((10, false)));
        h.put(0, None);
        h.get(20, 30, GetResult::NotFound);
        assert!(h.kinds().is_empty());
    }

    #[test]
    fn torn_and_corrupt_reads_are_flagged() {
        let mut h = H::default();
        h.get(
            0,
            10,
            GetResult::Torn {
                reason: "body differs".into(),
                len: 5000,
            },
        );
        h.op(
            OpKind::Get { key: K.into() },
            20,
            Some((
                30,
                Outcome::Failed {
                    error: "missing chunk".into(),
                    corrupt: true,
                },
            )),
        );
        // A non-corrupt failure is not a violation, nor an indeterminate get.
        h.op(OpKind::Get { key: K.into() }, 40, Some((50, failed())));
        h.op(OpKind::Get { key: K.into() }, 60, None);
        assert_eq!(h.kinds(), vec![ViolationKind::Torn, ViolationKind::Corrupt]);
        let r = h.report();
        assert_eq!((r.failed, r.indeterminate), (2, 1));
    }

    fn small_get(h: &mut H, at: u64, done: u64, bytes: &[u8]) {
        h.get(
            at,
            done,
            GetResult::Value {
                id: None,
                len: bytes.len() as u64,
                small_bytes_hex: Some(to_hex(bytes)),
            },
        );
    }

    #[test]
    fn small_values_are_matched_by_bytes() {
        let small = (header_len(K.as_bytes()).expect("short key") - 1) as u64;
        let mut h = H::default();
        let a = h.put_len(0, Some((10, true)), small);
        let bytes = generate(K.as_bytes(), a, small as usize);
        assert_eq!(verify(K.as_bytes(), &bytes), Identified::Small(small));
        small_get(&mut h, 20, 30, &bytes);
        assert!(h.kinds().is_empty());
        // Once overwritten, stale.
        h.put_len(40, Some((50, true)), small);
        small_get(&mut h, 60, 70, &bytes);
        assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
        // Bytes no put wrote: torn; a bad hex record too.
        let mut h = H::default();
        h.put_len(0, Some((10, true)), small);
        small_get(&mut h, 20, 30, &vec![0xaa; small as usize]);
        h.get(
            40,
            50,
            GetResult::Value {
                id: None,
                len: 2,
                small_bytes_hex: Some("zz".into()),
            },
        );
        assert_eq!(h.kinds(), vec![ViolationKind::Torn, ViolationKind::Torn]);
    }

    #[test]
    fn identical_small_values_take_the_most_favourable_candidate() {
        // Every 0-byte value is the same: reading one is fine while any 0-byte put may be current.
        let mut h = H::default();
        h.put_len(0, Some((10, true)), 0);
        h.put_len(20, Some((30, true)), 0);
        small_get(&mut h, 40, 50, &[]);
        assert!(h.kinds().is_empty());
        // ... but not after a later 100-byte put and no 0-byte put since.
        h.put(60, Some((70, true)));
        small_get(&mut h, 80, 90, &[]);
        assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    }

    #[test]
    fn keys_are_independent() {
        let mut h = H::default();
        h.put(0, Some((10, true)));
        h.op(
            OpKind::Get {
                key: "other".into(),
            },
            20,
            Some((30, Outcome::Ok(OpResult::Get(GetResult::NotFound)))),
        );
        assert!(h.kinds().is_empty());
    }

    #[test]
    fn context_lists_the_ops_around_a_violation() {
        let mut h = H::default();
        h.put(0, Some((10, true))); // too early
        h.put(1000, Some((1010, true)));
        h.get(1020, 1030, GetResult::NotFound);
        h.op(
            OpKind::Delete {
                key: "other".into(),
            },
            1020,
            None,
        ); // other key
        h.delete(1040, None);
        let history = History::from_events(h.events.clone());
        let r = check(&history);
        assert_eq!(r.violations.len(), 1);
        let ctx: Vec<String> = context(&history, &r.violations[0], 100)
            .into_iter()
            .map(describe_op)
            .collect();
        assert_eq!(ctx.len(), 3, "{ctx:#?}");
        assert!(
            ctx[0].starts_with("put") && ctx[0].contains("(100 bytes)"),
            "{ctx:?}"
        );
        assert!(ctx[1].ends_with("→ not found"), "{ctx:?}");
        assert!(
            ctx[2].contains("indeterminate") && ctx[2].contains("ended never"),
            "{ctx:?}"
        );
    }

    #[test]
    fn the_value_of_a_refused_put_is_never_read() {
        let mut h = H::default();
        let a = h.put(0, Some((10, true)));
        let refused = h.refused_put(20, 30, 100);
        let small = h.refused_put(40, 50, 3);
        h.get_value(60, 70, a);
        h.get_value(80, 90, refused);
        small_get(&mut h, 100, 110, &generate(K.as_bytes(), small, 3));
        let r = h.report();
        assert_eq!(r.refused, 2);
        assert_eq!(
            h.kinds(),
            vec![ViolationKind::Refused, ViolationKind::Refused],
            "{r:?}"
        );
        // While a failed put may have taken effect.
        let mut h = H::default();
        let b = h.put(0, Some((10, false)));
        h.get_value(20, 30, b);
        assert!(h.report().is_clean());
    }

    #[test]
    fn summary_line_has_every_count() {
        let mut h = H::default();
        h.put(0, Some((10, true)));
        h.get(20, 30, GetResult::NotFound);
        h.delete(40, None);
        assert_eq!(
            h.report().to_string(),
            "ops 3 (puts 1, gets 1, deletes 1): ok 2, failed 0, refused 0, indeterminate 1; violations: \
             lost 1, torn 0, stale 0, corrupt 0, unknown 0, future 0, refused 0"
        );
        let json = serde_json::to_string(&h.report()).expect("serializes");
        assert!(json.contains("\"kind\":\"lost\""), "{json}");
    }

    #[test]
    fn large_hot_key_histories_check_quickly() {
        // 100 000 ops on one key, overlapping in pairs, half of the values small.
        let mut h = H::default();
        for i in 0..25_000u64 {
            let t = i * 100;
            let len = if i % 2 == 0 { 5 } else { 100 };
            let a = h.put_len(t, Some((t + 20, true)), len);
            let b = h.put_len(t + 10, Some((t + 30, true)), len);
            for (id, at) in [(a, t + 40), (b, t + 50)] {
                if len == 5 {
                    small_get(&mut h, at, at + 5, &generate(K.as_bytes(), id, 5));
                } else {
                    h.get_value(at, at + 5, id);
                }
            }
        }
        let history = History::from_events(h.events.clone());
        let started = std::time::Instant::now();
        let r = check(&history);
        let took = started.elapsed();
        println!("{} in {took:?}", r.summary());
        assert_eq!((r.ops, r.gets_with_value), (100_000, 50_000));
        assert!(r.is_clean());
        let limit = if cfg!(debug_assertions) { 30.0 } else { 3.0 };
        assert!(took.as_secs_f64() < limit, "took {took:?}");
    }

    /// Property: a sequential history generated from a model of the key (one op at a time, reads returning
    /// the model's value) never has a violation, and corrupting one read of it to an older value does.
    #[test]
    fn sequential_model_histories_are_clean_and_mutations_are_caught() {
        use rand::{Rng, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut h = H::default();
            let mut current: Option<ValueId> = None;
            let mut older: Vec<ValueId> = Vec::new();
            let mut t = 0;
            let mut mutated = false;
            for _ in 0..60 {
                t += 10;
                match rng.random_range(0..3) {
                    0 => {
                        let id = h.put(t, Some((t + 5, true)));
                        older.extend(current.replace(id));
                    }
                    1 => {
                        h.delete(t, Some((t + 5, true)));
                        older.extend(current.take());
                    }
                    _ => {
                        // Mutate the last read of the history to return an overwritten value.
                        if !mutated && !older.is_empty() && rng.random_bool(0.05) {
                            let stale = older[rng.random_range(0..older.len())];
                            h.get_value(t, t + 5, stale);
                            mutated = true;
                        } else {
                            match current {
                                Some(id) => h.get_value(t, t + 5, id),
                                None => h.get(t, t + 5, GetResult::NotFound),
                            }
                        }
                    }
                }
            }
            let r = check(&History::from_events(h.events.clone()));
            if mutated {
                assert_eq!(r.violations.len(), 1, "seed {seed}: {r:?}");
                assert_eq!(r.violations[0].kind, ViolationKind::Stale);
            } else {
                assert!(r.is_clean(), "seed {seed}: {r:?}");
            }
        }
    }
}
