//! Changing a version's user metadata in place ([`BlobStore::update_metadata`]): the manifest alone is rewritten,
//! with a compare-and-set on the bytes read, under the same version; no chunk is touched or queued for reclaim.

use std::collections::BTreeMap;

use crate::backend::Namespace;
use crate::base::error::{Error, Result};
use crate::base::version::VersionId;
use crate::format::manifest::Manifest;
use crate::store::BlobStore;
use crate::store::commit::{self, Change, Changed, Expect, Fences};
use crate::store::delete::version_error;

use super::key::validate_key;

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
}
