//! A blob's BLAKE3 digest. A chunked blob whose chunk size is a power of two of at least BLAKE3's 1 KiB chunk is
//! hashed as a tree ([`TreeDigest`]): each chunk is a subtree of BLAKE3's own tree, hashed where the chunk is
//! encoded or decoded (in its write or fetch task, see [`ChunkHasher`]), and the subtrees' chaining values are
//! merged at the end; the result is the plain BLAKE3 hash of the blob. The subtrees spread over the runtime's
//! workers with the chunk writes and fetches, off the put's (or read's) own task.
//!
//! Other chunk sizes use [`Digest`], fed piece by piece in order by the put's (or read's) own task. Like chunk
//! encoding and decoding (and the subtrees hashed with them), that hashing runs on the bulk CPU pool
//! (`schedule/cpu.rs`) in a background class when the pool is on, a megabyte at a time, so that hashing a huge
//! blob never occupies a worker of the async runtime; otherwise it runs inline.

use blake3::hazmat::{
    ChainingValue, HasherExt, Mode, left_subtree_len, merge_subtrees_non_root, merge_subtrees_root,
};
use bytes::Bytes;

use crate::base::error::{Error, Result};
use crate::schedule::{ClassTag, cpu};

/// Bytes handed to the pool per job.
const BATCH_BYTES: usize = 1 << 20;

/// The digest of a blob being written or read, fed in order: the fallback for chunks that are no subtree.
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

    /// The digest of everything added so far.
    pub(crate) async fn finalize(&mut self) -> Result<blake3::Hash> {
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

/// Hashes chunks of one blob as subtrees of its BLAKE3 tree: chunk `i` of `chunk_size` bytes starts at byte
/// `i × chunk_size`, a subtree boundary whenever `chunk_size` is a power of two ≥ [`blake3::CHUNK_LEN`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkHasher {
    chunk_size: u64,
}

impl ChunkHasher {
    /// The hasher for chunks of `chunk_size` bytes, `None` when they are not subtrees of the BLAKE3 tree.
    pub(crate) fn for_chunk_size(chunk_size: u32) -> Option<Self> {
        (chunk_size.is_power_of_two() && chunk_size as usize >= blake3::CHUNK_LEN).then_some(Self {
            chunk_size: u64::from(chunk_size),
        })
    }

    /// Hashes chunk `index` (`raw`, its whole raw bytes: `chunk_size` of them unless it is the last chunk). A
    /// chunk that cannot be a subtree (empty, too long, too far) is not hashed: [`TreeDigest::add`] rejects it.
    pub(crate) fn hash(self, index: u64, raw: &[u8]) -> ChunkHash {
        let len = raw.len() as u64;
        let offset = index.checked_mul(self.chunk_size);
        let (cv, root) = match offset {
            Some(offset) if len > 0 && len <= self.chunk_size => {
                let mut hasher = blake3::Hasher::new();
                hasher.set_input_offset(offset);
                hasher.update(raw);
                // Chunk 0 of a one-chunk blob is the whole tree, finalized as the root: keep that hash too.
                let root = (index == 0).then(|| hasher.finalize());
                (Some(hasher.finalize_non_root()), root)
            }
            _ => (None, None),
        };
        ChunkHash {
            index,
            len,
            cv,
            root,
        }
    }
}

/// One chunk's subtree, from [`ChunkHasher::hash`].
#[derive(Clone, Debug)]
pub(crate) struct ChunkHash {
    index: u64,
    len: u64,
    /// `None` for a chunk that is no subtree.
    cv: Option<ChainingValue>,
    /// Chunk 0's hash as the root of the tree.
    root: Option<blake3::Hash>,
}

/// The digest of a chunked blob from the subtrees of its chunks, added in any order: 32 bytes per chunk.
#[derive(Debug)]
pub(crate) struct TreeDigest {
    chunk_size: u64,
    /// Chunk `i`'s chaining value at `i`, once added.
    cvs: Vec<Option<ChainingValue>>,
    /// Chunk 0's root hash: the blob's digest when it is the only chunk.
    first_root: Option<blake3::Hash>,
    /// Raw bytes added.
    len: u64,
    /// The one chunk shorter than `chunk_size`, which must be the last.
    short_chunk: Option<u64>,
}

impl TreeDigest {
    /// An empty tree of the chunks `hasher` hashes.
    pub(crate) fn new(hasher: ChunkHasher) -> Self {
        Self {
            chunk_size: hasher.chunk_size,
            cvs: Vec::new(),
            first_root: None,
            len: 0,
            short_chunk: None,
        }
    }

    /// Adds a chunk's subtree; fails if that chunk was added already, or if it is empty, longer than a chunk,
    /// or the second short one.
    pub(crate) fn add(&mut self, hash: ChunkHash) -> Result<()> {
        let misfit = |what: String| Error::internal("digest", format!("tree digest: {what}"));
        let slot = usize::try_from(hash.index)
            .map_err(|_| misfit(format!("chunk index {} out of range", hash.index)))?;
        let Some(cv) = hash.cv.filter(|_| hash.len <= self.chunk_size) else {
            return Err(misfit(format!("chunk {slot} has {} bytes", hash.len)));
        };
        if hash.len < self.chunk_size
            && let Some(other) = self.short_chunk.replace(hash.index)
        {
            return Err(misfit(format!("chunks {other} and {slot} are both short")));
        }
        if slot >= self.cvs.len() {
            self.cvs.resize(slot + 1, None);
        }
        if self.cvs[slot].replace(cv).is_some() {
            return Err(misfit(format!("chunk {slot} added twice")));
        }
        self.len += hash.len;
        if hash.root.is_some() {
            self.first_root = hash.root;
        }
        Ok(())
    }

    /// The BLAKE3 hash of the blob; fails unless the chunks added are all of it: chunks 0 to n − 1, all of
    /// `chunk_size` bytes but the last.
    pub(crate) fn finalize(&self) -> Result<blake3::Hash> {
        let incomplete = |what: &str| Error::internal("digest", format!("tree digest: {what}"));
        let cvs: Vec<ChainingValue> = self
            .cvs
            .iter()
            .copied()
            .collect::<Option<_>>()
            .ok_or_else(|| incomplete("a chunk is missing"))?;
        if self
            .short_chunk
            .is_some_and(|short| short + 1 != cvs.len() as u64)
        {
            return Err(incomplete("a chunk other than the last is short"));
        }
        match cvs.len() {
            0 => Ok(blake3::hash(&[])),
            1 => self
                .first_root
                .ok_or_else(|| incomplete("chunk 0 has no root hash")),
            _ => {
                let (left, right) = self.split(&cvs, self.len);
                Ok(merge_subtrees_root(&left, &right, Mode::Hash))
            }
        }
    }

    /// The chaining value of the subtree made of `cvs`, `len` bytes in all.
    fn subtree(&self, cvs: &[ChainingValue], len: u64) -> ChainingValue {
        match cvs {
            [only] => *only,
            _ => {
                let (left, right) = self.split(cvs, len);
                merge_subtrees_non_root(&left, &right, Mode::Hash)
            }
        }
    }

    /// The chaining values of the two children of the subtree made of `cvs` (at least two chunks, all full but
    /// the last), `len` bytes in all. BLAKE3's left child is the largest power of two of bytes below `len`: at
    /// least one of our power-of-two chunks since `len` exceeds one, so it ends on a chunk boundary, before
    /// the last chunk.
    fn split(&self, cvs: &[ChainingValue], len: u64) -> (ChainingValue, ChainingValue) {
        let left_len = left_subtree_len(len);
        let left_chunks = usize::try_from(left_len / self.chunk_size).unwrap_or(usize::MAX);
        let (left, right) = cvs.split_at(left_chunks.min(cvs.len() - 1));
        (
            self.subtree(left, left_len),
            self.subtree(right, len - left_len),
        )
    }
}

/// The digest of a chunked blob: a tree when its chunk size allows, else sequential.
pub(crate) enum BlobDigest {
    /// Chunks are hashed by [`BlobDigest::chunk_hasher`] where they are encoded or decoded, then [`add`]ed.
    ///
    /// [`add`]: BlobDigest::add
    Tree(TreeDigest),
    /// Chunks are fed in order to [`BlobDigest::update`].
    Sequential(Box<Digest>),
}

impl BlobDigest {
    /// The digest of a blob of chunks of `chunk_size` bytes; a sequential one is hashed as [`Digest::new`] says.
    pub(crate) fn new(chunk_size: u32, class: Option<ClassTag>) -> Self {
        match ChunkHasher::for_chunk_size(chunk_size) {
            Some(hasher) => Self::Tree(TreeDigest::new(hasher)),
            None => Self::Sequential(Box::new(Digest::new(class))),
        }
    }

    /// What hashes each chunk of a tree digest; `None` for a sequential one.
    pub(crate) fn chunk_hasher(&self) -> Option<ChunkHasher> {
        match self {
            Self::Tree(tree) => Some(ChunkHasher {
                chunk_size: tree.chunk_size,
            }),
            Self::Sequential(_) => None,
        }
    }

    /// Adds the next chunk's raw bytes to a sequential digest; a tree digest takes its chunks through
    /// [`BlobDigest::add`] instead and ignores this.
    pub(crate) async fn update(&mut self, raw: &Bytes) -> Result<()> {
        match self {
            Self::Tree(_) => Ok(()),
            Self::Sequential(digest) => digest.update(raw.clone()).await,
        }
    }

    /// Adds the subtrees of chunks hashed by [`BlobDigest::chunk_hasher`].
    pub(crate) fn add(&mut self, hashes: Vec<ChunkHash>) -> Result<()> {
        match self {
            Self::Tree(tree) => hashes.into_iter().try_for_each(|h| tree.add(h)),
            Self::Sequential(_) if hashes.is_empty() => Ok(()),
            Self::Sequential(_) => Err(Error::internal(
                "digest",
                "chunk subtrees given to a sequential digest",
            )),
        }
    }

    /// The BLAKE3 hash of the blob, all of its chunks added.
    pub(crate) async fn finalize(&mut self) -> Result<blake3::Hash> {
        match self {
            Self::Tree(tree) => tree.finalize(),
            Self::Sequential(digest) => digest.finalize().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::backend::{ChunkStore, Namespace, Precondition};
    use crate::schedule::PriorityClass;
    use crate::schedule::{Scheduler, SchedulerConfig};
    use crate::state::config::{GetOptions, PutOptions, StoreConfig};
    use crate::store::BlobStore;

    /// Bytes that differ at every offset (a repeated pattern could hide a misplaced subtree).
    fn data(len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect()
    }

    /// The tree digest of `data` in chunks of `chunk_size`, the chunks hashed and added in `order`.
    fn tree_hash(chunk_size: u32, data: &[u8], order: &[u64]) -> Result<blake3::Hash> {
        let hasher = ChunkHasher::for_chunk_size(chunk_size).expect("a subtree size");
        let mut tree = TreeDigest::new(hasher);
        for &index in order {
            let start = index as usize * chunk_size as usize;
            let end = (start + chunk_size as usize).min(data.len());
            tree.add(hasher.hash(index, &data[start..end]))?;
        }
        tree.finalize()
    }

    /// A chunk size of 1 KiB to 1 MiB, a blob of up to 300 of its chunks (4 MiB at most) whose last chunk is
    /// random or at a boundary, and an order in which its chunks complete.
    fn tree_case() -> impl Strategy<Value = (u32, usize, Vec<u64>)> {
        (10u32..=20)
            .prop_flat_map(|log| {
                let chunk_size = 1usize << log;
                let max_chunks = ((4usize << 20) >> log).min(300);
                let tail = prop_oneof![0..chunk_size, Just(0), Just(1), Just(chunk_size - 1)];
                (Just(1u32 << log), 0..=max_chunks, tail)
            })
            .prop_flat_map(|(chunk_size, full_chunks, tail)| {
                let size = full_chunks * chunk_size as usize + tail;
                let order: Vec<u64> = (0..size.div_ceil(chunk_size as usize) as u64).collect();
                (Just(chunk_size), Just(size), Just(order).prop_shuffle())
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The tree digest is the plain BLAKE3 hash of the blob, whatever order its chunks complete in.
        #[test]
        fn the_tree_digest_is_blake3_in_any_order((chunk_size, size, order) in tree_case()) {
            let blob = data(size);
            let got = tree_hash(chunk_size, &blob, &order).expect("tree digest");
            prop_assert_eq!(got, blake3::hash(&blob));
        }
    }

    /// Every power-of-two chunk size from 1 KiB to 1 MiB, blobs of 0 to 17 chunks, the last one full, of one
    /// byte or one byte short, chunks completing first to last and last to first.
    #[test]
    fn the_tree_digest_is_blake3_at_every_boundary() {
        let blob = data((17 << 20) + (1 << 20));
        for log in 10..=20 {
            let chunk_size = 1u32 << log;
            for full_chunks in [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17] {
                for tail in [0, 1, chunk_size as usize - 1] {
                    let size = full_chunks * chunk_size as usize + tail;
                    let blob = &blob[..size];
                    let mut order: Vec<u64> =
                        (0..size.div_ceil(chunk_size as usize) as u64).collect();
                    let expected = blake3::hash(blob);
                    assert_eq!(
                        tree_hash(chunk_size, blob, &order).ok(),
                        Some(expected),
                        "{chunk_size} {size}"
                    );
                    order.reverse();
                    assert_eq!(
                        tree_hash(chunk_size, blob, &order).ok(),
                        Some(expected),
                        "{chunk_size} {size} reversed"
                    );
                }
            }
        }
    }

    /// A tree digest refuses chunks that do not make up the blob: a missing one, one added twice, a short one
    /// before the last, an empty one.
    #[test]
    fn the_tree_digest_refuses_what_is_not_the_whole_blob() {
        let chunk_size = 4096;
        let blob = data(3 * chunk_size as usize);
        let hasher = ChunkHasher::for_chunk_size(chunk_size).expect("a subtree size");
        let chunk = |i: u64, len: usize| {
            let start = i as usize * chunk_size as usize;
            hasher.hash(i, &blob[start..start + len])
        };
        let full = chunk_size as usize;
        let mut missing = TreeDigest::new(hasher);
        missing.add(chunk(0, full)).expect("add");
        missing.add(chunk(2, full)).expect("add");
        assert!(missing.finalize().is_err(), "chunk 1 is missing");
        let mut twice = TreeDigest::new(hasher);
        twice.add(chunk(0, full)).expect("add");
        assert!(twice.add(chunk(0, full)).is_err(), "chunk 0 twice");
        let mut short = TreeDigest::new(hasher);
        short.add(chunk(0, 100)).expect("add");
        short.add(chunk(1, full)).expect("add");
        assert!(
            short.finalize().is_err(),
            "chunk 0 is short but not the last"
        );
        assert!(
            TreeDigest::new(hasher).add(chunk(1, 0)).is_err(),
            "an empty chunk"
        );
        let mut complete = TreeDigest::new(hasher);
        (0..3)
            .try_for_each(|i| complete.add(chunk(i, full)))
            .expect("add");
        assert_eq!(complete.finalize().ok(), Some(blake3::hash(&blob)));
    }

    /// A chunk size that is not a power of two of at least 1 KiB hashes sequentially, to the same digest.
    #[tokio::test(flavor = "current_thread")]
    async fn other_chunk_sizes_fall_back_to_the_sequential_digest() {
        assert!(BlobDigest::new(4096, None).chunk_hasher().is_some());
        assert!(BlobDigest::new(1024, None).chunk_hasher().is_some());
        let blob = Bytes::from(data(100_000));
        for chunk_size in [512, 3 * 1024, 5000, 65536 + 4096] {
            let mut digest = BlobDigest::new(chunk_size, None);
            assert!(digest.chunk_hasher().is_none(), "{chunk_size}");
            for start in (0..blob.len()).step_by(chunk_size as usize) {
                let end = (start + chunk_size as usize).min(blob.len());
                digest
                    .update(&blob.slice(start..end))
                    .await
                    .expect("update");
            }
            let hasher = ChunkHasher::for_chunk_size(4096).expect("a subtree size");
            assert!(digest.add(vec![hasher.hash(0, &blob[..4096])]).is_err());
            assert_eq!(
                digest.finalize().await.expect("finalize"),
                blake3::hash(&blob),
                "{chunk_size}"
            );
        }
    }

    /// A put (whole or streamed) stores the blob's plain BLAKE3 digest and a full get verifies it, with tree and
    /// sequential digests, hashed inline or on the bulk CPU pool; a get of a blob whose stored digest differs
    /// fails, a range read does not check it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn puts_store_and_gets_verify_the_blake3_digest() {
        let blob = Bytes::from(data(300_001));
        let expected = *blake3::hash(&blob).as_bytes();
        for pooled in [false, true] {
            let backend = Arc::new(MemoryStore::new());
            let config = StoreConfig::default()
                .with_scheduler(SchedulerConfig::default().with_bulk_cpu_pool(pooled));
            let store = BlobStore::new(backend.clone(), config).expect("store");
            for chunk_size in [4096, 5120] {
                for streamed in [false, true] {
                    let key = format!("{pooled}-{chunk_size}-{streamed}");
                    let opts = PutOptions::new()
                        .with_chunk_size(chunk_size)
                        .with_priority(PriorityClass::bulk());
                    let mut m = if streamed {
                        store.put_stream(&key, &blob[..], &opts).await
                    } else {
                        store.put(&key, blob.clone(), &opts).await
                    }
                    .expect("put");
                    assert_eq!(m.digest, expected, "{key}");
                    let read = GetOptions::new().with_priority(PriorityClass::bulk());
                    let got = store.get_with(&key, &read).await.expect("get");
                    assert!(got == blob, "{key}");

                    m.digest[0] ^= 1;
                    backend
                        .put_record(
                            Namespace::Manifest,
                            key.as_bytes(),
                            m.encode(),
                            &Precondition::None,
                        )
                        .await
                        .expect("tamper");
                    let got = store.get_with(&key, &read).await;
                    assert!(
                        matches!(got, Err(Error::DigestMismatch { .. })),
                        "{key}: {got:?}"
                    );
                    let range = store.get_range(&key, 10..300_000).await.expect("range");
                    assert!(range == blob.slice(10..300_000), "{key}");
                }
            }
        }
    }

    /// The digest is the same whether hashed inline or on the pool, in batches or not.
    #[tokio::test(flavor = "current_thread")]
    async fn pool_and_inline_digests_agree() {
        let data: Vec<u8> = (0..(5u32 << 20) + 123).map(|i| (i % 251) as u8).collect();
        let expected = blake3::hash(&data);
        let sched = Scheduler::new(SchedulerConfig::default().with_bulk_cpu_pool(true));
        for class in [
            None,
            Some(
                sched
                    .tag(&crate::schedule::PriorityClass::bulk())
                    .expect("bulk"),
            ),
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
