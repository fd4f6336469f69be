//! [`CommitGate`]: the extent files' data I/O stands back while a synced commit is pending.
//!
//! A small put commits with one synced write of RocksDB's log; beside huge reads and writes of extent files that
//! commit waits in the device queue behind them (docs/bench/journal/isolation.md, *Where the small P99 goes*).
//! The gate is the engine-queue signal of issue 23: every synced RocksDB write holds a [`Pending`] while it
//! runs, and each extent read or write, before it is issued, waits until no synced write is pending, for at most
//! [`RocksConfig::extent_yield`](crate::RocksConfig::extent_yield) (so huge values are slowed, never starved).
//! The I/O already in flight is not recalled: the device queue holds at most `extent_io_depth` writes of one put.
//!
//! Both sides run on blocking threads (RocksDB writes and extent I/O), so the gate is a mutex and a condition
//! variable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Counts the synced writes in progress and lets extent I/O wait for none to be; see the module documentation.
#[derive(Debug)]
pub(crate) struct CommitGate {
    /// Synced writes in progress.
    pending: Mutex<usize>,
    /// Signalled when `pending` drops to zero.
    quiet: Condvar,
    /// The longest one I/O stands back; zero: never.
    max_wait: Duration,
    /// I/O requests that stood back, and for how long in all (microseconds).
    stood_back: AtomicU64,
    stood_back_micros: AtomicU64,
}

/// A synced write in progress: the gate counts it until this is dropped.
#[must_use = "the write counts as pending only while this lives"]
pub(crate) struct Pending<'a>(&'a CommitGate);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut pending = self.0.pending.lock().unwrap_or_else(|p| p.into_inner());
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.0.quiet.notify_all();
        }
    }
}

impl CommitGate {
    /// A gate whose I/O stands back for at most `max_wait` (zero: the gate never holds anything back).
    pub(crate) fn new(max_wait: Duration) -> Self {
        Self {
            pending: Mutex::new(0),
            quiet: Condvar::new(),
            max_wait,
            stood_back: AtomicU64::new(0),
            stood_back_micros: AtomicU64::new(0),
        }
    }

    /// Counts a synced write as pending until the returned guard is dropped.
    pub(crate) fn commit(&self) -> Pending<'_> {
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Pending(self)
    }

    /// Waits (blocking) until no synced write is pending, for at most the gate's `max_wait`; returns at once
    /// when none is, or when the gate is off.
    pub(crate) fn stand_back(&self) {
        if self.max_wait.is_zero() {
            return;
        }
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if *pending == 0 {
            return;
        }
        let start = Instant::now();
        // A poisoned lock only means another waiter panicked; the count is still right.
        drop(
            self.quiet
                .wait_timeout_while(pending, self.max_wait, |n| *n > 0)
                .unwrap_or_else(|p| p.into_inner()),
        );
        self.stood_back.fetch_add(1, Ordering::Relaxed);
        let waited = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stood_back_micros.fetch_add(waited, Ordering::Relaxed);
    }

    /// How many extent I/O requests stood back so far, and how long in all.
    pub(crate) fn stood_back(&self) -> (u64, Duration) {
        (
            self.stood_back.load(Ordering::Relaxed),
            Duration::from_micros(self.stood_back_micros.load(Ordering::Relaxed)),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc;

    use super::*;

    /// Runs `stand_back` on a thread of its own; the receiver gets how long it took.
    fn standing_back(gate: &Arc<CommitGate>) -> mpsc::Receiver<Duration> {
        let (tx, rx) = mpsc::channel();
        let gate = Arc::clone(gate);
        std::thread::spawn(move || {
            let start = Instant::now();
            gate.stand_back();
            let _ = tx.send(start.elapsed());
        });
        rx
    }

    #[test]
    fn io_goes_at_once_when_no_commit_is_pending() {
        let gate = Arc::new(CommitGate::new(Duration::from_secs(60)));
        drop(gate.commit());
        standing_back(&gate)
            .recv_timeout(Duration::from_secs(10))
            .expect("returns at once, not after the gate's minute");
        assert_eq!(gate.stood_back().0, 0, "nothing stood back");
    }

    #[test]
    fn io_waits_until_the_last_pending_commit_ends() {
        let gate = Arc::new(CommitGate::new(Duration::from_secs(60)));
        let first = gate.commit();
        let second = gate.commit();
        let rx = standing_back(&gate);
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "held back while two commits are pending"
        );
        drop(first);
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "held back while one still is"
        );
        drop(second);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("let go once none is pending");
        assert_eq!(gate.stood_back().0, 1);
    }

    #[test]
    fn io_stands_back_at_most_the_gate_wait() {
        let gate = Arc::new(CommitGate::new(Duration::from_millis(50)));
        let _stuck = gate.commit();
        let waited = standing_back(&gate)
            .recv_timeout(Duration::from_secs(10))
            .expect("let go after the longest wait, though the commit is still pending");
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        let (n, total) = gate.stood_back();
        assert_eq!(n, 1);
        assert!(total >= Duration::from_millis(50), "{total:?}");
    }

    #[test]
    fn a_gate_that_is_off_never_holds_io_back() {
        let gate = Arc::new(CommitGate::new(Duration::ZERO));
        let _pending = gate.commit();
        standing_back(&gate)
            .recv_timeout(Duration::from_secs(10))
            .expect("returns at once");
        assert_eq!(gate.stood_back().0, 0);
    }
}
