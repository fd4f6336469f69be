//! What a sealed version keeps sealed beside its chunks (`docs/format.md`, "Sealed metadata"): its sealed
//! metadata opened, or entries sealed under a version's keys, and the fingerprint of a customer key in the store.
//! Adds methods to [`BlobStore`].

use std::collections::BTreeMap;

use super::BlobStore;
use super::sealing;
use crate::base::error::{Error, Result};
use crate::base::shown::{hex, unhex};
use crate::base::version::VersionId;
use crate::encryption::{CustomerKey, KekRef, Sealing};
use crate::format::manifest::{Manifest, SEALED_METADATA_KEY, decode_entries, encode_entries};

impl BlobStore {
    /// The sealed metadata of version `manifest` of `key` ([`SEALED_METADATA_KEY`]: what its put learnt from the
    /// body, such as checksums), opened with the keys of its sealed part ([`Manifest::sealed_part`]), given
    /// `customer` for a version sealed under a customer key. Empty when it has none (a plaintext version, or one
    /// written before sealed metadata existed, whose entries are in its metadata in the clear).
    ///
    /// # Errors
    /// As a read of the version without the right key ([`Error::KeyUnavailable`]); [`Error::Corrupt`] when the
    /// entry does not open.
    pub async fn sealed_metadata(
        &self,
        key: impl AsRef<[u8]>,
        manifest: &Manifest,
        customer: Option<&CustomerKey>,
    ) -> Result<BTreeMap<String, String>> {
        match (
            manifest.metadata.get(SEALED_METADATA_KEY),
            manifest.sealed_part(),
        ) {
            (Some(value), Some((version, sealing))) => {
                self.open_metadata(key, version, sealing, customer, value)
                    .await
            }
            _ => Ok(BTreeMap::new()),
        }
    }

    /// Whether `kek` (the record of a customer key in a manifest of this store, [`Manifest::sealed_by_customer`])
    /// names `customer`: a check before a read, which the read repeats.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the store id is missing (a store with sealed versions has one), a backend error.
    pub async fn customer_key_names(&self, customer: &CustomerKey, kek: &KekRef) -> Result<bool> {
        Ok(customer.names(&sealing::store_id(&self.inner, false).await?, kek))
    }

    /// `customer`'s fingerprint in this store ([`CustomerKey::fingerprint_in`]), what a record that names the key
    /// (a multipart upload's) keeps: it links nothing across stores. Makes the store id if there is none yet.
    ///
    /// # Errors
    /// A backend error.
    pub async fn customer_fingerprint(&self, customer: &CustomerKey) -> Result<String> {
        Ok(customer.fingerprint_in(&sealing::store_id(&self.inner, true).await?))
    }

    /// `entries` sealed under the keys of version `version` of `key`, sealed as `sealing` says: the value of a
    /// [`SEALED_METADATA_KEY`] entry (of a record about that version, or of a version composed of it), which
    /// [`BlobStore::open_metadata`] opens.
    ///
    /// # Errors
    /// As [`BlobStore::sealed_metadata`].
    pub async fn seal_metadata(
        &self,
        key: impl AsRef<[u8]>,
        version: VersionId,
        sealing: &Sealing,
        customer: Option<&CustomerKey>,
        entries: &BTreeMap<String, String>,
    ) -> Result<String> {
        let keys = sealing::open(&self.inner, key.as_ref(), version, sealing, customer).await?;
        Ok(hex(&keys.seal_note(&encode_entries(entries))?))
    }

    /// The entries [`BlobStore::seal_metadata`] sealed in `value` under version `version` of `key`.
    ///
    /// # Errors
    /// As [`BlobStore::sealed_metadata`].
    pub async fn open_metadata(
        &self,
        key: impl AsRef<[u8]>,
        version: VersionId,
        sealing: &Sealing,
        customer: Option<&CustomerKey>,
        value: &str,
    ) -> Result<BTreeMap<String, String>> {
        let keys = sealing::open(&self.inner, key.as_ref(), version, sealing, customer).await?;
        let note =
            unhex(value).ok_or_else(|| Error::corrupt("sealed metadata", "not hex".to_owned()))?;
        decode_entries(&keys.open_note(&note)?)
    }
}
