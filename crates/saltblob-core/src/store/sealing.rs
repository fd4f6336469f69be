//! Sealing at the store (`docs/format.md`, "Encryption at rest"): which key a put seals its version under and the
//! secrets it seals with, the secrets a read opens a sealed version with, and the store id both derive them from.

use std::sync::Arc;

use bytes::Bytes;

use crate::backend::{Namespace, Precondition, RecordWrite};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::version::VersionId;
use crate::encryption::seal::{STORE_ID_LEN, VersionKeys};
use crate::encryption::{
    AWS_KMS, CUSTOMER, CustomerKey, LOCAL, Sealing, fill_random, provider_tag,
};
use crate::format::manifest::{Manifest, ManifestBody};
use crate::state::Inner;
use crate::state::config::PutOptions;

/// Key of the store id in [`Namespace::Meta`]: 16 random bytes, written once by the first sealed put.
const STORE_ID: &[u8] = b"store-id";

/// How a put seals its version.
pub(crate) struct PutSealing {
    /// The version's secrets.
    pub(crate) keys: Arc<VersionKeys>,
    /// What its manifest records.
    pub(crate) sealing: Sealing,
    /// Whether its chunks may be compressed before they are sealed ([`crate::encryption::EncryptionConfig::compress`]).
    pub(crate) compress: bool,
}

/// How version `version` of `key` is sealed: under the put's customer key ([`PutOptions::customer_key`]), else
/// the put's key ([`PutOptions::encryption_key`]), else the store's ([`crate::encryption::EncryptionConfig::key`]); `None`
/// (plaintext) when none is named.
///
/// # Errors
/// [`Error::InvalidArgument`] when the put names both a customer key and a key, or a key on a store without
/// provider; [`Error::KeyUnavailable`] when the provider cannot make a data key under it. All come before
/// anything is written.
pub(crate) async fn for_put(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    opts: &PutOptions,
) -> Result<Option<PutSealing>> {
    if let Some(customer) = &opts.customer_key {
        if let Some(name) = &opts.encryption_key {
            return Err(Error::invalid(
                "encryption key",
                format!(
                    "{name:?} and a customer key: a version is sealed under one key, give one of them"
                ),
            ));
        }
        let compress = inner.keys.as_ref().is_some_and(|k| k.config.compress);
        let store_id = store_id(inner, true).await?;
        return sealed(
            inner,
            key,
            version,
            &customer.new_data_key(&store_id)?,
            compress,
        )
        .await
        .map(Some);
    }
    let store_key = inner.keys.as_ref().and_then(|k| k.config.key.as_ref());
    let Some(name) = opts.encryption_key.as_ref().or(store_key) else {
        return Ok(None);
    };
    let Some(keys) = &inner.keys else {
        return Err(no_provider(name));
    };
    // Manifests name the provider by a tag of the format's: one without a tag could not be read back, and
    // `customer` is the tag of keys given per request.
    let provider = keys.config.provider.name();
    if provider_tag(provider).is_none() || provider == CUSTOMER {
        return Err(Error::invalid(
            "key provider",
            format!(
                "{provider:?} is not a provider the format records ({LOCAL}, {AWS_KMS}): nothing can be sealed with it"
            ),
        ));
    }
    let dek = keys
        .cache
        .data_key(name, &store_id(inner, true).await?)
        .await?;
    sealed(inner, key, version, &dek, keys.config.compress)
        .await
        .map(Some)
}

/// The sealing of version `version` of `key` under data key `dek`.
async fn sealed(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    dek: &crate::encryption::DataKey,
    compress: bool,
) -> Result<PutSealing> {
    let store_id = store_id(inner, true).await?;
    let version_keys = VersionKeys::derive(&dek.key, &store_id, key, version)?;
    Ok(PutSealing {
        sealing: Sealing {
            kek: dek.kek.clone(),
            wrapped: dek.wrapped.clone(),
            commitment: *version_keys.commitment(),
        },
        keys: Arc::new(version_keys),
        compress,
    })
}

/// The error of a put under key `name` on a store without a key provider.
fn no_provider(name: &str) -> Error {
    Error::invalid(
        "encryption key",
        format!(
            "{name:?}, but the store has no key provider: open it with \
             encryption=local&keyring=FILE (or give StoreConfig::encryption)"
        ),
    )
}

/// Checks that a put could seal under key-encryption key `name` now: the data-key cache holds a data key made
/// under it, else the provider makes one (and the cache keeps it for the puts that follow).
///
/// # Errors
/// As [`for_put`].
pub(crate) async fn check_key(inner: &Inner, name: &str) -> Result<()> {
    let keys = inner.keys.as_ref().ok_or_else(|| no_provider(name))?;
    let store_id = store_id(inner, true).await?;
    keys.cache.data_key(name, &store_id).await.map(|_| ())
}

/// The secrets that open version `manifest` of `key`, given `customer` (the read's customer key, if any);
/// `None` when it is plaintext. The key commitment is checked here, before any chunk is fetched.
///
/// # Errors
/// [`Error::KeyUnavailable`] naming the key when the store has no provider, another one, or the provider cannot
/// open the data key (unknown, retired or disabled key), or for a version sealed under a customer key when
/// `customer` is not that key; [`Error::Corrupt`] when the commitment does not match (the manifest was moved from
/// another key, version or store, or changed) or the store id is missing.
pub(crate) async fn for_read(
    inner: &Inner,
    key: &[u8],
    manifest: &Manifest,
    customer: Option<&CustomerKey>,
) -> Result<Option<Arc<VersionKeys>>> {
    match &manifest.sealing {
        Some(sealing) => open(inner, key, manifest.version, sealing, customer)
            .await
            .map(Some),
        None => Ok(None),
    }
}

/// Opens the keys of every sealed segment of segmented version `manifest` of `key` that `range` touches, so that
/// a read whose key is unavailable fails before its first byte (a reader such as the S3 server has not answered
/// yet) rather than when it reaches the segment; the keys are then cached for the read itself. Nothing for a
/// version of another kind. Errors as [`for_read`].
pub(crate) async fn check_segments(
    inner: &Inner,
    key: &[u8],
    manifest: &Manifest,
    range: &std::ops::Range<u64>,
    customer: Option<&CustomerKey>,
) -> Result<()> {
    let ManifestBody::Segmented(segments) = &manifest.body else {
        return Ok(());
    };
    let mut start = 0u64;
    for segment in segments {
        let end = start + segment.size;
        if let Some(sealing) = &segment.sealing
            && start < range.end
            && range.start < end
        {
            open(inner, key, segment.version, sealing, customer).await?;
        }
        start = end;
    }
    Ok(())
}

/// The secrets of version `version` of `key` (a version, or a segment of one), sealed as `sealing` says, given
/// the read's customer key `customer`; the key commitment checked. Errors as [`for_read`].
pub(crate) async fn open(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    sealing: &Sealing,
    customer: Option<&CustomerKey>,
) -> Result<Arc<VersionKeys>> {
    let dek = open_data_key(inner, key, version, sealing, customer).await?;
    let store_id = store_id(inner, false).await?;
    let version_keys = VersionKeys::derive(&dek, &store_id, key, version)?;
    if !version_keys.commits_to(&sealing.commitment) {
        return Err(Error::corrupt(
            format!(
                "manifest of key \"{}\" version {}",
                KeyDisplay::from(key),
                version
            ),
            "its key commitment does not match the keys derived from its data key: the manifest was moved \
             from another key, version or store, or changed",
        ));
    }
    Ok(Arc::new(version_keys))
}

/// The data key of version `version` of `key`, sealed as `sealing` says: opened with the read's customer key
/// for provider `customer`, else by the store's provider (through its cache). Errors as [`for_read`].
async fn open_data_key(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    sealing: &Sealing,
    customer: Option<&CustomerKey>,
) -> Result<crate::encryption::Secret> {
    let unavailable = |reason: String| Error::KeyUnavailable {
        provider: sealing.kek.provider,
        key: sealing.kek.to_string(),
        reason,
        retryable: false,
    };
    if sealing.kek.provider == CUSTOMER {
        return match customer {
            Some(given) => given.open_data_key(&store_id(inner, false).await?, sealing),
            None => Err(unavailable(format!(
                "version {} of key \"{}\" is sealed under a customer key, which the read did not give \
                 (Rust: GetOptions::customer_key; Python: customer_key=; S3: the \
                 x-amz-server-side-encryption-customer-* headers)",
                version,
                KeyDisplay::from(key)
            ))),
        };
    }
    let Some(keys) = &inner.keys else {
        return Err(unavailable(format!(
            "version {} of key \"{}\" is sealed, and the store was opened without a key provider: open it \
             with encryption={}&... (see docs/format.md, \"Encryption at rest\")",
            version,
            KeyDisplay::from(key),
            sealing.kek.provider
        )));
    };
    if keys.config.provider.name() != sealing.kek.provider {
        return Err(unavailable(format!(
            "version {} of key \"{}\" is sealed by the {} provider; the store was opened with {}",
            version,
            KeyDisplay::from(key),
            sealing.kek.provider,
            keys.config.provider.name()
        )));
    }
    let store_id = store_id(inner, false).await?;
    keys.cache
        .open(&sealing.kek, &sealing.wrapped, &store_id)
        .await
}

/// The store id: read once, or made (with a conditional put, so that concurrent first puts agree) when `create`.
pub(crate) async fn store_id(inner: &Inner, create: bool) -> Result<[u8; STORE_ID_LEN]> {
    let corrupt = |detail: String| Error::corrupt("store id record", detail);
    inner
        .store_id
        .get_or_try_init(|| async {
            let bytes = match inner.backend.get_record(Namespace::Meta, STORE_ID).await? {
                Some(bytes) => bytes,
                None if create => {
                    let mut id = [0u8; STORE_ID_LEN];
                    fill_random(&mut id)?;
                    let id = Bytes::copy_from_slice(&id);
                    let write = inner
                        .backend
                        .put_record(Namespace::Meta, STORE_ID, id.clone(), &Precondition::Absent)
                        .await?;
                    match write {
                        RecordWrite::Done(_) => id,
                        RecordWrite::ConditionFailed(Some(current)) => current,
                        RecordWrite::ConditionFailed(None) => inner
                            .backend
                            .get_record(Namespace::Meta, STORE_ID)
                            .await?
                            .ok_or_else(|| corrupt("made by another writer, then gone".into()))?,
                    }
                }
                None => {
                    return Err(corrupt(
                        "missing, though the store holds a sealed version: every sealed version's keys are \
                         derived from it, so none can be read (was the Meta namespace lost or replaced?)"
                            .into(),
                    ));
                }
            };
            <[u8; STORE_ID_LEN]>::try_from(&bytes[..])
                .map_err(|_| corrupt(format!("{} bytes; {STORE_ID_LEN} expected", bytes.len())))
        })
        .await
        .copied()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::backend::memory::MemoryStore;
    use crate::base::error::Error;
    use crate::encryption::{
        DataKey, EncryptionConfig, KekRef, KeyProvider, Keyring, LocalProvider, Secret,
    };
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;

    /// A provider under a name the manifest format has no tag for.
    #[derive(Debug)]
    struct Renamed(LocalProvider);

    #[async_trait::async_trait]
    impl KeyProvider for Renamed {
        fn name(&self) -> &'static str {
            "vault"
        }

        async fn new_data_key(&self, kek: &str) -> crate::base::error::Result<DataKey> {
            self.0.new_data_key(kek).await
        }

        async fn wrap_data_key(
            &self,
            kek: &str,
            key: &Secret,
        ) -> crate::base::error::Result<DataKey> {
            self.0.wrap_data_key(kek, key).await
        }

        async fn open_data_key(
            &self,
            kek: &KekRef,
            wrapped: &[u8],
        ) -> crate::base::error::Result<Secret> {
            self.0.open_data_key(kek, wrapped).await
        }
    }

    /// What a sealed put learns from its body (late metadata: the S3 server's MD5 and checksums) is sealed in
    /// the manifest, and opens only with the version's key; the same customer key has another fingerprint in
    /// each store; manifests without sealed metadata (written before it existed, their entries in the clear) read
    /// as before and have none to open.
    #[tokio::test]
    async fn late_metadata_of_sealed_versions_is_sealed() {
        use crate::encryption::{CustomerKey, FINGERPRINT_PER_STORE};
        use crate::format::manifest::SEALED_METADATA_KEY;
        use crate::state::config::{GetOptions, LateMetadata};

        let key = CustomerKey::new([7; 32]);
        let other = CustomerKey::new([8; 32]);
        let mut names = Vec::new();
        for value in [b"small value".to_vec(), vec![3u8; 200_000]] {
            let store =
                BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).unwrap();
            let late = LateMetadata::new();
            late.insert("s3:checksum-crc32", "Y2hlY2tzdW0=");
            let opts = PutOptions::new()
                .with_customer_key(key.clone())
                .with_late_metadata(late.clone())
                .with_metadata("plain", "kept");
            let m = store.put("k", value.clone(), &opts).await.unwrap();
            let shown = format!("{:?}", m.metadata);
            assert!(!shown.contains("Y2hlY2tzdW0="), "{shown}");
            assert_eq!(m.metadata.get("plain").map(String::as_str), Some("kept"));
            assert!(m.metadata.contains_key(SEALED_METADATA_KEY));
            let m = store.head("k").await.unwrap();
            assert_eq!(
                store.sealed_metadata("k", &m, Some(&key)).await.unwrap(),
                late.entries()
            );
            assert!(matches!(
                store.sealed_metadata("k", &m, None).await,
                Err(Error::KeyUnavailable { .. })
            ));
            assert!(store.sealed_metadata("k", &m, Some(&other)).await.is_err());
            let sealing = m.sealed_by_customer().unwrap();
            assert_eq!(sealing.kek.version, FINGERPRINT_PER_STORE);
            assert!(store.customer_key_names(&key, &sealing.kek).await.unwrap());
            assert!(
                !store
                    .customer_key_names(&other, &sealing.kek)
                    .await
                    .unwrap()
            );
            names.push(sealing.kek.name.clone());
            let read = GetOptions {
                customer_key: Some(key.clone()),
                ..GetOptions::new()
            };
            assert_eq!(&store.get_with("k", &read).await.unwrap()[..], &value[..]);

            // As a manifest written before: the entries in the clear, nothing sealed to open.
            let mut old = m.clone();
            old.metadata.remove(SEALED_METADATA_KEY);
            old.metadata.extend(late.entries());
            let decoded =
                crate::format::manifest::Manifest::decode(&old.encode(), &|| "old".into()).unwrap();
            assert_eq!(decoded, old);
            assert!(
                store
                    .sealed_metadata("k", &old, Some(&key))
                    .await
                    .unwrap()
                    .is_empty()
            );

            // A plaintext put keeps its late metadata in the clear.
            let plain = store
                .put(
                    "p",
                    value,
                    &PutOptions::new().with_late_metadata(late.clone()),
                )
                .await
                .unwrap();
            assert_eq!(
                plain.metadata.get("s3:checksum-crc32").map(String::as_str),
                Some("Y2hlY2tzdW0=")
            );
        }
        assert_ne!(names[0], names[1], "one key, two stores, two fingerprints");
        assert!(!names.contains(&key.id().to_owned()));
    }

    #[tokio::test]
    async fn a_provider_the_format_cannot_name_seals_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        Keyring::create(&path).unwrap().add("k", 1).unwrap();
        let provider = Arc::new(Renamed(LocalProvider::open(&path).unwrap()));
        let config =
            StoreConfig::default().with_encryption(EncryptionConfig::new(provider).with_key("k"));
        let store = BlobStore::new(Arc::new(MemoryStore::new()), config).unwrap();
        match store.put("x", &b"value"[..], &PutOptions::new()).await {
            Err(Error::InvalidArgument { what, reason }) => {
                assert_eq!(what, "key provider");
                assert!(reason.contains("\"vault\""), "{reason}");
            }
            other => panic!("a put through an unnamed provider: {other:?}"),
        }
        assert!(matches!(store.head("x").await, Err(Error::NotFound { .. })));
    }
}
