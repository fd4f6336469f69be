//! The records of a multipart upload: their keys, the upload's [`State`] (encoded and decoded here only), and
//! the reads and writes of the records. Two kinds of small records under [`MULTIPART_PREFIX`]`<bucket>/`:
//!
//! | store key | holds |
//! |---|---|
//! | `s3/u/<bucket>/u/<upload id>` | the upload: its body is the object key; its content type and metadata are the object's to be; `s3:upload-state` says `open`, `completing` or `aborting` |
//! | `s3/u/<bucket>/p/<upload id>/<part number, 5 digits>` | one part: its body is the encoded segment; metadata `s3:etag`, `s3:checksum-*` |
//!
//! An upload record whose state is missing or unknown does not decode: it is an error, never taken for an open
//! upload.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use s3s::dto::{ETag, Part};
use s3s::{S3Error, S3Result, s3_error};
use saltblob_core::{
    BlobStore, Error, ListEntry, Manifest, ManifestBody, PutCondition, PutOptions, Segment,
    VersionId,
};

use crate::attrs::{ETAG_KEY, last_modified_of, stored_checksums, with_checksums};
use crate::error::from_store;
use crate::keys::{MULTIPART_PREFIX, uploads_prefix};

/// Metadata key of an upload record's state.
const STATE_KEY: &str = "s3:upload-state";
/// Content type of the part records (an upload record has the object's content type to be).
const RECORD_TYPE: &str = "application/x-saltblob-upload";

/// What an upload is doing, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Parts may be uploaded; it may be completed or aborted.
    Open,
    /// A complete is composing the object (moved back to `Open` if the compose fails).
    Completing,
    /// An abort is removing the parts (taken up again by a later abort or the sweep).
    Aborting,
}

impl State {
    const ALL: [State; 3] = [State::Open, State::Completing, State::Aborting];

    /// Its value under [`STATE_KEY`].
    fn name(self) -> &'static str {
        match self {
            State::Open => "open",
            State::Completing => "completing",
            State::Aborting => "aborting",
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
}

/// The store key of upload `id`'s record in `bucket`.
pub(crate) fn upload_key(bucket: &str, id: &str) -> String {
    format!("{}{id}", upload_records(bucket))
}

/// The prefix of the upload records of `bucket` (then the upload id).
pub(crate) fn upload_records(bucket: &str) -> String {
    format!("{}u/", uploads_prefix(bucket))
}

/// The bucket and upload id an upload record's store key names; `None` for any other key (a part record).
pub(crate) fn parse_upload_key(key: &[u8]) -> Option<(String, String)> {
    std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.strip_prefix(MULTIPART_PREFIX))
        .and_then(|k| k.split_once("/u/"))
        .map(|(b, i)| (b.to_owned(), i.to_owned()))
}

/// The prefix of upload `id`'s part records in `bucket`.
fn parts_prefix(bucket: &str, id: &str) -> String {
    format!("{}p/{id}/", uploads_prefix(bucket))
}

/// The store key of part `number` of upload `id` in `bucket` (5 digits, so that parts list in order).
pub(crate) fn part_key(bucket: &str, id: &str, number: i32) -> String {
    format!("{}{number:05}", parts_prefix(bucket, id))
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

/// The bytes of a small record from its listing: inline in its manifest (records are small), else read.
async fn record_bytes(store: &BlobStore, key: &[u8], manifest: &Manifest) -> S3Result<Bytes> {
    match &manifest.body {
        ManifestBody::Inline(data) => Ok(data.clone()),
        _ => store.get(key).await.map_err(from_store),
    }
}

/// Writes the record of a new upload of object `key` in `bucket`, with the object's `metadata` and
/// `content_type` to be; returns its id.
pub(crate) async fn create(
    store: &BlobStore,
    bucket: &str,
    key: &str,
    mut metadata: BTreeMap<String, String>,
    content_type: Option<String>,
) -> S3Result<String> {
    State::Open.encode(&mut metadata);
    let id = format!("{:032x}", VersionId::generate().0);
    let mut opts = PutOptions::new().with_condition(PutCondition::IfAbsent);
    opts.metadata = metadata;
    opts.content_type = content_type;
    store
        .put(upload_key(bucket, &id), key.to_owned(), &opts)
        .await
        .map_err(from_store)?;
    Ok(id)
}

/// An upload record as read: its manifest, state and object key.
pub(crate) struct Upload {
    pub manifest: Manifest,
    pub state: State,
    pub key: String,
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
        check_upload_id(id)?;
        let record = upload_key(bucket, id);
        let manifest = match store.head(&record).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => return Err(no_such_upload()),
            Err(e) => return Err(from_store(e)),
        };
        let upload = Self::decode(store, record.as_bytes(), manifest).await?;
        if upload.key != key {
            return Err(no_such_upload());
        }
        Ok(upload)
    }

    /// The upload whose record at store key `record` has `manifest`.
    ///
    /// # Errors
    /// `InternalError` when the record does not decode (an object key that is not UTF-8, no known state).
    pub(crate) async fn decode(
        store: &BlobStore,
        record: &[u8],
        manifest: Manifest,
    ) -> S3Result<Self> {
        let state = State::decode(&manifest.metadata)?;
        let body = record_bytes(store, record, &manifest).await?;
        let key = String::from_utf8(body.to_vec())
            .map_err(|_| s3_error!(InternalError, "an upload record does not decode"))?;
        Ok(Self {
            manifest,
            state,
            key,
        })
    }

    /// The metadata of the object the upload composes: the record's, without its state.
    pub(crate) fn object_metadata(&self) -> BTreeMap<String, String> {
        let mut metadata = self.manifest.metadata.clone();
        metadata.remove(STATE_KEY);
        metadata
    }

    /// Moves the upload, if open, to `state` with a put conditional on the version read, so that of two such
    /// moves (a complete and an abort) exactly one succeeds.
    ///
    /// # Errors
    /// `NoSuchUpload` when the upload is not open, or another move won.
    pub(crate) async fn move_from_open(
        &self,
        store: &BlobStore,
        bucket: &str,
        id: &str,
        state: State,
    ) -> S3Result<()> {
        if self.state != State::Open {
            return Err(no_such_upload());
        }
        self.set_state(store, bucket, id, state).await
    }

    /// Rewrites the upload's record with `state`, if it is still the version read.
    ///
    /// # Errors
    /// `NoSuchUpload` when the record changed since it was read.
    pub(crate) async fn set_state(
        &self,
        store: &BlobStore,
        bucket: &str,
        id: &str,
        state: State,
    ) -> S3Result<()> {
        let mut opts =
            PutOptions::new().with_condition(PutCondition::IfVersion(self.manifest.version));
        opts.metadata = self.manifest.metadata.clone();
        state.encode(&mut opts.metadata);
        opts.content_type = self.manifest.content_type.clone();
        match store
            .put(upload_key(bucket, id), self.key.clone(), &opts)
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::PreconditionFailed { .. } | Error::AlreadyExists { .. }) => {
                Err(no_such_upload())
            }
            Err(e) => Err(from_store(e)),
        }
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
        self.manifest
            .metadata
            .get(ETAG_KEY)
            .map_or("", String::as_str)
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
    let mut opts = PutOptions::new().with_content_type(RECORD_TYPE);
    opts.metadata = metadata;
    let stored = store
        .put(&record, segment.encode(), &opts)
        .await
        .map_err(from_store)?;
    let replaced = match replaced {
        Some(old) => {
            let bytes = record_bytes(store, record.as_bytes(), &old).await?;
            Segment::decode(&bytes).ok()
        }
        None => None,
    };
    Ok((stored, replaced))
}

/// Discards the segments of the `parts` of object `key` that `discard` picks (the others belong to a composed
/// object) and deletes the parts' records, then upload `id`'s record. Best effort for the records: a failure
/// is logged, and the records stay for an abort or the sweep to remove.
pub(crate) async fn remove(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    key: &str,
    parts: &[StoredPart],
    discard: impl Fn(&StoredPart) -> bool,
) {
    for part in parts {
        if discard(part)
            && let Err(e) = store.discard_segment(key, &part.segment).await
        {
            tracing::warn!(upload = id, part = part.number, error = %e, "could not discard a part (gc reclaims it after its lease)");
            continue;
        }
        if let Err(e) = store.delete(part_key(bucket, id, part.number)).await {
            tracing::warn!(upload = id, part = part.number, error = %e, "could not delete a part record");
        }
    }
    if let Err(e) = store.delete(upload_key(bucket, id)).await {
        tracing::warn!(upload = id, error = %e, "could not delete an upload record");
    }
}

/// Reads upload `id` of `bucket` again, for whoever holds it; `None` when it is gone or does not decode.
pub(crate) async fn reread(store: &BlobStore, bucket: &str, id: &str) -> Option<Upload> {
    let record = upload_key(bucket, id);
    let manifest = store.head(&record).await.ok()?;
    Upload::decode(store, record.as_bytes(), manifest)
        .await
        .ok()
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
        let id = create(&store, "bkt", "obj", BTreeMap::new(), None)
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
