//! How the result of an `_async` call reaches its event loop without an I/O thread taking the GIL: the thread that
//! ends the call queues its outcome in the loop's [`Completions`] and, when the queue was empty, writes one byte to
//! a socket the loop watches (`loop.add_reader`); the loop then drains the queue on its own thread and resolves
//! the futures. The loop wakes once per batch of results, and an I/O thread never waits for the GIL while the loop
//! runs Python code.
//!
//! `saltblob._io._completions(loop)` makes a loop's queue on first use (with `_io._resolve`, which ends a future); a loop that cannot watch a file descriptor
//! gets none, and [`crate::runtime::awaitable`] then resolves through `call_soon_threadsafe`.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// Makes, on the event loop's thread, the value an `_async` call resolves with (or the exception it raises).
pub(crate) type Outcome = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send>;

/// An ended call: its asyncio future and what to resolve it with.
struct Ended {
    future: Py<PyAny>,
    outcome: Outcome,
}

/// The part of a loop's [`Completions`] that the I/O threads hold.
pub(crate) struct Queue {
    ended: Mutex<Vec<Ended>>,
    wake: UnixStream,
}

impl Queue {
    fn ended(&self) -> MutexGuard<'_, Vec<Ended>> {
        // A vector of owned values: valid whatever a panicking holder did.
        self.ended.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `future`'s outcome for the loop; wakes the loop when nothing else was queued (an earlier wake-up not
    /// yet drained will find this one too). Never takes the GIL.
    pub(crate) fn push(&self, future: Py<PyAny>, outcome: Outcome) {
        let was_empty = {
            let mut ended = self.ended();
            let was_empty = ended.is_empty();
            ended.push(Ended { future, outcome });
            was_empty
        };
        if was_empty {
            // Fails only when the socket's buffer is full (the loop is already awake with bytes to read) or the
            // loop's end closed it (nobody waits): either way nothing is lost.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// The completion queue of one event loop (see the module's documentation).
#[pyclass(module = "saltblob")]
pub(crate) struct Completions {
    queue: Arc<Queue>,
    watched: UnixStream,
    /// `saltblob._io._resolve`: ends a future with a value or an exception unless it was cancelled.
    resolve: Py<PyAny>,
}

impl Completions {
    /// The queue, for an I/O task to push its outcome to.
    pub(crate) fn queue(&self) -> Arc<Queue> {
        Arc::clone(&self.queue)
    }
}

fn os_error(e: &std::io::Error) -> PyErr {
    PyOSError::new_err(format!(
        "saltblob cannot make its event-loop wake-up socket: {e}"
    ))
}

#[pymethods]
impl Completions {
    #[new]
    fn new(resolve: Py<PyAny>) -> PyResult<Self> {
        let (wake, watched) = UnixStream::pair().map_err(|e| os_error(&e))?;
        wake.set_nonblocking(true).map_err(|e| os_error(&e))?;
        watched.set_nonblocking(true).map_err(|e| os_error(&e))?;
        Ok(Self {
            queue: Arc::new(Queue {
                ended: Mutex::new(Vec::new()),
                wake,
            }),
            watched,
            resolve,
        })
    }

    /// The file descriptor the loop watches for reading.
    fn fileno(&self) -> i32 {
        self.watched.as_raw_fd()
    }

    /// Resolves every queued future (those cancelled meanwhile are left as they are). Called by the loop when its
    /// socket is readable.
    fn drain(&self, py: Python<'_>) {
        // The socket first, then the queue: an outcome queued after the queue is taken wakes the loop again.
        let mut buf = [0u8; 64];
        loop {
            match (&self.watched).read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let ended = std::mem::take(&mut *self.queue.ended());
        let resolve = self.resolve.bind(py);
        for Ended { future, outcome } in ended {
            let (ok, value) = match outcome(py) {
                Ok(v) => (true, v),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            // `_resolve` raises only on a broken future; the others in the batch are still resolved.
            if let Err(e) = resolve.call1((future, ok, value)) {
                e.write_unraisable(py, None);
            }
        }
    }
}
