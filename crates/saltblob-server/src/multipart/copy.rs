//! UploadPartCopy: a part made of (a range of) an existing object, streamed from the source version into the
//! part's segment in the store's bounded in-flight window, then recorded as UploadPart records its parts
//! (`part.rs`).

use s3s::dto::{CopyPartResult, ETag, UploadPartCopyInput, UploadPartCopyOutput};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{BlobStream, VersionId};

use super::part::{Target, store_part};
use super::parts::StoredPart;
use super::upload::{State, Upload, no_such_upload};
use super::{MAX_PART_SIZE, check_part_number};
use crate::attrs::{
    Conditions, last_modified_of, stored_checksums, versioned_copy_source, with_checksums,
    with_opened,
};
use crate::error::from_store;
use crate::keys::object_key;
use crate::put_body::PutBody;
use crate::rereads::REPLACED;
use crate::service::SaltS3;
use crate::sse::customer::{self, Customer};
use crate::versioning;

/// The bytes `x-amz-copy-source-range` names (`bytes=first-last`, both offsets included) in a source of `size`
/// bytes.
///
/// # Errors
/// `InvalidArgument`: another form, or a first offset past the last; `InvalidRange` (416): a range that ends
/// past the source, as S3 answers.
fn copy_range(value: &str, size: u64) -> S3Result<std::ops::Range<u64>> {
    let parsed = value
        .trim()
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)));
    let Some((first, last)) = parsed else {
        return Err(s3_error!(
            InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy"
        ));
    };
    if first > last {
        return Err(s3_error!(
            InvalidArgument,
            "Range specified is not valid for source object of size: {size}"
        ));
    }
    if last >= size {
        return Err(s3_error!(
            InvalidRange,
            "The requested range is not satisfiable: the source object holds {size} bytes"
        ));
    }
    Ok(first..last + 1)
}

/// UploadPartCopy: checks the source's conditions (`x-amz-copy-source-if-*`, 412), reads the range given (or
/// the whole source, at most 5 GiB) from one version of the source, and writes it as part `partNumber`; the
/// part's ETag is the MD5 of the bytes copied, and it carries the upload's checksum.
pub(crate) async fn handle_upload_part_copy(
    s3: &SaltS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let input = req.input;
    check_part_number(input.part_number)?;
    let (src_bucket, src_key, src_version) = versioned_copy_source(&input.copy_source)?;
    s3.require_bucket(src_bucket).await?;
    s3.require_bucket(&input.bucket).await?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if upload.state != State::Open {
        return Err(no_such_upload());
    }
    let src = object_key(src_bucket, src_key)?;
    let key = object_key(&input.bucket, &input.key)?;
    let named = src_version.is_some();
    let src_version = versioning::read_version(&s3.store, &src, src_version).await?;
    let conditions = Conditions {
        if_match: input.copy_source_if_match,
        if_none_match: input.copy_source_if_none_match,
        if_modified_since: input.copy_source_if_modified_since,
        if_unmodified_since: input.copy_source_if_unmodified_since,
    };
    let sse = s3
        .sse
        .part(&s3.store, &upload.manifest.metadata, &req.headers)
        .await?;
    let source_customer = s3.sse.reader(&req.headers, true)?;
    let source = Source {
        key: &src,
        version: src_version,
        range: input.copy_source_range.as_deref(),
    };
    let stream = open_source(s3, &source, &conditions, source_customer.as_ref()).await?;
    let copy_source_version_id = named.then(|| versioning::version_id_of(&stream.manifest));
    let len = stream.range.end - stream.range.start;
    let computed = upload.checksum.map(|c| c.algorithm).into_iter().collect();
    let body = PutBody::copied(stream, computed);
    let part = Target {
        upload,
        bucket: &input.bucket,
        number: input.part_number,
        key: &key,
    };
    let (stored, verified) = store_part(s3, &req.extensions, part, body, &sse, Some(len)).await?;
    #[expect(
        clippy::needless_update,
        reason = "`with_checksums!` defaults the other fields, and a CopyPartResult has none"
    )]
    let result = with_checksums!(
        CopyPartResult {
            e_tag: Some(ETag::Strong(StoredPart::md5_of(&stored).to_owned())),
            last_modified: Some(last_modified_of(&stored)),
        },
        stored_checksums(&with_opened(&stored, verified))
    );
    Ok(sse.echo.respond(UploadPartCopyOutput {
        copy_part_result: Some(result),
        copy_source_version_id,
        ..UploadPartCopyOutput::default()
    }))
}

/// What UploadPartCopy reads: a version of a source object (`None`: its current one) and the range asked
/// for (`x-amz-copy-source-range`; none: all of it).
struct Source<'a> {
    key: &'a str,
    version: Option<VersionId>,
    range: Option<&'a str>,
}

/// Opens the bytes of `source` to copy, with the copy source's SSE-C key `customer`, read from the version whose
/// conditions were checked (a delete marker is no source: `NoSuchKey`, or `405` when named).
async fn open_source(
    s3: &SaltS3,
    source: &Source<'_>,
    conditions: &Conditions,
    customer: Option<&Customer>,
) -> S3Result<BlobStream> {
    let src = source.key;
    let mut tries = REPLACED.start();
    while tries.next_attempt().await {
        let manifest = match source.version {
            Some(v) => s3.store.head_version(src, v).await,
            None => s3.store.head(src).await,
        }
        .map_err(from_store)?;
        versioning::refuse_marker(&manifest, source.version.is_some())?;
        customer::check_read(&s3.store, &manifest, customer).await?;
        conditions.check(&manifest, S3ErrorCode::PreconditionFailed)?;
        let bytes = match source.range {
            Some(r) => copy_range(r, manifest.size)?,
            None => 0..manifest.size,
        };
        if bytes.end - bytes.start > MAX_PART_SIZE {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!(
                    "The specified copy source is larger than the maximum allowable size for a copy source: {MAX_PART_SIZE}"
                ),
            ));
        }
        let mut opts = customer::get_options(customer).with_range(bytes);
        opts.version = source.version;
        match s3.store.get_stream_with(src, &opts).await {
            Ok(stream) if stream.manifest.version == manifest.version => return Ok(stream),
            // Replaced between the head and the read: check it again.
            Ok(_) | Err(saltblob_core::Error::RangeNotSatisfiable { .. }) => continue,
            Err(e) => return Err(customer::read_failed(e, customer)),
        }
    }
    Err(s3_error!(
        SlowDown,
        "The copy source changed during the request; please retry"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges_are_first_to_last_within_the_source() {
        assert_eq!(copy_range("bytes=0-9", 10).expect("whole"), 0..10);
        assert_eq!(copy_range("bytes=5-5", 10).expect("one byte"), 5..6);
        let e = copy_range("bytes=0-10", 10).expect_err("past the end");
        assert_eq!(e.code(), &S3ErrorCode::InvalidRange);
        for bad in ["bytes=5-4", "bytes=-5", "bytes=3-", "0-3", "bytes=a-b"] {
            let e = copy_range(bad, 10).expect_err(bad);
            assert_eq!(e.code(), &S3ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
