//! The on-disk format of extents (`docs/format.md`, *Extent files*): where an extent file lives and what it is
//! named, its header, and the pointer that the `chunks` column family holds for each chunk stored in one.
//!
//! An extent file holds the chunk records of one version: a header sector naming the version and its key, then
//! the records (each exactly a stored chunk: 12-byte header and payload) one after another from `data_start`,
//! in the order they were written. Each chunk's pointer gives its record's offset and length, so a record is
//! found without reading any other, and a reader needs nothing from the header.

use bytes::Bytes;
use saltblob_core::{BlobRef, Error, Result, VersionId};

/// Subdirectory of the store's directory that holds the extent files. Nothing else of saltblob's is there, and
/// saltblob touches only the files of its own naming ([`parse_file_name`]).
pub(crate) const EXTENT_DIR: &str = "extents";
/// Format version of an extent file's header.
pub(crate) const EXTENT_FORMAT: u8 = 1;
/// The first bytes of every extent file.
const MAGIC: [u8; 8] = *b"SBEXTENT";
/// Bytes of the header before the key: magic, format, reserved, key length, version, chunk size, data start.
const FIXED_LEN: usize = 40;
/// The smallest data start: one 4 KiB sector for the header (more when the device's alignment is larger).
pub(crate) const MIN_DATA_START: u64 = 4096;
/// Suffix of extent file names.
const SUFFIX: &str = ".extent";
/// Prefix of a file being created: it gets its final name only once its header is written.
const TEMP_PREFIX: &str = ".new-";

/// Tag byte of a pointer in the `chunks` column family. A stored chunk starts with its format byte (1), so the
/// two never meet.
pub(crate) const POINTER_TAG: u8 = 0xE1;
/// Bytes of a pointer: tag, offset (u64 LE), length (u32 LE).
pub(crate) const POINTER_LEN: usize = 13;

/// The file name of the extent of `blob`: its version as 32 hex digits, `-`, the first 8 bytes of the BLAKE3
/// hash of its key as 16 hex digits, `.extent`. A function of the key and the version alone, so that the intent
/// of the put that writes it (whose record key is the version and the key) names it.
pub(crate) fn file_name(blob: &BlobRef) -> String {
    let hash = blake3::hash(&blob.key);
    let mut name = format!("{}-", blob.version);
    for b in hash.as_bytes().iter().take(8) {
        name.push_str(&format!("{b:02x}"));
    }
    name.push_str(SUFFIX);
    name
}

/// The name of `file_name` while the file is being created.
pub(crate) fn temp_name(file_name: &str) -> String {
    format!("{TEMP_PREFIX}{file_name}")
}

/// What the name of a file in the extent directory says: an extent of saltblob's naming (its version), a file
/// of saltblob's naming left by a creation that did not finish, or anything else (foreign: never touched).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    /// `<version>-<key hash>.extent`.
    Extent(VersionId),
    /// `.new-<version>-<key hash>.extent`.
    Unfinished,
    /// Anything else.
    Foreign,
}

/// Classifies a file name of the extent directory.
pub(crate) fn parse_file_name(name: &str) -> Named {
    let (body, unfinished) = match name.strip_prefix(TEMP_PREFIX) {
        Some(rest) => (rest, true),
        None => (name, false),
    };
    let Some(stem) = body.strip_suffix(SUFFIX) else {
        return Named::Foreign;
    };
    let Some((version, hash)) = stem.split_once('-') else {
        return Named::Foreign;
    };
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !hex(version, 32) || !hex(hash, 16) {
        return Named::Foreign;
    }
    match (unfinished, version.parse::<VersionId>()) {
        (true, Ok(_)) => Named::Unfinished,
        (false, Ok(v)) => Named::Extent(v),
        (_, Err(_)) => Named::Foreign,
    }
}

/// An extent file's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The version whose records the file holds.
    pub(crate) blob: BlobRef,
    /// Raw bytes per chunk of the version (informational: pointers locate the records).
    pub(crate) chunk_size: u32,
    /// Offset of the first record: a multiple of the alignment the file was written with, at least 4 KiB.
    pub(crate) data_start: u64,
}

impl Header {
    /// The header's bytes, zero-padded to `data_start`:
    ///
    /// ```text
    /// 0   8  magic "SBEXTENT"
    /// 8   1  format version = 1
    /// 9   1  reserved, 0
    /// 10  2  key length (u16 LE)
    /// 12  16 version id (u128 LE)
    /// 28  4  chunk size (u32 LE)
    /// 32  8  data start (u64 LE)
    /// 40  n  key
    /// 40+n 4 crc32c of bytes 0..40+n (u32 LE)
    /// ... zeros up to data start
    /// ```
    pub(crate) fn encode(&self) -> Vec<u8> {
        let key_len = u16::try_from(self.blob.key.len()).unwrap_or(u16::MAX);
        let len = usize::try_from(self.data_start).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&MAGIC);
        out.push(EXTENT_FORMAT);
        out.push(0);
        out.extend_from_slice(&key_len.to_le_bytes());
        out.extend_from_slice(&self.blob.version.to_le_bytes());
        out.extend_from_slice(&self.chunk_size.to_le_bytes());
        out.extend_from_slice(&self.data_start.to_le_bytes());
        out.extend_from_slice(&self.blob.key[..usize::from(key_len)]);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.resize(len.max(out.len()), 0);
        out
    }

    /// Decodes the start of an extent file (at least the header's bytes; more is ignored). Fails with
    /// [`Error::Corrupt`] naming `what` for a wrong magic, format, length or checksum.
    pub(crate) fn decode(bytes: &[u8], what: &str) -> Result<Self> {
        let corrupt = |detail: String| Error::corrupt(what.to_owned(), detail);
        let fixed = bytes.get(..FIXED_LEN).ok_or_else(|| {
            corrupt(format!(
                "{} bytes, shorter than an extent header",
                bytes.len()
            ))
        })?;
        let field = |range: std::ops::Range<usize>| fixed.get(range).unwrap_or_default();
        if field(0..8) != MAGIC {
            return Err(corrupt(
                "no extent header (the magic number is missing)".into(),
            ));
        }
        let format = fixed.get(8).copied().unwrap_or_default();
        if format != EXTENT_FORMAT {
            return Err(corrupt(format!(
                "unknown extent format version {format} (this build reads {EXTENT_FORMAT})"
            )));
        }
        let le = |range: std::ops::Range<usize>| {
            field(range)
                .iter()
                .rev()
                .fold(0u128, |acc, b| (acc << 8) | u128::from(*b))
        };
        let key_len = usize::try_from(le(10..12)).unwrap_or(usize::MAX);
        let version = VersionId(le(12..28));
        let chunk_size = u32::try_from(le(28..32)).unwrap_or(u32::MAX);
        let data_start = u64::try_from(le(32..40)).unwrap_or(u64::MAX);
        let end = FIXED_LEN + key_len;
        let (Some(key), Some(crc)) = (bytes.get(FIXED_LEN..end), bytes.get(end..end + 4)) else {
            return Err(corrupt(format!(
                "the header's key of {key_len} bytes runs past its {} bytes",
                bytes.len()
            )));
        };
        let stored = u32::from_le_bytes(crc.try_into().unwrap_or_default());
        let actual = crc32c::crc32c(bytes.get(..end).unwrap_or_default());
        if stored != actual {
            return Err(corrupt(format!(
                "header checksum mismatch (stored {stored:08x}, computed {actual:08x})"
            )));
        }
        if key.is_empty() || data_start < MIN_DATA_START || (end + 4) as u64 > data_start {
            return Err(corrupt(format!(
                "a header with a {key_len}-byte key cannot have its data start at {data_start}"
            )));
        }
        Ok(Self {
            blob: BlobRef {
                key: Bytes::copy_from_slice(key),
                version,
            },
            chunk_size,
            data_start,
        })
    }
}

/// The data start of a file written with `align`-byte alignment whose header holds a `key_len`-byte key: the
/// header rounded up to the alignment, at least [`MIN_DATA_START`].
pub(crate) fn data_start(align: u64, key_len: usize) -> u64 {
    let header = (FIXED_LEN + key_len + 4) as u64;
    header.max(MIN_DATA_START).div_ceil(align.max(1)) * align.max(1)
}

/// Where one chunk's record lies in its version's extent file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pointer {
    /// Offset of the record in the file.
    pub(crate) offset: u64,
    /// Bytes of the record (chunk header and payload).
    pub(crate) len: u32,
}

impl Pointer {
    /// The value stored under the chunk's key: tag `0xE1` ‖ offset (u64 LE) ‖ length (u32 LE).
    pub(crate) fn encode(self) -> [u8; POINTER_LEN] {
        let mut out = [0u8; POINTER_LEN];
        out[0] = POINTER_TAG;
        out[1..9].copy_from_slice(&self.offset.to_le_bytes());
        out[9..].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    /// The pointer a chunk value holds: `None` when the value is not a pointer (a chunk stored in RocksDB's
    /// blob files); an error when it starts with the pointer's tag but is not one.
    pub(crate) fn decode(value: &[u8], what: impl FnOnce() -> String) -> Result<Option<Self>> {
        if value.first() != Some(&POINTER_TAG) {
            return Ok(None);
        }
        let bytes: [u8; POINTER_LEN] = value.try_into().map_err(|_| {
            Error::corrupt(
                what(),
                format!(
                    "an extent pointer of {} bytes (expected {POINTER_LEN})",
                    value.len()
                ),
            )
        })?;
        let [_, o @ .., l0, l1, l2, l3] = bytes;
        Ok(Some(Self {
            offset: u64::from_le_bytes(o),
            len: u32::from_le_bytes([l0, l1, l2, l3]),
        }))
    }

    /// The first byte after the record.
    pub(crate) fn end(self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(key: &'static [u8], version: u128) -> BlobRef {
        BlobRef {
            key: Bytes::from_static(key),
            version: VersionId(version),
        }
    }

    #[test]
    fn names_are_a_function_of_key_and_version_and_parse_back() {
        let b = blob(b"videos/cat.mp4", 0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let name = file_name(&b);
        assert_eq!(
            name,
            "0123456789abcdef0011223344556677-ac3cbfdffe2992a0.extent"
        );
        assert_eq!(file_name(&b), name, "the same blob, the same name");
        assert_ne!(file_name(&blob(b"videos/dog.mp4", b.version.0)), name);
        assert_eq!(parse_file_name(&name), Named::Extent(b.version));
        assert_eq!(parse_file_name(&temp_name(&name)), Named::Unfinished);
        for foreign in [
            "notes.txt",
            "0123456789abcdef0011223344556677.extent",
            "0123456789ABCDEF0011223344556677-a2a2e2a3bd3bfc0a.extent",
            "0123456789abcdef0011223344556677-a2a2e2a3bd3bfc0.extent",
            "0123456789abcdef0011223344556677-a2a2e2a3bd3bfc0a.extent.bak",
            ".new-notes.extent",
        ] {
            assert_eq!(parse_file_name(foreign), Named::Foreign, "{foreign}");
        }
    }

    #[test]
    fn headers_round_trip_and_damage_is_named() {
        let h = Header {
            blob: blob(b"k/\x00\xff", 77),
            chunk_size: 65536,
            data_start: data_start(4096, 4),
        };
        let bytes = h.encode();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(Header::decode(&bytes, "x").expect("decodes"), h);
        for (at, needle) in [
            (0, "magic"),
            (8, "unknown extent format version"),
            (45, "checksum mismatch"),
        ] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let err = Header::decode(&damaged, "extent file f").expect_err("damaged");
            assert!(
                err.to_string().contains(needle) && err.to_string().contains("extent file f"),
                "{err}"
            );
        }
        assert!(Header::decode(&bytes[..20], "x").is_err());
        assert!(Header::decode(&[0u8; 4096], "x").is_err(), "zeros");
        // A long key pushes the data start to the next aligned boundary.
        assert_eq!(data_start(4096, 1024), 4096);
        assert_eq!(data_start(4096, 5000), 8192);
        assert_eq!(data_start(512, 10), 4096);
        assert_eq!(data_start(8192, 10), 8192);
    }

    #[test]
    fn pointers_round_trip_and_are_told_from_chunks() {
        let p = Pointer {
            offset: 4096 + 65548 * 3,
            len: 65548,
        };
        let v = p.encode();
        assert_eq!(
            v,
            [
                0xE1, 0x24, 0x10, 0x03, 0, 0, 0, 0, 0, 0x0c, 0x00, 0x01, 0x00
            ]
        );
        assert_eq!(Pointer::decode(&v, String::new).expect("ok"), Some(p));
        // A stored chunk (format byte 1) is no pointer.
        assert_eq!(
            Pointer::decode(&[1, 0, 0, 0], String::new).expect("ok"),
            None
        );
        assert!(Pointer::decode(&v[..12], || "chunk 3".into()).is_err());
        assert_eq!(p.end(), 4096 + 65548 * 4);
    }
}
