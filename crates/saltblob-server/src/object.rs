//! Object operations: PutObject (streamed, verified; `x-amz-expiration` under a bucket lifecycle rule),
//! DeleteObject(s) (conditional deletes), GetObject and HeadObject (`read.rs`: ranges, parts, conditionals,
//! `response-*` overrides, `x-amz-expiration`), GetObjectAttributes (`attributes.rs`), CopyObject (`copy.rs`: a
//! streamed get → put, kept alive while it runs) and Put/Get/DeleteObjectTagging (`tagging.rs`). How the attributes
//! sit in the manifest is `attrs.rs`; how a body is verified and stored is `put_body.rs`; which bytes a GET or HEAD
//! selects is `select.rs`; the request and response adjustments made around s3s ([`call`]) are `around.rs`.
//!
//! In a bucket with versioning (`versioning.rs`) a write keeps the version it replaces and a delete writes a
//! delete marker or removes the version it names; in one that never had it, each key holds one version, `null`.

pub(crate) mod acl;
mod around;
mod attributes;
mod copy;
mod read;
mod select;
pub(crate) mod tagging;

use s3s::dto::{
    DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject,
    ObjectIdentifier, PutObjectInput, PutObjectOutput,
};
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{Error, PutCondition, PutOptions};

pub(crate) use self::around::call;
pub(crate) use self::attributes::handle_get_object_attributes;
pub(crate) use self::copy::handle_copy_object;
pub(crate) use self::read::{handle_get_object, handle_head_object};
use crate::attrs::{
    DeleteConditions, etag_of, object_metadata, precondition_failed, stored_checksums,
    with_checksums, with_opened,
};
use crate::error::from_store;
use crate::keys::object_key;
use crate::lifecycle::expiration_of;
use crate::put_body::put_body;
use crate::service::SaltS3;
use crate::versioning::{self, State};

/// Most keys one DeleteObjects request may name, as S3.
const MAX_DELETE_OBJECTS: usize = 1000;

/// PutObject: streams the body into the store, verified on the way (`put_body.rs`, which also refuses a body
/// over S3's 5 GiB); nothing is stored unless it verifies and the conditional headers hold.
pub(crate) async fn handle_put_object(
    s3: &SaltS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let input = req.input;
    let (record, lifecycle) = s3.bucket_and_lifecycle(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    let sse = s3
        .sse
        .put(&s3.store, &input.bucket, &record, &req.headers)
        .await?;
    let metadata = object_metadata!(input)?;
    let body = put_body!(req, input)?;
    let mut opts = PutOptions::new().with_condition(
        s3.put_condition(&key, input.if_match.as_ref(), input.if_none_match.as_ref())
            .await?,
    );
    opts.metadata = metadata;
    opts.content_type = input.content_type;
    let versioning = State::of(&record);
    versioning.prepare(&mut opts);
    let (manifest, verified) = body.store_object(&s3.store, &key, opts, &sse).await?;
    s3.record_class_of(&req.extensions, &manifest);
    let version_id = versioning.after_write(&s3.store, &key, &manifest).await?;
    let output = with_checksums!(
        PutObjectOutput {
            expiration: expiration_of(lifecycle.as_deref(), &input.key, &manifest),
            e_tag: Some(etag_of(&manifest)),
            size: i64::try_from(manifest.size).ok(),
            version_id: version_id,
        },
        stored_checksums(&with_opened(&manifest, verified))
    );
    Ok(sse.echo.respond(output))
}

/// Deletes object `key` if `conditions` hold for its current version: that version and no later one (the
/// store's conditional delete). Without conditions, deletes whatever the key holds (a missing key too, as S3).
/// A key that holds nothing is `Ok` under any condition: nothing to delete, 204, as AWS's API reference
/// documents ("if the ETag matches or if the object doesn't exist") and RGW answers.
///
/// # Errors
/// `PreconditionFailed` (412) when a condition does not hold for the current version.
async fn delete_object(s3: &SaltS3, key: &str, conditions: &DeleteConditions) -> S3Result<()> {
    if !conditions.any() {
        s3.store.delete(key).await.map_err(from_store)?;
        return Ok(());
    }
    let current = match s3.store.head(key).await {
        Ok(m) => m,
        Err(Error::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(from_store(e)),
    };
    if !conditions.hold_for(&current) {
        return Err(precondition_failed());
    }
    match s3.store.delete_version(key, current.version).await {
        // Deleted since the head: as if it had been missing.
        Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
        // Replaced since the head: the conditions held for a version that is no longer current.
        Err(Error::PreconditionFailed { .. }) => Err(precondition_failed()),
        Err(e) => Err(from_store(e)),
    }
}

/// DeleteObject: deletes the object, under its conditional headers (`If-Match`,
/// `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`) when given.
pub(crate) async fn handle_delete_object(
    s3: &SaltS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    let conditions = DeleteConditions {
        etag: input.if_match,
        last_modified: input.if_match_last_modified_time,
        size: input.if_match_size,
    };
    let deleted = delete_in(
        s3,
        State::of(&record),
        &key,
        input.version_id.as_deref(),
        &conditions,
    )
    .await?;
    Ok(S3Response::new(DeleteObjectOutput {
        version_id: deleted.version_id,
        delete_marker: deleted.delete_marker.then_some(true),
        ..DeleteObjectOutput::default()
    }))
}

/// Deletes object `key` of a bucket in versioning state `state`. With no version named in a bucket that never had
/// versioning, as [`delete_object`] (under its conditions). Otherwise as [`versioning::delete`]: the named version
/// removed, or a delete marker written; the conditions, if any, judge the named version or the current one (a
/// delete marker too, whose ETag only `*` matches; a missing key or version holds nothing to delete, 204), and
/// the marker is then pinned on the current version judged.
async fn delete_in(
    s3: &SaltS3,
    state: State,
    key: &str,
    version_id: Option<&str>,
    conditions: &DeleteConditions,
) -> S3Result<versioning::Deleted> {
    if version_id.is_none() && state == State::Unversioned {
        delete_object(s3, key, conditions).await?;
        return Ok(versioning::Deleted::default());
    }
    if !conditions.any() {
        return versioning::delete(&s3.store, state, key, version_id).await;
    }
    // The conditions judge the version named, or the current one (over which the marker is pinned). A version
    // or key that holds nothing is deleted already (204, as `delete_object`); a current delete marker is judged
    // as a version (`*` holds for it, no ETag does), so a second marker is written only over it.
    let version = versioning::read_version(&s3.store, key, version_id).await?;
    let judged = match version {
        Some(v) => s3.store.head_version(key, v).await,
        None => s3.store.head(key).await,
    };
    let judged = match judged {
        Ok(m) => m,
        Err(Error::NotFound { .. } | Error::VersionNotFound { .. }) => {
            return Ok(versioning::Deleted {
                version_id: version_id.map(str::to_owned),
                delete_marker: false,
            });
        }
        Err(e) => return Err(from_store(e)),
    };
    if !conditions.hold_for(&judged) {
        return Err(precondition_failed());
    }
    if version.is_some() {
        return versioning::delete(&s3.store, state, key, version_id).await;
    }
    let condition = PutCondition::IfVersion(judged.version);
    match versioning::put_marker(&s3.store, state, key, condition).await {
        Ok(marker) => Ok(versioning::Deleted {
            version_id: Some(versioning::version_id_of(&marker)),
            delete_marker: true,
        }),
        // Replaced since it was judged: the conditions held for a version that is no longer current.
        Err(Error::PreconditionFailed { .. } | Error::NotFound { .. }) => {
            Err(precondition_failed())
        }
        Err(e) => Err(from_store(e)),
    }
}

/// One DeleteObjects entry, as a DeleteObject of its key and version under its `ETag`, `LastModifiedTime` and
/// `Size` conditions.
async fn delete_entry(
    s3: &SaltS3,
    bucket: &str,
    state: State,
    object: &ObjectIdentifier,
) -> S3Result<versioning::Deleted> {
    let key = object_key(bucket, &object.key)?;
    let conditions = DeleteConditions {
        etag: object.e_tag.clone().map(s3s::dto::ETagCondition::ETag),
        last_modified: object.last_modified_time.clone(),
        size: object.size,
    };
    delete_in(s3, state, &key, object.version_id.as_deref(), &conditions).await
}

/// DeleteObjects: deletes up to [`MAX_DELETE_OBJECTS`] keys, reporting each failure on its own.
pub(crate) async fn handle_delete_objects(
    s3: &SaltS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let input = req.input;
    let state = State::of(&s3.require_bucket(&input.bucket).await?);
    if input.delete.objects.len() > MAX_DELETE_OBJECTS {
        return Err(s3_error!(
            MalformedXML,
            "A DeleteObjects request names at most {MAX_DELETE_OBJECTS} keys"
        ));
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for object in input.delete.objects {
        match delete_entry(s3, &input.bucket, state, &object).await {
            Ok(_) if quiet => {}
            Ok(d) => deleted.push(DeletedObject {
                key: Some(object.key),
                delete_marker: d.delete_marker.then_some(true),
                delete_marker_version_id: d.version_id.clone().filter(|_| d.delete_marker),
                version_id: object.version_id,
            }),
            Err(e) => errors.push(entry_error(&e, object)),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: Some(errors),
        ..DeleteObjectsOutput::default()
    }))
}

/// The `<Error>` entry of a DeleteObjects key that failed with `e`.
fn entry_error(e: &S3Error, object: ObjectIdentifier) -> s3s::dto::Error {
    s3s::dto::Error {
        code: Some(e.code().as_str().to_owned()),
        key: Some(object.key),
        message: e.message().map(str::to_owned),
        version_id: object.version_id,
    }
}
