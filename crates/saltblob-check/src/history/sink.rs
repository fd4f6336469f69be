//! Where histories are recorded: [`MemorySink`] in memory, [`FileSink`] as JSON lines in a file that several
//! processes append to.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Event, History};

/// Where clients record their events. Recording never fails: implementations retry or panic.
pub trait HistorySink: Send + Sync + fmt::Debug {
    /// Records one event.
    fn record(&self, event: &Event);
}

/// A sink keeping events in memory; clones share the same events.
#[derive(Clone, Debug, Default)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<Event>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the events recorded so far, in recording order.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The history of the events recorded so far.
    pub fn history(&self) -> History {
        History::from_events(self.events())
    }

    /// Forgets every event.
    pub fn clear(&self) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

impl HistorySink for MemorySink {
    fn record(&self, event: &Event) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event.clone());
    }
}

/// A sink that records into another every invocation at time `from` and every completion at time `to`: for the
/// reads of a snapshot (a backup) that holds the store as it was at some instant between `from` and `to`, so
/// that the checker judges each read as one that took effect at that instant: it must not miss a write
/// acknowledged before `from`, nor show one begun after `to` or replaced before `from`.
#[derive(Debug)]
pub struct SnapshotSink {
    inner: Arc<dyn HistorySink>,
    from: u64,
    to: u64,
}

impl SnapshotSink {
    /// Records into `inner` as reads of a snapshot taken between `from` and `to` (Unix microseconds).
    pub fn new(inner: Arc<dyn HistorySink>, from: u64, to: u64) -> Self {
        Self { inner, from, to }
    }
}

impl HistorySink for SnapshotSink {
    fn record(&self, event: &Event) {
        let event = match event.clone() {
            Event::Invoke { op, kind, .. } => Event::Invoke {
                op,
                at: self.from,
                kind,
            },
            Event::Complete { op, outcome, .. } => Event::Complete {
                op,
                at: self.to,
                outcome,
            },
            barrier @ Event::Barrier { .. } => barrier,
        };
        self.inner.record(&event);
    }
}

/// Attempts of one I/O call of a [`FileSink`] before it panics.
pub const FILE_ATTEMPTS: u32 = 10_000;

/// A sink appending JSON lines to a file opened with `O_APPEND`, so that several processes may share it.
///
/// Each event is written as one `write` call of a whole line. A failed or short write is retried (the rest
/// of the line) after a short sleep, up to [`FILE_ATTEMPTS`] attempts, then the sink panics: histories are
/// recorded under injected I/O faults and must not lose events. Opening a file that does not end with a
/// newline (a writer killed mid-line) first terminates that line, so the next event starts a line of its own.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    file: Mutex<File>,
}

/// Runs `op` until it succeeds, retrying interrupted calls at once and other failures after a short sleep.
fn retry_io<T>(what: &str, path: &Path, mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut attempt = 0;
    loop {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                attempt += 1;
                if attempt >= FILE_ATTEMPTS {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "{what} {} failed {attempt} times, last: {e}",
                            path.display()
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

impl FileSink {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut file = retry_io("opening", &path, || {
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&path)
        })?;
        let len = retry_io("reading the length of", &path, || file.metadata())?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            retry_io("reading the end of", &path, || {
                file.seek(SeekFrom::Start(len - 1))?;
                file.read_exact(&mut last)
            })?;
            if last[0] != b'\n' {
                write_all_retrying(&file, b"\n", &path, FILE_ATTEMPTS)?;
            }
        }
        Ok(Self {
            path,
            file: Mutex::new(file),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes all of `line`, one `write` call per attempt, retrying failed and short writes.
pub(super) fn write_all_retrying(
    mut file: impl Write,
    line: &[u8],
    path: &Path,
    attempts: u32,
) -> io::Result<()> {
    let mut written = 0;
    let mut failures = 0;
    while written < line.len() {
        match file.write(&line[written..]) {
            Ok(n) if n > 0 => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => {
                failures += 1;
                if failures >= attempts {
                    let why = match other {
                        Err(e) => e.to_string(),
                        Ok(_) => "no byte written".to_owned(),
                    };
                    return Err(io::Error::other(format!(
                        "appending to {} failed {failures} times, last: {why}",
                        path.display()
                    )));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    Ok(())
}

impl HistorySink for FileSink {
    fn record(&self, event: &Event) {
        let mut line = match serde_json::to_vec(event) {
            Ok(l) => l,
            Err(e) => panic!("history event does not serialize: {e}"),
        };
        line.push(b'\n');
        let file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = write_all_retrying(&*file, &line, &self.path, FILE_ATTEMPTS) {
            panic!("history event lost: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{ViolationKind, check};
    use crate::history::{GetResult, OpId, OpKind, OpResult, Outcome};
    use crate::value::ValueId;

    /// Two acknowledged puts of `k` (at 10..20 and 30..40), then a read of a snapshot taken in `from..to` that
    /// shows the first: stale for a snapshot after the second put, fine for one that may precede it.
    fn first_value_read_in_snapshot(from: u64, to: u64) -> crate::checker::Report {
        let sink = MemorySink::new();
        for (seq, (invoked, done)) in [(10, 20), (30, 40)].into_iter().enumerate() {
            let op = OpId {
                client: 1,
                seq: seq as u64,
            };
            let id = ValueId {
                writer: 1,
                seq: seq as u64,
            };
            sink.record(&Event::Invoke {
                op,
                at: invoked,
                kind: OpKind::Put {
                    key: "k".into(),
                    id,
                    len: 100,
                },
            });
            sink.record(&Event::Complete {
                op,
                at: done,
                outcome: Outcome::Ok(OpResult::Put),
            });
        }
        let snapshot = SnapshotSink::new(Arc::new(sink.clone()), from, to);
        let op = OpId { client: 2, seq: 0 };
        // Read long after, as a restored backup is.
        snapshot.record(&Event::Invoke {
            op,
            at: 1_000,
            kind: OpKind::Get { key: "k".into() },
        });
        let read = GetResult::Value {
            id: Some(ValueId { writer: 1, seq: 0 }),
            len: 100,
            small_bytes_hex: None,
        };
        snapshot.record(&Event::Complete {
            op,
            at: 1_001,
            outcome: Outcome::Ok(OpResult::Get(read)),
        });
        check(&sink.history())
    }

    #[test]
    fn reads_of_a_snapshot_are_judged_at_its_instant() {
        let after = first_value_read_in_snapshot(50, 60);
        assert_eq!(after.count(ViolationKind::Stale), 1, "{after}");
        let during = first_value_read_in_snapshot(35, 60);
        assert!(during.is_clean(), "{during}");
    }
}
