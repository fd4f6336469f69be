//! Reads: [`GetResult`] (what `get` returns: the manifest, and the bytes once, whole, as stored chunks or as a
//! [`ByteStream`]), and [`ReadCursor`], the seekable position of a file-like reader (`saltblob._io.BlobReader`),
//! which fetches the ranges it is asked for on demand.
//!
//! Bytes reach Python as `bytes` objects. A whole read is copied once, straight from the chunks into the `bytes`
//! object it returns (Rust's `get` copies the chunks once too, into one buffer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use pyo3::exceptions::{PyStopAsyncIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use saltblob::{BlobStore, BlobStream};

use crate::errors::{Kind, invalid, new_err, py_err};
use crate::objects::Manifest;
use crate::runtime::{awaitable, wait};

/// Bytes handed to Python as a `bytes` object (one copy) when an awaitable resolves.
pub(crate) struct BytesOut(pub(crate) Bytes);

impl<'py> IntoPyObject<'py> for BytesOut {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// Pieces handed to Python as a list of `bytes` objects.
pub(crate) struct ListOut(Vec<Bytes>);

impl<'py> IntoPyObject<'py> for ListOut {
    type Target = PyList;
    type Output = Bound<'py, PyList>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        PyList::new(py, self.0.iter().map(|b| PyBytes::new(py, b)))
    }
}

/// The result of `get`: the manifest of the version read, and its bytes, which can be taken once: whole
/// (`bytes()`), as the stored chunks (`chunks()`) or as a stream (`stream()`).
#[pyclass(module = "saltblob")]
pub(crate) struct GetResult {
    manifest: Manifest,
    range: (u64, u64),
    stream: Mutex<Option<BlobStream>>,
}

impl GetResult {
    pub(crate) fn new(stream: BlobStream) -> Self {
        Self {
            manifest: Manifest::from(&stream.manifest),
            range: (stream.range.start, stream.range.end),
            stream: Mutex::new(Some(stream)),
        }
    }

    fn take(&self) -> PyResult<BlobStream> {
        self.stream
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
}

/// Copies the stream into `buf`, which must be exactly as long.
async fn fill(mut stream: BlobStream, buf: &mut [u8]) -> saltblob::Result<()> {
    let (mut at, len) = (0usize, buf.len());
    while let Some(piece) = stream.next().await {
        let piece = piece?;
        let end = at + piece.len();
        let dst = buf.get_mut(at..end).ok_or_else(|| {
            saltblob::Error::corrupt(
                "read",
                format!("the chunks hold more than the {len} bytes announced"),
            )
        })?;
        dst.copy_from_slice(&piece);
        at = end;
    }
    if at != buf.len() {
        return Err(saltblob::Error::corrupt(
            "read",
            format!(
                "the chunks hold {at} bytes, not the {} announced",
                buf.len()
            ),
        ));
    }
    Ok(())
}

/// Every piece of the stream, in order.
async fn pieces(mut stream: BlobStream) -> PyResult<Vec<Bytes>> {
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
        let stream = self.take()?;
        let len = usize::try_from(self.range.1 - self.range.0)
            .map_err(|_| invalid("range", "larger than this machine's address space"))?;
        PyBytes::new_with(py, len, |buf| wait(py, fill(stream, buf))?.map_err(py_err))
    }

    /// `bytes()` for asyncio.
    fn bytes_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.take()?;
        awaitable(py, async move {
            Ok(BytesOut(stream.collect_bytes().await.map_err(py_err)?))
        })
    }

    /// The bytes as a list of `bytes` objects, one per stored chunk (one for an inline blob).
    fn chunks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let stream = self.take()?;
        ListOut(wait(py, pieces(stream))??).into_pyobject(py)
    }

    /// `chunks()` for asyncio.
    fn chunks_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.take()?;
        awaitable(py, async move { Ok(ListOut(pieces(stream).await?)) })
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
            stream: Arc::new(tokio::sync::Mutex::new(Some(self.take()?))),
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
    stream: Arc<tokio::sync::Mutex<Option<BlobStream>>>,
    min: usize,
}

/// The next piece of at least `min` bytes (fewer at the end), `None` at the end.
async fn next_piece(
    stream: Arc<tokio::sync::Mutex<Option<BlobStream>>>,
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
        let piece = wait(py, next_piece(Arc::clone(&self.stream), self.min))??;
        Ok(piece.map(|b| PyBytes::new(py, &b)))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (stream, min) = (Arc::clone(&self.stream), self.min);
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
    version: saltblob::VersionId,
    size: u64,
    open: Option<Open>,
}

/// The position of a file-like reader of one version of a blob; ranges are fetched when read, and reading on
/// sequentially reads further ahead each time. Shared by `saltblob._io.BlobReader` and `AsyncBlobReader`.
#[pyclass(module = "saltblob")]
pub(crate) struct ReadCursor {
    cursor: Arc<tokio::sync::Mutex<Cursor>>,
    pos: Arc<AtomicU64>,
    manifest: Manifest,
    size: u64,
}

impl ReadCursor {
    pub(crate) fn new(store: BlobStore, key: Bytes, manifest: &saltblob::Manifest) -> Self {
        Self {
            cursor: Arc::new(tokio::sync::Mutex::new(Cursor {
                store,
                key,
                version: manifest.version,
                size: manifest.size,
                open: None,
            })),
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
            let stream = c
                .store
                .get_range_stream(c.key.clone(), at..end)
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
                Arc::clone(&self.cursor),
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
            Arc::clone(&self.cursor),
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
