//! The client-timestamp clock: every plain write carries a timestamp from one strictly increasing process
//! clock, so that of two commits of this process the later wins, and a conditional write's cluster-chosen
//! timestamp, once observed, orders before every later plain write.

use std::sync::atomic::{AtomicI64, Ordering};

use saltblob_core::version::now_micros;

/// The last timestamp handed out, in microseconds: write timestamps strictly increase within the process.
static CLOCK: AtomicI64 = AtomicI64::new(0);

/// A write timestamp (Unix microseconds) greater than every one this process handed out or observed before.
pub fn next_timestamp() -> i64 {
    let now = i64::try_from(now_micros()).unwrap_or(i64::MAX);
    let previous = CLOCK.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        Some(after(now, last))
    });
    after(now, previous.unwrap_or_else(|v| v))
}

/// The timestamp handed out at `now` after `last`: later than `last`, or `i64::MAX` once `last` (observed from
/// the cluster) reached it, never a wrapped-around one that would order before it.
fn after(now: i64, last: i64) -> i64 {
    now.max(last.saturating_add(1))
}

/// Makes later [`next_timestamp`]s exceed `ts` (a timestamp the cluster chose, e.g. of a conditional write).
pub(crate) fn observe_timestamp(ts: i64) {
    CLOCK.fetch_max(ts, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_observed_at_the_maximum_does_not_wrap() {
        assert_eq!(after(5, i64::MAX), i64::MAX);
        assert_eq!(after(5, 9), 10);
        assert_eq!(after(50, 9), 50);
    }

    #[test]
    fn timestamps_strictly_increase() {
        let mut last = next_timestamp();
        for _ in 0..10_000 {
            let t = next_timestamp();
            assert!(t > last);
            last = t;
        }
        observe_timestamp(last + 1_000_000);
        assert!(
            next_timestamp() > last + 1_000_000,
            "observed timestamps push the clock"
        );
    }
}
