//! Listings: `list`, a lazy iterator (and async iterator) of the blobs under a prefix, read a page at a time as it
//! is consumed, so that memory stays bounded by one page however many keys there are; and pages with page tokens
//! and a delimiter (`list_page`, `list_with_delimiter`), whose common prefixes stand for the "directories" under
//! the prefix: a group of keys is skipped by starting the next scan past it.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use saltblob::BlobStore;

use crate::errors::py_err;
use crate::fork::Local;
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
pub(crate) struct ListIterator(Local<Arc<tokio::sync::Mutex<Listing>>>);

impl ListIterator {
    pub(crate) fn new(store: BlobStore, prefix: Bytes) -> Self {
        Self(Local::new(Arc::new(tokio::sync::Mutex::new(Listing {
            store,
            prefix,
            after: None,
            buffer: VecDeque::new(),
            done: false,
        }))))
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
        let entry = wait(py, next_entry(Arc::clone(self.0.get()?)))??;
        Ok(entry.map(|e| ListEntry::new(py, e)))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let listing = Arc::clone(self.0.get()?);
        awaitable(py, async move {
            match next_entry(listing).await? {
                Some(entry) => Ok(EntryOut(entry)),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }
}

/// Where a page of a listing resumes: after a key, or after every key that starts with a common prefix.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum After {
    Key(Bytes),
    Prefix(Bytes),
}

impl After {
    /// The key the store's scan starts after: the key itself, or the prefix padded with `0xFF` bytes to the
    /// longest key, which sorts after every key that starts with the prefix and before every other greater key.
    fn scan_start(&self) -> Bytes {
        match self {
            After::Key(k) => k.clone(),
            After::Prefix(p) => {
                let mut padded = p.to_vec();
                padded.resize(saltblob::MAX_KEY_LEN.max(p.len()), 0xFF);
                Bytes::from(padded)
            }
        }
    }

    /// The page token: `k` or `p`, then the bytes in hex.
    fn token(&self) -> String {
        let (tag, bytes) = match self {
            After::Key(k) => ('k', k),
            After::Prefix(p) => ('p', p),
        };
        let mut out = String::with_capacity(1 + 2 * bytes.len());
        out.push(tag);
        for b in bytes.iter() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// The position a token of [`After::token`] names.
    fn from_token(token: &str) -> Result<Self, String> {
        let bad = || format!("\"{token}\" is not a page token of this listing");
        let hex = token.get(1..).ok_or_else(bad)?;
        if hex.len() % 2 != 0 || hex.is_empty() {
            return Err(bad());
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(bad)?;
        match token.as_bytes().first() {
            Some(b'k') => Ok(After::Key(bytes.into())),
            Some(b'p') => Ok(After::Prefix(bytes.into())),
            _ => Err(bad()),
        }
    }
}

/// One page of a listing, as the store's scans found it.
pub(crate) struct Page {
    entries: Vec<saltblob::ListEntry>,
    prefixes: Vec<Bytes>,
    next: Option<After>,
}

/// The common prefix of `key` under `prefix` with `delimiter`: `key` up to and including the first `delimiter`
/// after `prefix`; `None` when there is none.
fn common_prefix(key: &Bytes, prefix: &[u8], delimiter: &[u8]) -> Option<Bytes> {
    let rest = key.get(prefix.len()..)?;
    let at = rest.windows(delimiter.len()).position(|w| w == delimiter)?;
    Some(key.slice(..prefix.len() + at + delimiter.len()))
}

/// Up to `limit` (at least 1) items of the listing of `prefix`, resuming after `after`: blobs, and with a
/// `delimiter` the common prefixes that stand for every key that has the delimiter after the prefix (each listed
/// once, its keys not read past the page of the store's scan that found it). Both in key order.
pub(crate) async fn page(
    store: &BlobStore,
    prefix: Bytes,
    delimiter: Option<Bytes>,
    after: Option<After>,
    limit: usize,
) -> saltblob::Result<Page> {
    let limit = limit.max(1);
    let mut out = Page {
        entries: Vec::new(),
        prefixes: Vec::new(),
        next: None,
    };
    let mut start = after.map(|a| a.scan_start());
    // The last item of the page, where the next one resumes.
    let mut last: Option<After> = None;
    // With a delimiter, keys of one group are read past: a whole scan's worth.
    let scan = if delimiter.is_some() {
        PAGE
    } else {
        limit.min(PAGE)
    };
    loop {
        let scanned = store.list_page(&prefix, start.clone(), scan).await?;
        for entry in scanned.entries {
            let group = delimiter
                .as_ref()
                .filter(|d| !d.is_empty())
                .and_then(|d| common_prefix(&entry.key, &prefix, d));
            if let (Some(g), Some(After::Prefix(p))) = (&group, &last)
                && g == p
            {
                continue;
            }
            if out.entries.len() + out.prefixes.len() == limit {
                out.next = last;
                return Ok(out);
            }
            match group {
                Some(g) => {
                    out.prefixes.push(g.clone());
                    last = Some(After::Prefix(g));
                }
                None => {
                    last = Some(After::Key(entry.key.clone()));
                    out.entries.push(entry);
                }
            }
        }
        let Some(read_to) = scanned.next else {
            return Ok(out);
        };
        if out.entries.len() + out.prefixes.len() == limit {
            out.next = last;
            return Ok(out);
        }
        // Past the page's last key, or past the whole group it ended in.
        start = Some(match &last {
            Some(After::Prefix(p)) if read_to.starts_with(p) => {
                After::Prefix(p.clone()).scan_start()
            }
            _ => read_to,
        });
    }
}

/// A page of a listing (`Store.list_page`): the blobs, the common prefixes (with a delimiter), and the token of
/// the next page (`None` on the last).
#[pyclass(module = "saltblob", frozen, get_all)]
pub(crate) struct ListPage {
    /// The blobs of the page, in key order.
    entries: Vec<Py<ListEntry>>,
    /// The common prefixes of the page (each key up to and including the delimiter after the prefix), in order.
    common_prefixes: Vec<Py<pyo3::types::PyBytes>>,
    /// Give it to `page_token=` for the next page; `None` when the listing is over.
    next_token: Option<String>,
}

impl ListPage {
    pub(crate) fn new(py: Python<'_>, page: Page) -> PyResult<Self> {
        Ok(Self {
            entries: page
                .entries
                .into_iter()
                .map(|e| Py::new(py, ListEntry::new(py, e)))
                .collect::<PyResult<_>>()?,
            common_prefixes: page
                .prefixes
                .iter()
                .map(|p| pyo3::types::PyBytes::new(py, p).unbind())
                .collect(),
            next_token: page.next.as_ref().map(After::token),
        })
    }
}

#[pymethods]
impl ListPage {
    fn __repr__(&self) -> String {
        format!(
            "ListPage(entries={}, common_prefixes={}, next_token={})",
            self.entries.len(),
            self.common_prefixes.len(),
            if self.next_token.is_some() {
                "..."
            } else {
                "None"
            }
        )
    }
}

/// A page handed to Python when an awaitable resolves.
pub(crate) struct PageOut(pub(crate) Page);

impl<'py> IntoPyObject<'py> for PageOut {
    type Target = ListPage;
    type Output = Bound<'py, ListPage>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Bound::new(py, ListPage::new(py, self.0)?)
    }
}

/// The arguments of a page: the prefix, the delimiter and where to resume, checked.
pub(crate) fn page_args(
    prefix: Option<&Bound<'_, PyAny>>,
    delimiter: Option<&Bound<'_, PyAny>>,
    page_token: Option<&str>,
) -> PyResult<(Bytes, Option<Bytes>, Option<After>)> {
    let prefix = crate::args::prefix(prefix)?;
    let delimiter = match delimiter {
        Some(d) if !d.is_none() => {
            let d = crate::args::key(d, "delimiter")?;
            if d.is_empty() {
                return Err(crate::errors::invalid("delimiter", "it is empty"));
            }
            Some(d)
        }
        _ => None,
    };
    let after = page_token
        .map(After::from_token)
        .transpose()
        .map_err(|e| crate::errors::invalid("page_token", e))?;
    Ok((prefix, delimiter, after))
}

/// Every page of the listing of `prefix` with `delimiter`, in one: what `Store.list_with_delimiter` returns.
pub(crate) async fn all_pages(
    store: &BlobStore,
    prefix: Bytes,
    delimiter: Bytes,
) -> saltblob::Result<Page> {
    let mut all = Page {
        entries: Vec::new(),
        prefixes: Vec::new(),
        next: None,
    };
    let mut after = None;
    loop {
        let mut p = page(store, prefix.clone(), Some(delimiter.clone()), after, PAGE).await?;
        all.entries.append(&mut p.entries);
        all.prefixes.append(&mut p.prefixes);
        match p.next {
            Some(n) => after = Some(n),
            None => return Ok(all),
        }
    }
}
