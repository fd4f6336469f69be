//! How a command fails: a one-line message and an exit code.

use saltblob::Error;

/// A failure and its exit code.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong, on one line (printed after `saltblob: error: `).
    pub message: String,
    /// The process's exit code.
    pub code: u8,
}

impl Failure {
    /// Exit code of a failure of the store, the backend or I/O.
    pub const FAILED: u8 = 1;
    /// Exit code of invalid usage or input.
    pub const USAGE: u8 = 2;
    /// Exit code of a key that holds no blob.
    pub const NOT_FOUND: u8 = 3;
    /// Exit code of corrupt or damaged data.
    pub const DAMAGED: u8 = 4;

    /// A failure with `code` and `message`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
        }
    }

    /// Invalid usage or input (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Self::USAGE, message)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::NotFound { .. } => Self::NOT_FOUND,
            e if e.is_corruption() => Self::DAMAGED,
            Error::InvalidKey { .. }
            | Error::InvalidArgument { .. }
            | Error::InvalidUrl { .. }
            | Error::RangeNotSatisfiable { .. }
            | Error::AlreadyExists { .. }
            | Error::PreconditionFailed { .. }
            | Error::TooLarge { .. }
            | Error::SizeMismatch { .. } => Self::USAGE,
            _ => Self::FAILED,
        };
        Self::new(code, one_line(&e))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::new(Self::FAILED, format!("i/o error: {}", one_line(&e)))
    }
}

/// The error's message followed by each cause in its source chain whose text the line does not already hold,
/// as `message: cause: cause`, so that a cause a backend kept reaches the user.
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_cause_is_appended_once() {
        let disk_full = std::io::Error::other("no space left on device");
        let e = Error::backend_caused("rocksdb", "writing chunk 7", false, disk_full);
        let failure = Failure::from(e);
        assert_eq!(
            failure.message,
            "rocksdb backend error: writing chunk 7: no space left on device"
        );
        assert_eq!(failure.code, Failure::FAILED);
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = Error::Io(std::io::Error::other("broken pipe"));
        assert_eq!(one_line(&e), "i/o error: broken pipe");
        let e = Error::backend("saltblob", "stalled", true);
        assert_eq!(Failure::from(e).message, "saltblob backend error: stalled");
    }
}
