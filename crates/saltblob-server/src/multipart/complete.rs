//! CompleteMultipartUpload. The work runs in a task of its own, which the request awaits: a client that goes
//! away does not cancel it half-way, so the upload reaches `completed`, or `open` again, or (when the store
//! cannot say whether the commit happened) stays `completing` until a retry or the sweep resolves it.
//!
//! 1. The listed parts are checked (ascending, each with the ETag it was uploaded with, checksums, sizes) and
//!    what the object will be is written as a compose record under a fresh nonce.
//! 2. The upload record moves from `open` to `completing`, naming that nonce (a conditional put: a part
//!    uploaded meanwhile, or another complete or an abort, makes it fail, and the complete starts over).
//! 3. The segments are composed into the object (no byte copied), at most a quarter of the intent lease after
//!    the move, so that the compose has settled [`super::completing_window`] after it.
//! 4. `completed`, then the reply; the parts left out are given up after the reply, in the background.
//!
//! A repeated complete of a `completed` upload answers as the first one did. A complete of a `completing`
//! upload resolves it: if the object's manifest is the compose of the recorded segments, the upload completed;
//! otherwise it composes the recorded segments again (if it lists the same parts), which is safe however many
//! composes of them run.

use std::collections::HashSet;
use std::time::Duration;

use s3s::dto::{ChecksumType, CompleteMultipartUploadInput, CompleteMultipartUploadOutput, ETag};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::encryption::{CUSTOMER, CustomerKey};
use saltblob_core::manifest::SEALED_METADATA_KEY;
use saltblob_core::{BlobStore, Error, Manifest, PutCondition, PutOptions};

use saltblob_core::units::micros;

use super::checksum::UploadChecksum;
use super::choose::Listed;
use super::cleanup::clean_up;
use super::compose::{ComposeRecord, PARTS_ETAG_KEY};
use super::parts::{self, StoredPart};
use super::upload::{State, Upload, check_upload_id, no_such_upload};
use super::{multipart_etag, now};
use crate::attrs::{CHECKSUM_KEY, CHECKSUM_TYPE_KEY, ETAG_KEY, with_opened};
use crate::auth::record_class;
use crate::body::Algorithm;
use crate::error::from_store;
use crate::keys::object_key;
use crate::rereads::{MARK_COMPLETED, UPLOAD_RECORD};
use crate::service::SaltS3;
use crate::versioning::State as Versioning;

/// How long the request waits for the complete before it answers 200 at once and sends the result when it is
/// there (S3 does the same: whitespace keeps the connection alive, and an error may then come with the 200).
const KEEP_ALIVE_AFTER: Duration = Duration::from_secs(5);

/// What a CompleteMultipartUpload asks for, owned by the task that runs it.
struct Request {
    bucket: String,
    key: String,
    /// The object's store key.
    object: String,
    id: String,
    listed: Listed,
    condition: PutCondition,
    /// The SSE-C key the request gives: an SSE-C upload with a checksum needs it, to open its parts' checksums
    /// and seal the object's (as AWS asks for it then).
    customer: Option<CustomerKey>,
    /// The bucket's versioning state.
    versioning: Versioning,
}

/// What a complete answers.
struct Done {
    etag: String,
    checksum: Option<(UploadChecksum, String)>,
    /// The version id of the object this complete committed, in a bucket that has versioning.
    version_id: Option<String>,
}

/// CompleteMultipartUpload: see the module doc.
pub(crate) async fn handle_complete_multipart_upload(
    s3: &SaltS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let input = req.input;
    let versioning = Versioning::of(&s3.require_bucket(&input.bucket).await?);
    let object = object_key(&input.bucket, &input.key)?;
    check_upload_id(&input.upload_id)?;
    let listed = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if listed.is_empty()
        || listed
            .iter()
            .any(|p| p.part_number.is_none() || p.e_tag.is_none())
    {
        return Err(s3_error!(
            MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema: every Part needs a PartNumber and an ETag, and at least one Part is needed"
        ));
    }
    let sent: Vec<(Algorithm, String)> = [
        (Algorithm::Crc32, input.checksum_crc32),
        (Algorithm::Crc32c, input.checksum_crc32c),
        (Algorithm::Crc64Nvme, input.checksum_crc64nvme),
        (Algorithm::Sha1, input.checksum_sha1),
        (Algorithm::Sha256, input.checksum_sha256),
    ]
    .into_iter()
    .filter_map(|(a, v)| Some((a, v?)))
    .collect();
    if sent.len() > 1 {
        return Err(s3_error!(
            InvalidRequest,
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed."
        ));
    }
    let condition = s3
        .put_condition(
            &object,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
        )
        .await?;
    let customer = s3.sse.reader(&req.headers, false)?.map(|c| c.key);
    let request = Request {
        customer,
        bucket: input.bucket,
        key: input.key,
        object,
        id: input.upload_id,
        listed: Listed {
            parts: listed,
            sent: sent.into_iter().next(),
            sent_type: input.checksum_type,
            size: input.mpu_object_size,
        },
        condition,
        versioning,
    };
    // What the object's encryption will be, as the upload chose it (known before the compose: the response's
    // headers may be sent while it runs).
    let upload = Upload::read_any(&s3.store, &request.bucket, &request.id)
        .await
        .ok()
        .flatten();
    let echo = s3
        .sse
        .completed(upload.as_ref().map(|u| &u.manifest.metadata));
    let store = s3.store.clone();
    let extensions = req.extensions.clone();
    // Runs to its end even if this request is dropped (the client went away).
    let mut task = tokio::spawn(async move {
        let done = complete(&store, &request).await;
        if let Ok((_, Some(manifest))) = &done {
            record_class(&extensions, store.class_of(manifest));
        }
        done.map(|(done, _)| output(&request, done))
    });
    let joined = |r: Result<S3Result<_>, tokio::task::JoinError>| {
        r.unwrap_or_else(|e| {
            tracing::error!(error = %e, "a CompleteMultipartUpload task failed");
            Err(s3_error!(
                InternalError,
                "We encountered an internal error. Please try again."
            ))
        })
    };
    let out = match tokio::time::timeout(KEEP_ALIVE_AFTER, &mut task).await {
        Ok(r) => joined(r)?,
        Err(_) => CompleteMultipartUploadOutput {
            future: Some(Box::pin(async move { joined(task.await) })),
            ..CompleteMultipartUploadOutput::default()
        },
    };
    Ok(echo.respond(out))
}

/// The response to `req` for `done`.
fn output(req: &Request, done: Done) -> CompleteMultipartUploadOutput {
    let mut out = CompleteMultipartUploadOutput {
        bucket: Some(req.bucket.clone()),
        key: Some(req.key.clone()),
        e_tag: Some(ETag::Strong(done.etag)),
        location: Some(format!("/{}/{}", req.bucket, req.key)),
        version_id: done.version_id,
        ..CompleteMultipartUploadOutput::default()
    };
    if let Some((c, value)) = done.checksum {
        let value = Some(value);
        match c.algorithm {
            Algorithm::Crc32 => out.checksum_crc32 = value,
            Algorithm::Crc32c => out.checksum_crc32c = value,
            Algorithm::Crc64Nvme => out.checksum_crc64nvme = value,
            Algorithm::Sha1 => out.checksum_sha1 = value,
            Algorithm::Sha256 => out.checksum_sha256 = value,
        }
        out.checksum_type = Some(c.kind_dto());
    }
    out
}

/// Runs the complete; returns what to answer, and the manifest it committed (`None` when an earlier complete
/// had).
async fn complete(store: &BlobStore, req: &Request) -> S3Result<(Done, Option<Manifest>)> {
    // The upload record may change under it (parts still being uploaded): start over.
    let mut tries = UPLOAD_RECORD.start();
    while tries.next_attempt().await {
        let upload = Upload::read(store, &req.bucket, &req.key, &req.id).await?;
        match upload.state {
            State::Completed => {
                let record = compose_record(store, &req.bucket, &upload)
                    .await?
                    .ok_or_else(no_such_upload)?;
                return Ok((done_of(upload.checksum, &record), None));
            }
            State::Aborting | State::Aborted => return Err(no_such_upload()),
            State::Completing => match resolve(store, req, upload).await? {
                Some(done) => return Ok(done),
                // Open again (the complete that moved it failed): start over.
                None => continue,
            },
            State::Open => {}
        }
        let parts = parts::all_parts(store, &req.bucket, &req.id).await?;
        let parts = open_parts(store, req, &upload, parts).await?;
        let record = req.listed.plan(&upload, &parts)?;
        let record = seal_checksum(store, req, record).await?;
        let nonce = record.write(store, &req.bucket, &req.id).await?;
        if let Some(completing) = upload.set_completing(store, &req.bucket, &nonce).await? {
            return compose(store, req, completing, &record, true).await;
        }
        // The record changed (a part was uploaded, or another complete or an abort moved it): start over.
    }
    Err(s3_error!(
        SlowDown,
        "The upload kept changing while it was being completed (parts still being uploaded?); please retry"
    ))
}

/// `parts` with the checksums of the sealed ones opened (their records keep them sealed), when the complete
/// needs them: the upload has a checksum, or the request lists part checksums to check.
///
/// # Errors
/// As a read of the part without its key (an SSE-C upload's complete that gives no key, or another).
async fn open_parts(
    store: &BlobStore,
    req: &Request,
    upload: &Upload,
    mut parts: Vec<StoredPart>,
) -> S3Result<Vec<StoredPart>> {
    let listed_sums = req.listed.parts.iter().any(|p| {
        p.checksum_crc32.is_some()
            || p.checksum_crc32c.is_some()
            || p.checksum_crc64nvme.is_some()
            || p.checksum_sha1.is_some()
            || p.checksum_sha256.is_some()
    });
    if upload.checksum.is_none() && !listed_sums {
        return Ok(parts);
    }
    for part in &mut parts {
        let (Some(sealing), Some(value)) = (
            &part.segment.sealing,
            part.manifest.metadata.get(SEALED_METADATA_KEY),
        ) else {
            continue;
        };
        let opened = store
            .open_metadata(
                &req.object,
                part.segment.version,
                sealing,
                req.customer.as_ref(),
                value,
            )
            .await
            .map_err(|e| sealed_failed(e, req))?;
        part.manifest = with_opened(&part.manifest, opened);
    }
    Ok(parts)
}

/// `record` with the object's checksum sealed, for a sealed upload: under the keys of its first sealed segment,
/// as the object's sealed metadata ([`saltblob_core::Manifest::sealed_part`]); kept opened in the record for the
/// response.
///
/// # Errors
/// As [`open_parts`].
async fn seal_checksum(
    store: &BlobStore,
    req: &Request,
    mut record: ComposeRecord,
) -> S3Result<ComposeRecord> {
    let Some((version, sealing)) = record
        .segments
        .iter()
        .find_map(|s| Some((s.version, s.sealing.clone()?)))
    else {
        return Ok(record);
    };
    let sums: Vec<String> = record
        .metadata
        .keys()
        .filter(|k| k.starts_with(CHECKSUM_KEY) && *k != CHECKSUM_TYPE_KEY)
        .cloned()
        .collect();
    if sums.is_empty() {
        return Ok(record);
    }
    for k in sums {
        if let Some(v) = record.metadata.remove(&k) {
            record.opened.insert(k, v);
        }
    }
    let sealed = store
        .seal_metadata(
            &req.object,
            version,
            &sealing,
            req.customer.as_ref(),
            &record.opened,
        )
        .await
        .map_err(|e| sealed_failed(e, req))?;
    record
        .metadata
        .insert(SEALED_METADATA_KEY.to_owned(), sealed);
    Ok(record)
}

/// The S3 error of a complete whose sealed parts' keys did not open: a customer key missing or another is the
/// client's (as a read's).
fn sealed_failed(e: Error, req: &Request) -> S3Error {
    match (&e, &req.customer) {
        (Error::KeyUnavailable { provider, .. }, None) if *provider == CUSTOMER => s3_error!(
            InvalidRequest,
            "The multipart upload initiate requested encryption with a checksum. The complete request must include the appropriate encryption parameters."
        ),
        (Error::KeyUnavailable { provider, .. }, Some(_)) if *provider == CUSTOMER => s3_error!(
            AccessDenied,
            "The SSE-C key provided does not match the key the upload was started with."
        ),
        _ => from_store(e),
    }
}

/// The compose record a `completing` or `completed` upload names.
///
/// # Errors
/// A store error, or one that does not decode.
pub(super) async fn compose_record(
    store: &BlobStore,
    bucket: &str,
    upload: &Upload,
) -> S3Result<Option<ComposeRecord>> {
    match &upload.compose {
        Some(nonce) => ComposeRecord::read(store, bucket, &upload.id, nonce).await,
        None => Ok(None),
    }
}

/// Whether the object at store key `object` is now the compose of `record`'s segments.
///
/// # Errors
/// A store error.
pub(super) async fn committed(
    store: &BlobStore,
    object: &str,
    record: &ComposeRecord,
) -> S3Result<bool> {
    match store.head(object).await {
        Ok(m) => Ok(record.composed(&m)),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) if e.is_corruption() => Ok(false),
        Err(e) => Err(from_store(e)),
    }
}

/// A complete of a `completing` upload: completed if the object is the compose of the recorded segments, else
/// composes them again (the request must list the same parts). `None` when the upload is `open` again.
async fn resolve(
    store: &BlobStore,
    req: &Request,
    mut upload: Upload,
) -> S3Result<Option<(Done, Option<Manifest>)>> {
    let record = compose_record(store, &req.bucket, &upload)
        .await?
        .ok_or_else(|| s3_error!(InternalError, "a completing upload has no compose record"))?;
    let mut tries = UPLOAD_RECORD.start();
    while tries.next_attempt().await {
        if committed(store, &req.object, &record).await? {
            finish(store, &req.bucket, &req.object, upload, &record).await?;
            return Ok(Some((done_of(upload_checksum(&record), &record), None)));
        }
        let etag = multipart_etag(
            req.listed
                .parts
                .iter()
                .filter_map(|p| p.e_tag.as_ref().map(ETag::value)),
        );
        let recorded = record
            .metadata
            .get(PARTS_ETAG_KEY)
            .or_else(|| record.metadata.get(ETAG_KEY));
        if Some(&etag) != recorded {
            let mut e = S3Error::with_message(
                S3ErrorCode::OperationAborted,
                "A CompleteMultipartUpload of this upload with other parts is in progress: retry it with the same parts",
            );
            e.set_status_code(http::StatusCode::CONFLICT);
            return Err(e);
        }
        // Composing again, from now: the move is written again, so that an abort waits out the window anew.
        match upload
            .set_state(store, &req.bucket, State::Completing)
            .await?
        {
            Some(rearmed) => return compose(store, req, rearmed, &record, false).await.map(Some),
            None => {
                upload = Upload::read(store, &req.bucket, &req.key, &req.id).await?;
                match upload.state {
                    State::Completing => {}
                    State::Completed => return Ok(Some((done_of(upload.checksum, &record), None))),
                    State::Open => return Ok(None),
                    State::Aborting | State::Aborted => return Err(no_such_upload()),
                }
            }
        }
    }
    Err(kept_changing())
}

/// The upload checksum a compose record's metadata was made with.
fn upload_checksum(record: &ComposeRecord) -> Option<UploadChecksum> {
    let kind = record.metadata.get(CHECKSUM_TYPE_KEY)?;
    let (algorithm, _) = Algorithm::ALL.into_iter().find_map(|a| {
        Some((
            a,
            record
                .metadata
                .get(&format!("{CHECKSUM_KEY}{}", a.name()))?,
        ))
    })?;
    UploadChecksum::from_create(
        Some(&algorithm.name().to_ascii_uppercase().into()),
        Some(&ChecksumType::from(kind.clone())),
    )
    .ok()
    .flatten()
}

/// What a complete of the upload whose compose record is `record` answers.
fn done_of(checksum: Option<UploadChecksum>, record: &ComposeRecord) -> Done {
    let checksum = checksum.or_else(|| upload_checksum(record)).and_then(|c| {
        let name = format!("{CHECKSUM_KEY}{}", c.algorithm.name());
        let value = record
            .metadata
            .get(&name)
            .or_else(|| record.opened.get(&name))?;
        Some((c, value.clone()))
    });
    Done {
        etag: record.metadata.get(ETAG_KEY).cloned().unwrap_or_default(),
        checksum,
        version_id: None,
    }
}

/// Composes `record`'s segments into the object for the `completing` upload, then finishes it. On an error, it
/// finishes the upload all the same if the object is the compose of these segments (this compose's commit
/// landed, or another's did: a complete that raced it); otherwise, on an error that says nothing was committed,
/// the complete that moved the upload to `completing` (`reopen`) moves it back to `open` — unless another
/// complete has composed again since (the record changed), whose compose may still commit. A complete that
/// composes again ([`resolve`]) never reopens.
async fn compose(
    store: &BlobStore,
    req: &Request,
    completing: Upload,
    record: &ComposeRecord,
    reopen: bool,
) -> S3Result<(Done, Option<Manifest>)> {
    // Only while an abort (or the sweep) that reads this record waits for the compose to settle.
    let slack = micros(store.config().intent_lease / 4);
    if now(store).saturating_sub(completing.written_micros()) > slack {
        return Err(s3_error!(
            SlowDown,
            "The upload could not be completed in time (the store is slow); please retry"
        ));
    }
    let mut opts = PutOptions::new().with_condition(req.condition);
    opts.metadata = completing.object_metadata();
    opts.metadata.extend(record.metadata.clone());
    opts.content_type = completing.manifest.content_type.clone();
    req.versioning.prepare(&mut opts);
    match store.compose(&req.object, &record.segments, &opts).await {
        Ok(manifest) => {
            let checksum = completing.checksum;
            finish(store, &req.bucket, &req.object, completing, record).await?;
            let version_id = req
                .versioning
                .after_write(store, &req.object, &manifest)
                .await?;
            tracing::debug!(
                size = manifest.size,
                segments = record.segments.len(),
                "multipart upload completed"
            );
            let done = Done {
                version_id,
                ..done_of(checksum, record)
            };
            Ok((done, Some(manifest)))
        }
        Err(e) => {
            if committed(store, &req.object, record).await.unwrap_or(false) {
                let checksum = completing.checksum;
                finish(store, &req.bucket, &req.object, completing, record).await?;
                return Ok((done_of(checksum, record), None));
            }
            if reopen && not_committed(&e) {
                // Nothing was committed: the upload is open again, for a retry or an abort.
                if let Err(back) = completing.set_state(store, &req.bucket, State::Open).await {
                    tracing::warn!(upload = req.id, error = %back, "could not reopen an upload whose complete failed");
                }
            }
            // Otherwise the commit may or may not have happened: the upload stays `completing`, and a retried
            // complete, an abort after the window or the sweep resolves it.
            Err(match e {
                Error::SegmentGone { .. } => s3_error!(
                    InvalidPart,
                    "One or more of the specified parts could not be found: a part expired or was given up"
                ),
                e => from_store(e),
            })
        }
    }
}

/// Whether a compose that failed with `e` certainly committed nothing.
fn not_committed(e: &Error) -> bool {
    matches!(
        e,
        Error::PreconditionFailed { .. }
            | Error::AlreadyExists { .. }
            | Error::SegmentGone { .. }
            | Error::InvalidArgument { .. }
            | Error::InvalidKey { .. }
            | Error::TooLarge { .. }
            | Error::IntentLost { .. }
    )
}

/// Marks a `completing` upload whose compose committed `completed`, takes it out of the listing, and gives up
/// the parts the object does not own after the reply (in a task of its own).
///
/// # Errors
/// A store error writing the record.
pub(super) async fn finish(
    store: &BlobStore,
    bucket: &str,
    object: &str,
    upload: Upload,
    record: &ComposeRecord,
) -> S3Result<()> {
    let upload = mark_completed(store, bucket, upload).await?;
    upload.delete_index(store, bucket).await;
    let keep: HashSet<_> = record.segments.iter().map(|s| s.version).collect();
    let (store, bucket, object, id) = (
        store.clone(),
        bucket.to_owned(),
        object.to_owned(),
        upload.id.clone(),
    );
    tokio::spawn(async move { clean_up(&store, &bucket, &id, &object, &keep).await });
    Ok(())
}

/// Moves `upload`, whose compose committed, from `completing` to `completed`; when another request wrote the
/// record meanwhile (a complete that composes again), reads it again and tries after a pause, as
/// [`MARK_COMPLETED`] says. Left `completing`, a retried complete or the sweep finishes it.
///
/// # Errors
/// `NoSuchUpload` when it was aborted or is gone; `SlowDown` when it kept changing; a store error.
async fn mark_completed(store: &BlobStore, bucket: &str, mut upload: Upload) -> S3Result<Upload> {
    let mut tries = MARK_COMPLETED.start();
    while tries.next_attempt().await {
        match upload.state {
            State::Completed => return Ok(upload),
            State::Completing => {}
            _ => return Err(no_such_upload()),
        }
        if let Some(completed) = upload.set_state(store, bucket, State::Completed).await? {
            return Ok(completed);
        }
        upload = Upload::read_any(store, bucket, &upload.id)
            .await?
            .ok_or_else(no_such_upload)?;
    }
    match upload.state {
        State::Completed => Ok(upload),
        _ => Err(kept_changing()),
    }
}

/// `SlowDown`: the upload record kept changing while a complete ran.
fn kept_changing() -> S3Error {
    s3_error!(
        SlowDown,
        "The upload kept changing while it was being completed; please retry"
    )
}
