//! The clock a store reads for every time it writes or compares: intent leases, the reclaim queue's due times,
//! grace periods, fsck's minimum age, blob expiry and the time part of version ids.

use std::fmt::Debug;
#[cfg(any(test, feature = "conformance"))]
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of wall-clock time for a store ([`crate::StoreConfig::clock`]).
pub trait Clock: Debug + Send + Sync {
    /// Microseconds since the Unix epoch. Clients sharing a backend must read clocks that agree to well within a
    /// third of the intent lease.
    fn now_micros(&self) -> u64;
}

/// The system's wall clock: the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        crate::version::now_micros()
    }
}

/// The system clock plus an offset that only grows: time flows as usual and [`OffsetClock::advance`] jumps it
/// forward, so that a test sees a lease or grace period run out without waiting for it. Timestamps written
/// before a jump read as that much older afterwards, as they would after a real wait. Tokio timers (the
/// intent renewals) do not jump: a put renewing its lease with this clock is one whose renewals are late.
///
/// Jumps of more than a minute in total model a clock skew that clients sharing a backend must not have (the
/// low-water marks of gc and the reclaim queue allow one minute): give every store of one backend the same
/// clock, or keep jumps short.
#[cfg(any(test, feature = "conformance"))]
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_micros: AtomicU64,
}

#[cfg(any(test, feature = "conformance"))]
impl OffsetClock {
    /// A clock that reads the system time (no offset yet).
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        self.offset_micros
            .fetch_add(crate::records::micros(by), Ordering::SeqCst);
    }
}

#[cfg(any(test, feature = "conformance"))]
impl Clock for OffsetClock {
    fn now_micros(&self) -> u64 {
        SystemClock
            .now_micros()
            .saturating_add(self.offset_micros.load(Ordering::SeqCst))
    }
}
