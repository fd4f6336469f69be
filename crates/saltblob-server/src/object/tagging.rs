//! Put/Get/DeleteObjectTagging: an object's tag set, kept in its manifest (`tagging.rs`) and changed in place
//! ([`saltblob_core::BlobStore::update_metadata`]): the object keeps its version, ETag, Last-Modified and bytes,
//! as on AWS.

use s3s::dto::{
    DeleteObjectTaggingInput, DeleteObjectTaggingOutput, GetObjectTaggingInput,
    GetObjectTaggingOutput, PutObjectTaggingInput, PutObjectTaggingOutput,
};
use s3s::{S3Request, S3Response, S3Result};

use crate::keys::object_key;
use crate::service::SaltS3;
use crate::tagging::{MAX_OBJECT_TAGS, Tags};
use crate::versioning::shown_version_id;

/// PutObjectTagging: replaces the object's tags, once checked.
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = req.input;
    let tags = Tags::from_dto(input.tagging.tag_set, MAX_OBJECT_TAGS)?;
    set_tags(
        s3,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        &tags,
    )
    .await?;
    Ok(S3Response::new(PutObjectTaggingOutput::default()))
}

/// GetObjectTagging: the object's tags (an empty set when it has none).
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let input = req.input;
    let (manifest, state) = s3
        .object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: Tags::of(&manifest).to_dto(),
        version_id: shown_version_id(state.keeps(), &manifest),
    }))
}

/// DeleteObjectTagging: removes the object's tags (204 whether or not it had any).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let input = req.input;
    let none = Tags::default();
    set_tags(
        s3,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        &none,
    )
    .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
}

/// Sets the tags of the object's current version (or the version `version_id` names, which must be the current
/// one) to `tags`, in place ([`SaltS3::change_version_in_place`]).
///
/// # Errors
/// `NoSuchBucket`, `NoSuchKey`, `NoSuchVersion`; `NotImplemented` for a noncurrent version; `OperationAborted`
/// (409) when writers replaced the object every time.
async fn set_tags(
    s3: &SaltS3,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    tags: &Tags,
) -> S3Result<()> {
    s3.require_bucket(bucket).await?;
    s3.change_version_in_place(&object_key(bucket, key)?, version_id, |m| tags.store_in(m))
        .await?;
    Ok(())
}
