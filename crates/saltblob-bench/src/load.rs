//! Load drivers: operations run with a fixed number in flight, over a count ([`run_concurrent`]) or a duration
//! ([`run_timed`]), and the large-blob loops of the bulk phases ([`bulk_load`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use indicatif::ProgressBar;
use saltblob::{Error, Result};
use serde_json::json;
use tokio::task::JoinSet;

use crate::payload::{Outcome, TAG_BACKGROUND, check, stamped};
use crate::progress::Progress;
use crate::stats::{MIB, PhaseReport, Tally};
use crate::target::Target;

/// What the large loops of a bulk phase did: one writer's, or every writer's merged with [`BulkLoad::merge`].
#[derive(Clone, Debug, Default)]
pub(crate) struct BulkLoad {
    /// Latencies and bytes of the large puts and gets that succeeded; failures of any of the three operations.
    pub(crate) tally: Tally,
    /// Large puts that succeeded.
    pub(crate) puts: u64,
    /// Large gets that succeeded and were verified.
    pub(crate) gets: u64,
    /// From the phase's start until the last put or get of any writer ended (the trailing delete excluded).
    pub(crate) span: Duration,
    /// Per writer, in order: (puts, gets) that succeeded.
    pub(crate) per_writer: Vec<(u64, u64)>,
}

impl BulkLoad {
    /// Adds another writer's (or writers') result: counts add up, the span is the longer one.
    pub(crate) fn merge(&mut self, other: BulkLoad) {
        self.tally.merge(&other.tally);
        self.puts += other.puts;
        self.gets += other.gets;
        self.span = self.span.max(other.span);
        self.per_writer.extend(other.per_writer);
    }

    /// Bytes of the successful puts and gets ÷ MiB ÷ the span; 0 when nothing ran.
    pub(crate) fn throughput_mib_s(&self) -> f64 {
        let seconds = self.span.as_secs_f64();
        if seconds > 0.0 {
            self.tally.bytes as f64 / MIB / seconds
        } else {
            0.0
        }
    }

    /// The load as the `background` details of `small_under_load` (the fields of the single-loop bench, plus
    /// `large_writers` and `per_writer`).
    pub(crate) fn summary_json(&self) -> serde_json::Value {
        let per_writer: Vec<_> = self
            .per_writer
            .iter()
            .map(|(puts, gets)| json!({ "large_puts": puts, "large_gets": gets }))
            .collect();
        json!({
            "large_writers": self.per_writer.len(),
            "large_puts": self.puts,
            "large_gets": self.gets,
            "bytes": self.tally.bytes,
            "seconds": self.span.as_secs_f64(),
            "throughput_mib_s": self.throughput_mib_s(),
            "errors": self.tally.errors,
            "error_messages": self.tally.messages,
            "large_op_p99_ms": self.tally.latencies.latency().map(|l| l.p99),
            "per_writer": per_writer,
        })
    }

    /// The load as a phase (class bulk): large puts and gets, throughput over the span, `summary_json` as details.
    pub(crate) fn report(self, name: &str, description: String) -> PhaseReport {
        let details = self.summary_json();
        let mut report = self
            .tally
            .report(name, description, self.span.as_secs_f64(), true);
        report.details = Some(details);
        report
    }
}

/// Runs `writers` large loops, each writing, reading (verifying) and deleting its own large blobs one after
/// another under `key_prefix` until `stop`; every writer completes at least one put. Counts each large put
/// and get on `bar`. Returns their merged result, its span measured from the call.
pub(crate) async fn bulk_load(
    target: Target,
    base: Bytes,
    tag: u64,
    key_prefix: String,
    writers: usize,
    stop: Arc<AtomicBool>,
    bar: ProgressBar,
) -> Result<BulkLoad> {
    let started = Instant::now();
    let mut set = JoinSet::new();
    for index in 0..writers {
        let writer = LargeWriter {
            target: target.clone(),
            base: base.clone(),
            tag,
            key_prefix: format!("{key_prefix}{index:03}/"),
            index: index as u64,
        };
        let (stop, bar) = (Arc::clone(&stop), bar.clone());
        set.spawn(async move { (index, writer.run(started, &stop, &bar).await) });
    }
    let mut done = Vec::with_capacity(writers);
    while let Some(joined) = set.join_next().await {
        done.push(
            joined
                .map_err(|e| Error::backend("bench", format!("large writer failed: {e}"), false))?,
        );
    }
    // Merged in writer order, so that `per_writer` lists writer 0 first.
    done.sort_unstable_by_key(|(index, _)| *index);
    let mut total = BulkLoad::default();
    for (_, load) in done {
        total.merge(load);
    }
    Ok(total)
}

/// One writer of [`bulk_load`]: what it writes, and where.
struct LargeWriter {
    target: Target,
    /// Payload, stamped per blob.
    base: Bytes,
    /// The run's stamp tag.
    tag: u64,
    /// Its keys: `<key_prefix><n>`.
    key_prefix: String,
    /// Its number, in the stamp of its blobs.
    index: u64,
}

impl LargeWriter {
    /// Its payload stamped with `stamp`: a copy of a large value, made on a blocking thread. On the runtime's
    /// workers the copy (tens of milliseconds for 60 MiB, its pages faulted in) held up the small operations
    /// those workers serve and time: a stall of the bench's own, not of the store's (`wakeup.rs` showed it).
    /// For the same reason a large get's value is freed on a blocking thread.
    async fn stamped(&self, stamp: u64) -> std::result::Result<Bytes, String> {
        let (base, tag) = (self.base.clone(), self.tag);
        tokio::task::spawn_blocking(move || stamped(&base, tag, TAG_BACKGROUND, stamp))
            .await
            .map_err(|e| format!("stamping a large payload failed: {e}"))
    }

    /// Put, get (unless stopped meanwhile), delete, until `stop`; at least once.
    async fn run(self, started: Instant, stop: &AtomicBool, bar: &ProgressBar) -> BulkLoad {
        let mut out = BulkLoad::default();
        let mut n = 0u64;
        loop {
            let key = format!("{}{n:07}", self.key_prefix);
            // The stamp tells the writers' blobs apart.
            let stamp = self.index << 32 | n;
            let data = match self.stamped(stamp).await {
                Ok(data) => data,
                Err(e) => {
                    out.tally.fail(e);
                    break;
                }
            };
            let len = data.len() as u64;
            let t = Instant::now();
            match self.target.put(&key, data).await {
                Ok(_) => {
                    out.puts += 1;
                    out.tally.ok(t.elapsed(), len);
                }
                Err(e) => out.tally.fail(e.to_string()),
            }
            out.span = started.elapsed();
            bar.inc(1);
            if !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let result = self.target.get(&key).await;
                let elapsed = t.elapsed();
                match result {
                    Ok(got) => {
                        let outcome = check(&got, len, self.tag, TAG_BACKGROUND, stamp);
                        // Unmapping tens of MiB takes milliseconds: not on the workers that time small ops.
                        drop(tokio::task::spawn_blocking(move || drop(got)));
                        match outcome {
                            Outcome::Done(b) => {
                                out.gets += 1;
                                out.tally.ok(elapsed, b);
                            }
                            Outcome::Failed(m) => out.tally.fail(m),
                            Outcome::Wrong(m) => out.tally.unverified(m),
                        }
                    }
                    Err(e) => out.tally.fail(e.to_string()),
                }
                out.span = started.elapsed();
                bar.inc(1);
            }
            if let Err(e) = self.target.delete(&key).await {
                out.tally.fail(e.to_string());
            }
            n += 1;
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        out.per_writer.push((out.puts, out.gets));
        out
    }
}

/// Runs `op(0..total)` with `concurrency` operations in flight; returns the merged tally and the wall time.
pub(crate) async fn run_concurrent<F, Fut>(
    concurrency: usize,
    total: u64,
    progress: &Progress,
    op: F,
) -> Result<(Tally, f64)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let ([tally, _], seconds) =
        run_concurrent_pair(concurrency, total, progress, move |i| (0, op(i))).await?;
    Ok((tally, seconds))
}

/// As [`run_concurrent`], but each operation `op(i)` also names its side (0 or 1), and each side gets a tally of
/// its own: two loads interleaved in one run, so that both meet the same state of the store (its memtables,
/// flushes and compactions) and a ratio of their figures is not an artefact of which ran first.
pub(crate) async fn run_concurrent_pair<F, Fut>(
    concurrency: usize,
    total: u64,
    progress: &Progress,
    op: F,
) -> Result<([Tally; 2], f64)>
where
    F: Fn(u64) -> (usize, Fut) + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let (op, next, bar) = (Arc::clone(&op), Arc::clone(&next), progress.handle());
        set.spawn(async move {
            let mut tallies = [Tally::default(), Tally::default()];
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                // The value is prepared when the future is made, before the clock starts.
                let (side, fut) = op(i);
                let t = Instant::now();
                let outcome = fut.await;
                tallies[side.min(1)].add(outcome, t.elapsed());
                bar.inc(1);
            }
            tallies
        });
    }
    let mut tallies = [Tally::default(), Tally::default()];
    while let Some(done) = set.join_next().await {
        let t =
            done.map_err(|e| Error::backend("bench", format!("worker task failed: {e}"), false))?;
        for (all, one) in tallies.iter_mut().zip(&t) {
            all.merge(one);
        }
    }
    Ok((tallies, started.elapsed().as_secs_f64()))
}

/// Runs `op(n)` (n counts each worker's operations) with `concurrency` in flight for `duration`.
pub(crate) async fn run_timed<F, Fut>(
    concurrency: usize,
    duration: Duration,
    progress: &Progress,
    op: F,
) -> Result<(Tally, f64)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let mut set = JoinSet::new();
    for worker in 0..concurrency {
        let (op, bar) = (Arc::clone(&op), progress.handle());
        set.spawn(async move {
            let mut tally = Tally::default();
            let mut n = worker as u64;
            while started.elapsed() < duration {
                let fut = op(n);
                let t = Instant::now();
                let outcome = fut.await;
                tally.add(outcome, t.elapsed());
                bar.inc(1);
                n += 1;
            }
            tally
        });
    }
    join_all(set, started).await
}

/// Waits for every worker of `set`; returns their merged tally and the wall time since `started`.
async fn join_all(mut set: JoinSet<Tally>, started: Instant) -> Result<(Tally, f64)> {
    let mut tally = Tally::default();
    while let Some(done) = set.join_next().await {
        let t =
            done.map_err(|e| Error::backend("bench", format!("worker task failed: {e}"), false))?;
        tally.merge(&t);
    }
    Ok((tally, started.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One writer's result: `puts` puts and `gets` gets of `mib` MiB, `ms` each, its last one ending at `span_ms`.
    fn writer(puts: u64, gets: u64, mib: u64, ms: u64, span_ms: u64) -> BulkLoad {
        let mut w = BulkLoad::default();
        for _ in 0..puts + gets {
            w.tally.ok(Duration::from_millis(ms), mib << 20);
        }
        (w.puts, w.gets, w.span) = (puts, gets, Duration::from_millis(span_ms));
        w.per_writer.push((puts, gets));
        w
    }

    #[test]
    fn writers_merge_into_one_bulk_class() {
        let mut total = BulkLoad::default();
        total.merge(writer(3, 3, 60, 100, 2000));
        let mut failing = writer(1, 0, 60, 300, 4000);
        failing.tally.fail("timed out");
        total.merge(failing);
        assert_eq!((total.puts, total.gets), (4, 3));
        assert_eq!(total.per_writer, vec![(3, 3), (1, 0)]);
        // The writers ran side by side: the span is the longest, not the sum.
        assert_eq!(total.span, Duration::from_millis(4000));
        // 7 x 60 MiB over 4 s.
        assert!((total.throughput_mib_s() - 105.0).abs() < 1e-9);
        let json = total.summary_json();
        assert_eq!(json["large_writers"], 2);
        assert_eq!(
            (json["large_puts"].clone(), json["large_gets"].clone()),
            (4.into(), 3.into())
        );
        assert_eq!(json["errors"], 1);
        assert_eq!(json["per_writer"][1]["large_puts"], 1);
        let p99 = json["large_op_p99_ms"].as_f64().expect("p99");
        assert!((p99 - 300.0).abs() <= 0.3, "{p99}");
        let report = total.report("bulk_alone", String::new());
        assert_eq!(
            (report.ops, report.bytes, report.errors),
            (7, 7 * (60 << 20), 1)
        );
        assert!((report.seconds - 4.0).abs() < 1e-9);
        assert!((report.throughput_mib_s - 105.0).abs() < 1e-9);
        assert_eq!(report.verified, Some(false));
        assert!(report.details.is_some_and(|d| d["large_writers"] == 2));
    }

    #[test]
    fn a_load_that_never_ran_has_no_throughput() {
        let idle = BulkLoad::default();
        assert_eq!(idle.throughput_mib_s(), 0.0);
        assert_eq!(idle.summary_json()["large_writers"], 0);
    }
}
