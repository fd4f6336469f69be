//! The portable stream of `saltblob export` and `saltblob import` (`docs/format.md`, "Export stream, format
//! version 1"): every live blob of a store, with what a put can set again, in key order, so that a store moves
//! between backends.
//!
//! ```text
//! stream  = MAGIC (8 bytes) VERSION (1 byte) block(header) record* end
//! block   = length u32 | bytes | CRC32C of the bytes u32
//! record  = 0x01 block(blob head) frame* digest (32 bytes, BLAKE3 of the data)
//!         | 0x01 block(blob head) frame* 0xFFFFFFFF block(reason)        (the exporter could not read it all)
//!           (after the frames that complete the data, the marker stands where the digest would: a reader tells
//!           them apart by the digest of the data, which never starts with the marker's bytes when cut short)
//!         | 0x02 block(left-out head)                                    (named, not exported: SSE-C, damaged)
//! frame   = length u32 (1 to MAX_FRAME) | data | CRC32C of the data u32
//! end     = 0xFF | blobs u64 | bytes u64 | left out u64 | CRC32C of those 24 bytes u32
//! ```
//!
//! Integers are little-endian. The frames of a blob hold exactly its size; its digest follows the frame that
//! completes it. A reader refuses whatever does not hold, with the byte offset and the key: another magic or
//! version, a block or frame whose checksum fails, a length out of bounds, keys out of order, a digest that
//! differs, counts that differ from the trailer's, bytes after it, and a stream that ends anywhere before the
//! end of its trailer (truncated).
//!
//! [`StreamWriter`] writes the stream; [`Decoder`] reads it, and [`Decoder::next_piece`] checks a blob's digest
//! before it hands over the blob's last bytes, so that a put fed from it fails (and publishes nothing) when the
//! digest does not match.

use std::collections::BTreeMap;
use std::fmt;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The first bytes of a stream: `\x89SBX\r\n\x1a\n` (a non-ASCII byte, then line endings and a DOS end-of-file,
/// so that a transfer in text mode is detected, as PNG does).
pub const MAGIC: [u8; 8] = *b"\x89SBX\r\n\x1a\n";
/// The format version this build writes and reads.
pub const VERSION: u8 = 1;
/// The largest data frame, in bytes: what a reader holds in memory at once.
pub const MAX_FRAME: u32 = 1 << 20;
/// The frame length that says the exporter could not read the rest of the blob.
pub const ABORT: u32 = u32::MAX;
/// The largest block (header, blob head, reason) a reader accepts: a key, a content type and two 8 KiB
/// metadata maps fit many times over.
pub const MAX_BLOCK: u32 = 64 * 1024;
/// Tag of a blob record.
pub const TAG_BLOB: u8 = 1;
/// Tag of a left-out record.
pub const TAG_LEFT_OUT: u8 = 2;
/// Tag of the trailer.
pub const TAG_END: u8 = 0xFF;

const FLAG_CONTENT_TYPE: u8 = 1;
const FLAG_EXPIRES: u8 = 2;
const FLAG_SEALED: u8 = 4;
const FLAG_DIGEST: u8 = 8;
const KNOWN_FLAGS: u8 = FLAG_CONTENT_TYPE | FLAG_EXPIRES | FLAG_SEALED | FLAG_DIGEST;

/// What the header says about the export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamHeader {
    /// When the export started, Unix microseconds.
    pub created_micros: u64,
    /// The program that wrote it (`saltblob 0.1.0`).
    pub writer: String,
    /// The prefix exported (empty: every key).
    pub prefix: Vec<u8>,
    /// The key the export started after (`--after`), if any.
    pub after: Option<Vec<u8>>,
}

/// The key-encryption key a blob was sealed under in the source store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedBy {
    /// The provider's name: `local`, `aws-kms`.
    pub provider: String,
    /// The key's name at the provider (a keyring name, a KMS key id).
    pub key: String,
}

/// What a blob record says before its data: the key, the size, and what a put sets again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobHead {
    /// The key (1 to 1024 bytes, any bytes).
    pub key: Vec<u8>,
    /// The size of the data, in bytes.
    pub size: u64,
    /// The content type.
    pub content_type: Option<String>,
    /// When the blob expires, Unix microseconds.
    pub expires_micros: Option<u64>,
    /// The key it was sealed under in the source; `None`: plaintext.
    pub sealed: Option<SealedBy>,
    /// User metadata (without the sealed entry).
    pub metadata: BTreeMap<String, String>,
    /// Sealed metadata, opened (what the source kept sealed beside a sealed blob: its checksums).
    pub sealed_metadata: BTreeMap<String, String>,
    /// BLAKE3 of the data when the exporter knew it before reading the data (a plaintext blob that is not
    /// multipart: its manifest's digest), so that an import can compare it with what the target has first.
    pub digest: Option<[u8; 32]>,
}

/// The counts of the trailer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Complete blob records.
    pub blobs: u64,
    /// Bytes of their data.
    pub bytes: u64,
    /// Left-out records and aborted blob records.
    pub left_out: u64,
}

// ---------------------------------------------------------------------------------------------------------
// Blocks: encoding and decoding in memory.

/// Little-endian encoding into a buffer.
#[derive(Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Bytes after a u16 length; `what` names them if they are too long.
    fn bytes16(&mut self, v: &[u8], what: &str) -> Result<(), String> {
        let len = u16::try_from(v.len())
            .map_err(|_| format!("{what} is {} bytes; at most 65535", v.len()))?;
        self.u16(len);
        self.0.extend_from_slice(v);
        Ok(())
    }
    /// Bytes after a u8 length.
    fn bytes8(&mut self, v: &[u8], what: &str) -> Result<(), String> {
        let len = u8::try_from(v.len())
            .map_err(|_| format!("{what} is {} bytes; at most 255", v.len()))?;
        self.u8(len);
        self.0.extend_from_slice(v);
        Ok(())
    }
    fn entries(&mut self, map: &BTreeMap<String, String>, what: &str) -> Result<(), String> {
        let count = u16::try_from(map.len())
            .map_err(|_| format!("{what} has {} entries; at most 65535", map.len()))?;
        self.u16(count);
        for (k, v) in map {
            self.bytes16(k.as_bytes(), what)?;
            self.bytes16(v.as_bytes(), what)?;
        }
        Ok(())
    }
}

/// Little-endian decoding of a block, every read checked: what it says when short is what was being read.
struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "the block ends inside {what} (byte {} of {})",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let out = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn bytes16(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }
    fn bytes8(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u8(what)?;
        self.take(usize::from(n), what)
    }
    fn text16(&mut self, what: &str) -> Result<String, String> {
        utf8(self.bytes16(what)?, what)
    }
    fn entries(&mut self, what: &str) -> Result<BTreeMap<String, String>, String> {
        let count = self.u16(what)?;
        let mut map = BTreeMap::new();
        for _ in 0..count {
            let k = self.text16(what)?;
            let v = self.text16(what)?;
            if map.insert(k.clone(), v).is_some() {
                return Err(format!("{what} names {k:?} twice"));
            }
        }
        Ok(map)
    }
    /// Fails unless the whole block was read.
    fn end(&self, what: &str) -> Result<(), String> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(format!(
                "{} bytes after the end of the {what}",
                self.buf.len() - self.pos
            ))
        }
    }
}

fn utf8(b: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
}

impl StreamHeader {
    /// The header block: created (u64), writer (u8 length, UTF-8), prefix (u16 length), after (u16 length, 0
    /// for none: a key has at least one byte).
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut e = Enc::default();
        e.u64(self.created_micros);
        e.bytes8(self.writer.as_bytes(), "the writer's name")?;
        e.bytes16(&self.prefix, "the prefix")?;
        e.bytes16(self.after.as_deref().unwrap_or_default(), "the start key")?;
        Ok(e.0)
    }

    /// Reads a header block.
    pub fn decode(block: &[u8]) -> Result<Self, String> {
        let mut d = Dec::new(block);
        let created_micros = d.u64("the creation time")?;
        let writer = utf8(d.bytes8("the writer's name")?, "the writer's name")?;
        let prefix = d.bytes16("the prefix")?.to_vec();
        let after = d.bytes16("the start key")?;
        let after = (!after.is_empty()).then(|| after.to_vec());
        d.end("header")?;
        Ok(Self {
            created_micros,
            writer,
            prefix,
            after,
        })
    }
}

impl BlobHead {
    /// The blob head block: key (u16 length), size (u64), flags (u8: 1 content type, 2 expiry, 4 sealed, 8
    /// digest), then as the flags say content type (u8 length), expiry (u64), sealing (provider u8 length, key
    /// u16 length), digest (32 bytes); then metadata and sealed metadata, each a u16 count of entries of a u16
    /// length name and a u16 length value, UTF-8.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut e = Enc::default();
        e.bytes16(&self.key, "the key")?;
        e.u64(self.size);
        let mut flags = 0;
        for (set, flag) in [
            (self.content_type.is_some(), FLAG_CONTENT_TYPE),
            (self.expires_micros.is_some(), FLAG_EXPIRES),
            (self.sealed.is_some(), FLAG_SEALED),
            (self.digest.is_some(), FLAG_DIGEST),
        ] {
            if set {
                flags |= flag;
            }
        }
        e.u8(flags);
        if let Some(ct) = &self.content_type {
            e.bytes8(ct.as_bytes(), "the content type")?;
        }
        if let Some(t) = self.expires_micros {
            e.u64(t);
        }
        if let Some(s) = &self.sealed {
            e.bytes8(s.provider.as_bytes(), "the key provider's name")?;
            e.bytes16(s.key.as_bytes(), "the encryption key's name")?;
        }
        if let Some(d) = &self.digest {
            e.0.extend_from_slice(d);
        }
        e.entries(&self.metadata, "the metadata")?;
        e.entries(&self.sealed_metadata, "the sealed metadata")?;
        Ok(e.0)
    }

    /// Reads a blob head block.
    pub fn decode(block: &[u8]) -> Result<Self, String> {
        let mut d = Dec::new(block);
        let key = d.bytes16("the key")?.to_vec();
        check_key(&key)?;
        let size = d.u64("the size")?;
        let flags = d.u8("the flags")?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(format!(
                "unknown flags {flags:#04x} (this build knows {KNOWN_FLAGS:#04x})"
            ));
        }
        let content_type = if flags & FLAG_CONTENT_TYPE != 0 {
            Some(utf8(d.bytes8("the content type")?, "the content type")?)
        } else {
            None
        };
        let expires_micros = if flags & FLAG_EXPIRES != 0 {
            Some(d.u64("the expiry")?)
        } else {
            None
        };
        let sealed = if flags & FLAG_SEALED != 0 {
            let provider = utf8(d.bytes8("the key provider")?, "the key provider")?;
            let key = d.text16("the encryption key's name")?;
            Some(SealedBy { provider, key })
        } else {
            None
        };
        let digest = if flags & FLAG_DIGEST != 0 {
            Some(d.array::<32>("the digest")?)
        } else {
            None
        };
        let metadata = d.entries("the metadata")?;
        let sealed_metadata = d.entries("the sealed metadata")?;
        d.end("blob head")?;
        Ok(Self {
            key,
            size,
            content_type,
            expires_micros,
            sealed,
            metadata,
            sealed_metadata,
            digest,
        })
    }
}

/// A key is 1 to [`saltblob::MAX_KEY_LEN`] bytes.
fn check_key(key: &[u8]) -> Result<(), String> {
    if key.is_empty() || key.len() > saltblob::MAX_KEY_LEN {
        return Err(format!(
            "a key of {} bytes (1 to {} expected)",
            key.len(),
            saltblob::MAX_KEY_LEN
        ));
    }
    Ok(())
}

/// The left-out block: key (u16 length), reason (u16 length, UTF-8).
pub fn encode_left_out(key: &[u8], reason: &str) -> Result<Vec<u8>, String> {
    let mut e = Enc::default();
    e.bytes16(key, "the key")?;
    e.bytes16(reason.as_bytes(), "the reason")?;
    Ok(e.0)
}

/// Reads a left-out block.
pub fn decode_left_out(block: &[u8]) -> Result<(Vec<u8>, String), String> {
    let mut d = Dec::new(block);
    let key = d.bytes16("the key")?.to_vec();
    check_key(&key)?;
    let reason = d.text16("the reason")?;
    d.end("left-out record")?;
    Ok((key, reason))
}

/// A reason cut to what a block holds, at a character boundary.
fn cut(reason: &str) -> &str {
    let mut end = reason.len().min(4096);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.get(..end).unwrap_or_default()
}

/// `length u32 | bytes | CRC32C u32`.
fn block(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|&l| l <= MAX_BLOCK)
        .ok_or_else(|| format!("a block of {} bytes; at most {MAX_BLOCK}", bytes.len()))?;
    let mut out = Vec::with_capacity(bytes.len() + 8);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
    Ok(out)
}

/// The trailer's 24 counted bytes.
fn totals_bytes(t: &Totals) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&t.blobs.to_le_bytes());
    b[8..16].copy_from_slice(&t.bytes.to_le_bytes());
    b[16..].copy_from_slice(&t.left_out.to_le_bytes());
    b
}

// ---------------------------------------------------------------------------------------------------------
// Writing.

/// The blob being written.
struct Writing {
    remaining: u64,
    size: u64,
    hasher: blake3::Hasher,
}

/// Writes a stream to `W`: the header, records, the trailer. It checks the counts it writes itself; the caller
/// feeds each blob's data in order and exactly its size ([`StreamWriter::data`] refuses more).
pub struct StreamWriter<W> {
    out: W,
    offset: u64,
    totals: Totals,
    blob: Option<Writing>,
}

impl<W: AsyncWrite + Unpin> StreamWriter<W> {
    /// Writes the magic, the version and the header to `out`.
    pub async fn start(mut out: W, header: &StreamHeader) -> std::io::Result<Self> {
        let mut bytes = MAGIC.to_vec();
        bytes.push(VERSION);
        bytes.extend(
            block(&header.encode().map_err(std::io::Error::other)?)
                .map_err(std::io::Error::other)?,
        );
        out.write_all(&bytes).await?;
        Ok(Self {
            out,
            offset: bytes.len() as u64,
            totals: Totals::default(),
            blob: None,
        })
    }

    /// Bytes written so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes).await?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Starts the record of blob `head`; its data follows.
    pub async fn begin_blob(&mut self, head: &BlobHead) -> std::io::Result<()> {
        let mut bytes = vec![TAG_BLOB];
        bytes.extend(
            block(&head.encode().map_err(std::io::Error::other)?).map_err(std::io::Error::other)?,
        );
        self.write(&bytes).await?;
        self.blob = Some(Writing {
            remaining: head.size,
            size: head.size,
            hasher: blake3::Hasher::new(),
        });
        Ok(())
    }

    /// Bytes of the blob's data remaining to be written.
    pub fn remaining(&self) -> u64 {
        self.blob.as_ref().map_or(0, |b| b.remaining)
    }

    /// Writes `piece` of the current blob's data, in frames of at most [`MAX_FRAME`] bytes.
    ///
    /// # Errors
    /// An error of the output; [`std::io::ErrorKind::InvalidInput`] when there is no blob or `piece` runs past
    /// its size (nothing written then).
    pub async fn data(&mut self, piece: &Bytes) -> std::io::Result<()> {
        let blob = self
            .blob
            .as_mut()
            .filter(|b| piece.len() as u64 <= b.remaining)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "more data than the blob's size",
                )
            })?;
        blob.remaining -= piece.len() as u64;
        blob.hasher.update(piece);
        for frame in piece.chunks(MAX_FRAME as usize) {
            let mut head = [0u8; 4];
            head.copy_from_slice(&(frame.len() as u32).to_le_bytes());
            self.write(&head).await?;
            self.write(frame).await?;
            self.write(&crc32c::crc32c(frame).to_le_bytes()).await?;
        }
        Ok(())
    }

    /// Ends the current blob with its digest; returns it.
    ///
    /// # Errors
    /// An error of the output; [`std::io::ErrorKind::InvalidInput`] when its data is not all written.
    pub async fn end_blob(&mut self) -> std::io::Result<[u8; 32]> {
        let blob = self
            .blob
            .take()
            .filter(|b| b.remaining == 0)
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "a blob's data is short")
            })?;
        let digest = *blob.hasher.finalize().as_bytes();
        self.write(&digest).await?;
        self.totals.blobs += 1;
        self.totals.bytes += blob.size;
        Ok(digest)
    }

    /// Ends the current blob without its digest: the exporter could not read the rest, for `reason`.
    ///
    /// # Errors
    /// An error of the output; [`std::io::ErrorKind::InvalidInput`] (nothing written) when all the blob's data is
    /// written and its digest starts with the abort marker's bytes (one blob in 2^32), where a reader could not
    /// tell the marker from the digest.
    pub async fn abort_blob(&mut self, reason: &str) -> std::io::Result<()> {
        if let Some(b) = self.blob.as_ref()
            && b.remaining == 0
            && b.hasher.finalize().as_bytes().get(..4) == Some(&ABORT.to_le_bytes()[..])
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a blob whose data is all written and whose digest starts with the abort marker cannot be cut short",
            ));
        }
        self.blob = None;
        let mut e = Enc::default();
        e.bytes16(cut(reason).as_bytes(), "the reason")
            .map_err(std::io::Error::other)?;
        let mut bytes = ABORT.to_le_bytes().to_vec();
        bytes.extend(block(&e.0).map_err(std::io::Error::other)?);
        self.write(&bytes).await?;
        self.totals.left_out += 1;
        Ok(())
    }

    /// Names `key`, left out of the export for `reason`.
    pub async fn left_out(&mut self, key: &[u8], reason: &str) -> std::io::Result<()> {
        let mut bytes = vec![TAG_LEFT_OUT];
        bytes.extend(
            block(&encode_left_out(key, cut(reason)).map_err(std::io::Error::other)?)
                .map_err(std::io::Error::other)?,
        );
        self.write(&bytes).await?;
        self.totals.left_out += 1;
        Ok(())
    }

    /// Writes the trailer and flushes; returns the output.
    pub async fn finish(mut self) -> std::io::Result<W> {
        let counted = totals_bytes(&self.totals);
        let mut bytes = vec![TAG_END];
        bytes.extend_from_slice(&counted);
        bytes.extend_from_slice(&crc32c::crc32c(&counted).to_le_bytes());
        self.write(&bytes).await?;
        self.out.flush().await?;
        Ok(self.out)
    }
}

// ---------------------------------------------------------------------------------------------------------
// Reading.

/// What is wrong with a stream, where.
#[derive(Debug)]
pub enum StreamError {
    /// Reading the input failed.
    Read { at: u64, source: std::io::Error },
    /// The input does not start with [`MAGIC`].
    NotAStream { found: Vec<u8> },
    /// Another format version.
    Version { found: u8 },
    /// The input ends before the trailer's end.
    Truncated { at: u64, inside: String },
    /// Something does not hold.
    Corrupt { at: u64, what: String },
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Read { at, source } => {
                write!(f, "cannot read the stream at byte {at}: {source}")
            }
            StreamError::NotAStream { found } => write!(
                f,
                "not a saltblob export stream: it starts with {}, not {} (write one with `saltblob export`)",
                hex_bytes(found),
                hex_bytes(&MAGIC)
            ),
            StreamError::Version { found } => write!(
                f,
                "export stream format version {found}: this build reads version {VERSION} only (a newer saltblob \
                 wrote it? import it with that build)"
            ),
            StreamError::Truncated { at, inside } => {
                write!(
                    f,
                    "the stream is truncated: it ends at byte {at}, inside {inside}"
                )
            }
            StreamError::Corrupt { at, what } => {
                write!(f, "the stream is corrupt at byte {at}: {what}")
            }
        }
    }
}

impl std::error::Error for StreamError {}

impl StreamError {
    /// Whether the stream itself is bad (corrupt or truncated data) rather than not ours or unreadable.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            StreamError::Truncated { .. } | StreamError::Corrupt { .. }
        )
    }
}

fn hex_bytes(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A record, as [`Decoder::next_record`] reads it.
#[derive(Debug)]
pub enum Record {
    /// A blob: its data follows ([`Decoder::next_piece`]).
    Blob(BlobHead),
    /// A key the exporter left out, and why.
    LeftOut { key: Vec<u8>, reason: String },
    /// The trailer, checked against what was read: the stream is complete.
    End(Totals),
}

/// A piece of a blob's data, from [`Decoder::next_piece`].
#[derive(Debug)]
pub enum Piece {
    /// Data, checked against its frame's checksum (and, the last piece, after the digest was checked).
    Data(Bytes),
    /// The data is over and its digest matched.
    End,
    /// The exporter could not read the rest of the blob, for this reason.
    Aborted(String),
}

/// The blob being read.
struct Reading {
    key: Vec<u8>,
    size: u64,
    remaining: u64,
    expected: Option<[u8; 32]>,
    hasher: blake3::Hasher,
    /// Where its data starts.
    data_at: u64,
    /// The data and its digest are read (or the blob was aborted): the record is over.
    done: bool,
    /// Why the exporter cut the blob short, if it did.
    aborted: Option<String>,
}

/// Reads a stream from `R`, checking everything as it goes; every error names the byte offset, and the key of
/// the record it is in.
pub struct Decoder<R> {
    input: R,
    offset: u64,
    header: StreamHeader,
    blob: Option<Reading>,
    seen: Totals,
    /// The key of the last record read (order check).
    last_key: Option<Vec<u8>>,
    /// The key of the last record read in full.
    last_complete: Option<Vec<u8>>,
}

impl<R: AsyncRead + Unpin> Decoder<R> {
    /// Reads and checks the magic, the version and the header.
    pub async fn open(input: R) -> Result<Self, StreamError> {
        let mut d = Self {
            input,
            offset: 0,
            header: StreamHeader {
                created_micros: 0,
                writer: String::new(),
                prefix: Vec::new(),
                after: None,
            },
            blob: None,
            seen: Totals::default(),
            last_key: None,
            last_complete: None,
        };
        let mut magic = [0u8; 8];
        let got = d.fill_some(&mut magic).await?;
        let read = magic.get(..got).unwrap_or_default();
        if got < MAGIC.len() || read != MAGIC {
            if read != MAGIC.get(..got).unwrap_or_default() {
                return Err(StreamError::NotAStream {
                    found: read.to_vec(),
                });
            }
            let inside = if got == 0 {
                "the magic (the input is empty)"
            } else {
                "the magic"
            };
            return Err(StreamError::Truncated {
                at: d.offset,
                inside: inside.into(),
            });
        }
        let version = d.u8(|| "the format version".into()).await?;
        if version != VERSION {
            return Err(StreamError::Version { found: version });
        }
        let at = d.offset;
        let block = d.block(|| "the header".into()).await?;
        d.header = StreamHeader::decode(&block).map_err(|what| StreamError::Corrupt {
            at,
            what: format!("the header: {what}"),
        })?;
        Ok(d)
    }

    /// The header.
    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// The key of the last record read in full: what an export resumes after (`--after`).
    pub fn last_complete(&self) -> Option<&[u8]> {
        self.last_complete.as_deref()
    }

    /// Reads into `buf` until it is full or the input ends; returns how much was read.
    async fn fill_some(&mut self, buf: &mut [u8]) -> Result<usize, StreamError> {
        let mut n = 0;
        while n < buf.len() {
            let rest = buf.get_mut(n..).unwrap_or_default();
            match self.input.read(rest).await {
                Ok(0) => break,
                Ok(got) => {
                    n += got;
                    self.offset += got as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(StreamError::Read {
                        at: self.offset,
                        source,
                    });
                }
            }
        }
        Ok(n)
    }

    /// Fills `buf`; the input ending first is a truncation inside `inside()`.
    async fn fill(
        &mut self,
        buf: &mut [u8],
        inside: impl FnOnce() -> String,
    ) -> Result<(), StreamError> {
        if self.fill_some(buf).await? < buf.len() {
            return Err(StreamError::Truncated {
                at: self.offset,
                inside: inside(),
            });
        }
        Ok(())
    }

    async fn u8(&mut self, inside: impl FnOnce() -> String) -> Result<u8, StreamError> {
        let mut b = [0u8; 1];
        self.fill(&mut b, inside).await?;
        Ok(b[0])
    }

    async fn u32(&mut self, inside: impl FnOnce() -> String) -> Result<u32, StreamError> {
        let mut b = [0u8; 4];
        self.fill(&mut b, inside).await?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a block (length, bytes, CRC32C) and checks it.
    async fn block(&mut self, what: impl Fn() -> String) -> Result<Vec<u8>, StreamError> {
        let at = self.offset;
        let len = self.u32(|| format!("the length of {}", what())).await?;
        if len > MAX_BLOCK {
            return Err(StreamError::Corrupt {
                at,
                what: format!("{}: a block of {len} bytes (at most {MAX_BLOCK})", what()),
            });
        }
        let mut bytes = vec![0u8; len as usize];
        self.fill(&mut bytes, &what).await?;
        let stored = self.u32(|| format!("the checksum of {}", what())).await?;
        let computed = crc32c::crc32c(&bytes);
        if stored != computed {
            return Err(StreamError::Corrupt {
                at,
                what: format!(
                    "{}: CRC32C {computed:08x} where the stream says {stored:08x}",
                    what()
                ),
            });
        }
        Ok(bytes)
    }

    /// How a key is named in messages.
    fn shown(key: &[u8]) -> String {
        format!("\"{}\"", saltblob::escape_key(key))
    }

    /// Checks that `key`, of the record at `at`, comes after the last one and within the header's range.
    fn check_order(&mut self, key: &[u8], at: u64) -> Result<(), StreamError> {
        let bad = |what: String| StreamError::Corrupt { at, what };
        if let Some(last) = &self.last_key
            && key <= last.as_slice()
        {
            return Err(bad(format!(
                "key {} does not come after {} (keys are in order, each once)",
                Self::shown(key),
                Self::shown(last)
            )));
        }
        if !key.starts_with(&self.header.prefix) {
            return Err(bad(format!(
                "key {} is not under the exported prefix {}",
                Self::shown(key),
                Self::shown(&self.header.prefix)
            )));
        }
        if let Some(after) = &self.header.after
            && key <= after.as_slice()
        {
            return Err(bad(format!(
                "key {} does not come after the export's start {}",
                Self::shown(key),
                Self::shown(after)
            )));
        }
        self.last_key = Some(key.to_vec());
        Ok(())
    }

    /// Reads the next record. The data of a blob read before and not to its end is read (and checked) first.
    pub async fn next_record(&mut self) -> Result<Record, StreamError> {
        self.finish_blob().await?;
        let at = self.offset;
        let after = match &self.last_complete {
            Some(k) => format!("the record after {}", Self::shown(k)),
            None => "the first record".to_owned(),
        };
        let tag = self.u8(|| after.clone()).await?;
        match tag {
            TAG_BLOB => {
                let block = self.block(|| format!("the head of {after}")).await?;
                let head = BlobHead::decode(&block).map_err(|what| StreamError::Corrupt {
                    at,
                    what: format!("a blob head: {what}"),
                })?;
                self.check_order(&head.key, at)?;
                self.blob = Some(Reading {
                    key: head.key.clone(),
                    size: head.size,
                    remaining: head.size,
                    expected: head.digest,
                    hasher: blake3::Hasher::new(),
                    data_at: self.offset,
                    done: false,
                    aborted: None,
                });
                Ok(Record::Blob(head))
            }
            TAG_LEFT_OUT => {
                let block = self.block(|| format!("the head of {after}")).await?;
                let (key, reason) =
                    decode_left_out(&block).map_err(|what| StreamError::Corrupt {
                        at,
                        what: format!("a left-out record: {what}"),
                    })?;
                self.check_order(&key, at)?;
                self.seen.left_out += 1;
                self.last_complete = Some(key.clone());
                Ok(Record::LeftOut { key, reason })
            }
            TAG_END => {
                let mut counted = [0u8; 24];
                self.fill(&mut counted, || "the trailer".into()).await?;
                let stored = self.u32(|| "the trailer's checksum".into()).await?;
                let computed = crc32c::crc32c(&counted);
                if stored != computed {
                    return Err(StreamError::Corrupt {
                        at,
                        what: format!(
                            "the trailer: CRC32C {computed:08x} where the stream says {stored:08x}"
                        ),
                    });
                }
                let word = |i: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(counted.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
                    u64::from_le_bytes(b)
                };
                let said = Totals {
                    blobs: word(0),
                    bytes: word(1),
                    left_out: word(2),
                };
                if said != self.seen {
                    return Err(StreamError::Corrupt {
                        at,
                        what: format!(
                            "the trailer counts {} blob(s) of {} bytes and {} left out; the stream holds {} of {} \
                             bytes and {} left out",
                            said.blobs,
                            said.bytes,
                            said.left_out,
                            self.seen.blobs,
                            self.seen.bytes,
                            self.seen.left_out
                        ),
                    });
                }
                let mut more = [0u8; 1];
                if self.fill_some(&mut more).await? > 0 {
                    return Err(StreamError::Corrupt {
                        at: self.offset - 1,
                        what: "bytes after the trailer".into(),
                    });
                }
                Ok(Record::End(said))
            }
            other => Err(StreamError::Corrupt {
                at,
                what: format!(
                    "unknown record tag {other:#04x} (1 blob, 2 left out, 0xff end) where {after} starts"
                ),
            }),
        }
    }

    /// The next piece of the current blob's data. The digest is read and checked before the piece that
    /// completes the data is returned: a consumer never sees the whole data of a blob whose digest differs.
    ///
    /// # Errors
    /// A truncation or corruption: a frame length out of bounds or past the blob's size, a frame checksum or the
    /// digest that differs; also no blob being read (a caller's error, reported as corruption at the offset).
    pub async fn next_piece(&mut self) -> Result<Piece, StreamError> {
        let at = self.offset;
        let Some(blob) = self.blob.as_ref() else {
            return Err(StreamError::Corrupt {
                at,
                what: "data asked for outside a blob".into(),
            });
        };
        if blob.done {
            return Ok(match &blob.aborted {
                Some(reason) => Piece::Aborted(reason.clone()),
                None => Piece::End,
            });
        }
        let key = Self::shown(&blob.key);
        if blob.remaining == 0 {
            return Ok(match self.end_of_data().await? {
                Some(reason) => Piece::Aborted(reason),
                None => Piece::End,
            });
        }
        let remaining = blob.remaining;
        let len = self
            .u32(|| format!("a frame header of the data of {key}"))
            .await?;
        if len == ABORT {
            return Ok(Piece::Aborted(self.aborted(&key).await?));
        }
        if len == 0 || len > MAX_FRAME || u64::from(len) > remaining {
            return Err(StreamError::Corrupt {
                at,
                what: format!(
                    "blob {key}: a frame of {len} bytes where 1 to {} are left (at most {MAX_FRAME} a frame)",
                    remaining
                ),
            });
        }
        let mut data = BytesMut::zeroed(len as usize);
        self.fill(&mut data, || format!("a frame of the data of {key}"))
            .await?;
        let stored = self
            .u32(|| format!("a frame checksum of the data of {key}"))
            .await?;
        let computed = crc32c::crc32c(&data);
        if stored != computed {
            let (data_at, size) = self.blob.as_ref().map_or((0, 0), |b| (b.data_at, b.size));
            return Err(StreamError::Corrupt {
                at,
                what: format!(
                    "blob {key}: its frame of {len} bytes at byte {} of its {size} (its data starts at byte \
                     {data_at}) fails its checksum: CRC32C {computed:08x}, the stream says {stored:08x}",
                    size - remaining,
                ),
            });
        }
        if let Some(b) = self.blob.as_mut() {
            b.hasher.update(&data);
            b.remaining -= u64::from(len);
        }
        if self.blob.as_ref().is_some_and(|b| b.remaining == 0)
            && let Some(reason) = self.end_of_data().await?
        {
            // Cut short after its last frame: the data is withheld, as any blob's whose digest is not there.
            return Ok(Piece::Aborted(reason));
        }
        Ok(Piece::Data(data.freeze()))
    }

    /// Reads the reason of an abort (its marker read) and ends the current blob's record with it.
    async fn aborted(&mut self, key: &str) -> Result<String, StreamError> {
        let block = self
            .block(|| format!("the reason blob {key} was cut short"))
            .await?;
        let mut d = Dec::new(&block);
        let reason = d
            .text16("the reason")
            .unwrap_or_else(|e| format!("(unreadable: {e})"));
        if let Some(b) = self.blob.as_mut() {
            b.done = true;
            b.aborted = Some(reason.clone());
        }
        self.seen.left_out += 1;
        self.last_complete = self.blob.as_ref().map(|b| b.key.clone());
        Ok(reason)
    }

    /// Reads what follows the current blob's data: its digest, checked against the data (and the head's, if
    /// any), or an abort marker; returns the abort's reason. The writer may cut a blob short once all its data
    /// is written (an empty blob whose read failed, a read that ran past the size), so the marker may stand
    /// where the digest would: the two are told apart by the digest of the data read, which the writer never
    /// cuts short when it starts with the marker's bytes.
    async fn end_of_data(&mut self) -> Result<Option<String>, StreamError> {
        let at = self.offset;
        let Some(blob) = self.blob.as_ref() else {
            return Ok(None);
        };
        let key = Self::shown(&blob.key);
        let computed = *blob.hasher.finalize().as_bytes();
        let mut stored = [0u8; 32];
        let (first, rest) = stored.split_at_mut(4);
        self.fill(first, || format!("the digest of {key}")).await?;
        if *first == ABORT.to_le_bytes() && computed.get(..4) != Some(first) {
            return self.aborted(&key).await.map(Some);
        }
        self.fill(rest, || format!("the digest of {key}")).await?;
        let Some(blob) = self.blob.as_mut() else {
            return Ok(None);
        };
        if stored != computed {
            return Err(StreamError::Corrupt {
                at,
                what: format!(
                    "blob {key}: its data hashes to BLAKE3 {} where the stream says {}",
                    saltblob::manifest::hex(&computed),
                    saltblob::manifest::hex(&stored)
                ),
            });
        }
        if let Some(expected) = blob.expected
            && expected != computed
        {
            return Err(StreamError::Corrupt {
                at,
                what: format!(
                    "blob {key}: its data hashes to BLAKE3 {} where its head says {}",
                    saltblob::manifest::hex(&computed),
                    saltblob::manifest::hex(&expected)
                ),
            });
        }
        blob.done = true;
        self.seen.blobs += 1;
        self.seen.bytes += blob.size;
        self.last_complete = Some(blob.key.clone());
        Ok(None)
    }

    /// Reads (and checks) the rest of the current blob's data, if any; says whether the record was aborted.
    pub async fn finish_blob(&mut self) -> Result<Option<String>, StreamError> {
        if self.blob.is_none() {
            return Ok(None);
        }
        loop {
            match self.next_piece().await? {
                Piece::Data(_) => {}
                Piece::End => break,
                Piece::Aborted(reason) => {
                    self.blob = None;
                    return Ok(Some(reason));
                }
            }
        }
        self.blob = None;
        Ok(None)
    }

    /// Whether the current blob's data and digest were all read and checked.
    pub fn blob_done(&self) -> bool {
        self.blob.as_ref().is_some_and(|b| b.done)
    }
}

#[cfg(test)]
mod tests;
