//! The process's limit on open files (`RLIMIT_NOFILE`) and how saltblob shares it, so that no part of the
//! process can take the descriptors another needs: an embedded store whose engine cannot open a table file
//! stops writing until it is reopened, and a server that cannot accept sheds nobody, it just fails.
//!
//! Of the soft limit, [`RESERVED_FDS`] are left for what is not counted (standard streams, listeners, the
//! engine's own log, manifest and the files its background jobs write, directory handles, connections to a
//! cluster); of the rest, a quarter is the engine's for the table and blob files it keeps open
//! (RocksDB's `max_open_files`), a quarter the extent files' (puts in progress and reads), and a half the
//! server's connections. Each share can be set instead (`max_open_files=`, `extent_open_files=`,
//! `--max-connections`); `docs/operations.md` (*Open files*) describes it.

/// Descriptors left out of the shares: see the module documentation.
pub const RESERVED_FDS: u64 = 64;

/// The limit taken when the process has none.
const UNLIMITED: u64 = 1 << 20;

/// How a limit on open files is shared; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdShares {
    /// The soft limit shared.
    pub limit: u64,
    /// Files the storage engine may keep open (RocksDB's `max_open_files`); at least 16.
    pub engine: u64,
    /// Extent files open at once, puts in progress and reads together; at least 8.
    pub extents: u64,
    /// Connections a server accepts at once; at least 8.
    pub connections: u64,
}

impl FdShares {
    /// The shares of `limit` open files.
    pub fn of(limit: u64) -> Self {
        let free = limit.saturating_sub(RESERVED_FDS);
        Self {
            limit,
            engine: (free / 4).max(16),
            extents: (free / 4).max(8),
            connections: (free / 2).max(8),
        }
    }

    /// The shares of this process's soft limit, as it is now.
    pub fn current() -> Self {
        Self::of(open_files_limit())
    }
}

/// This process's soft limit on open files (`2^20` when it has none).
pub fn open_files_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(UNLIMITED)
}

/// Raises the soft limit on open files to the hard limit, as servers do at start (the soft limit of a login
/// shell is often 1024 while the hard one is far higher); returns the soft limit after.
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some() && limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "cannot raise the soft limit on open files to the hard one");
        }
    }
    open_files_limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shares add up to the limit less the reserve, and small limits keep each share's minimum.
    #[test]
    fn shares_split_what_the_reserve_leaves() {
        let s = FdShares::of(256);
        assert_eq!((s.engine, s.extents, s.connections), (48, 48, 96));
        assert_eq!(s.engine + s.extents + s.connections, 256 - RESERVED_FDS);
        let s = FdShares::of(1024);
        assert_eq!((s.engine, s.extents, s.connections), (240, 240, 480));
        let s = FdShares::of(20);
        assert_eq!((s.engine, s.extents, s.connections), (16, 8, 8));
    }

    /// The limit read is the process's soft limit, and the current shares are its shares.
    #[test]
    fn the_limit_is_the_process_soft_limit() {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(open_files_limit(), limit.current.unwrap_or(UNLIMITED));
        // Not raised here: the test binary's other tests share the process; a raise is for `main`.
        assert_eq!(FdShares::current(), FdShares::of(open_files_limit()));
    }
}
