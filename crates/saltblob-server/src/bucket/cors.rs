//! Put/Get/DeleteBucketCors: a bucket's CORS rules (`cors/` checks, stores and answers browsers with them), and
//! their removal with the bucket.

use s3s::dto::{
    DeleteBucketCorsInput, DeleteBucketCorsOutput, GetBucketCorsInput, GetBucketCorsOutput,
    PutBucketCorsInput, PutBucketCorsOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::cors::Cors;
use crate::error::from_store;
use crate::service::SaltS3;

/// PutBucketCors: replaces the bucket's rules, once checked.
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let cors = Cors::from_config(input.cors_configuration, record.version)?;
    s3.cors
        .put(&input.bucket, &cors)
        .await
        .map_err(from_store)?;
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

/// GetBucketCors: the bucket's rules; `NoSuchCORSConfiguration` when it has none.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let bucket = req.input.bucket;
    let record = s3.require_bucket(&bucket).await?;
    let stored = s3.cors.stored(&bucket).await.map_err(from_store)?;
    match stored.filter(|c| c.bucket_version == record.version) {
        Some(cors) => Ok(S3Response::new(GetBucketCorsOutput {
            cors_rules: Some(cors.to_config()),
        })),
        None => Err(s3_error!(
            NoSuchCORSConfiguration,
            "The CORS configuration does not exist"
        )),
    }
}

/// DeleteBucketCors: removes the bucket's rules (204 whether or not it had any, as S3).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let bucket = req.input.bucket;
    s3.require_bucket(&bucket).await?;
    s3.cors.delete(&bucket).await.map_err(from_store)?;
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

/// Removes `bucket`'s CORS record after the bucket itself was deleted. A failure is only logged: a record left
/// behind names the deleted bucket record's version and is never applied to a new bucket.
pub(super) async fn forget_bucket(s3: &SaltS3, bucket: &str) {
    if let Err(e) = s3.cors.delete(bucket).await {
        tracing::warn!(bucket, error = %e, "the deleted bucket's CORS record stays (it is never applied)");
    }
}
