//! The shared base of every protocol: the store's state ([`Inner`]), manifest reads, the one paged scan over
//! [`ChunkStore::scan_records`] and the low-water marks kept in [`Namespace::Meta`].
//!
//! Everything above (the API in [`crate::store`], the intent lease, the reclaim queue, gc and fsck) reads and
//! writes records through this module; it depends on none of them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::backend::{BackendInfo, ChunkStore, Namespace, Precondition};
use crate::config::StoreConfig;
use crate::layout::Layout;
use crate::manifest::Manifest;
use crate::{Error, KeyDisplay, Result};

/// Records read per page of a scan.
pub(crate) const PAGE: usize = 512;

/// How far behind this process's clock another client's clock may run: the low-water marks of the reclaim queue
/// and of the intent scan stay this far behind what they have seen, so that entries such a client writes are not
/// skipped. One minute.
pub(crate) const CLOCK_MARGIN_MICROS: u64 = 60_000_000;

/// The state every operation of one store shares: the backend, what it can do, and the configuration.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The backend behind the store's scheduler (the backend itself when scheduling is off): every request of
    /// the core goes through this.
    pub(crate) backend: Arc<dyn ChunkStore>,
    /// The backend as given, for [`crate::BlobStore::backend`].
    pub(crate) raw_backend: Arc<dyn ChunkStore>,
    pub(crate) sched: Arc<crate::schedule::Scheduler>,
    pub(crate) info: BackendInfo,
    pub(crate) config: StoreConfig,
}

impl Inner {
    /// Now, by the store's clock ([`StoreConfig::clock`]): Unix µs.
    pub(crate) fn now_micros(&self) -> u64 {
        self.config.clock.now_micros()
    }

    /// Decodes the manifest record of `key`; errors name the key. Besides the format's own checks, a chunk
    /// size larger than this backend can hold is corruption: no put here could have written it.
    pub(crate) fn decode_manifest(&self, key: &[u8], bytes: &Bytes) -> Result<Manifest> {
        let what = || format!("manifest of key \"{}\"", KeyDisplay::from(key));
        let manifest = Manifest::decode(bytes, &what)?;
        if let Layout::Chunked(l) = manifest.layout() {
            let max = self.info.max_chunk_payload();
            if l.chunk_size > max {
                return Err(Error::corrupt(
                    what(),
                    format!(
                        "chunk size {} is larger than the {} backend's largest chunk ({max} bytes)",
                        l.chunk_size, self.info.name
                    ),
                ));
            }
        }
        Ok(manifest)
    }

    /// The current manifest of `key`, or `None` if there is none or it has expired.
    pub(crate) async fn read_manifest(&self, key: &[u8]) -> Result<Option<Manifest>> {
        let Some(bytes) = self.backend.get_record(Namespace::Manifest, key).await? else {
            return Ok(None);
        };
        let manifest = self.decode_manifest(key, &bytes)?;
        Ok(Some(manifest).filter(|m| !m.is_expired(self.now_micros())))
    }

    /// Pages through the records of `ns` whose key starts with `prefix`, after `start_after` when given.
    pub(crate) fn scan<'a>(
        &'a self,
        ns: Namespace,
        prefix: &'a [u8],
        start_after: Option<Bytes>,
    ) -> RecordPages<'a> {
        RecordPages {
            backend: &*self.backend,
            ns,
            prefix,
            after: start_after,
            done: false,
        }
    }

    /// A low-water mark of `N` bytes recorded in [`Namespace::Meta`]; `None` if absent, unreadable or of
    /// another length (the scan it bounds then starts from the beginning).
    pub(crate) async fn read_mark<const N: usize>(&self, key: &[u8]) -> Option<[u8; N]> {
        let bytes = self.backend.get_record(Namespace::Meta, key).await.ok()??;
        bytes.as_ref().try_into().ok()
    }

    /// Records a low-water mark in [`Namespace::Meta`]; a failure is logged (the next pass scans more).
    pub(crate) async fn write_mark(&self, key: &'static [u8], value: &[u8]) {
        let value = Bytes::copy_from_slice(value);
        if let Err(e) = self
            .backend
            .put_record(Namespace::Meta, key, value, &Precondition::None)
            .await
        {
            tracing::warn!(
                "could not record the low-water mark {}: {e}",
                key.escape_ascii()
            );
        }
    }
}

/// A scan of one namespace, [`PAGE`] records at a time, in key order: the one loop over
/// [`ChunkStore::scan_records`]. Made by [`Inner::scan`].
pub(crate) struct RecordPages<'a> {
    backend: &'a dyn ChunkStore,
    ns: Namespace,
    prefix: &'a [u8],
    after: Option<Bytes>,
    done: bool,
}

impl RecordPages<'_> {
    /// The next page of (key, value) records, or `None` when the scan is over. A page shorter than [`PAGE`]
    /// is the last.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<(Bytes, Bytes)>>> {
        if self.done {
            return Ok(None);
        }
        let page = self
            .backend
            .scan_records(self.ns, self.prefix, self.after.as_deref(), PAGE)
            .await?;
        self.done = page.len() < PAGE;
        let Some((last, _)) = page.last() else {
            return Ok(None);
        };
        self.after = Some(last.clone());
        Ok(Some(page))
    }
}

/// `d` in microseconds, saturating.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
