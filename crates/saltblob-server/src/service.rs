//! [`SaltS3`], the S3 service's state (the store and the region), and the store checks that handlers of more than
//! one kind share: the bucket check, whether a prefix holds anything, a conditional put's store condition, and
//! the priority class a request is labelled with.

use futures::TryStreamExt;
use s3s::dto::ETagCondition;
use s3s::{S3Result, s3_error};
use saltblob_core::{BlobStore, Error, Manifest, PutCondition};

use crate::attrs::{etag_of, precondition_failed};
use crate::auth::record_class;
use crate::error::{from_store, no_such_bucket};
use crate::keys::bucket_key;

/// The S3 service on one store.
pub(crate) struct SaltS3 {
    pub(crate) store: BlobStore,
    pub(crate) region: String,
    /// The cap on multipart uploads in progress per bucket.
    pub(crate) uploads: crate::multipart::UploadCap,
}

impl SaltS3 {
    /// The record of `bucket`.
    ///
    /// # Errors
    /// `NoSuchBucket` when it does not exist.
    pub(crate) async fn require_bucket(&self, bucket: &str) -> S3Result<Manifest> {
        match self.store.head(bucket_key(bucket)).await {
            Ok(m) => Ok(m),
            Err(Error::NotFound { .. }) => Err(no_such_bucket(bucket)),
            Err(e) => Err(from_store(e)),
        }
    }

    /// Whether anything is stored under `prefix`.
    pub(crate) async fn holds_any(&self, prefix: &str) -> S3Result<bool> {
        let first = self
            .store
            .list_stream(prefix.as_bytes())
            .try_next()
            .await
            .map_err(from_store)?;
        Ok(first.is_some())
    }

    /// The store condition of a conditional put (PutObject, CompleteMultipartUpload): `If-None-Match: *` writes
    /// only a new key; `If-Match: ETAG` only over the version that has that ETag (the version is pinned, so a
    /// concurrent overwrite fails the put instead of being replaced).
    ///
    /// # Errors
    /// `PreconditionFailed` (412) when the condition does not hold; `NotImplemented` for any other combination.
    pub(crate) async fn put_condition(
        &self,
        key: &str,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<PutCondition> {
        match (if_match, if_none_match) {
            (None, None) => Ok(PutCondition::None),
            (None, Some(ETagCondition::Any)) => Ok(PutCondition::IfAbsent),
            (Some(condition), None) => {
                let current = match self.store.head(key).await {
                    Ok(m) => m,
                    Err(Error::NotFound { .. }) => return Err(precondition_failed()),
                    Err(e) => return Err(from_store(e)),
                };
                match condition {
                    ETagCondition::Any => {}
                    ETagCondition::ETag(etag) if etag.value() == etag_of(&current).value() => {}
                    ETagCondition::ETag(_) => return Err(precondition_failed()),
                }
                Ok(PutCondition::IfVersion(current.version))
            }
            _ => Err(s3_error!(
                NotImplemented,
                "PutObject takes If-None-Match: * or If-Match, not both nor another If-None-Match"
            )),
        }
    }

    /// Labels the request (access log, latency histogram) with the class the store runs `manifest`'s blob in:
    /// [`BlobStore::class_of`], the store's own rule.
    pub(crate) fn record_class_of(&self, extensions: &http::Extensions, manifest: &Manifest) {
        record_class(extensions, self.store.class_of(manifest));
    }
}
