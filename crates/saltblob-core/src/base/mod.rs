//! What every layer of the crate uses, and that uses nothing of the crate above it: the error type ([`error`]),
//! units ([`units`]), the open-file limit and its shares ([`fds`]), version ids ([`version`]), the store's clock ([`clock`]), every timing assumption of the
//! protocols (`timing.rs`), how a failed step is tried again, in every crate ([`retry`]), how keys and URLs are
//! shown (`shown.rs`), buffers lent out and reused ([`buffers`]) and the buffer a whole value is read into
//! (`collect.rs`).

pub mod buffers;
pub mod clock;
pub(crate) mod collect;
pub mod error;
pub mod fds;
pub mod retry;
pub(crate) mod shown;
pub(crate) mod timing;
pub mod units;
pub mod version;
