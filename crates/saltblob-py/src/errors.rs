//! saltblob's errors as Python exceptions. The classes live in `saltblob/exceptions.py` (Python, because some
//! inherit from built-in classes too: `NotFound` is also a `FileNotFoundError` and a `KeyError`, `InvalidArgument`
//! a `ValueError`, `Unavailable` an `OSError`, `TimedOut` a `TimeoutError`); this module picks the class for each
//! [`saltblob::Error`] and keeps the Rust message.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The exception classes of `saltblob.exceptions`, by name.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// `SaltblobError`, the base of all.
    Base,
    /// `NotFound` (also a `FileNotFoundError` and a `KeyError`).
    NotFound,
    /// `PreconditionFailed`.
    PreconditionFailed,
    /// `AlreadyExists` (a `PreconditionFailed`, also a `FileExistsError`).
    AlreadyExists,
    /// `Corrupt`.
    Corrupt,
    /// `ChecksumMismatch` (a `Corrupt`).
    ChecksumMismatch,
    /// `InvalidArgument` (also a `ValueError`).
    InvalidArgument,
    /// `RangeNotSatisfiable` (an `InvalidArgument`).
    RangeNotSatisfiable,
    /// `Unavailable` (also an `OSError`): the backend failed or a read raced a reclaim; `.retryable` says whether
    /// to try again.
    Unavailable,
    /// `TimedOut` (an `Unavailable`, also a `TimeoutError`): the backend did not answer in time.
    TimedOut,
    /// `KeyUnavailable` (an `Unavailable`): the key a sealed blob needs cannot be used.
    KeyUnavailable,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Base => "SaltblobError",
            Kind::NotFound => "NotFound",
            Kind::PreconditionFailed => "PreconditionFailed",
            Kind::AlreadyExists => "AlreadyExists",
            Kind::Corrupt => "Corrupt",
            Kind::ChecksumMismatch => "ChecksumMismatch",
            Kind::InvalidArgument => "InvalidArgument",
            Kind::RangeNotSatisfiable => "RangeNotSatisfiable",
            Kind::Unavailable => "Unavailable",
            Kind::TimedOut => "TimedOut",
            Kind::KeyUnavailable => "KeyUnavailable",
        }
    }

    fn of(err: &saltblob::Error) -> Self {
        use saltblob::Error as E;
        match err {
            E::NotFound { .. } => Kind::NotFound,
            E::AlreadyExists { .. } => Kind::AlreadyExists,
            E::PreconditionFailed { .. } => Kind::PreconditionFailed,
            E::ChecksumMismatch { .. } => Kind::ChecksumMismatch,
            E::RangeNotSatisfiable { .. } => Kind::RangeNotSatisfiable,
            E::InvalidKey { .. }
            | E::InvalidArgument { .. }
            | E::InvalidUrl { .. }
            | E::TooLarge { .. }
            | E::SizeMismatch { .. } => Kind::InvalidArgument,
            E::Backend { .. } if timed_out(err) => Kind::TimedOut,
            E::Backend { .. }
            | E::VersionReclaimed { .. }
            | E::IntentLost { .. }
            | E::SegmentGone { .. } => Kind::Unavailable,
            E::KeyUnavailable { .. } => Kind::KeyUnavailable,
            e if e.is_corruption() => Kind::Corrupt,
            _ => Kind::Base,
        }
    }
}

/// Whether backend error `err` is a timeout: an I/O error of kind `TimedOut` somewhere in its chain, or an error
/// there whose message or variant says so (the drivers' request timeouts, a node's read and write timeouts).
fn timed_out(err: &saltblob::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        let message = e.to_string().to_ascii_lowercase();
        if ["timeout", "timed out", "deadline has elapsed"]
            .iter()
            .any(|w| message.contains(w))
        {
            return true;
        }
        // The drivers' variants (a node's `ReadTimeout`/`WriteTimeout`, whose messages say "in time").
        let variant = format!("{e:?}");
        if ["RequestTimeout", "ReadTimeout", "WriteTimeout", "TimedOut"]
            .iter()
            .any(|w| variant.contains(w))
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// An exception of class `kind` with `message`; its `retryable` attribute is `retryable`. While the interpreter
/// exits (when nobody can see it), a `RuntimeError` with the message.
pub(crate) fn new_err(kind: Kind, message: String, retryable: bool) -> PyErr {
    let fallback = message.clone();
    crate::runtime::with_gil(|py| match class(py, kind) {
        Ok(cls) => match cls.call1((message,)) {
            Ok(exc) => {
                if retryable && let Err(e) = exc.setattr("retryable", true) {
                    return e;
                }
                PyErr::from_value(exc)
            }
            Err(e) => e,
        },
        Err(e) => e,
    })
    .unwrap_or_else(|| pyo3::exceptions::PyRuntimeError::new_err(fallback))
}

/// `saltblob.exceptions.<kind>`.
fn class(py: Python<'_>, kind: Kind) -> PyResult<Bound<'_, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("saltblob.exceptions")?.unbind())
    })?;
    Ok(module.bind(py).getattr(kind.name())?.cast_into()?)
}

/// The Python exception of a saltblob error: its class by kind, its message the Rust one.
pub(crate) fn py_err(err: saltblob::Error) -> PyErr {
    let retryable = err.is_retryable();
    new_err(Kind::of(&err), err.to_string(), retryable)
}

/// `InvalidArgument` (a `ValueError`) naming the argument at fault: `invalid ARG: REASON`.
pub(crate) fn invalid(arg: &str, reason: impl std::fmt::Display) -> PyErr {
    new_err(
        Kind::InvalidArgument,
        format!("invalid {arg}: {reason}"),
        false,
    )
}

/// `TypeError` naming the argument at fault: `ARG must be EXPECTED, not TYPE`.
pub(crate) fn wrong_type(arg: &str, expected: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let type_name = got
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    pyo3::exceptions::PyTypeError::new_err(format!("{arg} must be {expected}, not {type_name}"))
}
