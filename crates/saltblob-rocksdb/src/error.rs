//! Mapping of RocksDB errors into saltblob's: every error is an [`Error::Backend`] named [`NAME`]. The engine's
//! error is kept as the [`std::error::Error::source`]; the message repeats its text, so that a one-line report
//! is complete.

use rocksdb::ErrorKind;
use saltblob_core::Error;

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
}
