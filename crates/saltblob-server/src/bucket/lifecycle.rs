//! Put/Get/DeleteBucketLifecycleConfiguration: a bucket's lifecycle rules (`lifecycle/` checks, stores and
//! applies them), and their removal with the bucket.

use s3s::dto::{
    DeleteBucketLifecycleInput, DeleteBucketLifecycleOutput, GetBucketLifecycleConfigurationInput,
    GetBucketLifecycleConfigurationOutput, PutBucketLifecycleConfigurationInput,
    PutBucketLifecycleConfigurationOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};

use crate::error::from_store;
use crate::lifecycle::{self, Lifecycle};
use crate::service::SaltS3;

/// PutBucketLifecycleConfiguration: replaces the bucket's rules, once checked.
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let Some(config) = input.lifecycle_configuration else {
        return Err(s3_error!(
            MalformedXML,
            "The request has no LifecycleConfiguration"
        ));
    };
    let lifecycle = Lifecycle::from_config(config, record.version)?;
    let stored = lifecycle::put_record(&s3.store, &input.bucket, &lifecycle).await;
    s3.lifecycles.forget(&input.bucket);
    stored.map_err(from_store)?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

/// GetBucketLifecycleConfiguration: the bucket's rules; `NoSuchLifecycleConfiguration` when it has none.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let bucket = req.input.bucket;
    let record = s3.require_bucket(&bucket).await?;
    match lifecycle::current(&s3.store, &bucket, &record).await? {
        Some(lifecycle) => Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
            rules: Some(lifecycle.to_config()),
            ..GetBucketLifecycleConfigurationOutput::default()
        })),
        None => Err(s3_error!(
            NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist"
        )),
    }
}

/// DeleteBucketLifecycle: removes the bucket's rules (204 whether or not it had any, as S3).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    let bucket = req.input.bucket;
    s3.require_bucket(&bucket).await?;
    let deleted = lifecycle::delete_record(&s3.store, &bucket).await;
    s3.lifecycles.forget(&bucket);
    deleted.map_err(from_store)?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}

/// Removes `bucket`'s lifecycle record after the bucket itself was deleted. A failure is only logged: a record
/// left behind names the deleted bucket record's version and is never applied to a new bucket.
pub(super) async fn forget_bucket(s3: &SaltS3, bucket: &str) {
    if let Err(e) = lifecycle::delete_record(&s3.store, bucket).await {
        tracing::warn!(bucket, error = %e, "the deleted bucket's lifecycle record stays (it is never applied)");
    }
    s3.lifecycles.forget(bucket);
}
