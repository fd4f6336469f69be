//! Whether a version's chunks are still needed: the one rule gc, the reclaim pass and fsck apply, each in the
//! read order its races require (gc and fsck look at a put's intent first; the reclaim pass at the current
//! manifest first).
//!
//! A version is **owned** when the current manifest of its key, or a kept version of the key
//! ([`crate::ledger::kept`]), is that version or lists it as a segment; its
//! put is **in flight** when it runs in this process on this store ([`crate::state::running::RunningPuts`]), or its
//! intent is not yet abandoned (lease expired and the takeover hold passed, [`crate::base::timing::takeover_hold`]).
//! A version neither owned nor in flight is dead: its chunks may be reclaimed once nothing else (the reclaim
//! queue, fsck's minimum age) says to wait.

use crate::backend::BlobRef;
use crate::base::error::Result;
use crate::base::timing::takeover_hold;
use crate::base::version::VersionId;
use crate::ledger::intent::{self, Intent};
use crate::ledger::kept;
use crate::state::Inner;

/// Whether the current manifest of a key, or one of its kept versions, owns a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// The current version, a kept one, or one of their segments.
    Owned,
    /// Not owned: the key holds and keeps other versions, or none.
    NotOwned,
    /// The current manifest or a kept one does not decode: nothing can be said, so nothing may be deleted.
    Unsure,
}

/// Whether the current manifest of `blob`'s key or a kept version of it owns `blob`'s version. The kept versions
/// are read only when the current manifest does not own it.
pub(crate) async fn ownership(inner: &Inner, blob: &BlobRef) -> Result<Ownership> {
    match inner.read_manifest(&blob.key).await {
        Ok(Some(m)) if m.owns(blob.version) => return Ok(Ownership::Owned),
        Ok(_) => {}
        Err(e) if e.is_corruption() => return Ok(Ownership::Unsure),
        Err(e) => return Err(e),
    }
    Ok(match kept::owns(inner, &blob.key, blob.version).await? {
        Some(true) => Ownership::Owned,
        Some(false) => Ownership::NotOwned,
        None => Ownership::Unsure,
    })
}

/// Whether the put of `version`, whose intent was read as `intent`, is in flight at `now` (Unix µs).
pub(crate) fn in_flight(
    inner: &Inner,
    version: VersionId,
    intent: Option<&Intent>,
    now: u64,
) -> bool {
    inner.running.contains(version)
        || intent.is_some_and(|i| !i.abandoned(now, takeover_hold(inner.info.late_writes)))
}

/// Whether the put of `blob` is in flight now, reading its intent record (one that does not decode holds
/// nothing).
pub(crate) async fn is_in_flight(inner: &Inner, blob: &BlobRef) -> Result<bool> {
    if inner.running.contains(blob.version) {
        return Ok(true);
    }
    let intent = intent::read_record(inner, blob)
        .await?
        .and_then(|found| Intent::decode(&found.raw).ok());
    Ok(in_flight(
        inner,
        blob.version,
        intent.as_ref(),
        inner.now_micros(),
    ))
}
