//! How a failed step is tried again, in every crate of the workspace: one policy type ([`Backoff`]: how many
//! attempts, how long to wait between them, with or without [`Jitter`]) and a per-loop session ([`Retry`]) that
//! waits between attempts. Which errors are worth another attempt stays the caller's decision; the core's own
//! loops ([`Backoff::run`]) mark the error they give up on as final ([`Error::retries_exhausted`]), so that no
//! caller above retries what the core has already retried.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::base::error::{Error, Result};

/// A retry policy: at most `attempts` attempts, waiting `first_delay` before the second and `factor` times as
/// long before each later one, never longer than `max_delay`; each wait shortened at random under
/// [`Jitter::Full`].
///
/// Built as a constant, so that each loop names its policy:
/// ```
/// use std::time::Duration;
/// use saltblob_core::{Backoff, Jitter};
///
/// /// 5 attempts, after waits of up to 50, 100, 200 and 400 ms.
/// const REQUEST: Backoff = Backoff::new(5, Duration::from_millis(50))
///     .growing(2)
///     .capped(Duration::from_secs(2))
///     .with_jitter(Jitter::Full);
/// assert_eq!(REQUEST.attempts(), 5);
/// assert_eq!(REQUEST.nominal_waits().collect::<Vec<_>>(), [50, 100, 200, 400].map(Duration::from_millis));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Backoff {
    /// Attempts in all, the first included. At least 1.
    attempts: u32,
    /// Wait before the second attempt.
    first_delay: Duration,
    /// How much longer each later wait is than the one before.
    factor: u32,
    /// The longest wait.
    max_delay: Duration,
    /// How waits are spread.
    jitter: Jitter,
}

/// How the waits of a [`Backoff`] are spread, so that clients that failed together do not all try again at the
/// same instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Each wait is exactly the schedule's.
    None,
    /// Full jitter: each wait is drawn uniformly from zero to the schedule's (which keeps growing as if it had
    /// been waited in full).
    Full,
}

impl Backoff {
    /// A chunk read or write that fails with a retryable error: 4 attempts, after 20, 80 and 320 ms.
    pub(crate) const CHUNK_IO: Backoff = Backoff::new(4, Duration::from_millis(20)).growing(4);

    /// A compare-and-set of an intent whose outcome is unknown or was overtaken: 4 attempts, at once (the next
    /// attempt reads what is in place).
    pub(crate) const INTENT_CAS: Backoff = Backoff::new(4, Duration::ZERO);

    /// The compare-and-set writes of an unconditional commit that keeps losing races to other puts of the same
    /// key: 8, at once; after them the commit writes unconditionally (the last writer wins).
    pub(crate) const COMMIT_CAS: Backoff = Backoff::new(8, Duration::ZERO);

    /// One attempt: for a backend that retries transient failures itself
    /// ([`crate::backend::BackendInfo::retries_internally`]).
    pub(crate) const ONCE: Backoff = Backoff::new(1, Duration::ZERO);

    /// `attempts` attempts (0 counts as 1), waiting `first_delay` between each two; no growth, no cap, no
    /// jitter until [`Backoff::growing`], [`Backoff::capped`] and [`Backoff::with_jitter`] say otherwise.
    pub const fn new(attempts: u32, first_delay: Duration) -> Self {
        Self {
            attempts: if attempts == 0 { 1 } else { attempts },
            first_delay,
            factor: 1,
            max_delay: Duration::MAX,
            jitter: Jitter::None,
        }
    }

    /// Each wait `factor` times as long as the one before (0 counts as 1).
    pub const fn growing(self, factor: u32) -> Self {
        Self {
            factor: if factor == 0 { 1 } else { factor },
            ..self
        }
    }

    /// No wait longer than `max_delay`.
    pub const fn capped(self, max_delay: Duration) -> Self {
        Self { max_delay, ..self }
    }

    /// Waits spread by `jitter`.
    pub const fn with_jitter(self, jitter: Jitter) -> Self {
        Self { jitter, ..self }
    }

    /// The same schedule with `attempts` attempts (0 counts as 1): for a count that is configured.
    pub const fn with_attempts(self, attempts: u32) -> Self {
        Self {
            attempts: if attempts == 0 { 1 } else { attempts },
            ..self
        }
    }

    /// Attempts in all, the first included.
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The schedule's waits, before the second attempt and each later one, without jitter (under
    /// [`Jitter::Full`], the most each wait may be).
    pub fn nominal_waits(self) -> impl Iterator<Item = Duration> {
        let mut delay = self.first_delay.min(self.max_delay);
        (1..self.attempts).map(move |_| {
            let wait = delay;
            delay = self.next_delay(delay);
            wait
        })
    }

    /// The nominal wait after `delay`.
    fn next_delay(&self, delay: Duration) -> Duration {
        delay.saturating_mul(self.factor).min(self.max_delay)
    }

    /// A session of this policy for one loop.
    pub fn start(self) -> Retry {
        Retry {
            policy: self,
            made: 0,
            delay: self.first_delay.min(self.max_delay),
        }
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` refuses, or the attempts are used up; returns
    /// the last outcome as it is. The loop of any crate whose errors are its own.
    ///
    /// # Errors
    /// The error of the last attempt.
    pub async fn retry<T, E, F, Fut, R>(self, retryable: R, op: F) -> std::result::Result<T, E>
    where
        E: Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        R: FnMut(&E) -> bool,
    {
        self.start().run(retryable, op).await
    }

    /// Runs `op` until it succeeds, fails with an error that is not [`Error::is_retryable`], or the attempts are
    /// used up; a retryable last error is then marked final ([`Error::retries_exhausted`]).
    ///
    /// # Errors
    /// The error of the last attempt, marked final when it was retryable and retried.
    pub async fn run<T, F, Fut>(self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retry = self.start();
        match retry.run(Error::is_retryable, op).await {
            Err(e) if e.is_retryable() => Err(retry.give_up(e)),
            other => other,
        }
    }
}

/// One loop's attempts under a [`Backoff`]: for a loop that decides more than whether an error is retryable
/// (`while retry.next_attempt().await { … }`).
#[derive(Debug)]
pub struct Retry {
    policy: Backoff,
    made: u32,
    /// The nominal wait before the next attempt.
    delay: Duration,
}

impl Retry {
    /// Starts the next attempt, after the policy's wait (none before the first); `false` once all attempts were
    /// made (the loop then gives up, or takes its fallback).
    pub async fn next_attempt(&mut self) -> bool {
        if !self.attempts_left() {
            return false;
        }
        if self.made > 0 && !self.delay.is_zero() {
            let wait = match self.policy.jitter {
                Jitter::None => self.delay,
                Jitter::Full => full_jitter(self.delay, rand::random()),
            };
            tokio::time::sleep(wait).await;
            self.delay = self.policy.next_delay(self.delay);
        }
        self.made += 1;
        true
    }

    /// Whether another attempt may follow the ones made.
    pub fn attempts_left(&self) -> bool {
        self.made < self.policy.attempts
    }

    /// The attempts started so far.
    pub fn attempts_made(&self) -> u32 {
        self.made
    }

    /// `e`, the error of the last attempt, as the loop gives up on it: marked final when the loop retried
    /// ([`Error::retries_exhausted`]).
    pub fn give_up(&self, e: Error) -> Error {
        e.retries_exhausted(self.made)
    }

    /// Runs `op` on this fresh session (at least one attempt), until it succeeds, fails with an error `retryable`
    /// refuses, or the attempts are used up; returns the last outcome as it is.
    async fn run<T, E, F, Fut, R>(
        &mut self,
        mut retryable: R,
        mut op: F,
    ) -> std::result::Result<T, E>
    where
        E: Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        R: FnMut(&E) -> bool,
    {
        loop {
            self.next_attempt().await;
            match op().await {
                Err(e) if self.attempts_left() && retryable(&e) => {
                    tracing::debug!(
                        "retrying after transient error (attempt {}): {e}",
                        self.made
                    );
                }
                other => return other,
            }
        }
    }
}

/// A wait drawn uniformly from zero to `delay` (in nanoseconds, saturating at about 584 years) by the random
/// number `random`: 0 gives none, `u64::MAX` all of `delay`.
fn full_jitter(delay: Duration, random: u64) -> Duration {
    let most = u128::from(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX));
    let drawn = (u128::from(random) * (most + 1)) >> 64;
    Duration::from_nanos(u64::try_from(drawn).unwrap_or(u64::MAX))
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

    #[test]
    fn schedules_grow_up_to_their_cap() {
        let waits = |b: Backoff| b.nominal_waits().collect::<Vec<_>>();
        assert_eq!(
            waits(Backoff::CHUNK_IO),
            [20, 80, 320].map(Duration::from_millis)
        );
        let capped = Backoff::new(6, Duration::from_millis(500))
            .growing(2)
            .capped(Duration::from_secs(2));
        assert_eq!(
            waits(capped),
            [500, 1000, 2000, 2000, 2000].map(Duration::from_millis)
        );
        assert_eq!(Backoff::new(0, Duration::ZERO).attempts(), 1);
        assert_eq!(capped.with_attempts(0).attempts(), 1);
        assert!(waits(Backoff::ONCE).is_empty());
    }

    #[test]
    fn full_jitter_draws_from_zero_to_the_delay() {
        let d = Duration::from_millis(400);
        assert_eq!(full_jitter(d, 0), Duration::ZERO);
        assert_eq!(full_jitter(d, u64::MAX), d);
        assert_eq!(full_jitter(d, 1 << 63), d / 2);
        assert_eq!(full_jitter(Duration::ZERO, u64::MAX), Duration::ZERO);
        assert_eq!(
            full_jitter(Duration::MAX, u64::MAX),
            Duration::from_nanos(u64::MAX)
        );
    }

    proptest::proptest! {
        #[test]
        fn a_jittered_wait_never_exceeds_the_delay(nanos: u64, random: u64) {
            let d = Duration::from_nanos(nanos);
            proptest::prop_assert!(full_jitter(d, random) <= d);
        }
    }

    /// Under full jitter a loop makes the same attempts and waits at most the schedule's waits in all.
    #[tokio::test(start_paused = true)]
    async fn a_jittered_loop_waits_at_most_its_schedule() {
        let policy = Backoff::new(5, Duration::from_millis(50))
            .growing(2)
            .with_jitter(Jitter::Full);
        for _ in 0..20 {
            let calls = AtomicU32::new(0);
            let started = tokio::time::Instant::now();
            let err = policy
                .run(|| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(transient())
                })
                .await
                .expect_err("always fails");
            assert_eq!(calls.load(Ordering::SeqCst), 5);
            assert!(started.elapsed() <= Duration::from_millis(50 + 100 + 200 + 400));
            assert!(
                err.to_string().contains("gave up after 5 attempts"),
                "{err}"
            );
        }
    }

    /// The loop of another crate: its own error type and retry decision, the last error returned as it was.
    #[tokio::test(start_paused = true)]
    async fn a_generic_loop_returns_the_last_error_as_it_was() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let policy = Backoff::new(3, Duration::from_millis(100)).growing(4);
        let err = policy
            .retry(
                |e: &String| e.starts_with("busy"),
                || async {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(format!("busy {n}"))
                },
            )
            .await
            .expect_err("always fails");
        assert_eq!(err, "busy 2");
        assert_eq!(started.elapsed(), Duration::from_millis(100 + 400));
        let calls = AtomicU32::new(0);
        let err = policy
            .retry(
                |e: &String| e.starts_with("busy"),
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>("denied".to_owned())
                },
            )
            .await
            .expect_err("final");
        assert_eq!((err.as_str(), calls.load(Ordering::SeqCst)), ("denied", 1));
    }
}
