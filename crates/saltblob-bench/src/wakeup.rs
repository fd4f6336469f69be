//! Wake-up lag during a paced phase: how much later than asked a task on the bench's async runtime, and an OS
//! thread outside it, wake from a sleep of [`PERIOD`]. It says where a stall of the small operations came from,
//! which their latencies alone cannot:
//!
//! - the **runtime** late and the thread not: the runtime's workers were busy or blocked (a long computation or
//!   a blocking call on a worker), so operations that had finished were not polled, and those due not issued;
//! - **both** late: the machine did not run the process's threads (CPU, memory, the hypervisor);
//! - **neither**: the wait was in the store (its engine, its disk), not in the process's scheduling.
//!
//! Tokio's timer counts whole milliseconds, so the runtime's lag is up to about 1 ms on an idle machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinHandle;

use crate::stats::{Latency, Recorder};

/// How long each probe sleeps.
pub(crate) const PERIOD: Duration = Duration::from_millis(1);
/// A wake-up this much later than asked counts as a stall.
pub(crate) const STALL: Duration = Duration::from_millis(10);

/// One probe's wake-ups over a phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WakeLag {
    /// Sleeps ended.
    pub wakeups: u64,
    /// Wake-ups later than asked by more than [`STALL`] (10 ms).
    pub stalls: u64,
    /// How much later than asked each wake-up came, ms.
    pub lag_ms: Latency,
}

/// Both probes over a phase (`"wakeups"` of a paced side in the JSON); a probe that never woke is null.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Wakeups {
    /// A task on the bench's async runtime, which also runs the small operations' tasks.
    pub runtime: Option<WakeLag>,
    /// An OS thread of its own, outside the runtime.
    pub thread: Option<WakeLag>,
}

/// Lags recorded as they come.
#[derive(Debug, Default)]
struct Lags {
    recorder: Recorder,
    stalls: u64,
}

impl Lags {
    /// Records a sleep of [`PERIOD`] that began at `slept` and ended at `woke`.
    fn add(&mut self, slept: Instant, woke: Instant) {
        let lag = woke.saturating_duration_since(slept).saturating_sub(PERIOD);
        self.recorder.record(lag);
        self.stalls += u64::from(lag > STALL);
    }

    fn finish(self) -> Option<WakeLag> {
        Some(WakeLag {
            wakeups: self.recorder.count(),
            stalls: self.stalls,
            lag_ms: self.recorder.latency()?,
        })
    }
}

/// Both probes, running until [`WakeProbe::finish`].
pub(crate) struct WakeProbe {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Lags>,
    thread: Option<std::thread::JoinHandle<Lags>>,
}

impl WakeProbe {
    /// Starts both probes now, on the current runtime and on a thread of their own (none if the OS refuses one:
    /// the thread's figures are then null).
    pub(crate) fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut lags = Lags::default();
                while !stop.load(Ordering::Relaxed) {
                    let slept = Instant::now();
                    tokio::time::sleep(PERIOD).await;
                    lags.add(slept, Instant::now());
                }
                lags
            })
        };
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("bench-wake-probe".into())
                .spawn(move || {
                    let mut lags = Lags::default();
                    while !stop.load(Ordering::Relaxed) {
                        let slept = Instant::now();
                        std::thread::sleep(PERIOD);
                        lags.add(slept, Instant::now());
                    }
                    lags
                })
                .ok()
        };
        Self { stop, task, thread }
    }

    /// Stops both probes; their wake-ups since [`WakeProbe::start`].
    pub(crate) async fn finish(self) -> Wakeups {
        self.stop.store(true, Ordering::Relaxed);
        let runtime = self.task.await.ok().and_then(Lags::finish);
        let thread = match self.thread {
            // Joined off the runtime's workers: the thread ends within one sleep, but a join blocks.
            Some(thread) => tokio::task::spawn_blocking(move || thread.join().ok())
                .await
                .ok()
                .flatten()
                .and_then(Lags::finish),
            None => None,
        };
        Wakeups { runtime, thread }
    }
}

impl Wakeups {
    /// One line of the text report: each probe's P99 and longest lag, and its stalls.
    pub(crate) fn describe(&self) -> String {
        let one = |name: &str, lag: &Option<WakeLag>| match lag {
            Some(l) => format!(
                "{name} P99 {:.1} ms, max {:.1} ms, {} stall{} over {} ms",
                l.lag_ms.p99,
                l.lag_ms.max,
                l.stalls,
                if l.stalls == 1 { "" } else { "s" },
                STALL.as_millis()
            ),
            None => format!("{name} n/a"),
        };
        format!(
            "wake-up lag: {}; {}",
            one("runtime", &self.runtime),
            one("thread", &self.thread)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lag_is_what_a_sleep_took_beyond_the_period_and_stalls_are_counted() {
        let mut lags = Lags::default();
        let t = Instant::now();
        lags.add(t, t + PERIOD + Duration::from_micros(500));
        lags.add(t, t + PERIOD + Duration::from_millis(40));
        // A sleep that ended early (a coarse clock) is no negative lag.
        lags.add(t, t);
        let l = lags.finish().expect("lags");
        assert_eq!((l.wakeups, l.stalls), (3, 1));
        assert!(l.lag_ms.min == 0.0, "{l:?}");
        assert!((l.lag_ms.max - 40.0).abs() < 0.1, "{l:?}");
        assert_eq!(Lags::default().finish(), None, "no wake-up, no figures");
    }

    /// A runtime whose one worker is blocked shows in the runtime's probe, not in the thread's.
    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_runtime_shows_in_the_runtime_probe_only() {
        let probe = WakeProbe::start();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Blocks the only worker, as a blocking call in async code would.
        std::thread::sleep(Duration::from_millis(120));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let w = probe.finish().await;
        let runtime = w.runtime.clone().expect("the runtime probe woke");
        let thread = w.thread.clone().expect("the thread probe woke");
        assert!(runtime.lag_ms.max >= 100.0, "{w:?}");
        assert!(runtime.stalls >= 1, "{w:?}");
        assert!(
            thread.wakeups > runtime.wakeups,
            "the thread kept waking while the runtime was blocked: {w:?}"
        );
        let text = w.describe();
        assert!(
            text.starts_with("wake-up lag: runtime P99 ") && text.contains("; thread P99 "),
            "{text}"
        );
    }
}
