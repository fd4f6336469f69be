//! Buffers lent out as [`Bytes`] and reused: a buffer handed out through [`LendingPool::share`] comes back to
//! its pool when the last slice of it is dropped, so that large reads neither zero nor fault in fresh memory
//! each time (on this project's virtual machines a fresh page costs more than copying it: 60 MiB of fresh heap
//! take 52 ms to fill, reused ones 10 ms). The embedded backend's extent reads and whole-value reads
//! (`BlobStream::collect_bytes`) use one each.
//!
//! [`HugePages`] is memory in transparent huge pages: whole-value reads collect into it, and the embedded
//! backend's extent writes are issued from it.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use memmap2::{MmapMut, MmapOptions};

/// Size of a transparent huge page on x86-64.
pub const HUGE_PAGE: usize = 2 << 20;

/// An anonymous private mapping advised for transparent huge pages, used from its first huge-page boundary: at
/// least the capacity asked for from there, in whole huge pages (the kernel backs only whole aligned 2 MiB
/// stretches with huge pages), zeroed. Where the kernel gives small pages (huge pages off, memory fragmented) it
/// is only slower.
pub struct HugePages {
    map: MmapMut,
    start: usize,
}

impl HugePages {
    /// A mapping of at least `capacity` bytes from a huge-page boundary.
    ///
    /// # Errors
    /// When the kernel refuses the mapping, or `capacity` is too large to round up.
    pub fn new(capacity: usize) -> std::io::Result<Self> {
        let reserve = capacity
            .div_ceil(HUGE_PAGE)
            .checked_add(1)
            .and_then(|pages| pages.checked_mul(HUGE_PAGE))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("no mapping of {capacity} bytes"),
                )
            })?;
        let map = MmapOptions::new().len(reserve).map_anon()?;
        #[cfg(target_os = "linux")]
        if let Err(e) = map.advise(memmap2::Advice::HugePage) {
            tracing::debug!("huge pages not advised for a mapping ({e}): small pages instead");
        }
        let start = map.as_ptr().align_offset(HUGE_PAGE).min(HUGE_PAGE);
        Ok(Self { map, start })
    }

    /// Its bytes, from the huge-page boundary to the end of the mapping.
    pub fn bytes(&self) -> &[u8] {
        self.map.get(self.start..).unwrap_or_default()
    }

    /// Its bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.get_mut(self.start..).unwrap_or_default()
    }
}

/// A buffer a [`LendingPool`] keeps.
pub trait PooledBuffer: Send + Sync + 'static {
    /// Bytes it can hold: which requests it serves, and what it counts for against the pool's limit.
    fn capacity(&self) -> usize;
    /// The bytes it lends out.
    fn bytes(&self) -> &[u8];
}

/// Idle buffers kept for reuse: at most `keep` of them, of at most `idle_bytes` capacity in all (a buffer
/// coming back that does not fit is freed).
pub struct LendingPool<B> {
    keep: usize,
    idle_bytes: usize,
    free: Mutex<Vec<B>>,
}

impl<B: PooledBuffer> LendingPool<B> {
    /// A pool keeping at most `keep` idle buffers of `idle_bytes` capacity in all (0: none is kept).
    pub fn new(keep: usize, idle_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            keep,
            idle_bytes,
            free: Mutex::new(Vec::new()),
        })
    }

    /// An idle buffer that holds at least `len` bytes and at most twice as much, if there is one. Its contents
    /// are whatever it last held.
    pub fn take_fitting(&self, len: usize) -> Option<B> {
        let mut free = self.free.lock().ok()?;
        let at = free
            .iter()
            .position(|b| b.capacity() >= len && b.capacity() <= len.saturating_mul(2))?;
        Some(free.swap_remove(at))
    }

    /// `buf`'s bytes as shared [`Bytes`] (no copy); `buf` comes back to the pool when the last slice of them is
    /// dropped.
    pub fn share(self: &Arc<Self>, buf: B) -> Bytes {
        Bytes::from_owner(Lent {
            buf: Some(buf),
            pool: Arc::clone(self),
        })
    }

    /// Keeps `buf` for reuse if the pool has room for it; frees it otherwise.
    pub fn give(&self, buf: B) {
        if let Ok(mut free) = self.free.lock() {
            let idle: usize = free.iter().map(PooledBuffer::capacity).sum();
            if free.len() < self.keep && idle.saturating_add(buf.capacity()) <= self.idle_bytes {
                free.push(buf);
            }
        }
    }

    /// Capacity of the idle buffers, in bytes.
    pub fn idle(&self) -> usize {
        self.free
            .lock()
            .map(|free| free.iter().map(PooledBuffer::capacity).sum())
            .unwrap_or(0)
    }
}

impl<B: PooledBuffer> std::fmt::Debug for LendingPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LendingPool")
            .field("keep", &self.keep)
            .field("idle_bytes", &self.idle_bytes)
            .field("idle", &self.idle())
            .finish()
    }
}

/// A buffer lent out as [`Bytes`]; given back to its pool when dropped.
struct Lent<B: PooledBuffer> {
    buf: Option<B>,
    pool: Arc<LendingPool<B>>,
}

impl<B: PooledBuffer> AsRef<[u8]> for Lent<B> {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], PooledBuffer::bytes)
    }
}

impl<B: PooledBuffer> Drop for Lent<B> {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Buf(Vec<u8>);

    impl PooledBuffer for Buf {
        fn capacity(&self) -> usize {
            self.0.len()
        }
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    #[test]
    fn huge_pages_start_on_a_boundary_and_hold_what_was_asked() {
        for capacity in [1, 1 << 20, HUGE_PAGE, HUGE_PAGE + 1] {
            let mut pages = HugePages::new(capacity).expect("mapping");
            assert_eq!(pages.bytes().as_ptr().addr() % HUGE_PAGE, 0);
            assert!(pages.bytes().len() >= capacity.next_multiple_of(HUGE_PAGE));
            assert!(pages.bytes().iter().all(|&b| b == 0), "zeroed");
            pages.bytes_mut()[capacity - 1] = 3;
            assert_eq!(pages.bytes()[capacity - 1], 3);
        }
        assert!(HugePages::new(usize::MAX).is_err(), "too large");
    }

    #[test]
    fn a_shared_buffer_comes_back_when_its_last_slice_is_dropped() {
        let pool = LendingPool::new(4, 1 << 20);
        let shared = pool.share(Buf(vec![7; 1000]));
        let ptr = shared.as_ptr();
        let slice = shared.slice(10..20);
        drop(shared);
        assert_eq!(pool.idle(), 0, "a slice still holds it");
        assert_eq!(&slice[..], &[7; 10]);
        drop(slice);
        assert_eq!(pool.idle(), 1000);
        let again = pool.take_fitting(600).map(|b| b.0);
        assert_eq!(
            again.as_ref().map(|v| v.as_ptr()),
            Some(ptr),
            "the same memory, not a copy"
        );
        assert_eq!(pool.idle(), 0);
    }

    #[test]
    fn only_buffers_that_fit_are_reused() {
        let pool = LendingPool::new(4, 1 << 20);
        pool.give(Buf(vec![0; 1000]));
        assert!(pool.take_fitting(1001).is_none(), "too small");
        assert!(pool.take_fitting(499).is_none(), "more than twice as large");
        assert!(pool.take_fitting(500).is_some());
    }

    #[test]
    fn the_pool_keeps_up_to_its_limits() {
        let pool = LendingPool::new(2, 2500);
        for _ in 0..3 {
            pool.give(Buf(vec![0; 1000]));
        }
        assert_eq!(pool.idle(), 2000, "two buffers at most");
        let pool = LendingPool::new(8, 2500);
        for _ in 0..3 {
            pool.give(Buf(vec![0; 1000]));
        }
        assert_eq!(pool.idle(), 2000, "2500 bytes at most");
        let none = LendingPool::new(8, 0);
        none.give(Buf(vec![0; 1]));
        assert_eq!(none.idle(), 0);
    }
}
