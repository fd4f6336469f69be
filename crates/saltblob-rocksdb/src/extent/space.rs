//! The free-space floor of extent files ([`Floor`]): a new large put is refused while the file system's free
//! space, less what the put may need, is below the floor; a put in progress stops growing its file (and fails)
//! at half the floor, its hard floor. So large puts never fill the disk: the space below the floor stays for
//! RocksDB (small puts, commits, flushes and compactions), and a full disk never stops the store through them.
//!
//! The default hard floor is never below what RocksDB must find free to take writes again after something
//! else filled the disk ([`crate::RocksConfig::resume_free_bytes`]) plus [`RESUME_MARGIN`]: whatever large
//! puts left free is enough for it once the other writer's space is given back. (A 512 MiB file system whose
//! 5% floor was below RocksDB's 64 MiB stayed refusing writes after the space an outside writer took was
//! freed, when large puts had filled the rest.)
//!
//! The space other puts in progress may still take is not counted against a new put: files grow with the bytes
//! received ([`super::writer`]), so a client that declares much and sends little holds little, and counting
//! declared sizes would let such clients refuse everyone else's puts. What they do receive is held back from the
//! disk by the hard floor of each growth.

use std::fs::File;
use std::io;
use std::path::Path;

/// The default floor: this much, or [`DEFAULT_FLOOR_PERCENT`] of the file system when that is less.
pub(crate) const DEFAULT_FLOOR_BYTES: u64 = 1 << 30;
/// The default floor as a share of the file system's size, in percent (for file systems under 20 GiB).
pub(crate) const DEFAULT_FLOOR_PERCENT: u64 = 5;
/// What the default hard floor keeps free beyond RocksDB's resume threshold, for the small puts, commits and
/// log writes made once large puts stop.
pub(crate) const RESUME_MARGIN: u64 = 16 << 20;

/// What a new extent file (`admit`) and each growth of one (`hard`) must leave free on the file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Floor {
    /// Bytes a new large put must leave free, its whole size counted.
    pub(crate) admit: u64,
    /// Bytes each growth of a file must leave free (half of `admit`).
    pub(crate) hard: u64,
}

impl Floor {
    /// No floor: the file system's own `ENOSPC` is the only limit.
    pub(crate) const NONE: Self = Self { admit: 0, hard: 0 };

    /// The floor of the file system at `dir`: `configured` bytes when set (0: none; its hard floor half of
    /// it), else [`Floor::default_for`] its size, RocksDB resuming writes once `resume_free` bytes are free. A
    /// file system whose size cannot be read gets no floor (and a warning).
    pub(crate) fn of(dir: &Path, configured: Option<u64>, resume_free: u64) -> Self {
        match configured {
            Some(admit) => Self {
                admit,
                hard: admit / 2,
            },
            None => match rustix::fs::statvfs(dir) {
                Ok(st) => Self::default_for(st.f_blocks.saturating_mul(st.f_frsize), resume_free),
                Err(e) => {
                    tracing::warn!(
                        "cannot read the size of the file system of {}: {e}; extent files have no free-space floor",
                        dir.display()
                    );
                    Self::NONE
                }
            },
        }
    }

    /// The default floor of a file system of `total` bytes: the smaller of [`DEFAULT_FLOOR_BYTES`] and
    /// [`DEFAULT_FLOOR_PERCENT`] of it, its hard floor half of that; neither below `resume_free` (what RocksDB
    /// must find free to take writes again after a full disk) plus [`RESUME_MARGIN`]. A file system that reports
    /// no size (ramfs: no limit, and no free blocks counted) gets none.
    fn default_for(total: u64, resume_free: u64) -> Self {
        if total == 0 {
            return Self::NONE;
        }
        let least = resume_free.saturating_add(RESUME_MARGIN);
        let admit = DEFAULT_FLOOR_BYTES
            .min(total / 100 * DEFAULT_FLOOR_PERCENT)
            .max(least);
        Self {
            admit,
            hard: (admit / 2).max(least),
        }
    }

    /// Whether a new extent file of up to `need` bytes may be made in `dir`: its file system must keep
    /// [`Floor::admit`] bytes free after it. The refusal is a `StorageFull` error saying how much is free.
    pub(crate) fn check_admission(&self, dir: &Path, need: u64) -> io::Result<()> {
        if self.admit == 0 {
            return Ok(());
        }
        let free = free_bytes(rustix::fs::statvfs(dir).map_err(io::Error::from)?);
        check(
            free,
            need,
            self.admit,
            "the free-space floor of new large puts",
        )
    }

    /// Whether `file` may grow by `grow` bytes: its file system must keep [`Floor::hard`] bytes free after it.
    pub(crate) fn check_growth(&self, file: &File, grow: u64) -> io::Result<()> {
        if self.hard == 0 {
            return Ok(());
        }
        let free = free_bytes(rustix::fs::fstatvfs(file).map_err(io::Error::from)?);
        check(
            free,
            grow,
            self.hard,
            "the hard free-space floor of puts in progress",
        )
    }
}

/// Bytes free to unprivileged writers.
fn free_bytes(st: rustix::fs::StatVfs) -> u64 {
    st.f_bavail.saturating_mul(st.f_frsize)
}

/// Fails with `StorageFull` when taking `need` of `free` bytes leaves less than `floor`.
fn check(free: u64, need: u64, floor: u64, which: &str) -> io::Result<()> {
    if free.saturating_sub(need) >= floor && free >= need {
        return Ok(());
    }
    let mib = |b: u64| b.div_ceil(1 << 20);
    Err(io::Error::new(
        io::ErrorKind::StorageFull,
        format!(
            "No space left on device: {} MiB free, {} MiB needed, {} MiB kept free ({which})",
            mib(free),
            mib(need),
            mib(floor)
        ),
    ))
}

/// Whether `e` says the disk is full: `ENOSPC`, `EDQUOT` or a floor's refusal.
pub(crate) fn is_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull
        || matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_refuses_what_would_go_below_it() {
        assert!(check(10 << 30, 1 << 30, 1 << 30, "f").is_ok());
        let e = check(2 << 30, (1 << 30) + 1, 1 << 30, "f").expect_err("below the floor");
        assert!(
            is_full(&e) && e.to_string().contains("No space left on device"),
            "{e}"
        );
        assert!(check(5, 10, 0, "f").is_err(), "more than is free");
        let dir = tempfile::tempdir().expect("dir");
        let floor = Floor::of(dir.path(), None, 64 << 20);
        assert!(floor.admit >= floor.hard && floor.hard >= (64 << 20) + RESUME_MARGIN);
        assert!(Floor::of(dir.path(), Some(0), 64 << 20) == Floor::NONE);
        let configured = Floor::of(dir.path(), Some(40 << 20), 64 << 20);
        assert_eq!((configured.admit, configured.hard), (40 << 20, 20 << 20));
        assert!(Floor::NONE.check_admission(dir.path(), u64::MAX).is_ok());
    }

    /// Large puts leave RocksDB room to resume on a small file system, and 1 GiB (half of it hard) on a large
    /// one.
    #[test]
    fn the_default_floor_leaves_room_for_rocksdb_to_resume() {
        let resume = 64 << 20;
        let small = Floor::default_for(512 << 20, resume);
        assert_eq!(
            (small.admit, small.hard),
            (resume + RESUME_MARGIN, resume + RESUME_MARGIN),
            "5% of 512 MiB is below what RocksDB needs free"
        );
        assert_eq!(
            Floor::default_for(0, resume),
            Floor::NONE,
            "ramfs reports no size and no free blocks"
        );
        let large = Floor::default_for(100 << 30, resume);
        assert_eq!((large.admit, large.hard), (1 << 30, 512 << 20));
        let middle = Floor::default_for(4 << 30, resume);
        let five_percent = (4 << 30) / 100 * 5;
        assert_eq!(
            (middle.admit, middle.hard),
            (five_percent, five_percent / 2)
        );
    }
}
