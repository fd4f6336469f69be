//! What `put` accepts as data, sorted out before any I/O: a whole value (`bytes`, shared without a copy; any other
//! object with the buffer protocol, copied once), or a source streamed in bounded memory (a binary file object,
//! read a piece at a time; an iterator of bytes-like pieces; with `put_async`, also an async iterator).

use bytes::Bytes;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyInt, PyIterator, PyString};

use crate::errors::wrong_type;
use crate::owned::share;

/// How much one `read` of a file object asks for.
const FILE_PIECE: usize = 1 << 20;

/// The data of a put.
pub(crate) enum Data {
    /// The whole value, in memory.
    Whole(Bytes),
    /// Pieces pulled from Python one at a time.
    Source(Source),
}

/// A Python object that yields the value a piece at a time.
pub(crate) enum Source {
    /// A binary file object: `read(FILE_PIECE)` until it returns nothing.
    File(Py<PyAny>),
    /// An iterator of bytes-like pieces.
    Iter(Py<PyIterator>),
    /// An async iterator of bytes-like pieces (only `put_async` takes one; it feeds a writer from the event loop).
    AsyncIter(Py<PyAny>),
}

/// Sorts out `obj`, the `data` argument of a put.
pub(crate) fn data(obj: &Bound<'_, PyAny>) -> PyResult<Data> {
    let expected = "bytes-like, a binary file object or an iterator of bytes-like objects";
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "data must be bytes-like, not str: encode it first (e.g. text.encode())",
        ));
    }
    if obj.is_instance_of::<PyInt>() {
        return Err(wrong_type("data", expected, obj));
    }
    if let Some(bytes) = whole(obj)? {
        return Ok(Data::Whole(bytes));
    }
    if obj.hasattr("read")? {
        return Ok(Data::Source(Source::File(obj.clone().unbind())));
    }
    if obj.hasattr("__aiter__")? {
        let it = obj.call_method0("__aiter__")?;
        return Ok(Data::Source(Source::AsyncIter(it.unbind())));
    }
    match obj.try_iter() {
        Ok(it) => Ok(Data::Source(Source::Iter(it.unbind()))),
        Err(_) => Err(wrong_type("data", expected, obj)),
    }
}

/// The bytes of a bytes-like `obj` (shared if it is `bytes`, else copied), or `None` if it has no buffer.
fn whole(obj: &Bound<'_, PyAny>) -> PyResult<Option<Bytes>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Some(share(b.clone())));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Some(Bytes::from(b.to_vec())));
    }
    // Any other object with the buffer protocol (memoryview, array.array, mmap, numpy arrays): its raw bytes, in C
    // order, copied once. The stable ABI of CPython 3.9 cannot read a buffer in place.
    let py = obj.py();
    let Ok(view) = py.import("builtins")?.getattr("memoryview")?.call1((obj,)) else {
        return Ok(None);
    };
    let copy = view.call_method0("tobytes")?;
    Ok(Some(share(copy.cast_into::<PyBytes>()?)))
}

/// One piece yielded by a source (`what` names it in errors): a bytes-like object.
pub(crate) fn piece(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Bytes> {
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "data: {what} gave str; it must give bytes-like objects (open files in binary mode, 'rb')"
        )));
    }
    match whole(obj)? {
        Some(bytes) => Ok(bytes),
        None => Err(wrong_type(
            &format!("data: each piece {what} gives"),
            "bytes-like",
            obj,
        )),
    }
}

impl Source {
    /// The next piece, `None` at the end; must be called with the GIL. `AsyncIter` is not read here.
    pub(crate) fn next_blocking(&self, py: Python<'_>) -> PyResult<Option<Bytes>> {
        match self {
            Source::File(file) => {
                let got = file.bind(py).call_method1("read", (FILE_PIECE,))?;
                if got.is_none() {
                    // A non-blocking raw file with nothing to read now: not supported, say so.
                    return Err(PyTypeError::new_err(
                        "data: the file's read() returned None (a non-blocking file); give a blocking binary file",
                    ));
                }
                let bytes = piece(&got, "the file's read()")?;
                Ok((!bytes.is_empty()).then_some(bytes))
            }
            Source::Iter(it) => loop {
                let Some(item) = it.bind(py).clone().next() else {
                    return Ok(None);
                };
                let bytes = piece(&item?, "the iterator")?;
                // An empty piece is not the end of an iterator; skip it.
                if !bytes.is_empty() {
                    return Ok(Some(bytes));
                }
            },
            Source::AsyncIter(_) => Err(PyTypeError::new_err(
                "data is an async iterator: give it to put_async (put takes bytes, files and iterators)",
            )),
        }
    }
}
