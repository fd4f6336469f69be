//! Keys the writer gives with each request (S3's SSE-C; `docs/format.md`, "Customer keys"): a version's data key
//! is wrapped under the given key, which is never stored. Its manifest records provider `customer`, the key's
//! fingerprint as the key id, and the wrapped data key; a read must give the same key again.

use std::fmt;

use super::{
    CUSTOMER, DataKey, KEY_LEN, KekRef, Sealing, Secret, random_key, unwrap_key, wrap_key,
};
use crate::base::error::{Error, Result};

/// Bytes of a customer key's fingerprint ([`CustomerKey::id`] is their hex form).
pub const CUSTOMER_ID_LEN: usize = 16;

/// The BLAKE3 key-derivation context of fingerprints (never change it: manifests record fingerprints).
const FINGERPRINT_CONTEXT: &str = "saltblob 2026-11-26 customer key fingerprint";

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

    /// The key's fingerprint: 32 hex digits of a keyed BLAKE3 hash of it, recorded in the manifests it seals
    /// (it tells which key a version needs and reveals nothing usable about the key).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A new random data key wrapped under this key.
    ///
    /// # Errors
    /// When the system's random number generator or AES-256-GCM fails.
    pub(crate) fn new_data_key(&self) -> Result<DataKey> {
        let key = random_key()?;
        let wrapped = wrap_key(&self.key[..], self.aad(), &key)?;
        Ok(DataKey {
            key,
            wrapped,
            kek: KekRef {
                provider: CUSTOMER,
                name: self.id.clone(),
                version: 0,
            },
        })
    }

    /// The data key of a version sealed as `sealing` says.
    ///
    /// # Errors
    /// [`Error::KeyUnavailable`] (provider `customer`) when `sealing` was made under another key, or its wrapped
    /// key was changed.
    pub(crate) fn open_data_key(&self, sealing: &Sealing) -> Result<Secret> {
        if sealing.kek.name != self.id {
            return Err(mismatch(
                sealing,
                format!(
                    "the key given is {}, not the one it was sealed with",
                    self.id
                ),
            ));
        }
        unwrap_key(&self.key[..], self.aad(), &sealing.wrapped)?
            .map_err(|reason| mismatch(sealing, reason))
    }

    /// The associated data of a data key wrapped under this key.
    fn aad(&self) -> Vec<u8> {
        let mut aad = Vec::with_capacity(24 + self.id.len());
        aad.extend_from_slice(b"saltblob/customer-dek/1\0");
        aad.extend_from_slice(self.id.as_bytes());
        aad
    }
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

    #[test]
    fn data_keys_open_only_under_the_key_that_wrapped_them() {
        let a = CustomerKey::new([1; KEY_LEN]);
        let b = CustomerKey::new([2; KEY_LEN]);
        assert_eq!(a.id().len(), 2 * CUSTOMER_ID_LEN);
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id(), CustomerKey::new([1; KEY_LEN]).id(), "stable");
        let made = a.new_data_key().unwrap();
        assert_eq!(made.kek.provider, CUSTOMER);
        assert_eq!(made.kek.name, a.id());
        let sealing = sealing_of(&made);
        assert_eq!(a.open_data_key(&sealing).unwrap(), made.key);

        let e = b.open_data_key(&sealing).unwrap_err();
        assert!(
            matches!(&e, Error::KeyUnavailable { provider: "customer", key, reason, .. }
                if key.contains(a.id()) && reason.contains(b.id())),
            "{e}"
        );
        // Another key under the same fingerprint (a forged manifest) does not open it either.
        let forged = Sealing {
            kek: KekRef {
                name: b.id().to_owned(),
                ..made.kek.clone()
            },
            ..sealing.clone()
        };
        assert!(b.open_data_key(&forged).is_err());
        for i in 0..made.wrapped.len() {
            let mut bad = sealing.clone();
            bad.wrapped[i] ^= 1;
            assert!(a.open_data_key(&bad).is_err(), "byte {i}");
        }
        let mut short = sealing;
        short.wrapped.pop();
        assert!(a.open_data_key(&short).is_err());
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
