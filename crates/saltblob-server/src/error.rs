//! saltblob's errors as the S3 errors clients expect, each with S3's fixed message for its code: the store's own
//! text names store keys (`s3/o/<bucket>/<key>`) and limits of the store, which are not the client's business,
//! so it goes to the log only (at debug level for the client's mistakes, warn or error for failures).

use s3s::{S3Error, S3ErrorCode};
use saltblob_core::Error;

/// S3's message of `NoSuchVersion`.
pub(crate) const NO_SUCH_VERSION: &str = "The specified version does not exist.";

/// The S3 error for a failed store operation on an object.
pub(crate) fn from_store(e: Error) -> S3Error {
    let (code, message) = match &e {
        Error::NotFound { .. } => (S3ErrorCode::NoSuchKey, "The specified key does not exist."),
        Error::VersionNotFound { .. } => (S3ErrorCode::NoSuchVersion, NO_SUCH_VERSION),
        Error::InvalidKey { .. } => (S3ErrorCode::KeyTooLongError, "Your key is too long"),
        Error::InvalidArgument {
            what: "metadata" | "content type",
            ..
        } => (
            S3ErrorCode::MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size.",
        ),
        Error::InvalidArgument { .. } => (
            S3ErrorCode::InvalidArgument,
            "An argument of the request is not valid.",
        ),
        Error::AlreadyExists { .. } | Error::PreconditionFailed { .. } => (
            S3ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        ),
        Error::RangeNotSatisfiable { .. } => (
            S3ErrorCode::InvalidRange,
            "The requested range is not satisfiable",
        ),
        Error::TooLarge { .. } => (
            S3ErrorCode::EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed object size.",
        ),
        Error::SizeMismatch { .. } | Error::Io(_) => (
            S3ErrorCode::IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header.",
        ),
        Error::KeyUnavailable {
            retryable: false, ..
        } => {
            let mut error = S3Error::with_message(
                S3ErrorCode::Custom("KMS.DisabledException".into()),
                "The key that encrypts this object is not available (disabled, retired or unknown to the key provider).",
            );
            error.set_status_code(http::StatusCode::BAD_REQUEST);
            tracing::warn!(error = %e, "a sealed object's key is not available");
            return error;
        }
        e if disk_full(e) => {
            tracing::warn!(error = %e, "a put refused: the store's disk is (nearly) full");
            (
                S3ErrorCode::SlowDown,
                "The store is low on disk space; please retry later.",
            )
        }
        e if e.is_retryable() => {
            tracing::warn!(error = %e, "store operation failed (retryable)");
            (
                S3ErrorCode::ServiceUnavailable,
                "The store is busy or unavailable; please retry.",
            )
        }
        e => {
            tracing::error!(error = %e, corruption = e.is_corruption(), "store operation failed");
            (
                S3ErrorCode::InternalError,
                "We encountered an internal error. Please try again.",
            )
        }
    };
    if ![
        S3ErrorCode::ServiceUnavailable,
        S3ErrorCode::InternalError,
        S3ErrorCode::SlowDown,
    ]
    .contains(&code)
    {
        tracing::debug!(error = %e, code = code.as_str(), "store refused a request");
    }
    S3Error::with_message(code, message)
}

/// Whether `e` was caused by a full disk: an I/O error `ENOSPC` or `EDQUOT`, or a free-space floor's refusal
/// (`StorageFull`), anywhere in its chain of sources.
fn disk_full(e: &Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// `NoSuchBucket` (the bucket is named by the request; the message is S3's).
pub(crate) fn no_such_bucket(bucket: &str) -> S3Error {
    tracing::debug!(bucket, "no such bucket");
    S3Error::with_message(
        S3ErrorCode::NoSuchBucket,
        "The specified bucket does not exist",
    )
}

/// The S3 error of a put sealed under `key` (a key it named, or its bucket's default did) that failed with `e`:
/// a key the provider cannot seal under is the client's `KMS.NotFoundException` (nothing was stored: the core
/// refuses before it writes); else as [`from_store`].
pub(crate) fn from_sealed_put(e: Error, key: &str) -> S3Error {
    match &e {
        Error::KeyUnavailable {
            retryable: false, ..
        } => {
            tracing::debug!(error = %e, "a put names a key the provider cannot seal under");
            key_not_found(key)
        }
        _ => from_store(e),
    }
}

/// `KMS.NotFoundException` (400), AWS's answer to a put under a key id its KMS does not have.
pub(crate) fn key_not_found(key: &str) -> S3Error {
    let mut error = S3Error::with_message(
        S3ErrorCode::Custom("KMS.NotFoundException".into()),
        format!("Invalid keyId {key}"),
    );
    error.set_status_code(http::StatusCode::BAD_REQUEST);
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_s3_codes_without_internal_detail() {
        let key = saltblob_core::KeyDisplay(b"s3/o/b/k".to_vec());
        let cases = [
            (Error::NotFound { key: key.clone() }, S3ErrorCode::NoSuchKey),
            (
                Error::RangeNotSatisfiable {
                    key: key.clone(),
                    start: 5,
                    end: 9,
                    size: 3,
                },
                S3ErrorCode::InvalidRange,
            ),
            (
                Error::TooLarge {
                    key: key.clone(),
                    size: 9,
                    max: 3,
                },
                S3ErrorCode::EntityTooLarge,
            ),
            (
                Error::InvalidKey {
                    reason: "key \"s3/o/b/k\" is longer than 1024 bytes".into(),
                },
                S3ErrorCode::KeyTooLongError,
            ),
            (
                Error::invalid("metadata", "key \"s3/o/b/k\" has 9000 bytes of metadata"),
                S3ErrorCode::MetadataTooLarge,
            ),
            (
                Error::backend("rocksdb", "busy", true),
                S3ErrorCode::ServiceUnavailable,
            ),
            (
                Error::backend("cql", "password=hunter2 rejected", false),
                S3ErrorCode::InternalError,
            ),
            (
                Error::backend_caused(
                    "rocksdb",
                    "extent file /hunter2: cannot allocate 9 MiB for it",
                    false,
                    std::io::Error::new(std::io::ErrorKind::StorageFull, "floor"),
                ),
                S3ErrorCode::SlowDown,
            ),
            (
                Error::backend_caused(
                    "rocksdb",
                    "hunter2",
                    false,
                    // ENOSPC
                    std::io::Error::from_raw_os_error(28),
                ),
                S3ErrorCode::SlowDown,
            ),
            (
                Error::KeyUnavailable {
                    provider: "local",
                    key: "\"k\" version 2".into(),
                    reason: "retired (keyring /etc/hunter2)".into(),
                    retryable: false,
                },
                S3ErrorCode::Custom("KMS.DisabledException".into()),
            ),
        ];
        for (error, code) in cases {
            let s3 = from_store(error);
            assert_eq!(s3.code(), &code);
            let message = s3.message().unwrap_or_default();
            assert!(
                !message.contains("hunter2") && !message.contains("s3/o/"),
                "{message}"
            );
        }
    }
}
