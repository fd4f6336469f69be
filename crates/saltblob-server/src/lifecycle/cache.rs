//! A bucket setting read lately, kept for a moment: the buckets' lifecycle rules (for the `x-amz-expiration` of
//! GET, HEAD and PUT) and their default encryption (`sse/`, for every put).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::rules::Lifecycle;

/// How long a server answers from a setting it read before, without reading it again. The gc pass and the
/// `Get…` operations always read them.
const CACHED_FOR: Duration = Duration::from_secs(1);
/// Most buckets whose setting is kept; the cache is emptied when full.
const CACHED_BUCKETS: usize = 4096;

/// A bucket's setting as read at a time (`None`: it had none).
type Cached<T> = (Instant, Option<Arc<T>>);

/// The buckets' records of one setting (by default their lifecycle rules) read lately: a setting changed on
/// another server shows in this one's answers within [`CACHED_FOR`].
#[derive(Debug)]
pub(crate) struct Cache<T = Lifecycle> {
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
    /// `bucket`'s setting as read less than [`CACHED_FOR`] ago (`Some(None)`: it had none), if so read.
    pub(crate) fn fresh(&self, bucket: &str) -> Option<Option<Arc<T>>> {
        let entries = self.entries.lock().ok()?;
        let (at, setting) = entries.get(bucket)?;
        (at.elapsed() < CACHED_FOR).then(|| setting.clone())
    }

    /// Keeps `bucket`'s setting as read now.
    pub(crate) fn keep(&self, bucket: &str, setting: Option<Arc<T>>) {
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
