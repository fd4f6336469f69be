//! The layout policy (inline / one partition / salted fan-out) and the arithmetic of chunks, salts and ranges.

use std::ops::Range;

use crate::base::error::{Error, Result};
use crate::base::units::{KIB, MIB, parse_size};
use crate::format::codec::Codec;

/// Smallest accepted chunk size: 4 KiB, the physical sector of common devices.
pub const MIN_CHUNK_SIZE: u32 = 4096;
/// Largest accepted salt count: 2^20, enough to keep every chunk partition within the smallest accepted
/// [`LayoutPolicy::max_partition_bytes`] up to blobs of 16 TiB (128 TiB at the default). Builds before 2026-12-03
/// took at most 65 536 and refuse a manifest with more (only a blob over 8 TiB has more).
pub const MAX_SALT_LIMIT: u32 = 1 << 20;
/// The bound on a chunk partition a cluster store asks for ([`LayoutPolicy::max_partition_bytes`]): 128 MiB
/// (Cassandra warns about partitions from 100 MB).
pub const DEFAULT_MAX_PARTITION_BYTES: u64 = 128 * MIB;
/// Smallest accepted [`LayoutPolicy::max_partition_bytes`]: 16 MiB.
pub const MIN_MAX_PARTITION_BYTES: u64 = 16 * MIB;
/// The length a stream of unknown length is laid out for when the store sets no largest blob size
/// ([`crate::state::config::StoreConfig::max_blob_size`]): 1 TiB. A longer stream's partitions grow past
/// [`LayoutPolicy::max_partition_bytes`]; give its length ([`crate::state::config::PutOptions::size_hint`]) to
/// avoid that.
pub const STREAM_PLAN_BYTES: u64 = 1 << 40;
/// Largest chunk size any backend takes (the embedded store's chunks are at most 64 MiB, header included). A
/// stored layout with a larger chunk is corrupt on every backend.
pub const MAX_CHUNK_SIZE: u32 = 64 << 20;
/// Largest accepted inline limit: an inline value lives in one manifest record.
pub const MAX_INLINE_LIMIT: u64 = MIB;

/// How a blob of a given size is laid out. Every field has a documented default; all are configurable per
/// store, and the chunk size, `max_salt` and `codec` may be overridden per put.
///
/// The chunk size depends on the blob's size: blobs up to the fan-out threshold use `chunk_size` (small rows
/// keep ranged reads cheap), larger ones (and streams longer than a put's look-ahead) use `large_chunk_size`,
/// where a backend with a high per-row cost (a cluster) gets bigger rows. Each manifest records its chunk
/// size, so changing either never affects stored blobs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct LayoutPolicy {
    /// Blobs of at most this many bytes are stored inside their manifest. Defaults to 16 KiB.
    pub inline_limit: u64,
    /// Chunked blobs of at most this many bytes use one partition (salt count 1). Defaults to 8 MiB.
    pub fanout_threshold: u64,
    /// Bytes per chunk of blobs up to the fan-out threshold. Defaults to 64 KiB.
    pub chunk_size: u32,
    /// Bytes per chunk of blobs above the fan-out threshold. `None` (the default) means the backend's preference
    /// ([`crate::backend::BackendInfo::large_chunk_size`]; 1 MiB on CQL) if it is larger than `chunk_size`, else
    /// `chunk_size`; a store resolves it when it opens ([`LayoutPolicy::resolve_for`]).
    pub large_chunk_size: Option<u32>,
    /// Salt count of blobs above the fan-out threshold (each chunk its own partition below it). Defaults to 100.
    /// Larger blobs get more salts when [`LayoutPolicy::max_partition_bytes`] needs them.
    pub max_salt: u32,
    /// Most bytes one chunk partition holds: the salt count grows with the blob, past
    /// [`LayoutPolicy::max_salt`], so that no partition holds more (a cluster compacts, repairs and streams a
    /// partition whole). `None` (the default) means the backend's bound
    /// ([`crate::backend::BackendInfo::max_partition_bytes`]: [`DEFAULT_MAX_PARTITION_BYTES`] on CQL, none
    /// embedded), resolved when a store opens ([`LayoutPolicy::resolve_for`]); still `None` then, no bound. At
    /// least [`MIN_MAX_PARTITION_BYTES`] and a chunk of every size the policy uses.
    pub max_partition_bytes: Option<u64>,
    /// Compression tried on each chunk (kept only where it shrinks the chunk). Defaults to none.
    pub codec: Codec,
}

impl Default for LayoutPolicy {
    fn default() -> Self {
        Self {
            inline_limit: 16 * KIB,
            fanout_threshold: 8 * MIB,
            chunk_size: 64 * 1024,
            large_chunk_size: None,
            max_salt: 100,
            max_partition_bytes: None,
            codec: Codec::None,
        }
    }
}

impl LayoutPolicy {
    /// Sets [`LayoutPolicy::inline_limit`].
    pub fn with_inline_limit(mut self, bytes: u64) -> Self {
        self.inline_limit = bytes;
        self
    }

    /// Sets [`LayoutPolicy::fanout_threshold`].
    pub fn with_fanout_threshold(mut self, bytes: u64) -> Self {
        self.fanout_threshold = bytes;
        self
    }

    /// Sets [`LayoutPolicy::chunk_size`].
    pub fn with_chunk_size(mut self, bytes: u32) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// Sets [`LayoutPolicy::large_chunk_size`].
    pub fn with_large_chunk_size(mut self, bytes: u32) -> Self {
        self.large_chunk_size = Some(bytes);
        self
    }

    /// Sets both chunk sizes ([`LayoutPolicy::chunk_size`] and [`LayoutPolicy::large_chunk_size`]): one chunk size
    /// for blobs of every size, as a per-put chunk size override does.
    pub fn with_single_chunk_size(self, bytes: u32) -> Self {
        self.with_chunk_size(bytes).with_large_chunk_size(bytes)
    }

    /// The policy a store uses on a backend that prefers `preferred` bytes per large chunk
    /// ([`crate::backend::BackendInfo::large_chunk_size`]) and bounds partitions to `partition_bytes`
    /// ([`crate::backend::BackendInfo::max_partition_bytes`]): an unset [`LayoutPolicy::large_chunk_size`] becomes
    /// that preference when it is larger than [`LayoutPolicy::chunk_size`], else `chunk_size`; an unset
    /// [`LayoutPolicy::max_partition_bytes`] becomes the backend's bound.
    pub fn resolve_for(mut self, preferred: Option<u32>, partition_bytes: Option<u64>) -> Self {
        if self.large_chunk_size.is_none() {
            let preferred = preferred.unwrap_or(0);
            self.large_chunk_size = Some(self.chunk_size.max(preferred));
        }
        if self.max_partition_bytes.is_none() {
            self.max_partition_bytes = partition_bytes;
        }
        self
    }

    /// Sets [`LayoutPolicy::max_partition_bytes`].
    pub fn with_max_partition_bytes(mut self, bytes: u64) -> Self {
        self.max_partition_bytes = Some(bytes);
        self
    }

    /// Applies one store URL parameter if it is a layout one (`chunk_size=SIZE`, `large_chunk_size=SIZE`,
    /// `max_partition=SIZE`, sizes as
    /// [`crate::base::units::parse_size`] reads them); returns whether it was. Values are checked against fixed bounds by
    /// [`LayoutPolicy::validate`] when the store opens.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameter when the value is not a size or is 4 GiB or more.
    pub fn apply_url_param(&mut self, name: &str, value: &str) -> Result<bool> {
        let size = |what: &'static str| {
            let bytes = parse_size(value).map_err(|e| Error::invalid(what, e))?;
            u32::try_from(bytes).map_err(|_| {
                Error::invalid(
                    what,
                    format!("{value} is over the {MAX_CHUNK_SIZE}-byte limit"),
                )
            })
        };
        match name {
            "max_partition" => {
                self.max_partition_bytes =
                    Some(parse_size(value).map_err(|e| Error::invalid("max_partition", e))?);
            }
            "chunk_size" => self.chunk_size = size("chunk_size")?,
            "large_chunk_size" => self.large_chunk_size = Some(size("large_chunk_size")?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Sets [`LayoutPolicy::max_salt`].
    pub fn with_max_salt(mut self, salts: u32) -> Self {
        self.max_salt = salts;
        self
    }

    /// Sets [`LayoutPolicy::codec`].
    pub fn with_codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// Checks every field against fixed bounds and the backend's largest chunk.
    pub fn validate(&self, max_chunk_bytes: u32) -> Result<()> {
        let chunk_sizes = [
            ("chunk size", Some(self.chunk_size)),
            ("large chunk size", self.large_chunk_size),
        ];
        for (what, bytes) in chunk_sizes {
            if let Some(bytes) = bytes
                && !(MIN_CHUNK_SIZE..=max_chunk_bytes).contains(&bytes)
            {
                return Err(Error::invalid(
                    what,
                    format!(
                        "{bytes} bytes; it must be between {MIN_CHUNK_SIZE} and {max_chunk_bytes} bytes (the backend's largest chunk)"
                    ),
                ));
            }
        }
        if self.max_salt == 0 || self.max_salt > MAX_SALT_LIMIT {
            return Err(Error::invalid(
                "max salt",
                format!(
                    "{}; it must be between 1 and {MAX_SALT_LIMIT}",
                    self.max_salt
                ),
            ));
        }
        let largest_chunk = self.chunk_size.max(self.large_chunk_size.unwrap_or(0));
        if let Some(bound) = self.max_partition_bytes
            && (bound < MIN_MAX_PARTITION_BYTES || bound < u64::from(largest_chunk))
        {
            return Err(Error::invalid(
                "max partition",
                format!(
                    "{bound} bytes; it must be at least {MIN_MAX_PARTITION_BYTES} bytes and hold a chunk ({largest_chunk} bytes)"
                ),
            ));
        }
        if self.inline_limit > MAX_INLINE_LIMIT {
            return Err(Error::invalid(
                "inline limit",
                format!(
                    "{} bytes; it must be at most {MAX_INLINE_LIMIT} bytes",
                    self.inline_limit
                ),
            ));
        }
        Ok(())
    }

    /// The chunk size of a chunked blob of `size` bytes, or, for `None`, of a stream known only to be longer
    /// than a put's look-ahead (laid out as a large blob): [`LayoutPolicy::large_chunk_size`] above the fan-out
    /// threshold, else [`LayoutPolicy::chunk_size`].
    pub fn chunk_size_for(&self, size: Option<u64>) -> u32 {
        match size {
            Some(size) if size <= self.fanout_threshold => self.chunk_size,
            _ => self.large_chunk_size.unwrap_or(self.chunk_size),
        }
    }

    /// The layout for a blob of exactly `size` bytes.
    pub fn layout_for(&self, size: u64) -> Layout {
        if size <= self.inline_limit {
            return Layout::Inline;
        }
        let chunk_size = self.chunk_size_for(Some(size));
        let chunk_count = size.div_ceil(u64::from(chunk_size.max(1)));
        let spread = if size <= self.fanout_threshold {
            1
        } else {
            u64::from(self.max_salt)
        };
        let salt_count = spread
            .max(self.salts_to_bound(chunk_size, chunk_count))
            .min(chunk_count)
            .min(u64::from(MAX_SALT_LIMIT));
        Layout::Chunked(ChunkLayout {
            chunk_size,
            chunk_count,
            // At most MAX_SALT_LIMIT.
            salt_count: u32::try_from(salt_count).unwrap_or(MAX_SALT_LIMIT),
        })
    }

    /// The salt count a put plans for a stream of unknown length that may grow to `ceiling` bytes (laid out as
    /// a large blob): [`LayoutPolicy::max_salt`], or more where [`LayoutPolicy::max_partition_bytes`] needs more
    /// at `ceiling`. Its manifest then records the lesser of this and its chunk count; chunk `i` is in salt
    /// `i % planned`, which is the same salt.
    pub fn stream_salt_count(&self, ceiling: u64) -> u32 {
        let chunk_size = self.chunk_size_for(None);
        let chunk_count = ceiling.div_ceil(u64::from(chunk_size.max(1)));
        let salts = u64::from(self.max_salt)
            .max(self.salts_to_bound(chunk_size, chunk_count))
            .clamp(1, u64::from(MAX_SALT_LIMIT));
        u32::try_from(salts).unwrap_or(MAX_SALT_LIMIT)
    }

    /// The fewest salts that keep `chunk_count` chunks of `chunk_size` within
    /// [`LayoutPolicy::max_partition_bytes`] each (at least one chunk per salt); 0 without a bound.
    fn salts_to_bound(&self, chunk_size: u32, chunk_count: u64) -> u64 {
        let Some(bound) = self.max_partition_bytes else {
            return 0;
        };
        let per_salt = (bound / u64::from(chunk_size.max(1))).max(1);
        chunk_count.div_ceil(per_salt)
    }
}

/// How one blob is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Inside the manifest.
    Inline,
    /// In chunks.
    Chunked(ChunkLayout),
}

/// The geometry of a chunked blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLayout {
    /// Bytes per chunk (the last may be shorter).
    pub chunk_size: u32,
    /// Number of chunks, at least 1.
    pub chunk_count: u64,
    /// Number of partitions the chunks are spread over, `1..=chunk_count`.
    pub salt_count: u32,
}

impl ChunkLayout {
    /// The salt (partition) of chunk `index`: `index % salt_count`.
    pub fn salt_of(&self, index: u64) -> u32 {
        // The remainder is below salt_count, so it fits.
        u32::try_from(index % u64::from(self.salt_count.max(1))).unwrap_or(0)
    }

    /// The byte range of the blob that chunk `index` holds, for a blob of `size` bytes.
    pub fn chunk_span(&self, index: u64, size: u64) -> Range<u64> {
        let start = index.saturating_mul(u64::from(self.chunk_size)).min(size);
        start..start.saturating_add(u64::from(self.chunk_size)).min(size)
    }

    /// The chunks holding bytes `range` (half-open, within the blob); empty for an empty range.
    pub fn chunks_covering(&self, range: &Range<u64>) -> Range<u64> {
        if range.is_empty() {
            return 0..0;
        }
        let cs = u64::from(self.chunk_size.max(1));
        range.start / cs..(range.end - 1) / cs + 1
    }

    /// The most bytes one salt (partition) holds: the chunks of the fullest salt, whole.
    pub fn max_partition_bytes(&self) -> u64 {
        self.chunk_count
            .div_ceil(u64::from(self.salt_count.max(1)))
            .saturating_mul(u64::from(self.chunk_size))
    }

    /// Logical bytes stored under each salt, for a blob of `size` bytes.
    pub fn bytes_per_salt(&self, size: u64) -> Vec<u64> {
        let cs = u64::from(self.chunk_size);
        let salts = u64::from(self.salt_count.max(1));
        (0..salts)
            .map(|salt| {
                // Chunks salt, salt + S, salt + 2S, ... below chunk_count.
                let full_chunks = size / cs;
                let n = if salt < self.chunk_count {
                    (self.chunk_count - 1 - salt) / salts + 1
                } else {
                    0
                };
                let mut bytes = n * cs;
                let last = self.chunk_count.saturating_sub(1);
                if n > 0 && last % salts == salt && full_chunks < self.chunk_count {
                    bytes -= cs - (size - full_chunks * cs);
                }
                bytes
            })
            .collect()
    }
}

/// A byte range of a blob in the three forms of HTTP's `Range: bytes=` header, resolved against the size of
/// the version read, so that a read of `From` or `Suffix` needs no separate size lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRange {
    /// Bytes `start..end` (half-open).
    Bounded {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// From byte `start` to the end of the blob.
    From(u64),
    /// The last `n` bytes of the blob (all of it if it is shorter).
    Suffix(u64),
}

impl ByteRange {
    /// The half-open range these bytes are in a blob of `size` bytes. It may lie outside the blob (a read
    /// reports that as [`crate::base::error::Error::RangeNotSatisfiable`]); `From` past the end resolves to an empty range
    /// starting there.
    pub fn resolve(self, size: u64) -> std::ops::Range<u64> {
        match self {
            ByteRange::Bounded { start, end } => start..end,
            ByteRange::From(start) => start..size.max(start),
            ByteRange::Suffix(n) => size.saturating_sub(n)..size,
        }
    }
}

impl From<std::ops::Range<u64>> for ByteRange {
    fn from(r: std::ops::Range<u64>) -> Self {
        ByteRange::Bounded {
            start: r.start,
            end: r.end,
        }
    }
}

impl From<std::ops::RangeFrom<u64>> for ByteRange {
    fn from(r: std::ops::RangeFrom<u64>) -> Self {
        ByteRange::From(r.start)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::backend::BackendInfo;

    #[test]
    fn default_policy_matches_the_design() {
        let p = LayoutPolicy::default();
        assert_eq!(p.layout_for(0), Layout::Inline);
        assert_eq!(p.layout_for(16 * KIB), Layout::Inline);
        assert_eq!(
            p.layout_for(16 * KIB + 1),
            Layout::Chunked(ChunkLayout {
                chunk_size: 65536,
                chunk_count: 1,
                salt_count: 1
            })
        );
        assert_eq!(
            p.layout_for(8 * MIB),
            Layout::Chunked(ChunkLayout {
                chunk_size: 65536,
                chunk_count: 128,
                salt_count: 1
            })
        );
        assert_eq!(
            p.layout_for(8 * MIB + 1),
            Layout::Chunked(ChunkLayout {
                chunk_size: 65536,
                chunk_count: 129,
                salt_count: 100
            })
        );
        assert_eq!(
            p.clone().with_max_salt(1000).layout_for(60 * MIB),
            Layout::Chunked(ChunkLayout {
                chunk_size: 65536,
                chunk_count: 960,
                salt_count: 960
            })
        );
    }

    #[test]
    fn validate_rejects_out_of_range_values() {
        let p = LayoutPolicy::default();
        assert!(p.validate(1 << 20).is_ok());
        assert!(p.clone().with_chunk_size(0).validate(1 << 20).is_err());
        assert!(
            p.clone()
                .with_chunk_size(2 << 20)
                .validate(1 << 20)
                .is_err()
        );
        assert!(p.clone().with_max_salt(0).validate(1 << 20).is_err());
        for bad in [0, 4095, 2 << 20] {
            let err = p
                .clone()
                .with_large_chunk_size(bad)
                .validate(1 << 20)
                .map_err(|e| e.to_string());
            let err = err.expect_err("a large chunk size out of bounds");
            assert!(err.contains("large chunk size"), "{err}");
        }
        assert!(p.with_inline_limit(2 * MIB).validate(1 << 20).is_err());
    }

    fn chunked(chunk_size: u32, chunk_count: u64, salt_count: u32) -> Layout {
        Layout::Chunked(ChunkLayout {
            chunk_size,
            chunk_count,
            salt_count,
        })
    }

    #[test]
    fn blobs_above_the_fanout_threshold_take_the_large_chunk_size() {
        let p = LayoutPolicy::default().with_large_chunk_size(MIB as u32);
        assert_eq!(p.layout_for(20 * KIB), chunked(65536, 1, 1));
        assert_eq!(p.layout_for(8 * MIB), chunked(65536, 128, 1));
        assert_eq!(p.layout_for(8 * MIB + 1), chunked(1 << 20, 9, 9));
        assert_eq!(p.layout_for(60 * MIB), chunked(1 << 20, 60, 60));
        assert_eq!(p.layout_for(200 * MIB), chunked(1 << 20, 200, 100));
        // A stream known only to be longer than the look-ahead is laid out as a large blob.
        assert_eq!(p.chunk_size_for(None), 1 << 20);
        assert_eq!(p.chunk_size_for(Some(8 * MIB)), 65536);
        // Unresolved, or with one chunk size for all, every blob takes `chunk_size`.
        let plain = LayoutPolicy::default();
        assert_eq!(plain.chunk_size_for(None), 65536);
        assert_eq!(plain.layout_for(60 * MIB), chunked(65536, 960, 100));
        let single = p.with_single_chunk_size(8192);
        assert_eq!(single.layout_for(60 * MIB), chunked(8192, 7680, 100));
    }

    #[test]
    fn an_unset_large_chunk_size_resolves_to_the_backends_preference_when_larger() {
        let plain = BackendInfo::new("plain", 64 << 20, 8 << 20, true);
        let cluster = plain.clone().with_large_chunk_size(MIB as u32);
        let p = LayoutPolicy::default();
        let large = |p: LayoutPolicy, info: &BackendInfo| {
            p.resolve_for(info.large_chunk_size, info.max_partition_bytes)
                .large_chunk_size
        };
        assert_eq!(large(p.clone(), &plain), Some(65536));
        assert_eq!(large(p.clone(), &cluster), Some(1 << 20));
        assert_eq!(
            large(p.clone().with_chunk_size(4 << 20), &cluster),
            Some(4 << 20)
        );
        assert_eq!(
            large(p.with_large_chunk_size(256 << 10), &cluster),
            Some(256 << 10)
        );
    }

    #[test]
    fn chunk_sizes_are_read_from_url_parameters() {
        let mut p = LayoutPolicy::default();
        assert_eq!(p.apply_url_param("chunk_size", "128KiB").ok(), Some(true));
        assert_eq!(p.apply_url_param("large_chunk_size", "4m").ok(), Some(true));
        assert_eq!(p.apply_url_param("sync", "true").ok(), Some(false));
        assert_eq!(
            (p.chunk_size, p.large_chunk_size),
            (128 << 10, Some(4 << 20))
        );
        for (value, needle) in [("lots", "not a size"), ("8GiB", "over the")] {
            let err = p
                .apply_url_param("large_chunk_size", value)
                .map(|_| ())
                .map_err(|e| e.to_string());
            let err = err.expect_err(value);
            assert!(
                err.contains("large_chunk_size") && err.contains(needle),
                "{err}"
            );
        }
    }

    proptest! {
        #[test]
        fn chunks_cover_exactly_the_range(size in 1u64..10_000_000, cs in 4096u32..300_000, a in any::<u64>(), b in any::<u64>()) {
            let (x, y) = (a % size, b % size);
            let range = x.min(y)..x.max(y) + 1;
            let layout = ChunkLayout { chunk_size: cs, chunk_count: size.div_ceil(u64::from(cs)), salt_count: 7 };
            let chunks = layout.chunks_covering(&range);
            prop_assert!(chunks.start < chunks.end && chunks.end <= layout.chunk_count);
            // The first and last chunks hold the range's ends; the chunks around them do not.
            prop_assert!(layout.chunk_span(chunks.start, size).contains(&range.start));
            prop_assert!(layout.chunk_span(chunks.end - 1, size).contains(&(range.end - 1)));
            if chunks.start > 0 {
                prop_assert!(layout.chunk_span(chunks.start - 1, size).end <= range.start);
            }
            prop_assert!(layout.chunk_span(chunks.end, size).start >= range.end);
        }

        #[test]
        fn spans_tile_the_blob_and_salts_balance(size in 1u64..5_000_000, cs in 4096u32..100_000, salts in 1u32..200) {
            let n = size.div_ceil(u64::from(cs));
            let layout = ChunkLayout { chunk_size: cs, chunk_count: n, salt_count: salts.min(u32::try_from(n).unwrap_or(u32::MAX)) };
            let mut next = 0;
            let mut per_salt = vec![0u64; layout.salt_count as usize];
            for i in 0..n {
                let span = layout.chunk_span(i, size);
                prop_assert_eq!(span.start, next);
                prop_assert!(!span.is_empty());
                next = span.end;
                let salt = layout.salt_of(i);
                prop_assert!(salt < layout.salt_count);
                per_salt[salt as usize] += span.end - span.start;
            }
            prop_assert_eq!(next, size);
            prop_assert_eq!(layout.bytes_per_salt(size), per_salt.clone());
            let (min, max) = (per_salt.iter().min().copied().unwrap_or(0), per_salt.iter().max().copied().unwrap_or(0));
            prop_assert!(max - min <= u64::from(cs), "salts differ by more than one chunk: {min}..{max}");
        }

        #[test]
        fn no_partition_exceeds_the_bound_up_to_10_tb(
            size in 1u64..=10_000_000_000_000,
            chunk_shift in 12u32..=26,
            cap_shift in 24u32..=30,
            max_salt in 1u32..=1000,
            fanout_shift in 20u32..=26,
        ) {
            let chunk = 1u32 << chunk_shift;
            let p = LayoutPolicy::default()
                .with_single_chunk_size(chunk)
                .with_max_salt(max_salt)
                .with_fanout_threshold(1 << fanout_shift)
                .with_max_partition_bytes(1 << cap_shift);
            prop_assume!(p.validate(MAX_CHUNK_SIZE).is_ok());
            if let Layout::Chunked(l) = p.layout_for(size) {
                prop_assert!(l.max_partition_bytes() <= 1 << cap_shift, "{l:?}");
                prop_assert!(1 <= l.salt_count && u64::from(l.salt_count) <= l.chunk_count);
                if size > p.fanout_threshold {
                    prop_assert!(u64::from(l.salt_count) >= l.chunk_count.min(u64::from(max_salt)));
                }
                // A stream of this size, planned for 10 TB, is bounded too.
                let planned = p.stream_salt_count(10_000_000_000_000);
                let streamed = ChunkLayout {
                    salt_count: u32::try_from(u64::from(planned).min(l.chunk_count)).unwrap_or(planned),
                    ..l
                };
                prop_assert!(streamed.max_partition_bytes() <= 1 << cap_shift, "{streamed:?}");
            }
        }

        #[test]
        fn planned_salt_places_chunks_where_the_final_salt_count_says(planned in 1u32..300, n in 1u64..1000) {
            // A put places chunks by the salt count it planned; its manifest records fewer salts when there are
            // fewer chunks.
            let final_salt = u32::try_from(u64::from(planned).min(n)).unwrap_or(planned);
            let at = |salt_count| ChunkLayout { chunk_size: MIN_CHUNK_SIZE, chunk_count: n, salt_count };
            for i in 0..n {
                prop_assert_eq!(at(planned).salt_of(i), at(final_salt).salt_of(i));
            }
        }
    }

    #[test]
    fn the_salt_count_grows_with_the_blob_to_bound_its_partitions() {
        let unbounded = LayoutPolicy::default().with_large_chunk_size(MIB as u32);
        assert_eq!(
            unbounded.layout_for(1 << 40),
            chunked(1 << 20, 1 << 20, 100),
            "no bound unless the backend or the store asks for one"
        );
        assert_eq!(unbounded.stream_salt_count(STREAM_PLAN_BYTES), 100);
        let p = unbounded.resolve_for(None, Some(DEFAULT_MAX_PARTITION_BYTES));
        // Up to max_salt × 128 MiB (12.5 GiB), the policy as before; past it, salts grow with the blob.
        let l = |size: u64| match p.layout_for(size) {
            Layout::Chunked(l) => l,
            Layout::Inline => panic!("inline"),
        };
        assert_eq!(l(10 << 30).salt_count, 100);
        assert!(l(10 << 30).max_partition_bytes() <= 128 * MIB);
        assert_eq!(l(1 << 40).salt_count, 8192);
        assert_eq!(l(1 << 40).max_partition_bytes(), 128 * MIB);
        assert_eq!(l(10u64.pow(13)).salt_count, 74_506);
        // A stream of unknown length is planned for 1 TiB (or the store's largest blob).
        assert_eq!(p.stream_salt_count(STREAM_PLAN_BYTES), 8192);
        assert_eq!(p.stream_salt_count(MIB), 100);
        let small = p.clone().with_max_partition_bytes(16 * MIB);
        assert_eq!(small.stream_salt_count(1 << 40), 65_536);
        // Bounds: at least 16 MiB, and a chunk.
        assert!(
            p.clone()
                .with_max_partition_bytes(8 * MIB)
                .validate(64 << 20)
                .is_err()
        );
        let err = p
            .clone()
            .with_large_chunk_size(32 << 20)
            .with_max_partition_bytes(16 * MIB)
            .validate(64 << 20)
            .map_err(|e| e.to_string())
            .expect_err("a chunk larger than a partition");
        assert!(err.contains("max partition"), "{err}");
        let mut q = LayoutPolicy::default();
        assert_eq!(
            q.apply_url_param("max_partition", "256MiB").ok(),
            Some(true)
        );
        assert_eq!(q.max_partition_bytes, Some(256 * MIB));
        // The store's own bound wins over the backend's.
        assert_eq!(
            q.resolve_for(None, Some(DEFAULT_MAX_PARTITION_BYTES))
                .max_partition_bytes,
            Some(256 * MIB)
        );
    }

    #[test]
    fn byte_ranges_resolve_against_the_size() {
        assert_eq!(ByteRange::from(3..7).resolve(5), 3..7);
        assert_eq!(ByteRange::from(3..).resolve(10), 3..10);
        assert_eq!(ByteRange::From(12).resolve(10), 12..12);
        assert_eq!(ByteRange::Suffix(4).resolve(10), 6..10);
        assert_eq!(ByteRange::Suffix(40).resolve(10), 0..10);
        assert_eq!(ByteRange::Suffix(0).resolve(10), 10..10);
    }
}
