//! Buckets and objects in the store's one key space (`docs/s3.md`):
//!
//! | store key | holds |
//! |---|---|
//! | `s3/b/<bucket>` | the bucket record (a small inline blob; its version's creation time is the bucket's) |
//! | `s3/o/<bucket>/<object key>` | the object: its bytes, content type and metadata |
//! | `s3/u/<bucket>/…` | multipart uploads in progress (`multipart/upload.rs`) |
//! | `s3/l/<bucket>` | the bucket's lifecycle rules (`lifecycle/`), when it has any |
//! | `s3/e/<bucket>` | the bucket's default encryption (`sse/`), when it has one |
//! | `s3/c/<bucket>` | the bucket's CORS rules (`cors/`), when it has any |
//! | `s3/t/<bucket>` | the bucket's tags (`bucket/tagging.rs`), when it has any |
//! | `s3/k/<access key id>` | an access key kept in the store: its secret (sealed) and its grants (`grants/`) |
//!
//! Bucket names are checked by s3s against S3's rules (3–63 characters, lowercase letters, digits, `.`, `-`)
//! before any operation runs, so a bucket name never holds a `/`.

use s3s::{S3Result, s3_error};
use saltblob_core::MAX_KEY_LEN;

/// Prefix of the bucket records.
pub const BUCKET_PREFIX: &str = "s3/b/";
/// Prefix of the objects (then `<bucket>/<key>`).
pub const OBJECT_PREFIX: &str = "s3/o/";
/// Prefix of multipart upload state (then `<bucket>/…`); no other part of the server writes under it.
pub const MULTIPART_PREFIX: &str = "s3/u/";

/// Prefix of the buckets' lifecycle records (then `<bucket>`).
pub const LIFECYCLE_PREFIX: &str = "s3/l/";

/// Prefix of the buckets' default encryption records (then `<bucket>`).
pub const ENCRYPTION_PREFIX: &str = "s3/e/";

/// Prefix of the buckets' CORS records (then `<bucket>`).
pub const CORS_PREFIX: &str = "s3/c/";

/// Prefix of the buckets' tagging records (then `<bucket>`).
pub const TAGGING_PREFIX: &str = "s3/t/";

/// Prefix of the access keys kept in the store (then the access key id).
pub const ACCESS_KEY_PREFIX: &str = "s3/k/";

/// The store key of access key `id`'s record.
pub(crate) fn access_key_record(id: &str) -> String {
    format!("{ACCESS_KEY_PREFIX}{id}")
}

/// The store key of `bucket`'s default encryption record.
pub(crate) fn encryption_key(bucket: &str) -> String {
    format!("{ENCRYPTION_PREFIX}{bucket}")
}

/// The store key of `bucket`'s CORS record.
pub(crate) fn cors_key(bucket: &str) -> String {
    format!("{CORS_PREFIX}{bucket}")
}

/// The store key of `bucket`'s tagging record.
pub(crate) fn tagging_key(bucket: &str) -> String {
    format!("{TAGGING_PREFIX}{bucket}")
}

/// The store key of `bucket`'s lifecycle record.
pub(crate) fn lifecycle_key(bucket: &str) -> String {
    format!("{LIFECYCLE_PREFIX}{bucket}")
}

/// The store key of `bucket`'s record.
pub(crate) fn bucket_key(bucket: &str) -> String {
    format!("{BUCKET_PREFIX}{bucket}")
}

/// The prefix of every object of `bucket`.
pub(crate) fn objects_prefix(bucket: &str) -> String {
    format!("{OBJECT_PREFIX}{bucket}/")
}

/// The prefix of every multipart upload record of `bucket` (`multipart/upload.rs` lays them out).
pub(crate) fn uploads_prefix(bucket: &str) -> String {
    format!("{MULTIPART_PREFIX}{bucket}/")
}

/// The prefix of the listing index of `bucket`'s multipart uploads in progress (then the object key, NUL, the
/// upload id's 16 bytes: `multipart/upload.rs`).
pub(crate) fn upload_index_prefix(bucket: &str) -> String {
    format!("{}k/", uploads_prefix(bucket))
}

/// The store key of object `key` of `bucket`.
///
/// # Errors
/// `KeyTooLongError` when the store key would be longer than the store's longest key ([`MAX_KEY_LEN`]).
pub(crate) fn object_key(bucket: &str, key: &str) -> S3Result<String> {
    let store_key = format!("{}{key}", objects_prefix(bucket));
    if store_key.len() > MAX_KEY_LEN {
        return Err(s3_error!(
            KeyTooLongError,
            "Your key is too long: {} bytes; keys of bucket {bucket} are at most {} bytes",
            key.len(),
            MAX_KEY_LEN - objects_prefix(bucket).len()
        ));
    }
    Ok(store_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_fit_the_store() {
        let prefix_len = objects_prefix("bkt").len();
        assert_eq!(
            object_key("bkt", "a/b").expect("fits"),
            "s3/o/bkt/a/b".to_owned()
        );
        assert!(object_key("bkt", &"k".repeat(MAX_KEY_LEN - prefix_len)).is_ok());
        let err = object_key("bkt", &"k".repeat(MAX_KEY_LEN - prefix_len + 1)).expect_err("long");
        assert_eq!(err.code(), &s3s::S3ErrorCode::KeyTooLongError);
    }
}
