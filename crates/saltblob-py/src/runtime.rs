//! The module's Tokio runtime (one per process: a forked child starts its own), and the two ways Python waits for
//! a Rust future on it: [`wait`], for a synchronous call (the calling thread drives the future with the GIL
//! released, and looks for a pending signal such as Ctrl-C every [`SIGNAL_CHECK`]), and [`awaitable`], for an
//! `_async` call (an asyncio future resolved when the Rust task ends, through the loop's [`Completions`];
//! cancelling it drops the Rust future), or [`ready`] when nothing is left to wait for; and [`with_gil`], the one
//! way saltblob's own threads enter Python, closed by [`_at_exit`] before the interpreter finalizes.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use futures::FutureExt;
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

use crate::completions::Completions;

/// How often a synchronous call that waits for I/O runs Python's signal handlers, so that Ctrl-C interrupts it.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The runtime of this process, and the id of the process that started it.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// The runtime, started on first use: one worker thread per core, shared by every store of the process. In a
/// process forked from one that had started it, a new one: the parent's threads did not follow the fork, so its
/// runtime is left as it is (never dropped, which would wait for them) and the child's stores run on their own.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((owner, rt)) = *slot
        && owner == pid
    {
        return Ok(rt);
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("saltblob-io")
        .build()
        .map_err(|e| {
            PyRuntimeError::new_err(format!("saltblob cannot start its I/O threads: {e}"))
        })?;
    let rt: &'static Runtime = Box::leak(Box::new(built));
    *slot = Some((pid, rt));
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

/// Whether the interpreter is exiting, and how many of saltblob's I/O threads are running Python code now.
struct Gate {
    exiting: bool,
    attached: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    exiting: false,
    attached: 0,
});
static GATE_FREE: Condvar = Condvar::new();

/// How long the interpreter's exit waits for I/O threads that are running Python code to leave it.
const EXIT_WAIT: Duration = Duration::from_secs(10);

fn gate() -> std::sync::MutexGuard<'static, Gate> {
    // Two plain fields, valid whatever a panicking holder did.
    GATE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` with the GIL, from any thread, unless the interpreter is exiting (then `None`, and `f` is not run).
///
/// Why: CPython ends a thread that waits for the GIL while the interpreter finalizes (`pthread_exit`), which aborts
/// the process when that thread is one of saltblob's Rust threads (an `_async` call completing just as the program
/// ends). So every entry of an I/O thread into Python goes through here, and [`at_exit`] closes the gate, then
/// waits until the threads inside have left, before the interpreter finalizes.
pub(crate) fn with_gil<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    {
        let mut g = gate();
        if g.exiting {
            return None;
        }
        g.attached += 1;
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            gate().attached -= 1;
            GATE_FREE.notify_all();
        }
    }
    let _leave = Leave;
    Some(Python::attach(f))
}

/// [`with_gil`] for work that returns a `PyResult`: the interpreter's exit is a `RuntimeError`.
pub(crate) fn try_with_gil<R>(f: impl for<'py> FnOnce(Python<'py>) -> PyResult<R>) -> PyResult<R> {
    with_gil(f).unwrap_or_else(|| Err(PyRuntimeError::new_err("the Python interpreter is exiting")))
}

/// Registered with `atexit` by the package: closes the gate of [`with_gil`] and waits (without the GIL, at most
/// [`EXIT_WAIT`]) until no I/O thread runs Python code. `_async` calls that complete later are dropped unseen.
#[pyfunction]
pub(crate) fn _at_exit(py: Python<'_>) {
    py.detach(|| {
        let mut g = gate();
        g.exiting = true;
        let deadline = std::time::Instant::now() + EXIT_WAIT;
        while g.attached > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            g = GATE_FREE
                .wait_timeout(g, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    });
}

/// Cancels the Rust task of an `_async` call when its asyncio future is done (a no-op when the task has finished:
/// the future was done by it), so that cancelling the awaitable drops the Rust future where it stands.
#[pyclass(module = "saltblob")]
pub(crate) struct Canceller(AbortHandle);

#[pymethods]
impl Canceller {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// `saltblob._io._resolve`, which sets an asyncio future's result or exception unless it was cancelled.
fn resolver(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    cached(py, &RESOLVE, "saltblob._io", "_resolve")
}

/// The function of the Python module `module` named `name`, imported once.
pub(crate) fn cached<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    Ok(cell
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import(module)?.getattr(name)?.unbind())
        })?
        .bind(py))
}

/// An asyncio awaitable of `fut`, which runs on the runtime without the GIL: a future of the running event loop,
/// resolved when `fut` ends, through the loop's [`Completions`] (or `call_soon_threadsafe` on a loop that cannot
/// watch a file descriptor). Cancelling it drops `fut`. Must be called with a running event loop (from a
/// coroutine).
///
/// # Errors
/// `RuntimeError` when there is no running event loop, or the runtime cannot start.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    static COMPLETIONS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let rt = runtime()?;
    let event_loop = running_loop(py)?;
    let future = event_loop.call_method0("create_future")?;
    resolver(py)?;
    let completions =
        cached(py, &COMPLETIONS, "saltblob._io", "_completions")?.call1((&event_loop,))?;
    let task = if let Ok(completions) = completions.cast::<Completions>() {
        let (queue, target) = (completions.borrow().queue(), future.clone().unbind());
        rt.spawn(async move {
            let outcome = AssertUnwindSafe(fut).catch_unwind().await;
            queue.push(
                target,
                Box::new(move |py| match outcome {
                    Ok(result) => result.and_then(|v| v.into_py_any(py)),
                    Err(_) => Err(PyRuntimeError::new_err(
                        "a saltblob task failed: it panicked",
                    )),
                }),
            );
        })
        .abort_handle()
    } else {
        resolve_threadsafe(rt, fut, event_loop.unbind(), future.clone().unbind())
    };
    future.call_method1("add_done_callback", (Canceller(task),))?;
    Ok(future)
}

/// An asyncio future of the running event loop that is already done, with `outcome`'s value or exception: what an
/// `_async` call returns when it has nothing left to wait for.
///
/// # Errors
/// `RuntimeError` when there is no running event loop.
pub(crate) fn ready<'py>(
    py: Python<'py>,
    outcome: PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let future = running_loop(py)?.call_method0("create_future")?;
    match outcome {
        Ok(v) => future.call_method1("set_result", (v,))?,
        Err(e) => future.call_method1("set_exception", (e.into_value(py),))?,
    };
    Ok(future)
}

/// `asyncio.get_running_loop()`.
fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    cached(py, &GET_RUNNING_LOOP, "asyncio", "get_running_loop")?.call0()
}

/// Runs `fut` and resolves `target`, a future of `event_loop`, through `call_soon_threadsafe` (an I/O thread takes
/// the GIL to call it); for loops that cannot watch a file descriptor.
fn resolve_threadsafe<F, T>(
    rt: &Runtime,
    fut: F,
    event_loop: Py<PyAny>,
    target: Py<PyAny>,
) -> AbortHandle
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let task = rt.spawn(fut);
    let abort = task.abort_handle();
    rt.spawn(async move {
        let outcome = task.await;
        with_gil(move |py| {
            let (ok, value) = match outcome {
                Ok(Ok(v)) => match v.into_py_any(py) {
                    Ok(v) => (true, v),
                    Err(e) => (false, e.into_value(py).into_any()),
                },
                Ok(Err(e)) => (false, e.into_value(py).into_any()),
                // The future was cancelled: nobody waits.
                Err(e) if e.is_cancelled() => return,
                Err(e) => {
                    let e = PyRuntimeError::new_err(format!("a saltblob task failed: {e}"));
                    (false, e.into_value(py).into_any())
                }
            };
            let Ok(resolve) = resolver(py) else { return };
            // Fails only when the event loop was closed meanwhile: nobody waits either.
            let _ = event_loop
                .bind(py)
                .call_method1("call_soon_threadsafe", (resolve, target, ok, value));
        });
    });
    abort
}
