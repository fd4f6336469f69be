//! The extent files' share of the process's open files ([`RocksConfig::extent_open_files`]): each writer holds
//! one descriptor for its put's life, each read one while it reads. Past the share a put fails and a read
//! waits, so that extents never take the descriptors RocksDB and the server's connections need.
//!
//! [`RocksConfig::extent_open_files`]: crate::config::RocksConfig::extent_open_files

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use saltblob_core::Error;

use crate::error::NAME;

/// How long a put or a read waits for a descriptor of the share before it fails, retryably.
pub(crate) const FD_WAIT: Duration = Duration::from_secs(2);

/// Descriptors of the extent files' share not in use; see the module documentation.
#[derive(Debug)]
pub(crate) struct FdBudget {
    total: u64,
    free: Mutex<u64>,
    returned: Condvar,
}

/// One descriptor of an [`FdBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct FdPermit(Arc<FdBudget>);

impl FdBudget {
    /// A budget of `total` descriptors (at least 1).
    pub(crate) fn new(total: u64) -> Arc<Self> {
        let total = total.max(1);
        Arc::new(Self {
            total,
            free: Mutex::new(total),
            returned: Condvar::new(),
        })
    }

    /// Takes a descriptor, waiting up to `wait` for one to be given back (blocking); fails, retryably, after.
    pub(crate) fn take_within(self: &Arc<Self>, wait: Duration) -> saltblob_core::Result<FdPermit> {
        let deadline = Instant::now() + wait;
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::backend(
                    NAME,
                    format!(
                        "all {} open files of the extent files' share are in use (extent_open_files; the \
                         process may open {}): try again, or raise the open-file limit",
                        self.total,
                        saltblob_core::fds::open_files_limit()
                    ),
                    true,
                ));
            }
            free = self
                .returned
                .wait_timeout(free, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *free -= 1;
        Ok(FdPermit(Arc::clone(self)))
    }

    /// Descriptors not in use.
    #[cfg(test)]
    fn free(&self) -> u64 {
        *self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FdPermit {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the share a take fails after its wait, retryably; a descriptor given back is taken by a waiter.
    #[test]
    fn takes_past_the_share_wait_then_fail_and_a_return_wakes_a_waiter() {
        let budget = FdBudget::new(2);
        let a = budget.take_within(Duration::ZERO).expect("first");
        let _b = budget.take_within(Duration::ZERO).expect("second");
        let started = Instant::now();
        let e = budget
            .take_within(Duration::from_millis(50))
            .expect_err("past the share");
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(
            e.is_retryable() && e.to_string().contains("extent_open_files"),
            "{e}"
        );
        let waiter = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.take_within(Duration::from_secs(10)).map(|_| ()))
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(a);
        waiter.join().expect("waiter").expect("woken by the return");
        assert_eq!(
            budget.free(),
            1,
            "the waiter's permit was given back when dropped"
        );
    }
}
