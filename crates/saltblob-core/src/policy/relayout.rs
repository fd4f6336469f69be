//! Re-laying existing blobs out under the store's policy ([`BlobStore::relayout`], `saltblob relayout`): a
//! layout is fixed when a blob is written, so lowering the fan-out threshold (or any other part of the policy)
//! changes only new blobs until the old ones are rewritten. Each rewrite is a put of the bytes read, conditional
//! on the version read ([`PutCondition::IfVersion`]): a writer that commits in between wins, and nothing is lost.
//! [`BlobStore::encrypt`] (`saltblob encrypt`) is the same rewrite, of a plaintext blob, sealed under a key.

use std::time::Duration;

use futures::StreamExt;

use crate::base::error::{Error, Result};
use crate::encryption::CUSTOMER;
use crate::format::layout::Layout;
use crate::format::manifest::{Manifest, ManifestBody, SEALED_METADATA_KEY};
use crate::schedule::PriorityClass;
use crate::state::config::{GetOptions, LateMetadata, PutCondition, PutOptions};
use crate::store::BlobStore;
use crate::store::{BlobStream, StreamReader};

/// What [`BlobStore::relayout`] did with one blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relaid {
    /// Rewritten under the policy: its layout before and after, and its size.
    Moved {
        /// The layout it had.
        from: Layout,
        /// The layout it has now.
        to: Layout,
        /// Its size in bytes.
        bytes: u64,
    },
    /// Already laid out as the policy says: left alone.
    Fits,
    /// Replaced or deleted by a writer while it was rewritten: the writer's version stands, untouched.
    LostToAWriter,
    /// Left alone for the reason given (a multipart blob, an expired one, a key gone before it was read).
    Skipped(&'static str),
}

/// Why a version sealed under a customer key is not rewritten: it cannot be read without the key.
const CUSTOMER_SEALED: &str = "sealed under a customer key, which only its holder has";

/// Whether `e` is the refusal of a read of a version sealed under a customer key, made without it.
fn is_customer_sealed(e: &Error) -> bool {
    matches!(e, Error::KeyUnavailable { provider, .. } if *provider == CUSTOMER)
}

impl BlobStore {
    /// Whether `manifest` is laid out as this store's policy lays out a blob of its size. A segmented
    /// (multipart) blob always fits: its parts keep the layout they were uploaded with.
    pub fn fits_policy(&self, manifest: &Manifest) -> bool {
        matches!(manifest.body, ManifestBody::Segmented(_))
            || manifest.layout() == self.config().policy.layout_for(manifest.size)
    }

    /// Rewrites `key` under this store's policy if its layout differs ([`BlobStore::fits_policy`]), as a put
    /// conditional on the version it read, in `class` (default `bulk`). Content type, metadata and expiry are
    /// kept (the expiry to within the rewrite's duration: the remaining time is put as a ttl). The rewrite
    /// streams in the store's in-flight window, whatever the blob's size.
    ///
    /// # Errors
    /// What the read or the put returns, other than a lost race ([`Relaid::LostToAWriter`]).
    pub async fn relayout(
        &self,
        key: impl AsRef<[u8]>,
        class: Option<PriorityClass>,
    ) -> Result<Relaid> {
        let class = class.unwrap_or_else(PriorityClass::bulk);
        let opts = GetOptions::new().with_priority(class.clone());
        match self.get_stream_with(key.as_ref(), &opts).await {
            Ok(stream) => self.relayout_stream(key, stream, Some(class)).await,
            Err(Error::NotFound { .. }) => Ok(Relaid::Skipped("gone before it was read")),
            Err(e) if is_customer_sealed(&e) => Ok(Relaid::Skipped(CUSTOMER_SEALED)),
            Err(e) => Err(e),
        }
    }

    /// [`BlobStore::relayout`] of the version `stream` reads (from [`BlobStore::get_stream`] of `key`): the
    /// rewrite commits only if that version is still current.
    ///
    /// # Errors
    /// As [`BlobStore::relayout`].
    pub async fn relayout_stream(
        &self,
        key: impl AsRef<[u8]>,
        stream: BlobStream,
        class: Option<PriorityClass>,
    ) -> Result<Relaid> {
        let read = stream.manifest.clone();
        if matches!(read.body, ManifestBody::Segmented(_)) {
            return Ok(Relaid::Skipped("multipart: its parts keep their layout"));
        }
        if self.fits_policy(&read) {
            return Ok(Relaid::Fits);
        }
        if read.sealed_by().is_some_and(|s| s.kek.provider == CUSTOMER) {
            return Ok(Relaid::Skipped(CUSTOMER_SEALED));
        }
        // A sealed blob stays sealed under its key: a rewrite never stores plaintext.
        let seal_under = read.sealing.as_ref().map(|s| s.kek.name.clone());
        self.rewrite(key, stream, class, seal_under).await
    }

    /// Seals `key` under key-encryption key `kek` if it is plaintext: a rewrite conditional on the version read,
    /// in `class` (default `bulk`), keeping content type, metadata and expiry ([`BlobStore::relayout`]'s rewrite).
    /// A sealed blob is left alone ([`Relaid::Fits`]); so is a multipart one, whose segments cannot be sealed yet.
    ///
    /// # Errors
    /// What the read or the put returns (an unknown key: [`Error::KeyUnavailable`]), other than a lost race.
    pub async fn encrypt(
        &self,
        key: impl AsRef<[u8]>,
        kek: &str,
        class: Option<PriorityClass>,
    ) -> Result<Relaid> {
        let class = class.unwrap_or_else(PriorityClass::bulk);
        let opts = GetOptions::new().with_priority(class.clone());
        let stream = match self.get_stream_with(key.as_ref(), &opts).await {
            Ok(stream) => stream,
            Err(Error::NotFound { .. }) => return Ok(Relaid::Skipped("gone before it was read")),
            // Sealed already, under a key only its holder has.
            Err(e) if is_customer_sealed(&e) => return Ok(Relaid::Fits),
            Err(e) => return Err(e),
        };
        let read = &stream.manifest;
        if read.sealing.is_some() {
            return Ok(Relaid::Fits);
        }
        if matches!(
            read.body,
            crate::format::manifest::ManifestBody::Segmented(_)
        ) {
            return Ok(Relaid::Skipped(
                "multipart: its segments cannot be sealed yet",
            ));
        }
        self.rewrite(key, stream, Some(class), Some(kek.to_owned()))
            .await
    }

    /// Rewrites the version `stream` reads (from [`BlobStore::get_stream`] of `key`) as a put conditional on that
    /// version, in `class` (default `bulk`), sealed under `seal_under` when given, keeping content type,
    /// metadata and expiry (see [`BlobStore::relayout`]).
    pub(crate) async fn rewrite(
        &self,
        key: impl AsRef<[u8]>,
        stream: BlobStream,
        class: Option<PriorityClass>,
        seal_under: Option<String>,
    ) -> Result<Relaid> {
        let read = stream.manifest.clone();
        let mut opts = PutOptions::new()
            .with_size_hint(read.size)
            .with_condition(PutCondition::IfVersion(read.version))
            .with_priority(class.unwrap_or_else(PriorityClass::bulk));
        opts.content_type = read.content_type.clone();
        opts.metadata = read.metadata.clone();
        // Sealed metadata is sealed under the version read's keys: opened, it is the new version's late metadata,
        // sealed again under its keys (or in the clear, for a plaintext one).
        if opts.metadata.remove(SEALED_METADATA_KEY).is_some() {
            let late = LateMetadata::new();
            for (k, v) in self.sealed_metadata(key.as_ref(), &read, None).await? {
                late.insert(k, v);
            }
            opts.late_metadata = Some(late);
        }
        opts.encryption_key = seal_under;
        if let Some(expires) = read.expires_micros {
            let now = self.config().clock.now_micros();
            if expires <= now {
                return Ok(Relaid::Skipped("expired"));
            }
            opts.ttl = Some(Duration::from_micros(expires - now));
        }
        let reader = StreamReader::new(stream.boxed());
        match self.put_stream(key.as_ref(), reader, &opts).await {
            Ok(written) => Ok(Relaid::Moved {
                from: read.layout(),
                to: written.layout(),
                bytes: read.size,
            }),
            Err(Error::PreconditionFailed { .. } | Error::NotFound { .. }) => {
                Ok(Relaid::LostToAWriter)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::memory::MemoryStore;
    use crate::base::units::KIB;
    use crate::format::layout::LayoutPolicy;
    use crate::state::config::StoreConfig;

    fn store(backend: &Arc<dyn ChunkStore>, fanout: u64) -> BlobStore {
        let policy = LayoutPolicy::default()
            .with_inline_limit(100)
            .with_single_chunk_size(4096)
            .with_fanout_threshold(fanout)
            .with_max_salt(8);
        BlobStore::new(
            Arc::clone(backend),
            StoreConfig::default().with_policy(policy),
        )
        .unwrap()
    }

    fn body(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[tokio::test]
    async fn blobs_are_relaid_under_the_new_policy_keeping_their_attributes() {
        let backend: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        let old = store(&backend, 1 << 20);
        let opts = PutOptions::new()
            .with_content_type("video/mp4")
            .with_metadata("camera", "front")
            .with_ttl(Duration::from_secs(3600));
        let before = old
            .put("big", body(64 * KIB as usize, 1), &opts)
            .await
            .unwrap();
        old.put("small", body(50, 2), &PutOptions::new())
            .await
            .unwrap();
        assert!(matches!(before.layout(), Layout::Chunked(l) if l.salt_count == 1));

        let new = store(&backend, 16 * KIB);
        assert!(!new.fits_policy(&before));
        let outcome = new.relayout("big", None).await.unwrap();
        let Relaid::Moved { from, to, bytes } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!((from, bytes), (before.layout(), 64 * KIB));
        assert!(
            matches!(to, Layout::Chunked(l) if l.salt_count == 8),
            "{to:?}"
        );
        let after = new.head("big").await.unwrap();
        assert_eq!(new.get("big").await.unwrap(), body(64 * KIB as usize, 1));
        assert_eq!(after.content_type.as_deref(), Some("video/mp4"));
        assert_eq!(after.metadata, before.metadata);
        let kept = after
            .expires_micros
            .unwrap()
            .abs_diff(before.expires_micros.unwrap());
        assert!(
            kept < 5_000_000,
            "expiry kept to within the rewrite: {kept} µs"
        );
        assert_eq!(new.relayout("big", None).await.unwrap(), Relaid::Fits);
        assert_eq!(new.relayout("small", None).await.unwrap(), Relaid::Fits);
        assert_eq!(
            new.relayout("none", None).await.unwrap(),
            Relaid::Skipped("gone before it was read")
        );
    }

    /// The read and the rewrite run in `bulk` by default, though a blob of one partition is otherwise read and
    /// written as `interactive`; a class given wins.
    #[tokio::test]
    async fn a_relayout_runs_in_the_bulk_class_unless_told_otherwise() {
        use crate::schedule::{BULK, INTERACTIVE};

        let backend: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        let old = store(&backend, 1 << 20);
        for key in ["a", "b"] {
            old.put(key, body(64 * KIB as usize, 3), &PutOptions::new())
                .await
                .unwrap();
        }
        // Larger chunks, still one partition: by its layout, the blob is read and written as interactive.
        let policy = old.config().policy.clone().with_single_chunk_size(8192);
        let new = BlobStore::new(
            Arc::clone(&backend),
            StoreConfig::default().with_policy(policy),
        )
        .unwrap();
        let class = |name: &str| {
            let stats = new.scheduler_stats();
            stats.classes.into_iter().find(|c| c.name == name).unwrap()
        };
        let moved = |r: Relaid| matches!(r, Relaid::Moved { .. });
        assert!(moved(new.relayout("a", None).await.unwrap()));
        let (bulk, interactive) = (class(BULK), class(INTERACTIVE));
        assert_eq!(interactive.admitted, 0, "{interactive:?}");
        assert!(bulk.bytes >= 2 * 64 * KIB, "read and written: {bulk:?}");

        let told = Some(PriorityClass::interactive());
        assert!(moved(new.relayout("b", told).await.unwrap()));
        assert_eq!(class(BULK), bulk, "nothing more in bulk");
        assert!(class(INTERACTIVE).bytes >= 2 * 64 * KIB);
    }

    #[tokio::test]
    async fn encrypt_seals_plaintext_blobs_and_leaves_sealed_ones() {
        use crate::encryption::{EncryptionConfig, Keyring, LocalProvider};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        Keyring::create(&path).unwrap().add("t", 1).unwrap();
        let backend: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        let plain = store(&backend, 1 << 20);
        let opts = PutOptions::new().with_metadata("camera", "front");
        let before = plain
            .put("big", body(64 * KIB as usize, 1), &opts)
            .await
            .unwrap();
        plain
            .put("small", body(50, 2), &PutOptions::new())
            .await
            .unwrap();
        let provider = Arc::new(LocalProvider::open(&path).unwrap());
        let keyed = BlobStore::new(
            Arc::clone(&backend),
            StoreConfig::default().with_encryption(EncryptionConfig::new(provider)),
        )
        .unwrap();
        for (key, size) in [("big", 64 * KIB), ("small", 50)] {
            let Relaid::Moved { bytes, .. } = keyed.encrypt(key, "t", None).await.unwrap() else {
                panic!("{key} not sealed");
            };
            assert_eq!(bytes, size);
            let m = keyed.head(key).await.unwrap();
            assert_eq!(
                m.sealing.as_ref().map(|s| s.kek.name.as_str()),
                Some("t"),
                "{key}"
            );
            assert_eq!(
                keyed.encrypt(key, "t", None).await.unwrap(),
                Relaid::Fits,
                "{key}"
            );
        }
        assert_eq!(keyed.get("big").await.unwrap(), body(64 * KIB as usize, 1));
        assert_eq!(keyed.head("big").await.unwrap().metadata, before.metadata);
        assert!(matches!(
            plain.get("big").await,
            Err(Error::KeyUnavailable { .. })
        ));
        assert!(matches!(
            keyed.encrypt("small2", "no-such", None).await.unwrap(),
            Relaid::Skipped(_)
        ));
        keyed
            .put("plain2", body(5000, 3), &PutOptions::new())
            .await
            .unwrap();
        assert!(matches!(
            keyed.encrypt("plain2", "no-such", None).await,
            Err(Error::KeyUnavailable { .. })
        ));
        assert!(
            keyed.head("plain2").await.unwrap().sealing.is_none(),
            "nothing changed"
        );

        // A sealed version rewritten keeps its sealed metadata, sealed again under the new version's keys.
        let late = crate::state::config::LateMetadata::new();
        late.insert("s3:checksum-crc32", "AAAAAA==");
        let opts = PutOptions::new()
            .with_encryption_key("t")
            .with_late_metadata(late.clone());
        let sealed = keyed.put("sealed", body(5000, 4), &opts).await.unwrap();
        let stream = keyed.get_stream("sealed").await.unwrap();
        let rewritten = keyed.rewrite("sealed", stream, None, Some("t".into()));
        assert!(matches!(rewritten.await.unwrap(), Relaid::Moved { .. }));
        let m = keyed.head("sealed").await.unwrap();
        assert_ne!(m.version, sealed.version);
        assert_eq!(
            keyed.sealed_metadata("sealed", &m, None).await.unwrap(),
            late.entries()
        );
    }

    #[tokio::test]
    async fn a_writer_committing_during_a_relayout_wins() {
        let backend: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        let writer = store(&backend, 1 << 20);
        writer
            .put("k", body(64 * KIB as usize, 1), &PutOptions::new())
            .await
            .unwrap();
        let relayout = store(&backend, 16 * KIB);
        // The relayout has read the version; a writer commits before the rewrite does.
        let stream = relayout.get_stream("k").await.unwrap();
        let theirs = writer
            .put("k", body(30 * KIB as usize, 9), &PutOptions::new())
            .await
            .unwrap();
        let outcome = relayout.relayout_stream("k", stream, None).await.unwrap();
        assert_eq!(outcome, Relaid::LostToAWriter);
        assert_eq!(relayout.head("k").await.unwrap().version, theirs.version);
        assert_eq!(relayout.get("k").await.unwrap(), body(30 * KIB as usize, 9));
        // A delete in between wins too.
        let stream = relayout.get_stream("k").await.unwrap();
        writer.delete("k").await.unwrap();
        assert_eq!(
            relayout.relayout_stream("k", stream, None).await.unwrap(),
            Relaid::LostToAWriter
        );
        assert!(matches!(
            relayout.get("k").await,
            Err(Error::NotFound { .. })
        ));
    }
}
