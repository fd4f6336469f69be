//! Bucket operations: ListBuckets, CreateBucket, HeadBucket, DeleteBucket, and the bucket sub-resources tools
//! read before they work (GetBucketLocation, GetBucketVersioning). A bucket is a small record (`keys.rs`); its
//! version's creation time is the bucket's.
//!
//! The bucket settings saltblob keeps have their operations beside: `lifecycle.rs` (lifecycle rules),
//! `encryption.rs` (default encryption), `cors.rs` (CORS rules), `tagging.rs` (tags) and `acl.rs` (the canned
//! ACL, kept in the bucket record; CreateBucket takes one too); those it does not keep
//! are `settings.rs`'s.

pub(crate) mod acl;
pub(crate) mod cors;
pub(crate) mod encryption;
pub(crate) mod lifecycle;
pub(crate) mod tagging;
pub(crate) mod versioning;

use futures::TryStreamExt;
use s3s::dto::{
    Bucket, BucketLocationConstraint, CreateBucketInput, CreateBucketOutput, DeleteBucketInput,
    DeleteBucketOutput, GetBucketLocationInput, GetBucketLocationOutput, HeadBucketInput,
    HeadBucketOutput, ListBucketsInput, ListBucketsOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{BlobStore, Error, Manifest, PutCondition, PutOptions};

use crate::acl::Canned;
use crate::attrs::last_modified_of;
use crate::error::from_store;
use crate::grants::{self, Caller, Right};
use crate::keys::{BUCKET_PREFIX, bucket_key, objects_prefix};
use crate::multipart;
use crate::service::SaltS3;

/// Most buckets one ListBuckets page may ask for (`max-buckets`), as AWS allows.
const MAX_BUCKETS: i32 = 10_000;

/// ListBuckets: the bucket records, in name order (one walk over the records under `prefix`, a page at a
/// time), with AWS's paging: at most `max-buckets` (1 to 10 000; every bucket when absent), after the
/// `continuation-token` of the previous page (the last name it listed: a page and its token stay consistent
/// however buckets come and go between them), a token in the answer when more are left. `bucket-region` other
/// than the server's lists nothing: every bucket is in the server's region.
pub(crate) async fn handle_list_buckets(
    s3: &SaltS3,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    // A key kept in the store lists the buckets it holds a grant on (as they are now); a root key, every one.
    let caller = req.extensions.get::<Caller>().cloned();
    let input = req.input;
    let limit = match input.max_buckets {
        None => usize::MAX,
        Some(n @ 1..=MAX_BUCKETS) => usize::try_from(n).unwrap_or(usize::MAX),
        Some(n) => {
            return Err(s3_error!(
                InvalidArgument,
                "max-buckets must be between 1 and {MAX_BUCKETS}, not {n}"
            ));
        }
    };
    let prefix = input.prefix.unwrap_or_default();
    let after = input.continuation_token.filter(|t| !t.is_empty());
    let mut buckets = Vec::new();
    let mut continuation_token = None;
    let other_region = input
        .bucket_region
        .is_some_and(|region| region != s3.region);
    if !other_region {
        let under = format!("{BUCKET_PREFIX}{prefix}");
        let mut records = s3.store.list_stream(under.as_bytes());
        while let Some(entry) = records.try_next().await.map_err(from_store)? {
            let name = entry.key.get(BUCKET_PREFIX.len()..).unwrap_or_default();
            let (Ok(name), Ok(manifest)) = (std::str::from_utf8(name), entry.manifest) else {
                continue;
            };
            if after.as_deref().is_some_and(|after| name <= after)
                || caller
                    .as_ref()
                    .is_some_and(|c| c.0.right_on(name, manifest.version).is_none())
            {
                continue;
            }
            if buckets.len() == limit {
                continuation_token = buckets.last().and_then(|b: &Bucket| b.name.clone());
                break;
            }
            buckets.push(Bucket {
                name: Some(name.to_owned()),
                creation_date: Some(last_modified_of(&manifest)),
                bucket_region: Some(s3.region.clone()),
            });
        }
    }
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        continuation_token,
        prefix: (!prefix.is_empty()).then_some(prefix),
        ..ListBucketsOutput::default()
    }))
}

/// The region whose CreateBucket of a bucket the caller already owns succeeds (AWS's legacy behaviour there);
/// every other region answers `BucketAlreadyOwnedByYou`.
const LEGACY_REGION: &str = "us-east-1";

/// CreateBucket: writes the bucket record if it is absent. If it exists: 200 in us-east-1, as AWS answers
/// there, else `BucketAlreadyOwnedByYou` (409), to a root key (every bucket belongs to the one owner they share)
/// or a key kept in the store that owns it; `BucketAlreadyExists` (409) to any other key. A key kept in the
/// store (the access check let it create buckets) becomes the owner of the bucket it created.
pub(crate) async fn handle_create_bucket(
    s3: &SaltS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let caller = req.extensions.get::<Caller>().cloned();
    let bucket = req.input.bucket;
    let created = Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{bucket}")),
    }));
    let acl = Canned::asked(req.input.acl.as_ref().map(|a| a.as_str()))?;
    match put_bucket_record(&s3.store, &bucket, acl).await {
        Ok(record) => {
            if let Some(Caller(key)) = caller {
                // The caller owns what it made: should this fail, the bucket stays, owned by the root keys.
                grants::allow(&s3.store, &key.id, &bucket, Right::Owner)
                    .await
                    .map_err(from_store)?;
                s3.stored_keys.forget(&key.id);
                tracing::debug!(access_key = %key.id, bucket, version = %record.version, "bucket created by a stored key");
            }
            created
        }
        Err(Error::AlreadyExists { .. })
            if caller.as_ref().is_some_and(|Caller(key)| {
                key.grants
                    .get(&bucket)
                    .is_none_or(|g| g.right != Right::Owner)
            }) =>
        {
            Err(s3_error!(
                BucketAlreadyExists,
                "The requested bucket name is not available."
            ))
        }
        Err(Error::AlreadyExists { .. }) if s3.region == LEGACY_REGION => created,
        Err(Error::AlreadyExists { .. }) => Err(s3_error!(
            BucketAlreadyOwnedByYou,
            "Your previous request to create the named bucket succeeded and you already own it."
        )),
        Err(e) => Err(from_store(e)),
    }
}

/// Writes `bucket`'s record, with canned ACL `acl`, unless one exists (`Error::AlreadyExists` then); returns the
/// record's manifest.
async fn put_bucket_record(
    store: &BlobStore,
    bucket: &str,
    acl: Canned,
) -> saltblob_core::Result<Manifest> {
    let mut opts = PutOptions::new()
        .with_condition(PutCondition::IfAbsent)
        .with_content_type("application/x-saltblob-bucket");
    acl.store_in(&mut opts.metadata);
    let created_at = saltblob_core::version::now_micros().to_string();
    store.put(bucket_key(bucket), created_at, &opts).await
}

/// Whether S3 allows `name` as a bucket name; `Error::InvalidArgument` saying why not.
pub fn check_bucket_name(name: &str) -> saltblob_core::Result<()> {
    if s3s::path::check_bucket_name(name) {
        Ok(())
    } else {
        Err(Error::invalid(
            "bucket",
            format!(
                "{name:?} is not a bucket name S3 allows (3-63 lowercase letters, digits, '.' and '-')"
            ),
        ))
    }
}

/// Creates bucket `name` in `store` as CreateBucket does, before or while a server serves it (`saltblob serve
/// --create-bucket`). Returns whether it was created (`false`: it existed). A name S3 does not allow is
/// `Error::InvalidArgument`.
pub async fn create_bucket(store: &BlobStore, name: &str) -> saltblob_core::Result<bool> {
    check_bucket_name(name)?;
    match put_bucket_record(store, name, Canned::Private).await {
        Ok(_) => Ok(true),
        Err(Error::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// HeadBucket: whether the bucket exists, and its region.
pub(crate) async fn handle_head_bucket(
    s3: &SaltS3,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    s3.require_bucket(&req.input.bucket).await?;
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(s3.region.clone()),
        ..HeadBucketOutput::default()
    }))
}

/// GetBucketLocation: the server's region; empty for us-east-1, as AWS answers (a null location constraint).
pub(crate) async fn handle_get_bucket_location(
    s3: &SaltS3,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    s3.require_bucket(&req.input.bucket).await?;
    let location_constraint =
        (s3.region != LEGACY_REGION).then(|| BucketLocationConstraint::from(s3.region.clone()));
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint,
    }))
}

/// DeleteBucket: when the bucket holds no object, aborts its multipart uploads (as S3 does) and deletes the
/// bucket record; `BucketNotEmpty` while it holds objects, `OperationAborted` while a complete of one of its
/// uploads may still commit.
pub(crate) async fn handle_delete_bucket(
    s3: &SaltS3,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    let bucket = req.input.bucket;
    s3.require_bucket(&bucket).await?;
    if s3.holds_any(&objects_prefix(&bucket)).await? {
        return Err(s3_error!(
            BucketNotEmpty,
            "The bucket you tried to delete is not empty"
        ));
    }
    multipart::abort_all_uploads(&s3.store, &bucket).await?;
    s3.store
        .delete(bucket_key(&bucket))
        .await
        .map_err(from_store)?;
    lifecycle::forget_bucket(s3, &bucket).await;
    encryption::forget_bucket(s3, &bucket).await;
    cors::forget_bucket(s3, &bucket).await;
    tagging::forget_bucket(s3, &bucket).await;
    Ok(S3Response::new(DeleteBucketOutput::default()))
}
