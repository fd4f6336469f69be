//! [`SaltS3`], the S3 service's state: the store, the region, and what the modules below keep for the
//! handlers above (the upload cap, the lifecycle rules and the encryption settings read lately); and the store
//! checks that handlers of more than one kind share: the bucket check (with its lifecycle rules), an object as it
//! is now, a change of its metadata in place, whether a prefix holds anything, a conditional put's store
//! condition, and the priority class a request is labelled with.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::TryStreamExt;
use s3s::dto::ETagCondition;
use s3s::{S3Result, s3_error};
use saltblob_core::{BlobStore, Error, Manifest, PutCondition, VersionId};

use crate::attrs::{etag_of, precondition_failed};
use crate::auth::record_class;
use crate::cache::Cache;
use crate::cors::CorsRules;
use crate::error::{from_store, no_such_bucket};
use crate::grants::Directory;
use crate::keys::{bucket_key, object_key};
use crate::lifecycle::{self, Lifecycle};
use crate::rereads::BUCKET_RECORD;
use crate::sse::rules::SseConfig;
use crate::upload_cap::UploadCap;
use crate::versioning;

/// How many times a change in place ([`SaltS3::change_in_place`]) is tried when writers keep replacing what it
/// changes.
const IN_PLACE_ATTEMPTS: usize = 3;

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
    /// The buckets' CORS rules, as read lately (shared with the request handler).
    pub(crate) cors: Arc<CorsRules>,
}

impl SaltS3 {
    /// The service on `store`, in `region`, with the upload cap, encryption settings and CORS rules given.
    pub(crate) fn new(
        store: BlobStore,
        region: String,
        uploads: UploadCap,
        sse: SseConfig,
        stored_keys: Arc<Directory>,
        cors: Arc<CorsRules>,
    ) -> Self {
        Self {
            store,
            region,
            uploads,
            lifecycles: Cache::default(),
            sse,
            stored_keys,
            cors,
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

    /// The manifest of the version of object `key` of `bucket` that `version_id` names (none: the current one;
    /// `null` or a version id, [`versioning::Named`]), with the bucket's versioning state.
    ///
    /// # Errors
    /// `InvalidArgument` for a version id that is not one; `NoSuchBucket`, `NoSuchKey` (with
    /// `x-amz-delete-marker` when the current version is a marker), `NoSuchVersion`, `405` for a delete marker
    /// named; the store's.
    pub(crate) async fn object_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<(Manifest, versioning::State)> {
        let named = versioning::Named::of(version_id)?;
        let state = versioning::State::of(&self.require_bucket(bucket).await?);
        let store_key = object_key(bucket, key)?;
        let version = versioning::read_named(&self.store, &store_key, named).await?;
        let manifest = match version {
            Some(v) => self.store.head_version(&store_key, v).await,
            None => self.store.head(&store_key).await,
        }
        .map_err(from_store)?;
        versioning::refuse_marker(&manifest, version.is_some())?;
        Ok((manifest, state))
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

    /// Applies `change` to the metadata of the current version of object `store_key`, in place
    /// ([`BlobStore::update_metadata`]: the version, its ETag and Last-Modified stay, as S3 keeps them when tags
    /// or an ACL change). A writer that replaces the object between the read and the write wins; the change is
    /// then made on the version it wrote, up to [`IN_PLACE_ATTEMPTS`] times.
    ///
    /// # Errors
    /// `NoSuchKey`; the store's; `OperationAborted` (409) when writers replaced it every time.
    pub(crate) async fn change_in_place(
        &self,
        store_key: &str,
        change: impl Fn(&mut BTreeMap<String, String>),
    ) -> S3Result<Manifest> {
        for _ in 0..IN_PLACE_ATTEMPTS {
            let manifest = self.store.head(store_key).await.map_err(from_store)?;
            match self
                .store
                .update_metadata(store_key, manifest.version, &change)
                .await
            {
                Ok(changed) => return Ok(changed),
                Err(Error::PreconditionFailed { .. }) => continue,
                Err(e) => return Err(from_store(e)),
            }
        }
        Err(s3_error!(
            OperationAborted,
            "The object was replaced while it was being changed; please try again."
        ))
    }

    /// Applies `change` in place to the version of object `store_key` that `version_id` names: none, as
    /// [`SaltS3::change_in_place`]; a named one, current or noncurrent ([`BlobStore::update_version_metadata`]).
    ///
    /// # Errors
    /// `InvalidArgument` for a version id that is not one; `NoSuchVersion`; `405` for a delete marker named;
    /// `OperationAborted` (409) when other changes of the version won every time; the store's.
    pub(crate) async fn change_version_in_place(
        &self,
        store_key: &str,
        version_id: Option<&str>,
        change: impl Fn(&mut BTreeMap<String, String>),
    ) -> S3Result<Manifest> {
        let Some(version) = versioning::read_version(&self.store, store_key, version_id).await?
        else {
            return self.change_in_place(store_key, change).await;
        };
        let named = self
            .store
            .head_version(store_key, version)
            .await
            .map_err(from_store)?;
        versioning::refuse_marker(&named, true)?;
        match self
            .store
            .update_version_metadata(store_key, version, &change)
            .await
        {
            Ok(changed) => Ok(changed),
            Err(Error::PreconditionFailed { .. }) => Err(s3_error!(
                OperationAborted,
                "The version was changed while it was being changed; please try again."
            )),
            Err(e) => Err(from_store(e)),
        }
    }

    /// Applies `change` to the metadata of the record of `bucket` in place, on the record version `version` the
    /// access check judged (a bucket deleted and made again in between is another bucket, which the request's
    /// grant does not reach): the record keeps its version, so grants bound to it still hold. Another change of
    /// the same record in between (a concurrent PutBucketAcl, say) is retried ([`BUCKET_RECORD`]).
    ///
    /// # Errors
    /// `NoSuchBucket` when the bucket is gone or is another one; `OperationAborted` (409) when other changes won
    /// every time; the store's.
    pub(crate) async fn change_bucket_in_place(
        &self,
        bucket: &str,
        version: VersionId,
        change: impl Fn(&mut BTreeMap<String, String>),
    ) -> S3Result<()> {
        let mut tries = BUCKET_RECORD.start();
        while tries.next_attempt().await {
            match self
                .store
                .update_metadata(bucket_key(bucket), version, &change)
                .await
            {
                Ok(_) => return Ok(()),
                // The same record, changed in place by another request since it was read.
                Err(Error::PreconditionFailed {
                    expected, actual, ..
                }) if actual == Some(expected) => continue,
                Err(Error::NotFound { .. } | Error::PreconditionFailed { .. }) => {
                    return Err(no_such_bucket(bucket));
                }
                Err(e) => return Err(from_store(e)),
            }
        }
        Err(s3_error!(
            OperationAborted,
            "The bucket was changed while this request changed it; please try again."
        ))
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
    /// `If-None-Match: *` writes only a new key; `If-None-Match: ETAG` only a new key or over a version with
    /// another ETag; `If-Match: ETAG` (or `*`) only over the version that has that ETag. The version read is
    /// pinned (or the key's absence), so a concurrent write fails the put instead of being replaced. Both
    /// together are evaluated in RFC 9110's order (If-Match first).
    ///
    /// # Errors
    /// `NoSuchKey` (404) for `If-Match` on a key that holds nothing, as AWS answers; `PreconditionFailed` (412)
    /// when a condition does not hold.
    pub(crate) async fn put_condition(
        &self,
        key: &str,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<PutCondition> {
        match (if_match, if_none_match) {
            (None, None) => return Ok(PutCondition::None),
            (None, Some(ETagCondition::Any)) => return Ok(PutCondition::IfAbsent),
            _ => {}
        }
        let current = match self.store.head(key).await {
            Ok(m) => m,
            // If-None-Match: ETAG holds for a key that holds nothing: write only while it still does.
            Err(Error::NotFound { .. }) if if_match.is_none() => return Ok(PutCondition::IfAbsent),
            Err(e) => return Err(from_store(e)),
        };
        // A delete marker is no object: If-Match fails as on a missing key; If-None-Match holds, pinned on it.
        if versioning::is_delete_marker(&current) {
            return match if_match {
                Some(_) => Err(from_store(Error::NotFound {
                    key: key.as_bytes().into(),
                })),
                None => Ok(PutCondition::IfVersion(current.version)),
            };
        }
        let etag = etag_of(&current);
        let holds = match if_match {
            None | Some(ETagCondition::Any) => true,
            Some(ETagCondition::ETag(wanted)) => wanted.value() == etag.value(),
        } && match if_none_match {
            None => true,
            // The key holds a version, so `If-None-Match: *` fails whatever If-Match says.
            Some(ETagCondition::Any) => false,
            Some(ETagCondition::ETag(unwanted)) => unwanted.value() != etag.value(),
        };
        if !holds {
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
