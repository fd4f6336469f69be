//! Mapping of RocksDB errors into saltblob's.

use rocksdb::ErrorKind;
use saltblob_core::Error;

use crate::backend::NAME;

/// Maps a RocksDB error: busy, timed-out and try-again errors are retryable; I/O errors, corruption and the
/// rest are not.
pub fn map(e: rocksdb::Error) -> Error {
    let retryable = matches!(
        e.kind(),
        ErrorKind::Busy | ErrorKind::TimedOut | ErrorKind::TryAgain | ErrorKind::Incomplete
    );
    Error::backend(NAME, e.into_string(), retryable)
}

/// Maps the failure of a blocking task (a panic inside RocksDB calls).
pub fn join(e: tokio::task::JoinError) -> Error {
    Error::backend(NAME, format!("storage task failed: {e}"), false)
}

/// Explains a failure to open the database in `path`.
pub fn open(path: &std::path::Path, e: rocksdb::Error) -> Error {
    let message = e.into_string();
    let hint = if message.contains("lock") {
        " (another process has this store open; saltblob's embedded store is used by one process at a time)"
    } else if message.contains("Permission denied") {
        " (check the directory's permissions)"
    } else {
        ""
    };
    Error::backend(
        NAME,
        format!(
            "cannot open the store at {}: {message}{hint}",
            path.display()
        ),
        false,
    )
}
