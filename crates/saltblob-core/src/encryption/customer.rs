//! Keys the writer gives with each request (S3's SSE-C; `docs/format.md`, "Customer keys"): a version's data key
//! is wrapped under the given key, which is never stored. Its manifest records provider `customer`, the key's
//! fingerprint in this store as the key id (version [`FINGERPRINT_PER_STORE`]; version 0, written before, is
//! the same in every store), and the wrapped data key; a read must give the same key again.

use std::fmt;

use super::{
    CUSTOMER, DataKey, KEY_LEN, KekRef, STORE_ID_LEN, Sealing, Secret, random_key, unwrap_key,
    wrap_key,
};
use crate::base::error::{Error, Result};

/// Bytes of a customer key's fingerprint ([`CustomerKey::id`] is their hex form).
pub const CUSTOMER_ID_LEN: usize = 16;

/// The BLAKE3 key-derivation context of fingerprints (never change it: manifests record fingerprints).
const FINGERPRINT_CONTEXT: &str = "saltblob 2026-11-26 customer key fingerprint";
/// The BLAKE3 key-derivation context of fingerprints in one store (never change it either).
const STORE_FINGERPRINT_CONTEXT: &str = "saltblob 2026-12-02 customer key fingerprint in a store";
/// The key version a manifest records for a customer key named by its fingerprint in the store
/// ([`CustomerKey::fingerprint_in`]); version 0 names it by [`CustomerKey::id`], the same in every store.
pub const FINGERPRINT_PER_STORE: u32 = 1;

/// A 256-bit key given by the writer of a version and needed again by each of its readers
/// ([`crate::state::config::PutOptions::customer_key`], [`crate::state::config::GetOptions::customer_key`]). Zeroed when dropped; `Debug` and
/// `Display` show only its fingerprint.
#[derive(Clone)]
pub struct CustomerKey {
    key: Secret,
    id: String,
}

impl CustomerKey {
    /// The key of bytes `key`.
    pub fn new(key: [u8; KEY_LEN]) -> Self {
        let key = Secret::new(key);
        let digest = blake3::derive_key(FINGERPRINT_CONTEXT, &key[..]);
        let id = crate::base::shown::hex(&digest[..CUSTOMER_ID_LEN]);
        Self { key, id }
    }

    /// The key of `bytes`, which must be 32 bytes long.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for any other length.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let key = <[u8; KEY_LEN]>::try_from(bytes).map_err(|_| {
            Error::invalid(
                "customer key",
                format!(
                    "{} bytes; a customer key is 256 bits (32 bytes)",
                    bytes.len()
                ),
            )
        })?;
        Ok(Self::new(key))
    }

    /// The key's fingerprint: 32 hex digits of a keyed BLAKE3 hash of it, the same in every store. Shown in
    /// messages; manifests written before fingerprints were per store record it (version 0). New versions
    /// record [`CustomerKey::fingerprint_in`] their store instead, so that versions of two stores sealed under
    /// one key cannot be linked by their manifests.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key's fingerprint in the store of id `store_id`: 32 hex digits of a BLAKE3 hash of the key and the
    /// store id, recorded (as key version [`FINGERPRINT_PER_STORE`]) in the manifests it seals there.
    pub fn fingerprint_in(&self, store_id: &[u8; STORE_ID_LEN]) -> String {
        let mut hasher = blake3::Hasher::new_derive_key(STORE_FINGERPRINT_CONTEXT);
        hasher.update(&self.key[..]);
        hasher.update(store_id);
        crate::base::shown::hex(&hasher.finalize().as_bytes()[..CUSTOMER_ID_LEN])
    }

    /// Whether `kek` (a manifest's record of a customer key, in the store `store_id`) names this key.
    pub fn names(&self, store_id: &[u8; STORE_ID_LEN], kek: &KekRef) -> bool {
        self.fingerprint_for(store_id, kek)
            .is_some_and(|fingerprint| fingerprint == kek.name)
    }

    /// This key's fingerprint in the form `kek`'s version says; `None` for a version no build wrote.
    fn fingerprint_for(&self, store_id: &[u8; STORE_ID_LEN], kek: &KekRef) -> Option<String> {
        match kek.version {
            0 => Some(self.id.clone()),
            FINGERPRINT_PER_STORE => Some(self.fingerprint_in(store_id)),
            _ => None,
        }
    }

    /// A new random data key wrapped under this key, for a version of the store `store_id`.
    ///
    /// # Errors
    /// When the system's random number generator or AES-256-GCM fails.
    pub(crate) fn new_data_key(&self, store_id: &[u8; STORE_ID_LEN]) -> Result<DataKey> {
        let key = random_key()?;
        let name = self.fingerprint_in(store_id);
        let wrapped = wrap_key(&self.key[..], aad(&name), &key)?;
        Ok(DataKey {
            key,
            wrapped,
            kek: KekRef {
                provider: CUSTOMER,
                name,
                version: FINGERPRINT_PER_STORE,
            },
        })
    }

    /// The data key of a version of the store `store_id` sealed as `sealing` says.
    ///
    /// # Errors
    /// [`Error::KeyUnavailable`] (provider `customer`) when `sealing` was made under another key, or its wrapped
    /// key was changed.
    pub(crate) fn open_data_key(
        &self,
        store_id: &[u8; STORE_ID_LEN],
        sealing: &Sealing,
    ) -> Result<Secret> {
        let Some(name) = self
            .fingerprint_for(store_id, &sealing.kek)
            .filter(|name| *name == sealing.kek.name)
        else {
            return Err(mismatch(
                sealing,
                format!(
                    "the key given is {}, not the one it was sealed with",
                    self.id
                ),
            ));
        };
        unwrap_key(&self.key[..], aad(&name), &sealing.wrapped)?
            .map_err(|reason| mismatch(sealing, reason))
    }
}

/// The associated data of a data key wrapped under the customer key of fingerprint `name` (as recorded).
fn aad(name: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(24 + name.len());
    aad.extend_from_slice(b"saltblob/customer-dek/1\0");
    aad.extend_from_slice(name.as_bytes());
    aad
}

/// The error of a read of a version sealed as `sealing` says with a key that does not open it.
fn mismatch(sealing: &Sealing, reason: String) -> Error {
    Error::KeyUnavailable {
        provider: CUSTOMER,
        key: sealing.kek.to_string(),
        reason,
        retryable: false,
    }
}

impl fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CustomerKey").field(&self.id).finish()
    }
}

impl fmt::Display for CustomerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "customer key {}", self.id)
    }
}

impl PartialEq for CustomerKey {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for CustomerKey {}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealing_of(made: &DataKey) -> Sealing {
        Sealing {
            kek: made.kek.clone(),
            wrapped: made.wrapped.clone(),
            commitment: [0; 32],
        }
    }

    const STORE: [u8; STORE_ID_LEN] = [9; STORE_ID_LEN];

    #[test]
    fn data_keys_open_only_under_the_key_that_wrapped_them() {
        let a = CustomerKey::new([1; KEY_LEN]);
        let b = CustomerKey::new([2; KEY_LEN]);
        assert_eq!(a.id().len(), 2 * CUSTOMER_ID_LEN);
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id(), CustomerKey::new([1; KEY_LEN]).id(), "stable");
        let made = a.new_data_key(&STORE).unwrap();
        assert_eq!(made.kek.provider, CUSTOMER);
        assert_eq!(made.kek.name, a.fingerprint_in(&STORE));
        assert_eq!(made.kek.version, FINGERPRINT_PER_STORE);
        assert!(a.names(&STORE, &made.kek) && !b.names(&STORE, &made.kek));
        let sealing = sealing_of(&made);
        assert_eq!(a.open_data_key(&STORE, &sealing).unwrap(), made.key);
        assert!(
            a.open_data_key(&[8; STORE_ID_LEN], &sealing).is_err(),
            "another store"
        );

        let e = b.open_data_key(&STORE, &sealing).unwrap_err();
        assert!(
            matches!(&e, Error::KeyUnavailable { provider: "customer", key, reason, .. }
                if key.contains(&a.fingerprint_in(&STORE)) && reason.contains(b.id())),
            "{e}"
        );
        // Another key under the same fingerprint (a forged manifest) does not open it either.
        let forged = Sealing {
            kek: KekRef {
                name: b.fingerprint_in(&STORE),
                ..made.kek.clone()
            },
            ..sealing.clone()
        };
        assert!(b.open_data_key(&STORE, &forged).is_err());
        for i in 0..made.wrapped.len() {
            let mut bad = sealing.clone();
            bad.wrapped[i] ^= 1;
            assert!(a.open_data_key(&STORE, &bad).is_err(), "byte {i}");
        }
        let mut short = sealing;
        short.wrapped.pop();
        assert!(a.open_data_key(&STORE, &short).is_err());
    }

    /// The same key has another fingerprint in each store; manifests written before (key version 0, the
    /// fingerprint of every store) still open, and a version no build wrote is refused.
    #[test]
    fn fingerprints_are_per_store_and_old_ones_still_open() {
        let a = CustomerKey::new([1; KEY_LEN]);
        let other = [8; STORE_ID_LEN];
        assert_ne!(a.fingerprint_in(&STORE), a.fingerprint_in(&other));
        assert_ne!(a.fingerprint_in(&STORE), a.id());
        assert_eq!(
            a.fingerprint_in(&STORE),
            CustomerKey::new([1; KEY_LEN]).fingerprint_in(&STORE)
        );
        // A data key wrapped as builds before this one did: named by the global fingerprint, version 0.
        let key = random_key().unwrap();
        let old = Sealing {
            kek: KekRef {
                provider: CUSTOMER,
                name: a.id().to_owned(),
                version: 0,
            },
            wrapped: wrap_key(&a.key[..], aad(a.id()), &key).unwrap(),
            commitment: [0; 32],
        };
        assert!(a.names(&STORE, &old.kek) && a.names(&other, &old.kek));
        assert_eq!(a.open_data_key(&STORE, &old).unwrap(), key);
        let unknown = Sealing {
            kek: KekRef {
                version: 2,
                ..old.kek.clone()
            },
            ..old.clone()
        };
        assert!(!a.names(&STORE, &unknown.kek));
        assert!(a.open_data_key(&STORE, &unknown).is_err());
    }

    #[test]
    fn the_key_never_shows() {
        let k = CustomerKey::from_slice(&[0xAB; KEY_LEN]).unwrap();
        for shown in [format!("{k:?}"), k.to_string()] {
            // The key's bytes in any form Debug or hex would print them.
            assert!(shown.contains(k.id()), "{shown}");
            assert!(!shown.contains("171") && !shown.contains("abab"), "{shown}");
        }
        let e = CustomerKey::from_slice(&[0; 16]).unwrap_err().to_string();
        assert!(e.contains("16 bytes") && e.contains("32 bytes"), "{e}");
    }
}
