//! Get/PutObjectAcl: an object's canned ACL (`acl.rs`), kept in its manifest and changed in place: the object
//! keeps its version, ETag and Last-Modified, as on AWS.

use s3s::dto::{GetObjectAclInput, GetObjectAclOutput, PutObjectAclInput, PutObjectAclOutput};
use s3s::{S3Request, S3Response, S3Result};

use crate::acl::{Canned, may_open};
use crate::keys::object_key;
use crate::service::SaltS3;

/// GetObjectAcl: the owner's `FULL_CONTROL` and the grants of the canned ACL of the object's version named
/// (`versionId`) or current one; `NoSuchKey` for a missing object, `NoSuchVersion` for a missing version.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let input = req.input;
    let (manifest, _) = s3
        .object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await?;
    let (owner, grants) = Canned::of(&manifest).to_policy();
    Ok(S3Response::new(GetObjectAclOutput {
        grants,
        owner,
        request_charged: None,
    }))
}

/// PutObjectAcl: sets the object's canned ACL, given by `x-amz-acl` or as the policy GetObjectAcl shows for one
/// (`AccessControlListNotSupported` for any other). One that opens the object needs `owner` on the bucket of a
/// key kept in the store (the access check asked for `write`). A `versionId` must name the current version
/// (`NotImplemented` for a noncurrent one).
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let input = &req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let canned = Canned::requested(
        input.acl.as_ref().map(|a| a.as_str()),
        input.access_control_policy.as_ref(),
    )?;
    if canned.opens() {
        may_open(&req, &input.bucket, record.version)?;
    }
    let key = object_key(&input.bucket, &input.key)?;
    s3.change_version_in_place(&key, input.version_id.as_deref(), |m| canned.store_in(m))
        .await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}
