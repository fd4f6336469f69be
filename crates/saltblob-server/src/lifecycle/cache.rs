//! The buckets' lifecycle rules read lately, for the `x-amz-expiration` of GET, HEAD and PUT.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::rules::Lifecycle;

/// How long a server answers `x-amz-expiration` from rules it read before, without reading them again. The gc
/// pass and GetBucketLifecycleConfiguration always read them.
const CACHED_FOR: Duration = Duration::from_secs(1);
/// Most buckets whose rules are kept; the cache is emptied when full.
const CACHED_BUCKETS: usize = 4096;

/// A bucket's lifecycle record as read at a time (`None`: it had none).
type Cached = (Instant, Option<Arc<Lifecycle>>);

/// The buckets' lifecycle records read lately, for the `x-amz-expiration` of GET, HEAD and PUT: a rule changed
/// on another server shows in this one's headers within [`CACHED_FOR`].
#[derive(Debug, Default)]
pub(crate) struct Cache {
    entries: Mutex<HashMap<String, Cached>>,
}

impl Cache {
    /// `bucket`'s rules as read less than [`CACHED_FOR`] ago (`Some(None)`: it had none), if so read.
    pub(crate) fn fresh(&self, bucket: &str) -> Option<Option<Arc<Lifecycle>>> {
        let entries = self.entries.lock().ok()?;
        let (at, lifecycle) = entries.get(bucket)?;
        (at.elapsed() < CACHED_FOR).then(|| lifecycle.clone())
    }

    /// Keeps `bucket`'s rules as read now.
    pub(crate) fn keep(&self, bucket: &str, lifecycle: Option<Arc<Lifecycle>>) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= CACHED_BUCKETS {
                entries.clear();
            }
            entries.insert(bucket.to_owned(), (Instant::now(), lifecycle));
        }
    }

    /// Forgets `bucket`'s rules (after this server changed them).
    pub(crate) fn forget(&self, bucket: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(bucket);
        }
    }
}
