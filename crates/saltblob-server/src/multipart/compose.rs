//! The compose records of a multipart upload (`upload.rs` lays out every record): what a complete composes,
//! written before the upload moves to `completing` and named by it.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::TryStreamExt;
use s3s::{S3Result, s3_error};
use saltblob_core::{BlobStore, Error, Manifest, ManifestBody, PutOptions, Segment, VersionId};

use super::upload::{RECORD_TYPE, record_bytes};
use crate::error::from_store;
use crate::keys::uploads_prefix;

/// The prefix of upload `id`'s compose records in `bucket`.
fn compose_prefix(bucket: &str, id: &str) -> String {
    format!("{}c/{id}/", uploads_prefix(bucket))
}

/// The metadata key of a sealed upload's compose record (and object) that keeps the multipart ETag of the parts
/// listed (the object's own ETag is opaque): a repeated complete compares its parts with it.
pub(crate) const PARTS_ETAG_KEY: &str = "s3:parts-etag";

/// What a complete composes: the segments in order, with the object's ETag and checksum metadata.
pub(crate) struct ComposeRecord {
    pub segments: Vec<Segment>,
    /// `s3:etag` and, for an upload with a checksum, `s3:checksum-<algorithm>` and `s3:checksum-type`; for a
    /// sealed upload also [`PARTS_ETAG_KEY`], and its checksum sealed (`saltblob:sealed`) instead of in the clear.
    pub metadata: BTreeMap<String, String>,
    /// The sealed entries of `metadata`, opened, while the complete that sealed them runs (empty once read back).
    pub opened: BTreeMap<String, String>,
}

impl ComposeRecord {
    /// Writes it for upload `id` of `bucket` under a new nonce, which it returns; the complete then names the
    /// nonce in the upload record as it moves it to `completing`.
    pub(crate) async fn write(
        &self,
        store: &BlobStore,
        bucket: &str,
        id: &str,
    ) -> S3Result<String> {
        let nonce = format!("{:032x}", VersionId::generate().0);
        let mut body = Vec::new();
        body.extend_from_slice(
            &u32::try_from(self.segments.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for segment in &self.segments {
            let encoded = segment.encode();
            body.extend_from_slice(
                &u32::try_from(encoded.len())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            );
            body.extend_from_slice(&encoded);
        }
        let mut opts = PutOptions::new().with_content_type(RECORD_TYPE);
        opts.metadata = self.metadata.clone();
        store
            .put(
                format!("{}{nonce}", compose_prefix(bucket, id)),
                body,
                &opts,
            )
            .await
            .map_err(from_store)?;
        Ok(nonce)
    }

    /// The compose record `nonce` of upload `id` of `bucket`, if there is one.
    ///
    /// # Errors
    /// `InternalError` when it does not decode; a store error.
    pub(crate) async fn read(
        store: &BlobStore,
        bucket: &str,
        id: &str,
        nonce: &str,
    ) -> S3Result<Option<Self>> {
        let key = format!("{}{nonce}", compose_prefix(bucket, id));
        let manifest = match store.head(&key).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(from_store(e)),
        };
        let body = record_bytes(store, key.as_bytes(), &manifest).await?;
        let corrupt = || s3_error!(InternalError, "a compose record does not decode");
        let mut rest = &body[..];
        let mut take = |n: usize| -> S3Result<&[u8]> {
            if rest.len() < n {
                return Err(corrupt());
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let u32_at = |b: &[u8]| -> S3Result<usize> {
            let raw = <[u8; 4]>::try_from(b).map_err(|_| corrupt())?;
            usize::try_from(u32::from_le_bytes(raw)).map_err(|_| corrupt())
        };
        let count = u32_at(take(4)?)?;
        let mut segments = Vec::with_capacity(count.min(saltblob_core::manifest::MAX_SEGMENTS));
        for _ in 0..count {
            let len = u32_at(take(4)?)?;
            let encoded = Bytes::copy_from_slice(take(len)?);
            segments.push(Segment::decode(&encoded).map_err(|_| corrupt())?);
        }
        if !rest.is_empty() {
            return Err(corrupt());
        }
        Ok(Some(Self {
            segments,
            metadata: manifest.metadata,
            opened: BTreeMap::new(),
        }))
    }

    /// Deletes every compose record of upload `id` of `bucket` (also those of completes that lost the move).
    ///
    /// # Errors
    /// A store error.
    pub(crate) async fn delete_all(store: &BlobStore, bucket: &str, id: &str) -> S3Result<()> {
        let prefix = compose_prefix(bucket, id);
        let keys: Vec<Bytes> = store
            .list_stream(prefix.as_bytes())
            .map_ok(|e| e.key)
            .try_collect()
            .await
            .map_err(from_store)?;
        for key in keys {
            store.delete(&key).await.map_err(from_store)?;
        }
        Ok(())
    }

    /// Whether `manifest` (the object's current one) is the compose of exactly these segments.
    pub(crate) fn composed(&self, manifest: &Manifest) -> bool {
        matches!(&manifest.body, ManifestBody::Segmented(s)
            if s.iter().map(|s| s.version).eq(self.segments.iter().map(|s| s.version)))
    }
}
