//! Put/Get/DeleteObjectTagging: an object's tag set, kept in its manifest (`tagging.rs`) and changed in place
//! ([`saltblob_core::BlobStore::update_metadata`]): the object keeps its version, ETag, Last-Modified and bytes,
//! as on AWS.

use s3s::dto::{
    DeleteObjectTaggingInput, DeleteObjectTaggingOutput, GetObjectTaggingInput,
    GetObjectTaggingOutput, PutObjectTaggingInput, PutObjectTaggingOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::Error;

use crate::attrs::current_version;
use crate::error::from_store;
use crate::keys::object_key;
use crate::service::SaltS3;
use crate::tagging::{MAX_OBJECT_TAGS, Tags};

/// How many times a tag change is tried when writers keep replacing the object under it.
const ATTEMPTS: usize = 3;

/// PutObjectTagging: replaces the object's tags, once checked.
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = req.input;
    current_version(input.version_id.as_deref())?;
    let tags = Tags::from_dto(input.tagging.tag_set, MAX_OBJECT_TAGS)?;
    set_tags(s3, &input.bucket, &input.key, &tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput::default()))
}

/// GetObjectTagging: the object's tags (an empty set when it has none).
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let input = req.input;
    current_version(input.version_id.as_deref())?;
    s3.require_bucket(&input.bucket).await?;
    let manifest = s3
        .store
        .head(object_key(&input.bucket, &input.key)?)
        .await
        .map_err(from_store)?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: Tags::of(&manifest).to_dto(),
        version_id: None,
    }))
}

/// DeleteObjectTagging: removes the object's tags (204 whether or not it had any).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let input = req.input;
    current_version(input.version_id.as_deref())?;
    set_tags(s3, &input.bucket, &input.key, &Tags::default()).await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
}

/// Sets the tags of the object's current version to `tags`, in place. A writer that replaces the object
/// between the read and the write wins; the change is then made on the version it wrote, up to [`ATTEMPTS`]
/// times.
///
/// # Errors
/// `NoSuchBucket`, `NoSuchKey`; `OperationAborted` (409) when writers replaced the object every time.
async fn set_tags(s3: &SaltS3, bucket: &str, key: &str, tags: &Tags) -> S3Result<()> {
    s3.require_bucket(bucket).await?;
    let store_key = object_key(bucket, key)?;
    for _ in 0..ATTEMPTS {
        let manifest = s3.store.head(&store_key).await.map_err(from_store)?;
        match s3
            .store
            .update_metadata(&store_key, manifest.version, |m| tags.store_in(m))
            .await
        {
            Ok(_) => return Ok(()),
            Err(Error::PreconditionFailed { .. }) => continue,
            Err(e) => return Err(from_store(e)),
        }
    }
    Err(s3_error!(
        OperationAborted,
        "The object was replaced while its tags were being set; please try again."
    ))
}
