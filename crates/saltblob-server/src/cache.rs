//! A bucket setting read lately, kept for a moment: the buckets' lifecycle rules (`lifecycle/`, for the
//! `x-amz-expiration` of GET, HEAD and PUT) and their default encryption (`sse/`, for every put).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a server answers from a setting it read before, without reading it again. The gc pass and the
/// `Get…` operations always read them.
const CACHED_FOR: Duration = Duration::from_secs(1);
/// Most buckets whose setting is kept; the cache is emptied when full.
const CACHED_BUCKETS: usize = 4096;

/// A bucket's setting as read at a time (`None`: it had none).
type Cached<T> = (Instant, Option<Arc<T>>);

/// The buckets' records of one setting read lately: a setting changed on another server shows in this one's
/// answers within [`CACHED_FOR`].
#[derive(Debug)]
pub(crate) struct Cache<T> {
    entries: Mutex<HashMap<String, Cached<T>>>,
}

impl<T> Default for Cache<T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Cache<T> {
    /// `bucket`'s setting (`None`: it has none): as read less than [`CACHED_FOR`] ago, else by `read` now, and
    /// kept.
    ///
    /// # Errors
    /// Those of `read`.
    pub(crate) async fn read<E>(
        &self,
        bucket: &str,
        read: impl Future<Output = Result<Option<T>, E>>,
    ) -> Result<Option<Arc<T>>, E> {
        if let Some(cached) = self.fresh(bucket) {
            return Ok(cached);
        }
        let read = read.await?.map(Arc::new);
        self.keep(bucket, read.clone());
        Ok(read)
    }

    /// `bucket`'s setting as read less than [`CACHED_FOR`] ago (`Some(None)`: it had none), if so read.
    fn fresh(&self, bucket: &str) -> Option<Option<Arc<T>>> {
        let entries = self.entries.lock().ok()?;
        let (at, setting) = entries.get(bucket)?;
        (at.elapsed() < CACHED_FOR).then(|| setting.clone())
    }

    /// Keeps `bucket`'s setting as read now.
    fn keep(&self, bucket: &str, setting: Option<Arc<T>>) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= CACHED_BUCKETS {
                entries.clear();
            }
            entries.insert(bucket.to_owned(), (Instant::now(), setting));
        }
    }

    /// Forgets `bucket`'s setting (after this server changed it).
    pub(crate) fn forget(&self, bucket: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(bucket);
        }
    }
}
