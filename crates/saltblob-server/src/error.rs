//! saltblob's errors as the S3 errors clients expect. Client errors keep saltblob's message (it names the key,
//! never a secret); storage and internal failures get a generic message, their detail going to the log only.

use s3s::{S3Error, S3ErrorCode};
use saltblob_core::Error;

/// The S3 error for a failed store operation on an object.
pub(crate) fn from_store(e: Error) -> S3Error {
    let (code, message) = match &e {
        Error::NotFound { .. } => (
            S3ErrorCode::NoSuchKey,
            "The specified key does not exist.".to_owned(),
        ),
        Error::InvalidKey { .. } => (S3ErrorCode::KeyTooLongError, e.to_string()),
        Error::InvalidArgument {
            what: "metadata" | "content type",
            ..
        } => (S3ErrorCode::MetadataTooLarge, e.to_string()),
        Error::InvalidArgument { .. } => (S3ErrorCode::InvalidArgument, e.to_string()),
        Error::AlreadyExists { .. } | Error::PreconditionFailed { .. } => (
            S3ErrorCode::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold".to_owned(),
        ),
        Error::RangeNotSatisfiable { .. } => (
            S3ErrorCode::InvalidRange,
            "The requested range is not satisfiable".to_owned(),
        ),
        Error::TooLarge { .. } => (S3ErrorCode::EntityTooLarge, e.to_string()),
        Error::SizeMismatch { .. } | Error::Io(_) => (
            S3ErrorCode::IncompleteBody,
            "You did not provide the number of bytes specified by the Content-Length HTTP header."
                .to_owned(),
        ),
        e if e.is_retryable() => {
            tracing::warn!(error = %e, "store operation failed (retryable)");
            (
                S3ErrorCode::ServiceUnavailable,
                "The store is busy or unavailable; please retry.".to_owned(),
            )
        }
        e => {
            tracing::error!(error = %e, corruption = e.is_corruption(), "store operation failed");
            (
                S3ErrorCode::InternalError,
                "We encountered an internal error. Please try again.".to_owned(),
            )
        }
    };
    S3Error::with_message(code, message)
}

/// `NoSuchBucket` for `bucket`.
pub(crate) fn no_such_bucket(bucket: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::NoSuchBucket,
        format!("The specified bucket does not exist: {bucket}"),
    )
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
                Error::backend("rocksdb", "busy", true),
                S3ErrorCode::ServiceUnavailable,
            ),
            (
                Error::backend("cql", "password=hunter2 rejected", false),
                S3ErrorCode::InternalError,
            ),
        ];
        for (error, code) in cases {
            let s3 = from_store(error);
            assert_eq!(s3.code(), &code);
            assert!(!s3.message().unwrap_or_default().contains("hunter2"));
        }
    }
}
