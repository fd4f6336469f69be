//! Version ids: 128-bit, time-ordered, unique per put.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// The id of one immutable version of a blob: 48 bits of Unix milliseconds followed by 80 random bits,
/// so ids sort by creation time and never collide in practice. Shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VersionId(pub u128);

impl VersionId {
    /// Draws a new id for the current system time; see [`VersionId::generate_at`].
    pub fn generate() -> Self {
        Self::generate_at(now_micros())
    }

    /// Draws a new id for the time `now_micros` (Unix µs) from the process's sequence of the system clock: ids
    /// drawn so strictly increase, also within one millisecond and when the clock steps back (the id then
    /// continues from the last one). A clock of its own (a test's clock that jumps ahead) draws from a
    /// [`VersionSequence`] of its own, so that its future times never reach the ids of the system clock.
    pub fn generate_at(now_micros: u64) -> Self {
        static SYSTEM: VersionSequence = VersionSequence::new();
        SYSTEM.draw(now_micros)
    }

    /// Unix milliseconds at which the id was drawn.
    pub fn timestamp_millis(self) -> u64 {
        // The top 48 bits always fit.
        u64::try_from(self.0 >> 80).unwrap_or(u64::MAX)
    }

    /// Little-endian bytes, as stored.
    pub fn to_le_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    /// Big-endian bytes, for storage keys that must sort by version.
    pub fn to_be_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

/// A sequence of strictly increasing version ids: each id drawn is greater than the one before, even within one
/// millisecond or when the time given steps back (the id then continues from the last one).
#[derive(Debug, Default)]
pub struct VersionSequence {
    last: std::sync::Mutex<u128>,
}

impl VersionSequence {
    /// A sequence that has drawn nothing yet.
    pub const fn new() -> Self {
        Self {
            last: std::sync::Mutex::new(0),
        }
    }

    /// Draws the next id for the time `now_micros` (Unix µs).
    pub fn draw(&self, now_micros: u64) -> VersionId {
        let millis = u128::from(now_micros / 1000) & ((1 << 48) - 1);
        let random = rand::random::<u128>() & ((1 << 80) - 1);
        let candidate = (millis << 80) | random;
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Within the same millisecond, step by a random amount so that ids stay hard to guess.
        let id = if candidate > *last {
            candidate
        } else {
            last.saturating_add(1 + (random & 0xffff))
        };
        *last = id;
        VersionId(id)
    }
}

impl fmt::Display for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for VersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VersionId({self})")
    }
}

/// A version id that does not parse: not 32 hex digits. Converts into [`crate::base::error::Error::InvalidArgument`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("\"{0}\" is not 32 hex digits")]
pub struct ParseVersionError(pub String);

impl FromStr for VersionId {
    type Err = ParseVersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 {
            return Err(ParseVersionError(s.to_owned()));
        }
        u128::from_str_radix(s, 16)
            .map(VersionId)
            .map_err(|_| ParseVersionError(s.to_owned()))
    }
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_strictly_increase_within_a_process() {
        let ids: Vec<VersionId> = (0..10_000).map(|_| VersionId::generate()).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids drawn in one millisecond still increase"
        );
    }

    #[test]
    fn ids_are_time_ordered_and_round_trip_through_hex() {
        let a = VersionId::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = VersionId::generate();
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(a.to_string().parse::<VersionId>().ok(), Some(a));
        let now_ms = now_micros() / 1000;
        assert!(now_ms.abs_diff(b.timestamp_millis()) < 10_000);
        assert!("xyz".parse::<VersionId>().is_err());
    }
}
