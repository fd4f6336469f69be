//! A blob's BLAKE3 digest, fed piece by piece in order. In a background class the hashing runs on the bulk CPU
//! pool (`schedule/cpu.rs`) a megabyte at a time, so that hashing a huge blob never occupies a worker of the
//! async runtime; otherwise it runs inline.

use bytes::Bytes;

use crate::schedule::{ClassTag, cpu};
use crate::{Error, Result};

/// Bytes handed to the pool per job.
const BATCH_BYTES: usize = 1 << 20;

/// The digest of a blob being written or read.
pub(crate) struct Digest {
    /// `None` only after a job on the pool failed (it panicked with the hasher).
    hasher: Option<blake3::Hasher>,
    pending: Vec<Bytes>,
    pending_bytes: usize,
    class: Option<ClassTag>,
}

impl Digest {
    /// An empty digest, hashed on the pool when `class` is a background class.
    pub(crate) fn new(class: Option<ClassTag>) -> Self {
        Self {
            hasher: Some(blake3::Hasher::new()),
            pending: Vec::new(),
            pending_bytes: 0,
            class: class.filter(ClassTag::pools_cpu),
        }
    }

    /// Adds the next piece of the blob.
    pub(crate) async fn update(&mut self, piece: Bytes) -> Result<()> {
        if self.class.is_none() {
            self.hasher()?.update(&piece);
            return Ok(());
        }
        self.pending_bytes += piece.len();
        self.pending.push(piece);
        if self.pending_bytes >= BATCH_BYTES {
            self.hash_pending().await?;
        }
        Ok(())
    }

    /// The digest of everything added.
    pub(crate) async fn finalize(mut self) -> Result<blake3::Hash> {
        self.hash_pending().await?;
        Ok(self.hasher()?.finalize())
    }

    fn hasher(&mut self) -> Result<&mut blake3::Hasher> {
        self.hasher
            .as_mut()
            .ok_or_else(|| Error::internal("digest", "an earlier hashing job failed"))
    }

    async fn hash_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pieces = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let mut hasher = self
            .hasher
            .take()
            .ok_or_else(|| Error::internal("digest", "an earlier hashing job failed"))?;
        let hashed = cpu::run(self.class.as_ref(), move || {
            pieces.iter().for_each(|p| {
                hasher.update(p);
            });
            hasher
        })
        .await?;
        self.hasher = Some(hashed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Scheduler, SchedulerConfig};

    /// The digest is the same whether hashed inline or on the pool, in batches or not.
    #[tokio::test(flavor = "current_thread")]
    async fn pool_and_inline_digests_agree() {
        let data: Vec<u8> = (0..(5u32 << 20) + 123).map(|i| (i % 251) as u8).collect();
        let expected = blake3::hash(&data);
        let sched = Scheduler::new(SchedulerConfig::default().with_bulk_cpu_pool(true));
        for class in [
            None,
            Some(sched.tag(&crate::PriorityClass::bulk()).expect("bulk")),
        ] {
            let mut d = Digest::new(class);
            for piece in data.chunks(65536 + 7) {
                d.update(Bytes::copy_from_slice(piece))
                    .await
                    .expect("update");
            }
            assert_eq!(d.finalize().await.expect("finalize"), expected);
        }
    }
}
