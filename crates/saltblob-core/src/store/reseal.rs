//! Re-wrapping sealed blobs' data keys (`saltblob rekey`): [`BlobStore::rekey`] re-wraps a sealed version's data
//! key under the current version of its key in the manifest alone, with a compare-and-set on the manifest bytes
//! it read, without touching a chunk; it loses to a writer that commits in between, and nothing is lost.
//! (Sealing a plaintext blob is a rewrite: [`BlobStore::encrypt`], beside [`BlobStore::relayout`].) Also
//! [`BlobStore::check_encryption_key`], which tells whether puts can seal under a key now.

use bytes::Bytes;

use crate::backend::Namespace;
use crate::base::error::{KeyDisplay, Result};
use crate::base::version::VersionId;
use crate::encryption::{KekRef, Sealing};
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::kept;
use crate::schedule::{self, PriorityClass};
use crate::state::Inner;
use crate::store::BlobStore;
use crate::store::commit::{self, Change, Changed, Expect, Fences};
use crate::store::sealing;

use super::key::validate_key;

/// What [`BlobStore::rekey`] did with one blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rekeyed {
    /// Its data key (of a multipart blob: its segments', the last one re-wrapped shown) is now wrapped by `to` (it
    /// was by `from`).
    Rewrapped {
        /// The key version that wrapped it.
        from: KekRef,
        /// The key version that wraps it now.
        to: KekRef,
    },
    /// Its data key (and those of its kept versions) is wrapped by its key's current version already.
    Current,
    /// Plaintext, and no kept version needed re-wrapping (`saltblob encrypt` seals it: [`BlobStore::encrypt`]).
    Plaintext,
    /// Replaced, deleted or re-wrapped by someone else in between: left as they made it.
    LostToAWriter,
    /// Left alone for the reason given (gone, expired).
    Skipped(&'static str),
}

impl BlobStore {
    /// Checks that puts can seal under key-encryption key `name` now ([`crate::state::config::PutOptions::encryption_key`]),
    /// writing nothing: the store's data-key cache holds a data key made under it, else its provider makes one,
    /// which the cache keeps for the puts that follow (so a KMS is asked once per key and cache expiry).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the store has no key provider; [`Error::KeyUnavailable`] naming the key
    /// when the provider cannot make a data key under it (retryable when the provider did not answer).
    pub async fn check_encryption_key(&self, name: &str) -> Result<()> {
        sealing::check_key(&self.inner, name).await
    }

    /// Re-wraps the data keys of `key`'s current version and of its kept versions
    /// ([`crate::state::config::PutOptions::keep_replaced`]) under the current version of the key that wrapped
    /// each, when another version did: only the manifest changes (a compare-and-set on the bytes read; a kept
    /// version's record likewise), so that the older key version can then be retired. The key commitment is
    /// checked first, with the data key as opened. Returns what became of the current version, or
    /// [`Rekeyed::Rewrapped`] when only kept versions were re-wrapped; a kept version changed or removed in
    /// between is left as it was made.
    ///
    /// # Errors
    /// [`Error::KeyUnavailable`] (the store has no provider, or it cannot open or wrap the key), [`Error::Corrupt`]
    /// (the manifest or a kept record does not decode or fails its commitment), [`Error::Backend`].
    pub async fn rekey(&self, key: impl AsRef<[u8]>) -> Result<Rekeyed> {
        let key = validate_key(key.as_ref())?;
        let class = self
            .inner
            .sched
            .choose(None, PriorityClass::bulk())
            .ok()
            .flatten();
        schedule::in_class(class, async {
            let inner = &self.inner;
            let bytes = inner.backend.get_record(Namespace::Manifest, &key).await?;
            let current = match &bytes {
                Some(bytes) => Some(inner.decode_manifest(&key, bytes)?),
                None => None,
            };
            let mut outcome = match (&current, bytes) {
                (None, _) | (_, None) => Rekeyed::Skipped("gone before it was read"),
                (Some(m), _) if m.is_expired(inner.now_micros()) => Rekeyed::Skipped("expired"),
                (Some(m), Some(bytes)) => match rewrap(inner, &key, m).await? {
                    Rewrap::Moved { manifest, from, to } => {
                        // The same version: the commit queues nothing for reclaim.
                        let expect = Expect::Record(bytes);
                        let change = Change::Put(&manifest);
                        match commit::change_manifest(inner, &key, change, expect, Fences::none())
                            .await?
                        {
                            Changed::Written { .. } => {
                                tracing::debug!(
                                    "rekeyed \"{}\" version {}: {from} -> {to}",
                                    KeyDisplay::from(&key[..]),
                                    m.version,
                                );
                                Rekeyed::Rewrapped { from, to }
                            }
                            Changed::Refused { .. } => Rekeyed::LostToAWriter,
                        }
                    }
                    Rewrap::Same(same) => same,
                },
            };
            // Every kept record, the kept copy of the current version a promotion leaves too (it is read by id
            // once a plain put replaces that version).
            for k in kept::list(inner, &key).await?.0 {
                let m = kept::decode(inner, &key, &k)?;
                let Rewrap::Moved { manifest, from, to } = rewrap(inner, &key, &m).await? else {
                    continue;
                };
                let replaced = kept::replace(inner, &key, k.version, k.record, manifest.encode());
                if replaced.await?.is_ok() {
                    tracing::debug!(
                        "rekeyed \"{}\" kept version {}: {from} -> {to}",
                        KeyDisplay::from(&key[..]),
                        k.version,
                    );
                    if !matches!(outcome, Rekeyed::Rewrapped { .. } | Rekeyed::LostToAWriter) {
                        outcome = Rekeyed::Rewrapped { from, to };
                    }
                }
            }
            Ok(outcome)
        })
        .await
    }
}

/// What [`rewrap`] makes of one version.
enum Rewrap {
    /// Re-wrapped: the version's manifest with its data keys wrapped by `to` (it was by `from`).
    Moved {
        manifest: Box<Manifest>,
        from: KekRef,
        to: KekRef,
    },
    /// Nothing to change: [`Rekeyed::Current`], [`Rekeyed::Plaintext`] or [`Rekeyed::Skipped`].
    Same(Rekeyed),
}

/// `manifest` (a version of `key`) with the data keys of its sealing, or of its segments' (a multipart blob's
/// parts are sealed each), wrapped by the current version of their key.
async fn rewrap(inner: &Inner, key: &Bytes, manifest: &Manifest) -> Result<Rewrap> {
    let mut rekeyed = manifest.clone();
    let mut sealings: Vec<(VersionId, &mut Sealing)> = match &mut rekeyed.body {
        ManifestBody::Segmented(segments) => segments
            .iter_mut()
            .filter_map(|s| Some((s.version, s.sealing.as_mut()?)))
            .collect(),
        _ => rekeyed
            .sealing
            .as_mut()
            .map(|s| (manifest.version, s))
            .into_iter()
            .collect(),
    };
    if sealings.is_empty() {
        return Ok(Rewrap::Same(Rekeyed::Plaintext));
    }
    if sealings
        .iter()
        .any(|(_, s)| s.kek.provider == crate::encryption::CUSTOMER)
    {
        return Ok(Rewrap::Same(Rekeyed::Skipped(
            "sealed under a customer key, which only its holder has",
        )));
    }
    let mut moved = None;
    for (version, old) in sealings.iter_mut() {
        // Opens the data key and checks the commitment; without a provider, says what to fix.
        sealing::open(inner, key, *version, old, None).await?;
        let Some(keys) = &inner.keys else {
            return Ok(Rewrap::Same(Rekeyed::Skipped("no key provider")));
        };
        let store_id = sealing::store_id(inner, false).await?;
        let dek = keys.cache.open(&old.kek, &old.wrapped, &store_id).await?;
        let wrapped = crate::encryption::recordable(
            keys.config
                .provider
                .wrap_store_data_key(&old.kek.name, &dek, &store_id)
                .await?,
        )?;
        if wrapped.kek != old.kek {
            moved = Some((old.kek.clone(), wrapped.kek.clone()));
            old.kek = wrapped.kek.clone();
            old.wrapped = wrapped.wrapped.clone();
        }
    }
    drop(sealings);
    Ok(match moved {
        Some((from, to)) => Rewrap::Moved {
            manifest: Box::new(rekeyed),
            from,
            to,
        },
        None => Rewrap::Same(Rekeyed::Current),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::memory::MemoryStore;
    use crate::base::error::Error;
    use crate::conformance::{data, small_config};
    use crate::encryption::{EncryptionConfig, Keyring, LocalProvider};
    use crate::state::config::PutOptions;

    fn keyed(backend: &Arc<dyn ChunkStore>, keyring: &Path) -> BlobStore {
        let provider = Arc::new(LocalProvider::open(keyring).unwrap());
        let config = small_config().with_encryption(EncryptionConfig::new(provider).with_key("t"));
        BlobStore::new(Arc::clone(backend), config).unwrap()
    }

    #[tokio::test]
    async fn keys_are_checked_without_writing_anything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        Keyring::create(&path).unwrap().add("t", 1).unwrap();
        let backend: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        let store = keyed(&backend, &path);
        store.check_encryption_key("t").await.unwrap();
        assert!(matches!(
            store.check_encryption_key("nope").await,
            Err(Error::KeyUnavailable { .. })
        ));
        let plain = BlobStore::new(Arc::clone(&backend), small_config()).unwrap();
        assert!(matches!(
            plain.check_encryption_key("t").await,
            Err(Error::InvalidArgument { .. })
        ));
        assert!(store.list("").await.unwrap().is_empty(), "nothing written");
    }

    /// A keyring holding key `t` version 1 (in a directory that lives as long as the value), and an empty store.
    fn ring_of_t() -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Keyring,
        Arc<dyn ChunkStore>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let mut ring = Keyring::create(&path).unwrap();
        ring.add("t", 1).unwrap();
        (dir, path, ring, Arc::new(MemoryStore::new()))
    }

    #[tokio::test]
    async fn rekey_rewraps_under_the_current_version_so_the_old_one_can_be_retired() {
        let (dir, path, mut ring, backend) = ring_of_t();
        let v1 = keyed(&backend, &path);
        let (small, big) = (data(100, 1), data(50_000, 2));
        let before = [
            v1.put("small", small.clone(), &PutOptions::new())
                .await
                .unwrap(),
            v1.put("big", big.clone(), &PutOptions::new())
                .await
                .unwrap(),
        ];
        let plain = BlobStore::new(Arc::clone(&backend), small_config()).unwrap();
        plain
            .put("plain", data(10, 3), &PutOptions::new())
            .await
            .unwrap();

        ring.rotate("t", 2).unwrap();
        // Retiring version 1 now would revoke every blob it wraps.
        let revoked = dir.path().join("revoked");
        std::fs::copy(&path, &revoked).unwrap();
        Keyring::open(&revoked).unwrap().retire("t", 1).unwrap();
        match keyed(&backend, &revoked).get("big").await {
            Err(Error::KeyUnavailable { key, reason, .. }) => {
                assert!(
                    key.contains("version 1") && reason.contains("retired"),
                    "{key}: {reason}"
                );
            }
            other => panic!("a blob of a retired key version: {other:?}"),
        }

        let v2 = keyed(&backend, &path);
        for (key, m) in ["small", "big"].into_iter().zip(&before) {
            match v2.rekey(key).await.unwrap() {
                Rekeyed::Rewrapped { from, to } => {
                    assert_eq!((from.version, to.version), (1, 2), "{key}");
                }
                other => panic!("{key}: {other:?}"),
            }
            let after = v2.head(key).await.unwrap();
            assert_eq!(
                after.version, m.version,
                "{key}: the same version, not a rewrite"
            );
            assert_eq!(after.body, m.body, "{key}: the same chunks");
            assert_eq!(
                after.sealing.as_ref().unwrap().commitment,
                m.sealing.as_ref().unwrap().commitment
            );
            assert_eq!(v2.rekey(key).await.unwrap(), Rekeyed::Current, "{key}");
        }
        assert_eq!(v2.rekey("plain").await.unwrap(), Rekeyed::Plaintext);
        assert_eq!(
            v2.rekey("none").await.unwrap(),
            Rekeyed::Skipped("gone before it was read")
        );

        // A multipart blob: each sealed segment is re-wrapped, in the one manifest.
        let parts = [data(300, 4), data(9000, 5)];
        let mut segments = Vec::new();
        for part in &parts {
            let lease = std::time::Duration::from_secs(3600);
            segments.push(
                v2.put_segment("multi", &part[..], &PutOptions::new(), lease)
                    .await
                    .unwrap(),
            );
        }
        v2.compose("multi", &segments, &PutOptions::new())
            .await
            .unwrap();
        ring.rotate("t", 3).unwrap();
        let v3 = keyed(&backend, &path);
        match v3.rekey("multi").await.unwrap() {
            Rekeyed::Rewrapped { from, to } => assert_eq!((from.version, to.version), (2, 3)),
            other => panic!("multi: {other:?}"),
        }
        let head = v3.head("multi").await.unwrap();
        let ManifestBody::Segmented(rewrapped) = &head.body else {
            panic!("segmented");
        };
        assert!(
            rewrapped
                .iter()
                .all(|s| s.sealing.as_ref().is_some_and(|s| s.kek.version == 3))
        );
        for key in ["small", "big"] {
            assert!(
                matches!(v3.rekey(key).await.unwrap(), Rekeyed::Rewrapped { .. }),
                "{key}"
            );
        }

        let mut ring = Keyring::open(&path).unwrap();
        ring.retire("t", 1).unwrap();
        ring.retire("t", 2).unwrap();
        let v3 = keyed(&backend, &path);
        let whole: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(v3.get("multi").await.unwrap(), whole);
        assert_eq!(v3.get("small").await.unwrap(), small);
        assert_eq!(v3.get("big").await.unwrap(), big);
    }

    /// Kept versions (a versioned bucket's) sealed under the old key version are re-wrapped too, also under a
    /// plaintext current version (a delete marker): after `rekey`, retiring the old version leaves every version
    /// readable by its id. A removed version is left alone.
    #[tokio::test]
    async fn rekey_rewraps_kept_versions_too() {
        use crate::state::config::GetOptions;
        let (_dir, path, mut ring, backend) = ring_of_t();
        let v1 = keyed(&backend, &path);
        let keep = PutOptions::new().with_keep_replaced(true);
        let values = [data(100, 1), data(50_000, 2), data(20, 3)];
        let mut versions = Vec::new();
        for value in &values {
            versions.push(v1.put("doc", value.clone(), &keep).await.unwrap().version);
        }
        v1.remove_version("doc", versions[2]).await.unwrap();
        // A plaintext current version over them, as a delete marker is.
        let plain = BlobStore::new(Arc::clone(&backend), small_config()).unwrap();
        plain.put("doc", Bytes::new(), &keep).await.unwrap();

        ring.rotate("t", 2).unwrap();
        let v2 = keyed(&backend, &path);
        match v2.rekey("doc").await.unwrap() {
            Rekeyed::Rewrapped { from, to } => assert_eq!((from.version, to.version), (1, 2)),
            other => panic!("kept versions: {other:?}"),
        }
        assert_eq!(v2.rekey("doc").await.unwrap(), Rekeyed::Plaintext);
        let mut ring = Keyring::open(&path).unwrap();
        ring.retire("t", 1).unwrap();
        let v2 = keyed(&backend, &path);
        for (version, value) in versions.iter().zip(&values).take(2) {
            let opts = GetOptions::new().with_version(*version);
            assert_eq!(&v2.get_with("doc", &opts).await.unwrap(), value);
        }
        assert!(matches!(
            v2.head_version("doc", versions[2]).await,
            Err(Error::VersionNotFound { .. })
        ));
    }

    /// The kept copy of the current version that a promotion leaves is re-wrapped too: a plain put over that
    /// version leaves the copy readable by id, under the new key version.
    #[tokio::test]
    async fn rekey_rewraps_the_kept_copy_of_a_promoted_version() {
        use crate::state::config::GetOptions;
        let (_dir, path, mut ring, backend) = ring_of_t();
        let v1 = keyed(&backend, &path);
        let keep = PutOptions::new().with_keep_replaced(true);
        let first = v1.put("copy", data(30_000, 1), &keep).await.unwrap();
        let second = v1.put("copy", data(10, 2), &keep).await.unwrap();
        v1.remove_version("copy", second.version).await.unwrap();

        ring.rotate("t", 2).unwrap();
        let v2 = keyed(&backend, &path);
        assert!(matches!(
            v2.rekey("copy").await.unwrap(),
            Rekeyed::Rewrapped { .. }
        ));
        v2.put("copy", data(5, 3), &PutOptions::new())
            .await
            .unwrap();
        let mut ring = Keyring::open(&path).unwrap();
        ring.retire("t", 1).unwrap();
        let v2 = keyed(&backend, &path);
        let opts = GetOptions::new().with_version(first.version);
        assert_eq!(v2.get_with("copy", &opts).await.unwrap(), data(30_000, 1));
    }
}
