//! `bytes` objects and Rust memory, without the copies and page faults the safe API costs:
//! - [`share`]: a Python `bytes` object lent to Rust without a copy: a [`Bytes`] that reads the object's own
//!   buffer and keeps the object alive until the last clone of the `Bytes` is dropped. This is how `put` stores
//!   the caller's `bytes` with no copy, as Rust's `put` stores a `Bytes`.
//! - [`new_bytes`]: a new `bytes` object written in place as a read's pieces arrive, not zeroed first (pyo3's
//!   `PyBytes::new_with` zeroes it, which for 60 MiB is tens of milliseconds of page faults before the first piece
//!   is copied), on huge pages when it is large (a fresh 60 MiB costs 15 360 faults of 4 KiB pages otherwise).
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

/// The buffer of a `bytes` object being made by [`new_bytes`]: written from its start, piece after piece, and
/// never read.
pub(crate) struct Filling<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    filled: usize,
}

impl Filling<'_> {
    /// Bytes the object holds.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes written so far.
    pub(crate) fn filled(&self) -> usize {
        self.filled
    }

    /// Appends `src`; `false`, and nothing written, when it does not fit in what is left.
    pub(crate) fn push(&mut self, src: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(self.filled..self.filled + src.len()) else {
            return false;
        };
        // SAFETY: `dst` is `src.len()` elements of `MaybeUninit<u8>`, which have the layout of `u8`, in a buffer
        // this value borrows exclusively; `src` is another object's memory, so the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len());
        }
        self.filled += src.len();
        true
    }
}

/// From this size on, [`new_bytes`] asks for transparent huge pages (as `saltblob_core`'s value buffers do).
const HUGE_FROM: usize = 4 << 20;
/// The size of a huge page on x86-64 and arm64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// A new `bytes` object of `len` bytes, written by `fill` in place. The object is returned only when `fill`
/// succeeds and has written all `len` bytes; otherwise it is released unseen (its bytes never reach Python) and
/// `fill`'s error, or a `RuntimeError` for too few bytes, is raised. `fill` runs with the GIL held; it may release
/// it (the buffer is this call's alone until it returns).
pub(crate) fn new_bytes<'py>(
    py: Python<'py>,
    len: usize,
    fill: impl FnOnce(&mut Filling<'_>) -> PyResult<()>,
) -> PyResult<Bound<'py, PyBytes>> {
    let size = pyo3::ffi::Py_ssize_t::try_from(len)
        .map_err(|_| PyRuntimeError::new_err(format!("{len} bytes do not fit a bytes object")))?;
    // SAFETY: with a null pointer, `PyBytes_FromStringAndSize` makes a new `bytes` object of `size` bytes whose
    // contents are not initialized, and returns a new (strong) reference or null with an exception set; the GIL
    // is held (`py`). `from_owned_ptr_or_err` takes that reference, or the exception.
    let obj = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
        )?
    };
    let obj = obj.cast_into::<PyBytes>()?;
    // SAFETY: the object was made just above and no other code has a reference to it, so its buffer of `len`
    // bytes (plus CPython's trailing NUL) is this function's alone until the object is returned: nothing reads
    // or writes it meanwhile. It never moves. `MaybeUninit<u8>` asks nothing of its contents.
    let buf: &mut [MaybeUninit<u8>] = unsafe {
        let data = pyo3::ffi::PyBytes_AsString(obj.as_ptr());
        if data.is_null() {
            return Err(PyErr::fetch(py));
        }
        std::slice::from_raw_parts_mut(data.cast::<MaybeUninit<u8>>(), len)
    };
    if len >= HUGE_FROM {
        advise_huge_pages(buf);
    }
    let mut filling = Filling { buf, filled: 0 };
    fill(&mut filling)?;
    if filling.filled != len {
        return Err(PyRuntimeError::new_err(format!(
            "saltblob wrote {} of the {len} bytes of a bytes object (a bug: please report it)",
            filling.filled
        )));
    }
    Ok(obj)
}

/// Asks the kernel for transparent huge pages over the whole 2 MiB pages of `buf` (the system's setting decides;
/// nothing happens where it says `never`). Advice only: failure changes nothing but speed.
fn advise_huge_pages(buf: &mut [MaybeUninit<u8>]) {
    let start = buf.as_mut_ptr() as usize;
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start + buf.len()) / HUGE_PAGE * HUGE_PAGE;
    if end > first {
        // SAFETY: `[first, end)` lies within `buf`, which this function borrows exclusively, and starts on a page
        // boundary; MADV_HUGEPAGE changes how its pages are backed, never their contents.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
}
