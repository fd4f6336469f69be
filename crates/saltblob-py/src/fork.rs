//! Handles that belong to the process that made them. After `fork()`, the child has a copy of every store, reader,
//! writer and listing, but none of the I/O threads they run on (nor RocksDB's, nor the driver's): using one there
//! would wait forever, and dropping one could close the parent's RocksDB files or wait on a lock a vanished thread
//! held. So [`Local`] refuses use in another process with a clear error, and is never dropped there: its value is
//! left as it is (forgotten), for the child's exit to release.

use pyo3::prelude::*;

use crate::errors::{Kind, new_err};

/// A value of the process that made it: [`Local::get`] gives it only there.
pub(crate) struct Local<T> {
    pid: u32,
    value: Option<T>,
}

impl<T> Local<T> {
    /// `value`, owned by this process.
    pub(crate) fn new(value: T) -> Self {
        Self {
            pid: std::process::id(),
            value: Some(value),
        }
    }

    /// The value, in the process that made it.
    ///
    /// # Errors
    /// `InvalidArgument` in a process forked from it, saying what to do instead.
    pub(crate) fn get(&self) -> PyResult<&T> {
        match &self.value {
            Some(v) if self.pid == std::process::id() => Ok(v),
            _ => Err(forked(self.pid)),
        }
    }
}

impl<T: Clone> Clone for Local<T> {
    fn clone(&self) -> Self {
        Self {
            pid: self.pid,
            value: self.value.clone(),
        }
    }
}

impl<T> Drop for Local<T> {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            std::mem::forget(self.value.take());
        }
    }
}

/// The error of a handle of process `pid` used in a process forked from it.
fn forked(pid: u32) -> PyErr {
    new_err(
        Kind::InvalidArgument,
        format!(
            "this saltblob handle belongs to process {pid}, from which this process was forked, and saltblob's I/O \
             threads do not survive fork(): open the store again in this process (saltblob.open, or unpickle a \
             pickled Store), or start workers with the 'spawn' or 'forkserver' method"
        ),
        false,
    )
}
