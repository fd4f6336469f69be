//! The records of a multipart upload: their keys, the upload's [`State`] (encoded and decoded here only), and
//! the reads and writes of the records. Small records under `s3/u/<bucket>/` ([`crate::keys::MULTIPART_PREFIX`]):
//!
//! | store key | holds |
//! |---|---|
//! | `u/<upload id>` | the upload: its body is the object key; its content type and metadata are the object's to be; `s3:upload-state` (see [`State`]); `s3:upload-checksum-algorithm` and `-type` when it has a checksum. The version's time is the upload's last activity |
//! | `p/<upload id>/<part number, 5 digits>` | the current part of that number: its body is the encoded segment; metadata `s3:etag`, `s3:checksum-*` |
//! | `s/<upload id>/<segment version, 32 hex>` | every segment written for the upload and not yet given up or owned by the object (so that a complete or abort finds the parts replaced meanwhile): its body is the encoded segment |
//! | `c/<upload id>/<nonce>` | what a complete composes: the segments in order, the object's ETag and checksum; the upload record names the one in force (`s3:upload-compose`), so that a complete that lost the move to `completing` never changes what the winner composes |
//! | `k/<object key>\0<upload id, 16 bytes>` | the listing index of an upload in progress (open or completing), in key then creation order: empty; the upload's checksum choice |
//!
//! An upload record whose state is missing or unknown does not decode: it is an error, never taken for an open
//! upload.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use s3s::dto::{ETag, Part};
use s3s::{S3Error, S3Result, s3_error};
use saltblob_core::{
    BlobStore, Error, ListEntry, MAX_KEY_LEN, Manifest, ManifestBody, PutCondition, PutOptions,
    Segment, VersionId,
};

use super::checksum::UploadChecksum;
use crate::attrs::{ETAG_KEY, last_modified_of, stored_checksums, with_checksums};
use crate::error::from_store;
use crate::keys::uploads_prefix;

/// Metadata key of an upload record's state.
const STATE_KEY: &str = "s3:upload-state";
/// Metadata key of the nonce of a `completing` or `completed` upload's compose record.
const COMPOSE_KEY: &str = "s3:upload-compose";
/// Prefix of the metadata keys that belong to the upload record, not to the object it composes.
const UPLOAD_KEYS: &str = "s3:upload-";
/// Content type of the records other than the upload's (which has the object's content type to be).
const RECORD_TYPE: &str = "application/x-saltblob-upload";

/// What an upload is doing, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Parts may be uploaded; it may be completed or aborted.
    Open,
    /// A complete is composing the object, or did and its outcome is not known yet: a retried complete
    /// resolves it (from the object's manifest, or by composing again); an abort waits out the commit window.
    Completing,
    /// An abort is giving up the parts (taken up again by a later abort or the sweep).
    Aborting,
    /// Completed: a repeated complete answers as the first one did, until the sweep removes the record.
    Completed,
    /// Aborted: the parts are given up; the record stays until the sweep, which cleans up once more.
    Aborted,
}

impl State {
    const ALL: [State; 5] = [
        State::Open,
        State::Completing,
        State::Aborting,
        State::Completed,
        State::Aborted,
    ];

    /// Its value under [`STATE_KEY`].
    fn name(self) -> &'static str {
        match self {
            State::Open => "open",
            State::Completing => "completing",
            State::Aborting => "aborting",
            State::Completed => "completed",
            State::Aborted => "aborted",
        }
    }

    /// The state an upload record's metadata holds.
    ///
    /// # Errors
    /// `InternalError` when the state is missing or unknown (a record this server did not write).
    fn decode(metadata: &BTreeMap<String, String>) -> S3Result<Self> {
        let value = metadata.get(STATE_KEY).map(String::as_str);
        Self::ALL
            .into_iter()
            .find(|s| Some(s.name()) == value)
            .ok_or_else(|| {
                tracing::error!(state = ?value, "an upload record has no known state");
                s3_error!(
                    InternalError,
                    "An upload record does not decode: its state is {value:?}"
                )
            })
    }

    /// Writes the state into an upload record's `metadata`.
    fn encode(self, metadata: &mut BTreeMap<String, String>) {
        metadata.insert(STATE_KEY.to_owned(), self.name().to_owned());
    }

    /// Whether the upload is in progress (listed by ListMultipartUploads).
    pub(crate) fn in_progress(self) -> bool {
        matches!(self, State::Open | State::Completing)
    }
}

/// The store key of upload `id`'s record in `bucket`.
pub(crate) fn upload_key(bucket: &str, id: &str) -> String {
    format!("{}{id}", upload_records(bucket))
}

/// The prefix of the upload records of `bucket` (then the upload id).
pub(crate) fn upload_records(bucket: &str) -> String {
    format!("{}u/", uploads_prefix(bucket))
}

/// The upload id an upload record's store key names, within the records of `bucket`.
pub(crate) fn parse_upload_key<'a>(bucket: &str, key: &'a [u8]) -> Option<&'a str> {
    let prefix = upload_records(bucket);
    let id = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    check_upload_id(id).ok().map(|()| id)
}

/// The prefix of upload `id`'s part records in `bucket`.
fn parts_prefix(bucket: &str, id: &str) -> String {
    format!("{}p/{id}/", uploads_prefix(bucket))
}

/// The store key of part `number` of upload `id` in `bucket` (5 digits, so that parts list in order).
fn part_key(bucket: &str, id: &str, number: i32) -> String {
    format!("{}{number:05}", parts_prefix(bucket, id))
}

/// The prefix of upload `id`'s segment records in `bucket`.
fn segments_prefix(bucket: &str, id: &str) -> String {
    format!("{}s/{id}/", uploads_prefix(bucket))
}

/// The store key of the record of segment `version` of upload `id` in `bucket`.
fn segment_key(bucket: &str, id: &str, version: VersionId) -> String {
    format!("{}{:032x}", segments_prefix(bucket, id), version.0)
}

/// [`segment_key`], as the bytes a listing gives.
pub(crate) fn segment_record_key(bucket: &str, id: &str, version: VersionId) -> Bytes {
    Bytes::from(segment_key(bucket, id, version))
}

/// The prefix of upload `id`'s compose records in `bucket`.
fn compose_prefix(bucket: &str, id: &str) -> String {
    format!("{}c/{id}/", uploads_prefix(bucket))
}

/// The prefix of the listing index of `bucket` (then the object key, NUL, the upload id's 16 bytes).
pub(crate) fn index_prefix(bucket: &str) -> String {
    format!("{}k/", uploads_prefix(bucket))
}

/// How many bytes an index key adds to the object key (NUL, then the id's 16 bytes).
const INDEX_SUFFIX: usize = 17;

/// The store key of the index entry of upload `id` of object `key` in `bucket`.
fn index_key(bucket: &str, key: &str, id: &str) -> S3Result<Vec<u8>> {
    let raw = u128::from_str_radix(id, 16).map_err(|_| no_such_upload())?;
    let mut k = index_prefix(bucket).into_bytes();
    k.extend_from_slice(key.as_bytes());
    k.push(0);
    k.extend_from_slice(&raw.to_be_bytes());
    Ok(k)
}

/// The object key and upload id an index key (without the bucket's index prefix) names.
pub(crate) fn parse_index_key(rest: &[u8]) -> Option<(&str, String)> {
    let split = rest.len().checked_sub(INDEX_SUFFIX)?;
    let (key, id) = rest.split_at(split);
    let (nul, id) = id.split_first()?;
    if *nul != 0 {
        return None;
    }
    let id = u128::from_be_bytes(<[u8; 16]>::try_from(id).ok()?);
    Some((std::str::from_utf8(key).ok()?, format!("{id:032x}")))
}

/// The longest object key a multipart upload may have in `bucket`: its index key must fit the store.
pub(crate) fn max_key_len(bucket: &str) -> usize {
    MAX_KEY_LEN.saturating_sub(index_prefix(bucket).len() + INDEX_SUFFIX)
}

/// When upload `id` was created (Unix ms): an id is a version id drawn then.
pub(crate) fn initiated_millis(id: &str) -> u64 {
    u128::from_str_radix(id, 16).map_or(0, |v| VersionId(v).timestamp_millis())
}

/// An upload id is 32 lowercase hex digits (a fresh time-ordered version id): anything else names no upload,
/// and never reaches a store key.
pub(crate) fn check_upload_id(id: &str) -> S3Result<()> {
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

pub(crate) fn no_such_upload() -> S3Error {
    s3_error!(
        NoSuchUpload,
        "The specified multipart upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."
    )
}

/// The bytes of a small record from its listing: inline in its manifest (records are small), else (also when
/// it is sealed) read.
async fn record_bytes(store: &BlobStore, key: &[u8], manifest: &Manifest) -> S3Result<Bytes> {
    match &manifest.body {
        ManifestBody::Inline(data) if manifest.sealing.is_none() => Ok(data.clone()),
        _ => store.get(key).await.map_err(from_store),
    }
}

/// Writes the record of a new upload of object `key` in `bucket`, with the object's `metadata` and
/// `content_type` to be and its `checksum`, then its index entry; returns its id, drawn at `now` (Unix µs).
pub(crate) async fn create(
    store: &BlobStore,
    bucket: &str,
    key: &str,
    mut metadata: BTreeMap<String, String>,
    content_type: Option<String>,
    checksum: Option<UploadChecksum>,
    now: u64,
) -> S3Result<String> {
    State::Open.encode(&mut metadata);
    let mut index = PutOptions::new().with_content_type(RECORD_TYPE);
    if let Some(c) = checksum {
        c.encode(&mut metadata);
        c.encode(&mut index.metadata);
    }
    let id = format!("{:032x}", VersionId::generate_at(now).0);
    let mut opts = PutOptions::new().with_condition(PutCondition::IfAbsent);
    opts.metadata = metadata;
    opts.content_type = content_type;
    store
        .put(upload_key(bucket, &id), key.to_owned(), &opts)
        .await
        .map_err(from_store)?;
    store
        .put(index_key(bucket, key, &id)?, Bytes::new(), &index)
        .await
        .map_err(from_store)?;
    Ok(id)
}

/// An upload record as read: its id, manifest, state, object key, checksum, and the nonce of its compose
/// record once a complete moved it to `completing`.
pub(crate) struct Upload {
    pub id: String,
    pub manifest: Manifest,
    pub state: State,
    pub key: String,
    pub checksum: Option<UploadChecksum>,
    pub compose: Option<String>,
}

impl Upload {
    /// Reads upload `id` of `bucket` and checks it is for `key`.
    ///
    /// # Errors
    /// `NoSuchUpload` when there is no such upload (or it is for another key); `InternalError` when its record
    /// does not decode.
    pub(crate) async fn read(
        store: &BlobStore,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> S3Result<Self> {
        let upload = Self::read_any(store, bucket, id)
            .await?
            .ok_or_else(no_such_upload)?;
        if upload.key != key {
            return Err(no_such_upload());
        }
        Ok(upload)
    }

    /// Reads upload `id` of `bucket`, whatever its object; `None` when there is no such record.
    ///
    /// # Errors
    /// `NoSuchUpload` for an id that is not one; `InternalError` when the record does not decode.
    pub(crate) async fn read_any(
        store: &BlobStore,
        bucket: &str,
        id: &str,
    ) -> S3Result<Option<Self>> {
        check_upload_id(id)?;
        let record = upload_key(bucket, id);
        let manifest = match store.head(&record).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(from_store(e)),
        };
        Self::decode(store, id, record.as_bytes(), manifest)
            .await
            .map(Some)
    }

    /// The upload `id` whose record at store key `record` has `manifest`.
    ///
    /// # Errors
    /// `InternalError` when the record does not decode (an object key that is not UTF-8, no known state).
    pub(crate) async fn decode(
        store: &BlobStore,
        id: &str,
        record: &[u8],
        manifest: Manifest,
    ) -> S3Result<Self> {
        let state = State::decode(&manifest.metadata)?;
        let checksum = UploadChecksum::decode(&manifest.metadata)?;
        let body = record_bytes(store, record, &manifest).await?;
        let key = String::from_utf8(body.to_vec())
            .map_err(|_| s3_error!(InternalError, "an upload record does not decode"))?;
        let compose = manifest.metadata.get(COMPOSE_KEY).cloned();
        Ok(Self {
            id: id.to_owned(),
            manifest,
            state,
            key,
            checksum,
            compose,
        })
    }

    /// The metadata of the object the upload composes: the record's, without the upload's own keys.
    pub(crate) fn object_metadata(&self) -> BTreeMap<String, String> {
        let mut metadata = self.manifest.metadata.clone();
        metadata.retain(|k, _| !k.starts_with(UPLOAD_KEYS));
        metadata
    }

    /// When the record was last written (Unix µs): the upload's last activity, or when it moved to its state.
    pub(crate) fn written_micros(&self) -> u64 {
        self.manifest.created_micros
    }

    /// Rewrites the record with `state` (the same state: records activity), if it is still the version read.
    /// Returns the record written, or `None` when it changed since it was read (another request moved or
    /// touched it: read it again).
    ///
    /// # Errors
    /// `NoSuchUpload` when the record is gone; a store error.
    pub(crate) async fn set_state(
        &self,
        store: &BlobStore,
        bucket: &str,
        state: State,
    ) -> S3Result<Option<Upload>> {
        let compose = match state {
            State::Open => None,
            _ => self.compose.clone(),
        };
        self.write(store, bucket, state, compose).await
    }

    /// [`Upload::set_state`] to `completing`, naming compose record `nonce` (see [`ComposeRecord::write`]).
    pub(crate) async fn set_completing(
        &self,
        store: &BlobStore,
        bucket: &str,
        nonce: &str,
    ) -> S3Result<Option<Upload>> {
        self.write(store, bucket, State::Completing, Some(nonce.to_owned()))
            .await
    }

    async fn write(
        &self,
        store: &BlobStore,
        bucket: &str,
        state: State,
        compose: Option<String>,
    ) -> S3Result<Option<Upload>> {
        let mut opts =
            PutOptions::new().with_condition(PutCondition::IfVersion(self.manifest.version));
        opts.metadata = self.manifest.metadata.clone();
        state.encode(&mut opts.metadata);
        match &compose {
            Some(nonce) => opts.metadata.insert(COMPOSE_KEY.to_owned(), nonce.clone()),
            None => opts.metadata.remove(COMPOSE_KEY),
        };
        opts.content_type = self.manifest.content_type.clone();
        match store
            .put(upload_key(bucket, &self.id), self.key.clone(), &opts)
            .await
        {
            Ok(manifest) => Ok(Some(Upload {
                id: self.id.clone(),
                manifest,
                state,
                key: self.key.clone(),
                checksum: self.checksum,
                compose,
            })),
            Err(Error::PreconditionFailed {
                actual: Some(_), ..
            }) => Ok(None),
            Err(Error::PreconditionFailed { actual: None, .. } | Error::AlreadyExists { .. }) => {
                Err(no_such_upload())
            }
            Err(e) => Err(from_store(e)),
        }
    }

    /// Deletes the upload's index entry (it is no longer in progress). Best effort: the sweep deletes it with
    /// the record.
    pub(crate) async fn delete_index(&self, store: &BlobStore, bucket: &str) {
        let Ok(index) = index_key(bucket, &self.key, &self.id) else {
            return;
        };
        if let Err(e) = store.delete(&index).await {
            tracing::warn!(upload = self.id, error = %e, "could not delete an upload's index entry");
        }
    }

    /// Deletes the upload's index entry, then its record: the last step of the sweep.
    ///
    /// # Errors
    /// A store error (the record then stays for the next sweep).
    pub(crate) async fn delete(&self, store: &BlobStore, bucket: &str) -> S3Result<()> {
        if let Ok(index) = index_key(bucket, &self.key, &self.id) {
            store.delete(&index).await.map_err(from_store)?;
        }
        store
            .delete(upload_key(bucket, &self.id))
            .await
            .map_err(from_store)?;
        Ok(())
    }
}

/// A part record as read.
pub(crate) struct StoredPart {
    pub number: i32,
    pub segment: Segment,
    pub manifest: Manifest,
}

impl StoredPart {
    /// The part's ETag: the hex MD5 of its bytes.
    pub(crate) fn md5_hex(&self) -> &str {
        Self::md5_of(&self.manifest)
    }

    /// The ETag of the part whose record has `manifest`.
    pub(crate) fn md5_of(manifest: &Manifest) -> &str {
        manifest.metadata.get(ETAG_KEY).map_or("", String::as_str)
    }

    /// The part as ListParts returns it.
    #[expect(
        clippy::needless_update,
        reason = "`with_checksums!` defaults the other fields, and a Part has none"
    )]
    pub(crate) fn to_part(&self) -> Part {
        with_checksums!(
            Part {
                e_tag: Some(ETag::Strong(self.md5_hex().to_owned())),
                last_modified: Some(last_modified_of(&self.manifest)),
                part_number: Some(self.number),
                size: i64::try_from(self.segment.size).ok(),
            },
            stored_checksums(&self.manifest)
        )
    }
}

/// Up to `limit` part records of upload `id` of `bucket`, in part order, after part `after` (from the first
/// part without one).
pub(crate) async fn parts(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    after: Option<i32>,
    limit: usize,
) -> S3Result<Vec<StoredPart>> {
    let prefix = parts_prefix(bucket, id);
    let start = after.map(|n| Bytes::from(part_key(bucket, id, n)));
    let mut records = store
        .list_stream_after(prefix.as_bytes(), start)
        .take(limit);
    let mut parts = Vec::new();
    while let Some(ListEntry { key, manifest }) = records.try_next().await.map_err(from_store)? {
        let manifest = manifest.map_err(from_store)?;
        let number = std::str::from_utf8(key.get(prefix.len()..).unwrap_or_default())
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| s3_error!(InternalError, "a part record key does not decode"))?;
        let bytes = record_bytes(store, &key, &manifest).await?;
        let segment = Segment::decode(&bytes).map_err(from_store)?;
        parts.push(StoredPart {
            number,
            segment,
            manifest,
        });
    }
    Ok(parts)
}

/// Every part record of upload `id` of `bucket`, in part order.
pub(crate) async fn all_parts(
    store: &BlobStore,
    bucket: &str,
    id: &str,
) -> S3Result<Vec<StoredPart>> {
    parts(store, bucket, id, None, usize::MAX).await
}

/// Writes the record of `segment`, written for upload `id` of `bucket`, before it is used: a complete or an
/// abort finds every such segment, also one whose part was replaced meanwhile.
pub(crate) async fn put_segment_record(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    segment: &Segment,
) -> S3Result<()> {
    let opts = PutOptions::new().with_content_type(RECORD_TYPE);
    store
        .put(
            segment_key(bucket, id, segment.version),
            segment.encode(),
            &opts,
        )
        .await
        .map_err(from_store)?;
    Ok(())
}

/// Every segment recorded for upload `id` of `bucket` (see [`put_segment_record`]), with its record's key.
pub(crate) async fn segment_records(
    store: &BlobStore,
    bucket: &str,
    id: &str,
) -> S3Result<Vec<(Bytes, Segment)>> {
    let prefix = segments_prefix(bucket, id);
    let mut records = store.list_stream(prefix.as_bytes());
    let mut out = Vec::new();
    while let Some(ListEntry { key, manifest }) = records.try_next().await.map_err(from_store)? {
        let manifest = manifest.map_err(from_store)?;
        let bytes = record_bytes(store, &key, &manifest).await?;
        match Segment::decode(&bytes) {
            Ok(segment) => out.push((key, segment)),
            Err(e) => tracing::warn!(upload = id, error = %e, "a segment record does not decode"),
        }
    }
    Ok(out)
}

/// Writes the record of part `number` of upload `id` of `bucket`: the encoded `segment`, with `metadata` (its
/// ETag and checksums). Returns the record written, and the segment of the record it replaced (the same part
/// uploaded again), if any.
pub(crate) async fn put_part(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    number: i32,
    segment: &Segment,
    metadata: BTreeMap<String, String>,
) -> S3Result<(Manifest, Option<Segment>)> {
    let record = part_key(bucket, id, number);
    let replaced = match store.head(&record).await {
        Ok(m) => Some(m),
        Err(Error::NotFound { .. }) => None,
        Err(e) => return Err(from_store(e)),
    };
    let replaced = match replaced {
        Some(old) => {
            let bytes = record_bytes(store, record.as_bytes(), &old).await?;
            Segment::decode(&bytes).ok()
        }
        None => None,
    };
    let mut opts = PutOptions::new().with_content_type(RECORD_TYPE);
    opts.metadata = metadata;
    let stored = store
        .put(&record, segment.encode(), &opts)
        .await
        .map_err(from_store)?;
    Ok((stored, replaced))
}

/// What a complete composes: the segments in order, with the object's ETag and checksum metadata.
pub(crate) struct ComposeRecord {
    pub segments: Vec<Segment>,
    /// `s3:etag` and, for an upload with a checksum, `s3:checksum-<algorithm>` and `s3:checksum-type`.
    pub metadata: BTreeMap<String, String>,
}

impl ComposeRecord {
    /// Writes it for upload `id` of `bucket` under a new nonce, which it returns; the complete then names the
    /// nonce in the upload record as it moves it to `completing`.
    pub(crate) async fn write(
        &self,
        store: &BlobStore,
        bucket: &str,
        id: &str,
    ) -> S3Result<String> {
        let nonce = format!("{:032x}", VersionId::generate().0);
        let mut body = Vec::new();
        body.extend_from_slice(
            &u32::try_from(self.segments.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for segment in &self.segments {
            let encoded = segment.encode();
            body.extend_from_slice(
                &u32::try_from(encoded.len())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            );
            body.extend_from_slice(&encoded);
        }
        let mut opts = PutOptions::new().with_content_type(RECORD_TYPE);
        opts.metadata = self.metadata.clone();
        store
            .put(
                format!("{}{nonce}", compose_prefix(bucket, id)),
                body,
                &opts,
            )
            .await
            .map_err(from_store)?;
        Ok(nonce)
    }

    /// The compose record `nonce` of upload `id` of `bucket`, if there is one.
    ///
    /// # Errors
    /// `InternalError` when it does not decode; a store error.
    pub(crate) async fn read(
        store: &BlobStore,
        bucket: &str,
        id: &str,
        nonce: &str,
    ) -> S3Result<Option<Self>> {
        let key = format!("{}{nonce}", compose_prefix(bucket, id));
        let manifest = match store.head(&key).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(from_store(e)),
        };
        let body = record_bytes(store, key.as_bytes(), &manifest).await?;
        let corrupt = || s3_error!(InternalError, "a compose record does not decode");
        let mut rest = &body[..];
        let mut take = |n: usize| -> S3Result<&[u8]> {
            if rest.len() < n {
                return Err(corrupt());
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let u32_at = |b: &[u8]| -> S3Result<usize> {
            let raw = <[u8; 4]>::try_from(b).map_err(|_| corrupt())?;
            usize::try_from(u32::from_le_bytes(raw)).map_err(|_| corrupt())
        };
        let count = u32_at(take(4)?)?;
        let mut segments = Vec::with_capacity(count.min(saltblob_core::manifest::MAX_SEGMENTS));
        for _ in 0..count {
            let len = u32_at(take(4)?)?;
            let encoded = Bytes::copy_from_slice(take(len)?);
            segments.push(Segment::decode(&encoded).map_err(|_| corrupt())?);
        }
        if !rest.is_empty() {
            return Err(corrupt());
        }
        Ok(Some(Self {
            segments,
            metadata: manifest.metadata,
        }))
    }

    /// Deletes every compose record of upload `id` of `bucket` (also those of completes that lost the move).
    ///
    /// # Errors
    /// A store error.
    pub(crate) async fn delete_all(store: &BlobStore, bucket: &str, id: &str) -> S3Result<()> {
        let prefix = compose_prefix(bucket, id);
        let keys: Vec<Bytes> = store
            .list_stream(prefix.as_bytes())
            .map_ok(|e| e.key)
            .try_collect()
            .await
            .map_err(from_store)?;
        for key in keys {
            store.delete(&key).await.map_err(from_store)?;
        }
        Ok(())
    }

    /// Whether `manifest` (the object's current one) is the compose of exactly these segments.
    pub(crate) fn composed(&self, manifest: &Manifest) -> bool {
        matches!(&manifest.body, ManifestBody::Segmented(s)
            if s.iter().map(|s| s.version).eq(self.segments.iter().map(|s| s.version)))
    }
}

/// Deletes the records of upload `id` of `bucket` that a finished upload no longer needs: the segment records
/// `segments` (already given up, or owned by the object) and the part records of part `numbers`, at most
/// `concurrency` at once. Failures are logged; the sweep deletes what is left.
pub(crate) async fn delete_records(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    segments: Vec<Bytes>,
    numbers: &[i32],
    concurrency: usize,
) {
    let parts = numbers
        .iter()
        .map(|n| Bytes::from(part_key(bucket, id, *n)));
    let keys: Vec<Bytes> = segments.into_iter().chain(parts).collect();
    futures::stream::iter(keys)
        .map(|key| async move {
            if let Err(e) = store.delete(&key).await {
                tracing::warn!(upload = id, error = %e, "could not delete an upload's record");
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use s3s::S3ErrorCode;
    use saltblob_core::{MemoryStore, StoreConfig};

    use super::*;

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

    #[test]
    fn index_keys_sort_by_object_key_then_upload_and_round_trip() {
        let a = format!("{:032x}", 5u128);
        let b = format!("{:032x}", 6u128);
        let k = |key: &str, id: &str| index_key("bkt", key, id).expect("index key");
        assert!(k("a", &b) < k("a/b", &a), "a key before its extensions");
        assert!(k("a", &a) < k("a", &b), "then by creation");
        assert!(k("a", &b) < k("ab", &a));
        let prefix = index_prefix("bkt").len();
        let key = k("dir/obj", &b);
        assert_eq!(
            parse_index_key(&key[prefix..]),
            Some(("dir/obj", b.clone()))
        );
        assert_eq!(parse_index_key(b"short"), None);
        assert_eq!(max_key_len("bkt"), MAX_KEY_LEN - prefix - INDEX_SUFFIX);
    }

    /// Every state decodes as it was encoded; an upload record whose state is unknown or missing is an error,
    /// not an open upload.
    #[tokio::test]
    async fn an_unknown_upload_state_is_an_error_not_open() {
        for state in State::ALL {
            let mut metadata = BTreeMap::new();
            state.encode(&mut metadata);
            assert_eq!(State::decode(&metadata).expect("decodes"), state);
        }
        let store =
            BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
        let id = create(
            &store,
            "bkt",
            "obj",
            BTreeMap::new(),
            None,
            None,
            saltblob_core::version::now_micros(),
        )
        .await
        .expect("create");
        let upload = Upload::read(&store, "bkt", "obj", &id).await.expect("read");
        assert_eq!(upload.state, State::Open);
        for metadata in [
            BTreeMap::from([(STATE_KEY.to_owned(), "closed".to_owned())]),
            BTreeMap::new(),
        ] {
            let mut opts = PutOptions::new();
            opts.metadata = metadata;
            store
                .put(upload_key("bkt", &id), "obj", &opts)
                .await
                .expect("put");
            let err = Upload::read(&store, "bkt", "obj", &id)
                .await
                .err()
                .expect("an unknown state does not decode");
            assert_eq!(err.code(), &S3ErrorCode::InternalError);
        }
    }
}
