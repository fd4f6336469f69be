//! Every timing assumption the protocols rely on, in one place: how late a manifest write may land after it was
//! issued, how far apart two clients' clocks may be, and how long a claimed or expired intent is held. gc,
//! reclaim and the intent lease read them here; change one only with `docs/guarantees.md` in hand. A leaf: it
//! uses no other module of the crate.

use std::time::Duration;

/// How long after its due time a reclaim entry whose version is still current is kept: a commit or delete queues
/// the version it replaces just before writing, so such an entry may belong to a write that has not landed yet
/// (a stalled engine, a slow cluster). Dropping it earlier would orphan that version once the write lands. A
/// commit that lands later than half this window after queueing queues its replaced version again. Ten minutes.
pub(crate) const COMMIT_WINDOW_MICROS: u64 = 600_000_000;

/// How far behind this process's clock another client's clock may run: the low-water marks of the reclaim queue
/// and of the intent scan stay this far behind what they have seen, so that entries such a client writes are not
/// skipped. One minute.
pub(crate) const CLOCK_MARGIN_MICROS: u64 = 60_000_000;

/// How long past its lease a claimed intent stays valid: a write lands before its call returns on the backends
/// that claim (see [`takeover_hold`] for the others), and one lease (`intent_lease`) is kept as a margin.
pub(crate) fn commit_hold(intent_lease: Duration) -> Duration {
    intent_lease
}

/// How long past an intent's expiry gc waits before taking it over: on a backend whose failed or timed-out
/// writes may still land later (`late_writes`, [`crate::backend::BackendInfo::late_writes`]: a cluster, where puts do not
/// claim) the commit window ([`COMMIT_WINDOW_MICROS`]), the longest a manifest write may take to land after it
/// was issued; elsewhere nothing (the claim fences the commit).
pub(crate) fn takeover_hold(late_writes: bool) -> Duration {
    if late_writes {
        Duration::from_micros(COMMIT_WINDOW_MICROS)
    } else {
        Duration::ZERO
    }
}
