//! Self-describing values: every value a workload writes says which key, writer and sequence number it
//! belongs to, and its body is regenerable from those, so a reader can tell a whole value from a torn, mixed
//! or foreign one without any side table.
//!
//! # Format
//! A value of `len` bytes is the first `len` bytes of a deterministic stream seeded by (key, writer, seq)
//! (byte `i` of the stream is byte `i % 8` of the little-endian 64-bit word `i / 8`, each word a splitmix64
//! output of its index, so any offset is regenerable on its own). When the value is at least
//! [`header_len`]`(key)` bytes long, the stream's first bytes are replaced by a header:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `SBCK` |
//! | 1 | format, `1` |
//! | 2 | key length, u16 LE |
//! | key length | the key |
//! | 8 | writer, u64 LE |
//! | 8 | seq, u64 LE |
//! | 8 | total length of the value, u64 LE |
//!
//! Shorter values carry no header (a 0-byte value is the same for every put); the checker identifies them
//! by comparing their raw bytes with the values of the puts of that key and length.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The first bytes of every value that carries a header.
pub const MAGIC: &[u8; 4] = b"SBCK";
/// The format byte that follows the magic.
pub const FORMAT: u8 = 1;
/// Length of a header without its key: magic, format, key length, writer, seq, total length.
pub const HEADER_FIXED_LEN: usize = 4 + 1 + 2 + 8 + 8 + 8;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// Who wrote a value: `writer` is random per client (unique across processes in practice), `seq` counts
/// that writer's operations. Together they identify one put.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub struct ValueId {
    /// Random id of the writing client.
    pub writer: u64,
    /// The writer's counter.
    pub seq: u64,
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}.{}", self.writer, self.seq)
    }
}

/// What [`verify`] makes of a value read under a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Identified {
    /// A whole value with a valid header for this key, its announced length and an intact body.
    Whole(ValueId),
    /// Too short to carry a header (this many bytes): to be matched against the puts of that length.
    Small(u64),
    /// Not a value any put could have written under this key: bad magic or format, another key, another
    /// length than announced, or a body differing from the regenerated one (torn, mixed or damaged).
    Torn {
        /// What is wrong, with the offset of the first differing byte where there is one.
        reason: String,
    },
}

/// The header length of values of `key`, or `None` when the key is too long to be described in a header
/// (over 65535 bytes; such values all follow the small-value rule).
pub fn header_len(key: &[u8]) -> Option<usize> {
    u16::try_from(key.len())
        .ok()
        .map(|k| HEADER_FIXED_LEN + usize::from(k))
}

/// The seed of the body stream of the value `id` of `key`.
fn seed(key: &[u8], id: ValueId) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&(key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(&id.writer.to_le_bytes());
    h.update(&id.seq.to_le_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// Word `index` of the stream seeded by `seed` (splitmix64 of the counter).
#[inline]
fn word(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline]
fn stream_byte(seed: u64, offset: u64) -> u8 {
    word(seed, offset / 8).to_le_bytes()[(offset % 8) as usize]
}

/// Fills `out` with the stream bytes starting at absolute offset `start`.
fn fill_stream(seed: u64, start: u64, out: &mut [u8]) {
    let mut pos = 0usize;
    let mut offset = start;
    while !offset.is_multiple_of(8) && pos < out.len() {
        out[pos] = stream_byte(seed, offset);
        pos += 1;
        offset += 1;
    }
    let mut index = offset / 8;
    let mut words = out[pos..].chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&word(seed, index).to_le_bytes());
        index += 1;
    }
    let tail = words.into_remainder();
    let base = index * 8;
    for (i, b) in tail.iter_mut().enumerate() {
        *b = stream_byte(seed, base + i as u64);
    }
}

/// Index within `data` of the first byte differing from the stream at absolute offset `start`.
fn first_mismatch(seed: u64, start: u64, data: &[u8]) -> Option<usize> {
    let mut pos = 0usize;
    let mut offset = start;
    while !offset.is_multiple_of(8) && pos < data.len() {
        if data[pos] != stream_byte(seed, offset) {
            return Some(pos);
        }
        pos += 1;
        offset += 1;
    }
    let aligned = pos;
    let mut index = offset / 8;
    let mut words = data[aligned..].chunks_exact(8);
    for (n, w) in (&mut words).enumerate() {
        let expected = word(seed, index).to_le_bytes();
        if w != expected {
            let within = w.iter().zip(expected).position(|(a, b)| *a != b);
            return Some(aligned + n * 8 + within.unwrap_or(0));
        }
        index += 1;
    }
    let tail = words.remainder();
    let base_pos = data.len() - tail.len();
    let base = index * 8;
    tail.iter()
        .enumerate()
        .find(|(i, b)| **b != stream_byte(seed, base + *i as u64))
        .map(|(i, _)| base_pos + i)
}

fn encode_header(key: &[u8], id: ValueId, len: u64, out: &mut [u8]) {
    let k = key.len();
    out[..4].copy_from_slice(MAGIC);
    out[4] = FORMAT;
    out[5..7].copy_from_slice(&(k as u16).to_le_bytes());
    out[7..7 + k].copy_from_slice(key);
    out[7 + k..15 + k].copy_from_slice(&id.writer.to_le_bytes());
    out[15 + k..23 + k].copy_from_slice(&id.seq.to_le_bytes());
    out[23 + k..31 + k].copy_from_slice(&len.to_le_bytes());
}

/// The value `id` of `key`, `len` bytes long: a header and a regenerable body when `len` is at least
/// [`header_len`]`(key)`, else the first `len` bytes of the body stream. Deterministic in its arguments.
pub fn generate(key: &[u8], id: ValueId, len: usize) -> Bytes {
    let seed = seed(key, id);
    let mut buf = vec![0u8; len];
    fill_stream(seed, 0, &mut buf);
    if let Some(h) = header_len(key)
        && len >= h
    {
        encode_header(key, id, len as u64, &mut buf[..h]);
    }
    Bytes::from(buf)
}

/// Identifies a value read under `key` (see [`Identified`]).
pub fn verify(key: &[u8], bytes: &[u8]) -> Identified {
    let mut v = StreamVerifier::new(key);
    v.update(bytes);
    v.finish()
}

/// Verifies a value given piece by piece (e.g. the chunks of a `BlobStream`) in constant memory: the same
/// verdict as [`verify`] on the concatenation of the pieces.
#[derive(Debug, Clone)]
pub struct StreamVerifier {
    key: Vec<u8>,
    header_len: Option<usize>,
    /// The bytes seen while the header is incomplete (all of them for a small value).
    head: Vec<u8>,
    /// (id, announced total length, body seed) once the header is parsed.
    parsed: Option<(ValueId, u64, u64)>,
    offset: u64,
    error: Option<String>,
}

impl StreamVerifier {
    /// A verifier for a value read under `key`.
    pub fn new(key: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            header_len: header_len(key),
            head: Vec::new(),
            parsed: None,
            offset: 0,
            error: None,
        }
    }

    /// Feeds the next piece of the value.
    pub fn update(&mut self, mut data: &[u8]) {
        if self.error.is_some() {
            self.offset += data.len() as u64;
            return;
        }
        if self.parsed.is_none() {
            let want = match self.header_len {
                Some(h) => (h - self.head.len()).min(data.len()),
                None => data.len(),
            };
            self.head.extend_from_slice(&data[..want]);
            self.offset += want as u64;
            data = &data[want..];
            if self.header_len != Some(self.head.len()) {
                return;
            }
            match self.parse_header() {
                Ok(p) => self.parsed = Some(p),
                Err(reason) => {
                    self.error = Some(reason);
                    self.offset += data.len() as u64;
                    return;
                }
            }
        }
        let Some((id, total, seed)) = self.parsed else {
            return;
        };
        let end = self.offset + data.len() as u64;
        if end > total {
            self.error = Some(format!(
                "value {id} holds more than the {total} bytes its header announces"
            ));
        } else if let Some(at) = first_mismatch(seed, self.offset, data) {
            self.error = Some(format!(
                "body of value {id} ({total} bytes) differs from the written one at byte {}",
                self.offset + at as u64
            ));
        }
        self.offset = end;
    }

    fn parse_header(&self) -> Result<(ValueId, u64, u64), String> {
        let h = &self.head;
        let k = self.key.len();
        if &h[..4] != MAGIC {
            return Err(format!(
                "bad magic {:02x?} in a {}+ byte value",
                &h[..4],
                h.len()
            ));
        }
        if h[4] != FORMAT {
            return Err(format!("unknown format byte {}", h[4]));
        }
        let key_len = usize::from(u16::from_le_bytes([h[5], h[6]]));
        if key_len != k || &h[7..7 + k] != self.key.as_slice() {
            let shown = h.get(7..7 + key_len.min(k)).unwrap_or_default();
            return Err(format!(
                "value of another key ({key_len} bytes, starting {:?})",
                String::from_utf8_lossy(shown)
            ));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let id = ValueId {
            writer: u64_at(7 + k),
            seq: u64_at(15 + k),
        };
        let total = u64_at(23 + k);
        if total < h.len() as u64 {
            return Err(format!(
                "value {id} announces {total} bytes, shorter than its own header"
            ));
        }
        Ok((id, total, seed(&self.key, id)))
    }

    /// The raw bytes of a value too short to carry a header (`None` once a header was seen).
    pub fn small_bytes(&self) -> Option<&[u8]> {
        (self.parsed.is_none() && self.error.is_none()).then_some(self.head.as_slice())
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.offset
    }

    /// Whether no byte was fed yet.
    pub fn is_empty(&self) -> bool {
        self.offset == 0
    }

    /// The verdict on everything fed.
    pub fn finish(&self) -> Identified {
        if let Some(reason) = &self.error {
            return Identified::Torn {
                reason: reason.clone(),
            };
        }
        match self.parsed {
            None => Identified::Small(self.offset),
            Some((id, total, _)) if self.offset != total => Identified::Torn {
                reason: format!(
                    "value {id} holds {} bytes, its header announces {total}",
                    self.offset
                ),
            },
            Some((id, _, _)) => Identified::Whole(id),
        }
    }
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The bytes of a hex string (either case), or `None` if it is not hex.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: ValueId = ValueId {
        writer: 0xdead_beef,
        seq: 7,
    };

    #[test]
    fn whole_values_verify_at_every_length_around_the_header() {
        let key = b"hot/key-1";
        let h = header_len(key).expect("short key");
        for len in [h, h + 1, h + 7, h + 8, h + 9, 4096, 65_537] {
            let v = generate(key, ID, len);
            assert_eq!(v.len(), len);
            assert_eq!(&v[..4], MAGIC);
            assert_eq!(verify(key, &v), Identified::Whole(ID), "len {len}");
        }
    }

    #[test]
    fn small_values_are_stream_prefixes() {
        let key = b"k";
        let h = header_len(key).expect("short key");
        assert_eq!(generate(key, ID, 0), generate(key, ValueId::default(), 0));
        let long = generate(key, ID, h - 1);
        for len in 0..h {
            let v = generate(key, ID, len);
            assert_eq!(&v[..], &long[..len]);
            assert_eq!(verify(key, &v), Identified::Small(len as u64));
        }
        let other = generate(key, ValueId { writer: 1, seq: 7 }, h - 1);
        assert_ne!(other, long);
    }

    #[test]
    fn generation_is_deterministic_and_id_dependent() {
        let a = generate(b"k", ID, 1000);
        assert_eq!(a, generate(b"k", ID, 1000));
        assert_ne!(
            a[40..],
            generate(b"k", ValueId { seq: 8, ..ID }, 1000)[40..]
        );
        assert_ne!(a[40..], generate(b"j", ID, 1000)[40..]);
    }

    #[test]
    fn torn_values_are_caught() {
        let key = b"key";
        let v = generate(key, ID, 10_000).to_vec();
        let torn = |bytes: &[u8]| match verify(key, bytes) {
            Identified::Torn { reason } => reason,
            other => panic!("not caught: {other:?}"),
        };
        // Body byte flipped.
        let mut flipped = v.clone();
        flipped[5000] ^= 1;
        assert!(torn(&flipped).contains("at byte 5000"));
        // Truncated and extended.
        assert!(torn(&v[..9000]).contains("holds 9000 bytes"));
        let mut longer = v.clone();
        longer.push(0);
        assert!(torn(&longer).contains("more than"));
        // Mixed: the second half from another version of the same length.
        let other = generate(key, ValueId { seq: 8, ..ID }, 10_000);
        let mut mixed = v[..4096].to_vec();
        mixed.extend_from_slice(&other[4096..]);
        assert!(torn(&mixed).contains("at byte 4096"));
        // Foreign key, bad magic, zeros.
        assert!(torn(&generate(b"kez", ID, 10_000)).contains("another key"));
        assert!(torn(&vec![0u8; 10_000]).contains("bad magic"));
        // A header announcing a length shorter than itself.
        let mut bad_len = v[..100].to_vec();
        let at = 23 + key.len();
        bad_len[at..at + 8].copy_from_slice(&5u64.to_le_bytes());
        assert!(torn(&bad_len).contains("shorter than its own header"));
    }

    #[test]
    fn streaming_verification_matches_whole_verification() {
        let key = b"stream";
        let v = generate(key, ID, 100_003);
        for piece in [1usize, 3, 7, 8, 13, 4096, 100_003] {
            let mut s = StreamVerifier::new(key);
            for p in v.chunks(piece) {
                s.update(p);
            }
            assert_eq!(s.finish(), Identified::Whole(ID), "piece {piece}");
            assert_eq!(s.len(), 100_003);
            assert!(s.small_bytes().is_none());
        }
        let mut bad = v.to_vec();
        bad[77_777] ^= 0x80;
        let mut s = StreamVerifier::new(key);
        for p in bad.chunks(1000) {
            s.update(p);
        }
        assert!(matches!(s.finish(), Identified::Torn { reason } if reason.contains("77777")));
        let small = generate(key, ID, 20);
        let mut s = StreamVerifier::new(key);
        s.update(&small[..5]);
        s.update(&small[5..]);
        assert_eq!(s.finish(), Identified::Small(20));
        assert_eq!(s.small_bytes(), Some(&small[..]));
    }

    #[test]
    fn hex_round_trips() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&b)), Some(b));
        assert_eq!(to_hex(&[0x0f, 0xa0]), "0fa0");
        assert_eq!(from_hex("0FA0"), Some(vec![0x0f, 0xa0]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }

    #[test]
    fn large_values_are_fast() {
        let len = 64 << 20;
        let t = std::time::Instant::now();
        let v = generate(b"big", ID, len);
        let gen_time = t.elapsed();
        let t = std::time::Instant::now();
        assert_eq!(verify(b"big", &v), Identified::Whole(ID));
        let verify_time = t.elapsed();
        println!("64 MiB: generate {gen_time:?}, verify {verify_time:?}");
        // Well under 100 ms each on an idle machine in release; generous here for loaded CI and debug builds.
        let limit = if cfg!(debug_assertions) { 30.0 } else { 1.0 };
        assert!(gen_time.as_secs_f64() < limit, "generate took {gen_time:?}");
        assert!(
            verify_time.as_secs_f64() < limit,
            "verify took {verify_time:?}"
        );
    }
}
