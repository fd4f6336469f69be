//! The paced (open-loop) driver of `--mixed` (issue 23): operation `i` is due at `start + i / rate`, whatever the
//! earlier ones are doing, and each is timed from when it was due, not from when it could start, so that a stall
//! shows in the latency of every operation it delayed (no coordinated omission: wrk2's rule). At most
//! `max_in_flight` run at once; an operation due while that many run starts late, and its lateness is part of its
//! latency. Goodput is the operations that succeeded ÷ those due; an operation still running `grace` after the
//! phase's end is counted as unfinished (not in goodput).

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};

use crate::payload::Outcome;
use crate::stats::Tally;

/// An operation issued more than this after it was due is counted as late.
const LATE_AFTER: Duration = Duration::from_millis(1);

/// How a paced phase runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    /// Operations due per second.
    pub rate: f64,
    /// How long operations are issued.
    pub duration: Duration,
    /// The most operations running at once.
    pub max_in_flight: usize,
    /// How long, after `duration`, the operations still running may take to finish.
    pub grace: Duration,
}

/// What a paced phase did.
#[derive(Debug, Default)]
pub(crate) struct PacedTally {
    /// The operations that ended, each timed from when it was due.
    pub tally: Tally,
    /// Operations due in the phase.
    pub intended: u64,
    /// Operations issued more than [`LATE_AFTER`] after they were due (all in flight were running).
    pub late: u64,
    /// Operations still running at the end of the grace period.
    pub unfinished: u64,
    /// The operations that ended, by the kind `op` gave each (`by_kind[k]`: kind `k`); `tally` is their sum.
    pub by_kind: Vec<Tally>,
}

impl PacedTally {
    /// Operations that succeeded ÷ operations due (1 for a phase with none due).
    pub(crate) fn goodput(&self) -> f64 {
        if self.intended == 0 {
            return 1.0;
        }
        self.tally.latencies.count() as f64 / self.intended as f64
    }
}

impl Pace {
    /// The pace, checked: a positive, finite rate and at least one operation in flight.
    ///
    /// # Errors
    /// A message naming the bad value.
    pub(crate) fn checked(self) -> Result<Self, String> {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!(
                "a paced rate must be a positive number of operations per second, not {}",
                self.rate
            ));
        }
        if self.max_in_flight == 0 {
            return Err("a paced phase needs at least one operation in flight".to_owned());
        }
        Ok(self)
    }

    /// Operations due in the phase.
    fn intended(&self) -> u64 {
        (self.duration.as_secs_f64() * self.rate).floor() as u64
    }

    /// When operation `i` is due, for a phase started at `start`.
    fn due(&self, start: Instant, i: u64) -> Instant {
        start + Duration::from_secs_f64(i as f64 / self.rate)
    }
}

/// Runs `op(0..)` at `pace` (see the module documentation). `op(i)` is called when operation `i` is issued and
/// returns its kind (a small index: the operations are tallied by kind too) and the operation, which runs as a
/// task of its own, so that operations in flight run on every worker of the runtime.
pub(crate) async fn run_paced<F, Fut>(pace: Pace, mut op: F) -> PacedTally
where
    F: FnMut(u64) -> (usize, Fut),
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let start = Instant::now();
    let intended = pace.intended();
    let deadline = start + pace.duration + pace.grace;
    let mut out = PacedTally {
        intended,
        ..PacedTally::default()
    };
    // Dropped at the end, the set aborts what still runs, so that it does not run on into the next phase.
    let mut running = JoinSet::new();
    let mut next = 0u64;
    loop {
        let due = (next < intended).then(|| pace.due(start, next));
        if due.is_none() && running.is_empty() {
            break;
        }
        let room = running.len() < pace.max_in_flight;
        tokio::select! {
            biased;
            Some(ended) = running.join_next(), if !running.is_empty() => match ended {
                Ok((kind, outcome, latency)) => {
                    if out.by_kind.len() <= kind {
                        out.by_kind.resize_with(kind + 1, Tally::default);
                    }
                    if let Some(t) = out.by_kind.get_mut(kind) {
                        t.add(outcome, latency);
                    }
                }
                Err(e) => out.tally.fail(format!("operation task failed: {e}")),
            },
            () = sleep_until(due.unwrap_or(deadline)), if due.is_some() && room => {
                let due_at = due.unwrap_or(deadline);
                if Instant::now().saturating_duration_since(due_at) > LATE_AFTER {
                    out.late += 1;
                }
                let (kind, op) = op(next);
                // Timed where it ends, not when this loop gets to it.
                running.spawn(async move {
                    let outcome = op.await;
                    (kind, outcome, Instant::now().saturating_duration_since(due_at))
                });
                next += 1;
            }
            // Past the grace, what runs is unfinished and what was not issued never is.
            () = sleep_until(deadline) => {
                out.unfinished = running.len() as u64;
                break;
            }
        }
    }
    for kind in &out.by_kind {
        out.tally.merge(kind);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(rate: f64, secs: u64, max_in_flight: usize) -> Pace {
        Pace {
            rate,
            duration: Duration::from_secs(secs),
            max_in_flight,
            grace: Duration::from_secs(1),
        }
    }

    /// What a test prints of a phase (the tally's histogram is too long to print).
    fn summary(out: &PacedTally) -> String {
        format!(
            "intended {}, succeeded {}, failed {}, late {}, unfinished {}",
            out.intended,
            out.tally.latencies.count(),
            out.tally.errors,
            out.late,
            out.unfinished
        )
    }

    /// An operation that takes `ms`, then succeeds moving 1 byte.
    async fn takes(ms: u64) -> Outcome {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Outcome::Done(1)
    }

    #[tokio::test(start_paused = true)]
    async fn operations_are_issued_on_schedule_and_timed_from_when_they_were_due() {
        let start = Instant::now();
        let mut issued = Vec::new();
        let out = run_paced(pace(100.0, 2, 8), |i| {
            issued.push((i, Instant::now() - start));
            (0, takes(3))
        })
        .await;
        assert_eq!(out.intended, 200);
        assert_eq!(issued.len(), 200);
        for (i, at) in &issued {
            assert_eq!(*at, Duration::from_millis(i * 10), "operation {i}");
        }
        assert_eq!((out.late, out.unfinished), (0, 0));
        assert_eq!(out.goodput(), 1.0);
        let l = out.tally.latencies.latency().expect("latencies");
        assert!(
            (l.p50 - 3.0).abs() < 0.5 && (l.p99 - 3.0).abs() < 0.5,
            "{l:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_counts_in_every_operation_it_delayed() {
        // One in flight, 100 due per second, operation 10 stalls for 500 ms: the 50 due meanwhile start late and
        // are timed from when they were due, as a closed loop would not (it would see one slow operation).
        let out = run_paced(pace(100.0, 2, 1), |i| {
            (0, takes(if i == 10 { 500 } else { 1 }))
        })
        .await;
        assert_eq!(out.intended, 200);
        assert!(out.late >= 49, "{}", summary(&out));
        let l = out.tally.latencies.latency().expect("latencies");
        // The operations behind the stall waited up to ~490 ms: far more than 1 % of them were slow.
        assert!(l.p99 > 400.0, "{l:?}");
        assert!(l.p50 < 5.0, "{l:?}");
        // The schedule catches up: everything due was done within the grace.
        assert_eq!(out.goodput(), 1.0, "{}", summary(&out));
    }

    #[tokio::test(start_paused = true)]
    async fn an_overloaded_phase_reports_its_goodput_and_what_did_not_finish() {
        // 100 due per second for 1 s, one in flight, each takes 50 ms: 20 fit in a second, and 20 more in the
        // second of grace, so 40 succeed, the one running at the deadline is unfinished, the rest never start.
        let out = run_paced(pace(100.0, 1, 1), |_| (0, takes(50))).await;
        assert_eq!(out.intended, 100);
        let done = out.tally.latencies.count();
        assert!((39..=41).contains(&done), "{}", summary(&out));
        assert_eq!(out.unfinished, 1, "{}", summary(&out));
        assert!(out.goodput() < 0.5, "{}", out.goodput());
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_counted_and_left_out_of_goodput() {
        let out = run_paced(pace(10.0, 1, 4), |i| {
            (0, async move {
                if i % 2 == 0 {
                    Outcome::Failed("injected".to_owned())
                } else {
                    Outcome::Done(1)
                }
            })
        })
        .await;
        assert_eq!(out.intended, 10);
        assert_eq!(out.tally.errors, 5);
        assert_eq!(out.goodput(), 0.5);
    }

    /// Each kind is tallied apart, and the whole is their sum: here odd operations are slow, and so is the
    /// P99 of the whole, while the even ones stay fast.
    #[tokio::test(start_paused = true)]
    async fn operations_are_tallied_by_kind_too() {
        let out = run_paced(pace(100.0, 2, 16), |i| {
            let kind = usize::from(i % 2 == 1);
            (kind, takes(if kind == 1 { 40 } else { 2 }))
        })
        .await;
        assert_eq!(out.by_kind.len(), 2);
        let fast = out.by_kind[0].latencies.latency().expect("fast");
        let slow = out.by_kind[1].latencies.latency().expect("slow");
        assert_eq!(out.by_kind[0].latencies.count(), 100);
        assert_eq!(out.by_kind[1].latencies.count(), 100);
        assert!((fast.p99 - 2.0).abs() < 0.5, "{fast:?}");
        assert!((slow.p50 - 40.0).abs() < 1.0, "{slow:?}");
        let all = out.tally.latencies.latency().expect("all");
        assert_eq!(out.tally.latencies.count(), 200);
        assert!((all.p99 - 40.0).abs() < 1.0, "{all:?}");
    }

    #[test]
    fn bad_paces_are_refused_with_their_value() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = pace(rate, 1, 1).checked().expect_err("refused");
            assert!(e.contains("positive"), "{e}");
        }
        assert!(pace(1.0, 1, 0).checked().is_err());
        assert!(pace(0.5, 1, 1).checked().is_ok());
    }
}
