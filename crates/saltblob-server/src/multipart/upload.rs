//! The records of a multipart upload, and the upload's own: its keys, its [`State`] (encoded and decoded here
//! only), its reads and writes. Small records under `s3/u/<bucket>/` ([`crate::keys::MULTIPART_PREFIX`]); the
//! part and segment records are `parts.rs`'s, the compose records `compose.rs`'s:
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
use s3s::{S3Error, S3Result, s3_error};
use saltblob_core::{
    BlobStore, Error, MAX_KEY_LEN, Manifest, ManifestBody, PutCondition, PutOptions, VersionId,
};

use super::checksum::UploadChecksum;
use crate::error::from_store;
use crate::keys::{upload_index_prefix, uploads_prefix};

/// Metadata key of an upload record's state.
const STATE_KEY: &str = "s3:upload-state";
/// Metadata key of the nonce of a `completing` or `completed` upload's compose record.
const COMPOSE_KEY: &str = "s3:upload-compose";
/// Prefix of the metadata keys that belong to the upload record, not to the object it composes.
const UPLOAD_KEYS: &str = "s3:upload-";
/// Content type of the records other than the upload's (which has the object's content type to be).
pub(super) const RECORD_TYPE: &str = "application/x-saltblob-upload";

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

/// How many bytes an index key adds to the object key (NUL, then the id's 16 bytes).
const INDEX_SUFFIX: usize = 17;

/// The store key of the index entry of upload `id` of object `key` in `bucket`.
fn index_key(bucket: &str, key: &str, id: &str) -> S3Result<Vec<u8>> {
    let raw = u128::from_str_radix(id, 16).map_err(|_| no_such_upload())?;
    let mut k = upload_index_prefix(bucket).into_bytes();
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
    MAX_KEY_LEN.saturating_sub(upload_index_prefix(bucket).len() + INDEX_SUFFIX)
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
pub(super) async fn record_bytes(
    store: &BlobStore,
    key: &[u8],
    manifest: &Manifest,
) -> S3Result<Bytes> {
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
        let prefix = upload_index_prefix("bkt").len();
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
