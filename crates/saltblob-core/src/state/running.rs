//! The puts running in this process on one store ([`RunningPuts`]): gc and fsck never take their intents over,
//! whatever the clock says, since a renewal that is late because the process is starved does not make a put
//! dead. One registry per store ([`crate::state::Inner::running`]), whether or not the store schedules its
//! requests; two stores of one process see each other's puts only through their intents, as two processes do.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::base::version::VersionId;

/// The versions whose puts run in this process on one store.
#[derive(Debug, Default)]
pub(crate) struct RunningPuts {
    versions: Mutex<BTreeSet<VersionId>>,
}

impl RunningPuts {
    /// Registers the put of `version` until the returned guard is dropped.
    pub(crate) fn register(self: &Arc<Self>, version: VersionId) -> RunningGuard {
        if let Ok(mut v) = self.versions.lock() {
            v.insert(version);
        }
        RunningGuard {
            registry: Arc::clone(self),
            version,
        }
    }

    /// Whether a put of `version` runs in this process on this store. A poisoned registry answers yes: nothing
    /// is taken over, and gc tries again later.
    pub(crate) fn contains(&self, version: VersionId) -> bool {
        self.versions
            .lock()
            .map(|v| v.contains(&version))
            .unwrap_or(true)
    }
}

/// A put's entry in [`RunningPuts`], removed when dropped.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    registry: Arc<RunningPuts>,
    version: VersionId,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if let Ok(mut v) = self.registry.versions.lock() {
            v.remove(&self.version);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_is_registered_until_its_guard_drops() {
        let running = Arc::new(RunningPuts::default());
        let guard = running.register(VersionId(7));
        assert!(running.contains(VersionId(7)) && !running.contains(VersionId(8)));
        drop(guard);
        assert!(!running.contains(VersionId(7)));
    }
}
