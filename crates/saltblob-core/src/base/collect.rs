//! The buffer a value read whole is collected into ([`BlobStream::collect_bytes`](super::read::BlobStream)).
//!
//! Filling a fresh heap buffer of a large value costs one page fault per 4 KiB page and the kernel's zeroing of
//! each: 15 360 faults for 60 MiB, about 50 ms of CPU on this project's 2-core virtual machines, most of a
//! 60 MiB get. So a value of [`MAPPED_FROM`] bytes or more is collected into an anonymous mapping advised for
//! transparent huge pages (one fault per 2 MiB), taken from the store's [`ValueBuffers`] and given back to it
//! when the value is dropped, so that the next large read reuses memory already faulted in (measured here:
//! collecting 60 MiB takes 52 ms into fresh heap, 18 ms into fresh huge pages, 10 ms into reused ones). The
//! kernel may still back a mapping with small pages (huge pages disabled, memory fragmented): that is only
//! slower, never wrong.
//!
//! Memory follows the bytes that arrive, not the size announced: a new mapping reserves address space for the
//! whole value and its pages are touched as they are filled, so a manifest whose size is damaged fails the read
//! at its first missing chunk without having taken the memory. When the mapping cannot be made, the heap buffer
//! is used, reserving at most [`HEAP_UP_FRONT`] before the bytes arrive.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::base::buffers::{HUGE_PAGE, HugePages, LendingPool, PooledBuffer};

/// Values this large or larger are collected into a mapping; smaller ones into the heap.
pub(crate) const MAPPED_FROM: usize = 4 << 20;

/// The heap buffer reserves at most this much before bytes arrive; once it is filled, the rest of the announced
/// size is reserved in one step (no doubling, no repeated copies of a large value).
const HEAP_UP_FRONT: usize = 64 << 20;

/// The mappings a store's whole-value reads reuse ([`crate::state::config::StoreConfig::idle_value_buffers`]).
pub(crate) type ValueBuffers = LendingPool<MappedBuf>;

/// Huge pages a value is collected into: `len` bytes filled from their start.
pub(crate) struct MappedBuf {
    pages: HugePages,
    len: usize,
}

impl MappedBuf {
    /// A mapping that holds at least `capacity` bytes in huge pages, or `None` when the kernel refuses it.
    fn new(capacity: usize) -> Option<Self> {
        match HugePages::new(capacity) {
            Ok(pages) => Some(Self { pages, len: 0 }),
            Err(e) => {
                tracing::debug!(
                    "no mapping of {capacity} bytes to collect a value into ({e}): the heap instead"
                );
                None
            }
        }
    }

    /// Appends `piece` if it fits.
    fn push(&mut self, piece: &[u8]) -> bool {
        let at = self.len;
        match self.pages.bytes_mut().get_mut(at..at + piece.len()) {
            Some(dst) => {
                dst.copy_from_slice(piece);
                self.len += piece.len();
                true
            }
            None => false,
        }
    }
}

impl PooledBuffer for MappedBuf {
    fn capacity(&self) -> usize {
        self.pages.bytes().len()
    }

    fn bytes(&self) -> &[u8] {
        self.pages.bytes().get(..self.len).unwrap_or_default()
    }
}

/// Collects the pieces of one value, in order, into one contiguous buffer.
pub(crate) struct Collector {
    /// The size announced (the manifest's); more or fewer bytes may arrive, and are kept as they come.
    expected: usize,
    buffer: Buffer,
    pool: Arc<ValueBuffers>,
}

enum Buffer {
    Heap(BytesMut),
    Mapped(MappedBuf),
}

impl Collector {
    /// A collector for a value announced as `expected` bytes long, whose mapping (for a large one) comes from
    /// and goes back to `pool`.
    pub(crate) fn new(expected: usize, pool: &Arc<ValueBuffers>) -> Self {
        let mapped = (expected >= MAPPED_FROM)
            .then(|| {
                let capacity = expected.div_ceil(HUGE_PAGE).saturating_mul(HUGE_PAGE);
                pool.take_fitting(capacity)
                    .or_else(|| MappedBuf::new(capacity))
            })
            .flatten();
        let buffer = match mapped {
            Some(mut buf) => {
                buf.len = 0;
                Buffer::Mapped(buf)
            }
            None => heap(expected, 0),
        };
        Self {
            expected,
            buffer,
            pool: Arc::clone(pool),
        }
    }

    /// Appends `piece`.
    pub(crate) fn push(&mut self, piece: &[u8]) {
        if let Buffer::Mapped(buf) = &mut self.buffer {
            if buf.push(piece) {
                return;
            }
            // More bytes than announced: what came so far moves to the heap, which grows as needed.
            let mut spilled = heap(self.expected.max(buf.len + piece.len()), buf.len);
            if let Buffer::Heap(out) = &mut spilled {
                out.extend_from_slice(buf.bytes());
            }
            if let Buffer::Mapped(buf) = std::mem::replace(&mut self.buffer, spilled) {
                self.pool.give(buf);
            }
        }
        if let Buffer::Heap(out) = &mut self.buffer {
            if out.len() + piece.len() > out.capacity() {
                out.reserve(self.expected.saturating_sub(out.len()).max(piece.len()));
            }
            out.extend_from_slice(piece);
        }
    }

    /// The value collected so far (a mapping goes back to the pool when the last slice of it is dropped).
    pub(crate) fn finish(mut self) -> Bytes {
        match self.take_buffer() {
            Buffer::Heap(out) => out.freeze(),
            Buffer::Mapped(buf) => self.pool.share(buf),
        }
    }

    fn take_buffer(&mut self) -> Buffer {
        std::mem::replace(&mut self.buffer, Buffer::Heap(BytesMut::new()))
    }

    /// Whether the bytes go to a mapping (for tests: the kernel may refuse one).
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        matches!(self.buffer, Buffer::Mapped(_))
    }
}

impl Drop for Collector {
    /// A read that ends without [`Collector::finish`] (it failed midway) gives its mapping back to the pool, for
    /// the next large read to reuse.
    fn drop(&mut self) {
        if let Buffer::Mapped(buf) = self.take_buffer() {
            self.pool.give(buf);
        }
    }
}

/// A heap buffer for a value of `expected` bytes, of which `at_least` must fit now.
fn heap(expected: usize, at_least: usize) -> Buffer {
    Buffer::Heap(BytesMut::with_capacity(
        expected.min(HEAP_UP_FRONT).max(at_least),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pool() -> Arc<ValueBuffers> {
        ValueBuffers::new(4, 256 << 20)
    }

    fn collect(expected: usize, pieces: &[Vec<u8>]) -> Bytes {
        collect_in(&pool(), expected, pieces)
    }

    fn collect_in(pool: &Arc<ValueBuffers>, expected: usize, pieces: &[Vec<u8>]) -> Bytes {
        let mut c = Collector::new(expected, pool);
        for p in pieces {
            c.push(p);
        }
        c.finish()
    }

    fn pieces_of(total: usize, piece: usize) -> Vec<Vec<u8>> {
        (0..total.div_ceil(piece))
            .map(|i| {
                let len = piece.min(total - i * piece);
                (0..len).map(|j| ((i * 31 + j * 7) % 251) as u8).collect()
            })
            .collect()
    }

    #[test]
    fn large_values_are_collected_into_a_mapping_starting_on_a_huge_page() {
        let len = MAPPED_FROM + 12345;
        let pieces = pieces_of(len, 65536);
        let c = Collector::new(len, &pool());
        assert!(
            c.is_mapped(),
            "the kernel refused a {len}-byte anonymous mapping"
        );
        let got = collect(len, &pieces);
        assert_eq!(got.len(), len);
        assert_eq!(got.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(got, pieces.concat());
    }

    #[test]
    fn a_dropped_value_leaves_its_mapping_to_the_next_read_which_sees_only_its_own_bytes() {
        let pool = pool();
        let first = collect_in(&pool, MAPPED_FROM * 2, &pieces_of(MAPPED_FROM * 2, 65536));
        let ptr = first.as_ptr();
        assert_eq!(pool.idle(), 0);
        drop(first);
        assert!(pool.idle() >= MAPPED_FROM * 2, "the mapping came back");
        // A shorter value (within twice) reuses it, and shows none of the first value's bytes past its end.
        let second_pieces: Vec<Vec<u8>> = vec![vec![9; MAPPED_FROM + 5]];
        let second = collect_in(&pool, MAPPED_FROM + 5, &second_pieces);
        assert_eq!(second.as_ptr(), ptr, "the same memory");
        assert_eq!(second, second_pieces.concat());
        // While it is held, another read gets memory of its own.
        let third = collect_in(&pool, MAPPED_FROM + 5, &second_pieces);
        assert_ne!(third.as_ptr(), ptr);
    }

    #[test]
    fn a_read_that_fails_midway_gives_its_mapping_back() {
        let pool = pool();
        let mut c = Collector::new(MAPPED_FROM * 2, &pool);
        assert!(c.is_mapped(), "the kernel refused a mapping");
        c.push(&[7; 65536]);
        assert_eq!(pool.idle(), 0);
        drop(c);
        assert!(pool.idle() >= MAPPED_FROM * 2, "the mapping came back");
        // The next read reuses it and shows only its own bytes.
        let pieces = pieces_of(MAPPED_FROM + 1, 65536);
        let got = collect_in(&pool, MAPPED_FROM + 1, &pieces);
        assert_eq!(pool.idle(), 0, "in use again");
        assert_eq!(got, pieces.concat());
    }

    #[test]
    fn small_values_stay_on_the_heap() {
        assert!(!Collector::new(MAPPED_FROM - 1, &pool()).is_mapped());
        assert!(!Collector::new(0, &pool()).is_mapped());
    }

    #[test]
    fn more_bytes_than_announced_are_kept_and_fewer_are_not_padded() {
        let pieces = pieces_of(MAPPED_FROM + 300_000, 100_000);
        let all = pieces.concat();
        // Announced shorter than what comes: the mapping spills to the heap in the middle of a piece's worth.
        assert_eq!(collect(MAPPED_FROM, &pieces), all);
        // Announced longer than what comes.
        assert_eq!(collect(MAPPED_FROM * 2, &pieces), all);
        assert_eq!(
            collect(10, &pieces_of(1000, 64)),
            pieces_of(1000, 64).concat()
        );
    }

    #[test]
    fn a_damaged_size_reserves_address_space_only() {
        // 1 TiB announced, 1 MiB arrives: the mapping is never touched beyond what was filled (or, where the
        // kernel refuses so much address space, the heap reserves its up-front share only).
        let got = collect(1 << 40, &pieces_of(1 << 20, 65536));
        assert_eq!(got.len(), 1 << 20);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn what_is_pushed_is_what_comes_out(
            expected in prop_oneof![0usize..100_000, MAPPED_FROM - 10..MAPPED_FROM + 200_000],
            total in 0usize..(MAPPED_FROM + 300_000),
            piece in 1usize..300_000,
        ) {
            let pieces = pieces_of(total, piece);
            prop_assert_eq!(collect(expected, &pieces), pieces.concat());
        }
    }
}
