//! Reads: [`GetResult`] (what `get` returns: the manifest, and the bytes once, whole, as stored chunks or as a
//! [`ByteStream`]), and [`ReadCursor`], the seekable position of a file-like reader (`saltblob._io.BlobReader`),
//! which fetches the ranges it is asked for on demand.
//!
//! Bytes reach Python as `bytes` objects. A whole read is copied once, straight from the chunks into the `bytes`
//! object it returns, as they arrive (Rust's `get` copies the chunks once too, into one buffer); the object is not
//! zeroed first ([`crate::owned::Unfilled`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::stream::{self, BoxStream};
use futures::{FutureExt, Stream, StreamExt, future};
use pyo3::exceptions::{PyStopAsyncIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use saltblob::{BlobStore, BlobStream};

use crate::errors::{Kind, invalid, new_err, py_err};
use crate::fork::Local;
use crate::objects::Manifest;
use crate::owned::{Unfilled, new_bytes};
use crate::runtime::{awaitable, ready, wait};

/// Bytes handed to Python as a `bytes` object (one copy) when an awaitable resolves.
struct BytesOut(Bytes);

impl<'py> IntoPyObject<'py> for BytesOut {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        new_bytes(py, self.0.len(), |buf| {
            buf.push(&self.0);
            Ok(())
        })
    }
}

/// A `bytes` object written without the GIL, handed to Python when an awaitable resolves.
struct Filled(Unfilled);

impl<'py> IntoPyObject<'py> for Filled {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        self.0.finish(py)
    }
}

/// Pieces handed to Python as a list of `bytes` objects.
pub(crate) struct ListOut(pub(crate) Vec<Bytes>);

impl<'py> IntoPyObject<'py> for ListOut {
    type Target = PyList;
    type Output = Bound<'py, PyList>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        PyList::new(py, self.0.iter().map(|b| PyBytes::new(py, b)))
    }
}

/// Values of at most this many bytes are read whole by `get` itself, in the same call as their manifest, so that
/// taking their bytes costs no second call (and, with asyncio, no second trip through the event loop).
pub(crate) const READ_WITH_GET: u64 = 1 << 20;

/// The bytes of a read, piece by piece.
type Pieces = BoxStream<'static, saltblob::Result<Bytes>>;

/// The bytes of a [`GetResult`], not yet taken.
enum Body {
    /// To be read as they are taken.
    Stream(Box<BlobStream>),
    /// Read by `get` (a small value): the pieces as they came, or the error the read ended with, raised when they
    /// are taken, as a stream's would be.
    Read(saltblob::Result<Vec<Bytes>>),
}

impl Body {
    /// The pieces as a stream; a [`BlobStream`] as it is, with its checks.
    fn into_stream(self) -> Pieces {
        match self {
            Self::Stream(s) => (*s).boxed(),
            Self::Read(Ok(pieces)) => stream::iter(pieces.into_iter().map(Ok)).boxed(),
            Self::Read(Err(e)) => stream::once(future::ready(Err(e))).boxed(),
        }
    }
}

/// The result of `get`: the manifest of the version read, and its bytes, which can be taken once: whole
/// (`bytes()`), as the stored chunks (`chunks()`) or as a stream (`stream()`).
#[pyclass(module = "saltblob")]
pub(crate) struct GetResult {
    manifest: Manifest,
    range: (u64, u64),
    body: Local<Mutex<Option<Body>>>,
}

impl GetResult {
    /// The result of reading `stream`, whose bytes are read when they are taken.
    pub(crate) fn new(stream: BlobStream) -> Self {
        Self {
            manifest: Manifest::from(&stream.manifest),
            range: (stream.range.start, stream.range.end),
            body: Local::new(Mutex::new(Some(Body::Stream(Box::new(stream))))),
        }
    }

    /// The result of reading `stream`: its bytes are read now when they are at most [`READ_WITH_GET`].
    pub(crate) async fn read(mut stream: BlobStream) -> Self {
        let (manifest, range) = (
            Manifest::from(&stream.manifest),
            (stream.range.start, stream.range.end),
        );
        let body = if range.1 - range.0 <= READ_WITH_GET {
            let mut pieces = Vec::new();
            let mut failed = None;
            while let Some(piece) = stream.next().await {
                match piece {
                    Ok(p) => pieces.push(p),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            Body::Read(failed.map_or(Ok(pieces), Err))
        } else {
            Body::Stream(Box::new(stream))
        };
        Self {
            manifest,
            range,
            body: Local::new(Mutex::new(Some(body))),
        }
    }

    fn take(&self) -> PyResult<Body> {
        self.body
            .get()?
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or_else(|| {
                new_err(
                    Kind::InvalidArgument,
                    "the bytes of this result were already taken (bytes(), chunks() or stream() may be called once)"
                        .to_owned(),
                    false,
                )
            })
    }

    /// Bytes in this result's range.
    fn len(&self) -> PyResult<usize> {
        usize::try_from(self.range.1 - self.range.0)
            .map_err(|_| invalid("range", "larger than this machine's address space"))
    }

    /// `body`, this result's bytes, copied into one `bytes` object: bytes `get` read at once, without a trip
    /// through the runtime; a stream by a task on the runtime that copies each piece as it comes (one wake-up of
    /// this thread in all, not one per piece), while this thread waits without the GIL.
    fn bytes_of<'py>(&self, py: Python<'py>, body: Body) -> PyResult<Bound<'py, PyBytes>> {
        let len = self.len()?;
        if matches!(body, Body::Read(_)) {
            return new_bytes(py, len, |buf| {
                let mut filled = std::pin::pin!(fill(body.into_stream(), buf));
                match filled.as_mut().now_or_never() {
                    Some(done) => done,
                    None => wait(py, filled)?,
                }
                .map_err(py_err)
            });
        }
        let rt = crate::runtime::runtime()?;
        let mut out = Unfilled::new(py, len)?;
        out.prefault(py, rt);
        let pieces = body.into_stream();
        let task = rt.spawn(async move {
            let filled = fill(pieces, &mut out).await;
            (filled, out)
        });
        let abort = task.abort_handle();
        // Interrupted (Ctrl-C), the task stops at its next piece; the object is released unseen.
        let (filled, out) = wait(py, task)
            .inspect_err(|_| abort.abort())?
            .map_err(|e| {
                pyo3::exceptions::PyRuntimeError::new_err(format!("a read task failed: {e}"))
            })?;
        filled.map_err(py_err)?;
        out.finish(py)
    }
}

/// `get_range_async`'s awaitable: the bytes of the [`GetResult`] that `read` (an awaitable) ends with, taken with
/// `bytes_async` (`saltblob._io._bytes_when_read`), so that a large range is copied on the I/O threads into its
/// `bytes` object, as a whole get's is, not by the event loop's thread with the GIL held; a small one was read with
/// its manifest, and costs no second trip through the loop.
///
/// # Errors
/// `ImportError` if the package's Python half is missing.
pub(crate) fn bytes_when_read<'py>(
    py: Python<'py>,
    read: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    static BYTES_WHEN_READ: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    crate::runtime::cached(py, &BYTES_WHEN_READ, "saltblob._io", "_bytes_when_read")?.call1((read,))
}

/// `get_ranges_async`'s awaitable for one range: as [`bytes_when_read`], the bytes in a list of one
/// (`saltblob._io._list_when_read`).
///
/// # Errors
/// `ImportError` if the package's Python half is missing.
pub(crate) fn list_when_read<'py>(
    py: Python<'py>,
    read: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    static LIST_WHEN_READ: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    crate::runtime::cached(py, &LIST_WHEN_READ, "saltblob._io", "_list_when_read")?.call1((read,))
}

/// Copies `pieces` into `buf`, which must be exactly as long.
async fn fill(
    mut pieces: impl Stream<Item = saltblob::Result<Bytes>> + Unpin,
    buf: &mut Unfilled,
) -> saltblob::Result<()> {
    let len = buf.len();
    while let Some(piece) = pieces.next().await {
        if !buf.push(&piece?) {
            return Err(saltblob::Error::corrupt(
                "read",
                format!("the chunks hold more than the {len} bytes announced"),
            ));
        }
    }
    if buf.filled() != len {
        return Err(saltblob::Error::corrupt(
            "read",
            format!(
                "the chunks hold {} bytes, not the {len} announced",
                buf.filled()
            ),
        ));
    }
    Ok(())
}

/// Every piece of the stream, in order.
async fn pieces(
    mut stream: impl Stream<Item = saltblob::Result<Bytes>> + Unpin,
) -> PyResult<Vec<Bytes>> {
    let mut out = Vec::new();
    while let Some(piece) = stream.next().await {
        out.push(piece.map_err(py_err)?);
    }
    Ok(out)
}

#[pymethods]
impl GetResult {
    /// The manifest of the version read.
    #[getter]
    fn manifest(&self) -> Manifest {
        self.manifest.clone()
    }

    /// The byte range read, `(start, end)`, end exclusive.
    #[getter]
    fn range(&self) -> (u64, u64) {
        self.range
    }

    /// All the bytes, read into one `bytes` object (the chunks are copied once, into it). A whole read verifies
    /// the blob's digest.
    fn bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let body = self.take()?;
        self.bytes_of(py, body)
    }

    /// `bytes()` for asyncio: the `bytes` object is made now and filled on saltblob's I/O threads, without the
    /// GIL, as the pieces arrive.
    fn bytes_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.take()? {
            body @ Body::Stream(_) => {
                let mut out = Unfilled::new(py, self.len()?)?;
                out.prefault(py, crate::runtime::runtime()?);
                let pieces = body.into_stream();
                awaitable(py, async move {
                    fill(pieces, &mut out).await.map_err(py_err)?;
                    Ok(Filled(out))
                })
            }
            read => ready(py, self.bytes_of(py, read).map(Bound::into_any)),
        }
    }

    /// The bytes as a list of `bytes` objects, one per stored chunk (one for an inline blob).
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        match self.take()? {
            Body::Read(read) => ListOut(read.map_err(py_err)?).into_pyobject(py),
            body => ListOut(wait(py, pieces(body.into_stream()))??).into_pyobject(py),
        }
    }

    /// `chunks()` for asyncio.
    fn chunks_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.take()? {
            Body::Read(read) => ready(
                py,
                read.map_err(py_err)
                    .and_then(|p| ListOut(p).into_pyobject(py))
                    .map(Bound::into_any),
            ),
            body => {
                let stream = body.into_stream();
                awaitable(py, async move { Ok(ListOut(pieces(stream).await?)) })
            }
        }
    }

    /// The bytes as an iterator (and async iterator) of `bytes` objects of at least `chunk_size` bytes (the last
    /// may be shorter); by default, the stored chunks as they come. Reads at most the store's in-flight window ahead.
    #[pyo3(signature = (chunk_size = None))]
    fn stream(&self, chunk_size: Option<&Bound<'_, PyAny>>) -> PyResult<ByteStream> {
        let min = match chunk_size {
            Some(c) if !c.is_none() => usize::try_from(crate::args::size(c, "chunk_size")?)
                .map_err(|_| invalid("chunk_size", "too large"))?,
            _ => 0,
        };
        Ok(ByteStream {
            stream: Local::new(Arc::new(tokio::sync::Mutex::new(Some(
                self.take()?.into_stream(),
            )))),
            min,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "GetResult(range={:?}, manifest={})",
            self.range,
            self.manifest.__repr__()
        )
    }
}

/// The bytes of a read as they come: `for piece in stream` or `async for piece in stream`.
#[pyclass(module = "saltblob")]
pub(crate) struct ByteStream {
    stream: Local<Arc<tokio::sync::Mutex<Option<Pieces>>>>,
    min: usize,
}

/// The next piece of at least `min` bytes (fewer at the end), `None` at the end.
async fn next_piece(
    stream: Arc<tokio::sync::Mutex<Option<Pieces>>>,
    min: usize,
) -> PyResult<Option<Bytes>> {
    let mut guard = stream.lock().await;
    let Some(s) = guard.as_mut() else {
        return Ok(None);
    };
    let mut acc = BytesMut::new();
    loop {
        match s.next().await {
            Some(Ok(piece)) if acc.is_empty() && piece.len() >= min => return Ok(Some(piece)),
            Some(Ok(piece)) => {
                acc.extend_from_slice(&piece);
                if acc.len() >= min {
                    return Ok(Some(acc.freeze()));
                }
            }
            Some(Err(e)) => {
                *guard = None;
                return Err(py_err(e));
            }
            None => {
                *guard = None;
                return Ok((!acc.is_empty()).then(|| acc.freeze()));
            }
        }
    }
}

#[pymethods]
impl ByteStream {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let piece = wait(py, next_piece(Arc::clone(self.stream.get()?), self.min))??;
        Ok(piece.map(|b| PyBytes::new(py, &b)))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (stream, min) = (Arc::clone(self.stream.get()?), self.min);
        awaitable(py, async move {
            match next_piece(stream, min).await? {
                Some(b) => Ok(BytesOut(b)),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }
}

/// Bytes a reader asks for after a seek, at least: one small chunk.
const FIRST_SPAN: u64 = 64 << 10;
/// Most bytes one range read of a reader covers: reads that go on sequentially double their span up to this.
const MAX_SPAN: u64 = 64 << 20;

/// The open range read of a [`ReadCursor`].
struct Open {
    stream: BlobStream,
    /// Offset in the blob of the first byte of `leftover` (or of the next piece when it is empty).
    next: u64,
    /// End of the range read.
    end: u64,
    /// Bytes of the last piece not yet returned.
    leftover: Bytes,
    /// Bytes the range covers.
    span: u64,
}

/// The reading state of a reader.
struct Cursor {
    store: BlobStore,
    key: Bytes,
    /// The options of every range read (the customer key, if any).
    opts: saltblob::GetOptions,
    version: saltblob::VersionId,
    size: u64,
    open: Option<Open>,
}

/// The position of a file-like reader of one version of a blob; ranges are fetched when read, and reading on
/// sequentially reads further ahead each time. Shared by `saltblob._io.BlobReader` and `AsyncBlobReader`.
#[pyclass(module = "saltblob")]
pub(crate) struct ReadCursor {
    cursor: Local<Arc<tokio::sync::Mutex<Cursor>>>,
    pos: Arc<AtomicU64>,
    manifest: Manifest,
    size: u64,
}

impl ReadCursor {
    /// A reader of `manifest`'s version of `key`, whose range reads use `opts`.
    pub(crate) fn new(
        store: BlobStore,
        key: Bytes,
        opts: saltblob::GetOptions,
        manifest: &saltblob::Manifest,
    ) -> Self {
        Self {
            cursor: Local::new(Arc::new(tokio::sync::Mutex::new(Cursor {
                store,
                key,
                opts,
                version: manifest.version,
                size: manifest.size,
                open: None,
            }))),
            pos: Arc::default(),
            manifest: Manifest::from(manifest),
            size: manifest.size,
        }
    }
}

/// Reads up to `want` bytes (all that is left for `None`) at `pos`, and moves `pos` past them.
async fn read_at(
    cursor: Arc<tokio::sync::Mutex<Cursor>>,
    pos: Arc<AtomicU64>,
    want: Option<u64>,
) -> PyResult<Bytes> {
    let mut c = cursor.lock().await;
    let mut at = pos.load(Ordering::SeqCst);
    let left = c.size.saturating_sub(at);
    let want = want.map_or(left, |w| w.min(left));
    let mut parts: Vec<Bytes> = Vec::new();
    let mut got = 0u64;
    while got < want {
        let reusable = matches!(&c.open, Some(o) if o.next == at && (!o.leftover.is_empty() || o.next < o.end));
        if !reusable {
            let sequential = c.open.as_ref().filter(|o| o.end == at);
            let span = sequential
                .map_or(FIRST_SPAN, |o| (o.span * 2).min(MAX_SPAN))
                .max(want - got);
            let end = c.size.min(at.saturating_add(span));
            let opts = c.opts.clone().with_range(at..end);
            let stream = c
                .store
                .get_stream_with(c.key.clone(), &opts)
                .await
                .map_err(py_err)?;
            if stream.manifest.version != c.version {
                c.open = None;
                return Err(new_err(
                    Kind::PreconditionFailed,
                    format!(
                        "key \"{}\" was overwritten since the reader opened it (version {}, now {}); open it again",
                        saltblob::escape_key(&c.key),
                        c.version,
                        stream.manifest.version
                    ),
                    false,
                ));
            }
            c.open = Some(Open {
                stream,
                next: at,
                end,
                leftover: Bytes::new(),
                span: end - at,
            });
        }
        let Some(open) = c.open.as_mut() else {
            break;
        };
        if open.leftover.is_empty() {
            match open.stream.next().await {
                Some(Ok(piece)) => open.leftover = piece,
                Some(Err(e)) => {
                    c.open = None;
                    return Err(py_err(e));
                }
                None => {
                    let end = open.end;
                    c.open = None;
                    return Err(py_err(saltblob::Error::corrupt(
                        "read",
                        format!("a range read ended at byte {at}, before its end {end}"),
                    )));
                }
            }
        }
        let take =
            usize::try_from((want - got).min(open.leftover.len() as u64)).unwrap_or(usize::MAX);
        let part = open.leftover.split_to(take.min(open.leftover.len()));
        open.next += part.len() as u64;
        at += part.len() as u64;
        got += part.len() as u64;
        parts.push(part);
    }
    pos.store(at, Ordering::SeqCst);
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut all = BytesMut::with_capacity(usize::try_from(got).unwrap_or(0));
            for p in &parts {
                all.extend_from_slice(p);
            }
            all.freeze()
        }
    })
}

/// `None` for "all that is left": a missing or negative size, as in `io`.
fn wanted(size: Option<i64>) -> Option<u64> {
    size.and_then(|s| u64::try_from(s).ok())
}

#[pymethods]
impl ReadCursor {
    /// Reads up to `size` bytes (all that is left when `size` is `None` or negative) at the position and moves past
    /// them; `b""` at the end.
    #[pyo3(signature = (size = None))]
    fn read<'py>(&self, py: Python<'py>, size: Option<i64>) -> PyResult<Bound<'py, PyBytes>> {
        let b = wait(
            py,
            read_at(
                Arc::clone(self.cursor.get()?),
                Arc::clone(&self.pos),
                wanted(size),
            ),
        )??;
        Ok(PyBytes::new(py, &b))
    }

    /// `read()` for asyncio.
    #[pyo3(signature = (size = None))]
    fn read_async<'py>(&self, py: Python<'py>, size: Option<i64>) -> PyResult<Bound<'py, PyAny>> {
        let (cursor, pos, want) = (
            Arc::clone(self.cursor.get()?),
            Arc::clone(&self.pos),
            wanted(size),
        );
        awaitable(py, async move {
            Ok(BytesOut(read_at(cursor, pos, want).await?))
        })
    }

    /// Moves the position as `io` does (`whence` 0: from the start, 1: from here, 2: from the end); returns it.
    /// No I/O: the next read fetches from there.
    #[pyo3(signature = (offset, whence = 0))]
    fn seek(&self, offset: i64, whence: i32) -> PyResult<u64> {
        let base = match whence {
            0 => 0i128,
            1 => i128::from(self.pos.load(Ordering::SeqCst)),
            2 => i128::from(self.size),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "invalid whence ({whence}, should be 0, 1 or 2)"
                )));
            }
        };
        let target = base + i128::from(offset);
        let target = u64::try_from(target)
            .map_err(|_| PyValueError::new_err(format!("negative seek position {target}")))?;
        self.pos.store(target, Ordering::SeqCst);
        Ok(target)
    }

    /// The position.
    fn tell(&self) -> u64 {
        self.pos.load(Ordering::SeqCst)
    }

    /// The manifest of the version read.
    #[getter]
    fn manifest(&self) -> Manifest {
        self.manifest.clone()
    }

    /// The size of the version read.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }
}
