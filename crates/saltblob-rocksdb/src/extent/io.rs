//! Direct I/O on extent files: buffers aligned for `O_DIRECT` (without unsafe code: a vector one alignment
//! larger than needed, used from its first aligned byte; the writers' in transparent huge pages), opening files
//! with `O_DIRECT` or, where the file system refuses it, buffered, the alignment the kernel asks for, and
//! pre-sizing with `fallocate`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use saltblob_core::buffers::{HUGE_PAGE, HugePages, LendingPool, PooledBuffer};

/// The smallest alignment used: the 4 KiB physical sector of current disks (a multiple of every logical block
/// size), so that no write is a read-modify-write of a sector.
pub(crate) const MIN_ALIGN: u64 = 4096;

/// A buffer whose usable bytes start at an `align`-byte boundary of memory, as `O_DIRECT` requires.
pub(crate) struct AlignedBuf {
    storage: Storage,
    start: usize,
    len: usize,
}

/// Where an [`AlignedBuf`]'s bytes are.
enum Storage {
    Heap(Vec<u8>),
    Mapped(HugePages),
}

impl Storage {
    fn all(&self) -> &[u8] {
        match self {
            Storage::Heap(v) => v,
            Storage::Mapped(m) => m.bytes(),
        }
    }

    fn all_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Heap(v) => v,
            Storage::Mapped(m) => m.bytes_mut(),
        }
    }
}

impl AlignedBuf {
    /// A zeroed buffer of `len` usable bytes aligned to `align` (a power of two), on the heap.
    pub(crate) fn new(len: usize, align: usize) -> Self {
        let storage = vec![0u8; len + align];
        let start = storage.as_ptr().align_offset(align).min(align);
        Self {
            storage: Storage::Heap(storage),
            start,
            len,
        }
    }

    /// A zeroed buffer of `len` usable bytes from a huge-page boundary (2 MiB, a multiple of `align`), in
    /// [`HugePages`] of its own: a buffer of up to 2 MiB then lies in one physically contiguous page, and a
    /// direct write of it is one segment for the device, not one per 4 KiB page (a 1 MiB write from small pages
    /// is 256 segments, more than this virtual disk's `max_segments` of 254, so the kernel splits it). Measured
    /// on this machine, 60 MiB of 1 MiB `O_DIRECT` writes then `fdatasync`, twelve rounds alternating:
    /// 27.7–27.9 ms from a huge page, 32.3–33.9 ms from small pages (medians of two runs;
    /// `docs/bench/direct-write-pages.py`). Where the mapping cannot be made
    /// (or `align` exceeds a huge page), a heap buffer; where the kernel gives small pages (huge pages off or
    /// memory fragmented), only slower.
    pub(crate) fn huge(len: usize, align: usize) -> Self {
        if align > HUGE_PAGE {
            return Self::new(len, align);
        }
        match HugePages::new(len) {
            Ok(pages) => Self {
                storage: Storage::Mapped(pages),
                start: 0,
                len,
            },
            Err(e) => {
                tracing::debug!("no mapping for an extent write buffer ({e}): the heap instead");
                Self::new(len, align)
            }
        }
    }

    /// Its usable bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.storage
            .all()
            .get(self.start..self.start + self.len)
            .unwrap_or_default()
    }

    /// Its usable bytes, to fill.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.storage
            .all_mut()
            .get_mut(self.start..self.start + self.len)
            .unwrap_or_default()
    }

    /// Usable bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Buffers for reads, reused (a [`LendingPool`]): a read buffer is handed out as shared [`Bytes`] (its chunks
/// are slices of it, no copy) and comes back when the last of them is dropped, so that reads neither zero nor
/// fault in fresh memory each time. Sizes are rounded up to 64 KiB; at most `keep` idle buffers are kept, of
/// [`READ_IDLE_BYTES`] in all (a larger one that comes back is freed).
pub(crate) struct ReadBuffers {
    align: usize,
    pool: Arc<LendingPool<AlignedBuf>>,
}

/// Granularity of read buffer sizes, so that reads of about the same size share buffers.
const READ_GRAIN: usize = 64 << 10;
/// The most bytes of idle read buffers kept: what one large get reads ahead (16 reads of 1 MiB batches).
pub(crate) const READ_IDLE_BYTES: usize = 32 << 20;

impl ReadBuffers {
    /// A pool of read buffers aligned to `align`, keeping at most `keep` idle.
    pub(crate) fn new(align: usize, keep: usize) -> Self {
        Self {
            align,
            pool: LendingPool::new(keep, READ_IDLE_BYTES),
        }
    }

    /// A buffer of `len` usable bytes (aligned to the pool's alignment, which must be at least the one the
    /// read needs): an idle one that fits (holding at most twice as much), or a new one. Its contents are
    /// whatever it last held.
    pub(crate) fn take(&self, len: usize) -> AlignedBuf {
        let mut buf = self
            .pool
            .take_fitting(len)
            .unwrap_or_else(|| AlignedBuf::new(len.div_ceil(READ_GRAIN) * READ_GRAIN, self.align));
        buf.len = len;
        buf
    }

    /// The usable bytes of `buf` as shared [`Bytes`]; the buffer comes back to the pool when the last slice
    /// of them is dropped.
    pub(crate) fn share(&self, buf: AlignedBuf) -> Bytes {
        self.pool.share(buf)
    }
}

impl PooledBuffer for AlignedBuf {
    fn capacity(&self) -> usize {
        self.storage.all().len() - self.start
    }

    fn bytes(&self) -> &[u8] {
        AlignedBuf::bytes(self)
    }
}

/// Buffers of one size kept for reuse, so that a put does not fault fresh pages in for every I/O buffer, each in
/// transparent huge pages ([`AlignedBuf::huge`]). Holds at most `keep` of them.
pub(crate) struct BufferPool {
    len: usize,
    align: usize,
    keep: usize,
    free: Mutex<Vec<AlignedBuf>>,
}

impl BufferPool {
    /// A pool of buffers of `len` bytes aligned to `align`, keeping at most `keep` idle.
    pub(crate) fn new(len: usize, align: usize, keep: usize) -> Self {
        Self {
            len,
            align,
            keep,
            free: Mutex::new(Vec::new()),
        }
    }

    /// Bytes per buffer.
    pub(crate) fn buffer_len(&self) -> usize {
        self.len
    }

    /// An idle buffer, or a new one. Its contents are whatever it last held.
    pub(crate) fn take(&self) -> AlignedBuf {
        self.free
            .lock()
            .ok()
            .and_then(|mut free| free.pop())
            .unwrap_or_else(|| AlignedBuf::huge(self.len, self.align))
    }

    /// Returns a buffer for reuse (dropped when the pool is full).
    pub(crate) fn give(&self, buf: AlignedBuf) {
        if buf.len() != self.len {
            return;
        }
        if let Ok(mut free) = self.free.lock()
            && free.len() < self.keep
        {
            free.push(buf);
        }
    }
}

/// How extent files are read and written on a file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IoMode {
    /// Whether `O_DIRECT` is used.
    pub(crate) direct: bool,
    /// Offsets and lengths of requests are multiples of this (and buffers start at such a boundary).
    pub(crate) align: u64,
}

impl IoMode {
    /// The mode for `file`, opened with `O_DIRECT` when `direct`: the alignment is the largest of 4 KiB, what
    /// the kernel asks of direct I/O on it (`statx` `STATX_DIOALIGN`, Linux 6.1+) and the physical sector of the
    /// device under it (sysfs). `why_not` is set when direct I/O turns out not to be supported.
    pub(crate) fn of(file: &File, direct: bool) -> (Self, Option<String>) {
        let mut align = MIN_ALIGN;
        let mut why_not = None;
        let mut direct = direct;
        if let Ok(st) = rustix::fs::statx(
            file,
            "",
            rustix::fs::AtFlags::EMPTY_PATH,
            rustix::fs::StatxFlags::DIOALIGN,
        ) && st.stx_mask & rustix::fs::StatxFlags::DIOALIGN.bits() != 0
        {
            if st.stx_dio_offset_align == 0 {
                if direct {
                    why_not = Some("statx reports no direct I/O support for its files".to_owned());
                }
                direct = false;
            } else {
                align = align
                    .max(u64::from(st.stx_dio_offset_align))
                    .max(u64::from(st.stx_dio_mem_align));
            }
        }
        if let Ok(meta) = file.metadata()
            && let Some(sector) = physical_sector(meta.dev())
        {
            align = align.max(sector);
        }
        (
            Self {
                direct,
                align: align.next_power_of_two(),
            },
            why_not,
        )
    }

    /// `n` rounded up to the alignment.
    pub(crate) fn round_up(self, n: u64) -> u64 {
        n.div_ceil(self.align) * self.align
    }

    /// `n` rounded down to the alignment.
    pub(crate) fn round_down(self, n: u64) -> u64 {
        n / self.align * self.align
    }
}

/// The physical sector size of the block device with `dev` (or of the disk a partition `dev` is on), from sysfs.
fn physical_sector(dev: u64) -> Option<u64> {
    let sys = format!(
        "/sys/dev/block/{}:{}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    );
    ["queue/physical_block_size", "../queue/physical_block_size"]
        .iter()
        .find_map(|q| std::fs::read_to_string(Path::new(&sys).join(q)).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|s| s.is_power_of_two())
}

/// Whether `e` is the error of a file system that refuses `O_DIRECT`.
fn refuses_direct(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Creates `path`, which must not exist, for reading and writing, with `O_DIRECT` when `direct` and the file
/// system takes it. Returns the file, whether it is direct, and why not when direct was asked for.
pub(crate) fn create(path: &Path, direct: bool) -> io::Result<(File, bool, Option<String>)> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create_new(true);
    if direct {
        match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
            Ok(file) => return Ok((file, true, None)),
            // The kernel creates the file before it checks O_DIRECT: reopen what this call created (an
            // `O_EXCL` create that failed on O_DIRECT created it: it did not exist before).
            Err(e) if refuses_direct(&e) => {
                let file = OpenOptions::new().read(true).write(true).open(path)?;
                let why = format!("the file system refuses O_DIRECT ({e})");
                return Ok((file, false, Some(why)));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((opts.open(path)?, false, None))
}

/// Opens `path` for reading, with `O_DIRECT` when `direct` and the file system takes it; returns whether it did.
pub(crate) fn open_read(path: &Path, direct: bool) -> io::Result<(File, bool)> {
    if direct {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => return Ok((file, true)),
            Err(e) if refuses_direct(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((File::open(path)?, false))
}

/// Allocates bytes `offset..offset + len` of `file` (extending its size), so that writes into them allocate
/// nothing. Returns `false` when the file system cannot pre-allocate (the file then grows as it is written).
pub(crate) fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<bool> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), offset, len) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::OPNOTSUPP) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Reads bytes `offset..offset + buf.len()` of `file` into `buf`; returns how many there were before the end of
/// the file.
pub(crate) fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        let rest = buf.get_mut(done..).unwrap_or_default();
        match file.read_at(rest, offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned() {
        for (len, align) in [(4096, 4096), (1 << 20, 4096), (8192, 8192)] {
            let mut b = AlignedBuf::new(len, align);
            assert_eq!(b.bytes().as_ptr().addr() % align, 0);
            assert_eq!(b.bytes_mut().len(), len);
        }
    }

    /// A write buffer starts on a huge-page boundary, is zeroed and holds what is written into it; a buffer
    /// asked for an alignment beyond a huge page comes from the heap with that alignment.
    #[test]
    fn write_buffers_start_on_a_huge_page() {
        let mut b = AlignedBuf::huge(1 << 20, 4096);
        assert!(matches!(b.storage, Storage::Mapped(_)), "a mapping here");
        assert_eq!(b.bytes().as_ptr().addr() % HUGE_PAGE, 0);
        assert_eq!(b.len(), 1 << 20);
        assert!(b.bytes().iter().all(|&x| x == 0), "zeroed");
        b.bytes_mut()[(1 << 20) - 1] = 5;
        assert_eq!(b.bytes()[(1 << 20) - 1], 5);
        assert!(b.capacity() >= 1 << 20);
        let odd = AlignedBuf::huge(8192, 2 * HUGE_PAGE);
        assert!(matches!(odd.storage, Storage::Heap(_)));
        assert_eq!(odd.bytes().as_ptr().addr() % (2 * HUGE_PAGE), 0);
        let pool = BufferPool::new(1 << 20, 4096, 2);
        assert_eq!(
            pool.take().bytes().as_ptr().addr() % HUGE_PAGE,
            0,
            "the pool's"
        );
    }

    /// A read buffer is shared without copying, and reused once every slice of it is gone.
    #[test]
    fn read_buffers_are_lent_without_copying_and_come_back() {
        let pool = ReadBuffers::new(4096, 2);
        let mut b = pool.take(100_000);
        assert_eq!((b.len(), b.bytes().as_ptr().addr() % 4096), (100_000, 0));
        b.bytes_mut()[5] = 42;
        let addr = b.bytes().as_ptr().addr();
        let shared = pool.share(b);
        let slice = shared.slice(5..10);
        assert_eq!((shared.as_ptr().addr(), slice[0]), (addr, 42));
        drop(shared);
        let other = pool.take(100_000);
        assert_ne!(
            other.bytes().as_ptr().addr(),
            addr,
            "still lent: a slice lives"
        );
        drop(slice);
        let again = pool.take(90_000);
        assert_eq!(
            again.bytes().as_ptr().addr(),
            addr,
            "came back and is reused"
        );
        assert_eq!(again.len(), 90_000);
        let big = pool.take(300_000);
        assert!(big.len() == 300_000 && big.bytes().as_ptr().addr() != addr);
        drop(other);

        // Idle buffers are kept up to READ_IDLE_BYTES in all: a huge one is freed when it comes back.
        let huge = pool.take(READ_IDLE_BYTES);
        drop(pool.share(huge));
        drop(pool.share(big));
        let small = 300_000_usize.div_ceil(READ_GRAIN) * READ_GRAIN;
        assert!(
            (small..=small + 4096).contains(&pool.pool.idle()),
            "kept the small one only"
        );
    }

    #[test]
    fn the_pool_reuses_up_to_its_limit() {
        let pool = BufferPool::new(8192, 4096, 1);
        let mut a = pool.take();
        a.bytes_mut()[0] = 9;
        let b = pool.take();
        pool.give(a);
        pool.give(b);
        assert_eq!(pool.take().bytes()[0], 9, "the first returned is kept");
        assert_eq!(pool.take().bytes()[0], 0, "the second was dropped");
        pool.give(AlignedBuf::new(4096, 4096));
        assert_eq!(
            pool.take().len(),
            8192,
            "a buffer of another size is not kept"
        );
    }

    #[test]
    fn the_mode_of_a_file_here_is_aligned_to_at_least_a_sector() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, direct, why_not) = create(&dir.path().join("f"), true).expect("create");
        let (mode, statx_no) = IoMode::of(&file, direct);
        assert!(
            mode.align >= MIN_ALIGN && mode.align.is_power_of_two(),
            "{mode:?}"
        );
        assert_eq!(
            mode.direct,
            direct && statx_no.is_none(),
            "{why_not:?} {statx_no:?}"
        );
        assert_eq!(mode.round_up(1), mode.align);
        assert_eq!(mode.round_down(mode.align + 1), mode.align);
        assert!(
            create(&dir.path().join("f"), true).is_err(),
            "never clobbers"
        );
        if preallocate(&file, 0, 1 << 20).expect("fallocate") {
            assert_eq!(file.metadata().expect("meta").len(), 1 << 20);
        }
    }
}
