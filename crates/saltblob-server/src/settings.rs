//! The bucket and object settings saltblob does not keep, read back as AWS answers for a bucket where they were
//! never set, so that the tools that read them before they work (s3cmd's `info`, `cp`, `mv` and `setacl`, which
//! read an ACL first, and many others) see S3's answers instead of `501 NotImplemented`. Each checks that the
//! bucket (and the object) exists first, as S3 does.
//!
//! - ACLs are disabled, as on an AWS bucket with the owner enforced (the default since 2023): GetBucketAcl and
//!   GetObjectAcl answer the one owner with `FULL_CONTROL`, GetBucketOwnershipControls `BucketOwnerEnforced`.
//!   PutBucketAcl and PutObjectAcl succeed, changing nothing, only for an ACL that says the same (the canned
//!   `private` or `bucket-owner-full-control`, or a body whose every grant is the owner's `FULL_CONTROL`, as s3cmd
//!   puts back the ACL it read when it copies); any other is `400 AccessControlListNotSupported` (canned ACLs
//!   and `x-amz-grant-*` headers are refused by `guard.rs` before the body is read).
//! - GetBucketRequestPayment: `BucketOwner`.
//! - No policy, public access block or object lock configuration: AWS's 404 for each (`NoSuchBucketPolicy`,
//!   `NoSuchPublicAccessBlockConfiguration`, `ObjectLockConfigurationNotFoundError`), through [`not_set`].
//!   (Lifecycle rules are kept: `lifecycle/`; CORS rules: `cors/`; tags: `tagging.rs`; default encryption too:
//!   `sse/`, whose GetBucketEncryption answers a bucket without one with [`not_set`]'s
//!   `ServerSideEncryptionConfigurationNotFoundError` rather than claim the default encryption AWS applies.)

use s3s::dto::{
    AccessControlPolicy, GetBucketAclInput, GetBucketAclOutput, GetBucketOwnershipControlsInput,
    GetBucketOwnershipControlsOutput, GetBucketRequestPaymentInput, GetBucketRequestPaymentOutput,
    GetObjectAclInput, GetObjectAclOutput, Grant, Grantee, ObjectOwnership, Owner,
    OwnershipControls, OwnershipControlsRule, Payer, Permission, PutBucketAclInput,
    PutBucketAclOutput, PutObjectAclInput, PutObjectAclOutput, Type,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::error::from_store;
use crate::keys::object_key;
use crate::service::SaltS3;

/// The owner of every bucket and object (all access keys share one owner), as ACLs name it.
pub(crate) const OWNER_ID: &str = "saltblob";

/// The owner every bucket and object has, as ACLs and listings show it.
pub(crate) fn owner() -> Owner {
    Owner {
        display_name: Some(OWNER_ID.to_owned()),
        id: Some(OWNER_ID.to_owned()),
    }
}

/// The ACL of a bucket or object whose ACLs are disabled: the owner, with `FULL_CONTROL`.
fn owner_full_control() -> (Option<Owner>, Option<Vec<Grant>>) {
    let grant = Grant {
        grantee: Some(Grantee {
            display_name: Some(OWNER_ID.to_owned()),
            email_address: None,
            id: Some(OWNER_ID.to_owned()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    };
    (Some(owner()), Some(vec![grant]))
}

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

/// Checks that `bucket` and its object `key` exist.
async fn require_object(s3: &SaltS3, bucket: &str, key: &str) -> S3Result<()> {
    s3.require_bucket(bucket).await?;
    s3.store
        .head(object_key(bucket, key)?)
        .await
        .map_err(from_store)?;
    Ok(())
}

/// GetBucketAcl: the owner with `FULL_CONTROL`.
pub(crate) async fn handle_get_bucket_acl(
    s3: &SaltS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    s3.require_bucket(&req.input.bucket).await?;
    let (owner, grants) = owner_full_control();
    Ok(S3Response::new(GetBucketAclOutput { grants, owner }))
}

/// GetObjectAcl: the owner with `FULL_CONTROL`; `NoSuchKey` for a missing object.
pub(crate) async fn handle_get_object_acl(
    s3: &SaltS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    require_object(s3, &req.input.bucket, &req.input.key).await?;
    let (owner, grants) = owner_full_control();
    Ok(S3Response::new(GetObjectAclOutput {
        grants,
        owner,
        request_charged: None,
    }))
}

/// GetBucketOwnershipControls: `BucketOwnerEnforced` (ACLs disabled).
pub(crate) async fn handle_get_bucket_ownership_controls(
    s3: &SaltS3,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    s3.require_bucket(&req.input.bucket).await?;
    let rule = OwnershipControlsRule {
        object_ownership: ObjectOwnership::from_static(ObjectOwnership::BUCKET_OWNER_ENFORCED),
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

/// Whether a `PUT ?acl` restates the only ACL there is: a canned ACL (`guard.rs` let only `private` and
/// `bucket-owner-full-control` through) or a policy with at least one grant, every grant `FULL_CONTROL` to the
/// owner (a canonical user with [`OWNER_ID`]), and no other owner named.
fn only_owner_full_control(canned: bool, policy: Option<&AccessControlPolicy>) -> bool {
    let Some(policy) = policy else {
        return canned;
    };
    let owner_ok = policy
        .owner
        .as_ref()
        .is_none_or(|o| o.id.as_deref().is_none_or(|id| id == OWNER_ID));
    let grants = policy.grants.as_deref().unwrap_or_default();
    owner_ok
        && !grants.is_empty()
        && grants.iter().all(|g| {
            g.permission
                .as_ref()
                .is_some_and(|p| p.as_str() == Permission::FULL_CONTROL)
                && g.grantee.as_ref().is_some_and(|e| {
                    e.type_.as_str() == Type::CANONICAL_USER && e.id.as_deref() == Some(OWNER_ID)
                })
        })
}

/// `AccessControlListNotSupported`, AWS's answer to setting an ACL on a bucket whose ACLs are disabled.
fn acls_disabled() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::AccessControlListNotSupported,
        "The bucket does not allow ACLs",
    )
}

/// PutBucketAcl: accepted, changing nothing, when it restates the owner's `FULL_CONTROL`; else refused.
pub(crate) async fn handle_put_bucket_acl(
    s3: &SaltS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    if !only_owner_full_control(input.acl.is_some(), input.access_control_policy.as_ref()) {
        return Err(acls_disabled());
    }
    Ok(S3Response::new(PutBucketAclOutput {}))
}

/// PutObjectAcl: accepted, changing nothing, when it restates the owner's `FULL_CONTROL`; else refused;
/// `NoSuchKey` for a missing object.
pub(crate) async fn handle_put_object_acl(
    s3: &SaltS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let input = req.input;
    require_object(s3, &input.bucket, &input.key).await?;
    if !only_owner_full_control(input.acl.is_some(), input.access_control_policy.as_ref()) {
        return Err(acls_disabled());
    }
    Ok(S3Response::new(PutObjectAclOutput::default()))
}
