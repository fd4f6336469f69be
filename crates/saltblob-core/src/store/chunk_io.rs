//! How the write and read pipelines call the backend for chunks: retries of transient failures and the size of
//! one backend call.

use std::future::Future;
use std::time::Duration;

use crate::Result;
use crate::codec::CHUNK_HEADER_LEN;
use crate::records::Inner;
use crate::schedule::ClassTag;

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

    /// Chunks of `chunk_size` raw bytes per backend call: the batch size in raw bytes (capped by the scheduler's
    /// bulk unit in a background `class`, see [`crate::schedule`]), and at most the backend's batch limit in
    /// encoded bytes. At least one.
    pub(crate) fn chunks_per_segment(&self, chunk_size: u32, class: Option<&ClassTag>) -> u64 {
        let raw_budget = self.sched.unit_bytes(self.config.batch_bytes, class);
        let by_budget = raw_budget / (chunk_size as usize).max(1);
        let by_backend = self.info.max_batch_bytes / (chunk_size as usize + CHUNK_HEADER_LEN);
        by_budget.min(by_backend).max(1) as u64
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
