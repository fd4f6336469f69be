//! The tasks a server runs beside its accept loop, each aborted with the server ([`Aborting`]): the periodic
//! upkeep of the store ([`upkeep`]: the multipart upload sweep, the lifecycle pass, gc) and the metrics listener
//! ([`serve_metrics`]: metrics, health and readiness).

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use saltblob_core::{BlobStore, GcOptions};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::conn::TimedIo;
use crate::lifecycle::{Days, Expirer};
use crate::metrics::Metrics;
use crate::multipart::{abort_due_uploads, sweep_expired_uploads};
use crate::probes::Probes;

/// Connections the metrics listener serves at once (more are closed at once).
const METRICS_MAX_CONNECTIONS: usize = 16;

/// A background task, aborted when dropped.
pub(crate) struct Aborting(pub JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs gc on `store` every `every`, recording each pass in `metrics`, after removing the multipart uploads
/// whose parts' lease has passed (`multipart/`) and the objects their bucket's lifecycle expired
/// (`lifecycle/`: expired objects and versions; incomplete uploads, by `multipart/`), a day lasting `days`.
/// Servers sharing a store share the work: gc by its leases, the sweep, the lifecycle pass of
/// each bucket and gc's expiry pass by turns, so that each runs in one server per period.
pub(crate) async fn upkeep(store: BlobStore, every: Duration, days: Days, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expirer = Expirer::with_days(days, abort_due_uploads);
    loop {
        tick.tick().await;
        sweep(&store, every).await;
        match expirer.pass(&store).await {
            Ok(expired) => {
                if expired.objects + expired.versions + expired.uploads > 0 {
                    tracing::info!(
                        objects = expired.objects,
                        bytes = expired.bytes,
                        versions = expired.versions,
                        uploads = expired.uploads,
                        "expired what bucket lifecycle rules made due (objects, noncurrent versions, lone delete markers, incomplete uploads)"
                    );
                }
                metrics.lifecycle_expired(expired.objects);
            }
            Err(e) => tracing::warn!(error = %e, "the lifecycle pass failed (will retry)"),
        }
        let opts = GcOptions::new().with_full_expiry_every(FULL_EXPIRY_EVERY.max(every));
        match store.gc(&opts).await {
            Ok(report) => {
                tracing::info!(
                    reclaimed_versions = report.reclaim.versions,
                    reclaimed_chunks = report.reclaim.chunks,
                    reclaimed_bytes = report.reclaim.bytes,
                    abandoned_puts = report.abandoned_puts,
                    puts_in_flight = report.puts_in_flight,
                    "gc pass"
                );
                metrics.gc_ran(Some(&report));
            }
            Err(e) => {
                tracing::warn!(error = %e, "gc pass failed (will retry)");
                metrics.gc_ran(None);
            }
        }
    }
}

/// A fresh lifecycle [`Expirer`] as the server's loop runs it, days of `day` long: it also aborts the incomplete
/// multipart uploads rules made due.
pub fn lifecycle_expirer(day: Duration) -> Expirer {
    Expirer::with_days(Days::of_length(day), abort_due_uploads)
}

/// Removes the multipart uploads whose parts' lease has passed, when it is this server's turn: one server of
/// those sharing the store sweeps per period `every` (`ledger/turns.rs` in saltblob-core).
async fn sweep(store: &BlobStore, every: Duration) {
    let turn = match store.take_turn(SWEEP_TURN, b"").await {
        Ok(Some(turn)) => turn,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "taking the turn of the multipart sweep failed (will retry)");
            return;
        }
    };
    match sweep_expired_uploads(store).await {
        Ok(n) => {
            if n > 0 {
                tracing::info!(uploads = n, "removed expired multipart uploads");
            }
            if let Err(e) = turn.done_for(every).await {
                tracing::warn!(error = %e, "ending the turn of the multipart sweep failed");
            }
        }
        Err(e) => {
            turn.give_back().await;
            tracing::warn!(error = %e, "sweeping expired multipart uploads failed (will retry)")
        }
    }
}

/// How often the loop's gc passes over every manifest for expired blobs that earlier builds put (the expiry
/// index finds the others at every pass): once a day, in one of the servers sharing the store.
const FULL_EXPIRY_EVERY: Duration = Duration::from_secs(86_400);

/// The turn of the multipart sweep.
const SWEEP_TURN: &str = "s3-upload-sweep";

/// Serves the metrics listener's paths on `listener` (HTTP/1.1: `GET /metrics`, `/healthz`, `/readyz`, as
/// `probes.rs` answers them) until aborted: at most [`METRICS_MAX_CONNECTIONS`] at once, each with
/// `header_timeout` to send a request head (and to stay idle between requests) and `io_timeout` for a stalled
/// write.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    probes: Probes,
    header_timeout: Duration,
    io_timeout: Duration,
) {
    let slots = Arc::new(Semaphore::new(METRICS_MAX_CONNECTIONS));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let for_service = probes.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let probes = for_service.clone();
            async move { probes.answer(req.method(), req.uri().path()).await }
        });
        let io = TimedIo::new(stream, io_timeout, Arc::clone(&probes.metrics));
        let conn = builder.serve_connection(TokioIo::new(io), service);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "metrics connection ended with an error");
            }
            drop(slot);
        });
    }
}
