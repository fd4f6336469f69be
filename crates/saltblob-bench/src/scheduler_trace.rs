//! What the store's scheduler did during a paced phase: its duty and limit sampled every
//! [`SAMPLE_EVERY`], and what each class had admitted between the phase's first and last sample. It says
//! whether the scheduler held bulk work back while the small P99 was measured, or let it run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use saltblob::{BlobStore, SchedulerStats};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How often the scheduler is sampled.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The scheduler over one phase (`"scheduler"` of a paced side in the JSON); null through S3, where the
/// server's store schedules.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SchedulerTrace {
    /// Snapshots taken, one per [`SAMPLE_EVERY`].
    pub samples: u64,
    /// Mean of the duty over the snapshots: the share of time background work could keep a request in
    /// flight (1.0: never paused).
    pub mean_duty: f64,
    /// Lowest duty seen.
    pub min_duty: f64,
    /// Share of the snapshots with the duty below 1.0 (background work pausing between requests).
    pub paused_share: f64,
    /// Mean of the adaptive limit (requests allowed in flight).
    pub mean_limit: f64,
    /// Lowest limit seen.
    pub min_limit: usize,
    /// Per class, what it had admitted between the first and the last snapshot.
    pub classes: BTreeMap<String, ClassTrace>,
}

/// One class over the phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassTrace {
    /// Requests admitted.
    pub admitted: u64,
    /// Bytes those requests moved.
    pub bytes: u64,
    /// Mean wait for admission of those requests, ms.
    pub mean_wait_ms: f64,
}

/// Snapshots folded as they come.
#[derive(Debug, Default)]
struct Folded {
    samples: u64,
    duty_sum: f64,
    min_duty: f64,
    paused: u64,
    limit_sum: f64,
    min_limit: usize,
    first: Option<SchedulerStats>,
    last: Option<SchedulerStats>,
}

impl Folded {
    fn add(&mut self, s: SchedulerStats) {
        if self.samples == 0 {
            (self.min_duty, self.min_limit) = (s.duty, s.limit);
        }
        self.samples += 1;
        self.duty_sum += s.duty;
        self.min_duty = self.min_duty.min(s.duty);
        self.paused += u64::from(s.duty < 1.0);
        self.limit_sum += s.limit as f64;
        self.min_limit = self.min_limit.min(s.limit);
        if self.first.is_none() {
            self.first = Some(s);
        } else {
            self.last = Some(s);
        }
    }

    /// The trace; `None` without two snapshots or when the store does not schedule.
    fn finish(self) -> Option<SchedulerTrace> {
        let (first, last) = (self.first?, self.last?);
        if !last.enabled {
            return None;
        }
        let n = self.samples as f64;
        let classes = last
            .classes
            .iter()
            .map(|c| {
                let before = first.classes.iter().find(|b| b.name == c.name);
                let admitted = c.admitted - before.map_or(0, |b| b.admitted.min(c.admitted));
                let bytes = c.bytes - before.map_or(0, |b| b.bytes.min(c.bytes));
                let wait = c.wait_micros - before.map_or(0, |b| b.wait_micros.min(c.wait_micros));
                let mean_wait_ms = if admitted == 0 {
                    0.0
                } else {
                    wait as f64 / 1000.0 / admitted as f64
                };
                (
                    c.name.clone(),
                    ClassTrace {
                        admitted,
                        bytes,
                        mean_wait_ms,
                    },
                )
            })
            .collect();
        Some(SchedulerTrace {
            samples: self.samples,
            mean_duty: self.duty_sum / n,
            min_duty: self.min_duty,
            paused_share: self.paused as f64 / n,
            mean_limit: self.limit_sum / n,
            min_limit: self.min_limit,
            classes,
        })
    }
}

/// Samples a store's scheduler on a task of its own until [`Tracer::finish`].
pub(crate) struct Tracer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    folded: Arc<Mutex<Folded>>,
}

impl Tracer {
    /// Starts sampling `store`'s scheduler now (the first snapshot at once).
    pub(crate) fn start(store: BlobStore) -> Self {
        let folded = Arc::new(Mutex::new(Folded::default()));
        let (stop, mut stopped) = oneshot::channel();
        let into = Arc::clone(&folded);
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = every.tick() => into
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .add(store.scheduler_stats()),
                }
            }
            // The last snapshot, at the end of the phase.
            into.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .add(store.scheduler_stats());
        });
        Self { stop, task, folded }
    }

    /// Stops sampling; the trace of the time since [`Tracer::start`].
    pub(crate) async fn finish(self) -> Option<SchedulerTrace> {
        // The task may have ended already (a panic): what it folded is kept either way.
        let _ = self.stop.send(());
        let _ = self.task.await;
        let folded =
            std::mem::take(&mut *self.folded.lock().unwrap_or_else(PoisonError::into_inner));
        folded.finish()
    }
}

#[cfg(test)]
mod tests {
    use saltblob::ClassStats;

    use super::*;

    fn snapshot(duty: f64, limit: usize, bulk: (u64, u64, u64)) -> SchedulerStats {
        let mut s = SchedulerStats::default();
        (s.enabled, s.duty, s.limit) = (true, duty, limit);
        let mut c = ClassStats::default();
        c.name = "bulk".to_owned();
        (c.admitted, c.bytes, c.wait_micros) = bulk;
        s.classes = vec![c];
        s
    }

    #[test]
    fn a_trace_folds_duty_and_limit_and_takes_class_deltas() {
        let mut f = Folded::default();
        f.add(snapshot(1.0, 8, (10, 1000, 500)));
        f.add(snapshot(0.5, 2, (14, 3000, 2500)));
        f.add(snapshot(0.25, 2, (20, 7000, 6500)));
        f.add(snapshot(1.0, 4, (30, 11000, 8500)));
        let t = f.finish().expect("a trace");
        assert_eq!(t.samples, 4);
        assert!((t.mean_duty - 0.6875).abs() < 1e-12, "{t:?}");
        assert_eq!((t.min_duty, t.paused_share), (0.25, 0.5));
        assert_eq!((t.mean_limit, t.min_limit), (4.0, 2));
        // 20 admitted after the first snapshot, 10 000 bytes, 8 000 µs of waits: 0.4 ms each.
        let bulk = &t.classes["bulk"];
        assert_eq!((bulk.admitted, bulk.bytes), (20, 10_000));
        assert!((bulk.mean_wait_ms - 0.4).abs() < 1e-12, "{bulk:?}");
    }

    #[test]
    fn no_trace_without_two_snapshots_or_a_scheduler() {
        let mut f = Folded::default();
        f.add(snapshot(1.0, 8, (0, 0, 0)));
        assert_eq!(f.finish(), None);
        let mut f = Folded::default();
        for _ in 0..3 {
            let mut s = snapshot(1.0, 8, (0, 0, 0));
            s.enabled = false;
            f.add(s);
        }
        assert_eq!(f.finish(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tracer_samples_a_store_until_it_finishes() {
        let store = saltblob::open("memory://", saltblob::StoreConfig::default())
            .await
            .expect("memory store");
        let tracer = Tracer::start(store);
        tokio::time::sleep(Duration::from_millis(1050)).await;
        let t = tracer.finish().await.expect("a trace");
        // One at once, one per 100 ms, one at the end.
        assert!((11..=13).contains(&t.samples), "{t:?}");
        assert_eq!(
            (t.mean_duty, t.paused_share),
            (1.0, 0.0),
            "an idle store never pauses"
        );
    }
}
