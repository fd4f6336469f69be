//! `bytes` objects and Rust memory, without the copies and page faults the safe API costs:
//! - [`share`]: a Python `bytes` object lent to Rust without a copy: a [`Bytes`] that reads the object's own
//!   buffer and keeps the object alive until the last clone of the `Bytes` is dropped. This is how `put` stores
//!   the caller's `bytes` with no copy, as Rust's `put` stores a `Bytes`.
//! - [`Unfilled`], [`new_bytes`]: a new `bytes` object written in place as a read's pieces arrive, with or
//!   without the GIL, unseen by Python until it is full, not zeroed first (pyo3's `PyBytes::new_with` zeroes it,
//!   which for 60 MiB is tens of milliseconds of page faults before the first piece is copied); a large one has its
//!   pages faulted in ahead, in batches, beside the reads ([`Unfilled::prefault`]). It is not advised
//!   for huge pages: measured from Python on this project's machines, a fresh object's huge-page faults made
//!   60 MiB `bytes()` slower and far less even (70–158 ms against 70–83 ms with small pages), unlike the reused
//!   buffers of Rust's own reads.
//!
//! This module holds the crate's only unsafe code (the workspace forbids it; this crate denies it everywhere else).
//! Under the stable ABI for CPython 3.9 (`abi3-py39`) the buffer protocol is not available to extensions (it is
//! part of the limited API only from 3.11), so the bytes of an object are reached through `PyBytes_AsString`, which
//! is what pyo3's safe `PyBytes::as_bytes` does, but for a lifetime the GIL does not bound.
#![allow(unsafe_code)]

use std::mem::MaybeUninit;

use bytes::Bytes;
use pyo3::exceptions::PyRuntimeError;
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

/// A new `bytes` object that Python cannot see yet, written from its start, piece after piece, without the GIL
/// if need be, and handed to Python by [`Unfilled::finish`] only once every byte is written. Its buffer is not
/// zeroed first.
pub(crate) struct Unfilled {
    /// The only reference to the object until `finish`.
    obj: Py<PyBytes>,
    /// Its buffer, `len` bytes (CPython's trailing NUL after them is not ours).
    data: *mut MaybeUninit<u8>,
    len: usize,
    /// Bytes written so far, from the start.
    filled: usize,
}

// SAFETY: `data` points into the buffer of the `bytes` object `obj` holds, to which no other reference exists: no
// other thread, and no Python code, can read or write it until `finish` returns the object, and `push` takes
// `&mut self`. The buffer is plain memory that needs no GIL, and CPython objects never move. Dropping `obj`
// without the GIL is deferred by pyo3 to the next time a thread holds it. (For 0 bytes CPython returns its shared
// empty object: nothing is ever written to it.)
unsafe impl Send for Unfilled {}

impl Unfilled {
    /// A new object of `len` bytes, none written.
    pub(crate) fn new(py: Python<'_>, len: usize) -> PyResult<Self> {
        let size = pyo3::ffi::Py_ssize_t::try_from(len).map_err(|_| {
            PyRuntimeError::new_err(format!("{len} bytes do not fit a bytes object"))
        })?;
        // SAFETY: with a null pointer, `PyBytes_FromStringAndSize` makes a new `bytes` object of `size` bytes
        // whose contents are not initialized, and returns a new (strong) reference or null with an exception set;
        // the GIL is held (`py`). `from_owned_ptr_or_err` takes that reference, or the exception.
        let obj = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
            )?
        };
        let obj = obj.cast_into::<PyBytes>()?;
        // SAFETY: `obj` is a `bytes` object and the GIL is held; its buffer pointer stays valid while it lives.
        let data = unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) };
        if data.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(Self {
            obj: obj.unbind(),
            data: data.cast::<MaybeUninit<u8>>(),
            len,
            filled: 0,
        })
    }

    /// Starts faulting in the object's pages for writing (`MADV_POPULATE_WRITE`) on one of the runtime's blocking
    /// threads, for an object of at least [`PREFAULT_MIN`] bytes, so that the copies that fill it find its pages
    /// mapped: the faults are taken beside the reads, not one by one in the copies' path, and in batches, which
    /// costs the kernel less (measured here: 60 MiB of fresh memory took 40 ms to write, 23 ms to populate and
    /// then 7 ms to write). Pages already mapped are left as they are, so it may run while the object is written or
    /// read; the thread holds a reference to the object until it ends, so its pages stay the object's. A kernel
    /// without it (before Linux 5.14) refuses it, and the pages are faulted by the copies as before.
    pub(crate) fn prefault(&self, py: Python<'_>, rt: &tokio::runtime::Runtime) {
        if self.len < PREFAULT_MIN {
            return;
        }
        // SAFETY: `sysconf` only reads a system setting.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let (start, end) = (self.data as usize, self.data as usize + self.len);
        let (first, last) = (start.next_multiple_of(page), end / page * page);
        if last <= first {
            return;
        }
        let keep = self.obj.clone_ref(py);
        rt.spawn_blocking(move || {
            let _keep = keep;
            let mut at = first;
            while at < last {
                let step = (last - at).min(PREFAULT_STEP);
                // SAFETY: `[at, at + step)` lies within the object's buffer (page-aligned, inside `[start, end)`),
                // which `_keep` keeps allocated while this runs. `MADV_POPULATE_WRITE` maps the pages that are not
                // mapped yet as a write would, and leaves mapped pages and every byte's value as they are, so it
                // cannot change what another thread wrote or reads there.
                let done = unsafe {
                    libc::madvise(at as *mut libc::c_void, step, libc::MADV_POPULATE_WRITE)
                };
                if done != 0 {
                    break;
                }
                at += step;
            }
        });
    }

    /// Bytes the object holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes written so far.
    pub(crate) fn filled(&self) -> usize {
        self.filled
    }

    /// Appends `src`; `false`, and nothing written, when it does not fit in what is left.
    pub(crate) fn push(&mut self, src: &[u8]) -> bool {
        if src.len() > self.len - self.filled {
            return false;
        }
        // SAFETY: `filled + src.len() <= len`, so the destination lies within the object's buffer, which only
        // this value reaches (see `Send`) and which `&mut self` holds exclusively; `src` is other memory (the
        // object is unseen, so no `src` can point into it), so the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.data.add(self.filled).cast::<u8>(),
                src.len(),
            );
        }
        self.filled += src.len();
        true
    }

    /// The object, once every byte is written; otherwise it is released unseen and a `RuntimeError` raised.
    pub(crate) fn finish(self, py: Python<'_>) -> PyResult<Bound<'_, PyBytes>> {
        if self.filled != self.len {
            return Err(PyRuntimeError::new_err(format!(
                "saltblob wrote {} of the {} bytes of a bytes object (a bug: please report it)",
                self.filled, self.len
            )));
        }
        Ok(self.obj.into_bound(py))
    }
}

/// Objects from this size on are faulted in ahead of their copies ([`Unfilled::prefault`]).
const PREFAULT_MIN: usize = 4 << 20;

/// Bytes faulted in by one `madvise` call of [`Unfilled::prefault`].
const PREFAULT_STEP: usize = 8 << 20;

/// A new `bytes` object of `len` bytes, written by `fill` in place ([`Unfilled`]). The object is returned only
/// when `fill` succeeds and has written all `len` bytes; otherwise it is released unseen and `fill`'s error, or a
/// `RuntimeError` for too few bytes, is raised.
pub(crate) fn new_bytes<'py>(
    py: Python<'py>,
    len: usize,
    fill: impl FnOnce(&mut Unfilled) -> PyResult<()>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = Unfilled::new(py, len)?;
    fill(&mut out)?;
    out.finish(py)
}
