//! # saltblob for Python
//!
//! The native module `saltblob._saltblob` of the Python package `saltblob` (the Python half, with the exception
//! classes, the file-like readers and the `compat` module, is in `python/saltblob`). It embeds the Rust store: every
//! operation runs on one Tokio runtime with the GIL released, as a synchronous call (which Ctrl-C interrupts) or an
//! `_async` twin that returns an asyncio awaitable.
//!
//! # Layout
//! Each module uses only those listed before it (`scripts/module-cycles.py`):
//! - `completions`: an event loop's queue of ended `_async` calls, which the loop drains itself.
//! - `runtime`: the runtime; `wait` (sync calls), `awaitable` (async calls), `with_gil` (I/O threads into Python).
//! - `errors`: saltblob's errors as the Python exceptions of `saltblob.exceptions`.
//! - `fork`: handles that refuse use (and are never dropped) in a process forked from theirs.
//! - `args`: keys, sizes, durations and keyword options, checked before any I/O.
//! - `owned`: a Python `bytes` object shared with Rust without a copy, and new ones written in place (the crate's
//!   only unsafe code).
//! - `data`: what a put takes (bytes-like, file object, iterator, async iterator).
//! - `objects`: `Manifest`, `Description`, `ListEntry` and the gc/fsck report dicts.
//! - `writing`: streamed puts and the file-like writers.
//! - `reading`: `GetResult`, `ByteStream` and the reader's `ReadCursor`.
//! - `listing`: the lazy listing iterator, and pages with a delimiter and page tokens.
//! - `ops`: copy and rename, batch deletes, several ranges in one read.
//! - `store`: `Store`, `open` and `open_async`.

mod args;
mod completions;
mod data;
mod errors;
mod fork;
mod listing;
mod objects;
mod ops;
mod owned;
mod reading;
mod runtime;
mod store;
mod writing;

use pyo3::prelude::*;

/// The module `saltblob._saltblob`.
#[pymodule]
fn _saltblob(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(store::open, m)?)?;
    m.add_function(wrap_pyfunction!(store::open_async, m)?)?;
    m.add_function(wrap_pyfunction!(store::customer_key_id, m)?)?;
    m.add_function(wrap_pyfunction!(store::escape_key, m)?)?;
    m.add_function(wrap_pyfunction!(store::unescape_key, m)?)?;
    m.add_function(wrap_pyfunction!(store::redact_url, m)?)?;
    m.add_function(wrap_pyfunction!(store::_drop_cql_keyspace, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_at_exit, m)?)?;
    m.add_class::<runtime::Canceller>()?;
    m.add_class::<completions::Completions>()?;
    m.add_class::<store::Store>()?;
    m.add_class::<objects::Manifest>()?;
    m.add_class::<objects::Description>()?;
    m.add_class::<objects::ListEntry>()?;
    m.add_class::<reading::GetResult>()?;
    m.add_class::<reading::ByteStream>()?;
    m.add_class::<reading::ReadCursor>()?;
    m.add_class::<writing::BlobWriter>()?;
    m.add_class::<writing::AsyncBlobWriter>()?;
    m.add_class::<listing::ListIterator>()?;
    m.add_class::<listing::ListPage>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
