//! [`Store`]: a saltblob store opened from a URL ([`open`], [`open_async`]), with every operation of the Rust API as
//! a synchronous method and an `_async` twin. Arguments are checked before any I/O. A store pickles as its URL and
//! options (`saltblob._handles.reopen` opens it again), and belongs to the process that opened it
//! ([`crate::fork::Local`]).

use std::sync::{Arc, RwLock};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};
use saltblob::{
    BlobStore, BlobStream, ByteRange, FsckOptions, GcOptions, GetOptions, MemoryStore, StoreConfig,
};

use crate::args;
use crate::data::{Data, Source};
use crate::errors::{Kind, invalid, new_err, py_err, wrong_type};
use crate::fork::Local;
use crate::listing::{ListIterator, ListPage, PageOut, all_pages, page, page_args};
use crate::objects::{Description, Manifest, fsck_report, gc_report};
use crate::ops;
use crate::reading::{GetResult, ListOut, ReadCursor};
use crate::runtime::{awaitable, try_with_gil, wait};
use crate::writing::{AsyncBlobWriter, BlobWriter, put_source, put_source_async};

/// A saltblob store. Open one with `saltblob.open(url)`; use it as a context manager, or `close()` it, to release
/// it (an embedded store can be open only once at a time). Safe to share between threads and tasks.
#[pyclass(module = "saltblob", weakref)]
pub(crate) struct Store {
    inner: RwLock<Option<Local<BlobStore>>>,
    /// The URL, its password hidden.
    url: String,
    /// The URL as given, and the keyword options: what a pickled store is opened again with.
    opened_with: (String, Option<Py<PyDict>>),
}

/// The URL, its store options and the configuration, checked without any I/O: returns the URL the backend opens and
/// the store configuration.
fn checked(
    url: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(String, String, StoreConfig)> {
    let url: String = url
        .cast::<PyString>()
        .map_err(|_| wrong_type("url", "a store URL (str)", url))?
        .to_cow()?
        .into_owned();
    let config = args::store_config(options)?;
    let (backend_url, config) = saltblob::split_store_params(&url, config).map_err(py_err)?;
    // The configuration's own checks (chunk sizes, window, lease, scheduler), on a backend that costs nothing; the
    // real backend's limits are checked again when it is open.
    BlobStore::new(Arc::new(MemoryStore::new()), config.clone()).map_err(py_err)?;
    Ok((url, backend_url, config))
}

async fn open_store(backend_url: String, config: StoreConfig) -> saltblob::Result<BlobStore> {
    let backend = saltblob::open_backend(&backend_url).await?;
    BlobStore::new(backend, config)
}

/// Opens the store at `url` (`rocksdb:///path`, `cql://host:9042/keyspace`, `memory://`, with the CLI's URL
/// options). Keyword options set the store configuration beyond the URL (see `StoreOptions`).
#[pyfunction]
#[pyo3(signature = (url, **options))]
pub(crate) fn open<'py>(
    py: Python<'py>,
    url: &Bound<'py, PyAny>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, Store>> {
    let (url, backend_url, config) = checked(url, options)?;
    let options = options.map(|d| d.copy()).transpose()?.map(Bound::unbind);
    let store = wait(py, open_store(backend_url, config))?.map_err(py_err)?;
    Opened(Store::new(store, url, options)).into_pyobject(py)
}

/// `open()` for asyncio.
#[pyfunction]
#[pyo3(signature = (url, **options))]
pub(crate) fn open_async<'py>(
    py: Python<'py>,
    url: &Bound<'py, PyAny>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (url, backend_url, config) = checked(url, options)?;
    let options = options.map(|d| d.copy()).transpose()?.map(Bound::unbind);
    awaitable(py, async move {
        let store = open_store(backend_url, config).await.map_err(py_err)?;
        Ok(Opened(Store::new(store, url, options)))
    })
}

/// What a pickled store is: the function that opens it again, and its arguments (the URL and the options).
type Reduced<'py> = (Bound<'py, PyAny>, (String, Bound<'py, PyDict>));

/// A store just opened, handed to Python registered with `saltblob._handles` (what unpickling and the fsspec
/// filesystem look up before opening a URL again).
struct Opened(Store);

impl<'py> IntoPyObject<'py> for Opened {
    type Target = Store;
    type Output = Bound<'py, Store>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let store = Bound::new(py, self.0)?;
        py.import("saltblob._handles")?
            .getattr("register")?
            .call1((&store,))?;
        Ok(store)
    }
}

/// Drops keyspace of the `cql://` URL `url` (what `saltblob.compat.SaltedBlobStore.drop_schema` does when it was
/// given a URL instead of a driver session).
#[pyfunction]
pub(crate) fn _drop_cql_keyspace(py: Python<'_>, url: &str) -> PyResult<()> {
    let config = saltblob::cql::CqlConfig::from_url(url).map_err(py_err)?;
    wait(py, async move {
        let session = saltblob::cql::CqlStore::open_session(&config)
            .await
            .map_err(py_err)?;
        session
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", config.keyspace), ())
            .await
            .map_err(|e| {
                new_err(
                    Kind::Unavailable,
                    format!("DROP KEYSPACE {} failed: {e}", config.keyspace),
                    false,
                )
            })?;
        Ok(())
    })?
}

/// The fingerprint of customer key `key` (32 bytes) that is the same in every store: the `encryption_key` of the
/// versions it sealed before fingerprints were per store (`Store.customer_key_id` gives the one new versions
/// record). It reveals nothing usable about the key.
#[pyfunction]
pub(crate) fn customer_key_id(key: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(args::customer_key(key)?.id().to_owned())
}

/// The escaped form of key `key` (bytes) that the CLI shows and takes: valid UTF-8 stands for itself except `%`,
/// white space, control and invisible characters; every other byte is `%XX`. `unescape_key` reads it back.
#[pyfunction]
pub(crate) fn escape_key(key: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(saltblob::escape_key(&args::key(key, "key")?))
}

/// The key (bytes) that `escape_key` wrote as `text`: `%XX` is one byte, any other character its UTF-8 bytes.
/// `InvalidArgument` for a `%` not followed by two hex digits.
#[pyfunction]
pub(crate) fn unescape_key<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyBytes>> {
    let key = saltblob::unescape_key(text).map_err(|e| invalid("escaped key", e))?;
    Ok(PyBytes::new(py, &key))
}

/// Store URL `url` with its password hidden, as `Store.url` shows it.
#[pyfunction]
pub(crate) fn redact_url(url: &str) -> String {
    saltblob::redact_url(url)
}

impl Store {
    fn new(store: BlobStore, url: String, options: Option<Py<PyDict>>) -> Self {
        Self {
            inner: RwLock::new(Some(Local::new(store))),
            url: saltblob::redact_url(&url),
            opened_with: (url, options),
        }
    }

    /// The key, options and store of a `get_range` call, its arguments checked.
    fn range_call(
        &self,
        key: &Bound<'_, PyAny>,
        (start, end, length, suffix): (Option<u64>, Option<u64>, Option<u64>, Option<u64>),
        (priority, customer_key): (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    ) -> PyResult<(bytes::Bytes, GetOptions, BlobStore)> {
        let key = args::key(key, "key")?;
        let opts = get_options(priority, customer_key)?
            .with_range(byte_range(start, end, length, suffix)?);
        Ok((key, opts, self.store()?))
    }

    /// The open store, or `InvalidArgument` when it was closed (or was opened by the process this one was forked
    /// from).
    fn store(&self) -> PyResult<BlobStore> {
        match &*self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(store) => Ok(store.get()?.clone()),
            None => Err(new_err(
                Kind::InvalidArgument,
                format!("the store {} is closed", self.url),
                false,
            )),
        }
    }
}

/// What `get` returns: the read of `key` with `opts`, its bytes read with it when they are few
/// ([`GetResult::read`]).
async fn read_result(store: BlobStore, key: bytes::Bytes, opts: GetOptions) -> PyResult<GetResult> {
    let stream = store.get_stream_with(key, &opts).await.map_err(py_err)?;
    Ok(GetResult::read(stream).await)
}

/// The bytes of `stream`, read into a new `bytes` object (one copy).
fn read_whole<'py>(py: Python<'py>, stream: BlobStream) -> PyResult<Bound<'py, PyBytes>> {
    let result = Bound::new(py, GetResult::new(stream))?;
    result
        .call_method0("bytes")?
        .cast_into::<PyBytes>()
        .map_err(Into::into)
}

/// Whether `key` holds a blob: a head, `NotFound` as false.
async fn exists(store: &BlobStore, key: bytes::Bytes) -> PyResult<bool> {
    match store.head(key).await {
        Ok(_) => Ok(true),
        Err(saltblob::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(py_err(e)),
    }
}

/// The range of `get_range`'s arguments.
fn byte_range(
    start: Option<u64>,
    end: Option<u64>,
    length: Option<u64>,
    suffix: Option<u64>,
) -> PyResult<ByteRange> {
    match (start, end, length, suffix) {
        (None, None, None, Some(n)) => Ok(ByteRange::Suffix(n)),
        (_, _, _, Some(_)) => Err(invalid(
            "suffix",
            "give it alone, without start, end or length",
        )),
        (_, Some(_), Some(_), None) => Err(invalid("end/length", "give at most one of them")),
        (start, Some(end), None, None) => Ok(ByteRange::Bounded {
            start: start.unwrap_or(0),
            end,
        }),
        (start, None, Some(len), None) => {
            let start = start.unwrap_or(0);
            let end = start
                .checked_add(len)
                .ok_or_else(|| invalid("length", "start + length overflows"))?;
            Ok(ByteRange::Bounded { start, end })
        }
        (start, None, None, None) => Ok(ByteRange::From(start.unwrap_or(0))),
    }
}

/// The options of a read: its class, and the customer key a sealed version was put with.
fn get_options(
    priority: Option<&Bound<'_, PyAny>>,
    customer_key: Option<&Bound<'_, PyAny>>,
) -> PyResult<GetOptions> {
    let mut opts = GetOptions::new();
    if let Some(p) = priority.filter(|p| !p.is_none()) {
        opts = opts.with_priority(args::priority(p)?);
    }
    if let Some(k) = customer_key.filter(|k| !k.is_none()) {
        opts = opts.with_customer_key(args::customer_key(k)?);
    }
    Ok(opts)
}

fn optional<T>(
    obj: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    match obj {
        Some(o) if !o.is_none() => f(o).map(Some),
        _ => Ok(None),
    }
}

fn gc_options(
    grace: Option<&Bound<'_, PyAny>>,
    dry_run: bool,
    prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<GcOptions> {
    let mut opts = GcOptions::new()
        .with_dry_run(dry_run)
        .with_prefix(args::prefix(prefix)?);
    if let Some(g) = optional(grace, |g| args::duration(g, "grace"))? {
        opts = opts.with_grace(g);
    }
    Ok(opts)
}

fn fsck_options(
    repair: bool,
    min_age: Option<&Bound<'_, PyAny>>,
    prefix: Option<&Bound<'_, PyAny>>,
) -> PyResult<FsckOptions> {
    let mut opts = FsckOptions::new()
        .with_repair(repair)
        .with_prefix(args::prefix(prefix)?);
    if let Some(a) = optional(min_age, |a| args::duration(a, "min_age"))? {
        opts = opts.with_min_age(a);
    }
    Ok(opts)
}

/// The ranges of `get_ranges`: `starts` with `ends` (exclusive) or `lengths`, checked.
fn ranges_of(
    starts: Vec<u64>,
    ends: Option<Vec<u64>>,
    lengths: Option<Vec<u64>>,
) -> PyResult<Vec<(u64, u64)>> {
    let ends = match (ends, lengths) {
        (Some(_), Some(_)) => return Err(invalid("ends/lengths", "give one of them, not both")),
        (None, None) => return Err(invalid("ends/lengths", "give one of them")),
        (Some(ends), None) => ends,
        (None, Some(lengths)) => starts
            .iter()
            .zip(&lengths)
            .map(|(s, l)| {
                s.checked_add(*l)
                    .ok_or_else(|| invalid("lengths", "start + length overflows"))
            })
            .chain((lengths.len() != starts.len()).then(|| Ok(u64::MAX)))
            .collect::<PyResult<_>>()?,
    };
    if ends.len() != starts.len() {
        return Err(invalid(
            "ends/lengths",
            format!("{} of them for {} starts", ends.len(), starts.len()),
        ));
    }
    starts
        .into_iter()
        .zip(ends)
        .map(|(s, e)| {
            if s > e {
                Err(invalid(
                    "ends",
                    format!("range {s}..{e} ends before it starts"),
                ))
            } else {
                Ok((s, e))
            }
        })
        .collect()
}

/// The keys of `delete_many`: an iterable of keys.
fn keys_of(keys: &Bound<'_, PyAny>) -> PyResult<Vec<bytes::Bytes>> {
    if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
        return Err(wrong_type(
            "keys",
            "an iterable of keys (not one key)",
            keys,
        ));
    }
    keys.try_iter()
        .map_err(|_| wrong_type("keys", "an iterable of keys", keys))?
        .map(|k| args::key(&k?, "keys[i]"))
        .collect()
}

/// The versions `delete_many` returns.
fn versions(deleted: Vec<Option<saltblob::VersionId>>) -> Vec<Option<String>> {
    deleted
        .into_iter()
        .map(|v| v.map(|v| v.to_string()))
        .collect()
}

/// The Python reader class `saltblob._io.NAME` around `cursor`.
fn reader(py: Python<'_>, class: &str, cursor: ReadCursor) -> PyResult<Py<PyAny>> {
    Ok(py
        .import("saltblob._io")?
        .getattr(class)?
        .call1((cursor,))?
        .unbind())
}

#[pymethods]
impl Store {
    /// Stores `data` under `key` as a new version and returns its manifest. `data` is `bytes` (stored without a
    /// copy), any other bytes-like object (copied once), a binary file object or an iterator of bytes-like pieces
    /// (streamed in bounded memory). Options: see `PutOptions`.
    #[pyo3(signature = (key, data, **options))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        data: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Manifest> {
        let key = args::key(key, "key")?;
        let opts = args::put_options("put", options)?;
        let store = self.store()?;
        match crate::data::data(data)? {
            Data::Whole(bytes) => {
                let m =
                    wait(py, async move { store.put(key, bytes, &opts).await })?.map_err(py_err)?;
                Ok(Manifest::from(&m))
            }
            Data::Source(source) => put_source(py, store, key, source, opts),
        }
    }

    /// `put()` for asyncio; `data` may also be an async iterator of bytes-like pieces.
    #[pyo3(signature = (key, data, **options))]
    fn put_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let opts = args::put_options("put_async", options)?;
        let store = self.store()?;
        match crate::data::data(data)? {
            Data::Whole(bytes) => awaitable(py, async move {
                let m = store.put(key, bytes, &opts).await.map_err(py_err)?;
                Ok(Manifest::from(&m))
            }),
            // An async iterator is read on the event loop, by a coroutine that feeds a writer.
            Data::Source(Source::AsyncIter(pieces)) => {
                let writer = Bound::new(py, AsyncBlobWriter::new(store, key, opts)?)?;
                py.import("saltblob._io")?
                    .getattr("_put_aiter")?
                    .call1((writer, pieces))
            }
            Data::Source(source) => awaitable(py, put_source_async(store, key, source, opts)),
        }
    }

    /// Reads the current version of `key`: returns its manifest and its bytes, to take with `bytes()`, `chunks()`
    /// or `stream()`. A value of at most 1 MiB is read here, with its manifest (taking it costs no second call; a
    /// read error is still raised when the bytes are taken); a larger one is read as it is taken. `priority`
    /// names the class the read runs in; `customer_key` is the key a version put with `customer_key=` needs
    /// (without it, or with another, `KeyUnavailable`).
    #[pyo3(signature = (key, *, priority = None, customer_key = None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        priority: Option<&Bound<'_, PyAny>>,
        customer_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<GetResult> {
        let key = args::key(key, "key")?;
        let opts = get_options(priority, customer_key)?;
        let store = self.store()?;
        wait(py, read_result(store, key, opts))?
    }

    /// `get()` for asyncio.
    #[pyo3(signature = (key, *, priority = None, customer_key = None))]
    fn get_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        priority: Option<&Bound<'py, PyAny>>,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let opts = get_options(priority, customer_key)?;
        let store = self.store()?;
        awaitable(py, read_result(store, key, opts))
    }

    /// Reads bytes `start` to `end` (exclusive), or `length` bytes from `start`, or from `start` to the end, or the
    /// last `suffix` bytes; fetches only the chunks that cover them. A range past the end raises
    /// `RangeNotSatisfiable`.
    #[pyo3(signature = (key, start = None, end = None, *, length = None, suffix = None, priority = None, customer_key = None))]
    #[allow(clippy::too_many_arguments)]
    fn get_range<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        start: Option<u64>,
        end: Option<u64>,
        length: Option<u64>,
        suffix: Option<u64>,
        priority: Option<&Bound<'py, PyAny>>,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (key, opts, store) =
            self.range_call(key, (start, end, length, suffix), (priority, customer_key))?;
        let stream =
            wait(py, async move { store.get_stream_with(key, &opts).await })?.map_err(py_err)?;
        read_whole(py, stream)
    }

    /// `get_range()` for asyncio.
    #[pyo3(signature = (key, start = None, end = None, *, length = None, suffix = None, priority = None, customer_key = None))]
    #[allow(clippy::too_many_arguments)]
    fn get_range_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        start: Option<u64>,
        end: Option<u64>,
        length: Option<u64>,
        suffix: Option<u64>,
        priority: Option<&Bound<'py, PyAny>>,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (key, opts, store) =
            self.range_call(key, (start, end, length, suffix), (priority, customer_key))?;
        let read = awaitable(py, read_result(store, key, opts))?;
        crate::reading::bytes_when_read(py, read)
    }

    /// The manifest of the current version of `key`; `NotFound` if there is none.
    fn head(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Manifest> {
        let key = args::key(key, "key")?;
        let store = self.store()?;
        let m = wait(py, async move { store.head(key).await })?.map_err(py_err)?;
        Ok(Manifest::from(&m))
    }

    /// The fingerprint of customer key `key` (32 bytes) in this store: the `encryption_key` of the versions it
    /// seals here, so a caller can tell which of its keys a version needs. Another in every store; it reveals
    /// nothing usable about the key.
    fn customer_key_id(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<String> {
        let key = args::customer_key(key)?;
        let store = self.store()?;
        wait(py, async move { store.customer_fingerprint(&key).await })?.map_err(py_err)
    }

    /// `head()` for asyncio.
    fn head_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let store = self.store()?;
        awaitable(py, async move {
            Ok(Manifest::from(&store.head(key).await.map_err(py_err)?))
        })
    }

    /// Deletes `key`; returns the version it held, or `None` if it held none. With `if_version`, deletes only if the
    /// current version is that one (else `PreconditionFailed`, or `NotFound`).
    #[pyo3(signature = (key, *, if_version = None))]
    fn delete(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        if_version: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<String>> {
        let key = args::key(key, "key")?;
        let version = optional(if_version, |v| args::version(v, "if_version"))?;
        let store = self.store()?;
        let deleted = wait(py, async move {
            match version {
                Some(v) => store.delete_version(key, v).await.map(|()| Some(v)),
                None => store.delete(key).await,
            }
        })?
        .map_err(py_err)?;
        Ok(deleted.map(|v| v.to_string()))
    }

    /// `delete()` for asyncio.
    #[pyo3(signature = (key, *, if_version = None))]
    fn delete_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        if_version: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let version = optional(if_version, |v| args::version(v, "if_version"))?;
        let store = self.store()?;
        awaitable(py, async move {
            let deleted = match version {
                Some(v) => store.delete_version(key, v).await.map(|()| Some(v)),
                None => store.delete(key).await,
            }
            .map_err(py_err)?;
            Ok(deleted.map(|v| v.to_string()))
        })
    }

    /// The blobs whose key starts with `prefix` (all by default), in key order, as a lazy iterator of `ListEntry`
    /// read a page at a time.
    #[pyo3(signature = (prefix = None))]
    fn list(&self, prefix: Option<&Bound<'_, PyAny>>) -> PyResult<ListIterator> {
        Ok(ListIterator::new(self.store()?, args::prefix(prefix)?))
    }

    /// `list()` for asyncio: `async for entry in store.list_async(prefix)`.
    #[pyo3(signature = (prefix = None))]
    fn list_async(&self, prefix: Option<&Bound<'_, PyAny>>) -> PyResult<ListIterator> {
        self.list(prefix)
    }

    /// How `key` is laid out: layout kind, chunk geometry and bytes per salt.
    fn describe(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Description> {
        let key = args::key(key, "key")?;
        let store = self.store()?;
        let d = wait(py, async move { store.describe(key).await })?.map_err(py_err)?;
        Ok(Description::new(py, &d))
    }

    /// `describe()` for asyncio.
    fn describe_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let store = self.store()?;
        awaitable(py, async move {
            let d = store.describe(key).await.map_err(py_err)?;
            try_with_gil(|py| Py::new(py, Description::new(py, &d)))
        })
    }

    /// One garbage collection pass: reclaims replaced and deleted versions past `grace` (seconds or a timedelta;
    /// the store's grace period by default) and abandoned puts. Returns a `GcReport` dict.
    #[pyo3(signature = (*, grace = None, dry_run = false, prefix = None))]
    fn gc(
        &self,
        py: Python<'_>,
        grace: Option<&Bound<'_, PyAny>>,
        dry_run: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDict>> {
        let opts = gc_options(grace, dry_run, prefix)?;
        let store = self.store()?;
        let report = wait(py, async move { store.gc(&opts).await })?.map_err(py_err)?;
        gc_report(py, &report)
    }

    /// `gc()` for asyncio.
    #[pyo3(signature = (*, grace = None, dry_run = false, prefix = None))]
    fn gc_async<'py>(
        &self,
        py: Python<'py>,
        grace: Option<&Bound<'py, PyAny>>,
        dry_run: bool,
        prefix: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = gc_options(grace, dry_run, prefix)?;
        let store = self.store()?;
        awaitable(py, async move {
            let report = store.gc(&opts).await.map_err(py_err)?;
            try_with_gil(|py| gc_report(py, &report))
        })
    }

    /// Reads and verifies every blob (manifests, chunks, checksums, digests) and lists orphaned chunks; with
    /// `repair`, removes orphans older than `min_age`. Returns an `FsckReport` dict.
    #[pyo3(signature = (*, repair = false, min_age = None, prefix = None))]
    fn fsck(
        &self,
        py: Python<'_>,
        repair: bool,
        min_age: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDict>> {
        let opts = fsck_options(repair, min_age, prefix)?;
        let store = self.store()?;
        let report = wait(py, async move { store.fsck(&opts).await })?.map_err(py_err)?;
        fsck_report(py, &report)
    }

    /// `fsck()` for asyncio.
    #[pyo3(signature = (*, repair = false, min_age = None, prefix = None))]
    fn fsck_async<'py>(
        &self,
        py: Python<'py>,
        repair: bool,
        min_age: Option<&Bound<'py, PyAny>>,
        prefix: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = fsck_options(repair, min_age, prefix)?;
        let store = self.store()?;
        awaitable(py, async move {
            let report = store.fsck(&opts).await.map_err(py_err)?;
            try_with_gil(|py| fsck_report(py, &report))
        })
    }

    /// A file-like reader (`saltblob.BlobReader`, an `io.RawIOBase`) of the current version of `key`: read,
    /// readinto, seek, tell; each read fetches only the chunks it needs. Raises `PreconditionFailed` if the key is
    /// overwritten while it reads. `customer_key`: as `get`'s, for every read of the reader.
    #[pyo3(signature = (key, *, customer_key = None))]
    fn open_reader(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        customer_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let key = args::key(key, "key")?;
        let opts = get_options(None, customer_key)?;
        let store = self.store()?;
        let (k, s) = (key.clone(), store.clone());
        let m = wait(py, async move { s.head(k).await })?.map_err(py_err)?;
        reader(py, "BlobReader", ReadCursor::new(store, key, opts, &m))
    }

    /// `open_reader()` for asyncio: the awaitable returns a `saltblob.AsyncBlobReader`.
    #[pyo3(signature = (key, *, customer_key = None))]
    fn open_reader_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let opts = get_options(None, customer_key)?;
        let store = self.store()?;
        awaitable(py, async move {
            let m = store.head(key.clone()).await.map_err(py_err)?;
            try_with_gil(|py| reader(py, "AsyncBlobReader", ReadCursor::new(store, key, opts, &m)))
        })
    }

    /// A file-like writer (`saltblob.BlobWriter`, an `io.BufferedIOBase`) of a new version of `key`: `write()`
    /// pieces, `close()` commits them. As a context manager, commits on a clean exit and nothing when the block
    /// raises. Options: see `PutOptions`.
    #[pyo3(signature = (key, **options))]
    fn open_writer(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let key = args::key(key, "key")?;
        let opts = args::put_options("open_writer", options)?;
        let name = saltblob::escape_key(&key);
        let raw = Bound::new(py, BlobWriter::new(self.store()?, key, opts)?)?;
        Ok(py
            .import("saltblob._io")?
            .getattr("BlobWriter")?
            .call1((raw, name))?
            .unbind())
    }

    /// `open_writer()` for asyncio: an `AsyncBlobWriter` (`await write()`, `await close()`, `async with`).
    #[pyo3(signature = (key, **options))]
    fn open_writer_async(
        &self,
        key: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<AsyncBlobWriter> {
        let key = args::key(key, "key")?;
        let opts = args::put_options("open_writer_async", options)?;
        AsyncBlobWriter::new(self.store()?, key, opts)
    }

    /// Whether `key` holds a blob.
    fn exists(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = args::key(key, "key")?;
        let store = self.store()?;
        wait(py, async move { exists(&store, key).await })?
    }

    /// `exists()` for asyncio.
    fn exists_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let store = self.store()?;
        awaitable(py, async move { exists(&store, key).await })
    }

    /// Copies the current version of `src` to `dst` (a new version of `dst`, with the source's content type and
    /// metadata), streamed by the store: no bytes pass through Python. With `overwrite=False`, only if `dst` holds
    /// no blob (else `AlreadyExists`). `customer_key` reads a source sealed under it and seals the copy under it.
    /// Returns the copy's manifest.
    #[pyo3(signature = (src, dst, *, overwrite = true, customer_key = None))]
    fn copy(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        overwrite: bool,
        customer_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Manifest> {
        let (src, dst) = (args::key(src, "src")?, args::key(dst, "dst")?);
        let key = optional(customer_key, args::customer_key)?;
        let store = self.store()?;
        let c = wait(py, async move {
            ops::copy(&store, src, dst, overwrite, key).await
        })?
        .map_err(py_err)?;
        Ok(Manifest::from(&c.manifest))
    }

    /// `copy()` for asyncio.
    #[pyo3(signature = (src, dst, *, overwrite = true, customer_key = None))]
    fn copy_async<'py>(
        &self,
        py: Python<'py>,
        src: &Bound<'py, PyAny>,
        dst: &Bound<'py, PyAny>,
        overwrite: bool,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (src, dst) = (args::key(src, "src")?, args::key(dst, "dst")?);
        let key = optional(customer_key, args::customer_key)?;
        let store = self.store()?;
        awaitable(py, async move {
            let c = ops::copy(&store, src, dst, overwrite, key)
                .await
                .map_err(py_err)?;
            Ok(Manifest::from(&c.manifest))
        })
    }

    /// Moves `src` to `dst`: `copy`, then a delete of the version copied (a source replaced meanwhile keeps its new
    /// version). Options as `copy`'s. Returns the manifest of `dst`'s new version.
    #[pyo3(signature = (src, dst, *, overwrite = true, customer_key = None))]
    fn rename(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        overwrite: bool,
        customer_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Manifest> {
        let (src, dst) = (args::key(src, "src")?, args::key(dst, "dst")?);
        let key = optional(customer_key, args::customer_key)?;
        let store = self.store()?;
        let m = wait(py, async move {
            ops::rename(&store, src, dst, overwrite, key).await
        })?
        .map_err(py_err)?;
        Ok(Manifest::from(&m))
    }

    /// `rename()` for asyncio.
    #[pyo3(signature = (src, dst, *, overwrite = true, customer_key = None))]
    fn rename_async<'py>(
        &self,
        py: Python<'py>,
        src: &Bound<'py, PyAny>,
        dst: &Bound<'py, PyAny>,
        overwrite: bool,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (src, dst) = (args::key(src, "src")?, args::key(dst, "dst")?);
        let key = optional(customer_key, args::customer_key)?;
        let store = self.store()?;
        awaitable(py, async move {
            let m = ops::rename(&store, src, dst, overwrite, key)
                .await
                .map_err(py_err)?;
            Ok(Manifest::from(&m))
        })
    }

    /// Deletes every key of `keys` (several in flight at once); returns the version each held (`None` for none),
    /// in order. Every delete is tried; the first error is raised after all of them ended.
    fn delete_many(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<String>>> {
        let keys = keys_of(keys)?;
        let store = self.store()?;
        let deleted =
            wait(py, async move { ops::delete_many(&store, keys).await })?.map_err(py_err)?;
        Ok(versions(deleted))
    }

    /// `delete_many()` for asyncio.
    fn delete_many_async<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let keys = keys_of(keys)?;
        let store = self.store()?;
        awaitable(py, async move {
            let deleted = ops::delete_many(&store, keys).await.map_err(py_err)?;
            Ok(versions(deleted))
        })
    }

    /// Reads several ranges of one version of `key`: `starts[i]` to `ends[i]` (exclusive), or `lengths[i]` bytes
    /// from `starts[i]`; returns their bytes, in order. Nearby ranges are read as one, the others at once. Each
    /// range must lie within the blob (else `RangeNotSatisfiable`). With `if_version`, reads that version only
    /// (else `PreconditionFailed`); `priority` and `customer_key` as `get`'s.
    #[pyo3(signature = (key, starts, ends = None, *, lengths = None, if_version = None, priority = None, customer_key = None))]
    #[allow(clippy::too_many_arguments)]
    fn get_ranges<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        starts: Vec<u64>,
        ends: Option<Vec<u64>>,
        lengths: Option<Vec<u64>>,
        if_version: Option<&Bound<'py, PyAny>>,
        priority: Option<&Bound<'py, PyAny>>,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let key = args::key(key, "key")?;
        let ranges = ranges_of(starts, ends, lengths)?;
        let version = optional(if_version, |v| args::version(v, "if_version"))?;
        let opts = get_options(priority, customer_key)?;
        let store = self.store()?;
        if let [(start, end)] = ranges[..]
            && start < end
        {
            // One range (what a file's read asks for): its chunks copied straight into the one `bytes` object.
            let stream = wait(py, async move {
                ops::get_range_stream(&store, key, (start, end), opts, version).await
            })?
            .map_err(py_err)?;
            return PyList::new(py, [read_whole(py, stream)?]);
        }
        let read = wait(py, async move {
            ops::get_ranges(&store, key, ranges, opts, version).await
        })?
        .map_err(py_err)?;
        ListOut(read).into_pyobject(py)
    }

    /// `get_ranges()` for asyncio.
    #[pyo3(signature = (key, starts, ends = None, *, lengths = None, if_version = None, priority = None, customer_key = None))]
    #[allow(clippy::too_many_arguments)]
    fn get_ranges_async<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        starts: Vec<u64>,
        ends: Option<Vec<u64>>,
        lengths: Option<Vec<u64>>,
        if_version: Option<&Bound<'py, PyAny>>,
        priority: Option<&Bound<'py, PyAny>>,
        customer_key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = args::key(key, "key")?;
        let ranges = ranges_of(starts, ends, lengths)?;
        let version = optional(if_version, |v| args::version(v, "if_version"))?;
        let opts = get_options(priority, customer_key)?;
        let store = self.store()?;
        if let [(start, end)] = ranges[..]
            && start < end
        {
            // One range (what a saltblob:// file's read asks for): as `get_range_async`, its chunks copied once,
            // on the I/O threads, into the one `bytes` object (a small range's with its read).
            let read = awaitable(py, async move {
                let stream = ops::get_range_stream(&store, key, (start, end), opts, version)
                    .await
                    .map_err(py_err)?;
                Ok(GetResult::read(stream).await)
            })?;
            return crate::reading::list_when_read(py, read);
        }
        awaitable(py, async move {
            let read = ops::get_ranges(&store, key, ranges, opts, version)
                .await
                .map_err(py_err)?;
            Ok(ListOut(read))
        })
    }

    /// One page of the blobs whose key starts with `prefix`, in key order: at most `limit` items, and the token of
    /// the next page (`next_token`; give it to `page_token=`). With a `delimiter` (such as `"/"`), keys that hold it
    /// after the prefix are not listed but stand for their common prefix, listed once (`common_prefixes`; an item
    /// of the page as a blob is).
    #[pyo3(signature = (prefix = None, *, delimiter = None, page_token = None, limit = 1000))]
    fn list_page(
        &self,
        py: Python<'_>,
        prefix: Option<&Bound<'_, PyAny>>,
        delimiter: Option<&Bound<'_, PyAny>>,
        page_token: Option<&str>,
        limit: usize,
    ) -> PyResult<ListPage> {
        let (prefix, delimiter, after) = page_args(prefix, delimiter, page_token)?;
        let store = self.store()?;
        let p = wait(py, async move {
            page(&store, prefix, delimiter, after, limit).await
        })?
        .map_err(py_err)?;
        ListPage::new(py, p)
    }

    /// `list_page()` for asyncio.
    #[pyo3(signature = (prefix = None, *, delimiter = None, page_token = None, limit = 1000))]
    fn list_page_async<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<&Bound<'py, PyAny>>,
        delimiter: Option<&Bound<'py, PyAny>>,
        page_token: Option<&str>,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (prefix, delimiter, after) = page_args(prefix, delimiter, page_token)?;
        let store = self.store()?;
        awaitable(py, async move {
            let p = page(&store, prefix, delimiter, after, limit)
                .await
                .map_err(py_err)?;
            Ok(PageOut(p))
        })
    }

    /// Every page of `list_page(prefix, delimiter=delimiter)` in one `ListPage` (whose `next_token` is `None`):
    /// the "files" and "directories" right under `prefix`.
    #[pyo3(signature = (prefix = None, delimiter = "/"))]
    fn list_with_delimiter(
        &self,
        py: Python<'_>,
        prefix: Option<&Bound<'_, PyAny>>,
        delimiter: &str,
    ) -> PyResult<ListPage> {
        let delimiter = PyString::new(py, delimiter).into_any();
        let (prefix, delimiter, _) = page_args(prefix, Some(&delimiter), None)?;
        let delimiter = delimiter.unwrap_or_default();
        let store = self.store()?;
        let p = wait(
            py,
            async move { all_pages(&store, prefix, delimiter).await },
        )?
        .map_err(py_err)?;
        ListPage::new(py, p)
    }

    /// `list_with_delimiter()` for asyncio.
    #[pyo3(signature = (prefix = None, delimiter = "/"))]
    fn list_with_delimiter_async<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<&Bound<'py, PyAny>>,
        delimiter: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let delimiter = PyString::new(py, delimiter).into_any();
        let (prefix, delimiter, _) = page_args(prefix, Some(&delimiter), None)?;
        let delimiter = delimiter.unwrap_or_default();
        let store = self.store()?;
        awaitable(py, async move {
            let p = all_pages(&store, prefix, delimiter).await.map_err(py_err)?;
            Ok(PageOut(p))
        })
    }

    /// Pickles the store as its URL and keyword options: unpickled, it is the store of that URL this process has
    /// open already, else the store opened again (`saltblob._handles.reopen`). The pickle holds the URL as given,
    /// password included.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduced<'py>> {
        let reopen = py.import("saltblob._handles")?.getattr("reopen")?;
        let (url, options) = &self.opened_with;
        let options = match options {
            Some(o) => o.bind(py).copy()?,
            None => PyDict::new(py),
        };
        Ok((reopen, (url.clone(), options)))
    }

    /// Releases the store (readers, streams and writers still open keep it until they end). Idempotent.
    fn close(&self, py: Python<'_>) {
        let store = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        // Closing an embedded store waits for RocksDB: without the GIL.
        py.detach(move || drop(store));
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none()
    }

    /// The store's URL, its password hidden.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }

    fn __aenter__<'py>(slf: Py<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, async move { Ok(slf) })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc_type: Option<&Bound<'py, PyType>>,
        _exc: Option<&Bound<'py, PyAny>>,
        _tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.close(py);
        awaitable(py, async move { Ok(false) })
    }

    fn __repr__(&self) -> String {
        format!(
            "Store('{}'{})",
            self.url,
            if self.closed() { ", closed" } else { "" }
        )
    }
}
