//! The versions of a key, current and kept ([`BlobStore::versions`]), and the removal of one
//! ([`BlobStore::remove_version`]) through the commit primitive (`commit.rs`). Kept versions are those a put with
//! [`crate::state::config::PutOptions::keep_replaced`] replaced (`ledger/kept.rs`); a read names one with
//! [`crate::state::config::GetOptions::version`].

use bytes::Bytes;

use crate::backend::{BlobRef, Namespace};
use crate::base::error::{Error, Result};
use crate::base::version::VersionId;
use crate::format::manifest::Manifest;
use crate::ledger::kept::{self, KeptRecord};
use crate::ledger::reclaim;
use crate::state::Inner;
use crate::store::commit::{self, Change, Changed, Expect, Fences};
use crate::store::{BlobStore, validate_key};

/// Tries of a removal whose commit found the key changed since it read it.
const REMOVE_ATTEMPTS: u32 = 5;

/// One version of a key, from [`BlobStore::versions`].
#[derive(Debug)]
pub struct KeyVersion {
    /// The version's id.
    pub version: VersionId,
    /// Whether it is the key's current version; the others are kept.
    pub current: bool,
    /// Its manifest, or [`Error::Corrupt`] when its kept record does not decode.
    pub manifest: Result<Manifest>,
}

/// What [`BlobStore::remove_version`] removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovedVersion {
    /// A kept version.
    Kept,
    /// The current version, and the key holds nothing now.
    Current,
    /// The current version, and the newest kept version (this one) is current in its place.
    CurrentPromoting(VersionId),
}

impl BlobStore {
    /// Every version of `key`, newest first: the current one (unless it has expired), then the kept ones by
    /// descending version id. Empty when the key holds and keeps nothing.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::Corrupt`] (the current manifest does not decode; a kept one that does
    /// not is listed with its error), [`Error::Backend`].
    pub async fn versions(&self, key: impl AsRef<[u8]>) -> Result<Vec<KeyVersion>> {
        let key = validate_key(key.as_ref())?;
        let inner = &self.inner;
        let current = inner.read_manifest(&key).await?;
        let kept = kept::list(inner, &key)
            .await?
            .without(current.as_ref().map(|m| m.version));
        let mut out = Vec::with_capacity(kept.len() + 1);
        if let Some(m) = current {
            out.push(KeyVersion {
                version: m.version,
                current: true,
                manifest: Ok(m),
            });
        }
        out.extend(kept.iter().rev().map(|k| KeyVersion {
            version: k.version,
            current: false,
            manifest: kept::decode(inner, &key, k),
        }));
        Ok(out)
    }

    /// Reads the manifest of version `version` of `key`, current or kept.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::VersionNotFound`] (neither current nor kept), [`Error::Corrupt`] (its
    /// record does not decode), [`Error::Backend`].
    pub async fn head_version(
        &self,
        key: impl AsRef<[u8]>,
        version: VersionId,
    ) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        kept::manifest_of(&self.inner, &key, Some(version)).await
    }

    /// Removes version `version` of `key`. A kept version is removed, and its chunks are reclaimed after the
    /// grace period. The current version is replaced by the newest kept version that decodes (which is then
    /// no longer kept: S3's delete of a version by id), or, when none is kept, deleted; its chunks are
    /// reclaimed after the grace period, as a delete's. The replacement is a compare-and-set on the manifest
    /// read (a lightweight transaction on the cluster backend): a put committed in between is never undone.
    ///
    /// Removals of one key's versions may run at once: a removal that made a kept version current while another
    /// removed that kept version (or the other way round) removes it again as the current one, so that no
    /// removed version comes back. Returns what was removed first.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::VersionNotFound`] (neither current nor kept), [`Error::Corrupt`] (the
    /// kept version does not decode: nothing is removed), [`Error::Backend`]; [`Error::PreconditionFailed`]
    /// when other commits kept changing the key for every try.
    pub async fn remove_version(
        &self,
        key: impl AsRef<[u8]>,
        version: VersionId,
    ) -> Result<RemovedVersion> {
        let key = validate_key(key.as_ref())?;
        let (removed, mut again) = self.remove_once(&key, version).await?;
        for _ in 0..REMOVE_ATTEMPTS {
            let Some(v) = again else { break };
            again = match self.remove_once(&key, v).await {
                Ok((_, next)) => next,
                // Removed by the other removal meanwhile.
                Err(Error::VersionNotFound { .. }) => None,
                Err(e) => return Err(e),
            };
        }
        Ok(removed)
    }

    /// One removal of version `version` of a validated `key` (see [`BlobStore::remove_version`]); with it, a
    /// version that a concurrent removal removed but that this one finds current, to be removed again.
    async fn remove_once(
        &self,
        key: &Bytes,
        version: VersionId,
    ) -> Result<(RemovedVersion, Option<VersionId>)> {
        let inner = &self.inner;
        for _ in 0..REMOVE_ATTEMPTS {
            let raw = inner.backend.get_record(Namespace::Manifest, key).await?;
            let current = raw
                .as_ref()
                .and_then(|r| inner.decode_manifest(key, r).ok());
            let (Some(raw), Some(current)) = (raw, current.filter(|m| m.version == version)) else {
                return self.remove_kept(key, version).await;
            };
            let newest = kept::list(inner, key)
                .await?
                .without(Some(version))
                .into_iter()
                .rev()
                .find_map(|k| kept::decode(inner, key, &k).ok());
            let change = match &newest {
                Some(m) => Change::Put(m),
                None => Change::Delete,
            };
            let expect = Expect::Record(raw);
            match commit::change_manifest(inner, key, change, expect, Fences::none()).await? {
                Changed::Written { .. } => {}
                Changed::Refused { .. } => continue,
            }
            // A kept copy of the removed version (left by a commit that failed after keeping it) goes too, and
            // so does one that a put that read it current issues after this removal.
            unkeep(inner, key, current.version).await?;
            let Some(m) = newest else {
                return Ok((RemovedVersion::Current, None));
            };
            // Made current, its kept record stays, a kept copy of the current version (`KeptVersions::without`):
            // a keeping put that replaces it meanwhile writes that record again, and a read by version that looked
            // for the current one before the promotion still finds it. It goes when the version is removed. Gone
            // already, the version was removed meanwhile: remove it again.
            let again = kept::read(inner, key, m.version)
                .await?
                .is_none()
                .then_some(m.version);
            return Ok((RemovedVersion::CurrentPromoting(m.version), again));
        }
        Err(Error::PreconditionFailed {
            key: key.as_ref().into(),
            expected: version,
            actual: None,
        })
    }

    /// Removes kept version `version` of `key`: its chunks queued for reclaim first (the reclaim pass leaves
    /// them while the record keeps them), then the record; then, if a concurrent removal made it current
    /// meanwhile, names it to be removed again.
    async fn remove_kept(
        &self,
        key: &Bytes,
        version: VersionId,
    ) -> Result<(RemovedVersion, Option<VersionId>)> {
        let inner = &self.inner;
        let Some(record) = kept::read(inner, key, version).await? else {
            return Err(Error::VersionNotFound {
                key: key.as_ref().into(),
                version,
            });
        };
        let manifest = kept::decode(inner, key, &KeptRecord { version, record })?;
        reclaim::schedule(inner, key, &manifest, None).await?;
        unkeep(inner, key, version).await?;
        let promoted = match inner.read_manifest(key).await {
            Ok(current) => current.is_some_and(|m| m.version == version),
            Err(e) if e.is_corruption() => false,
            Err(e) => return Err(e),
        };
        Ok((RemovedVersion::Kept, promoted.then_some(version)))
    }
}

/// Removes version `version` of `key` from the kept versions: queues the reclaim entry of its removal marker, then
/// writes the marker and deletes its kept record (`ledger/kept.rs`), so that a kept record a put issued before the
/// removal does not bring it back.
async fn unkeep(inner: &Inner, key: &Bytes, version: VersionId) -> Result<()> {
    let blob = BlobRef {
        key: key.clone(),
        version,
    };
    reclaim::enqueue(inner, &blob, reclaim::REMOVAL_ENTRY, inner.now_micros()).await?;
    kept::remove(inner, key, version).await
}
