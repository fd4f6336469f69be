//! Multipart upload: CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload,
//! ListParts and ListMultipartUploads, on the store's segments (`docs/format.md`, *Manifest, format version 2*).
//!
//! Each part is written with [`saltblob_core::BlobStore::put_segment`] under the object's own store key, as a
//! segment claimable for [`UPLOAD_LEASE`]; completing the upload composes the listed parts into the object
//! without copying a byte ([`saltblob_core::BlobStore::compose`]). The upload's state is two kinds of small
//! records under [`crate::MULTIPART_PREFIX`]`<bucket>/`:
//!
//! | store key | holds |
//! |---|---|
//! | `s3/u/<bucket>/u/<upload id>` | the upload: its body is the object key; its content type and metadata are the object's to be; `s3:upload-state` says `open`, `completing` or `aborting` |
//! | `s3/u/<bucket>/p/<upload id>/<part number, 5 digits>` | one part: its body is the encoded segment; metadata `s3:etag`, `s3:checksum-*` |
//!
//! Completing and aborting first move the upload record out of `open` with a conditional put on the version
//! they read, so that of a complete and an abort of one upload exactly one proceeds; a part uploaded while the
//! upload is being aborted sees the record gone and discards itself. A part uploaded again replaces the part
//! record and discards the segment it replaced. Segments of uploads never completed nor aborted are reclaimed
//! by gc once their lease has passed; [`SaltS3::sweep_expired_uploads`] then removes the records.

use std::time::Duration;

use bytes::Bytes;
use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CompletedPart, CreateMultipartUploadInput,
    CreateMultipartUploadOutput, ETag, ListMultipartUploadsInput, ListMultipartUploadsOutput,
    ListPartsInput, ListPartsOutput, MultipartUpload, Part, UploadPartInput, UploadPartOutput,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::manifest::hex;
use saltblob_core::{
    Error, LateMetadata, ListEntry, Manifest, ManifestBody, PriorityClass, PutCondition,
    PutOptions, Segment, VersionId,
};

use crate::auth::record_class;
use crate::body::Algorithm;
use crate::error::from_store;
use crate::keys::{MULTIPART_PREFIX, object_key};
use crate::object::{
    ETAG_KEY, StoredHeaders, announced_trailer, body_checks, checksum_of, finish_put,
    last_modified_of, stored_checksums, user_metadata, verified_body,
};
use crate::s3::SaltS3;
use s3s::crypto::{Checksum as _, Md5};

/// How long the parts of an upload stay claimable after they were written: an upload neither completed nor
/// aborted within this is abandoned, and gc reclaims its parts. Seven days, as S3's common lifecycle rule.
pub const UPLOAD_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The smallest part but the last, as S3 requires.
const MIN_PART_SIZE: u64 = 5 << 20;
/// The largest part number, as S3 allows.
const MAX_PART_NUMBER: i32 = 10_000;
/// The most parts or uploads one listing returns, as S3 does.
const MAX_LISTED: usize = 1000;
/// Metadata key of an upload record's state.
const STATE_KEY: &str = "s3:upload-state";
/// Content type of the part records (an upload record has the object's content type to be).
const RECORD_TYPE: &str = "application/x-saltblob-upload";

/// What an upload is doing, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    Completing,
    Aborting,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Open => "open",
            State::Completing => "completing",
            State::Aborting => "aborting",
        }
    }
}

/// The store key of upload `id`'s record in `bucket`.
fn upload_key(bucket: &str, id: &str) -> String {
    format!("{MULTIPART_PREFIX}{bucket}/u/{id}")
}

/// The prefix of upload `id`'s part records in `bucket`.
fn parts_prefix(bucket: &str, id: &str) -> String {
    format!("{MULTIPART_PREFIX}{bucket}/p/{id}/")
}

/// The store key of part `number` of upload `id` in `bucket` (5 digits, so that parts list in order).
fn part_key(bucket: &str, id: &str, number: i32) -> String {
    format!("{}{number:05}", parts_prefix(bucket, id))
}

/// An upload id is 32 lowercase hex digits (a fresh time-ordered version id): anything else names no upload,
/// and never reaches a store key.
fn check_upload_id(id: &str) -> S3Result<()> {
    if id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(no_such_upload())
    }
}

fn no_such_upload() -> S3Error {
    s3_error!(
        NoSuchUpload,
        "The specified multipart upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."
    )
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

/// An upload record as read: its manifest, state and object key.
struct Upload {
    manifest: Manifest,
    state: State,
    key: String,
}

/// A part record as read.
struct StoredPart {
    number: i32,
    segment: Segment,
    manifest: Manifest,
}

impl StoredPart {
    /// The part's ETag: the hex MD5 of its bytes.
    fn md5_hex(&self) -> &str {
        self.manifest
            .metadata
            .get(ETAG_KEY)
            .map_or("", String::as_str)
    }

    fn to_part(&self) -> Part {
        let sums = stored_checksums(&self.manifest);
        Part {
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            e_tag: Some(ETag::Strong(self.md5_hex().to_owned())),
            last_modified: Some(last_modified_of(&self.manifest)),
            part_number: Some(self.number),
            size: i64::try_from(self.segment.size).ok(),
        }
    }
}

/// The bytes of a small record from its listing: inline in its manifest (records are small), else read.
async fn record_bytes(s3: &SaltS3, key: &[u8], manifest: &Manifest) -> S3Result<Bytes> {
    match &manifest.body {
        ManifestBody::Inline(data) => Ok(data.clone()),
        _ => s3.store.get(key).await.map_err(from_store),
    }
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

impl SaltS3 {
    /// Reads upload `id` of `bucket` and checks it is for `key`.
    ///
    /// # Errors
    /// `NoSuchUpload` when there is no such upload (or it is for another key).
    async fn upload(&self, bucket: &str, key: &str, id: &str) -> S3Result<Upload> {
        check_upload_id(id)?;
        let record = upload_key(bucket, id);
        let manifest = match self.store.head(&record).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => return Err(no_such_upload()),
            Err(e) => return Err(from_store(e)),
        };
        let upload = self.decode_upload(record.as_bytes(), manifest).await?;
        if upload.key != key {
            return Err(no_such_upload());
        }
        Ok(upload)
    }

    async fn decode_upload(&self, record: &[u8], manifest: Manifest) -> S3Result<Upload> {
        let body = record_bytes(self, record, &manifest).await?;
        let key = String::from_utf8(body.to_vec())
            .map_err(|_| s3_error!(InternalError, "an upload record does not decode"))?;
        let state = match manifest.metadata.get(STATE_KEY).map(String::as_str) {
            Some("completing") => State::Completing,
            Some("aborting") => State::Aborting,
            _ => State::Open,
        };
        Ok(Upload {
            manifest,
            state,
            key,
        })
    }

    /// Moves an open upload to `state` with a put conditional on the version read, so that of two such moves
    /// (a complete and an abort) exactly one succeeds.
    ///
    /// # Errors
    /// `NoSuchUpload` when the upload is not open, or another move won.
    async fn move_upload(
        &self,
        bucket: &str,
        id: &str,
        upload: &Upload,
        state: State,
    ) -> S3Result<()> {
        if upload.state != State::Open {
            return Err(no_such_upload());
        }
        self.set_state(bucket, id, upload, state).await
    }

    /// Rewrites `upload`'s record with `state`, if it is still the version read.
    ///
    /// # Errors
    /// `NoSuchUpload` when the record changed since it was read.
    async fn set_state(
        &self,
        bucket: &str,
        id: &str,
        upload: &Upload,
        state: State,
    ) -> S3Result<()> {
        let mut opts =
            PutOptions::new().with_condition(PutCondition::IfVersion(upload.manifest.version));
        opts.metadata = upload.manifest.metadata.clone();
        opts.metadata
            .insert(STATE_KEY.to_owned(), state.name().to_owned());
        opts.content_type = upload.manifest.content_type.clone();
        match self
            .store
            .put(upload_key(bucket, id), upload.key.clone(), &opts)
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::PreconditionFailed { .. } | Error::AlreadyExists { .. }) => {
                Err(no_such_upload())
            }
            Err(e) => Err(from_store(e)),
        }
    }

    /// Up to `limit` part records of upload `id`, after part `after`.
    async fn parts(
        &self,
        bucket: &str,
        id: &str,
        after: Option<i32>,
        limit: usize,
    ) -> S3Result<Vec<StoredPart>> {
        let prefix = parts_prefix(bucket, id);
        let start = after.map(|n| part_key(bucket, id, n));
        let page = self
            .store
            .list_page(
                prefix.as_bytes(),
                start.as_deref().map(str::as_bytes),
                limit,
            )
            .await
            .map_err(from_store)?;
        let mut parts = Vec::with_capacity(page.len());
        for ListEntry { key, manifest } in page {
            let manifest = manifest.map_err(from_store)?;
            let number = std::str::from_utf8(key.get(prefix.len()..).unwrap_or_default())
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| s3_error!(InternalError, "a part record key does not decode"))?;
            let bytes = record_bytes(self, &key, &manifest).await?;
            let segment = Segment::decode(&bytes).map_err(from_store)?;
            parts.push(StoredPart {
                number,
                segment,
                manifest,
            });
        }
        Ok(parts)
    }

    /// Every part record of upload `id`, in part order.
    async fn all_parts(&self, bucket: &str, id: &str) -> S3Result<Vec<StoredPart>> {
        let mut all = Vec::new();
        loop {
            let after = all.last().map(|p: &StoredPart| p.number);
            let page = self.parts(bucket, id, after, MAX_LISTED).await?;
            let done = page.len() < MAX_LISTED;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// Discards the segments of the `parts` of `key` that `discard` picks (the others belong to a composed
    /// object) and deletes the parts' records, then the upload record (best effort
    /// for the records: a failure is logged, and the records stay for an abort or the sweep to remove).
    async fn remove_upload(
        &self,
        bucket: &str,
        id: &str,
        key: &str,
        parts: &[StoredPart],
        discard: impl Fn(&StoredPart) -> bool,
    ) {
        for part in parts {
            if discard(part)
                && let Err(e) = self.store.discard_segment(key, &part.segment).await
            {
                tracing::warn!(upload = id, part = part.number, error = %e, "could not discard a part (gc reclaims it after its lease)");
                continue;
            }
            if let Err(e) = self.store.delete(part_key(bucket, id, part.number)).await {
                tracing::warn!(upload = id, part = part.number, error = %e, "could not delete a part record");
            }
        }
        if let Err(e) = self.store.delete(upload_key(bucket, id)).await {
            tracing::warn!(upload = id, error = %e, "could not delete an upload record");
        }
    }

    pub(crate) async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        object_key(&input.bucket, &input.key)?;
        let mut metadata = user_metadata(input.metadata)?;
        StoredHeaders {
            cache_control: input.cache_control,
            content_disposition: input.content_disposition,
            content_encoding: input.content_encoding,
            content_language: input.content_language,
        }
        .insert_into(&mut metadata);
        metadata.insert(STATE_KEY.to_owned(), State::Open.name().to_owned());
        let id = format!("{:032x}", VersionId::generate().0);
        let mut opts = PutOptions::new().with_condition(PutCondition::IfAbsent);
        opts.metadata = metadata;
        opts.content_type = input.content_type;
        self.store
            .put(upload_key(&input.bucket, &id), input.key.clone(), &opts)
            .await
            .map_err(from_store)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            checksum_algorithm: input.checksum_algorithm,
            ..CreateMultipartUploadOutput::default()
        }))
    }

    pub(crate) async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let trailer = announced_trailer(&req.headers);
        let input = req.input;
        check_part_number(input.part_number)?;
        self.require_bucket(&input.bucket).await?;
        let upload = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        if upload.state != State::Open {
            return Err(no_such_upload());
        }
        let key = object_key(&input.bucket, &input.key)?;
        let late = LateMetadata::new();
        let (reader, outcome) = verified_body(
            input.body,
            body_checks!(input, trailer.zip(req.trailing_headers)),
            late.clone(),
        )?;
        // Parts are a large object's: they run in the bulk class, whatever their own size.
        let mut opts = PutOptions::new().with_priority(PriorityClass::bulk());
        if let Some(len) = input.content_length.and_then(|l| u64::try_from(l).ok()) {
            opts = opts.with_size_hint(len);
        }
        record_class(&req.extensions, "bulk");
        let written = self
            .store
            .put_segment(&key, reader, &opts, UPLOAD_LEASE)
            .await;
        let segment = finish_put(written, &outcome)?;

        // The part record: the segment, its ETag and checksums.
        let record = part_key(&input.bucket, &input.upload_id, input.part_number);
        let replaced = match self.store.head(&record).await {
            Ok(m) => Some(m),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(from_store(e)),
        };
        let mut record_opts = PutOptions::new().with_content_type(RECORD_TYPE);
        record_opts.metadata = late.entries();
        let etag = record_opts
            .metadata
            .get(ETAG_KEY)
            .cloned()
            .unwrap_or_default();
        let stored = self
            .store
            .put(&record, segment.encode(), &record_opts)
            .await
            .map_err(from_store)?;
        // The part it replaced (the same part number uploaded again) is given up.
        if let Some(old) = replaced {
            let bytes = record_bytes(self, record.as_bytes(), &old).await?;
            if let Ok(old) = Segment::decode(&bytes)
                && old.version != segment.version
                && let Err(e) = self.store.discard_segment(&key, &old).await
            {
                tracing::warn!(error = %e, "could not discard a replaced part (gc reclaims it after its lease)");
            }
        }
        // An abort or complete that moved the upload on meanwhile did not see this part: give it up.
        let still = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await;
        if !matches!(&still, Ok(u) if u.state == State::Open) {
            let _ = self.store.discard_segment(&key, &segment).await;
            let _ = self.store.delete(&record).await;
            return Err(no_such_upload());
        }
        let sums = stored_checksums(&stored);
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(etag)),
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            ..UploadPartOutput::default()
        }))
    }

    pub(crate) async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let key = object_key(&input.bucket, &input.key)?;
        let upload = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
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
        let stored = self.all_parts(&input.bucket, &input.upload_id).await?;
        let chosen = choose_parts(&listed, &stored)?;
        let condition = self
            .put_condition(&key, input.if_match.as_ref(), input.if_none_match.as_ref())
            .await?;

        self.move_upload(&input.bucket, &input.upload_id, &upload, State::Completing)
            .await?;
        let etag = multipart_etag(chosen.iter().map(|p| p.md5_hex()));
        let mut opts = PutOptions::new().with_condition(condition);
        opts.metadata = upload.manifest.metadata.clone();
        opts.metadata.remove(STATE_KEY);
        opts.metadata.insert(ETAG_KEY.to_owned(), etag.clone());
        opts.content_type = upload.manifest.content_type.clone();
        let segments: Vec<Segment> = chosen.iter().map(|p| p.segment.clone()).collect();
        record_class(&req.extensions, "bulk");
        let composed = self.store.compose(&key, &segments, &opts).await;
        let manifest = match composed {
            Ok(m) => m,
            Err(e) => {
                // Nothing was committed: the upload is open again, for a retry or an abort.
                let reopened = self
                    .store
                    .head(upload_key(&input.bucket, &input.upload_id))
                    .await;
                if let Ok(m) = reopened
                    && let Ok(current) = self
                        .decode_upload(upload_key(&input.bucket, &input.upload_id).as_bytes(), m)
                        .await
                {
                    let _ = self
                        .move_back(&input.bucket, &input.upload_id, &current)
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
        // The parts left out of the object are given up; the others now belong to it.
        // (Part numbers are ascending: `choose_parts` checked.)
        let chosen_numbers: Vec<i32> = chosen.iter().map(|p| p.number).collect();
        self.remove_upload(&input.bucket, &input.upload_id, &key, &stored, |p| {
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

    /// Moves a `completing` upload whose compose failed back to `open`.
    async fn move_back(&self, bucket: &str, id: &str, upload: &Upload) -> S3Result<()> {
        if upload.state != State::Completing {
            return Ok(());
        }
        self.set_state(bucket, id, upload, State::Open).await
    }

    pub(crate) async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let key = object_key(&input.bucket, &input.key)?;
        let upload = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        self.abort(&input.bucket, &input.upload_id, &key, &upload)
            .await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    /// Aborts `upload`: moves it to `aborting` (an abort that died half-way is taken up again), discards its
    /// parts' segments and removes its records.
    async fn abort(&self, bucket: &str, id: &str, key: &str, upload: &Upload) -> S3Result<()> {
        if upload.state != State::Aborting {
            self.move_upload(bucket, id, upload, State::Aborting)
                .await?;
        }
        let parts = self.all_parts(bucket, id).await?;
        self.remove_upload(bucket, id, key, &parts, |_| true).await;
        Ok(())
    }

    pub(crate) async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        self.upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        let max = input
            .max_parts
            .and_then(|m| usize::try_from(m).ok())
            .unwrap_or(MAX_LISTED)
            .min(MAX_LISTED);
        let after = input.part_number_marker.filter(|m| *m > 0);
        let mut parts = self
            .parts(&input.bucket, &input.upload_id, after, max + 1)
            .await?;
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

    pub(crate) async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let max = input
            .max_uploads
            .and_then(|m| usize::try_from(m).ok())
            .unwrap_or(MAX_LISTED)
            .min(MAX_LISTED);
        let prefix = input.prefix.clone().unwrap_or_default();
        // Uploads list in the order they were created (their ids are time-ordered), not by key.
        let records = format!("{MULTIPART_PREFIX}{}/u/", input.bucket);
        let mut after = input
            .upload_id_marker
            .as_ref()
            .filter(|m| check_upload_id(m).is_ok())
            .map(|m| upload_key(&input.bucket, m));
        let mut uploads = Vec::new();
        let mut truncated = false;
        'pages: loop {
            let page = self
                .store
                .list_page(
                    records.as_bytes(),
                    after.as_deref().map(str::as_bytes),
                    MAX_LISTED,
                )
                .await
                .map_err(from_store)?;
            let done = page.len() < MAX_LISTED;
            for ListEntry { key, manifest } in page {
                after = Some(String::from_utf8_lossy(&key).into_owned());
                let Ok(manifest) = manifest else { continue };
                let id = String::from_utf8_lossy(key.get(records.len()..).unwrap_or_default())
                    .into_owned();
                let upload = self.decode_upload(&key, manifest).await?;
                if upload.state != State::Open || !upload.key.starts_with(&prefix) {
                    continue;
                }
                if uploads.len() == max {
                    truncated = true;
                    break 'pages;
                }
                uploads.push(MultipartUpload {
                    initiated: Some(last_modified_of(&upload.manifest)),
                    key: Some(upload.key),
                    upload_id: Some(id),
                    ..MultipartUpload::default()
                });
            }
            if done {
                break;
            }
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
    pub(crate) async fn sweep_expired_uploads(&self) -> S3Result<u64> {
        let now = saltblob_core::version::now_micros();
        let lease = u64::try_from(UPLOAD_LEASE.as_micros()).unwrap_or(u64::MAX);
        let mut after: Option<Bytes> = None;
        let mut removed = 0;
        loop {
            let page = self
                .store
                .list_page(MULTIPART_PREFIX.as_bytes(), after.as_deref(), MAX_LISTED)
                .await
                .map_err(from_store)?;
            let done = page.len() < MAX_LISTED;
            for ListEntry { key, manifest } in page {
                after = Some(key.clone());
                let Ok(manifest) = manifest else { continue };
                // Only upload records: s3/u/<bucket>/u/<id>.
                let Some((bucket, id)) = std::str::from_utf8(&key)
                    .ok()
                    .and_then(|k| k.strip_prefix(MULTIPART_PREFIX))
                    .and_then(|k| k.split_once("/u/"))
                    .map(|(b, i)| (b.to_owned(), i.to_owned()))
                else {
                    continue;
                };
                if manifest.created_micros.saturating_add(lease) > now {
                    continue;
                }
                let upload = self.decode_upload(&key, manifest).await?;
                let object = object_key(&bucket, &upload.key)?;
                let moved = match upload.state {
                    State::Open => {
                        self.move_upload(&bucket, &id, &upload, State::Aborting)
                            .await
                    }
                    _ => Ok(()),
                };
                if moved.is_ok() {
                    let parts = self.all_parts(&bucket, &id).await?;
                    // A completing upload whose compose committed owns its parts: discarding them then is
                    // harmless (the reclaimer leaves chunks the current version owns).
                    self.remove_upload(&bucket, &id, &object, &parts, |_| true)
                        .await;
                    removed += 1;
                }
            }
            if done {
                return Ok(removed);
            }
        }
    }
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

    #[test]
    fn upload_ids_are_checked_before_they_reach_a_key() {
        assert!(check_upload_id(&format!("{:032x}", VersionId::generate().0)).is_ok());
        for bad in ["", "../../o/b/k", &"A".repeat(32), &"0".repeat(33)] {
            assert_eq!(
                check_upload_id(bad).expect_err(bad).code(),
                &S3ErrorCode::NoSuchUpload
            );
        }
    }
}
