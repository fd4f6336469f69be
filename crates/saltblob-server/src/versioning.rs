//! Bucket versioning on the store's kept versions ([`saltblob_core::PutOptions::keep_replaced`]).
//!
//! - A bucket's state is `s3:versioning` in its record's metadata (`Enabled` or `Suspended`; absent: never
//!   enabled), changed in place by PutBucketVersioning, as its ACL is.
//! - In an **Enabled** bucket every write (PutObject, CopyObject, CompleteMultipartUpload) keeps the version it
//!   replaces and is marked `s3:versioned`: its version id is the store's (32 hex digits). A version written
//!   otherwise (before versioning, or while suspended) is the **`null` version**.
//! - In a **Suspended** bucket a write is a `null` version: it keeps a current version that has an id of its own,
//!   and replaces the `null` one (a kept `null` version is removed after the write).
//! - A DeleteObject without a version id in a versioned bucket writes a **delete marker**: an empty version
//!   marked `s3:delete-marker`, kept like any other. A GET or HEAD of a key whose current version is a delete
//!   marker is `404 NoSuchKey` with `x-amz-delete-marker: true`; of a marker named by id, `405`; listings leave
//!   markers out, ListObjectVersions shows them.
//! - A DeleteObject naming a version removes it ([`saltblob_core::BlobStore::remove_version`]): removing the
//!   current one makes the newest kept one current (removing a delete marker brings the object back).

use std::collections::BTreeMap;

use http::HeaderValue;
use s3s::dto::BucketVersioningStatus;
use s3s::{S3Error, S3Result, s3_error};
use saltblob_core::{
    BlobStore, Error, KeyVersion, Manifest, PutCondition, PutOptions, RemovedVersion, VersionId,
};

pub(crate) use crate::attrs::DELETE_MARKER_KEY;
use crate::attrs::{NULL_VERSION, last_modified_of};
use crate::error::{NO_SUCH_VERSION, from_store};

/// Metadata key of a bucket record: the bucket's versioning state.
pub(crate) const STATE_KEY: &str = "s3:versioning";
/// Metadata key of an object version written while versioning was enabled: its version id is its own.
pub(crate) const VERSIONED_KEY: &str = "s3:versioned";

/// A bucket's versioning state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Never enabled: objects have one version, `null`, and nothing is kept.
    Unversioned,
    Enabled,
    Suspended,
}

impl State {
    /// The state of the bucket whose record is `record`.
    pub(crate) fn of(record: &Manifest) -> Self {
        match record.metadata.get(STATE_KEY).map(String::as_str) {
            Some(BucketVersioningStatus::ENABLED) => State::Enabled,
            Some(BucketVersioningStatus::SUSPENDED) => State::Suspended,
            _ => State::Unversioned,
        }
    }

    /// Whether writes keep what they replace (the bucket has or had versioning).
    pub(crate) fn keeps(self) -> bool {
        self != State::Unversioned
    }

    /// Sets `opts` for a write in a bucket of this state: it keeps what it replaces (but a `null` version, which
    /// [`State::after_write`] removes), and is marked versioned in an Enabled bucket.
    pub(crate) fn prepare(self, opts: &mut PutOptions) {
        opts.keep_replaced = self.keeps();
        if self == State::Enabled {
            opts.metadata
                .insert(VERSIONED_KEY.to_owned(), "1".to_owned());
        }
    }

    /// After a write of `written` to `store_key` in a bucket of this state: in a Suspended bucket, the `null`
    /// version it replaced goes (a write there is the `null` version). Returns the version id the response
    /// names: only in an Enabled bucket, as S3 answers.
    pub(crate) async fn after_write(
        self,
        store: &BlobStore,
        store_key: &str,
        written: &Manifest,
    ) -> S3Result<Option<String>> {
        if self == State::Suspended {
            remove_kept_null(store, store_key, written.version)
                .await
                .map_err(from_store)?;
        }
        Ok((self == State::Enabled).then(|| version_id_of(written)))
    }
}

/// Removes the `null` versions of `store_key` other than `current` (kept by a write in a Suspended bucket).
async fn remove_kept_null(
    store: &BlobStore,
    store_key: &str,
    current: VersionId,
) -> saltblob_core::Result<()> {
    for v in store.versions(store_key).await? {
        let null = v.manifest.as_ref().is_ok_and(|m| !is_versioned(m));
        if v.version != current && null {
            match store.remove_version(store_key, v.version).await {
                Ok(_) | Err(Error::VersionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Writes a delete marker as the current version of `store_key` in a bucket in `state` (not
/// [`State::Unversioned`]) under `condition`, keeping what it replaces (in a Suspended bucket the marker is the
/// `null` version: an earlier `null` one goes). DeleteObject's marker, and the lifecycle's expiry of an object of a
/// versioned bucket.
pub(crate) async fn put_marker(
    store: &BlobStore,
    state: State,
    store_key: &str,
    condition: PutCondition,
) -> saltblob_core::Result<Manifest> {
    let mut opts = PutOptions::new().with_condition(condition);
    opts.metadata = BTreeMap::from([(DELETE_MARKER_KEY.to_owned(), "1".to_owned())]);
    state.prepare(&mut opts);
    let marker = store.put(store_key, bytes::Bytes::new(), &opts).await?;
    if state == State::Suspended {
        remove_kept_null(store, store_key, marker.version).await?;
    }
    Ok(marker)
}

/// Whether version `m` has a version id of its own (written while versioning was enabled).
fn is_versioned(m: &Manifest) -> bool {
    m.metadata.contains_key(VERSIONED_KEY)
}

/// Whether metadata key `k` is versioning's own, never copied from a source version.
pub(crate) fn is_own_key(k: &str) -> bool {
    k == VERSIONED_KEY || k == DELETE_MARKER_KEY
}

/// Whether version `m` is a delete marker.
pub(crate) fn is_delete_marker(m: &Manifest) -> bool {
    m.metadata.contains_key(DELETE_MARKER_KEY)
}

/// The version id a response about version `m` names: in a bucket that has or had versioning (`versioned`), or
/// when `m` has an id of its own.
pub(crate) fn shown_version_id(versioned: bool, m: &Manifest) -> Option<String> {
    (versioned || is_versioned(m)).then(|| version_id_of(m))
}

/// The S3 version id of version `m`: its store version id, or `null`.
pub(crate) fn version_id_of(m: &Manifest) -> String {
    if is_versioned(m) {
        m.version.to_string()
    } else {
        NULL_VERSION.to_owned()
    }
}

/// The `versionId` of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Null,
    Id(VersionId),
}

impl Named {
    /// Parses a request's `versionId`.
    ///
    /// # Errors
    /// `InvalidArgument` (400) for one that is neither `null` nor a version id of ours, as S3 answers.
    pub(crate) fn parse(version_id: &str) -> S3Result<Self> {
        if version_id == NULL_VERSION {
            return Ok(Named::Null);
        }
        version_id
            .parse()
            .map(Named::Id)
            .map_err(|_| s3_error!(InvalidArgument, "Invalid version id specified"))
    }

    /// The `versionId` a request gives, parsed; `None` when it gives none.
    pub(crate) fn of(version_id: Option<&str>) -> S3Result<Option<Self>> {
        version_id.map(Self::parse).transpose()
    }

    /// The store version this names for `store_key`, `None` when the key has no such version (a `null` version
    /// of a key that has none).
    pub(crate) async fn resolve(
        self,
        store: &BlobStore,
        store_key: &str,
    ) -> S3Result<Option<VersionId>> {
        match self {
            Named::Id(v) => Ok(Some(v)),
            Named::Null => Ok(find_null(store, store_key).await?.map(|v| v.version)),
        }
    }
}

/// The `null` version of `store_key`, current or kept.
async fn find_null(store: &BlobStore, store_key: &str) -> S3Result<Option<KeyVersion>> {
    let versions = store.versions(store_key).await.map_err(from_store)?;
    Ok(versions
        .into_iter()
        .find(|v| v.manifest.as_ref().is_ok_and(|m| !is_versioned(m))))
}

/// The version a GET or HEAD names (`None`: the current one), resolved for `store_key`.
///
/// # Errors
/// As [`Named::parse`]; `NoSuchVersion` (404) for a `null` version the key does not have.
pub(crate) async fn read_version(
    store: &BlobStore,
    store_key: &str,
    version_id: Option<&str>,
) -> S3Result<Option<VersionId>> {
    read_named(store, store_key, Named::of(version_id)?).await
}

/// The version `named` (parsed already; `None`: the current one), resolved for `store_key`.
///
/// # Errors
/// `NoSuchVersion` (404) for a `null` version the key does not have; the store's.
pub(crate) async fn read_named(
    store: &BlobStore,
    store_key: &str,
    named: Option<Named>,
) -> S3Result<Option<VersionId>> {
    match named {
        None => Ok(None),
        Some(named) => match named.resolve(store, store_key).await? {
            Some(v) => Ok(Some(v)),
            None => Err(no_such_version()),
        },
    }
}

/// `NoSuchVersion` (404).
fn no_such_version() -> S3Error {
    S3Error::with_message(s3s::S3ErrorCode::NoSuchVersion, NO_SUCH_VERSION)
}

/// Refuses a GET or HEAD of delete marker `m`: `404 NoSuchKey` when it is the current version read by default,
/// `405 MethodNotAllowed` when the request named it; both with `x-amz-delete-marker: true` and its version id.
pub(crate) fn refuse_marker(m: &Manifest, named: bool) -> S3Result<()> {
    if !is_delete_marker(m) {
        return Ok(());
    }
    let mut error = if named {
        let mut e = s3_error!(
            MethodNotAllowed,
            "The specified method is not allowed against this resource."
        );
        e.set_status_code(http::StatusCode::METHOD_NOT_ALLOWED);
        e
    } else {
        s3_error!(NoSuchKey, "The specified key does not exist.")
    };
    let mut headers = http::HeaderMap::new();
    headers.insert("x-amz-delete-marker", HeaderValue::from_static("true"));
    if let Ok(v) = HeaderValue::from_str(&version_id_of(m)) {
        headers.insert("x-amz-version-id", v);
    }
    if let Ok(t) = HeaderValue::from_str(&last_modified_http(m)) {
        headers.insert(http::header::LAST_MODIFIED, t);
    }
    error.set_headers(headers);
    Err(error)
}

/// Error `e` of a GET or HEAD of a key's current version, with `x-amz-delete-marker: false` when it is
/// `NoSuchKey`: the key holds nothing, not a delete marker (as RGW answers; SDKs read the header when present).
pub(crate) fn not_a_marker(mut e: S3Error) -> S3Error {
    if *e.code() == s3s::S3ErrorCode::NoSuchKey {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-amz-delete-marker", HeaderValue::from_static("false"));
        e.set_headers(headers);
    }
    e
}

/// Last-Modified of `m` as an HTTP date.
fn last_modified_http(m: &Manifest) -> String {
    let t = last_modified_of(m);
    let mut out = Vec::new();
    match t.format(s3s::dto::TimestampFormat::HttpDate, &mut out) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// What a DeleteObject did in a bucket that has (or had) versioning.
#[derive(Debug, Default)]
pub(crate) struct Deleted {
    /// The version id of the marker written, or of the version removed.
    pub(crate) version_id: Option<String>,
    /// Whether a marker was written, or the version removed was one.
    pub(crate) delete_marker: bool,
}

/// DeleteObject of `store_key` in a bucket in `state` (not [`State::Unversioned`] unless a version is named):
/// the named version removed, or a delete marker written.
///
/// # Errors
/// As [`Named::parse`]; the store's.
pub(crate) async fn delete(
    store: &BlobStore,
    state: State,
    store_key: &str,
    version_id: Option<&str>,
) -> S3Result<Deleted> {
    let Some(named) = Named::of(version_id)? else {
        return write_marker(store, state, store_key).await;
    };
    let version = match named.resolve(store, store_key).await? {
        Some(v) => v,
        // A version the key does not have: nothing to delete, as S3 answers.
        None => {
            return Ok(Deleted {
                version_id: version_id.map(str::to_owned),
                delete_marker: false,
            });
        }
    };
    let marker = match store.head_version(store_key, version).await {
        Ok(m) => is_delete_marker(&m),
        Err(Error::VersionNotFound { .. }) => {
            return Ok(Deleted {
                version_id: version_id.map(str::to_owned),
                delete_marker: false,
            });
        }
        Err(e) => return Err(from_store(e)),
    };
    match store.remove_version(store_key, version).await {
        Ok(
            RemovedVersion::Kept | RemovedVersion::Current | RemovedVersion::CurrentPromoting(_),
        )
        | Err(Error::VersionNotFound { .. }) => Ok(Deleted {
            version_id: version_id.map(str::to_owned),
            delete_marker: marker,
        }),
        Err(e) => Err(from_store(e)),
    }
}

/// Writes a delete marker as the current version of `store_key` ([`put_marker`]).
async fn write_marker(store: &BlobStore, state: State, store_key: &str) -> S3Result<Deleted> {
    let marker = put_marker(store, state, store_key, PutCondition::None)
        .await
        .map_err(from_store)?;
    Ok(Deleted {
        version_id: state.keeps().then(|| version_id_of(&marker)),
        delete_marker: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_parse_as_ours_or_null_only() {
        assert_eq!(Named::parse("null").expect("null"), Named::Null);
        let v = VersionId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(Named::parse(&v.to_string()).expect("ours"), Named::Id(v));
        for bad in ["", "abc", "NULL", "0123456789abcdef0011223344556677ff"] {
            assert!(Named::parse(bad).is_err(), "{bad}");
        }
    }
}
