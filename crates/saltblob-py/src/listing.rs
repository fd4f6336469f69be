//! `list`: a lazy iterator (and async iterator) of the blobs under a prefix, read a page at a time as it is
//! consumed, so that memory stays bounded by one page however many keys there are.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use saltblob::BlobStore;

use crate::errors::py_err;
use crate::objects::ListEntry;
use crate::runtime::{awaitable, wait};

/// Manifests one page reads.
const PAGE: usize = 1000;

struct Listing {
    store: BlobStore,
    prefix: Bytes,
    after: Option<Bytes>,
    buffer: VecDeque<saltblob::ListEntry>,
    done: bool,
}

/// The blobs whose key starts with a prefix, in key order: `for entry in store.list(prefix)` or
/// `async for entry in store.list_async(prefix)`. Each item is a `ListEntry`.
#[pyclass(module = "saltblob")]
pub(crate) struct ListIterator(Arc<tokio::sync::Mutex<Listing>>);

impl ListIterator {
    pub(crate) fn new(store: BlobStore, prefix: Bytes) -> Self {
        Self(Arc::new(tokio::sync::Mutex::new(Listing {
            store,
            prefix,
            after: None,
            buffer: VecDeque::new(),
            done: false,
        })))
    }
}

/// The next entry, reading the next page when the last one is used up; `None` at the end.
async fn next_entry(
    listing: Arc<tokio::sync::Mutex<Listing>>,
) -> PyResult<Option<saltblob::ListEntry>> {
    let mut l = listing.lock().await;
    loop {
        if let Some(entry) = l.buffer.pop_front() {
            return Ok(Some(entry));
        }
        if l.done {
            return Ok(None);
        }
        let (store, prefix, after) = (l.store.clone(), l.prefix.clone(), l.after.clone());
        let page = store
            .list_page(&prefix, after, PAGE)
            .await
            .map_err(py_err)?;
        l.done = page.next.is_none();
        l.after = page.next;
        l.buffer.extend(page.entries);
    }
}

/// An entry handed to Python when an awaitable resolves.
struct EntryOut(saltblob::ListEntry);

impl<'py> IntoPyObject<'py> for EntryOut {
    type Target = ListEntry;
    type Output = Bound<'py, ListEntry>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Bound::new(py, ListEntry::new(py, self.0))
    }
}

#[pymethods]
impl ListIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<ListEntry>> {
        let entry = wait(py, next_entry(Arc::clone(&self.0)))??;
        Ok(entry.map(|e| ListEntry::new(py, e)))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let listing = Arc::clone(&self.0);
        awaitable(py, async move {
            match next_entry(listing).await? {
                Some(entry) => Ok(EntryOut(entry)),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }
}
