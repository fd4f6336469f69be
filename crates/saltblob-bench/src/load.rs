//! Load drivers: operations run with a fixed number in flight, over a count ([`run_concurrent`]) or a duration
//! ([`run_timed`]), and the large-blob [`background_load`] of the mixed phase.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use saltblob::{BlobStore, Error, PutOptions, Result};
use serde_json::json;
use tokio::task::JoinSet;

use crate::payload::{Outcome, TAG_BACKGROUND, check, stamped};
use crate::progress::Progress;
use crate::stats::{MIB, Tally};

/// Writes, reads (verifying) and deletes large blobs one after another until `stop`; returns what it did.
pub(crate) async fn background_load(
    store: BlobStore,
    base: Bytes,
    tag: u64,
    prefix: String,
    stop: Arc<AtomicBool>,
) -> serde_json::Value {
    let started = Instant::now();
    let (mut puts, mut gets, mut bytes, mut tally) = (0u64, 0u64, 0u64, Tally::default());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{prefix}mixed-large/{n:07}");
        let data = stamped(&base, tag, TAG_BACKGROUND, n);
        let len = data.len() as u64;
        let t = Instant::now();
        match store.put(&key, data, &PutOptions::new()).await {
            Ok(_) => {
                puts += 1;
                bytes += len;
                tally.ok(t.elapsed(), len);
            }
            Err(e) => tally.fail(e.to_string()),
        }
        if !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            match store.get(&key).await {
                Ok(got) => match check(&got, len, tag, TAG_BACKGROUND, n) {
                    Outcome::Done(b) => {
                        gets += 1;
                        bytes += b;
                        tally.ok(t.elapsed(), b);
                    }
                    Outcome::Failed(m) | Outcome::Wrong(m) => tally.fail(m),
                },
                Err(e) => tally.fail(e.to_string()),
            }
        }
        if let Err(e) = store.delete(&key).await {
            tally.fail(e.to_string());
        }
        n += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let latency = tally.latencies.latency();
    json!({
        "large_puts": puts,
        "large_gets": gets,
        "bytes": bytes,
        "seconds": seconds,
        "throughput_mib_s": if seconds > 0.0 { bytes as f64 / MIB / seconds } else { 0.0 },
        "errors": tally.errors,
        "error_messages": tally.messages,
        "large_op_p99_ms": latency.map(|l| l.p99),
    })
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
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let (op, next, bar) = (Arc::clone(&op), Arc::clone(&next), progress.handle());
        set.spawn(async move {
            let mut tally = Tally::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                // The value is prepared when the future is made, before the clock starts.
                let fut = op(i);
                let t = Instant::now();
                let outcome = fut.await;
                tally.add(outcome, t.elapsed());
                bar.inc(1);
            }
            tally
        });
    }
    join_all(set, started).await
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
