//! Mapping of RocksDB errors into saltblob's: every error is an [`Error::Backend`] named [`NAME`]. The engine's
//! error is kept as the [`std::error::Error::source`]; the message repeats its text, so that a one-line report
//! is complete.

use rocksdb::ErrorKind;
use saltblob_core::Error;

use crate::config::RocksConfig;

/// Backend name used in errors.
pub const NAME: &str = "rocksdb";

/// Maps a RocksDB error: busy, timed-out and try-again errors are retryable; I/O errors, corruption and the
/// rest are not.
pub fn map(e: rocksdb::Error) -> Error {
    let retryable = matches!(
        e.kind(),
        ErrorKind::Busy | ErrorKind::TimedOut | ErrorKind::TryAgain | ErrorKind::Incomplete
    );
    Error::backend_caused(NAME, e.to_string(), retryable, e)
}

/// A resource an engine write ran out of, read from the engine's message (RocksDB's C API gives the text of
/// an I/O error, not its errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exhausted {
    /// `ENOSPC` or `EDQUOT`: the file system (or the user's quota) is full.
    Space,
    /// `EMFILE` or `ENFILE`: no file descriptor to open a file with.
    Files,
}

impl Exhausted {
    /// The resource `message` says a write ran out of, if any.
    pub(crate) fn of(message: &str) -> Option<Self> {
        if message.contains("No space left on device") || message.contains("Disk quota exceeded") {
            Some(Self::Space)
        } else if message.contains("Too many open files") {
            Some(Self::Files)
        } else {
            None
        }
    }

    /// The error of a write of the store `config` describes that ran out of this resource, retryable: out of
    /// space, RocksDB refuses writes until its own check, every 5 s, finds [`RocksConfig::resume_free_bytes`]
    /// free, then flushes and takes them again;
    /// out of descriptors, RocksDB treats that as fatal and takes no write until reopened (its C API cannot
    /// resume), which the store does itself once descriptors are free (`RocksCore::reopen_if_due`). The
    /// store does not stop: reads go on in both cases.
    pub(crate) fn error(self, config: &RocksConfig, e: rocksdb::Error) -> Error {
        let message = e.to_string();
        let path = &config.path;
        let (text, retryable) = match self {
            Self::Space => (
                format!(
                    "the file system of the store at {} is full ({message}): writes are refused until {} MiB \
                     are free, then taken again without a restart (RocksDB looks every 5 s); reads go on",
                    path.display(),
                    config.resume_free_bytes() >> 20
                ),
                true,
            ),
            Self::Files => (
                format!(
                    "the process ran out of file descriptors writing the store at {} ({message}): writes are \
                     refused until the store has reopened its engine, which it does once descriptors are free \
                     again (checked every second); reads go on. Raise the open-file limit (ulimit -n) or lower \
                     max_open_files, extent_open_files or the server's --max-connections",
                    path.display()
                ),
                true,
            ),
        };
        match self {
            // An I/O error of kind `StorageFull` in the chain: the S3 server tells a full disk by it.
            Self::Space => Error::backend_caused(
                NAME,
                text,
                retryable,
                std::io::Error::new(std::io::ErrorKind::StorageFull, e),
            ),
            Self::Files => Error::backend_caused(NAME, text, retryable, e),
        }
    }
}

/// Whether an I/O error of an engine write, by its `message`, may leave the write-ahead log saying what the
/// engine did not apply, so that the store must stop serving until it is reopened (see `RocksCore::serving`).
/// A failed sync leaves records whose fate is unknown and dirty pages the kernel may drop: it stops the store.
/// A write or an open that ran out of space or descriptors leaves at most a torn record at the log's end,
/// which recovery drops, and RocksDB takes no write after it until it has flushed its memtables and started a
/// new log: it does not.
pub(crate) fn stops_the_store(message: &str) -> bool {
    let sync = [
        "fsync",
        "fdatasync",
        "sync_file_range",
        "F_FULLSYNC",
        "msync",
    ]
    .iter()
    .any(|s| message.contains(s));
    sync || Exhausted::of(message).is_none()
}

/// Maps the failure of a blocking task (a panic inside RocksDB calls).
pub fn join(e: tokio::task::JoinError) -> Error {
    Error::backend_caused(NAME, format!("storage task failed: {e}"), false, e)
}

/// Explains a failure to open the database in `path`.
pub fn open(path: &std::path::Path, e: rocksdb::Error) -> Error {
    let message = e.to_string();
    let hint = if message.contains("lock") {
        " (another process has this store open; saltblob's embedded store is used by one process at a time)"
    } else if message.contains("Permission denied") {
        " (check the directory's permissions)"
    } else {
        ""
    };
    Error::backend_caused(
        NAME,
        format!(
            "cannot open the store at {}: {message}{hint}",
            path.display()
        ),
        false,
        e,
    )
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// A failed open keeps RocksDB's error as the source, and the message still holds its text and the hint.
    #[test]
    fn errors_keep_the_engine_error_as_their_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").expect("write");
        let engine =
            rocksdb::DB::open_default(file.join("db")).expect_err("a file is not a directory");
        let text = engine.to_string();
        let e = open(&file, engine);
        assert!(e.to_string().contains(&text), "{e}");
        let source = e.source().expect("the engine error is kept");
        assert_eq!(source.to_string(), text);
        assert!(!e.is_retryable());
    }

    /// Running out of space or descriptors on a write or an open does not stop the store; a failed sync, and
    /// any other I/O error, does. The messages are RocksDB's own (`env/io_posix.cc`).
    #[test]
    fn only_failures_that_may_leave_the_log_ahead_stop_the_store() {
        let goes_on = [
            "IO error: No space left on device: While appending to file: /s/000012.log: No space left on device",
            "IO error: No space left on device: While appending to file: /s/000045.sst: No space left on device",
            "IO error: While open a file for appending: /s/000046.log: Too many open files",
            "IO error: While open a file for random read: /s/000012.sst: Too many open files",
            "IO error: Disk quota exceeded: While appending to file: /s/000012.log: Disk quota exceeded",
        ];
        for m in goes_on {
            assert!(!stops_the_store(m), "{m}");
            assert!(Exhausted::of(m).is_some(), "{m}");
        }
        let stops = [
            "IO error: While fdatasync: /s/000012.log: Input/output error",
            "IO error: No space left on device: While fdatasync: /s/000012.log: No space left on device",
            "IO error: While fsync: a directory: No space left on device",
            "IO error: While appending to file: /s/000012.log: Input/output error",
            "IO error: While sync_file_range returned 28: /s/000012.log: No space left on device",
        ];
        for m in stops {
            assert!(stops_the_store(m), "{m}");
        }
        assert_eq!(
            Exhausted::of("IO error: While open a file for appending: x: Too many open files"),
            Some(Exhausted::Files)
        );
    }
}
