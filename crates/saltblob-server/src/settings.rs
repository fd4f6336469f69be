//! The bucket and object settings saltblob does not keep, read back as AWS answers for a bucket where they were
//! never set, so that the tools that read them before they work (s3cmd's `info`, and many others) see S3's
//! answers instead of `501 NotImplemented`. Each checks that the
//! bucket (and the object) exists first, as S3 does.
//!
//! - GetBucketOwnershipControls: `BucketOwnerPreferred` (canned ACLs are kept, `acl.rs`; one owner owns all).
//! - GetBucketRequestPayment: `BucketOwner`.
//! - No policy, public access block or object lock configuration: AWS's 404 for each (`NoSuchBucketPolicy`,
//!   `NoSuchPublicAccessBlockConfiguration`, `ObjectLockConfigurationNotFoundError`), through [`not_set`].
//!   (Lifecycle rules are kept: `lifecycle/`; CORS rules: `cors/`; tags: `tagging.rs`; canned ACLs: `acl.rs`;
//!   default encryption too: `sse/`, whose GetBucketEncryption answers a bucket without one with [`not_set`]'s
//!   `ServerSideEncryptionConfigurationNotFoundError` rather than claim the default encryption AWS applies.)

use s3s::dto::{
    GetBucketOwnershipControlsInput, GetBucketOwnershipControlsOutput,
    GetBucketRequestPaymentInput, GetBucketRequestPaymentOutput, ObjectOwnership,
    OwnershipControls, OwnershipControlsRule, Payer,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::service::SaltS3;

/// A bucket setting that was never set: `code` (AWS's, 404) with its message, once the bucket is known to exist.
pub(crate) async fn not_set<T>(
    s3: &SaltS3,
    bucket: &str,
    code: &'static str,
    message: &'static str,
) -> S3Result<T> {
    s3.require_bucket(bucket).await?;
    let mut error = S3Error::with_message(
        S3ErrorCode::from_bytes(code.as_bytes())
            .unwrap_or_else(|| S3ErrorCode::Custom(code.into())),
        message,
    );
    error.set_status_code(http::StatusCode::NOT_FOUND);
    Err(error)
}

/// GetBucketOwnershipControls: `BucketOwnerPreferred`: canned ACLs are kept, and the bucket's owner owns every
/// object (there is one owner).
pub(crate) async fn handle_get_bucket_ownership_controls(
    s3: &SaltS3,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    s3.require_bucket(&req.input.bucket).await?;
    let rule = OwnershipControlsRule {
        object_ownership: ObjectOwnership::from_static(ObjectOwnership::BUCKET_OWNER_PREFERRED),
    };
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(OwnershipControls { rules: vec![rule] }),
    }))
}

/// GetBucketRequestPayment: the bucket owner pays.
pub(crate) async fn handle_get_bucket_request_payment(
    s3: &SaltS3,
    req: S3Request<GetBucketRequestPaymentInput>,
) -> S3Result<S3Response<GetBucketRequestPaymentOutput>> {
    s3.require_bucket(&req.input.bucket).await?;
    Ok(S3Response::new(GetBucketRequestPaymentOutput {
        payer: Some(Payer::from_static(Payer::BUCKET_OWNER)),
    }))
}
