//! A delete: of whatever version `key` holds ([`delete`]), or only of a named one ([`delete_version`]), through
//! the commit primitive (`commit.rs`), which queues the deleted version for reclaim before the delete is written.

use bytes::Bytes;

use crate::base::error::{Error, Result};
use crate::base::version::VersionId;
use crate::state::Inner;
use crate::store::commit::{self, Change, Changed, Expect, Fences};

/// Deletes the manifest of a validated `key`; returns the version it held. A manifest that does not decode is
/// deleted, its chunks left to `fsck --repair`; see [`crate::store::BlobStore::delete`].
pub(crate) async fn delete(inner: &Inner, key: &Bytes) -> Result<Option<VersionId>> {
    match commit::change_manifest(inner, key, Change::Delete, Expect::Any, Fences::none()).await? {
        Changed::Written { replaced } => Ok(replaced.map(|m| m.version)),
        Changed::Refused { .. } => Err(Error::internal(
            "delete",
            "a delete that expects nothing was refused",
        )),
    }
}

/// Deletes the manifest of a validated `key` only if it holds `version`, unexpired; see
/// [`crate::store::BlobStore::delete_version`].
///
/// # Errors
/// [`Error::NotFound`] when the key holds no blob (or an expired one); [`Error::PreconditionFailed`] when it
/// holds another version (`actual: None` when its manifest does not decode).
pub(crate) async fn delete_version(inner: &Inner, key: &Bytes, version: VersionId) -> Result<()> {
    let expect = Expect::Version(version);
    match commit::change_manifest(inner, key, Change::Delete, expect, Fences::none()).await? {
        Changed::Written { .. } => Ok(()),
        Changed::Refused { current } => Err(version_error(inner, key, version, current.as_ref())),
    }
}

/// Deletes `key`'s expired manifest, stored as `raw`, if it is still the current record; returns whether it was.
/// A put that replaced it since queued it itself.
pub(crate) async fn delete_expired(inner: &Inner, key: &Bytes, raw: Bytes) -> Result<bool> {
    let expect = Expect::Record(raw);
    match commit::change_manifest(inner, key, Change::Delete, expect, Fences::none()).await? {
        Changed::Written { .. } => Ok(true),
        Changed::Refused { .. } => Ok(false),
    }
}

/// The error of a delete of `version` that found `current` instead.
pub(crate) fn version_error(
    inner: &Inner,
    key: &Bytes,
    version: VersionId,
    current: Option<&Bytes>,
) -> Error {
    let not_found = || Error::NotFound {
        key: key.as_ref().into(),
    };
    let Some(raw) = current else {
        return not_found();
    };
    match inner.decode_manifest(key, raw) {
        Ok(m) if m.is_expired(inner.now_micros()) => not_found(),
        // Another version, or (the same version under other bytes) not the record the delete was checked on.
        current => Error::PreconditionFailed {
            key: key.as_ref().into(),
            expected: version,
            actual: current.ok().map(|m| m.version),
        },
    }
}
