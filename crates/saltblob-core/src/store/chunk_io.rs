//! How the write and read pipelines call the backend for chunks: retries of transient failures and the size of
//! one backend call.

use std::future::Future;
use std::time::Duration;

use crate::Result;
use crate::codec::CHUNK_HEADER_LEN;
use crate::records::Inner;

/// Attempts of a chunk read or write that fails with a retryable error.
const ATTEMPTS: u32 = 4;

impl Inner {
    /// Attempts of a chunk read or write: one when the backend retries by itself.
    pub(crate) fn attempts(&self) -> u32 {
        if self.info.retries_internally {
            1
        } else {
            ATTEMPTS
        }
    }

    /// Chunks of `chunk_size` raw bytes per backend call: the batch size, capped by the backend's.
    pub(crate) fn chunks_per_segment(&self, chunk_size: u32) -> u64 {
        let budget = self.config.batch_bytes.min(self.info.max_batch_bytes);
        (budget / (chunk_size as usize + CHUNK_HEADER_LEN)).max(1) as u64
    }
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or `attempts` attempts have failed.
pub(crate) async fn with_retry<T, F, Fut>(attempts: u32, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if e.is_retryable() && attempt < attempts => {
                tracing::debug!("retrying after transient error (attempt {attempt}): {e}");
                tokio::time::sleep(delay).await;
                delay *= 4;
                attempt += 1;
            }
            other => return other,
        }
    }
}
