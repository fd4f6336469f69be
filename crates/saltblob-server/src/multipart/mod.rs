//! Multipart upload: CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload,
//! ListParts and ListMultipartUploads, on the store's segments (`docs/format.md`, *Manifest, format version 2*),
//! and the sweep of expired uploads. The upload's records and its state are `upload.rs`.
//!
//! Each part is written with [`saltblob_core::BlobStore::put_segment`] under the object's own store key, as a
//! segment claimable for [`UPLOAD_LEASE`]; completing the upload composes the listed parts into the object
//! without copying a byte ([`saltblob_core::BlobStore::compose`]).
//!
//! Completing and aborting first move the upload record out of `open` with a conditional put on the version
//! they read, so that of a complete and an abort of one upload exactly one proceeds; a part uploaded while the
//! upload is being aborted sees the record gone and discards itself. A part uploaded again replaces the part
//! record and discards the segment it replaced. Segments of uploads never completed nor aborted are reclaimed
//! by gc once their lease has passed; [`sweep_expired_uploads`] then removes the records.

mod upload;

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CompletedPart, CreateMultipartUploadInput,
    CreateMultipartUploadOutput, ETag, ListMultipartUploadsInput, ListMultipartUploadsOutput,
    ListPartsInput, ListPartsOutput, MultipartUpload, UploadPartInput, UploadPartOutput,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::manifest::hex;
use saltblob_core::{BlobStore, Error, ListEntry, PriorityClass, PutOptions, Segment};

use self::upload::{State, StoredPart, Upload, check_upload_id, no_such_upload};
use crate::attrs::{
    ETAG_KEY, checksum_of, last_modified_of, object_metadata, stored_checksums, with_checksums,
};
use crate::auth::record_class;
use crate::body::Algorithm;
use crate::error::from_store;
use crate::keys::{MULTIPART_PREFIX, object_key};
use crate::put_body::{PutBody, finish_put, put_body};
use crate::service::SaltS3;

/// How long the parts of an upload stay claimable after they were written: an upload neither completed nor
/// aborted within this is abandoned, and gc reclaims its parts. Seven days, as S3's common lifecycle rule.
pub const UPLOAD_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The smallest part but the last, as S3 requires.
const MIN_PART_SIZE: u64 = 5 << 20;
/// The largest part number, as S3 allows.
const MAX_PART_NUMBER: i32 = 10_000;
/// The most parts or uploads one listing returns, as S3 does.
const MAX_LISTED: usize = 1000;

fn check_part_number(number: i32) -> S3Result<()> {
    if (1..=MAX_PART_NUMBER).contains(&number) {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive"
        ))
    }
}

/// How many entries a listing of parts or uploads returns: as `requested`, at most (and by default)
/// [`MAX_LISTED`].
fn max_listed(requested: Option<i32>) -> usize {
    requested
        .and_then(|m| usize::try_from(m).ok())
        .unwrap_or(MAX_LISTED)
        .min(MAX_LISTED)
}

/// The ETag of an object composed of parts with these hex MD5s: MD5 of their binary MD5s, `-<count>`.
fn multipart_etag<'a>(md5s: impl Iterator<Item = &'a str>) -> String {
    let mut h = Md5::new();
    let mut count = 0usize;
    for part in md5s {
        let mut raw = [0u8; 16];
        for (i, byte) in raw.iter_mut().enumerate() {
            *byte = part
                .get(2 * i..2 * i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .unwrap_or(0);
        }
        h.update(&raw);
        count += 1;
    }
    format!("{}-{count}", hex(&h.finalize()))
}

/// CreateMultipartUpload: writes an open upload record with the object's attributes to be.
pub(crate) async fn handle_create_multipart_upload(
    s3: &SaltS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    object_key(&input.bucket, &input.key)?;
    let metadata = object_metadata!(input)?;
    let id = upload::create(
        &s3.store,
        &input.bucket,
        &input.key,
        metadata,
        input.content_type,
    )
    .await?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        checksum_algorithm: input.checksum_algorithm,
        ..CreateMultipartUploadOutput::default()
    }))
}

/// UploadPart: writes the verified body as a segment of the object, then its part record (replacing the part
/// of the same number); gives the part up if the upload stopped being open meanwhile.
pub(crate) async fn handle_upload_part(
    s3: &SaltS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let input = req.input;
    check_part_number(input.part_number)?;
    s3.require_bucket(&input.bucket).await?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if upload.state != State::Open {
        return Err(no_such_upload());
    }
    let key = object_key(&input.bucket, &input.key)?;
    let PutBody {
        reader,
        outcome,
        late,
        size_hint,
    } = put_body!(req, input)?;
    // Parts are a large object's: they run in the bulk class, whatever their own size (a class the put names
    // is the one it runs in, before the store's default and the layout's).
    let class = PriorityClass::bulk();
    let mut opts = PutOptions::new().with_priority(class.clone());
    opts.size_hint = size_hint;
    record_class(&req.extensions, class);
    let written = s3
        .store
        .put_segment(&key, reader, &opts, UPLOAD_LEASE)
        .await;
    let segment = finish_put(written, &outcome)?;

    // The part record: the segment, its ETag and checksums.
    let metadata = late.entries();
    let etag = metadata.get(ETAG_KEY).cloned().unwrap_or_default();
    let (stored, replaced) = upload::put_part(
        &s3.store,
        &input.bucket,
        &input.upload_id,
        input.part_number,
        &segment,
        metadata,
    )
    .await?;
    // The part it replaced (the same part number uploaded again) is given up.
    if let Some(old) = replaced
        && old.version != segment.version
        && let Err(e) = s3.store.discard_segment(&key, &old).await
    {
        tracing::warn!(error = %e, "could not discard a replaced part (gc reclaims it after its lease)");
    }
    // An abort or complete that moved the upload on meanwhile did not see this part: give it up.
    let still = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await;
    if !matches!(&still, Ok(u) if u.state == State::Open) {
        let _ = s3.store.discard_segment(&key, &segment).await;
        let record = upload::part_key(&input.bucket, &input.upload_id, input.part_number);
        let _ = s3.store.delete(&record).await;
        return Err(no_such_upload());
    }
    Ok(S3Response::new(with_checksums!(
        UploadPartOutput {
            e_tag: Some(ETag::Strong(etag)),
        },
        stored_checksums(&stored)
    )))
}

/// CompleteMultipartUpload: moves the upload to `completing`, composes the listed parts into the object (back
/// to `open` if that fails), then gives up the parts left out and removes the records.
pub(crate) async fn handle_complete_multipart_upload(
    s3: &SaltS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    let store = &s3.store;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    let upload = Upload::read(store, &input.bucket, &input.key, &input.upload_id).await?;
    let listed = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if listed.is_empty() {
        return Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema: it lists no part"
        ));
    }
    let stored = upload::all_parts(store, &input.bucket, &input.upload_id).await?;
    let chosen = choose_parts(&listed, &stored)?;
    let condition = s3
        .put_condition(&key, input.if_match.as_ref(), input.if_none_match.as_ref())
        .await?;

    upload
        .move_from_open(store, &input.bucket, &input.upload_id, State::Completing)
        .await?;
    let etag = multipart_etag(chosen.iter().map(|p| p.md5_hex()));
    let mut opts = PutOptions::new().with_condition(condition);
    opts.metadata = upload.object_metadata();
    opts.metadata.insert(ETAG_KEY.to_owned(), etag.clone());
    opts.content_type = upload.manifest.content_type.clone();
    let segments: Vec<Segment> = chosen.iter().map(|p| p.segment.clone()).collect();
    let manifest = match store.compose(&key, &segments, &opts).await {
        Ok(m) => m,
        Err(e) => {
            // Nothing was committed: the upload is open again, for a retry or an abort.
            if let Some(current) = upload::reread(store, &input.bucket, &input.upload_id).await
                && current.state == State::Completing
            {
                let _ = current
                    .set_state(store, &input.bucket, &input.upload_id, State::Open)
                    .await;
            }
            return Err(match e {
                Error::SegmentGone { .. } => s3_error!(
                    InvalidPart,
                    "One or more of the specified parts could not be found: its upload expired"
                ),
                e => from_store(e),
            });
        }
    };
    s3.record_class_of(&req.extensions, &manifest);
    // The parts left out of the object are given up; the others now belong to it.
    // (Part numbers are ascending: `choose_parts` checked.)
    let chosen_numbers: Vec<i32> = chosen.iter().map(|p| p.number).collect();
    upload::remove(store, &input.bucket, &input.upload_id, &key, &stored, |p| {
        chosen_numbers.binary_search(&p.number).is_err()
    })
    .await;
    tracing::debug!(
        size = manifest.size,
        segments = chosen_numbers.len(),
        "multipart upload completed"
    );
    Ok(S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        e_tag: Some(ETag::Strong(etag)),
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        ..CompleteMultipartUploadOutput::default()
    }))
}

/// AbortMultipartUpload: see [`abort`].
pub(crate) async fn handle_abort_multipart_upload(
    s3: &SaltS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    abort(&s3.store, &input.bucket, &input.upload_id, &key, &upload).await?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

/// Aborts upload `id` of object `key`: moves it to `aborting` (an abort that died half-way is taken up again),
/// discards its parts' segments and removes its records.
async fn abort(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    key: &str,
    upload: &Upload,
) -> S3Result<()> {
    if upload.state != State::Aborting {
        upload
            .move_from_open(store, bucket, id, State::Aborting)
            .await?;
    }
    let parts = upload::all_parts(store, bucket, id).await?;
    upload::remove(store, bucket, id, key, &parts, |_| true).await;
    Ok(())
}

/// ListParts: the parts after the part number marker, at most MaxParts (and 1000).
pub(crate) async fn handle_list_parts(
    s3: &SaltS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    let max = max_listed(input.max_parts);
    let after = input.part_number_marker.filter(|m| *m > 0);
    let mut parts =
        upload::parts(&s3.store, &input.bucket, &input.upload_id, after, max + 1).await?;
    let truncated = parts.len() > max;
    parts.truncate(max);
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: i32::try_from(max).ok(),
        part_number_marker: after,
        next_part_number_marker: parts.last().map(|p| p.number).filter(|_| truncated),
        is_truncated: Some(truncated),
        parts: Some(parts.iter().map(StoredPart::to_part).collect()),
        ..ListPartsOutput::default()
    }))
}

/// ListMultipartUploads: the open uploads of keys under the prefix, in the order they were created, after the
/// upload id marker.
pub(crate) async fn handle_list_multipart_uploads(
    s3: &SaltS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let max = max_listed(input.max_uploads);
    let prefix = input.prefix.clone().unwrap_or_default();
    // Uploads list in the order they were created (their ids are time-ordered), not by key.
    let records = upload::upload_records(&input.bucket);
    let after = input
        .upload_id_marker
        .as_ref()
        .filter(|m| check_upload_id(m).is_ok())
        .map(|m| Bytes::from(upload::upload_key(&input.bucket, m)));
    let mut entries = s3.store.list_stream_after(records.as_bytes(), after);
    let mut uploads = Vec::new();
    let mut truncated = false;
    while let Some(ListEntry { key, manifest }) = entries.try_next().await.map_err(from_store)? {
        let Ok(manifest) = manifest else { continue };
        let id = String::from_utf8_lossy(key.get(records.len()..).unwrap_or_default()).into_owned();
        let upload = Upload::decode(&s3.store, &key, manifest).await?;
        if upload.state != State::Open || !upload.key.starts_with(&prefix) {
            continue;
        }
        if uploads.len() == max {
            truncated = true;
            break;
        }
        uploads.push(MultipartUpload {
            initiated: Some(last_modified_of(&upload.manifest)),
            key: Some(upload.key),
            upload_id: Some(id),
            ..MultipartUpload::default()
        });
    }
    let last = uploads.last().cloned();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        max_uploads: i32::try_from(max).ok(),
        is_truncated: Some(truncated),
        next_upload_id_marker: last
            .as_ref()
            .and_then(|u| u.upload_id.clone())
            .filter(|_| truncated),
        next_key_marker: last.and_then(|u| u.key).filter(|_| truncated),
        upload_id_marker: input.upload_id_marker,
        key_marker: input.key_marker,
        uploads: Some(uploads),
        ..ListMultipartUploadsOutput::default()
    }))
}

/// Removes the records of uploads whose parts' lease has passed (gc reclaims or has reclaimed their
/// segments): run with the server's periodic gc. Returns how many uploads it removed.
///
/// # Errors
/// A failed listing of the records, or a failed read of an expired upload's parts. A record that does not
/// decode is skipped.
pub(crate) async fn sweep_expired_uploads(store: &BlobStore) -> S3Result<u64> {
    let now = saltblob_core::version::now_micros();
    let lease = u64::try_from(UPLOAD_LEASE.as_micros()).unwrap_or(u64::MAX);
    let mut removed = 0;
    let mut records = store.list_stream(MULTIPART_PREFIX.as_bytes());
    while let Some(ListEntry { key, manifest }) = records.try_next().await.map_err(from_store)? {
        let Ok(manifest) = manifest else { continue };
        // Only upload records: s3/u/<bucket>/u/<id>.
        let Some((bucket, id)) = upload::parse_upload_key(&key) else {
            continue;
        };
        if manifest.created_micros.saturating_add(lease) > now {
            continue;
        }
        // A record that does not decode is left alone (and logged): its state is not known.
        let Ok(upload) = Upload::decode(store, &key, manifest).await else {
            tracing::warn!(
                upload = id,
                "the sweep skips an upload record that does not decode"
            );
            continue;
        };
        let object = object_key(&bucket, &upload.key)?;
        let moved = match upload.state {
            State::Open => {
                upload
                    .move_from_open(store, &bucket, &id, State::Aborting)
                    .await
            }
            State::Completing | State::Aborting => Ok(()),
        };
        if moved.is_ok() {
            let parts = upload::all_parts(store, &bucket, &id).await?;
            // A completing upload whose compose committed owns its parts: discarding them then is
            // harmless (the reclaimer leaves chunks the current version owns).
            upload::remove(store, &bucket, &id, &object, &parts, |_| true).await;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The stored parts a CompleteMultipartUpload lists, checked as S3 does: part numbers ascending
/// (`InvalidPartOrder`), each uploaded with the ETag given (`InvalidPart`), each but the last at least 5 MiB
/// (`EntityTooSmall`).
fn choose_parts<'a>(
    listed: &[CompletedPart],
    stored: &'a [StoredPart],
) -> S3Result<Vec<&'a StoredPart>> {
    let mut chosen: Vec<&StoredPart> = Vec::with_capacity(listed.len());
    for part in listed {
        let number = part.part_number.unwrap_or(0);
        if chosen.last().is_some_and(|p| p.number >= number) {
            return Err(s3_error!(
                InvalidPartOrder,
                "The list of parts was not in ascending order. Parts must be ordered by part number."
            ));
        }
        let invalid = || {
            s3_error!(
                InvalidPart,
                "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag: part {number}"
            )
        };
        let found = stored
            .iter()
            .find(|p| p.number == number)
            .ok_or_else(invalid)?;
        if let Some(etag) = &part.e_tag
            && etag.value().trim_matches('"') != found.md5_hex()
        {
            return Err(invalid());
        }
        let sent = [
            (Algorithm::Crc32, &part.checksum_crc32),
            (Algorithm::Crc32c, &part.checksum_crc32c),
            (Algorithm::Crc64Nvme, &part.checksum_crc64nvme),
            (Algorithm::Sha1, &part.checksum_sha1),
            (Algorithm::Sha256, &part.checksum_sha256),
        ];
        for (algorithm, value) in sent {
            if let (Some(sent), Some(stored)) = (value, checksum_of(&found.manifest, algorithm))
                && sent.trim() != stored
            {
                return Err(invalid());
            }
        }
        chosen.push(found);
    }
    if let Some(small) = chosen
        .iter()
        .rev()
        .skip(1)
        .find(|p| p.segment.size < MIN_PART_SIZE)
    {
        let mut e = S3Error::with_message(
            S3ErrorCode::EntityTooSmall,
            format!(
                "Your proposed upload is smaller than the minimum allowed object size: part {} holds {} bytes; every part but the last must hold at least {MIN_PART_SIZE}",
                small.number, small.segment.size
            ),
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(e);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etags_are_the_md5_of_the_part_md5s() {
        // Two parts whose MD5s are those of "a" and "b": MD5(md5("a") ‖ md5("b")), then "-2".
        let a = "0cc175b9c0f1b6a831c399e269772661";
        let b = "92eb5ffee6ae2fec3ad71c777531578f";
        let etag = multipart_etag([a, b].into_iter());
        assert!(etag.ends_with("-2"), "{etag}");
        let mut raw = Vec::new();
        for h in [a, b] {
            raw.extend((0..16).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex")));
        }
        let mut md5 = Md5::new();
        md5.update(&raw);
        assert_eq!(etag, format!("{}-2", hex(&md5.finalize())));
    }
}
