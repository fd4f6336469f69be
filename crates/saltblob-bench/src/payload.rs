//! The bench's payloads: random bytes stamped with the run, the phase and the index, so that a read can tell
//! whose bytes it got; and the [`Outcome`] of one operation, as [`check`] finds it.

use std::time::Duration;

use bytes::Bytes;

use crate::stats::Tally;

/// What one operation of a phase did.
pub(crate) enum Outcome {
    /// Succeeded, moving this many bytes.
    Done(u64),
    /// Failed.
    Failed(String),
    /// Read back something other than what was written.
    Wrong(String),
}

impl Tally {
    /// Counts `outcome`, which took `latency`.
    pub(crate) fn add(&mut self, outcome: Outcome, latency: Duration) {
        match outcome {
            Outcome::Done(bytes) => self.ok(latency, bytes),
            Outcome::Failed(m) => self.fail(m),
            Outcome::Wrong(m) => self.unverified(m),
        }
    }
}

/// Phase tags stamped into the data, so that a read can tell whose bytes it got.
pub(crate) const TAG_LARGE: u64 = 1;
pub(crate) const TAG_SMALL: u64 = 2;
pub(crate) const TAG_UNCHUNKED: u64 = 3;
pub(crate) const TAG_MIXED: u64 = 4;
pub(crate) const TAG_BACKGROUND: u64 = 5;
/// Bytes of the stamp at the start of every value.
const STAMP_LEN: usize = 16;
/// Bytes of the start of a value [`check_head`] needs.
pub(crate) const HEAD_LEN: usize = STAMP_LEN;

/// `len` random bytes.
pub(crate) fn random_bytes(len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut v);
    Bytes::from(v)
}

/// The first bytes of every value: run tag + phase tag, and the index.
fn stamp_bytes(run_tag: u64, phase: u64, index: u64) -> [u8; STAMP_LEN] {
    let mut s = [0u8; STAMP_LEN];
    let (a, b) = s.split_at_mut(8);
    a.copy_from_slice(&(run_tag | (phase << 56)).to_le_bytes());
    b.copy_from_slice(&index.to_le_bytes());
    s
}

/// A copy of `base` that starts with the stamp of (`phase`, `index`).
pub(crate) fn stamped(base: &Bytes, run_tag: u64, phase: u64, index: u64) -> Bytes {
    let mut v = base.to_vec();
    let stamp = stamp_bytes(run_tag, phase, index);
    let n = v.len().min(STAMP_LEN);
    if let (Some(dst), Some(src)) = (v.get_mut(..n), stamp.get(..n)) {
        dst.copy_from_slice(src);
    }
    Bytes::from(v)
}

/// Checks a read: its length and its stamp (its content was verified against the manifest digest by the read).
pub(crate) fn check(got: &Bytes, len: u64, run_tag: u64, phase: u64, index: u64) -> Outcome {
    check_head(got.len() as u64, got, len, run_tag, phase, index)
}

/// [`check`] of a value read as a stream: `read` bytes in all, starting with `head` (at least its first
/// [`HEAD_LEN`] bytes, or all of it when shorter).
pub(crate) fn check_head(
    read: u64,
    head: &[u8],
    len: u64,
    run_tag: u64,
    phase: u64,
    index: u64,
) -> Outcome {
    let stamp = stamp_bytes(run_tag, phase, index);
    let n = (len as usize).min(STAMP_LEN);
    if read != len {
        Outcome::Wrong(format!("read {read} bytes, {len} were written"))
    } else if head.get(..n) != stamp.get(..n) {
        Outcome::Wrong("read bytes that another write stored (stamp differs)".to_owned())
    } else {
        Outcome::Done(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_tell_writes_apart() {
        let base = random_bytes(4096);
        let a = stamped(&base, 7, TAG_LARGE, 1);
        assert!(matches!(
            check(&a, 4096, 7, TAG_LARGE, 1),
            Outcome::Done(4096)
        ));
        assert!(matches!(
            check(&a, 4096, 7, TAG_LARGE, 2),
            Outcome::Wrong(_)
        ));
        assert!(matches!(
            check(&a, 4095, 7, TAG_LARGE, 1),
            Outcome::Wrong(_)
        ));
        assert_eq!(&a[STAMP_LEN..], &base[STAMP_LEN..]);
        // Values shorter than a stamp still work.
        let tiny = stamped(&random_bytes(3), 7, TAG_SMALL, 9);
        assert!(matches!(check(&tiny, 3, 7, TAG_SMALL, 9), Outcome::Done(3)));
    }
}
