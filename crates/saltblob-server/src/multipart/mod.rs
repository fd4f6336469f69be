//! Multipart upload: CreateMultipartUpload, UploadPart, UploadPartCopy, CompleteMultipartUpload,
//! AbortMultipartUpload, ListParts and ListMultipartUploads, on the store's segments (`docs/format.md`,
//! *Manifest, format version 2*), and the sweep of finished and expired uploads.
//!
//! Each part is written with [`saltblob_core::BlobStore::put_segment`] under the object's own store key, as a
//! segment claimable for [`PART_LEASE`], and recorded (`upload.rs`) before it is used; completing the upload
//! composes the listed parts into the object without copying a byte ([`saltblob_core::BlobStore::compose`]).
//!
//! The upload record is the one point of agreement between requests, which may run in several servers on one
//! store: every change of it is a conditional put on the version read. An UploadPart *touches* it (rewrites it
//! unchanged, which records the upload's last activity) after recording its part, and gives up the segment it
//! replaced only once that touch succeeded on an `open` record: a complete that read the record before then has
//! to read it again, and lists the new part. Complete and abort move the record out of `open`; of two such
//! moves exactly one succeeds. Segments are only given up by whoever knows the final set: the part's own upload
//! (its replaced segment, as above), a complete after its commit (every segment of the upload the object does
//! not own), an abort (all of them), the sweep (what requests that raced them left behind).
//!
//! # Layout
//! - `checksum.rs`: the upload's checksum algorithm and type, and the object's checksum made of the parts'.
//! - `upload.rs`: the records and their typed state.
//! - `complete.rs`: CompleteMultipartUpload, run to its end in a task of its own.
//! - `copy.rs`: UploadPartCopy.
//! - `listing.rs`: ListMultipartUploads.
//! - this file: the other operations, abort, and the sweep.

pub(crate) mod cap;
mod checksum;
mod complete;
mod copy;
mod listing;
mod upload;

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CreateMultipartUploadInput,
    CreateMultipartUploadOutput, ETag, ListPartsInput, ListPartsOutput, UploadPartInput,
    UploadPartOutput,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::manifest::hex;
use saltblob_core::{
    BlobStore, ListEntry, Manifest, PriorityClass, PutOptions, Segment, VersionId,
};
use tokio::io::{AsyncRead, ReadBuf};

use self::checksum::UploadChecksum;
pub(crate) use self::complete::handle_complete_multipart_upload;
pub(crate) use self::copy::handle_upload_part_copy;
pub(crate) use self::listing::handle_list_multipart_uploads;
use self::upload::{ComposeRecord, State, StoredPart, Upload, no_such_upload};
use crate::attrs::{object_metadata, stored_checksums, with_checksums};
use crate::auth::record_class;
use crate::body::{Algorithm, SharedOutcome};
use crate::error::from_store;
use crate::keys::{MULTIPART_PREFIX, object_key, uploads_prefix};
use crate::put_body::{PutBody, announced_trailer, put_body};
use crate::service::SaltS3;
use crate::sse;
use crate::sse::customer::{self, customer_echo_into, customer_of};
use crate::sse::rules::{Choice, echo_into};

/// How long a part stays claimable after it was written: a part older than this is refused at completion
/// (`InvalidPart`) and gc reclaims it. Thirty days.
pub const PART_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long an upload may go without activity (a part uploaded, or its creation) before the sweep aborts it:
/// seven days, as S3's common lifecycle rule.
pub const UPLOAD_IDLE_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long the record of a completed or aborted upload is kept: a repeated CompleteMultipartUpload answers as
/// the first one did for this long. One day.
pub const FINISHED_KEPT: Duration = Duration::from_secs(24 * 3600);
/// The open uploads a bucket may hold by default ([`crate::ServerConfig::max_uploads_per_bucket`]).
pub const DEFAULT_MAX_UPLOADS_PER_BUCKET: usize = 10_000;
/// The largest part, as S3 allows: 5 GiB.
pub(crate) const MAX_PART_SIZE: u64 = 5 << 30;
/// The smallest part but the last, as S3 requires.
const MIN_PART_SIZE: u64 = 5 << 20;
/// The largest part number, as S3 allows.
const MAX_PART_NUMBER: i32 = 10_000;
/// The most parts or uploads one listing returns, as S3 does.
const MAX_LISTED: usize = 1000;
/// How far apart the clocks of two servers on one store may be (the store's own assumption, one minute).
const CLOCK_MARGIN: Duration = Duration::from_secs(60);
/// Records written, deleted or segments given up at once by a cleanup.
const CLEANUP_CONCURRENCY: usize = 16;
/// How often an UploadPart tries to touch the upload record while other parts' touches win.
const TOUCH_TRIES: usize = 8;

/// Now, on the store's clock (Unix µs).
fn now(store: &BlobStore) -> u64 {
    store.config().clock.now_micros()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// How long after a complete moved an upload to `completing` its compose may still commit: it starts composing
/// within a quarter of the intent lease of the move (or not at all), and a compose settles within
/// [`BlobStore::compose_settles_within`]; plus the clock margin, as another server may have written the record.
fn completing_window(store: &BlobStore) -> u64 {
    micros(store.config().intent_lease / 4 + store.compose_settles_within() + CLOCK_MARGIN)
}

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

/// `EntityTooLarge` for a part over [`MAX_PART_SIZE`].
fn part_too_large() -> S3Error {
    s3_error!(
        EntityTooLarge,
        "Your proposed upload exceeds the maximum allowed size: a part holds at most {MAX_PART_SIZE} bytes"
    )
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
        let part = part.trim().trim_matches('"');
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

/// CreateMultipartUpload: writes an open upload record with the object's attributes to be and its checksum
/// choice, and its listing index entry.
pub(crate) async fn handle_create_multipart_upload(
    s3: &SaltS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    object_key(&input.bucket, &input.key)?;
    let longest = upload::max_key_len(&input.bucket);
    if input.key.len() > longest {
        return Err(s3_error!(
            KeyTooLongError,
            "Your key is too long: {} bytes; the keys of multipart uploads in bucket {} are at most {longest} bytes",
            input.key.len(),
            input.bucket
        ));
    }
    let checksum = UploadChecksum::from_create(
        input.checksum_algorithm.as_ref(),
        input.checksum_type.as_ref(),
    )?;
    let customer = customer_of!(&s3.sse, input)?;
    let asked = sse::rules::request_of!(input);
    let sse = s3
        .put_choice(&input.bucket, &record, &asked, customer.as_ref())
        .await?;
    if let Some(choice) = &sse {
        // Refused now, not at the first part.
        s3.check_key(&choice.key).await?;
    }
    s3.uploads.admit(&s3.store, &input.bucket).await?;
    let mut metadata = object_metadata!(input)?;
    if let Some(choice) = &sse {
        choice.insert_into_upload(&mut metadata);
    }
    if let Some(c) = &customer {
        customer::insert_into_upload(c, &mut metadata);
    }
    let id = upload::create(
        &s3.store,
        &input.bucket,
        &input.key,
        metadata,
        input.content_type,
        checksum,
        now(&s3.store),
    )
    .await?;
    let mut output = CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        checksum_algorithm: checksum.map(UploadChecksum::algorithm_dto),
        checksum_type: checksum.map(UploadChecksum::kind_dto),
        ..CreateMultipartUploadOutput::default()
    };
    match &customer {
        Some(c) => customer_echo_into!(output, Some(c)),
        None => echo_into!(output, s3.choice_echo(sse.as_ref())),
    }
    Ok(S3Response::new(output))
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
/// part of that number (see [`record_part`]).
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
    let customer = customer_of!(&s3.sse, input)?;
    customer::check_part(&upload.manifest.metadata, customer.as_ref())?;
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
    let PutBody {
        reader,
        outcome,
        late,
        size_hint,
    } = put_body!(req, input)?;
    let reader = Capped::new(reader, MAX_PART_SIZE, outcome.clone());
    // Parts are a large object's: they run in the bulk class, whatever their own size (a class the put names
    // is the one it runs in, before the store's default and the layout's).
    let class = PriorityClass::bulk();
    let mut opts = PutOptions::new().with_priority(class.clone());
    opts.size_hint = size_hint;
    // Sealed as the upload chose (each segment under its own version).
    let sse = Choice::of_upload(&upload.manifest.metadata);
    opts.encryption_key = sse.as_ref().map(|c| c.key.clone());
    opts.customer_key = customer.as_ref().map(|c| c.key.clone());
    record_class(&req.extensions, class);
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
    let mut output = with_checksums!(
        UploadPartOutput {
            e_tag: Some(ETag::Strong(StoredPart::md5_of(&stored).to_owned())),
        },
        stored_checksums(&stored)
    );
    match &customer {
        Some(c) => customer_echo_into!(output, Some(c)),
        None => echo_into!(output, s3.choice_echo(sse.as_ref())),
    }
    Ok(S3Response::new(output))
}

/// Records `segment`, written under object key `key` for `upload` (read `open` before the segment was written),
/// as its part `number` with `metadata` (ETag, checksums); returns the part record.
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
    bucket: &str,
    upload: Upload,
    number: i32,
    key: &str,
    segment: Segment,
    metadata: std::collections::BTreeMap<String, String>,
) -> S3Result<Manifest> {
    if let Err(e) = upload::put_segment_record(store, bucket, &upload.id, &segment).await {
        // Recorded nowhere, so in no compose: safe to give up at once.
        give_up(store, key, &upload.id, &segment, None).await;
        return Err(e);
    }
    let (stored, replaced) =
        upload::put_part(store, bucket, &upload.id, number, &segment, metadata).await?;
    let mut current = upload;
    for _ in 0..TOUCH_TRIES {
        match current.set_state(store, bucket, State::Open).await? {
            Some(_) => {
                if let Some(old) = replaced.filter(|old| old.version != segment.version) {
                    let record = upload::segment_record_key(bucket, &current.id, old.version);
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

/// Gives up `segment` of object key `key` (upload `id`), then deletes its record (`record`), if any. Failures
/// are logged: the record then stays for the complete, abort or sweep, and gc reclaims the segment after its
/// lease anyway.
async fn give_up(
    store: &BlobStore,
    key: &str,
    id: &str,
    segment: &Segment,
    record: Option<bytes::Bytes>,
) {
    if let Err(e) = store.discard_segment(key, segment).await {
        tracing::warn!(upload = id, error = %e, "could not give up a segment (gc reclaims it after its lease)");
        return;
    }
    if let Some(record) = record
        && let Err(e) = store.delete(&record).await
    {
        tracing::warn!(upload = id, error = %e, "could not delete a segment record");
    }
}

/// Gives up every segment recorded for upload `id` of `bucket` (object key `key`) but those in `keep`, and
/// deletes their records and the part records, at most [`CLEANUP_CONCURRENCY`] at once. Failures are logged;
/// the sweep cleans up again before it removes the upload.
async fn clean_up(store: &BlobStore, bucket: &str, id: &str, key: &str, keep: &HashSet<VersionId>) {
    let (segments, parts) = match futures::try_join!(
        upload::segment_records(store, bucket, id),
        upload::all_parts(store, bucket, id)
    ) {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(upload = id, error = %e, "could not list an upload's segments and parts");
            return;
        }
    };
    // Every recorded segment, and the segment of every part record (an upload written before segment records
    // existed has only those).
    let mut seen: HashSet<VersionId> = segments.iter().map(|(_, s)| s.version).collect();
    let unrecorded: Vec<(Option<bytes::Bytes>, Segment)> = parts
        .iter()
        .filter(|p| seen.insert(p.segment.version))
        .map(|p| (None, p.segment.clone()))
        .collect();
    let all = segments
        .into_iter()
        .map(|(record, segment)| (Some(record), segment))
        .chain(unrecorded);
    let deleted: Vec<bytes::Bytes> = futures::stream::iter(all)
        .map(|(record, segment)| async move {
            if !keep.contains(&segment.version)
                && let Err(e) = store.discard_segment(key, &segment).await
            {
                tracing::warn!(upload = id, error = %e, "could not give up a segment (gc reclaims it after its lease)");
                return None;
            }
            record
        })
        .buffer_unordered(CLEANUP_CONCURRENCY)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    let numbers: Vec<i32> = parts.iter().map(|p| p.number).collect();
    upload::delete_records(store, bucket, id, deleted, &numbers, CLEANUP_CONCURRENCY).await;
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
    if upload.state == State::Aborting {
        // Aborted already, but its parts were not all given up (the abort stopped half-way): take that up
        // again, and answer as for an aborted upload.
        let store = s3.store.clone();
        let bucket = input.bucket;
        tokio::spawn(async move { finish_abort(&store, &bucket, &key, &upload).await });
        return Err(no_such_upload());
    }
    let aborting = abort(&s3.store, &input.bucket, &key, upload).await?;
    // The parts are given up in a task of its own, which runs to its end even if the client goes away; a
    // failure there leaves the upload `aborting`, which a later abort or the sweep takes up again.
    let store = s3.store.clone();
    let bucket = input.bucket;
    let cleanup = tokio::spawn(async move { finish_abort(&store, &bucket, &key, &aborting).await });
    if let Err(e) = cleanup.await {
        tracing::warn!(error = %e, "an abort's cleanup task failed (the sweep takes it up again)");
    }
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

/// `OperationAborted` (409): a complete of the upload may still commit.
fn complete_in_progress(wait: u64) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::OperationAborted,
        format!(
            "A CompleteMultipartUpload of this upload is in progress, or its outcome is not known yet: retry the CompleteMultipartUpload, or the abort in {} s",
            wait.div_ceil(1_000_000)
        ),
    );
    e.set_status_code(http::StatusCode::CONFLICT);
    e
}

/// Moves `upload` (of object key `key` in `bucket`) from `open` or `completing` to `aborting` and takes it out
/// of the listing, reading it again whenever another request changed it. A `completing` upload is aborted only once its compose can no
/// longer commit ([`completing_window`]); if the compose did commit, the upload is completed instead and the
/// abort is `NoSuchUpload`. Returns the `aborting` record, whose parts [`finish_abort`] gives up.
///
/// # Errors
/// `NoSuchUpload` (completed, aborted, gone), `OperationAborted` (a complete may still commit), a store error.
async fn abort(store: &BlobStore, bucket: &str, key: &str, mut upload: Upload) -> S3Result<Upload> {
    let id = upload.id.clone();
    loop {
        let moved = match upload.state {
            State::Completed | State::Aborted | State::Aborting => return Err(no_such_upload()),
            State::Open => upload.set_state(store, bucket, State::Aborting).await?,
            State::Completing => {
                let record = complete::compose_record(store, bucket, &upload).await?;
                if let Some(record) = &record
                    && complete::committed(store, key, record).await?
                {
                    complete::finish(store, bucket, key, upload, record).await?;
                    return Err(no_such_upload());
                }
                let until = upload
                    .written_micros()
                    .saturating_add(completing_window(store));
                let now = now(store);
                if now < until {
                    return Err(complete_in_progress(until - now));
                }
                upload.set_state(store, bucket, State::Aborting).await?
            }
        };
        match moved {
            Some(aborting) => {
                aborting.delete_index(store, bucket).await;
                return Ok(aborting);
            }
            None => {
                upload = Upload::read_any(store, bucket, &id)
                    .await?
                    .ok_or_else(no_such_upload)?;
            }
        }
    }
}

/// Gives up every part of an `aborting` upload and marks it `aborted` (the record stays until the sweep).
/// Failures are logged: the upload stays `aborting` for the sweep.
async fn finish_abort(store: &BlobStore, bucket: &str, key: &str, aborting: &Upload) {
    clean_up(store, bucket, &aborting.id, key, &HashSet::new()).await;
    if let Err(e) = aborting.set_state(store, bucket, State::Aborted).await {
        tracing::warn!(upload = aborting.id, error = %e, "could not mark an upload aborted (the sweep will)");
    }
}

/// ListParts: the parts after the part number marker, at most MaxParts (and 1000), with the upload's checksum
/// algorithm and type.
pub(crate) async fn handle_list_parts(
    s3: &SaltS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if !upload.state.in_progress() {
        return Err(no_such_upload());
    }
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
        checksum_algorithm: upload.checksum.map(UploadChecksum::algorithm_dto),
        checksum_type: upload.checksum.map(UploadChecksum::kind_dto),
        ..ListPartsOutput::default()
    }))
}

/// What the sweep or a bucket deletion does with one upload record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// The periodic sweep: aborts idle uploads, resolves old `completing` ones, removes finished ones once
    /// kept long enough.
    Expired,
    /// DeleteBucket: aborts every upload now (a `completing` one once its compose can no longer commit) and
    /// removes every record.
    All,
}

/// Removes the records of finished uploads kept for [`FINISHED_KEPT`], aborts uploads idle for
/// [`UPLOAD_IDLE_EXPIRY`], resolves `completing` uploads whose compose can no longer commit, and finishes aborts
/// that stopped half-way, in every bucket (also in buckets deleted meanwhile): run with the server's periodic
/// gc. Returns how many upload records it removed. A record that does not decode, or whose handling fails, is
/// logged and skipped: it never stops the sweep.
///
/// # Errors
/// A failed listing of the records.
pub(crate) async fn sweep_expired_uploads(store: &BlobStore) -> S3Result<u64> {
    let mut removed = 0;
    let mut after: Option<bytes::Bytes> = None;
    loop {
        // The next bucket with upload records: `s3/u/<bucket>/`, then jump past it.
        let first = store
            .list_stream_after(MULTIPART_PREFIX.as_bytes(), after.clone())
            .try_next()
            .await
            .map_err(from_store)?;
        let Some(entry) = first else {
            return Ok(removed);
        };
        let rest = entry.key.get(MULTIPART_PREFIX.len()..).unwrap_or_default();
        let Some(bucket) = rest
            .iter()
            .position(|b| *b == b'/')
            .and_then(|end| std::str::from_utf8(rest.get(..end)?).ok())
        else {
            // Not a record of this server's: step past it.
            after = Some(entry.key);
            continue;
        };
        removed += sweep_bucket(store, bucket, Sweep::Expired).await?;
        let mut past = uploads_prefix(bucket).into_bytes();
        past.push(0xff);
        after = Some(past.into());
    }
}

/// Runs `mode` over the upload records of `bucket`; returns how many it removed.
///
/// # Errors
/// A failed listing of the records; with [`Sweep::All`], any upload it could not remove (`OperationAborted`
/// for one whose compose may still commit, `BucketNotEmpty` for one that committed).
async fn sweep_bucket(store: &BlobStore, bucket: &str, mode: Sweep) -> S3Result<u64> {
    let records = upload::upload_records(bucket);
    let mut entries = store.list_stream(records.as_bytes());
    let mut removed = 0;
    while let Some(ListEntry { key, manifest }) = entries.try_next().await.map_err(from_store)? {
        let Some(id) = upload::parse_upload_key(bucket, &key) else {
            continue;
        };
        let mut outcome = match manifest.map_err(from_store) {
            Ok(manifest) => match Upload::decode(store, id, &key, manifest).await {
                Ok(upload) => sweep_one(store, bucket, upload, mode).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        // Another request moved the upload on meanwhile (an abort, a complete): handle it as it is now.
        for _ in 0..3 {
            match outcome {
                Err(e) if e.code() == &S3ErrorCode::NoSuchUpload => {
                    outcome = match Upload::read_any(store, bucket, id).await {
                        Ok(Some(upload)) => sweep_one(store, bucket, upload, mode).await,
                        Ok(None) => Ok(false),
                        Err(e) => Err(e),
                    };
                }
                _ => break,
            }
        }
        match outcome {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) if mode == Sweep::All => return Err(e),
            Err(e) => {
                tracing::warn!(bucket, upload = id, error = %e, "the sweep skips an upload record it could not handle");
            }
        }
    }
    Ok(removed)
}

/// Handles one upload record for the sweep or a bucket deletion; returns whether it removed it.
async fn sweep_one(store: &BlobStore, bucket: &str, upload: Upload, mode: Sweep) -> S3Result<bool> {
    let key = object_key(bucket, &upload.key)?;
    let age = now(store).saturating_sub(upload.written_micros());
    let all = mode == Sweep::All;
    let aborting = match upload.state {
        State::Open if all || age > micros(UPLOAD_IDLE_EXPIRY) => {
            match abort(store, bucket, &key, upload).await {
                Ok(aborting) => aborting,
                // Completed meanwhile, or moved on: the next sweep sees it.
                Err(e) if !all => {
                    tracing::debug!(error = %e, "an idle upload moved on while the sweep aborted it");
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        State::Completing if all || age > completing_window(store) => {
            match abort(store, bucket, &key, upload).await {
                Ok(aborting) => aborting,
                Err(e) if e.code() == &S3ErrorCode::NoSuchUpload => {
                    // Its compose had committed: the upload is completed now, and removed once kept long enough.
                    if all {
                        return Err(s3_error!(
                            BucketNotEmpty,
                            "The bucket you tried to delete is not empty: a multipart upload completed into it"
                        ));
                    }
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        State::Aborting => upload,
        State::Completed | State::Aborted if all || age > micros(FINISHED_KEPT) => {
            remove_finished(store, bucket, &key, &upload).await?;
            return Ok(true);
        }
        State::Open | State::Completing | State::Completed | State::Aborted => return Ok(false),
    };
    finish_abort(store, bucket, &key, &aborting).await;
    if all {
        remove_finished(store, bucket, &key, &aborting).await?;
        return Ok(true);
    }
    Ok(false)
}

/// Removes a finished (or `aborting`) upload: gives up what requests that raced it left behind (every segment
/// the object it composed does not own), then deletes its compose record, its index entry and its record.
async fn remove_finished(
    store: &BlobStore,
    bucket: &str,
    key: &str,
    upload: &Upload,
) -> S3Result<()> {
    let mut keep = HashSet::new();
    if upload.state == State::Completed
        && let Some(record) = complete::compose_record(store, bucket, upload).await?
    {
        keep.extend(record.segments.iter().map(|s| s.version));
    }
    clean_up(store, bucket, &upload.id, key, &keep).await;
    ComposeRecord::delete_all(store, bucket, &upload.id).await?;
    upload.delete(store, bucket).await
}

/// Aborts every multipart upload of `bucket` and removes all its upload records, for DeleteBucket (which has
/// checked that the bucket holds no object).
///
/// # Errors
/// `OperationAborted` (409) while a complete of one of its uploads may still commit; `BucketNotEmpty` if one
/// did; a store error.
pub(crate) async fn abort_all_uploads(store: &BlobStore, bucket: &str) -> S3Result<()> {
    sweep_bucket(store, bucket, Sweep::All).await?;
    Ok(())
}

/// An [`AsyncRead`] that fails once more than a limit has been read, with `EntityTooLarge` in the put's
/// outcome (so that [`crate::put_body::finish_put`] reports it).
struct Capped<R> {
    inner: R,
    left: u64,
    outcome: SharedOutcome,
}

impl<R> Capped<R> {
    fn new(inner: R, limit: u64, outcome: SharedOutcome) -> Self {
        Self {
            inner,
            left: limit,
            outcome,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Capped<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let n = (buf.filled().len() - before) as u64;
        if n > this.left {
            if let Ok(mut outcome) = this.outcome.lock() {
                outcome.get_or_insert_with(part_too_large);
            }
            return Poll::Ready(Err(io::Error::other("the part is larger than 5 GiB")));
        }
        this.left -= n;
        Poll::Ready(Ok(()))
    }
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
        assert_eq!(
            multipart_etag(["\"0cc175b9c0f1b6a831c399e269772661\"", b].into_iter()),
            etag,
            "quoted ETags as clients list them"
        );
    }

    #[tokio::test]
    async fn capped_reads_fail_past_the_limit_with_entity_too_large() {
        use tokio::io::AsyncReadExt;
        let outcome = SharedOutcome::default();
        let mut ok = Capped::new(&[1u8; 10][..], 10, outcome.clone());
        let mut buf = Vec::new();
        ok.read_to_end(&mut buf).await.expect("at the limit");
        let mut over = Capped::new(&[1u8; 11][..], 10, outcome.clone());
        assert!(over.read_to_end(&mut Vec::new()).await.is_err());
        let code = outcome
            .lock()
            .expect("lock")
            .as_ref()
            .map(|e| e.code().clone());
        assert_eq!(code, Some(S3ErrorCode::EntityTooLarge));
    }
}
