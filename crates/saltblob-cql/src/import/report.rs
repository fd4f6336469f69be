//! What an import did: each blob's [`Outcome`] and the [`ImportReport`] that counts them.

use bytes::Bytes;

/// Most rejections an [`ImportReport`] keeps (the progress callback sees every one).
pub const MAX_REPORTED_REJECTIONS: usize = 1000;

/// The outcome of one blob: its size when imported, or why it was not.
pub type Outcome = std::result::Result<u64, String>;

/// What an import did. Counts, and a bounded sample of the rejections: the progress callback of
/// [`import_salted`](super::import_salted) sees every outcome.
#[derive(Clone, Debug, Default)]
pub struct ImportReport {
    /// Blobs copied.
    pub imported: u64,
    /// Bytes copied.
    pub imported_bytes: u64,
    /// Blobs (and partitions outside any blob's layout) not copied.
    pub rejected: u64,
    /// The first [`MAX_REPORTED_REJECTIONS`] of them: key and reason (naming missing chunk ids and the like).
    pub rejections: Vec<(Bytes, String)>,
}

impl ImportReport {
    /// Counts `outcome` of the blob (or stray partition) `key`, keeping it if it is one of the first
    /// [`MAX_REPORTED_REJECTIONS`] rejections.
    pub(super) fn record(&mut self, key: Bytes, outcome: Outcome) {
        match outcome {
            Ok(size) => {
                self.imported += 1;
                self.imported_bytes = self.imported_bytes.saturating_add(size);
            }
            Err(reason) => {
                self.rejected += 1;
                if self.rejections.len() < MAX_REPORTED_REJECTIONS {
                    self.rejections.push((key, reason));
                }
            }
        }
    }
}
