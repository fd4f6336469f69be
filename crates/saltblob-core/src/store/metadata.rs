//! Changing a version's user metadata in place ([`BlobStore::update_metadata`]): the manifest alone is rewritten,
//! with a compare-and-set on the bytes read, under the same version; no chunk is touched or queued for reclaim.

use std::collections::BTreeMap;

use crate::backend::Namespace;
use crate::base::error::{Error, Result};
use crate::base::version::VersionId;
use crate::format::manifest::Manifest;
use crate::ledger::kept::{self, KeptRecord};
use crate::store::BlobStore;
use crate::store::commit::{self, Change, Changed, Expect, Fences};
use crate::store::delete::version_error;

use super::key::validate_key;

/// Tries of [`BlobStore::update_version_metadata`] when other changes of the version win.
const VERSION_CHANGE_ATTEMPTS: usize = 5;

impl BlobStore {
    /// Applies `change` to the user metadata of version `version` of `key`, in place: the version keeps its id,
    /// creation time, bytes and content type, and only its metadata changes (checked as a put's: at most 8 KiB).
    /// A reader sees the metadata before or after the change, never a mix. It loses to any write of `key` that
    /// commits between its read and its write, and then writes nothing. Returns the version as changed.
    ///
    /// # Errors
    /// [`Error::NotFound`] when `key` holds nothing (or an expired version); [`Error::PreconditionFailed`] when
    /// its current version is another one, or was changed while this ran (nothing written);
    /// [`Error::InvalidArgument`] when the metadata would be too large (nothing written); [`Error::Corrupt`] for
    /// a manifest that does not decode; [`Error::Backend`].
    pub async fn update_metadata(
        &self,
        key: impl AsRef<[u8]>,
        version: VersionId,
        change: impl FnOnce(&mut BTreeMap<String, String>),
    ) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        let inner = &self.inner;
        let current = inner.backend.get_record(Namespace::Manifest, &key).await?;
        let Some(bytes) = current else {
            return Err(Error::NotFound {
                key: key.as_ref().into(),
            });
        };
        let manifest = inner.decode_manifest(&key, &bytes)?;
        if manifest.is_expired(inner.now_micros()) || manifest.version != version {
            return Err(version_error(inner, &key, version, Some(&bytes)));
        }
        let mut updated = manifest;
        change(&mut updated.metadata);
        updated.validate_attributes()?;
        // The same version: the commit queues nothing for reclaim.
        let change = Change::Put(&updated);
        let expect = Expect::Record(bytes);
        match commit::change_manifest(inner, &key, change, expect, Fences::none()).await? {
            Changed::Written { .. } => Ok(updated),
            Changed::Refused { current } => {
                Err(version_error(inner, &key, version, current.as_ref()))
            }
        }
    }

    /// As [`BlobStore::update_metadata`], for version `version` of `key` whether it is current or kept
    /// ([`crate::state::config::PutOptions::keep_replaced`]): a kept version's record is rewritten with a
    /// compare-and-set on its bytes (the version keeps its id, bytes and creation time). A change that races
    /// another change of the same version is tried again with the version as that one left it; a kept version
    /// made current meanwhile is changed as current ([`BlobStore::remove_version`] carries a change it meets into
    /// the manifest it promoted).
    ///
    /// # Errors
    /// [`Error::VersionNotFound`] when the key neither holds nor keeps that version; [`Error::InvalidArgument`]
    /// when the metadata would be too large; [`Error::PreconditionFailed`] when other changes won every try;
    /// [`Error::Corrupt`], [`Error::Backend`].
    pub async fn update_version_metadata(
        &self,
        key: impl AsRef<[u8]>,
        version: VersionId,
        change: impl Fn(&mut BTreeMap<String, String>),
    ) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        let inner = &self.inner;
        for _ in 0..VERSION_CHANGE_ATTEMPTS {
            match self.update_metadata(&key, version, &change).await {
                Ok(changed) => return Ok(changed),
                // Not current (another version is, or none), or changed meanwhile: read on.
                Err(Error::PreconditionFailed { .. } | Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            let Some(record) = kept::read(inner, &key, version).await? else {
                match inner.read_manifest(&key).await {
                    // Made current since (or changed in place): change it as current.
                    Ok(Some(m)) if m.version == version => continue,
                    Ok(_) => {
                        return Err(Error::VersionNotFound {
                            key: key.as_ref().into(),
                            version,
                        });
                    }
                    Err(e) => return Err(e),
                }
            };
            let kept_record = KeptRecord {
                version,
                record: record.clone(),
            };
            let mut updated = kept::decode(inner, &key, &kept_record)?;
            change(&mut updated.metadata);
            updated.validate_attributes()?;
            if kept::replace(inner, &key, version, record, updated.encode())
                .await?
                .is_ok()
            {
                return Ok(updated);
            }
        }
        Err(Error::PreconditionFailed {
            key: key.as_ref().into(),
            expected: version,
            actual: None,
        })
    }
}
