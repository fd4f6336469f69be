//! The one error type of saltblob, with [`Error::is_retryable`] telling callers whether a retry can help.

use std::fmt;

use crate::base::version::{ParseVersionError, VersionId};

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A blob key, shown in errors as [`crate::base::shown::escape_key`] writes it, cut at 120 characters.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyDisplay(pub Vec<u8>);

impl fmt::Display for KeyDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let escaped = crate::base::shown::escape_key(&self.0);
        match escaped.char_indices().nth(120) {
            Some((cut, _)) => write!(
                f,
                "{}… ({} bytes)",
                escaped.get(..cut).unwrap_or_default(),
                self.0.len()
            ),
            None => f.write_str(&escaped),
        }
    }
}

impl fmt::Debug for KeyDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl From<&[u8]> for KeyDisplay {
    fn from(key: &[u8]) -> Self {
        Self(key.to_vec())
    }
}

/// Everything that can go wrong in saltblob.
///
/// Variants are the kinds a caller matches on. Corruption variants carry their evidence (key, version,
/// chunk, expected and actual values). [`Error::is_retryable`] says whether the same call may succeed later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key is empty or longer than [`crate::store::MAX_KEY_LEN`].
    #[error("invalid key: {reason}")]
    InvalidKey {
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value or option is out of range; nothing was changed.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// The option or value at fault, e.g. `chunk size`.
        what: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// No committed version exists for the key.
    #[error("not found: no blob with key \"{key}\"")]
    NotFound {
        /// The key looked up.
        key: KeyDisplay,
    },
    /// A read or removal named a version the key neither holds nor keeps ([`crate::store::BlobStore::versions`]).
    #[error("no version {version} of key \"{key}\": it is neither current nor kept")]
    VersionNotFound {
        /// The key looked up.
        key: KeyDisplay,
        /// The version named.
        version: VersionId,
    },
    /// A put with `if_absent` found a committed version.
    #[error("already exists: key \"{key}\" already holds {}", fmt_current(.current))]
    AlreadyExists {
        /// The key written.
        key: KeyDisplay,
        /// The version that is there; `None` when it is not known (its manifest does not decode, or the
        /// backend refused the write without returning the record).
        current: Option<VersionId>,
    },
    /// A conditional operation found another current version than it expected.
    #[error("precondition failed for key \"{key}\": expected version {expected}, found {}", fmt_opt(.actual))]
    PreconditionFailed {
        /// The key written.
        key: KeyDisplay,
        /// The version the caller expected.
        expected: VersionId,
        /// The version found, if any.
        actual: Option<VersionId>,
    },
    /// A byte range does not lie within the blob.
    #[error(
        "range not satisfiable: bytes {start}..{end} of key \"{key}\", which holds {size} bytes"
    )]
    RangeNotSatisfiable {
        /// The key read.
        key: KeyDisplay,
        /// First byte asked for.
        start: u64,
        /// One past the last byte asked for.
        end: u64,
        /// The blob's size.
        size: u64,
    },
    /// A blob exceeds the configured maximum size.
    #[error(
        "too large: key \"{key}\" would hold {size} bytes, over the configured maximum of {max} bytes"
    )]
    TooLarge {
        /// The key written.
        key: KeyDisplay,
        /// The size reached (at least).
        size: u64,
        /// The configured maximum.
        max: u64,
    },
    /// A streamed put ended at another length than the caller announced.
    #[error(
        "size mismatch for key \"{key}\": announced {expected} bytes, the stream held {actual}"
    )]
    SizeMismatch {
        /// The key written.
        key: KeyDisplay,
        /// The announced length.
        expected: u64,
        /// The length the stream had.
        actual: u64,
    },
    /// A stored chunk failed its CRC32C check.
    #[error(
        "checksum mismatch: key \"{key}\" version {version} chunk {chunk}: stored crc32c {expected:#010x}, computed {actual:#010x}"
    )]
    ChecksumMismatch {
        /// The blob's key.
        key: KeyDisplay,
        /// The version read.
        version: VersionId,
        /// The chunk index.
        chunk: u64,
        /// The checksum stored with the chunk.
        expected: u32,
        /// The checksum of the bytes read.
        actual: u32,
    },
    /// A full read's BLAKE3 digest differs from the manifest's.
    #[error(
        "digest mismatch: key \"{key}\" version {version}: manifest says {expected}, data hashes to {actual}"
    )]
    DigestMismatch {
        /// The blob's key.
        key: KeyDisplay,
        /// The version read.
        version: VersionId,
        /// Hex digest in the manifest.
        expected: String,
        /// Hex digest of the bytes read.
        actual: String,
    },
    /// A chunk the manifest lists is not in the store.
    #[error(
        "missing chunk: key \"{key}\" version {version} chunk {chunk} (salt {salt}) is not in the store"
    )]
    MissingChunk {
        /// The blob's key.
        key: KeyDisplay,
        /// The version read.
        version: VersionId,
        /// The chunk index.
        chunk: u64,
        /// The salt (partition) it belongs to.
        salt: u32,
    },
    /// The version being read was replaced and reclaimed during the read; reading again returns the new one.
    #[error(
        "key \"{key}\" version {version} was overwritten and reclaimed while it was being read; read again"
    )]
    VersionReclaimed {
        /// The blob's key.
        key: KeyDisplay,
        /// The version that went away.
        version: VersionId,
    },
    /// A put could not keep its intent lease (it was stalled, or the backend failed, for longer than the lease,
    /// or garbage collection took the intent over) and did not commit, so that it cannot publish chunks that gc
    /// may be deleting. The previous version stays current; putting again may succeed.
    #[error(
        "put of key \"{key}\" version {version} lost its intent lease and did not commit: {detail}"
    )]
    IntentLost {
        /// The key written.
        key: KeyDisplay,
        /// The version that was not committed.
        version: VersionId,
        /// Why.
        detail: String,
    },
    /// A segment given to [`crate::store::BlobStore::compose`] is no longer claimable: its lease ran out (gc reclaims
    /// or reclaimed it), it was discarded, or it never was written under this key. Nothing was committed; write
    /// the segment again.
    #[error("segment version {version} of key \"{key}\" is gone: {detail}")]
    SegmentGone {
        /// The key composed.
        key: KeyDisplay,
        /// The segment's version.
        version: VersionId,
        /// Why.
        detail: String,
    },
    /// Stored bytes do not decode: a manifest, chunk or record is damaged or of an unknown format.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// What failed to decode, e.g. `manifest of key "a"`.
        what: String,
        /// The evidence: offending tag, lengths, checksums.
        detail: String,
    },
    /// A key provider cannot give or open a data key: the key-encryption key is unknown, retired, disabled, or
    /// the provider cannot be reached. Nothing was read or written with it.
    #[error("key unavailable: {provider} key {key}: {reason}")]
    KeyUnavailable {
        /// The provider: `local` (a keyring file) or `aws-kms`.
        provider: &'static str,
        /// The key-encryption key, as the provider names it (with its version where it has one).
        key: String,
        /// Why, and what to fix.
        reason: String,
        /// Whether the same call may succeed later (a provider that did not answer).
        retryable: bool,
    },
    /// A store URL is malformed or names an unknown scheme.
    #[error("invalid store URL \"{url}\": {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// Reading the caller's input or writing its output failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The storage backend failed.
    #[error("{backend} backend error: {message}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What the backend reported.
        message: String,
        /// Whether the same call may succeed later (timeouts, overload, unavailable replicas).
        retryable: bool,
        /// The engine's or driver's own error, kept for callers that walk the chain (`Error::source`).
        #[source]
        source: Option<BoxError>,
    },
    /// A failure of saltblob itself, not of the storage: one of its tasks panicked or was cancelled (e.g. the
    /// runtime is shutting down). Not retryable; the operation did not complete.
    #[error("internal error: {what}: {source}")]
    Internal {
        /// What saltblob was doing, e.g. `read task failed`.
        what: &'static str,
        /// The underlying failure (a task's join error).
        #[source]
        source: BoxError,
    },
}

/// An error of a storage engine or driver, kept as the cause of an [`Error::Backend`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

fn fmt_opt(v: &Option<VersionId>) -> String {
    v.map_or_else(|| "no blob".to_owned(), |v| v.to_string())
}

fn fmt_current(v: &Option<VersionId>) -> String {
    v.map_or_else(
        || "a version that could not be read".to_owned(),
        |v| format!("version {v}"),
    )
}

impl From<ParseVersionError> for Error {
    fn from(e: ParseVersionError) -> Self {
        Error::invalid("version id", e.to_string())
    }
}

impl Error {
    /// Whether the same call may succeed if retried: true for transient backend failures and for reads that
    /// raced a reclaimed overwrite; false for bad input, missing data, failed preconditions, corruption and
    /// saltblob's own failures ([`Error::Internal`]: a task that panicked will panic again, a runtime that shuts
    /// down runs nothing more).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Backend { retryable, .. } | Error::KeyUnavailable { retryable, .. } => {
                *retryable
            }
            Error::VersionReclaimed { .. } | Error::IntentLost { .. } => true,
            _ => false,
        }
    }

    /// This error as the last one of a loop that tried `attempts` times and gave up: a retryable backend error
    /// becomes final (no longer [`Error::is_retryable`]) and says how often it was tried, so that no layer above
    /// retries it again (OpenDAL's "persistent" errors). After a single attempt, or for any other error, it is
    /// returned unchanged.
    pub fn retries_exhausted(self, attempts: u32) -> Self {
        match self {
            Error::Backend {
                backend,
                message,
                retryable: true,
                source,
            } if attempts > 1 => Error::Backend {
                backend,
                message: format!("{message} (gave up after {attempts} attempts)"),
                retryable: false,
                source,
            },
            other => other,
        }
    }

    /// Whether the error is evidence of damaged stored data (checksum, digest, missing chunk, undecodable).
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::ChecksumMismatch { .. }
                | Error::DigestMismatch { .. }
                | Error::MissingChunk { .. }
                | Error::Corrupt { .. }
        )
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::Internal`] caused by `source`.
    pub fn internal(what: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Internal {
            what,
            source: source.into(),
        }
    }

    /// Builds an [`Error::Backend`] with no underlying error (the backend's own finding).
    pub fn backend(backend: &'static str, message: impl fmt::Display, retryable: bool) -> Self {
        Error::Backend {
            backend,
            message: message.to_string(),
            retryable,
            source: None,
        }
    }

    /// Builds an [`Error::Backend`] caused by the engine's or driver's error `source`, which is kept (the
    /// message says what saltblob was doing; the source says what failed).
    pub fn backend_caused(
        backend: &'static str,
        message: impl fmt::Display,
        retryable: bool,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Backend {
            backend,
            message: message.to_string(),
            retryable,
            source: Some(source.into()),
        }
    }
}
