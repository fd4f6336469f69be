//! A Python `bytes` object lent to Rust without a copy: [`share`] makes a [`Bytes`] that reads the object's own
//! buffer and keeps the object alive until the last clone of the `Bytes` is dropped. This is how `put` stores the
//! caller's `bytes` with no copy, as Rust's `put` stores a `Bytes`.
//!
//! This module holds the crate's only unsafe code (the workspace forbids it; this crate denies it everywhere else).
//! Under the stable ABI for CPython 3.9 (`abi3-py39`) the buffer protocol is not available to extensions (it is
//! part of the limited API only from 3.11), so the bytes of an object are reached through `PyBytes_AsString`, which
//! is what pyo3's safe `PyBytes::as_bytes` does, but for a lifetime the GIL does not bound.
#![allow(unsafe_code)]

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The bytes of `obj`, shared with it (no copy).
pub(crate) fn share(obj: Bound<'_, PyBytes>) -> Bytes {
    let data = obj.as_bytes();
    let (ptr, len) = (data.as_ptr(), data.len());
    Bytes::from_owner(Lent {
        _object: obj.unbind(),
        ptr,
        len,
    })
}

/// A strong reference to a `bytes` object, and where its data is.
struct Lent {
    /// Keeps the object, and so its buffer, alive. Dropped without the GIL, it is released the next time a thread
    /// attaches to the interpreter (pyo3's deferred reference counting).
    _object: Py<PyBytes>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: `ptr` points into the buffer of the `bytes` object held by `_object`, which is never mutated after
// creation (Python's `bytes` is immutable and this object was handed to us fully built) and never moves (CPython
// objects do not move). Reading it needs no GIL: it is plain memory that no thread writes while the object lives,
// and `_object` keeps it alive as long as this value. So sharing and sending `Lent` across threads is sound.
unsafe impl Send for Lent {}
// SAFETY: see `Send`: the buffer is immutable for as long as `Lent` lives.
unsafe impl Sync for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` and `len` came from `PyBytes::as_bytes` of the object `_object` holds; the buffer is valid,
        // initialized and immutable for `len` bytes while it lives (see `Send`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}
