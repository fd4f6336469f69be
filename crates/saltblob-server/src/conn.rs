//! Connection limits below HTTP: how long a connection may take to send its first request, how long it may
//! stay idle, and how long a write to it may stall. hyper's own timers do not cover these: hyper-util's HTTP
//! version detection waits for the first 24 bytes with no timer, HTTP/2 has no idle timeout, and hyper stops
//! polling a response body while the socket is full, so only the IO can tell a reader that stopped.
//!
//! - [`Activity`]: what a connection's requests tell its driver (started, ended), shared with the handler.
//! - [`drive`]: runs one connection to its end: closes it when no request has started by the first-request
//!   deadline, shuts it down gracefully when idle for the idle timeout or when the server shuts down.
//! - [`TimedIo`]: a socket whose writes fail with `TimedOut` after the IO timeout without progress.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tokio::time::{Instant, Sleep};

use crate::metrics::{Closed, Metrics};

/// How long a connection shut down for idleness may take to close (HTTP/2 finishes its GOAWAY exchange) before
/// it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The deadlines [`drive`] enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// From the start of the connection to its first request.
    pub first_request: Duration,
    /// With no request in flight.
    pub idle: Duration,
}

/// A connection's requests, as its driver sees them.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    served: AtomicBool,
    /// When the last request ended, in ms after `start`.
    last_ms: AtomicU64,
    /// Woken when a request ends: the connection's next deadline may then be earlier than the one its driver
    /// sleeps until (an idle timeout shorter than the first-request timeout).
    ended: Notify,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            last_ms: AtomicU64::new(0),
            ended: Notify::new(),
        })
    }

    /// A request has started on the connection.
    pub(crate) fn request_started(&self) {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A request has ended (its response sent or abandoned).
    pub(crate) fn request_ended(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.ended.notify_one();
    }

    /// When the connection is due to be closed, and why; `None` for why while a request is in flight (the
    /// returned instant is then only when to look again).
    fn due(&self, deadlines: Deadlines) -> (Instant, Option<Closed>) {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            (Instant::now() + deadlines.idle, None)
        } else if !self.served.load(Ordering::Relaxed) {
            (
                self.start + deadlines.first_request,
                Some(Closed::FirstRequest),
            )
        } else {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            (last + deadlines.idle, Some(Closed::Idle))
        }
    }
}

/// Runs connection `conn` to its end under `deadlines`; `graceful` asks it to finish its requests and close
/// (hyper's graceful shutdown). Returns why the server closed it, if it did, and the connection's own result.
pub(crate) async fn drive<C, E>(
    conn: C,
    graceful: impl Fn(Pin<&mut C>),
    activity: &Activity,
    deadlines: Deadlines,
    mut shutdown: watch::Receiver<bool>,
) -> (Option<Closed>, Result<(), E>)
where
    C: Future<Output = Result<(), E>>,
{
    let mut conn = std::pin::pin!(conn);
    // When the connection, asked to close, is dropped anyway.
    let mut closing: Option<(Instant, Option<Closed>)> = None;
    if *shutdown.borrow() {
        graceful(conn.as_mut());
        closing = Some((Instant::now() + CLOSE_GRACE, None));
    }
    loop {
        let due = match closing {
            Some((at, _)) => at,
            None => activity.due(deadlines).0,
        };
        // Biased, the connection first: a request that has arrived by the idle deadline is read (and counted
        // in flight) before the deadline is acted upon, rather than dropped unread with the connection.
        tokio::select! {
            biased;
            result = conn.as_mut() => return (closing.and_then(|(_, why)| why), result),
            changed = shutdown.changed(), if closing.is_none() => {
                // A dropped sender is a shutdown too.
                if changed.is_err() || *shutdown.borrow() {
                    graceful(conn.as_mut());
                    closing = Some((Instant::now() + CLOSE_GRACE, None));
                }
            }
            () = activity.ended.notified(), if closing.is_none() => {}
            () = tokio::time::sleep_until(due) => {
                if closing.is_some() {
                    return (closing.and_then(|(_, why)| why), Ok(()));
                }
                // A request may have started meanwhile: look again before acting.
                match activity.due(deadlines) {
                    (at, Some(Closed::FirstRequest)) if at <= Instant::now() => {
                        return (Some(Closed::FirstRequest), Ok(()));
                    }
                    (at, Some(Closed::Idle)) if at <= Instant::now() => {
                        graceful(conn.as_mut());
                        closing = Some((Instant::now() + CLOSE_GRACE, Some(Closed::Idle)));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A socket whose writes (and flushes) fail with `TimedOut` once one has made no progress for `timeout`: a
/// client that stops reading a response is dropped then, though hyper itself would wait for the socket to
/// drain forever. Reads are left to hyper (its header timeout) and to the request body's own timer.
pub(crate) struct TimedIo<T> {
    inner: T,
    stall: StallTimer,
    metrics: Arc<Metrics>,
}

impl<T> TimedIo<T> {
    pub(crate) fn new(inner: T, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            inner,
            stall: StallTimer::new(timeout),
            metrics,
        }
    }

    /// Passes on a write's outcome: progress disarms the timer; a stall arms it, and fails once it fires.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        outcome: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if outcome.is_ready() {
            self.stall.progress();
            return outcome;
        }
        ready!(self.stall.stalled(cx));
        self.metrics.connection_closed(Closed::Write);
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client read nothing of the response for the IO timeout",
        )))
    }
}

/// A timer that runs while an operation makes no progress: armed when the operation is pending, disarmed when it
/// progresses; it runs out after `timeout` of stall.
pub(crate) struct StallTimer {
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl StallTimer {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            sleep: None,
            armed: false,
        }
    }

    /// The operation progressed.
    pub(crate) fn progress(&mut self) {
        self.armed = false;
    }

    /// The operation is pending: arms the timer if it is not; `Ready` once it has run out (and it is disarmed).
    pub(crate) fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = Instant::now() + self.timeout;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.armed {
            sleep.as_mut().reset(deadline);
            self.armed = true;
        }
        ready!(sleep.as_mut().poll(cx));
        self.armed = false;
        Poll::Ready(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, outcome)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, outcome)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outcome = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, outcome)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outcome = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINES: Deadlines = Deadlines {
        first_request: Duration::from_millis(100),
        idle: Duration::from_millis(200),
    };

    /// A connection's shutdown as the tests model it: it ends once `asked` (by `drive`'s graceful callback).
    async fn until_asked(asked: &AtomicBool) {
        while !asked.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn deadlines_follow_the_requests() {
        let a = Activity::new();
        assert_eq!(
            a.due(DEADLINES),
            (
                a.start + DEADLINES.first_request,
                Some(Closed::FirstRequest)
            )
        );
        a.request_started();
        assert_eq!(a.due(DEADLINES).1, None);
        tokio::time::sleep(Duration::from_millis(50)).await;
        a.request_ended();
        let (at, why) = a.due(DEADLINES);
        assert_eq!(why, Some(Closed::Idle));
        assert!(at >= a.start + Duration::from_millis(50) + DEADLINES.idle);
    }

    #[tokio::test]
    async fn a_connection_without_requests_is_closed_and_an_idle_one_shut_down() {
        let (_tx, rx) = watch::channel(false);
        let silent = Activity::new();
        let (why, _) = drive(
            std::future::pending::<Result<(), ()>>(),
            |_| {},
            &silent,
            DEADLINES,
            rx.clone(),
        )
        .await;
        assert_eq!(why, Some(Closed::FirstRequest));

        let idle = Activity::new();
        idle.request_started();
        idle.request_ended();
        let asked = AtomicBool::new(false);
        let conn = async {
            until_asked(&asked).await;
            Ok::<(), ()>(())
        };
        let (why, result) = drive(
            conn,
            |_| asked.store(true, Ordering::Relaxed),
            &idle,
            DEADLINES,
            rx,
        )
        .await;
        assert_eq!((why, result), (Some(Closed::Idle), Ok(())));
    }

    /// A request that arrives at the very instant of the idle deadline is served, not closed unread: the driver
    /// polls the connection before its timer. Repeated, since an unbiased choice between the two would pass half
    /// of the time.
    #[tokio::test(start_paused = true)]
    async fn a_request_arriving_at_the_idle_deadline_is_served() {
        for round in 0..32 {
            let (_tx, rx) = watch::channel(false);
            let activity = Activity::new();
            activity.request_started();
            activity.request_ended();
            let arrives = Instant::now() + DEADLINES.idle;
            let asked = AtomicBool::new(false);
            let served = AtomicBool::new(false);
            // Models hyper: the request is read when the connection is polled at `arrives`, unless the connection
            // was asked to close before, and then the connection ends once asked to shut down.
            let conn = async {
                tokio::time::sleep_until(arrives).await;
                if !asked.load(Ordering::Relaxed) {
                    activity.request_started();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    served.store(true, Ordering::Relaxed);
                    activity.request_ended();
                }
                until_asked(&asked).await;
                Ok::<(), ()>(())
            };
            let (why, _) = drive(
                conn,
                |_| asked.store(true, Ordering::Relaxed),
                &activity,
                DEADLINES,
                rx,
            )
            .await;
            assert!(
                served.load(Ordering::Relaxed),
                "round {round}: closed with the request unread"
            );
            assert_eq!(why, Some(Closed::Idle), "round {round}");
        }
    }

    #[tokio::test]
    async fn a_server_shutdown_asks_every_connection_to_close() {
        let (tx, rx) = watch::channel(false);
        let busy = Activity::new();
        busy.request_started();
        let asked = AtomicBool::new(false);
        let conn = async {
            until_asked(&asked).await;
            Ok::<(), ()>(())
        };
        let stop = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(true);
        };
        let ((why, result), ()) = tokio::join!(
            drive(
                conn,
                |_| asked.store(true, Ordering::Relaxed),
                &busy,
                DEADLINES,
                rx
            ),
            stop
        );
        assert_eq!((why, result), (None, Ok(())));
    }
}
