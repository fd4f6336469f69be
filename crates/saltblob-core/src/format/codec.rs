//! The stored chunk format: a 12-byte header (format version, codec tag, decoded length, CRC32C) and the payload,
//! which a sealed chunk holds as AES-256-GCM ciphertext and tag. See `docs/format.md` for the byte layout.

use std::fmt;
use std::str::FromStr;

use bytes::{BufMut, Bytes, BytesMut};

use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::version::VersionId;
use crate::encryption::seal::{SEALED_CODEC_BIT, TAG_LEN, VersionKeys};

/// Format version byte of a stored chunk.
pub const CHUNK_FORMAT_V1: u8 = 1;
/// Bytes of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 12;
/// zstd level used for chunks: fast, with most of zstd's ratio.
const ZSTD_LEVEL: i32 = 3;

/// How a chunk's payload is encoded. The tag byte is part of the format: never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Codec {
    /// Stored as is. Tag 0.
    #[default]
    None,
    /// zstd, level 3. Tag 1.
    Zstd,
    /// LZ4 block format. Tag 2.
    Lz4,
}

impl Codec {
    /// The tag byte stored in chunk headers and manifests.
    pub fn tag(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Zstd => 1,
            Codec::Lz4 => 2,
        }
    }

    /// The codec of a tag byte, or `None` for an unknown tag.
    pub fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            0 => Some(Codec::None),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::Lz4),
            _ => None,
        }
    }

    /// Lowercase name, as accepted by [`Codec::from_str`].
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Zstd => "zstd",
            Codec::Lz4 => "lz4",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Codec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "raw" | "off" => Ok(Codec::None),
            "zstd" => Ok(Codec::Zstd),
            "lz4" => Ok(Codec::Lz4),
            _ => Err(Error::invalid(
                "codec",
                format!("\"{s}\"; use none, zstd or lz4"),
            )),
        }
    }
}

/// Where a chunk belongs; bound into its checksum so that a chunk stored under the wrong address fails it.
#[derive(Clone, Copy, Debug)]
pub struct ChunkPlace<'a> {
    /// The blob's key (for error messages).
    pub key: &'a [u8],
    /// The version the chunk belongs to.
    pub version: VersionId,
    /// The chunk's index.
    pub index: u64,
}

/// Encodes one chunk: tries `codec`, keeps the raw bytes when compression does not shrink them.
pub fn encode_chunk(place: ChunkPlace<'_>, raw: &[u8], codec: Codec) -> Bytes {
    let (header, compressed) = encode_parts(place, raw, codec);
    let payload = compressed.as_deref().unwrap_or(raw);
    let mut out = BytesMut::with_capacity(CHUNK_HEADER_LEN + payload.len());
    out.put_slice(&header);
    out.put_slice(payload);
    out.freeze()
}

/// Encodes one chunk as [`encode_chunk`] does, but returns its header and its payload apart: a chunk stored as
/// is has `raw` itself as its payload (shared, not copied), so that whoever writes the record copies each byte
/// once.
pub fn encode_record(
    place: ChunkPlace<'_>,
    raw: &Bytes,
    codec: Codec,
) -> ([u8; CHUNK_HEADER_LEN], Bytes) {
    let (header, compressed) = encode_parts(place, raw, codec);
    (header, compressed.map_or_else(|| raw.clone(), Bytes::from))
}

/// Encodes chunk `place.index` of a sealed version (the version's last when `last`): compressed with `codec` when
/// that shrinks it, then sealed with `keys` (`docs/format.md`, "Sealed chunk"). Returns the header and the payload
/// (ciphertext and tag); the checksum covers the sealed bytes.
///
/// # Errors
/// Only if AES-GCM refuses (a chunk over 64 GiB).
pub fn encode_sealed(
    place: ChunkPlace<'_>,
    raw: &[u8],
    codec: Codec,
    keys: &VersionKeys,
    last: bool,
) -> Result<([u8; CHUNK_HEADER_LEN], Bytes)> {
    let compressed = compress(raw, codec);
    let plain = compressed.as_deref().unwrap_or(raw);
    let tag = stored_codec(codec, compressed.is_some()).tag() | SEALED_CODEC_BIT;
    let raw_len = raw_len(raw);
    let mut payload = Vec::with_capacity(plain.len() + TAG_LEN);
    payload.extend_from_slice(plain);
    keys.seal(place.index, last, raw_len, tag, &mut payload)?;
    Ok((header(place, tag, raw_len, &payload), Bytes::from(payload)))
}

/// The header of a chunk of `raw` bytes and, when `codec` shrinks them, the compressed payload (`None`: the
/// payload is `raw`). The checksum is computed here, over the payload in place.
fn encode_parts(
    place: ChunkPlace<'_>,
    raw: &[u8],
    codec: Codec,
) -> ([u8; CHUNK_HEADER_LEN], Option<Vec<u8>>) {
    let compressed = compress(raw, codec);
    let tag = stored_codec(codec, compressed.is_some()).tag();
    let payload = compressed.as_deref().unwrap_or(raw);
    (header(place, tag, raw_len(raw), payload), compressed)
}

/// `raw` compressed with `codec`, when that shrinks it.
fn compress(raw: &[u8], codec: Codec) -> Option<Vec<u8>> {
    match codec {
        Codec::None => None,
        Codec::Zstd => zstd::bulk::compress(raw, ZSTD_LEVEL).ok(),
        Codec::Lz4 => Some(lz4_flex::block::compress(raw)),
    }
    .filter(|c| c.len() < raw.len())
}

/// The codec a chunk is stored with: `codec` if it shrank the chunk, else none.
fn stored_codec(codec: Codec, compressed: bool) -> Codec {
    if compressed { codec } else { Codec::None }
}

fn raw_len(raw: &[u8]) -> u32 {
    u32::try_from(raw.len()).unwrap_or(u32::MAX)
}

/// The header of a chunk of `raw_len` bytes stored with codec tag `tag` as `payload`, its checksum computed here.
fn header(place: ChunkPlace<'_>, tag: u8, raw_len: u32, payload: &[u8]) -> [u8; CHUNK_HEADER_LEN] {
    let mut header = [0u8; CHUNK_HEADER_LEN];
    header[0] = CHUNK_FORMAT_V1;
    header[1] = tag;
    header[4..8].copy_from_slice(&raw_len.to_le_bytes());
    let crc = chunk_crc(place, &header[..8], payload);
    header[8..].copy_from_slice(&crc.to_le_bytes());
    header
}

/// What opens the chunks of a sealed version: its keys, and whether the chunk being decoded is its last.
#[derive(Clone, Copy, Debug)]
pub struct Opener<'a> {
    /// The version's keys.
    pub keys: &'a VersionKeys,
    /// Whether the chunk is the version's last.
    pub last: bool,
}

/// Decodes one stored chunk, verifying its format byte, CRC32C, codec tag and decoded length, which must be
/// `expected_len`, the chunk's span in the manifest's layout. The header's length is checked against it before
/// anything is decompressed, so a damaged or crafted chunk cannot make the decoder allocate more than the
/// layout allows. A chunk of a sealed version (`opener` given) must be sealed and open under its keys in its
/// place; a sealed chunk where none is expected, or a plaintext one in a sealed version, is corrupt.
pub fn decode_chunk(
    place: ChunkPlace<'_>,
    stored: &Bytes,
    expected_len: u64,
    opener: Option<Opener<'_>>,
) -> Result<Bytes> {
    decode_owned_chunk(place, stored.clone(), expected_len, opener)
}

/// [`decode_chunk`] of a chunk the caller gives up: a sealed chunk held nowhere else is opened in its own buffer
/// (no copy; a shared one is copied first).
///
/// # Errors
/// As [`decode_chunk`].
pub fn decode_owned_chunk(
    place: ChunkPlace<'_>,
    stored: Bytes,
    expected_len: u64,
    opener: Option<Opener<'_>>,
) -> Result<Bytes> {
    let corrupt = |detail: String| {
        Error::corrupt(
            format!(
                "chunk {} of key \"{}\" version {}",
                place.index,
                KeyDisplay::from(place.key),
                place.version
            ),
            detail,
        )
    };
    let header = stored.get(..CHUNK_HEADER_LEN).ok_or_else(|| {
        corrupt(format!(
            "{} bytes, shorter than the {CHUNK_HEADER_LEN}-byte header",
            stored.len()
        ))
    })?;
    let &[format, tag, _, _, l0, l1, l2, l3, c0, c1, c2, c3] = header else {
        return Err(corrupt("short header".into()));
    };
    if format != CHUNK_FORMAT_V1 {
        return Err(corrupt(format!(
            "unknown chunk format version {format} (this build reads {CHUNK_FORMAT_V1})"
        )));
    }
    let raw_len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
    let expected = u32::from_le_bytes([c0, c1, c2, c3]);
    let payload = stored.slice(CHUNK_HEADER_LEN..);
    let actual = chunk_crc(place, header.get(..8).unwrap_or_default(), &payload);
    if actual != expected {
        return Err(Error::ChecksumMismatch {
            key: place.key.into(),
            version: place.version,
            chunk: place.index,
            expected,
            actual,
        });
    }
    let sealed = tag & SEALED_CODEC_BIT != 0;
    let codec = Codec::from_tag(tag & !SEALED_CODEC_BIT)
        .ok_or_else(|| corrupt(format!("unknown codec tag {tag:#04x}")))?;
    if raw_len as u64 != expected_len {
        return Err(corrupt(format!(
            "holds {raw_len} bytes by its header, the layout says {expected_len}"
        )));
    }
    let payload = match (opener, sealed) {
        (None, false) => payload,
        (Some(opener), true) => {
            drop(payload);
            let mut buf = match stored.try_into_mut() {
                Ok(mut whole) => {
                    bytes::Buf::advance(&mut whole, CHUNK_HEADER_LEN);
                    whole
                }
                Err(shared) => BytesMut::from(&shared[CHUNK_HEADER_LEN..]),
            };
            let len = opener
                .keys
                .open(place.index, opener.last, raw_len as u32, tag, &mut buf)
                .map_err(|_| {
                    corrupt(format!(
                        "does not open as chunk {}{} of this version: damaged past its checksum, moved from \
                         another chunk, version, key or store, or the blob was truncated",
                        place.index,
                        if opener.last { ", the last" } else { "" }
                    ))
                })?
                .len();
            buf.truncate(len);
            buf.freeze()
        }
        (None, true) => {
            return Err(corrupt(
                "is sealed, in a version whose manifest is not: the manifest lost its encryption block".into(),
            ));
        }
        (Some(_), false) => {
            return Err(corrupt(
                "is plaintext, in a sealed version: a chunk was put in its place".into(),
            ));
        }
    };
    let raw = match codec {
        Codec::None => payload,
        Codec::Zstd => zstd::bulk::decompress(&payload, raw_len)
            .map(Bytes::from)
            .map_err(|e| corrupt(format!("zstd payload does not decode: {e}")))?,
        Codec::Lz4 => lz4_flex::block::decompress(&payload, raw_len)
            .map(Bytes::from)
            .map_err(|e| corrupt(format!("lz4 payload does not decode: {e}")))?,
    };
    if raw.len() != raw_len {
        return Err(corrupt(format!(
            "decoded to {} bytes, the header and the layout say {raw_len}",
            raw.len()
        )));
    }
    Ok(raw)
}

/// CRC32C over the version id, the chunk index (both little-endian), the first 8 header bytes and the payload.
fn chunk_crc(place: ChunkPlace<'_>, header8: &[u8], payload: &[u8]) -> u32 {
    let mut crc = crc32c::crc32c(&place.version.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &place.index.to_le_bytes());
    crc = crc32c::crc32c_append(crc, header8);
    crc32c::crc32c_append(crc, payload)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn place(index: u64) -> ChunkPlace<'static> {
        ChunkPlace {
            key: b"k",
            version: VersionId(42),
            index,
        }
    }

    #[test]
    fn compressible_chunks_shrink_and_random_ones_stay_raw() {
        let zeros = vec![0u8; 65536];
        for codec in [Codec::Zstd, Codec::Lz4] {
            let enc = encode_chunk(place(0), &zeros, codec);
            assert!(enc.len() < 2000, "{codec} left {} bytes", enc.len());
            assert_eq!(enc.get(1).copied(), Some(codec.tag()));
            assert_eq!(
                decode_chunk(place(0), &enc, 65536, None).ok().as_deref(),
                Some(&zeros[..])
            );
        }
        let random: Vec<u8> = (0..65536).map(|_| rand::random::<u8>()).collect();
        let enc = encode_chunk(place(0), &random, Codec::Zstd);
        assert_eq!(enc.get(1).copied(), Some(Codec::None.tag()));
        assert_eq!(enc.len(), random.len() + CHUNK_HEADER_LEN);
    }

    #[test]
    fn a_record_is_the_chunk_in_two_parts_sharing_the_raw_bytes() {
        let raw = Bytes::from((0..70_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        for codec in [Codec::None, Codec::Zstd, Codec::Lz4] {
            let (header, payload) = encode_record(place(5), &raw, codec);
            let mut joined = header.to_vec();
            joined.extend_from_slice(&payload);
            assert_eq!(
                &joined[..],
                &encode_chunk(place(5), &raw, codec)[..],
                "{codec}"
            );
        }
        let incompressible: Bytes = (0..65536).map(|_| rand::random::<u8>()).collect();
        let (_, payload) = encode_record(place(0), &incompressible, Codec::Zstd);
        assert_eq!(
            payload.as_ptr(),
            incompressible.as_ptr(),
            "stored as is: the payload is the raw bytes, not a copy"
        );
    }

    #[test]
    fn a_chunk_under_another_address_fails_its_checksum() {
        let enc = encode_chunk(place(3), b"hello world", Codec::None);
        assert!(matches!(
            decode_chunk(place(4), &enc, 11, None),
            Err(Error::ChecksumMismatch { chunk: 4, .. })
        ));
        let other_version = ChunkPlace {
            version: VersionId(43),
            ..place(3)
        };
        assert!(matches!(
            decode_chunk(other_version, &enc, 11, None),
            Err(Error::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn damaged_headers_are_reported_with_evidence() {
        let enc = encode_chunk(place(0), b"abc", Codec::None);
        let short = enc.slice(..5);
        let err = decode_chunk(place(0), &short, 3, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("shorter than the 12-byte header"), "{err}");
        let mut v = enc.to_vec();
        v[0] = 9;
        let err = decode_chunk(place(0), &Bytes::from(v), 3, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown chunk format version 9"), "{err}");
    }

    #[test]
    fn a_chunk_longer_than_its_span_is_refused_before_decompressing() {
        // 64 MiB of zeros compress to a few KiB: a chunk whose span is 64 KiB must not decode to 64 MiB.
        let bomb = vec![0u8; 64 << 20];
        for codec in [Codec::Zstd, Codec::Lz4, Codec::None] {
            let enc = encode_chunk(place(0), &bomb, codec);
            match decode_chunk(place(0), &enc, 65536, None) {
                Err(Error::Corrupt { detail, .. }) => assert!(
                    detail.contains("holds 67108864 bytes by its header, the layout says 65536"),
                    "{detail}"
                ),
                other => panic!(
                    "{codec}: expected Corrupt, got {:?}",
                    other.map(|b| b.len())
                ),
            }
        }
        let enc = encode_chunk(place(0), b"abc", Codec::None);
        assert!(matches!(
            decode_chunk(place(0), &enc, 4, None),
            Err(Error::Corrupt { .. })
        ));
    }

    /// A sealed chunk opens where it was sealed, and fails loudly as a plaintext chunk, with other keys, as the
    /// last when it was not, or in a version whose manifest says it is plaintext; a plaintext chunk fails in a
    /// sealed version.
    #[test]
    fn sealed_chunks_open_only_with_their_keys_in_their_place() {
        use crate::encryption::Secret;
        use crate::encryption::seal::VersionKeys;
        let keys = |dek: u8, version: u128| {
            VersionKeys::derive(&Secret::new([dek; 32]), &[1; 16], b"k", VersionId(version))
                .unwrap()
        };
        let k = keys(1, 5);
        let place = |index| ChunkPlace {
            key: b"k",
            version: VersionId(5),
            index,
        };
        let data: Vec<u8> = b"saltblob-secret-marker ".repeat(100);
        for codec in [Codec::None, Codec::Zstd] {
            let (header, payload) = encode_sealed(place(2), &data, codec, &k, false).unwrap();
            assert_eq!(header[1] & SEALED_CODEC_BIT, SEALED_CODEC_BIT);
            assert_eq!(
                header[1] & !SEALED_CODEC_BIT,
                if codec == Codec::None { 0 } else { 1 }
            );
            let marker = b"secret-marker";
            assert!(
                !payload.windows(marker.len()).any(|w| w == marker),
                "the plaintext shows"
            );
            let mut stored = header.to_vec();
            stored.extend_from_slice(&payload);
            let stored = Bytes::from(stored);
            let len = data.len() as u64;
            let open = |index, keys: &VersionKeys, last| {
                decode_chunk(place(index), &stored, len, Some(Opener { keys, last }))
            };
            assert_eq!(open(2, &k, false).ok().as_deref(), Some(&data[..]));
            assert!(open(2, &k, true).is_err(), "read as the last: a truncation");
            assert!(open(2, &keys(2, 5), false).is_err(), "another data key");
            // Another version's keys: the checksum binds the version too, so use its place as well.
            let other = keys(1, 6);
            let moved = decode_chunk(
                ChunkPlace {
                    version: VersionId(6),
                    ..place(2)
                },
                &stored,
                len,
                Some(Opener {
                    keys: &other,
                    last: false,
                }),
            );
            assert!(moved.is_err(), "another version");
            let err = decode_chunk(place(2), &stored, len, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains("is sealed"), "{err}");
        }
        let plain = encode_chunk(place(0), &data, Codec::None);
        let err = decode_chunk(
            place(0),
            &plain,
            data.len() as u64,
            Some(Opener {
                keys: &k,
                last: true,
            }),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("is plaintext, in a sealed version"), "{err}");
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(data in proptest::collection::vec(any::<u8>(), 0..20_000), rep in 0usize..4, codec_tag in 0u8..3, index in any::<u64>()) {
            let data: Vec<u8> = data.iter().flat_map(|b| std::iter::repeat_n(*b, rep + 1)).collect();
            let codec = Codec::from_tag(codec_tag).unwrap_or_default();
            let enc = encode_chunk(place(index), &data, codec);
            prop_assert!(enc.len() <= data.len() + CHUNK_HEADER_LEN);
            let dec = decode_chunk(place(index), &enc, data.len() as u64, None).ok();
            prop_assert_eq!(dec.as_deref(), Some(&data[..]));
        }

        /// Arbitrary stored bytes under a valid checksum (so that decoding reaches the codec) never panic, and
        /// never decode to more than the expected span.
        #[test]
        fn arbitrary_chunks_with_a_valid_checksum_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..3000), tag in 0u8..4, raw_len in any::<u32>(), same in any::<bool>(), expected in 0u64..100_000) {
            // Half the time the header agrees with the layout, so that the codecs decode arbitrary payloads.
            let raw_len = if same { expected as u32 } else { raw_len };
            let mut header = vec![CHUNK_FORMAT_V1, tag, 0, 0];
            header.extend_from_slice(&raw_len.to_le_bytes());
            let crc = chunk_crc(place(7), &header, &payload);
            header.extend_from_slice(&crc.to_le_bytes());
            header.extend_from_slice(&payload);
            if let Ok(raw) = decode_chunk(place(7), &Bytes::from(header), expected, None) {
                prop_assert_eq!(raw.len() as u64, expected);
            }
        }

        #[test]
        fn any_single_bit_flip_is_detected(data in proptest::collection::vec(any::<u8>(), 1..2000), bit in any::<usize>(), codec_tag in 0u8..3) {
            let codec = Codec::from_tag(codec_tag).unwrap_or_default();
            let enc = encode_chunk(place(1), &data, codec);
            let mut v = enc.to_vec();
            let bit = bit % (v.len() * 8);
            v[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode_chunk(place(1), &Bytes::from(v), data.len() as u64, None).is_err());
        }
    }
}
