//! The free-space floor of extent files ([`Floor`]): a new large put is refused while the file system's free
//! space, less what the put may need, is below the floor; a put in progress stops growing its file (and fails)
//! at half the floor, its hard floor. So large puts never fill the disk: the space below the floor stays for
//! RocksDB (small puts, commits, flushes and compactions), and a full disk never stops the store through them.
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

    /// The floor of the file system at `dir`: `configured` bytes when set (0: none), else the smaller of
    /// [`DEFAULT_FLOOR_BYTES`] and [`DEFAULT_FLOOR_PERCENT`] of its size. A file system whose size cannot be
    /// read gets no floor (and a warning).
    pub(crate) fn of(dir: &Path, configured: Option<u64>) -> Self {
        let admit = match configured {
            Some(bytes) => bytes,
            None => match rustix::fs::statvfs(dir) {
                Ok(st) => {
                    let total = st.f_blocks.saturating_mul(st.f_frsize);
                    DEFAULT_FLOOR_BYTES.min(total / 100 * DEFAULT_FLOOR_PERCENT)
                }
                Err(e) => {
                    tracing::warn!(
                        "cannot read the size of the file system of {}: {e}; extent files have no free-space floor",
                        dir.display()
                    );
                    0
                }
            },
        };
        if admit == 0 {
            return Self::NONE;
        }
        Self {
            admit,
            hard: admit / 2,
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
        let floor = Floor::of(dir.path(), None);
        assert!(floor.admit <= DEFAULT_FLOOR_BYTES && floor.hard == floor.admit / 2);
        assert!(Floor::of(dir.path(), Some(0)) == Floor::NONE);
        assert!(Floor::NONE.check_admission(dir.path(), u64::MAX).is_ok());
    }
}
