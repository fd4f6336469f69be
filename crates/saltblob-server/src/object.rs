//! Object operations: PutObject (streamed, verified), GetObject and HeadObject (ranges, conditionals),
//! DeleteObject(s) and CopyObject (streamed get → put). How the attributes sit in the manifest is `attrs.rs`;
//! how a put's body is verified is `put_body.rs`.

use futures::{StreamExt, TryStreamExt};
use http::StatusCode;
use s3s::dto::{
    ChecksumMode, CopyObjectInput, CopyObjectOutput, CopyObjectResult, CopySource,
    DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject,
    GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, MetadataDirective,
    PutObjectInput, PutObjectOutput, Range, StreamingBlob,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{BlobStream, GetOptions, PutOptions};

use crate::attrs::{
    Attributes, CHECKSUM_KEY, Conditions, ETAG_KEY, etag_of, last_modified_of, object_metadata,
    stored_checksums, with_attributes, with_checksums,
};
use crate::body::{BlobBody, Expected, SharedOutcome, VerifyingReader};
use crate::error::from_store;
use crate::keys::object_key;
use crate::put_body::{PutBody, finish_put, put_body};
use crate::service::SaltS3;

/// Most keys one DeleteObjects request may name, as S3.
const MAX_DELETE_OBJECTS: usize = 1000;

/// How many times a ranged read retries when the object is replaced between its head and its read.
const RANGE_RETRIES: usize = 3;

/// `Content-Range` of `range` in an object of `size` bytes.
fn content_range(range: &std::ops::Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{size}",
        range.start,
        range.end.saturating_sub(1)
    )
}

fn wants_checksums(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str() == ChecksumMode::ENABLED)
}

/// Opens object `key` for reading after checking `conditions`: all of it, or `range` of it (read from the
/// version whose size the range was resolved against).
async fn open(
    s3: &SaltS3,
    key: &str,
    range: Option<Range>,
    conditions: &Conditions,
) -> S3Result<BlobStream> {
    let Some(range) = range else {
        let stream = s3.store.get_stream(key).await.map_err(from_store)?;
        conditions.check(&stream.manifest, S3ErrorCode::NotModified)?;
        return Ok(stream);
    };
    for _ in 0..RANGE_RETRIES {
        let manifest = s3.store.head(key).await.map_err(from_store)?;
        conditions.check(&manifest, S3ErrorCode::NotModified)?;
        let bytes = range
            .check(manifest.size)
            .map_err(|_| s3_error!(InvalidRange, "The requested range is not satisfiable"))?;
        let opts = GetOptions::new().with_range(bytes);
        match s3.store.get_stream_with(key, &opts).await {
            Ok(stream) if stream.manifest.version == manifest.version => return Ok(stream),
            // Replaced between the head and the read: resolve the range again.
            Ok(_) | Err(saltblob_core::Error::RangeNotSatisfiable { .. }) => continue,
            Err(e) => return Err(from_store(e)),
        }
    }
    Err(s3_error!(
        SlowDown,
        "The object changed during the request; please retry"
    ))
}

/// GetObject: the object, or a range of it, after its conditional headers.
pub(crate) async fn handle_get_object(
    s3: &SaltS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    check_part_number(input.part_number)?;
    let conditions = Conditions {
        if_match: input.if_match,
        if_none_match: input.if_none_match,
        if_modified_since: input.if_modified_since,
        if_unmodified_since: input.if_unmodified_since,
    };
    let stream = open(s3, &key, input.range, &conditions).await?;
    s3.record_class_of(&req.extensions, &stream.manifest);
    let ranged = input.range.is_some();
    let attrs = Attributes::of(
        &stream.manifest,
        !ranged && wants_checksums(input.checksum_mode.as_ref()),
    );
    let size = stream.manifest.size;
    let range = stream.range.clone();
    let output = with_attributes!(
        GetObjectOutput {
            accept_ranges: Some("bytes".to_owned()),
            content_length: i64::try_from(range.end - range.start).ok(),
            content_range: ranged.then(|| content_range(&range, size)),
            body: Some(StreamingBlob::new(BlobBody::new(stream))),
        },
        attrs
    );
    Ok(S3Response::new(output))
}

/// HeadObject: the object's attributes (of a range of it, with a Range header), after its conditional headers.
pub(crate) async fn handle_head_object(
    s3: &SaltS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    check_part_number(input.part_number)?;
    let manifest = s3.store.head(&key).await.map_err(from_store)?;
    Conditions {
        if_match: input.if_match,
        if_none_match: input.if_none_match,
        if_modified_since: input.if_modified_since,
        if_unmodified_since: input.if_unmodified_since,
    }
    .check(&manifest, S3ErrorCode::NotModified)?;
    let range = match input.range {
        Some(r) => Some(
            r.check(manifest.size)
                .map_err(|_| s3_error!(InvalidRange, "The requested range is not satisfiable"))?,
        ),
        None => None,
    };
    let attrs = Attributes::of(
        &manifest,
        range.is_none() && wants_checksums(input.checksum_mode.as_ref()),
    );
    let length = range.as_ref().map_or(manifest.size, |r| r.end - r.start);
    let output = with_attributes!(
        HeadObjectOutput {
            accept_ranges: Some("bytes".to_owned()),
            content_length: i64::try_from(length).ok(),
            content_range: range.as_ref().map(|r| content_range(r, manifest.size)),
        },
        attrs
    );
    let status = range.is_some().then_some(StatusCode::PARTIAL_CONTENT);
    let mut response = S3Response::new(output);
    response.status = status;
    Ok(response)
}

/// PutObject: streams the body into the store, verified on the way (`put_body.rs`); nothing is stored unless
/// it verifies and the conditional headers hold.
pub(crate) async fn handle_put_object(
    s3: &SaltS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    let metadata = object_metadata!(input)?;
    let PutBody {
        reader,
        outcome,
        late,
        size_hint,
    } = put_body!(req, input)?;
    let mut opts = PutOptions::new().with_late_metadata(late).with_condition(
        s3.put_condition(&key, input.if_match.as_ref(), input.if_none_match.as_ref())
            .await?,
    );
    opts.metadata = metadata;
    opts.content_type = input.content_type;
    opts.size_hint = size_hint;
    let result = s3.store.put_stream(&key, reader, &opts).await;
    let manifest = finish_put(result, &outcome)?;
    s3.record_class_of(&req.extensions, &manifest);
    let output = with_checksums!(
        PutObjectOutput {
            e_tag: Some(etag_of(&manifest)),
            size: i64::try_from(manifest.size).ok(),
        },
        stored_checksums(&manifest)
    );
    Ok(S3Response::new(output))
}

/// DeleteObject: deletes the object (a missing one too, as S3).
pub(crate) async fn handle_delete_object(
    s3: &SaltS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    s3.store.delete(&key).await.map_err(from_store)?;
    Ok(S3Response::new(DeleteObjectOutput::default()))
}

/// DeleteObjects: deletes up to [`MAX_DELETE_OBJECTS`] keys, reporting each failure on its own.
pub(crate) async fn handle_delete_objects(
    s3: &SaltS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
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
        let result = match object_key(&input.bucket, &object.key) {
            Ok(key) => s3.store.delete(&key).await.map_err(from_store),
            Err(e) => Err(e),
        };
        match result {
            Ok(_) if quiet => {}
            Ok(_) => deleted.push(DeletedObject {
                key: Some(object.key),
                ..DeletedObject::default()
            }),
            Err(e) => errors.push(s3s::dto::Error {
                code: Some(e.code().as_str().to_owned()),
                key: Some(object.key),
                message: e.message().map(str::to_owned),
                version_id: None,
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: Some(errors),
        ..DeleteObjectsOutput::default()
    }))
}

/// CopyObject: streams the source into the destination (a get feeding a put); the ETag and checksums carry
/// over, the other attributes are copied or replaced (`x-amz-metadata-directive: REPLACE`).
pub(crate) async fn handle_copy_object(
    s3: &SaltS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let input = req.input;
    let CopySource::Bucket {
        bucket: src_bucket,
        key: src_key,
        version_id,
    } = &input.copy_source
    else {
        return Err(s3_error!(
            NotImplemented,
            "Only copy sources of the form bucket/key are supported"
        ));
    };
    if version_id.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "Objects have no versions here; copy without versionId"
        ));
    }
    s3.require_bucket(src_bucket).await?;
    s3.require_bucket(&input.bucket).await?;
    let src = object_key(src_bucket, src_key)?;
    let dst = object_key(&input.bucket, &input.key)?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    if src == dst && !replace {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
        ));
    }
    let stream = s3.store.get_stream(&src).await.map_err(from_store)?;
    Conditions {
        if_match: input.copy_source_if_match,
        if_none_match: input.copy_source_if_none_match,
        if_modified_since: input.copy_source_if_modified_since,
        if_unmodified_since: input.copy_source_if_unmodified_since,
    }
    .check(&stream.manifest, S3ErrorCode::PreconditionFailed)?;
    let source = stream.manifest.clone();
    s3.record_class_of(&req.extensions, &source);
    // The bytes are the same: the ETag and checksums carry over; the rest is copied or replaced.
    let mut opts = PutOptions::new().with_size_hint(source.size);
    let system = source
        .metadata
        .iter()
        .filter(|(k, _)| *k == ETAG_KEY || k.starts_with(CHECKSUM_KEY));
    if replace {
        opts.metadata = object_metadata!(input)?;
        opts.content_type = input.content_type;
        opts.metadata
            .extend(system.map(|(k, v)| (k.clone(), v.clone())));
    } else {
        opts.metadata = source.metadata.clone();
        opts.content_type = source.content_type.clone();
    }
    let body = stream.map_err(from_store).boxed();
    let outcome = SharedOutcome::default();
    let reader = VerifyingReader::new(body, Expected::default(), outcome.clone());
    let manifest = finish_put(s3.store.put_stream(&dst, reader, &opts).await, &outcome)?;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag_of(&manifest)),
            last_modified: Some(last_modified_of(&manifest)),
            ..CopyObjectResult::default()
        }),
        ..CopyObjectOutput::default()
    }))
}

/// A GET or HEAD by part number: part 1 is the whole object (the parts of a composed object are not addressed
/// one by one); any other part number is `InvalidPartNumber`.
fn check_part_number(part: Option<i32>) -> S3Result<()> {
    match part {
        None | Some(1) => Ok(()),
        Some(_) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InvalidPartNumber".into()),
                "The requested partnumber is not satisfiable",
            );
            e.set_status_code(StatusCode::RANGE_NOT_SATISFIABLE);
            Err(e)
        }
    }
}
