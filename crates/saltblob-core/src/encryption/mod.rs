//! Encryption at rest (`docs/format.md`, "Encryption at rest"): key-encryption keys (KEKs) held by a key
//! provider, and data keys (DEKs) they wrap.
//!
//! What exists: the [`KeyProvider`] trait, the `local` provider ([`LocalProvider`]) over a [`Keyring`] file (the
//! `aws-kms` provider is crate `saltblob-kms`, which has the HTTP client this crate does not), the
//! wrapped-key format, the data-key cache ([`CachedProvider`]), the sealing of a version's chunks
//! ([`seal::VersionKeys`]) and what a sealed manifest records ([`Sealing`]). A store seals the versions it writes
//! when its [`crate::state::config::StoreConfig::encryption`] (or a put's
//! [`crate::state::config::PutOptions::encryption_key`]) names a key.
//!
//! Uses only `base/`: the chunk and manifest formats (`format/`) record what it seals, not the other way round.

mod cache;
mod customer;
mod keyring;
mod params;
pub mod seal;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

pub use self::cache::{CachedProvider, DEFAULT_FAILURE_CACHE, DEFAULT_KEY_CACHE};
pub use self::customer::{CUSTOMER_ID_LEN, CustomerKey, FINGERPRINT_PER_STORE};
pub use self::keyring::{Kek, KekState, Keyring, MAX_KEKS, MAX_NAME_LEN};
pub use self::params::{AwsKmsParams, EncryptionParams};
use crate::base::clock::Clock;
use crate::base::error::Error;
use crate::base::error::Result;

/// Bytes of every key: KEKs and DEKs are 256 bits.
pub const KEY_LEN: usize = 32;
/// Bytes of a data key wrapped by the local provider: nonce, sealed key, tag.
pub const LOCAL_WRAPPED_LEN: usize = NONCE_LEN + KEY_LEN + 16;
/// The local provider's name.
pub const LOCAL: &str = "local";
/// Bytes of a store id, part of every sealed version's key derivation.
pub const STORE_ID_LEN: usize = 16;
/// The AWS KMS provider's name.
pub const AWS_KMS: &str = "aws-kms";
/// The name manifests record for a version sealed under a key its writer gave ([`CustomerKey`]; S3's SSE-C).
pub const CUSTOMER: &str = "customer";
/// The `what` of the [`crate::base::error::Error::InvalidArgument`] of a read that gives a customer key
/// ([`crate::state::config::GetOptions::customer_key`]) for a version not sealed under one, which S3 refuses too (`400
/// InvalidRequest`: the key may have been given in the belief that the object is sealed under it).
pub const CUSTOMER_KEY_NOT_APPLICABLE: &str = "customer key";

/// The tag a manifest records for provider `name` (`docs/format.md`, "Manifest encryption block").
pub fn provider_tag(name: &str) -> Option<u8> {
    match name {
        LOCAL => Some(1),
        AWS_KMS => Some(2),
        CUSTOMER => Some(3),
        _ => None,
    }
}

/// The provider of manifest tag `tag`.
pub fn provider_of_tag(tag: u8) -> Option<&'static str> {
    match tag {
        1 => Some(LOCAL),
        2 => Some(AWS_KMS),
        3 => Some(CUSTOMER),
        _ => None,
    }
}

/// A key's bytes, zeroed when dropped.
pub type Secret = zeroize::Zeroizing<[u8; KEY_LEN]>;

/// The error of a cryptographic primitive that failed where it cannot for valid input (`what` failed).
pub(crate) fn crypto_failed(what: &str) -> Error {
    Error::Backend {
        backend: "encryption",
        message: format!("{what} failed"),
        retryable: false,
        source: None,
    }
}

/// Fills `buf` from the operating system's CSPRNG.
pub fn fill_random(buf: &mut [u8]) -> Result<()> {
    aws_lc_rs::rand::fill(buf).map_err(|_| crypto_failed("the system's random number generator"))
}

/// 32 bytes from the operating system's CSPRNG.
pub(crate) fn random_key() -> Result<Secret> {
    let mut key = Secret::new([0; KEY_LEN]);
    fill_random(&mut key[..])?;
    Ok(key)
}

/// Which key-encryption key wrapped a data key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KekRef {
    /// The provider: [`LOCAL`] or `aws-kms`.
    pub provider: &'static str,
    /// The key's name (a keyring name; a KMS key id).
    pub name: String,
    /// Its version (0 where the provider's wrapped key names its own).
    pub version: u32,
}

impl fmt::Display for KekRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.version == 0 {
            write!(f, "{:?}", self.name)
        } else {
            write!(f, "{:?} version {}", self.name, self.version)
        }
    }
}

/// How one version is sealed, as its manifest records it (`docs/format.md`, "Manifest encryption block"): the
/// wrapped data key, the key that wrapped it, and the key commitment of the version's derived keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealing {
    /// The key-encryption key that wrapped [`Sealing::wrapped`].
    pub kek: KekRef,
    /// The version's data key, wrapped.
    pub wrapped: Vec<u8>,
    /// The key commitment ([`seal::VersionKeys::commitment`]), checked before any chunk is fetched.
    pub commitment: [u8; 32],
}

impl fmt::Debug for Sealing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealing")
            .field("kek", &self.kek)
            .field("wrapped_len", &self.wrapped.len())
            .finish_non_exhaustive()
    }
}

/// How a store encrypts ([`crate::state::config::StoreConfig::encryption`]): its key provider, the key new versions are sealed
/// under, how long data keys are cached, and whether sealed chunks may be compressed first.
#[derive(Clone, Debug)]
#[must_use]
pub struct EncryptionConfig {
    /// Where the key-encryption keys are; it also opens the data keys of every sealed version read.
    pub provider: Arc<dyn KeyProvider>,
    /// The key every put seals its version under unless it names another ([`crate::state::config::PutOptions::encryption_key`]).
    /// Defaults to none: puts store plaintext unless they name a key, and sealed versions still read.
    pub key: Option<String>,
    /// How long data keys made or opened are kept ([`CachedProvider`]): a key disabled at its provider stops
    /// reads and writes within this. Defaults to [`DEFAULT_KEY_CACHE`] (10 minutes).
    pub key_cache: Duration,
    /// How long a failure of the provider that may pass (no answer, throttling) is served again to the requests
    /// the cache cannot serve, without asking the provider ([`CachedProvider`]): during a KMS outage a sealed
    /// request fails at once, retryably, instead of waiting. Defaults to [`DEFAULT_FAILURE_CACHE`] (2 s); zero
    /// asks every time.
    pub failure_cache: Duration,
    /// Whether sealed chunks are compressed (with the put's codec) before they are sealed. Compression leaks
    /// how compressible each chunk is through its stored size, so it defaults to false: sealed chunks are
    /// stored uncompressed.
    pub compress: bool,
}

impl EncryptionConfig {
    /// Encryption through `provider`, no default key, the default cache, no compression.
    pub fn new(provider: Arc<dyn KeyProvider>) -> Self {
        Self {
            provider,
            key: None,
            key_cache: DEFAULT_KEY_CACHE,
            failure_cache: DEFAULT_FAILURE_CACHE,
            compress: false,
        }
    }

    /// Sets [`EncryptionConfig::key`].
    pub fn with_key(mut self, name: impl Into<String>) -> Self {
        self.key = Some(name.into());
        self
    }

    /// Sets [`EncryptionConfig::key_cache`].
    pub fn with_key_cache(mut self, keep_for: Duration) -> Self {
        self.key_cache = keep_for;
        self
    }

    /// Sets [`EncryptionConfig::failure_cache`].
    pub fn with_failure_cache(mut self, remember_for: Duration) -> Self {
        self.failure_cache = remember_for;
        self
    }

    /// Sets [`EncryptionConfig::compress`].
    pub fn with_compression(mut self, compress: bool) -> Self {
        self.compress = compress;
        self
    }
}

/// A store's encryption at run time (`store/sealing.rs`): its configuration and the provider behind the data-key
/// cache.
#[derive(Debug)]
pub(crate) struct StoreKeys {
    /// As configured.
    pub(crate) config: EncryptionConfig,
    /// The provider, behind the cache.
    pub(crate) cache: CachedProvider,
}

impl StoreKeys {
    /// The run-time state of `config`, its cache on `clock`.
    pub(crate) fn new(config: &EncryptionConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            cache: CachedProvider::new(
                Arc::clone(&config.provider),
                config.key_cache,
                config.failure_cache,
                clock,
            ),
            config: config.clone(),
        }
    }
}

/// A new data key: the key itself (never stored) and its wrapped form (stored in the manifest).
pub struct DataKey {
    /// The key.
    pub key: Secret,
    /// The key wrapped by [`DataKey::kek`].
    pub wrapped: Vec<u8>,
    /// The key-encryption key that wrapped it.
    pub kek: KekRef,
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataKey")
            .field("kek", &self.kek)
            .field("wrapped_len", &self.wrapped.len())
            .finish_non_exhaustive()
    }
}

/// Where key-encryption keys live: makes data keys wrapped by one, and opens them again.
#[async_trait::async_trait]
pub trait KeyProvider: fmt::Debug + Send + Sync {
    /// The provider's name, as manifests record it.
    fn name(&self) -> &'static str;

    /// A new random data key, wrapped by the current version of key `kek`.
    ///
    /// # Errors
    /// [`Error::KeyUnavailable`] naming the key when it is unknown or cannot be used.
    async fn new_data_key(&self, kek: &str) -> Result<DataKey>;

    /// `key` (a data key opened with [`KeyProvider::open_data_key`]) wrapped again by the current version of key
    /// `kek`: what `saltblob rekey` stores, so that older versions of the key can be retired.
    ///
    /// # Errors
    /// As [`KeyProvider::new_data_key`].
    async fn wrap_data_key(&self, kek: &str, key: &Secret) -> Result<DataKey>;

    /// The data key `wrapped` by `kek`.
    ///
    /// # Errors
    /// [`Error::KeyUnavailable`] when the key is unknown, retired or disabled, or `wrapped` does not open under
    /// it (it was wrapped by another key, or changed).
    async fn open_data_key(&self, kek: &KekRef, wrapped: &[u8]) -> Result<Secret>;

    /// [`KeyProvider::new_data_key`] for the store of id `store_id`, which a provider may bind the data key to
    /// (the `aws-kms` provider names it in the key's encryption context); what stores call. Defaults to
    /// `new_data_key`.
    ///
    /// # Errors
    /// As [`KeyProvider::new_data_key`].
    async fn new_store_data_key(
        &self,
        kek: &str,
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<DataKey> {
        let _ = store_id;
        self.new_data_key(kek).await
    }

    /// [`KeyProvider::wrap_data_key`] for the store of id `store_id`, as [`KeyProvider::new_store_data_key`].
    ///
    /// # Errors
    /// As [`KeyProvider::new_data_key`].
    async fn wrap_store_data_key(
        &self,
        kek: &str,
        key: &Secret,
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<DataKey> {
        let _ = store_id;
        self.wrap_data_key(kek, key).await
    }

    /// [`KeyProvider::open_data_key`] for the store of id `store_id`: opens what
    /// [`KeyProvider::new_store_data_key`] and [`KeyProvider::wrap_store_data_key`] made for it (and what
    /// `new_data_key` made). Defaults to `open_data_key`.
    ///
    /// # Errors
    /// As [`KeyProvider::open_data_key`].
    async fn open_store_data_key(
        &self,
        kek: &KekRef,
        wrapped: &[u8],
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<Secret> {
        let _ = store_id;
        self.open_data_key(kek, wrapped).await
    }
}

/// The `local` provider: key-encryption keys from a keyring file, read when the provider is made.
#[derive(Debug, Clone)]
pub struct LocalProvider {
    keyring: Arc<Keyring>,
}

impl LocalProvider {
    /// The provider over the keyring file at `path`.
    ///
    /// # Errors
    /// As [`Keyring::open`].
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        Ok(Self::new(Keyring::open(path)?))
    }

    /// The provider over `keyring`.
    pub fn new(keyring: Keyring) -> Self {
        Self {
            keyring: Arc::new(keyring),
        }
    }

    fn unavailable(&self, key: impl fmt::Display, reason: impl Into<String>) -> Error {
        Error::KeyUnavailable {
            provider: LOCAL,
            key: key.to_string(),
            reason: format!(
                "{} (keyring {})",
                reason.into(),
                self.keyring.path().display()
            ),
            retryable: false,
        }
    }
}

/// The associated data of a data key wrapped by KEK `name` version `version`.
fn wrap_aad(name: &str, version: u32) -> Vec<u8> {
    let mut aad = Vec::with_capacity(32 + name.len());
    aad.extend_from_slice(b"saltblob/local-dek/1\0");
    aad.extend_from_slice(name.as_bytes());
    aad.push(0);
    aad.extend_from_slice(&version.to_le_bytes());
    aad
}

fn aead_key(kek: &[u8]) -> Result<LessSafeKey> {
    let key =
        UnboundKey::new(&AES_256_GCM, kek).map_err(|_| crypto_failed("AES-256-GCM key set-up"))?;
    Ok(LessSafeKey::new(key))
}

/// `key` sealed with AES-256-GCM under `kek` and associated data `aad`: a random nonce, the sealed key, the tag
/// ([`LOCAL_WRAPPED_LEN`] bytes). The local provider's and customer keys' wrapping.
pub(crate) fn wrap_key(kek: &[u8], aad: Vec<u8>, key: &Secret) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_LEN];
    fill_random(&mut nonce)?;
    let mut sealed = key.to_vec();
    aead_key(kek)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut sealed,
        )
        .map_err(|_| crypto_failed("AES-256-GCM wrapping a data key"))?;
    let mut wrapped = Vec::with_capacity(LOCAL_WRAPPED_LEN);
    wrapped.extend_from_slice(&nonce);
    wrapped.extend_from_slice(&sealed);
    Ok(wrapped)
}

/// The key [`wrap_key`] sealed in `wrapped` under `kek` and `aad`; `Err` saying why it does not open.
pub(crate) fn unwrap_key(
    kek: &[u8],
    aad: Vec<u8>,
    wrapped: &[u8],
) -> Result<std::result::Result<Secret, String>> {
    if wrapped.len() != LOCAL_WRAPPED_LEN {
        return Ok(Err(format!(
            "a wrapped key of {} bytes; {LOCAL_WRAPPED_LEN} expected",
            wrapped.len()
        )));
    }
    let (nonce, sealed) = wrapped.split_at(NONCE_LEN);
    let Ok(nonce) = Nonce::try_assume_unique_for_key(nonce) else {
        return Ok(Err("a wrapped key without its nonce".into()));
    };
    let mut buf = zeroize::Zeroizing::new(sealed.to_vec());
    let Ok(opened) = aead_key(kek)?.open_in_place(nonce, Aad::from(aad), &mut buf) else {
        return Ok(Err(
            "the wrapped data key does not open under it (wrapped by another key, or changed)"
                .into(),
        ));
    };
    let mut key = Secret::new([0; KEY_LEN]);
    key.copy_from_slice(opened);
    Ok(Ok(key))
}

#[async_trait::async_trait]
impl KeyProvider for LocalProvider {
    fn name(&self) -> &'static str {
        LOCAL
    }

    async fn new_data_key(&self, name: &str) -> Result<DataKey> {
        self.wrap_data_key(name, &random_key()?).await
    }

    async fn wrap_data_key(&self, name: &str, key: &Secret) -> Result<DataKey> {
        let Some(kek) = self.keyring.current(name) else {
            let reason = if self.keyring.keks().iter().any(|k| k.name == name) {
                "every version is retired: rotate it to make a new one"
            } else {
                "no such key: add it with saltblob keyring add"
            };
            return Err(self.unavailable(format!("{name:?}"), reason));
        };
        let wrapped = wrap_key(kek.key(), wrap_aad(&kek.name, kek.version), key)?;
        let key = key.clone();
        Ok(DataKey {
            key,
            wrapped,
            kek: KekRef {
                provider: LOCAL,
                name: kek.name.clone(),
                version: kek.version,
            },
        })
    }

    async fn open_data_key(&self, kek_ref: &KekRef, wrapped: &[u8]) -> Result<Secret> {
        let Some(kek) = self.keyring.get(&kek_ref.name, kek_ref.version) else {
            return Err(self.unavailable(kek_ref, "no such key version in the keyring"));
        };
        if kek.state == KekState::Retired {
            return Err(self.unavailable(kek_ref, "the key version is retired"));
        }
        unwrap_key(kek.key(), wrap_aad(&kek.name, kek.version), wrapped)?
            .map_err(|reason| self.unavailable(kek_ref, reason))
    }
}

/// `key` once its key id and wrapped form fit a manifest's encryption block (a byte and two bytes of length): a
/// provider that made longer ones is refused rather than recorded cut.
///
/// # Errors
/// [`Error::KeyUnavailable`] naming the key.
pub fn recordable(key: DataKey) -> Result<DataKey> {
    let too_long = if key.kek.name.len() > usize::from(u8::MAX) {
        Some(format!("its id is {} bytes, over 255", key.kek.name.len()))
    } else if key.wrapped.len() > usize::from(u16::MAX) {
        Some(format!(
            "its wrapped data key is {} bytes, over 65535",
            key.wrapped.len()
        ))
    } else {
        None
    };
    match too_long {
        None => Ok(key),
        Some(reason) => Err(Error::KeyUnavailable {
            provider: key.kek.provider,
            key: key.kek.to_string(),
            reason: format!("{reason}: a manifest cannot record it"),
            retryable: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local provider over a new keyring of keys `a` and `b` (version 1 each), and the keyring's path.
    pub(super) fn provider(dir: &tempfile::TempDir) -> (LocalProvider, PathBuf) {
        let path = dir.path().join("keys");
        let mut ring = Keyring::create(&path).unwrap();
        ring.add("a", 1).unwrap();
        ring.add("b", 1).unwrap();
        (LocalProvider::new(ring), path)
    }

    #[tokio::test]
    async fn data_keys_open_only_under_the_key_and_version_that_wrapped_them() {
        let dir = tempfile::tempdir().unwrap();
        let (local, path) = provider(&dir);
        let made = local.new_data_key("a").await.unwrap();
        assert_eq!(made.wrapped.len(), LOCAL_WRAPPED_LEN);
        assert_eq!(
            made.kek,
            KekRef {
                provider: LOCAL,
                name: "a".into(),
                version: 1
            }
        );
        assert_eq!(
            local.open_data_key(&made.kek, &made.wrapped).await.unwrap(),
            made.key
        );
        let other = local.new_data_key("a").await.unwrap();
        assert_ne!(other.key, made.key, "a new random key each time");
        assert_ne!(
            other.wrapped[..NONCE_LEN],
            made.wrapped[..NONCE_LEN],
            "and a new nonce"
        );

        // Another key, another version, a changed byte: refused, naming the key.
        let b = KekRef {
            name: "b".into(),
            ..made.kek.clone()
        };
        let e = local.open_data_key(&b, &made.wrapped).await.unwrap_err();
        assert!(
            matches!(&e, Error::KeyUnavailable { provider: "local", key, .. } if key.contains("\"b\"")),
            "{e}"
        );
        assert!(!e.is_retryable());
        let v2 = KekRef {
            version: 2,
            ..made.kek.clone()
        };
        assert!(
            local
                .open_data_key(&v2, &made.wrapped)
                .await
                .unwrap_err()
                .to_string()
                .contains("no such key version")
        );
        for i in 0..made.wrapped.len() {
            let mut bad = made.wrapped.clone();
            bad[i] ^= 1;
            assert!(
                local.open_data_key(&made.kek, &bad).await.is_err(),
                "byte {i}"
            );
        }
        assert!(
            local
                .open_data_key(&made.kek, &made.wrapped[1..])
                .await
                .is_err()
        );
        let e = local.new_data_key("zzz").await.unwrap_err().to_string();
        assert!(
            e.contains("no such key") && e.contains(&path.display().to_string()),
            "{e}"
        );

        // After a rotation new keys use version 2; version 1 still opens what it wrapped.
        let mut ring = Keyring::open(&path).unwrap();
        ring.rotate("a", 2).unwrap();
        let rotated = LocalProvider::open(&path).unwrap();
        let newer = rotated.new_data_key("a").await.unwrap();
        assert_eq!(newer.kek.version, 2);
        assert_eq!(
            rotated
                .open_data_key(&made.kek, &made.wrapped)
                .await
                .unwrap(),
            made.key
        );
        assert!(!format!("{newer:?}").contains("key:"), "Debug shows no key");
    }

    #[test]
    fn data_keys_a_manifest_cannot_record_are_refused_not_cut() {
        let key = |name_len: usize, wrapped_len: usize| DataKey {
            key: Secret::new([7; KEY_LEN]),
            wrapped: vec![1; wrapped_len],
            kek: KekRef {
                provider: AWS_KMS,
                name: "k".repeat(name_len),
                version: 0,
            },
        };
        assert!(recordable(key(255, 65_535)).is_ok());
        for (name_len, wrapped_len, says) in [(256, 10, "over 255"), (10, 65_536, "over 65535")] {
            let e = recordable(key(name_len, wrapped_len)).expect_err("too long");
            assert!(
                matches!(&e, Error::KeyUnavailable { reason, .. } if reason.contains(says)),
                "{e}"
            );
        }
    }
}
