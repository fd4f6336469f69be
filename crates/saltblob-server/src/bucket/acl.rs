//! Get/PutBucketAcl: a bucket's canned ACL (`acl.rs`), kept in its bucket record's metadata and changed in place:
//! the record keeps its version, so the grants bound to it still hold.

use crate::acl::Canned;
use crate::service::SaltS3;
use s3s::dto::{GetBucketAclInput, GetBucketAclOutput, PutBucketAclInput, PutBucketAclOutput};
use s3s::{S3Request, S3Response, S3Result};

/// GetBucketAcl: the owner's `FULL_CONTROL` and the grants of the bucket's canned ACL.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let record = s3.require_bucket(&req.input.bucket).await?;
    let (owner, grants) = Canned::of(&record).to_policy();
    Ok(S3Response::new(GetBucketAclOutput { grants, owner }))
}

/// PutBucketAcl: sets the bucket's canned ACL, given by `x-amz-acl` or as the policy GetBucketAcl shows for one
/// (`AccessControlListNotSupported` for any other). The access check asked for `owner` on the bucket.
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let canned = Canned::requested(
        input.acl.as_ref().map(|a| a.as_str()),
        input.access_control_policy.as_ref(),
    )?;
    s3.change_bucket_in_place(&input.bucket, record.version, |m| canned.store_in(m))
        .await?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}
