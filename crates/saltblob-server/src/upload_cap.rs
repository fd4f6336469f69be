//! The cap on multipart uploads in progress per bucket, and each server's cached count of them, read from the
//! uploads' listing index (`multipart/upload.rs`).

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use s3s::{S3Error, S3ErrorCode, S3Result};
use saltblob_core::BlobStore;

use crate::error::from_store;
use crate::keys::upload_index_prefix;

/// The open uploads a bucket may hold by default ([`crate::ServerConfig::max_uploads_per_bucket`]).
pub const DEFAULT_MAX_UPLOADS_PER_BUCKET: usize = 10_000;

/// The cap on uploads in progress per bucket (`ServerConfig::max_uploads_per_bucket`), and this server's
/// count of them per bucket: counted from the listing index (at most the cap's worth of entries) when the count
/// is older than [`Self::RECOUNT_EVERY`] or at the cap, and in between raised by the uploads this server creates.
/// Uploads that other servers create or that complete meanwhile show at the next count: the cap is soft, by the
/// uploads created in one interval, and a count costs one index read per upload in progress, not one per
/// CreateMultipartUpload (measured on Cassandra: 0.12 ms an entry).
pub(crate) struct UploadCap {
    max: Option<usize>,
    counts: std::sync::Mutex<std::collections::HashMap<String, (usize, std::time::Instant)>>,
}

impl UploadCap {
    /// How long a count is used before the index is read again.
    const RECOUNT_EVERY: Duration = Duration::from_secs(10);

    /// A cap of `max` uploads in progress per bucket (`None`: none).
    pub(crate) fn new(max: Option<usize>) -> Self {
        Self {
            max,
            counts: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn cached(&self, bucket: &str) -> Option<(usize, std::time::Instant)> {
        let counts = self.counts.lock().ok()?;
        counts
            .get(bucket)
            .filter(|(_, at)| at.elapsed() < Self::RECOUNT_EVERY)
            .copied()
    }

    /// Admits one more upload in `bucket`, or refuses it.
    ///
    /// # Errors
    /// `InvalidRequest` (400) when the bucket holds the most uploads in progress allowed; a store error.
    pub(crate) async fn admit(&self, store: &BlobStore, bucket: &str) -> S3Result<()> {
        let Some(max) = self.max else {
            return Ok(());
        };
        let (open, counted) = match self.cached(bucket).filter(|(n, _)| *n < max) {
            Some(cached) => cached,
            None => {
                let index = upload_index_prefix(bucket);
                let n = store
                    .list_stream(index.as_bytes())
                    .take(max)
                    .try_fold(0usize, |n, _| async move { Ok(n + 1) })
                    .await
                    .map_err(from_store)?;
                (n, std::time::Instant::now())
            }
        };
        if open >= max {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!(
                    "Bucket {bucket} already holds {max} multipart uploads in progress, the most this server allows (--max-uploads-per-bucket): complete or abort some (ListMultipartUploads lists them)"
                ),
            ));
        }
        if let Ok(mut counts) = self.counts.lock() {
            counts.retain(|_, (_, at)| at.elapsed() < Self::RECOUNT_EVERY);
            counts.insert(bucket.to_owned(), (open + 1, counted));
        }
        Ok(())
    }
}
