//! The module's one Tokio runtime, and the two ways Python waits for a Rust future on it: [`wait`], for a
//! synchronous call (the calling thread drives the future with the GIL released, and looks for a pending signal
//! such as Ctrl-C every [`SIGNAL_CHECK`]), and [`awaitable`], for an `_async` call (an asyncio future resolved
//! when the Rust task ends; cancelling it drops the Rust future).

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// How often a synchronous call that waits for I/O runs Python's signal handlers, so that Ctrl-C interrupts it.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The runtime, started on first use: one worker thread per core, shared by every store of the process.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("saltblob-io")
        .build()
        .map_err(|e| {
            PyRuntimeError::new_err(format!("saltblob cannot start its I/O threads: {e}"))
        })?;
    let rt = RUNTIME.get_or_init(|| built);
    // Fails only when it was given already, which is this very runtime.
    let _ = pyo3_async_runtimes::tokio::init_with_runtime(rt);
    Ok(rt)
}

/// Runs `fut` to completion on the calling thread with the GIL released; a signal handler that raises (Ctrl-C's
/// `KeyboardInterrupt`) stops the wait and drops `fut`, which cancels the operation where it stands (a put that
/// has not committed leaves the previous version current).
///
/// # Errors
/// The exception a signal handler raised; `RuntimeError` when called from one of saltblob's own I/O threads (an
/// iterator given to an `_async` call that makes a synchronous saltblob call), where blocking would deadlock.
pub(crate) fn wait<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(PyRuntimeError::new_err(
            "a synchronous saltblob call was made on one of saltblob's I/O threads (from an iterator given to an \
             _async call?); use the _async API there",
        ));
    }
    let rt = runtime()?;
    let mut fut = std::pin::pin!(fut);
    loop {
        let done = py.detach(|| {
            rt.block_on(async { tokio::time::timeout(SIGNAL_CHECK, fut.as_mut()).await.ok() })
        });
        match done {
            Some(output) => return Ok(output),
            None => py.check_signals()?,
        }
    }
}

/// An asyncio awaitable of `fut`, which runs on the runtime without the GIL. Must be called with a running event
/// loop (from a coroutine).
///
/// # Errors
/// `RuntimeError` when there is no running event loop, or the runtime cannot start.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    runtime()?;
    pyo3_async_runtimes::tokio::future_into_py(py, fut)
}
