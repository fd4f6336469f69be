//! Streamed puts: [`Upload`], a `put_stream` running on the runtime and fed through a bounded channel, and what
//! feeds it: the file-like writers ([`BlobWriter`], [`AsyncBlobWriter`]) and a put of a file object or an iterator
//! ([`put_source`], [`put_source_async`]).
//!
//! Nothing commits unless the feeder says the value is complete ([`Msg::Finish`]): a writer closed by an exception,
//! aborted, interrupted or simply dropped ends the stream with an error, so the put fails and the previous version
//! stays current. Memory stays bounded: the channel holds at most [`DEPTH`] pieces, and the put its window.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use pyo3::prelude::*;
use pyo3::types::PyType;
use saltblob::{BlobStore, PutOptions};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::data::{Source, piece};
use crate::errors::{Kind, new_err, py_err};
use crate::fork::Local;
use crate::objects::Manifest;
use crate::runtime::{awaitable, runtime, try_with_gil, wait};

/// Pieces a feeder may be ahead of the put.
const DEPTH: usize = 4;

/// The task of a streamed put.
type PutTask = JoinHandle<saltblob::Result<saltblob::Manifest>>;

/// What a feeder sends to the put.
enum Msg {
    /// The next bytes.
    Data(Bytes),
    /// The value is complete: the put may commit.
    Finish,
}

/// The put's side of the channel: an [`AsyncRead`] of the pieces, which ends cleanly only after [`Msg::Finish`].
struct ChannelReader {
    rx: mpsc::Receiver<Msg>,
    current: Bytes,
    finished: bool,
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.current.is_empty() {
                let n = self.current.len().min(buf.remaining());
                buf.put_slice(&self.current[..n]);
                self.current.advance(n);
                return Poll::Ready(Ok(()));
            }
            if self.finished {
                return Poll::Ready(Ok(()));
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(Msg::Data(bytes)) => self.current = bytes,
                Some(Msg::Finish) => self.finished = true,
                None => {
                    return Poll::Ready(Err(io::Error::other(
                        "the writer stopped before the value was complete (aborted, interrupted or dropped without \
                         close()): nothing was committed",
                    )));
                }
            }
        }
    }
}

/// A put in progress, fed piece by piece.
struct Upload {
    tx: Option<mpsc::Sender<Msg>>,
    task: Option<PutTask>,
}

impl Upload {
    /// Starts `put_stream(key, …, opts)` on the runtime.
    fn start(store: BlobStore, key: Bytes, opts: PutOptions) -> PyResult<Self> {
        let (tx, rx) = mpsc::channel(DEPTH);
        let reader = ChannelReader {
            rx,
            current: Bytes::new(),
            finished: false,
        };
        let task = runtime()?.spawn(async move { store.put_stream(key, reader, &opts).await });
        Ok(Self {
            tx: Some(tx),
            task: Some(task),
        })
    }
}

/// Sends `bytes` to the put; when the put has already ended (it failed), returns its error.
async fn send(tx: mpsc::Sender<Msg>, task: Arc<Mutex<Upload>>, bytes: Bytes) -> PyResult<()> {
    if tx.send(Msg::Data(bytes)).await.is_ok() {
        return Ok(());
    }
    match take_task(&task) {
        Some(handle) => match joined(handle.await) {
            Err(e) => Err(e),
            Ok(_) => Err(closed_err()),
        },
        None => Err(closed_err()),
    }
}

/// Tells the put the value is complete and waits for its commit.
async fn finish(tx: Option<mpsc::Sender<Msg>>, handle: PutTask) -> PyResult<Manifest> {
    if let Some(tx) = tx {
        // A failed send means the put already ended; its result says how.
        let _ = tx.send(Msg::Finish).await;
    }
    joined(handle.await)
}

/// Ends the put without committing (the channel closes without [`Msg::Finish`]) and waits until it has stopped.
async fn abort(handle: PutTask) {
    let _ = handle.await;
}

/// The put task's result as Python sees it.
fn joined(
    result: Result<saltblob::Result<saltblob::Manifest>, tokio::task::JoinError>,
) -> PyResult<Manifest> {
    match result {
        Ok(Ok(m)) => Ok(Manifest::from(&m)),
        Ok(Err(e)) => Err(py_err(e)),
        Err(e) => Err(new_err(
            Kind::Base,
            format!("the put task failed: {e}"),
            false,
        )),
    }
}

fn closed_err() -> PyErr {
    new_err(
        Kind::InvalidArgument,
        "I/O operation on a closed writer".to_owned(),
        false,
    )
}

fn take_task(upload: &Arc<Mutex<Upload>>) -> Option<PutTask> {
    lock(upload).task.take()
}

fn lock(upload: &Arc<Mutex<Upload>>) -> std::sync::MutexGuard<'_, Upload> {
    // The state stays valid if a holder panicked: it is two `Option`s.
    upload
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The writer's state shared by its sync and async forms.
#[derive(Clone)]
struct WriterCore {
    upload: Local<Arc<Mutex<Upload>>>,
    result: Arc<Mutex<Option<Manifest>>>,
}

impl WriterCore {
    fn new(store: BlobStore, key: Bytes, opts: PutOptions) -> PyResult<Self> {
        Ok(Self {
            upload: Local::new(Arc::new(Mutex::new(Upload::start(store, key, opts)?))),
            result: Arc::default(),
        })
    }

    /// The put in progress (refused in a process forked from the writer's).
    fn upload(&self) -> PyResult<&Arc<Mutex<Upload>>> {
        self.upload.get()
    }

    /// The sender, or the error of a closed writer.
    fn sender(&self) -> PyResult<mpsc::Sender<Msg>> {
        lock(self.upload()?).tx.clone().ok_or_else(closed_err)
    }

    /// Takes the channel and the task for closing; `None` when already closed.
    fn take(&self) -> PyResult<Option<(Option<mpsc::Sender<Msg>>, PutTask)>> {
        let mut up = lock(self.upload()?);
        let tx = up.tx.take();
        Ok(up.task.take().map(|task| (tx, task)))
    }

    /// Whether the writer was closed or aborted (or belongs to another process).
    fn closed(&self) -> bool {
        self.upload().map_or(true, |u| lock(u).tx.is_none())
    }

    fn manifest(&self) -> Option<Manifest> {
        self.result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn record(&self, m: &Manifest) {
        *self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(m.clone());
    }

    /// What closing an already closed writer returns: its manifest, else the closed-writer error.
    fn closed_again(&self) -> PyResult<Manifest> {
        self.manifest().ok_or_else(closed_err)
    }
}

/// The writer of one blob under `saltblob.BlobWriter` (`Store.open_writer`, an `io.BufferedIOBase`): `write`
/// pieces, then `close` commits them as the new version. As a context manager it commits on a clean exit and
/// commits nothing when the block raises; a writer dropped without `close` commits nothing either.
#[pyclass(module = "saltblob", name = "RawBlobWriter")]
pub(crate) struct BlobWriter(WriterCore);

impl BlobWriter {
    pub(crate) fn new(store: BlobStore, key: Bytes, opts: PutOptions) -> PyResult<Self> {
        Ok(Self(WriterCore::new(store, key, opts)?))
    }
}

#[pymethods]
impl BlobWriter {
    /// Writes a bytes-like object; returns its length. Waits (without the GIL) while the put is a window ahead.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let bytes = piece(data, "write()")?;
        let n = bytes.len();
        let tx = self.0.sender()?;
        let upload = Arc::clone(self.0.upload()?);
        wait(py, send(tx, upload, bytes))??;
        Ok(n)
    }

    /// Commits what was written as the new version and returns its manifest (again on a second call).
    fn close(&self, py: Python<'_>) -> PyResult<Manifest> {
        let Some((tx, task)) = self.0.take()? else {
            return self.0.closed_again();
        };
        let m = wait(py, finish(tx, task))??;
        self.0.record(&m);
        Ok(m)
    }

    /// Ends the writer without committing anything; the previous version stays current.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        if let Some((tx, task)) = self.0.take()? {
            drop(tx);
            wait(py, abort(task))?;
        }
        Ok(())
    }

    /// Whether `close` or `abort` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.0.closed()
    }

    /// The manifest of the committed version, once `close` returned.
    #[getter]
    fn manifest(&self) -> Option<Manifest> {
        self.0.manifest()
    }

    /// Always true.
    fn writable(&self) -> bool {
        true
    }

    /// Nothing to do: written pieces are already on their way.
    fn flush(&self) {}

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits on a clean exit; aborts (commits nothing) when the block raised. Never swallows the exception.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some() {
            self.abort(py)?;
        } else {
            self.close(py)?;
        }
        Ok(false)
    }
}

/// The asyncio form of [`BlobWriter`] (`Store.open_writer_async`): `await write(...)`, `await close()`, and
/// `async with`.
#[pyclass(module = "saltblob")]
pub(crate) struct AsyncBlobWriter(WriterCore);

impl AsyncBlobWriter {
    pub(crate) fn new(store: BlobStore, key: Bytes, opts: PutOptions) -> PyResult<Self> {
        Ok(Self(WriterCore::new(store, key, opts)?))
    }
}

#[pymethods]
impl AsyncBlobWriter {
    /// Writes a bytes-like object; the awaitable returns its length.
    fn write<'py>(&self, py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let bytes = piece(data, "write()")?;
        let n = bytes.len();
        let tx = self.0.sender()?;
        let upload = Arc::clone(self.0.upload()?);
        awaitable(py, async move {
            send(tx, upload, bytes).await?;
            Ok(n)
        })
    }

    /// Commits what was written; the awaitable returns the manifest.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let core = self.0.clone();
        awaitable(py, async move {
            let Some((tx, task)) = core.take()? else {
                return core.closed_again();
            };
            let m = finish(tx, task).await?;
            core.record(&m);
            Ok(m)
        })
    }

    /// Ends the writer without committing anything.
    fn abort<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let taken = self.0.take()?;
        awaitable(py, async move {
            if let Some((tx, task)) = taken {
                drop(tx);
                abort(task).await;
            }
            Ok(())
        })
    }

    /// Whether `close` or `abort` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.0.closed()
    }

    /// The manifest of the committed version, once `close` returned.
    #[getter]
    fn manifest(&self) -> Option<Manifest> {
        self.0.manifest()
    }

    fn __aenter__<'py>(slf: Py<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, async move { Ok(slf) })
    }

    /// Commits on a clean exit; aborts when the block raised. Never swallows the exception.
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<&Bound<'py, PyType>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let core = self.0.clone();
        let failed = exc_type.is_some();
        awaitable(py, async move {
            let Some((tx, task)) = core.take()? else {
                return Ok(false);
            };
            if failed {
                drop(tx);
                abort(task).await;
            } else {
                let m = finish(tx, task).await?;
                core.record(&m);
            }
            Ok(false)
        })
    }
}

/// `put` of a file object or an iterator: pulls its pieces on the calling thread (with the GIL) and streams them
/// to the put (without it). Any exception — of the source, or Ctrl-C — aborts the put, then propagates.
pub(crate) fn put_source(
    py: Python<'_>,
    store: BlobStore,
    key: Bytes,
    source: Source,
    opts: PutOptions,
) -> PyResult<Manifest> {
    let core = WriterCore::new(store, key, opts)?;
    let fed = (|| -> PyResult<()> {
        while let Some(bytes) = source.next_blocking(py)? {
            let tx = core.sender()?;
            wait(py, send(tx, Arc::clone(core.upload()?), bytes))??;
        }
        Ok(())
    })();
    match (fed, core.take()?) {
        (Ok(()), Some((tx, task))) => wait(py, finish(tx, task))?,
        (Ok(()), None) => Err(closed_err()),
        (Err(e), Some((tx, task))) => {
            drop(tx);
            // The abort is quick (the put stops at its next read); should it be interrupted too, the put still
            // ends uncommitted on its own.
            let _ = wait(py, abort(task));
            Err(e)
        }
        // The put ended first, and `e` is its error.
        (Err(e), None) => Err(e),
    }
}

/// `put_async` of a file object or an iterator: pulls its pieces on an I/O thread (with the GIL, a piece at a time)
/// and streams them to the put. (An async iterator is fed from the event loop by `saltblob._io._put_aiter`.)
pub(crate) async fn put_source_async(
    store: BlobStore,
    key: Bytes,
    source: Source,
    opts: PutOptions,
) -> PyResult<Manifest> {
    let core = WriterCore::new(store, key, opts)?;
    let fed = async {
        loop {
            let Some(bytes) = try_with_gil(|py| source.next_blocking(py))? else {
                return Ok(());
            };
            send(core.sender()?, Arc::clone(core.upload()?), bytes).await?;
        }
    }
    .await;
    match (fed, core.take()?) {
        (Ok(()), Some((tx, task))) => finish(tx, task).await,
        (Ok(()), None) => Err(closed_err()),
        (Err(e), Some((tx, task))) => {
            drop(tx);
            abort(task).await;
            Err(e)
        }
        (Err(e), None) => Err(e),
    }
}
