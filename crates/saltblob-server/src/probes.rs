//! What the metrics listener answers: `GET /metrics` (the Prometheus text), `GET /healthz` (the process
//! serves) and `GET /readyz` (the store answers and the server is not shutting down). They live on the metrics
//! listener, not the S3 one, whose every path is S3's: a bucket may be called `healthz`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use saltblob_core::{BlobStore, Error};
use tokio::sync::watch;

use crate::metrics::Metrics;

/// The key `/readyz` reads the head of. No part of the server writes it, so the store answers `NotFound`,
/// which counts as an answer (as would a version someone wrote there).
const READY_PROBE_KEY: &str = "s3/ready-probe";

/// How long `/readyz` waits for the store's answer.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The paths served, for the 404 message.
const SERVED: &[u8] = b"not found: only /metrics, /healthz and /readyz are served here\n";

/// What the metrics listener's answers read.
#[derive(Clone)]
pub(crate) struct Probes {
    pub metrics: Arc<Metrics>,
    pub store: BlobStore,
    /// True once the server has begun to shut down (it no longer accepts connections).
    pub stopping: watch::Receiver<bool>,
}

impl Probes {
    /// The answer to a request for `path` with `method` (HEAD is answered as GET; hyper sends no body).
    pub(crate) async fn answer(
        &self,
        method: &Method,
        path: &str,
    ) -> Result<Response<Full<Bytes>>, http::Error> {
        let text = |status: StatusCode, body: String| {
            Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .header(http::header::CACHE_CONTROL, "no-store")
                .body(Full::new(Bytes::from(body)))
        };
        if method != Method::GET && method != Method::HEAD {
            return Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header(http::header::ALLOW, "GET, HEAD")
                .body(Full::new(Bytes::from_static(b"only GET and HEAD\n")));
        }
        match path {
            "/metrics" => {
                let body = self
                    .metrics
                    .render(&self.store.scheduler_stats(), self.store.read_ahead());
                Response::builder()
                    .header(
                        http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )
                    .body(Full::new(Bytes::from(body)))
            }
            "/healthz" => text(StatusCode::OK, "ok\n".to_owned()),
            "/readyz" => match readiness(&self.store, &self.stopping).await {
                Ok(()) => text(StatusCode::OK, "ready\n".to_owned()),
                Err(why) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {why}\n"),
                ),
            },
            _ => Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Full::new(Bytes::from_static(SERVED))),
        }
    }
}

/// Whether the server should be sent requests: not once it is shutting down, and only while the store answers a
/// head within [`READY_TIMEOUT`] (asked anew each time: a store that stopped serving, as the embedded one does
/// after a failed log sync, is seen at once). The reason, on one line, when not.
async fn readiness(store: &BlobStore, stopping: &watch::Receiver<bool>) -> Result<(), String> {
    if *stopping.borrow() {
        return Err("the server is shutting down".to_owned());
    }
    match tokio::time::timeout(READY_TIMEOUT, store.head(READY_PROBE_KEY)).await {
        Ok(Ok(_) | Err(Error::NotFound { .. })) => Ok(()),
        Ok(Err(e)) => Err(one_line(&format!("the store failed: {e}"))),
        Err(_) => Err(format!(
            "the store did not answer within {} s",
            READY_TIMEOUT.as_secs()
        )),
    }
}

/// `text` with its line breaks (and other control characters) replaced by spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_stays_on_one_line() {
        assert_eq!(one_line("a\nb\r\tc"), "a b  c");
    }
}
