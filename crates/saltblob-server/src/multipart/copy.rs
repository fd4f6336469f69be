//! UploadPartCopy: a part made of (a range of) an existing object, streamed from the source version into the
//! part's segment in the store's bounded in-flight window, then recorded as UploadPart records its parts.

use s3s::dto::{
    CopyPartResult, CopySource, ETag, StreamingBlob, UploadPartCopyInput, UploadPartCopyOutput,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{BlobStream, PriorityClass, PutOptions};

use super::upload::{State, StoredPart, Upload, no_such_upload};
use super::{MAX_PART_SIZE, PART_LEASE, check_part_number, record_part};
use crate::attrs::{Conditions, last_modified_of, stored_checksums, with_checksums};
use crate::auth::record_class;
use crate::body::Algorithm;
use crate::error::from_store;
use crate::keys::object_key;
use crate::put_body::{BodyChecks, PutBody, verified_body};
use crate::service::SaltS3;
use crate::sse;
use crate::sse::customer::{self, Customer, customer_echo_into, customer_of};
use crate::sse::rules::{Choice, echo_into};

/// How often the copy reads the source again when it is replaced between its head and its read.
const SOURCE_RETRIES: usize = 3;

/// The bytes `x-amz-copy-source-range` names (`bytes=first-last`, both offsets included) in a source of `size`
/// bytes.
///
/// # Errors
/// `InvalidArgument`: another form, or a range not within the source.
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
    if first > last || last >= size {
        return Err(s3_error!(
            InvalidArgument,
            "Range specified is not valid for source object of size: {size}"
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
    if version_id.as_deref().is_some_and(|v| v != "null") {
        return Err(s3_error!(
            InvalidArgument,
            "Invalid version id specified: objects have no versions here"
        ));
    }
    s3.require_bucket(src_bucket).await?;
    s3.require_bucket(&input.bucket).await?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if upload.state != State::Open {
        return Err(no_such_upload());
    }
    let src = object_key(src_bucket, src_key)?;
    let key = object_key(&input.bucket, &input.key)?;
    let conditions = Conditions {
        if_match: input.copy_source_if_match,
        if_none_match: input.copy_source_if_none_match,
        if_modified_since: input.copy_source_if_modified_since,
        if_unmodified_since: input.copy_source_if_unmodified_since,
    };
    let customer = customer_of!(&s3.sse, input)?;
    customer::check_part(&upload.manifest.metadata, customer.as_ref())?;
    let source_customer = customer_of!(&s3.sse, input, copy_source)?;
    let stream = open_source(
        s3,
        &src,
        input.copy_source_range.as_deref(),
        &conditions,
        source_customer.as_ref(),
    )
    .await?;
    let len = stream.range.end - stream.range.start;
    let class = PriorityClass::bulk();
    record_class(&req.extensions, class.clone());
    let PutBody {
        reader,
        outcome,
        late,
        ..
    } = verified_body(
        Some(StreamingBlob::wrap(SyncStream(std::sync::Mutex::new(
            stream,
        )))),
        BodyChecks {
            trailer: None,
            checksums: Algorithm::ALL.map(|a| (a, None)),
            algorithm: upload.checksum.map(|c| c.algorithm_dto()),
            content_md5: None,
        },
        None,
    )?;
    let mut opts = PutOptions::new().with_priority(class).with_size_hint(len);
    // Sealed as the upload chose, whatever the source's encryption.
    let sse = Choice::of_upload(&upload.manifest.metadata);
    opts.encryption_key = sse.as_ref().map(|c| c.key.clone());
    opts.customer_key = customer.as_ref().map(|c| c.key.clone());
    let written = s3.store.put_segment(&key, reader, &opts, PART_LEASE).await;
    let segment = sse::finish_sealed(written, &outcome, sse.as_ref())?;
    let stored = record_part(
        &s3.store,
        &input.bucket,
        upload,
        input.part_number,
        &key,
        segment,
        late.entries(),
    )
    .await?;
    #[expect(
        clippy::needless_update,
        reason = "`with_checksums!` defaults the other fields, and a CopyPartResult has none"
    )]
    let result = with_checksums!(
        CopyPartResult {
            e_tag: Some(ETag::Strong(StoredPart::md5_of(&stored).to_owned())),
            last_modified: Some(last_modified_of(&stored)),
        },
        stored_checksums(&stored)
    );
    let mut output = UploadPartCopyOutput {
        copy_part_result: Some(result),
        ..UploadPartCopyOutput::default()
    };
    match &customer {
        Some(c) => customer_echo_into!(output, Some(c)),
        None => echo_into!(output, s3.choice_echo(sse.as_ref())),
    }
    Ok(S3Response::new(output))
}

/// A stream that is `Sync` (as a request body must be) because it is only ever polled through `&mut`.
struct SyncStream(std::sync::Mutex<BlobStream>);

impl futures::Stream for SyncStream {
    type Item = saltblob_core::Result<bytes::Bytes>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.get_mut().0.get_mut() {
            Ok(stream) => std::pin::Pin::new(stream).poll_next(cx),
            Err(poisoned) => std::pin::Pin::new(poisoned.into_inner()).poll_next(cx),
        }
    }
}

/// Opens the bytes of source `src` to copy, with the copy source's SSE-C key `customer`: `range` of it
/// (`x-amz-copy-source-range`) or all of it, read from the version whose conditions were checked.
async fn open_source(
    s3: &SaltS3,
    src: &str,
    range: Option<&str>,
    conditions: &Conditions,
    customer: Option<&Customer>,
) -> S3Result<BlobStream> {
    for _ in 0..SOURCE_RETRIES {
        let manifest = s3.store.head(src).await.map_err(from_store)?;
        customer::check_read(&manifest, customer)?;
        conditions.check(&manifest, S3ErrorCode::PreconditionFailed)?;
        let bytes = match range {
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
        let opts = customer::get_options(customer).with_range(bytes);
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
        for bad in [
            "bytes=0-10",
            "bytes=5-4",
            "bytes=-5",
            "bytes=3-",
            "0-3",
            "bytes=a-b",
        ] {
            let e = copy_range(bad, 10).expect_err(bad);
            assert_eq!(e.code(), &S3ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
