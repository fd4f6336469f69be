//! Where the load drivers' operations go: the bench's own store, or a bucket of an S3 endpoint.

use bytes::Bytes;
use saltblob::{BlobStore, PutOptions, Result};

use crate::scheduler_trace::Tracer;

/// The target of the mixed phases' operations: puts, whole gets and deletes by key.
#[derive(Clone)]
pub(crate) enum Target {
    /// The bench's own store.
    Store(BlobStore),
    /// A bucket of an S3 endpoint (`s3+http://…`), through object_store's client.
    #[cfg(feature = "s3")]
    S3(crate::s3::S3Target),
}

impl Target {
    /// Puts `data` at `key`; returns the bytes stored.
    pub(crate) async fn put(&self, key: &str, data: Bytes) -> Result<u64> {
        match self {
            Target::Store(store) => Ok(store.put(key, data, &PutOptions::new()).await?.size),
            #[cfg(feature = "s3")]
            Target::S3(s3) => s3.put(key, data).await,
        }
    }

    /// The value at `key`, whole.
    pub(crate) async fn get(&self, key: &str) -> Result<Bytes> {
        match self {
            Target::Store(store) => store.get(key).await,
            #[cfg(feature = "s3")]
            Target::S3(s3) => s3.get(key).await,
        }
    }

    /// Deletes `key`.
    pub(crate) async fn delete(&self, key: &str) -> Result<()> {
        match self {
            Target::Store(store) => store.delete(key).await.map(|_| ()),
            #[cfg(feature = "s3")]
            Target::S3(s3) => s3.delete(key).await,
        }
    }

    /// Starts sampling the store's scheduler ([`Tracer`]); `None` through S3, where the server's store schedules.
    pub(crate) fn trace_scheduler(&self) -> Option<Tracer> {
        match self {
            Target::Store(store) => Some(Tracer::start(store.clone())),
            #[cfg(feature = "s3")]
            Target::S3(_) => None,
        }
    }

    /// Reclaims the versions the run replaced and deleted so far (the bench's store has a grace period of zero);
    /// `None` through S3, where the server's store reclaims on its own schedule.
    pub(crate) async fn reclaim(&self) -> Option<Result<saltblob::ReclaimReport>> {
        match self {
            Target::Store(store) => Some(store.reclaim_due().await),
            #[cfg(feature = "s3")]
            Target::S3(_) => None,
        }
    }
}
