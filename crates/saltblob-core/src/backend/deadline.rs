//! [`IssueBy`]: the latest moment a commit's record write may reach the engine, checked by the backend right
//! before its engine write, so that a write stalled on its way down (queued by the scheduler behind bulk work,
//! a starved runtime, a blocking pool or a lock) is refused instead of landing after the fence it relied on.
//!
//! # Why a task-local and not a parameter
//! The deadline belongs to one commit's write, not to the record or its condition, and it must cross every layer
//! between the commit and the engine (the scheduler, fault injectors, test layers) unchanged. Layers forward a
//! call in the task that made it, so a task-local set around the call ([`within`]) reaches the backend without a
//! parameter on [`super::ChunkStore`]'s record writes and their ~60 callers and implementors, none of which but
//! the commit has a deadline. The one place it does not reach by itself is another task: a backend that issues
//! its engine write elsewhere (RocksDB's blocking pool, a spawned task) reads [`current`] in the calling task
//! and moves the value along. So that a layer or backend that loses it does not go unnoticed, a check marks the
//! deadline as seen, and the commit logs a write that completed without a check ([`Within::checked`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::base::clock::Clock;
use crate::base::error::{Error, Result};
use crate::base::version::VersionId;

tokio::task_local! {
    static ISSUE_BY: IssueBy;
}

/// The latest moment (Unix µs, on the store's clock) a write may be issued to the engine, and whose commit it
/// fences (for the error). Cheap to clone; clones share whether it was checked.
#[derive(Clone, Debug)]
pub struct IssueBy {
    by_micros: u64,
    clock: Arc<dyn Clock>,
    key: Bytes,
    version: VersionId,
    why: &'static str,
    checked: Arc<AtomicBool>,
}

impl IssueBy {
    /// A deadline of `by_micros` on `clock` for the commit of `version` of `key`; `why` says what a later write
    /// would break (for the error).
    pub(crate) fn new(
        by_micros: u64,
        clock: Arc<dyn Clock>,
        key: Bytes,
        version: VersionId,
        why: &'static str,
    ) -> Self {
        Self {
            by_micros,
            clock,
            key,
            version,
            why,
            checked: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The deadline, Unix µs on the store's clock.
    pub fn by_micros(&self) -> u64 {
        self.by_micros
    }

    /// Call right before the engine write, after every wait (locks, queues, a pool): fails with
    /// [`Error::IntentLost`] once the deadline has passed, and the caller must then write **nothing** (the
    /// commit reports the write as not made). Marks the deadline as checked.
    ///
    /// # Errors
    /// [`Error::IntentLost`] past the deadline.
    pub fn check(&self) -> Result<()> {
        self.checked.store(true, Ordering::Relaxed);
        let now = self.clock.now_micros();
        if now > self.by_micros {
            return Err(Error::IntentLost {
                key: self.key[..].into(),
                version: self.version,
                detail: format!(
                    "its write reached the engine {} µs after it was due ({})",
                    now - self.by_micros,
                    self.why
                ),
            });
        }
        Ok(())
    }
}

/// The deadline of the write the calling task is making, if any: read it before moving the write to another
/// task or thread, and [`IssueBy::check`] it there.
pub fn current() -> Option<IssueBy> {
    ISSUE_BY.try_with(IssueBy::clone).ok()
}

/// [`IssueBy::check`] of the calling task's deadline; `Ok` when it has none. For a backend that writes in the
/// calling task.
///
/// # Errors
/// [`Error::IntentLost`] past the deadline.
pub fn check_current() -> Result<()> {
    ISSUE_BY.try_with(IssueBy::check).unwrap_or(Ok(()))
}

/// What [`within`] returns: the call's output, and whether a backend checked the deadline.
pub(crate) struct Within<T> {
    pub(crate) output: T,
    pub(crate) checked: bool,
}

/// Runs `call` (one record write of a commit) with `by` as its deadline; without one, runs it as it is.
pub(crate) async fn within<F: Future>(by: Option<IssueBy>, call: F) -> Within<F::Output> {
    match by {
        None => Within {
            output: call.await,
            checked: true,
        },
        Some(by) => {
            let checked = Arc::clone(&by.checked);
            let output = ISSUE_BY.scope(by, call).await;
            Within {
                output,
                checked: checked.load(Ordering::Relaxed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::OffsetClock;

    fn by(clock: &Arc<OffsetClock>, ahead: u64) -> IssueBy {
        let now = clock.now_micros();
        IssueBy::new(
            now + ahead,
            clock.clone(),
            Bytes::from_static(b"k"),
            VersionId(7),
            "test",
        )
    }

    /// The deadline reaches the call's task, is checked against the store's clock, and a check is reported;
    /// outside a scope there is no deadline.
    #[tokio::test]
    async fn the_deadline_reaches_the_call_and_fails_once_passed() {
        let clock = OffsetClock::new();
        assert!(current().is_none());
        assert!(check_current().is_ok());
        let unchecked = within(Some(by(&clock, 1_000_000)), async { current().is_some() }).await;
        assert!(unchecked.output && !unchecked.checked);
        let ok = within(Some(by(&clock, 1_000_000)), async { check_current() }).await;
        assert!(ok.output.is_ok() && ok.checked);
        let late = within(Some(by(&clock, 1_000_000)), async {
            clock.advance(std::time::Duration::from_secs(2));
            // Checked on another thread, as RocksDB's blocking pool does.
            let by = current().expect("in scope");
            tokio::task::spawn_blocking(move || by.check())
                .await
                .expect("join")
        })
        .await;
        assert!(late.checked);
        match late.output {
            Err(Error::IntentLost { version, .. }) => assert_eq!(version, VersionId(7)),
            other => panic!("past its deadline: {other:?}"),
        }
    }
}
