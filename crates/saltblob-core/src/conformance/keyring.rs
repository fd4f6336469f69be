//! Keyrings of the conformance cases: a temporary keyring file, and the encryption of a sealed run of the suite.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::encryption::{EncryptionConfig, Keyring, LocalProvider};

/// A keyring file of one test, with keys `tenant-a` and `tenant-b`, removed when dropped.
pub struct TempKeyring(PathBuf);

impl Default for TempKeyring {
    fn default() -> Self {
        Self::new()
    }
}

impl TempKeyring {
    /// A new keyring file in the system's temporary directory.
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "saltblob-conformance-{:016x}.keyring",
            rand::random::<u64>()
        ));
        let mut ring = Keyring::create(&path).expect("keyring");
        ring.add("tenant-a", 1).expect("add");
        ring.add("tenant-b", 1).expect("add");
        Self(path)
    }

    /// The local provider over it.
    pub fn provider(&self) -> Arc<LocalProvider> {
        Arc::new(LocalProvider::open(&self.0).expect("open keyring"))
    }
}

impl Drop for TempKeyring {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The encryption of a [`super::sealed`] run of the suite: a keyring of its own, kept while the run lasts.
pub struct SealingRun {
    ring: Arc<TempKeyring>,
    /// Stores made sealing.
    pub(crate) stores: Arc<AtomicUsize>,
}

impl SealingRun {
    /// A run with a new keyring.
    pub(crate) fn new() -> Self {
        Self {
            ring: Arc::new(TempKeyring::new()),
            stores: Arc::default(),
        }
    }

    /// Sealing under `tenant-a`, compressing first (so that the codec cases see their codecs).
    pub(crate) fn config(&self) -> EncryptionConfig {
        self.stores.fetch_add(1, Ordering::Relaxed);
        EncryptionConfig::new(self.ring.provider())
            .with_key("tenant-a")
            .with_compression(true)
    }
}
