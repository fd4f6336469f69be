//! The access log and the request metrics: [`RequestLog`], what is known of one request, counted in the metrics
//! and written as one access-log line when its response ends (or the client goes away); [`LoggedBody`], the
//! response body that counts the bytes sent and ends its request's log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use http::Method;
use saltblob_core::PriorityClass;
use tokio::sync::OwnedSemaphorePermit;

use crate::auth::RequestRecord;
use crate::body::{Passed, Watched, Watcher};
use crate::conn::Activity;
use crate::metrics::{Finished, Metrics};

/// What is known of one request, counted and logged once when dropped: at the end of its response body, or
/// when the client went away. A response cut off before its end (the client left, a write stalled, the body
/// failed) is counted and logged as aborted, with status 499.
pub(crate) struct RequestLog {
    pub start: Instant,
    pub record: Arc<RequestRecord>,
    pub metrics: Arc<Metrics>,
    pub peer: Option<SocketAddr>,
    pub method: Method,
    pub path: String,
    pub request_id: String,
    pub bytes_in: Arc<AtomicU64>,
    pub bytes_out: u64,
    /// How the body was sent (`x-amz-content-sha256`, as [`crate::chunked::payload_name`] names it).
    pub payload: &'static str,
    /// The `aws-chunked` chunk headers that carried a signature (each checked by s3s).
    pub chunk_signatures: Arc<AtomicU64>,
    /// The response's status; 499 until there is one.
    pub status: u16,
    /// Whether the response was sent to its end.
    pub completed: bool,
    pub activity: Option<Arc<Activity>>,
    /// The request's place among those in flight.
    pub _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if let Some(activity) = &self.activity {
            activity.request_ended();
        }
        let fields = self.record.fields();
        let op = if fields.op.is_empty() {
            "Unknown"
        } else {
            fields.op.as_str()
        };
        // Every request has a class: the handler's default until a blob's read or write sets its own.
        let class = fields.class.unwrap_or_else(PriorityClass::interactive);
        let duration = self.start.elapsed();
        let bytes_in = self.bytes_in.load(Ordering::Relaxed);
        let aborted = !self.completed;
        let status = if aborted { 499 } else { self.status };
        self.metrics.finished(&Finished {
            op,
            class: &class,
            status,
            duration,
            bytes_in,
            bytes_out: self.bytes_out,
        });
        tracing::info!(
            target: "saltblob_server::access",
            op,
            bucket = fields.bucket.as_deref().unwrap_or("-"),
            key = fields.key.as_deref().unwrap_or("-"),
            status,
            aborted,
            response_status = self.status,
            bytes_in,
            bytes_out = self.bytes_out,
            payload = self.payload,
            chunk_signatures = self.chunk_signatures.load(Ordering::Relaxed),
            duration_ms = duration.as_secs_f64() * 1000.0,
            class = class.name(),
            access_key = fields.access_key.as_deref().unwrap_or("-"),
            method = %self.method,
            path = %self.path,
            peer = %self.peer.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            request_id = %self.request_id,
            "request"
        );
    }
}

/// A response body that counts the bytes sent and ends its request's [`RequestLog`] with itself.
pub(crate) type LoggedBody = Watched<s3s::Body, Ending>;

/// `body`, logged by `log` (see [`LoggedBody`]).
pub(crate) fn logged(body: s3s::Body, log: RequestLog) -> LoggedBody {
    Watched::new(body, Ending(Some(log)))
}

/// The [`Watcher`] of a [`LoggedBody`]: its request's log, until the body ends.
pub(crate) struct Ending(Option<RequestLog>);

impl Ending {
    /// The response was sent whole: its log says so when it is dropped.
    fn complete(&mut self) {
        if let Some(log) = &mut self.0 {
            log.completed = true;
        }
    }
}

impl Watcher for Ending {
    fn passed(&mut self, passed: Passed, _end_stream: bool) {
        match passed {
            Passed::Frame(len) => {
                if let Some(log) = &mut self.0 {
                    log.bytes_out += len;
                }
            }
            Passed::End => {
                self.complete();
                drop(self.0.take());
            }
            Passed::Failed => {}
        }
    }

    fn dropped(&mut self, end_stream: bool) {
        // hyper sends no body for HEAD, 204 and 304, and stops polling a body that says it has ended.
        let bodiless = self.0.as_ref().is_some_and(|log| {
            log.method == Method::HEAD || matches!(log.status, 204 | 304) || log.status < 200
        });
        if bodiless || end_stream {
            self.complete();
        }
    }
}
