//! UploadPart, and how a part is stored and recorded (UploadPart, UploadPartCopy): its body written as a
//! segment of the object, sealed as the upload chose, then recorded as the part of its number (see the
//! protocol in `mod.rs`).

use std::collections::BTreeMap;

use s3s::dto::{ETag, UploadPartInput, UploadPartOutput};
use s3s::{S3Request, S3Response, S3Result};
use saltblob_core::manifest::SEALED_METADATA_KEY;
use saltblob_core::{BlobStore, Manifest, PriorityClass, PutOptions, Segment};

use super::cleanup::give_up;
use super::parts::{self, StoredPart};
use super::upload::{State, Upload, no_such_upload};
use super::{MAX_PART_SIZE, PART_LEASE, check_part_number, part_too_large};
use crate::attrs::{ETAG_KEY, sealed_etag, stored_checksums, with_checksums, with_opened};
use crate::auth::record_class;
use crate::body::Algorithm;
use crate::error::from_store;
use crate::keys::object_key;
use crate::put_body::{PutBody, announced_trailer, put_body};
use crate::rereads::UPLOAD_RECORD;
use crate::service::SaltS3;
use crate::sse::Sse;

/// Where a part goes: its upload (read `open` before the part was written), the bucket, the part number and
/// the object's store key.
pub(super) struct Target<'a> {
    pub upload: Upload,
    pub bucket: &'a str,
    pub number: i32,
    pub key: &'a str,
}

/// The checksum algorithms an UploadPart names: in headers, in its trailer, in `x-amz-checksum-algorithm`.
fn named_algorithms(input: &UploadPartInput, headers: &http::HeaderMap) -> Vec<Algorithm> {
    let mut named: Vec<Algorithm> = [
        (Algorithm::Crc32, input.checksum_crc32.is_some()),
        (Algorithm::Crc32c, input.checksum_crc32c.is_some()),
        (Algorithm::Crc64Nvme, input.checksum_crc64nvme.is_some()),
        (Algorithm::Sha1, input.checksum_sha1.is_some()),
        (Algorithm::Sha256, input.checksum_sha256.is_some()),
    ]
    .into_iter()
    .filter_map(|(a, sent)| sent.then_some(a))
    .chain(announced_trailer(headers))
    .chain(
        input
            .checksum_algorithm
            .as_ref()
            .and_then(|a| Algorithm::parse(a.as_str())),
    )
    .collect();
    named.dedup();
    named
}

/// UploadPart: writes the verified body (at most 5 GiB) as a segment of the object, then records it as the
/// part of that number (see [`store_part`]).
pub(crate) async fn handle_upload_part(
    s3: &SaltS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let mut input = req.input;
    check_part_number(input.part_number)?;
    s3.require_bucket(&input.bucket).await?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if upload.state != State::Open {
        return Err(no_such_upload());
    }
    let key = object_key(&input.bucket, &input.key)?;
    let sse = s3
        .sse
        .part(&s3.store, &upload.manifest.metadata, &req.headers)
        .await?;
    if input
        .content_length
        .is_some_and(|l| u64::try_from(l).is_ok_and(|l| l > MAX_PART_SIZE))
    {
        return Err(part_too_large());
    }
    if let Some(c) = upload.checksum {
        c.check_part(&named_algorithms(&input, &req.headers))?;
        // A full-object upload's part sent without its checksum has it computed.
        input
            .checksum_algorithm
            .get_or_insert_with(|| c.algorithm_dto());
    }
    let body = put_body!(req, input)?;
    let part = Target {
        upload,
        bucket: &input.bucket,
        number: input.part_number,
        key: &key,
    };
    let (stored, verified) = store_part(s3, &req.extensions, part, body, &sse, None).await?;
    let output = with_checksums!(
        UploadPartOutput {
            e_tag: Some(ETag::Strong(StoredPart::md5_of(&stored).to_owned())),
        },
        stored_checksums(&with_opened(&stored, verified))
    );
    Ok(sse.echo.respond(output))
}

/// Stores `body` as `part`, sealed as `sse` (the upload's choice) says: a segment of the object in the bulk
/// class (the request is labelled with it), of `size_hint` bytes if known, then recorded ([`record_part`]).
/// Returns the part record, and the ETag and checksums the body verified with (for the response).
///
/// A sealed part's record keeps no value derived from its bytes in the clear: its ETag is opaque
/// ([`sealed_etag`] of its segment's keyed digest) and its MD5 and checksums are sealed under the segment's keys
/// ([`saltblob_core::BlobStore::seal_metadata`]), so that ListParts shows none of them.
///
/// # Errors
/// Those of [`PutBody::store_segment`] and [`record_part`].
pub(super) async fn store_part(
    s3: &SaltS3,
    extensions: &http::Extensions,
    part: Target<'_>,
    body: PutBody,
    sse: &Sse,
    size_hint: Option<u64>,
) -> S3Result<(Manifest, BTreeMap<String, String>)> {
    // Parts are a large object's: they run in the bulk class, whatever their own size (a class the put names
    // is the one it runs in, before the store's default and the layout's).
    let class = PriorityClass::bulk();
    record_class(extensions, class.clone());
    let mut opts = PutOptions::new().with_priority(class);
    opts.size_hint = size_hint;
    let (segment, verified) = body
        .store_segment(&s3.store, part.key, opts, sse, PART_LEASE)
        .await?;
    let metadata = match &segment.sealing {
        None => verified.clone(),
        Some(sealing) => {
            let sealed = s3
                .store
                .seal_metadata(
                    part.key,
                    segment.version,
                    sealing,
                    sse.customer_key(),
                    &verified,
                )
                .await
                .map_err(from_store)?;
            BTreeMap::from([
                (ETAG_KEY.to_owned(), sealed_etag(&segment.digest, None)),
                (SEALED_METADATA_KEY.to_owned(), sealed),
            ])
        }
    };
    let stored = record_part(&s3.store, part, segment, metadata).await?;
    Ok((stored, verified))
}

/// Records `segment`, written for `part`, with `metadata` (its ETag and checksums); returns the part record.
///
/// The segment's own record comes first, then the part record; then the upload record is touched. Only once
/// the touch succeeded on an open record is the segment the part replaced given up (a complete that read the
/// record before the touch reads it again and lists the new part). If the upload has moved on meanwhile, this
/// part may or may not be in the object: `NoSuchUpload`, and its segment is left to the complete or abort
/// (which finds it by its record) and the sweep.
///
/// # Errors
/// `NoSuchUpload`, a store error.
async fn record_part(
    store: &BlobStore,
    part: Target<'_>,
    segment: Segment,
    metadata: BTreeMap<String, String>,
) -> S3Result<Manifest> {
    let Target {
        upload,
        bucket,
        number,
        key,
    } = part;
    if let Err(e) = parts::put_segment_record(store, bucket, &upload.id, &segment).await {
        // Recorded nowhere, so in no compose: safe to give up at once.
        give_up(store, key, &upload.id, &segment, None).await;
        return Err(e);
    }
    let (stored, replaced) =
        parts::put_part(store, bucket, &upload.id, number, &segment, metadata).await?;
    let mut current = upload;
    // Other parts' touches may keep winning.
    let mut tries = UPLOAD_RECORD.start();
    while tries.next_attempt().await {
        match current.set_state(store, bucket, State::Open).await? {
            Some(_) => {
                if let Some(old) = replaced.filter(|old| old.version != segment.version) {
                    let record = parts::segment_record_key(bucket, &current.id, old.version);
                    give_up(store, key, &current.id, &old, Some(record)).await;
                }
                return Ok(stored);
            }
            None => {
                current = Upload::read_any(store, bucket, &current.id)
                    .await?
                    .ok_or_else(no_such_upload)?;
                if current.state != State::Open {
                    return Err(no_such_upload());
                }
            }
        }
    }
    // Still open, but other parts' touches kept winning: this part is recorded; the segment it replaced stays
    // for the complete or abort.
    Ok(stored)
}
