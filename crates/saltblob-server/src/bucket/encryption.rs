//! Put/Get/DeleteBucketEncryption: a bucket's default encryption (`sse/` checks, stores and applies it), and
//! its removal with the bucket.

use s3s::dto::{
    DeleteBucketEncryptionInput, DeleteBucketEncryptionOutput, GetBucketEncryptionInput,
    GetBucketEncryptionOutput, PutBucketEncryptionInput, PutBucketEncryptionOutput,
};
use s3s::{S3Request, S3Response, S3Result};

use crate::error::from_store;
use crate::service::SaltS3;
use crate::sse::{self, rules::BucketDefault};

/// PutBucketEncryption: replaces the bucket's default encryption, once checked (a KMS key the provider cannot
/// seal under is refused now rather than at every put).
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let default =
        BucketDefault::from_config(input.server_side_encryption_configuration, record.version)?;
    if let Some(key) = s3.sse.default_key(&default)? {
        s3.sse.check_key(&s3.store, &key).await?;
    }
    let stored = sse::put_default(&s3.store, &input.bucket, &default).await;
    s3.sse.defaults.forget(&input.bucket);
    stored.map_err(from_store)?;
    Ok(S3Response::new(PutBucketEncryptionOutput::default()))
}

/// GetBucketEncryption: the bucket's default; `ServerSideEncryptionConfigurationNotFoundError` (404) when it
/// has none.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let bucket = req.input.bucket;
    let record = s3.require_bucket(&bucket).await?;
    let current = sse::read_default(&s3.store, &bucket)
        .await?
        .filter(|d| d.bucket_version == record.version);
    match current {
        Some(d) => Ok(S3Response::new(GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(d.to_config()),
        })),
        None => {
            crate::settings::not_set(
                s3,
                &bucket,
                "ServerSideEncryptionConfigurationNotFoundError",
                "The server side encryption configuration was not found",
            )
            .await
        }
    }
}

/// DeleteBucketEncryption: removes the bucket's default (204 whether or not it had one, as S3).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    let bucket = req.input.bucket;
    s3.require_bucket(&bucket).await?;
    let deleted = sse::delete_default(&s3.store, &bucket).await;
    s3.sse.defaults.forget(&bucket);
    deleted.map_err(from_store)?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
}

/// Removes `bucket`'s default encryption record after the bucket itself was deleted. A failure is only logged:
/// a record left behind names the deleted bucket record's version and is never applied to a new bucket.
pub(super) async fn forget_bucket(s3: &SaltS3, bucket: &str) {
    if let Err(e) = sse::delete_default(&s3.store, bucket).await {
        tracing::warn!(bucket, error = %e, "the deleted bucket's default encryption record stays (it is never applied)");
    }
    s3.sse.defaults.forget(bucket);
}
