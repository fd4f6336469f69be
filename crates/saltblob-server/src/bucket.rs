//! Bucket operations: ListBuckets, CreateBucket, HeadBucket, DeleteBucket. A bucket is a small record
//! (`keys.rs`); its version's creation time is the bucket's.

use futures::TryStreamExt;
use s3s::dto::{
    Bucket, CreateBucketInput, CreateBucketOutput, DeleteBucketInput, DeleteBucketOutput,
    HeadBucketInput, HeadBucketOutput, ListBucketsInput, ListBucketsOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{Error, PutCondition, PutOptions};

use crate::attrs::last_modified_of;
use crate::error::from_store;
use crate::keys::{BUCKET_PREFIX, bucket_key, objects_prefix};
use crate::multipart;
use crate::service::SaltS3;

/// ListBuckets: every bucket record, in name order (one walk over the records, a page at a time).
pub(crate) async fn handle_list_buckets(
    s3: &SaltS3,
    _req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let mut buckets = Vec::new();
    let mut records = s3.store.list_stream(BUCKET_PREFIX.as_bytes());
    while let Some(entry) = records.try_next().await.map_err(from_store)? {
        let name = entry.key.get(BUCKET_PREFIX.len()..).unwrap_or_default();
        let (Ok(name), Ok(manifest)) = (std::str::from_utf8(name), entry.manifest) else {
            continue;
        };
        buckets.push(Bucket {
            name: Some(name.to_owned()),
            creation_date: Some(last_modified_of(&manifest)),
            bucket_region: Some(s3.region.clone()),
        });
    }
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        ..ListBucketsOutput::default()
    }))
}

/// CreateBucket: writes the bucket record if it is absent (`BucketAlreadyOwnedByYou` if not).
pub(crate) async fn handle_create_bucket(
    s3: &SaltS3,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let bucket = req.input.bucket;
    let opts = PutOptions::new()
        .with_condition(PutCondition::IfAbsent)
        .with_content_type("application/x-saltblob-bucket");
    let created = saltblob_core::version::now_micros().to_string();
    match s3.store.put(bucket_key(&bucket), created, &opts).await {
        Ok(_) => Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{bucket}")),
        })),
        Err(Error::AlreadyExists { .. }) => Err(s3_error!(
            BucketAlreadyOwnedByYou,
            "Your previous request to create the named bucket succeeded and you already own it."
        )),
        Err(e) => Err(from_store(e)),
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
    Ok(S3Response::new(DeleteBucketOutput::default()))
}
