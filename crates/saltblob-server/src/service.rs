//! [`SaltS3`], the S3 service's state: the store, the region, and what the modules below keep for the
//! handlers above (the upload cap, the lifecycle rules and the encryption settings read lately); and the store
//! checks that handlers of more than one kind share: the bucket check (with its lifecycle rules), whether a
//! prefix holds anything, a conditional put's store condition, and the priority class a request is labelled with.

use std::sync::Arc;

use futures::TryStreamExt;
use s3s::dto::ETagCondition;
use s3s::{S3Result, s3_error};
use saltblob_core::{BlobStore, Error, Manifest, PutCondition};

use crate::attrs::{etag_of, precondition_failed};
use crate::auth::record_class;
use crate::cache::Cache;
use crate::error::{from_store, no_such_bucket};
use crate::grants::Directory;
use crate::keys::bucket_key;
use crate::lifecycle::{self, Lifecycle};
use crate::sse::rules::SseConfig;
use crate::upload_cap::UploadCap;

/// The S3 service on one store.
pub(crate) struct SaltS3 {
    pub(crate) store: BlobStore,
    pub(crate) region: String,
    /// The cap on multipart uploads in progress per bucket.
    pub(crate) uploads: UploadCap,
    /// The buckets' lifecycle rules read lately, for the `x-amz-expiration` header.
    pub(crate) lifecycles: Cache<Lifecycle>,
    /// Server-side encryption: the server's keys, the buckets' defaults read lately.
    pub(crate) sse: SseConfig,
    /// The access keys kept in the store, as read lately.
    pub(crate) stored_keys: Arc<Directory>,
}

impl SaltS3 {
    /// The service on `store`, in `region`, with the upload cap and encryption settings given.
    pub(crate) fn new(
        store: BlobStore,
        region: String,
        uploads: UploadCap,
        sse: SseConfig,
        stored_keys: Arc<Directory>,
    ) -> Self {
        Self {
            store,
            region,
            uploads,
            lifecycles: Cache::default(),
            sse,
            stored_keys,
        }
    }

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

    /// The record of `bucket` and its lifecycle, read together (the lifecycle possibly from the cache).
    ///
    /// # Errors
    /// `NoSuchBucket` when the bucket does not exist; the store's errors.
    pub(crate) async fn bucket_and_lifecycle(
        &self,
        bucket: &str,
    ) -> S3Result<(Manifest, Option<Arc<Lifecycle>>)> {
        let lifecycle = self
            .lifecycles
            .read(bucket, lifecycle::read_record(&self.store, bucket));
        let (record, lifecycle) = futures::try_join!(self.require_bucket(bucket), lifecycle)?;
        let lifecycle = lifecycle.filter(|l| l.bucket_version == record.version);
        Ok((record, lifecycle))
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

    /// The store condition of a conditional put (PutObject, CopyObject's destination, CompleteMultipartUpload):
    /// `If-None-Match: *` writes only a new key; `If-Match: ETAG` (or `*`) only over the version that has that
    /// ETag (the version is pinned, so a concurrent overwrite fails the put instead of being replaced). Both
    /// together are evaluated in RFC 9110's order (If-Match first): they never both hold.
    ///
    /// # Errors
    /// `NoSuchKey` (404) for `If-Match` on a key that holds nothing, as AWS answers; `PreconditionFailed` (412)
    /// when a condition does not hold; `NotImplemented` for an `If-None-Match` other than `*` (S3 takes no
    /// other on a write).
    pub(crate) async fn put_condition(
        &self,
        key: &str,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<PutCondition> {
        if if_none_match.is_some_and(|c| !c.is_any()) {
            return Err(s3_error!(
                NotImplemented,
                "A write takes If-None-Match: * only (write only a new key)"
            ));
        }
        let Some(condition) = if_match else {
            return Ok(if if_none_match.is_some() {
                PutCondition::IfAbsent
            } else {
                PutCondition::None
            });
        };
        let current = self.store.head(key).await.map_err(from_store)?;
        let matches = match condition {
            ETagCondition::Any => true,
            ETagCondition::ETag(etag) => etag.value() == etag_of(&current).value(),
        };
        // The key holds a version, so `If-None-Match: *` fails whatever If-Match says.
        if !matches || if_none_match.is_some() {
            return Err(precondition_failed());
        }
        Ok(PutCondition::IfVersion(current.version))
    }

    /// Labels the request (access log, latency histogram) with the class the store runs `manifest`'s blob in:
    /// [`BlobStore::class_of`], the store's own rule.
    pub(crate) fn record_class_of(&self, extensions: &http::Extensions, manifest: &Manifest) {
        record_class(extensions, self.store.class_of(manifest));
    }
}
