//! Histories: what every client did, as events recorded before and after each operation.
//!
//! A client records an [`Event::Invoke`] before an operation starts and an [`Event::Complete`] after it
//! ends, both carrying the operation's globally unique [`OpId`]. An operation with an invocation and no
//! completion (its process was killed, or it was still running when the history was read) is
//! **indeterminate**: it may have taken effect at any time after its invocation. An [`Event::Barrier`]
//! records that every operation invoked before it and still incomplete is over for good (e.g. its process
//! was killed and reaped), which bounds when indeterminate operations may have taken effect.
//!
//! Times are wall-clock Unix microseconds, since a history may span several processes of one machine;
//! [`now_micros`] never goes backwards within a process.
//!
//! Histories are stored as JSON lines, one event a line ([`FileSink`]), or kept in memory ([`MemorySink`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::value::ValueId;

mod sink;

pub use sink::{FILE_ATTEMPTS, FileSink, HistorySink, MemorySink, SnapshotSink};

/// Wall-clock Unix microseconds, never smaller than a value returned before in this process.
pub fn now_micros() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let previous = LAST.fetch_max(wall, Ordering::Relaxed);
    previous.max(wall)
}

/// The globally unique id of one operation: the client's random id and its counter.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub struct OpId {
    /// Random id of the client (also the `writer` of the values it puts).
    pub client: u64,
    /// The client's counter (also the `seq` of the value of a put).
    pub seq: u64,
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}.{}", self.client, self.seq)
    }
}

/// What an operation does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Writes the value `id` of `len` bytes (see [`crate::value::generate`]) under `key`.
    Put {
        /// The key.
        key: String,
        /// The value written.
        id: ValueId,
        /// Its length in bytes.
        len: u64,
    },
    /// Reads the whole value of `key`.
    Get {
        /// The key.
        key: String,
    },
    /// Deletes `key`.
    Delete {
        /// The key.
        key: String,
    },
    /// Writes the value `id` of `len` bytes under `key` as [`OpKind::Put`] does, keeping the version it
    /// replaces (`saltblob_core::PutOptions::keep_replaced`): that version stays readable by its id until a
    /// removal ([`OpKind::RemoveVersion`]).
    PutKeeping {
        /// The key.
        key: String,
        /// The value written.
        id: ValueId,
        /// Its length in bytes.
        len: u64,
    },
    /// Reads the whole value of version `version` of `key`, current or kept
    /// (`saltblob_core::GetOptions::version`). A successful get that found no such version records
    /// [`GetResult::NotFound`].
    GetVersion {
        /// The key.
        key: String,
        /// The version, as `saltblob_core::VersionId` displays it (an acknowledged put's
        /// [`OpResult::PutVersion`]).
        version: String,
    },
    /// Removes version `version` of `key` (`saltblob_core::BlobStore::remove_version`): a kept version goes;
    /// the current one is replaced by the newest kept version, or deleted when none is kept.
    RemoveVersion {
        /// The key.
        key: String,
        /// The version, as `saltblob_core::VersionId` displays it.
        version: String,
    },
}

impl OpKind {
    /// The key the operation is on.
    pub fn key(&self) -> &str {
        match self {
            OpKind::Put { key, .. }
            | OpKind::PutKeeping { key, .. }
            | OpKind::Get { key }
            | OpKind::GetVersion { key, .. }
            | OpKind::Delete { key }
            | OpKind::RemoveVersion { key, .. } => key,
        }
    }

    /// `put`, `put_keeping`, `get`, `get_version`, `delete` or `remove_version`.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Put { .. } => "put",
            OpKind::PutKeeping { .. } => "put_keeping",
            OpKind::Get { .. } => "get",
            OpKind::GetVersion { .. } => "get_version",
            OpKind::Delete { .. } => "delete",
            OpKind::RemoveVersion { .. } => "remove_version",
        }
    }

    /// The value a put (keeping or not) writes and its length; `None` for other operations.
    pub fn put_value(&self) -> Option<(ValueId, u64)> {
        match self {
            OpKind::Put { id, len, .. } | OpKind::PutKeeping { id, len, .. } => Some((*id, *len)),
            _ => None,
        }
    }

    /// Whether it is a read: [`OpKind::Get`] or [`OpKind::GetVersion`].
    pub fn is_read(&self) -> bool {
        matches!(self, OpKind::Get { .. } | OpKind::GetVersion { .. })
    }
}

/// What a successful get returned, as verified by the client when it read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GetResult {
    /// The key held no value.
    NotFound,
    /// A value that verified: whole with an id, or small (no header) with its raw bytes.
    Value {
        /// The value's id when it carried a header ([`crate::value::Identified::Whole`]).
        id: Option<ValueId>,
        /// Its length in bytes.
        len: u64,
        /// Hex of the raw bytes of a value too short for a header ([`crate::value::Identified::Small`]).
        small_bytes_hex: Option<String>,
    },
    /// Bytes that failed [`crate::value::verify`]: torn, mixed, foreign or damaged.
    Torn {
        /// What the verification found.
        reason: String,
        /// Length of what was read.
        len: u64,
    },
}

/// What a completed operation returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpResult {
    /// A put was acknowledged.
    Put,
    /// A delete was acknowledged; `found` says whether the store reported a version it removed
    /// (informational, not checked).
    Delete {
        /// Whether a version was removed.
        found: bool,
    },
    /// A get returned.
    Get(GetResult),
    /// A put was acknowledged and reported the version it created (recorded by keeping clients; an
    /// acknowledged put may record [`OpResult::Put`] instead, naming no version).
    PutVersion {
        /// The version, as `saltblob_core::VersionId` displays it.
        version: String,
    },
    /// A removal of a version returned: `found` is false when the key neither held nor kept that version
    /// (`saltblob_core::Error::VersionNotFound`), and the removal then changed nothing.
    RemoveVersion {
        /// Whether the version was there and is removed.
        found: bool,
        /// The version made current in place of the removed current one, if any (informational, not checked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        promoted: Option<String>,
    },
}

/// How a completed operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It returned a result.
    Ok(OpResult),
    /// It returned an error. A failed put or delete may or may not have taken effect.
    Failed {
        /// The error, as displayed.
        error: String,
        /// Whether it was evidence of corrupt stored data (`saltblob_core::Error::is_corruption`).
        corrupt: bool,
    },
    /// A conditional put was refused because its condition did not hold: it certainly took no effect.
    Refused {
        /// The error, as displayed.
        error: String,
    },
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// An operation is about to start (recorded before it starts).
    Invoke {
        /// The operation.
        op: OpId,
        /// When, in Unix microseconds.
        at: u64,
        /// What it does.
        kind: OpKind,
    },
    /// An operation ended (recorded after it ended).
    Complete {
        /// The operation.
        op: OpId,
        /// When, in Unix microseconds.
        at: u64,
        /// How it ended.
        outcome: Outcome,
    },
    /// Every operation invoked at or before `at` and not completed is over and will never take effect later
    /// (its process is dead).
    Barrier {
        /// When, in Unix microseconds.
        at: u64,
    },
}

/// One operation of a history: its invocation paired with its completion, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Op {
    /// Its id.
    pub id: OpId,
    /// What it does.
    pub kind: OpKind,
    /// When it was invoked (Unix microseconds).
    pub invoke: u64,
    /// When it completed; `None` for an indeterminate operation.
    pub complete: Option<u64>,
    /// How it ended; `None` for an indeterminate operation.
    pub outcome: Option<Outcome>,
    /// The latest time it may have taken effect: its completion, else the first barrier at or after its
    /// invocation, else `u64::MAX` (+infinity).
    pub end: u64,
}

impl Op {
    /// Whether it has no completion.
    pub fn is_indeterminate(&self) -> bool {
        self.outcome.is_none()
    }

    /// Whether it completed without an error.
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Some(Outcome::Ok(_)))
    }

    /// Whether it was a conditional put refused by its condition.
    pub fn is_refused(&self) -> bool {
        matches!(self.outcome, Some(Outcome::Refused { .. }))
    }

    /// The version an acknowledged put reported creating ([`OpResult::PutVersion`]).
    pub fn created_version(&self) -> Option<&str> {
        match &self.outcome {
            Some(Outcome::Ok(OpResult::PutVersion { version })) => Some(version),
            _ => None,
        }
    }
}

/// A history: operations in invocation order, plus what could not be paired or parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct History {
    /// Every invoked operation, by invocation time.
    pub ops: Vec<Op>,
    /// Completions without an invocation (ignored).
    pub orphan_completions: usize,
    /// Invocations or completions of an id seen before (the first is kept).
    pub duplicate_events: usize,
    /// Lines that did not parse, other than a truncated last line (ignored).
    pub malformed_lines: usize,
    /// Last lines without a newline that did not parse (a writer killed mid-line; ignored).
    pub truncated_lines: usize,
}

impl History {
    /// Pairs invocations and completions (in any order) into operations.
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> History {
        let mut invokes: HashMap<OpId, (u64, OpKind)> = HashMap::new();
        let mut completes: HashMap<OpId, (u64, Outcome)> = HashMap::new();
        let mut barriers = Vec::new();
        let mut history = History::default();
        for event in events {
            match event {
                Event::Invoke { op, at, kind } => match invokes.entry(op) {
                    Entry::Occupied(_) => history.duplicate_events += 1,
                    Entry::Vacant(v) => {
                        v.insert((at, kind));
                    }
                },
                Event::Complete { op, at, outcome } => match completes.entry(op) {
                    Entry::Occupied(_) => history.duplicate_events += 1,
                    Entry::Vacant(v) => {
                        v.insert((at, outcome));
                    }
                },
                Event::Barrier { at } => barriers.push(at),
            }
        }
        barriers.sort_unstable();
        history.orphan_completions = completes
            .keys()
            .filter(|id| !invokes.contains_key(id))
            .count();
        history.ops = invokes
            .into_iter()
            .map(|(id, (invoke, kind))| {
                let done = completes.remove(&id);
                let end = match &done {
                    Some((at, _)) => *at,
                    None => {
                        let i = barriers.partition_point(|b| *b < invoke);
                        barriers.get(i).copied().unwrap_or(u64::MAX)
                    }
                };
                let (complete, outcome) = done.map_or((None, None), |(a, o)| (Some(a), Some(o)));
                Op {
                    id,
                    kind,
                    invoke,
                    complete,
                    outcome,
                    end,
                }
            })
            .collect();
        history.ops.sort_by_key(|op| (op.invoke, op.id));
        history
    }

    /// Parses JSON lines (see [`History::parse_events`]) and pairs them.
    pub fn parse(text: &[u8]) -> History {
        let (events, malformed, truncated) = Self::parse_events(text);
        let mut h = History::from_events(events);
        h.malformed_lines = malformed;
        h.truncated_lines = truncated;
        h
    }

    /// The events of JSON lines, with the number of malformed lines and of truncated last lines (one
    /// without a newline that does not parse). Empty lines are skipped.
    pub fn parse_events(text: &[u8]) -> (Vec<Event>, usize, usize) {
        let mut events = Vec::new();
        let (mut malformed, mut truncated) = (0, 0);
        let mut rest = text;
        while !rest.is_empty() {
            let (line, terminated) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    let line = &rest[..i];
                    rest = &rest[i + 1..];
                    (line, true)
                }
                None => {
                    let line = rest;
                    rest = &[];
                    (line, false)
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Event>(line) {
                Ok(e) => events.push(e),
                Err(_) if !terminated => truncated += 1,
                Err(_) => malformed += 1,
            }
        }
        (events, malformed, truncated)
    }

    /// Reads a history file written by [`FileSink`].
    pub fn load(path: impl AsRef<Path>) -> io::Result<History> {
        Self::load_all([path])
    }

    /// Reads several history files (e.g. one per process) as one history.
    pub fn load_all<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> io::Result<History> {
        let mut events = Vec::new();
        let (mut malformed, mut truncated) = (0, 0);
        for path in paths {
            let text = std::fs::read(path.as_ref()).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: {e}", path.as_ref().display()))
            })?;
            let (e, m, t) = Self::parse_events(&text);
            events.extend(e);
            malformed += m;
            truncated += t;
        }
        let mut h = History::from_events(events);
        h.malformed_lines = malformed;
        h.truncated_lines = truncated;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::sink::write_all_retrying;
    use super::*;

    fn invoke(client: u64, seq: u64, at: u64, kind: OpKind) -> Event {
        Event::Invoke {
            op: OpId { client, seq },
            at,
            kind,
        }
    }

    fn complete(client: u64, seq: u64, at: u64, outcome: Outcome) -> Event {
        Event::Complete {
            op: OpId { client, seq },
            at,
            outcome,
        }
    }

    fn get(key: &str) -> OpKind {
        OpKind::Get { key: key.into() }
    }

    #[test]
    fn now_micros_is_monotonic_and_recent() {
        let a = now_micros();
        let b = now_micros();
        assert!(b >= a);
        assert!(a > 1_600_000_000_000_000);
    }

    #[test]
    fn events_pair_into_ops_with_barriers_bounding_indeterminate_ones() {
        let events = vec![
            invoke(1, 0, 10, get("a")),
            invoke(2, 0, 5, OpKind::Delete { key: "a".into() }),
            complete(1, 0, 20, Outcome::Ok(OpResult::Get(GetResult::NotFound))),
            invoke(3, 0, 30, get("b")),
            Event::Barrier { at: 40 },
            invoke(3, 1, 50, get("b")),
            complete(9, 9, 60, Outcome::Ok(OpResult::Put)),
            complete(1, 0, 70, Outcome::Ok(OpResult::Put)),
        ];
        let h = History::from_events(events);
        let summary: Vec<(u64, Option<u64>, u64)> = h
            .ops
            .iter()
            .map(|o| (o.invoke, o.complete, o.end))
            .collect();
        assert_eq!(
            summary,
            vec![
                (5, None, 40),
                (10, Some(20), 20),
                (30, None, 40),
                (50, None, u64::MAX)
            ]
        );
        assert!(h.ops[0].is_indeterminate() && !h.ops[0].is_ok());
        assert!(h.ops[1].is_ok());
        assert_eq!((h.orphan_completions, h.duplicate_events), (1, 1));
    }

    #[test]
    fn events_round_trip_as_json_lines() {
        let events = vec![
            invoke(
                1,
                2,
                3,
                OpKind::Put {
                    key: "k".into(),
                    id: ValueId { writer: 1, seq: 2 },
                    len: 4,
                },
            ),
            complete(
                1,
                3,
                4,
                Outcome::Ok(OpResult::Get(GetResult::Value {
                    id: None,
                    len: 2,
                    small_bytes_hex: Some("abcd".into()),
                })),
            ),
            complete(
                1,
                4,
                5,
                Outcome::Failed {
                    error: "boom".into(),
                    corrupt: true,
                },
            ),
            complete(1, 5, 6, Outcome::Ok(OpResult::Delete { found: true })),
            Event::Barrier { at: 7 },
        ];
        let mut text = Vec::new();
        for e in &events {
            text.extend(serde_json::to_vec(e).expect("serializes"));
            text.push(b'\n');
        }
        let (parsed, malformed, truncated) = History::parse_events(&text);
        assert_eq!((parsed, malformed, truncated), (events, 0, 0));
    }

    /// Histories written before kept versions were recorded parse as they did; the events of keeping clients
    /// round-trip.
    #[test]
    fn old_lines_parse_and_kept_version_events_round_trip() {
        let old = concat!(
            r#"{"ev":"invoke","op":{"client":1,"seq":0},"at":10,"kind":{"put":{"key":"k","id":{"writer":1,"seq":0},"len":4}}}"#,
            "\n",
            r#"{"ev":"complete","op":{"client":1,"seq":0},"at":20,"outcome":{"ok":"put"}}"#,
            "\n",
            r#"{"ev":"invoke","op":{"client":1,"seq":1},"at":30,"kind":{"delete":{"key":"k"}}}"#,
            "\n",
            r#"{"ev":"complete","op":{"client":1,"seq":1},"at":40,"outcome":{"ok":{"delete":{"found":true}}}}"#,
            "\n",
        );
        let (events, malformed, truncated) = History::parse_events(old.as_bytes());
        assert_eq!((malformed, truncated), (0, 0));
        assert_eq!(
            events[1],
            complete(1, 0, 20, Outcome::Ok(OpResult::Put)),
            "{events:?}"
        );
        let h = History::from_events(events);
        assert_eq!(h.ops.len(), 2);
        assert_eq!(h.ops[0].created_version(), None);

        let events = vec![
            invoke(
                2,
                0,
                1,
                OpKind::PutKeeping {
                    key: "k".into(),
                    id: ValueId { writer: 2, seq: 0 },
                    len: 3,
                },
            ),
            complete(
                2,
                0,
                2,
                Outcome::Ok(OpResult::PutVersion {
                    version: "0123abcd".into(),
                }),
            ),
            invoke(
                2,
                1,
                3,
                OpKind::GetVersion {
                    key: "k".into(),
                    version: "0123abcd".into(),
                },
            ),
            invoke(
                2,
                2,
                4,
                OpKind::RemoveVersion {
                    key: "k".into(),
                    version: "0123abcd".into(),
                },
            ),
            complete(
                2,
                2,
                5,
                Outcome::Ok(OpResult::RemoveVersion {
                    found: true,
                    promoted: Some("00ff".into()),
                }),
            ),
            complete(
                2,
                3,
                6,
                Outcome::Ok(OpResult::RemoveVersion {
                    found: false,
                    promoted: None,
                }),
            ),
        ];
        let mut text = Vec::new();
        for e in &events {
            text.extend(serde_json::to_vec(e).expect("serializes"));
            text.push(b'\n');
        }
        let line = String::from_utf8_lossy(&text);
        assert!(
            line.contains(r#""outcome":{"ok":{"remove_version":{"found":false}}}"#),
            "{line}"
        );
        let (parsed, malformed, truncated) = History::parse_events(&text);
        assert_eq!((parsed, malformed, truncated), (events, 0, 0));
        let h = History::parse(&text);
        assert_eq!(h.ops[0].created_version(), Some("0123abcd"));
        assert!(h.ops[0].kind.put_value().is_some() && !h.ops[0].kind.is_read());
        assert!(h.ops[1].kind.is_read());
    }

    #[test]
    fn parsing_tolerates_a_truncated_tail_and_counts_garbage() {
        let good = serde_json::to_string(&Event::Barrier { at: 1 }).expect("serializes");
        let text = format!("{good}\n\nnot json\n{good}\n{}", &good[..good.len() / 2]);
        let (events, malformed, truncated) = History::parse_events(text.as_bytes());
        assert_eq!((events.len(), malformed, truncated), (2, 1, 1));
    }

    #[test]
    fn file_sink_appends_lines_and_repairs_a_cut_line() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("history.jsonl");
        let e1 = invoke(1, 0, 10, get("a"));
        let e2 = complete(1, 0, 20, Outcome::Ok(OpResult::Get(GetResult::NotFound)));
        {
            let sink = FileSink::open(&path)?;
            sink.record(&e1);
        }
        // A writer killed in the middle of a line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"{\"ev\":\"inv")?;
        {
            let sink = FileSink::open(&path)?;
            assert_eq!(sink.path(), path.as_path());
            sink.record(&e2);
        }
        let h = History::load(&path)?;
        assert_eq!(h.malformed_lines, 1);
        assert_eq!(h.ops.len(), 1);
        assert_eq!(h.ops[0].complete, Some(20));
        let (events, _, _) = History::parse_events(&std::fs::read(&path)?);
        assert_eq!(events, vec![e1, e2]);
        Ok(())
    }

    /// Fails its first `fail` writes (EIO, EINTR, zero bytes in turn), then writes at most 3 bytes a call.
    struct Flaky {
        fail: usize,
        calls: usize,
        out: Vec<u8>,
    }

    impl Write for &mut Flaky {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls <= self.fail {
                return match self.calls % 3 {
                    0 => Err(io::Error::from_raw_os_error(5)),
                    1 => Err(io::ErrorKind::Interrupted.into()),
                    _ => Ok(0),
                };
            }
            let n = buf.len().min(3);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn failed_and_short_writes_are_retried() {
        let line = b"{\"ev\":\"barrier\",\"at\":1}\n";
        let mut flaky = Flaky {
            fail: 30,
            calls: 0,
            out: Vec::new(),
        };
        write_all_retrying(&mut flaky, line, Path::new("flaky"), FILE_ATTEMPTS)
            .expect("retried until written");
        assert_eq!(flaky.out, line);
        // A writer that never succeeds gives up after the given number of failures (EINTR not counted).
        let mut dead = Flaky {
            fail: usize::MAX,
            calls: 0,
            out: Vec::new(),
        };
        let e = write_all_retrying(&mut dead, line, Path::new("dead"), 100).expect_err("gives up");
        assert!(e.to_string().contains("dead failed 100 times"), "{e}");
    }

    #[test]
    fn several_files_load_as_one_history() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        FileSink::open(&a)?.record(&invoke(1, 0, 10, get("k")));
        FileSink::open(&b)?.record(&complete(
            1,
            0,
            20,
            Outcome::Ok(OpResult::Get(GetResult::NotFound)),
        ));
        let h = History::load_all([&a, &b])?;
        assert_eq!(h.ops.len(), 1);
        assert!(h.ops[0].is_ok());
        assert!(History::load(dir.path().join("missing")).is_err());
        Ok(())
    }

    #[test]
    fn memory_sink_clones_share_events() {
        let sink = MemorySink::new();
        let other = sink.clone();
        other.record(&Event::Barrier { at: 3 });
        assert_eq!(sink.events(), vec![Event::Barrier { at: 3 }]);
        assert!(sink.history().ops.is_empty());
        sink.clear();
        assert!(other.events().is_empty());
    }
}
