//! Get/PutBucketVersioning: a bucket's versioning state (`versioning.rs`), kept in its bucket record's metadata
//! and changed in place, as its ACL: the record keeps its version, so the grants bound to it still hold.

use crate::service::SaltS3;
use crate::versioning::{STATE_KEY, State};
use s3s::dto::{
    BucketVersioningStatus, GetBucketVersioningInput, GetBucketVersioningOutput,
    PutBucketVersioningInput, PutBucketVersioningOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};

/// PutBucketVersioning: `Enabled` or `Suspended`, kept in the bucket record in place (as its ACL). MFA delete
/// is refused (`NotImplemented`).
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let config = input.versioning_configuration;
    if config
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == s3s::dto::MFADelete::ENABLED)
    {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let status = match config.status.as_ref().map(BucketVersioningStatus::as_str) {
        Some(s @ (BucketVersioningStatus::ENABLED | BucketVersioningStatus::SUSPENDED)) => s,
        _ => {
            return Err(s3_error!(
                MalformedXML,
                "The versioning configuration must have Status Enabled or Suspended"
            ));
        }
    };
    // Suspending a bucket that never had versioning makes it Suspended, as S3 shows it.
    s3.change_bucket_in_place(&input.bucket, record.version, |m| {
        m.insert(STATE_KEY.to_owned(), status.to_owned());
    })
    .await?;
    Ok(S3Response::new(PutBucketVersioningOutput {}))
}

/// GetBucketVersioning: the bucket's state; no `Status` for a bucket that never had versioning, as AWS.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let record = s3.require_bucket(&req.input.bucket).await?;
    let status = match State::of(&record) {
        State::Unversioned => None,
        State::Enabled => Some(BucketVersioningStatus::from_static(
            BucketVersioningStatus::ENABLED,
        )),
        State::Suspended => Some(BucketVersioningStatus::from_static(
            BucketVersioningStatus::SUSPENDED,
        )),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status,
        ..GetBucketVersioningOutput::default()
    }))
}
