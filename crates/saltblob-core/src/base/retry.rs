//! How the core tries a failed step again: one policy type ([`Backoff`]) for every loop of the core, and a
//! per-loop session ([`Retry`]) that waits between attempts and marks the error it gives up on as final
//! ([`Error::retries_exhausted`]), so that no caller above retries what the core has already retried.

use std::future::Future;
use std::time::Duration;

use crate::base::error::{Error, Result};

/// A retry policy: at most `attempts` attempts, waiting `first_delay` before the second and `factor` times as
/// long before each later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Attempts in all, the first included. At least 1.
    pub(crate) attempts: u32,
    /// Wait before the second attempt.
    pub(crate) first_delay: Duration,
    /// How much longer each later wait is than the one before.
    pub(crate) factor: u32,
}

impl Backoff {
    /// A chunk read or write that fails with a retryable error: 4 attempts, after 20, 80 and 320 ms.
    pub(crate) const CHUNK_IO: Backoff = Backoff {
        attempts: 4,
        first_delay: Duration::from_millis(20),
        factor: 4,
    };

    /// A compare-and-set of an intent whose outcome is unknown or was overtaken: 4 attempts, at once (the next
    /// attempt reads what is in place).
    pub(crate) const INTENT_CAS: Backoff = Backoff {
        attempts: 4,
        first_delay: Duration::ZERO,
        factor: 1,
    };

    /// The compare-and-set writes of an unconditional commit that keeps losing races to other puts of the same
    /// key: 8, at once; after them the commit writes unconditionally (the last writer wins).
    pub(crate) const COMMIT_CAS: Backoff = Backoff {
        attempts: 8,
        first_delay: Duration::ZERO,
        factor: 1,
    };

    /// One attempt: for a backend that retries transient failures itself
    /// ([`crate::backend::BackendInfo::retries_internally`]).
    pub(crate) const ONCE: Backoff = Backoff {
        attempts: 1,
        first_delay: Duration::ZERO,
        factor: 1,
    };

    /// A session of this policy for one loop.
    pub(crate) fn start(self) -> Retry {
        Retry {
            policy: self,
            made: 0,
            delay: self.first_delay,
        }
    }

    /// Runs `op` until it succeeds, fails with an error that is not retryable, or the attempts are used up; the
    /// last error is then marked final.
    pub(crate) async fn run<T, F, Fut>(self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retry = self.start();
        loop {
            retry.next_attempt().await;
            match op().await {
                Err(e) if e.is_retryable() && retry.attempts_left() => {
                    tracing::debug!(
                        "retrying after transient error (attempt {}): {e}",
                        retry.made
                    );
                }
                Err(e) if e.is_retryable() => return Err(retry.give_up(e)),
                other => return other,
            }
        }
    }
}

/// One loop's attempts under a [`Backoff`].
#[derive(Debug)]
pub(crate) struct Retry {
    policy: Backoff,
    made: u32,
    delay: Duration,
}

impl Retry {
    /// Starts the next attempt, after the policy's wait (none before the first); `false` once all attempts were
    /// made (the loop then gives up, or takes its fallback).
    pub(crate) async fn next_attempt(&mut self) -> bool {
        if !self.attempts_left() {
            return false;
        }
        if self.made > 0 && !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
            self.delay = self.delay.saturating_mul(self.policy.factor);
        }
        self.made += 1;
        true
    }

    /// Whether another attempt may follow the ones made.
    pub(crate) fn attempts_left(&self) -> bool {
        self.made < self.policy.attempts
    }

    /// `e`, the error of the last attempt, as the loop gives up on it: marked final when the loop retried
    /// ([`Error::retries_exhausted`]).
    pub(crate) fn give_up(&self, e: Error) -> Error {
        e.retries_exhausted(self.made)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn transient() -> Error {
        Error::backend("test", "busy", true)
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_with_growing_waits_then_marks_the_last_final() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let err = Backoff::CHUNK_IO
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(transient())
            })
            .await
            .expect_err("always fails");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(started.elapsed(), Duration::from_millis(20 + 80 + 320));
        assert!(!err.is_retryable(), "{err}");
        assert!(
            err.to_string().contains("gave up after 4 attempts"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_success_and_at_a_final_error() {
        let calls = AtomicU32::new(0);
        let got = Backoff::CHUNK_IO
            .run(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(transient()),
                    n => Ok(n),
                }
            })
            .await
            .expect("second attempt succeeds");
        assert_eq!(got, 1);
        let calls = AtomicU32::new(0);
        let err = Backoff::CHUNK_IO
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(Error::backend("test", "bad request", false))
            })
            .await
            .expect_err("final");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            err.to_string(),
            Error::backend("test", "bad request", false).to_string()
        );
    }

    /// With one attempt the loop retried nothing: the error stays as the backend said (its own retries decide).
    #[tokio::test]
    async fn a_single_attempt_leaves_the_error_as_it_was() {
        let err = Backoff::ONCE
            .run(|| async { Err::<(), _>(transient()) })
            .await
            .expect_err("fails");
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn a_session_counts_its_attempts() {
        let mut retry = Backoff::COMMIT_CAS.start();
        let mut made = 0;
        while retry.next_attempt().await {
            made += 1;
        }
        assert_eq!(made, 8);
        assert!(!retry.attempts_left());
    }
}
