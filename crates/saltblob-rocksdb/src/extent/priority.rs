//! The kernel I/O priority of extent reads and writes. Those of background classes run in the idle class
//! (`ioprio_set(2)`, `IOPRIO_CLASS_IDLE`), so that an I/O scheduler that honours priorities (`mq-deadline`, `bfq`)
//! dispatches a small put's log write and its journal commit ahead of a huge value's queued requests instead of
//! behind them. `mq-deadline` prefers reads to writes, so without this a large get's reads held small commits
//! back for seconds (docs/bench/journal/isolation.md, *bulk extent I/O in the idle class*). Schedulers without
//! priorities (`none`, `kyber`) ignore it, and so do systems other than Linux.
//!
//! The priority belongs to the thread that issues the I/O, and extent I/O runs on Tokio's shared blocking
//! threads (which also run small puts' commits), so it is set around each read or write and restored after.

use std::sync::atomic::{AtomicU64, Ordering};

use saltblob_core::schedule::ClassTag;

/// The I/O priority one extent read or write runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoPriority {
    /// The issuing thread's own (best effort, unless set otherwise).
    Inherited,
    /// The idle class: dispatched when no request of a higher class waits (`mq-deadline` ages requests, so it
    /// is served within `prio_aging_expire`, 10 s by default, even under a load that never pauses).
    Idle,
}

impl IoPriority {
    /// The priority of extent I/O done for `class` (none: outside any scheduled operation) when background
    /// classes get idle I/O ([`RocksConfig::bulk_idle_io`](crate::RocksConfig::bulk_idle_io)).
    pub(crate) fn of(class: Option<&ClassTag>, bulk_idle_io: bool) -> Self {
        match class {
            Some(tag) if bulk_idle_io && tag.is_background() => Self::Idle,
            _ => Self::Inherited,
        }
    }

    /// Runs `io` (blocking) on the calling thread at this priority, and gives the thread its own back after,
    /// even if `io` panics. Counts the I/O in `idle_ios` when it ran in the idle class (not where the kernel
    /// refused the change, which is logged once, nor for [`IoPriority::Inherited`]).
    pub(crate) fn run<T>(self, idle_ios: &AtomicU64, io: impl FnOnce() -> T) -> T {
        match self {
            Self::Inherited => io(),
            Self::Idle => {
                let guard = sys::Lowered::to_idle();
                if guard.is_some() {
                    idle_ios.fetch_add(1, Ordering::Relaxed);
                }
                let out = io();
                drop(guard);
                out
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::sync::atomic::{AtomicBool, Ordering};

    /// `IOPRIO_WHO_PROCESS`: with `who` 0, the calling thread.
    const WHO_THREAD: libc::c_long = 1;
    /// `IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)`: the class sits above the 13 bits of data.
    pub(super) const IDLE: libc::c_long = 3 << 13;

    static REFUSAL_LOGGED: AtomicBool = AtomicBool::new(false);

    /// The calling thread's I/O priority value (`ioprio_get(2)`), or the error.
    #[allow(unsafe_code)]
    pub(super) fn current() -> std::io::Result<libc::c_long> {
        // SAFETY: ioprio_get takes two integers and touches no memory of ours.
        let got = unsafe { libc::syscall(libc::SYS_ioprio_get, WHO_THREAD, 0 as libc::c_long) };
        if got < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(got)
        }
    }

    /// Sets the calling thread's I/O priority value (`ioprio_set(2)`).
    #[allow(unsafe_code)]
    fn set(value: libc::c_long) -> std::io::Result<()> {
        // SAFETY: ioprio_set takes three integers and touches no memory of ours.
        let rc =
            unsafe { libc::syscall(libc::SYS_ioprio_set, WHO_THREAD, 0 as libc::c_long, value) };
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// The calling thread in the idle class until dropped, then back at the priority it had.
    pub(super) struct Lowered {
        before: libc::c_long,
    }

    impl Lowered {
        /// Lowers the calling thread to the idle class; `None` (logged once) where the kernel refuses.
        pub(super) fn to_idle() -> Option<Self> {
            let lowered = current().and_then(|before| set(IDLE).map(|()| Self { before }));
            match lowered {
                Ok(lowered) => Some(lowered),
                Err(e) => {
                    if !REFUSAL_LOGGED.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "extent I/O of background classes runs at normal I/O priority: the kernel refused \
                             the idle class (ioprio_set: {e})"
                        );
                    }
                    None
                }
            }
        }
    }

    impl Drop for Lowered {
        fn drop(&mut self) {
            // Going back up from the idle class to the best-effort one needs no privilege, so this fails only if
            // the kernel changed under us; the thread would then serve small commits at idle priority, so say so.
            if let Err(e) = set(self.before) {
                tracing::error!(
                    "cannot give a blocking thread its I/O priority back after an extent I/O \
                     (ioprio_set to {:#x}: {e})",
                    self.before
                );
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    /// No I/O priorities here: extent I/O runs at the thread's own.
    pub(super) struct Lowered;

    impl Lowered {
        pub(super) fn to_idle() -> Option<Self> {
            None
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn idle_io_runs_in_the_idle_class_and_the_thread_gets_its_priority_back() {
        let before = sys::current().expect("ioprio_get");
        let idle_ios = AtomicU64::new(0);
        let inside = IoPriority::Idle.run(&idle_ios, || sys::current().expect("ioprio_get inside"));
        assert_eq!(inside, sys::IDLE, "the I/O ran in the idle class");
        assert_eq!(idle_ios.load(Ordering::Relaxed), 1, "and was counted");
        assert_eq!(sys::current().expect("ioprio_get after"), before);

        let inside =
            IoPriority::Inherited.run(&idle_ios, || sys::current().expect("ioprio_get inside"));
        assert_eq!(inside, before, "inherited I/O keeps the thread's priority");
        assert_eq!(
            idle_ios.load(Ordering::Relaxed),
            1,
            "and is not counted idle"
        );
    }

    #[test]
    fn a_panicking_io_still_gives_the_priority_back() {
        let before = sys::current().expect("ioprio_get");
        let idle_ios = AtomicU64::new(0);
        let caught = std::panic::catch_unwind(|| {
            IoPriority::Idle.run(&idle_ios, || panic!("the I/O failed"))
        });
        assert!(caught.is_err());
        assert_eq!(sys::current().expect("ioprio_get after"), before);
    }
}
