//! The manifest: everything a reader needs to read one version, encoded as in `docs/format.md`.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::base::error::{Error, Result};
use crate::base::version::VersionId;
use crate::encryption::seal::{SEALED_CODEC_BIT, TAG_LEN};
use crate::encryption::{KekRef, Sealing, provider_of_tag, provider_tag};
use crate::format::codec::Codec;
use crate::format::decode::Reader;
use crate::format::layout::{ChunkLayout, Layout, MAX_CHUNK_SIZE, MAX_SALT_LIMIT, MIN_CHUNK_SIZE};

/// Format version byte of a manifest whose body is inline or chunked.
pub const MANIFEST_FORMAT_V1: u8 = 1;
/// Format version byte of a manifest whose body is segmented ([`ManifestBody::Segmented`]); readers of format 1
/// only refuse it loudly.
pub const MANIFEST_FORMAT_V2: u8 = 2;
/// Format version byte of a sealed manifest: format 1 with an encryption block after its body
/// ([`Manifest::sealing`]); readers of formats 1 and 2 only refuse it loudly.
pub const MANIFEST_FORMAT_V3: u8 = 3;
/// Format version byte of a segmented manifest whose segments carry their own encryption blocks (some are
/// sealed): format 2 with, after each segment, a presence byte and that segment's block.
pub const MANIFEST_FORMAT_V4: u8 = 4;
/// Digest algorithm tag of BLAKE3-256 of the blob.
pub const DIGEST_BLAKE3: u8 = 1;
/// Digest algorithm tag of a segmented blob: BLAKE3-256 of its segments' BLAKE3-256 digests, in order
/// ([`segments_digest`]).
pub const DIGEST_BLAKE3_OF_SEGMENTS: u8 = 2;
/// Digest algorithm tag of a sealed blob: BLAKE3 keyed with the version's digest key over the blob's BLAKE3-256
/// ([`crate::encryption::seal::VersionKeys::seal_digest`]).
pub const DIGEST_SEALED_BLAKE3: u8 = 3;
/// Encryption tag of a sealed manifest's encryption block.
const SEALED: u8 = 1;
/// Encryption tag of a plaintext segment in a manifest of format 4 (the tag alone, no block).
const PLAINTEXT: u8 = 0;
/// Most segments one blob may have (S3's limit on the parts of a multipart upload).
pub const MAX_SEGMENTS: usize = 10_000;
/// Largest content type, in bytes.
pub const MAX_CONTENT_TYPE_LEN: usize = 255;
/// Largest total size of user metadata (keys plus values), in bytes.
pub const MAX_METADATA_BYTES: usize = 8 * 1024;

/// The metadata key of a sealed version's sealed metadata (`docs/format.md`, "Sealed metadata"): the hex form of
/// a note sealed under the version's keys ([`crate::encryption::seal::VersionKeys::seal_note`]) whose plaintext
/// is entries encoded as [`encode_entries`] does. A put of a sealed version keeps there what it learnt from the
/// body ([`crate::state::config::PutOptions::late_metadata`]); [`crate::store::BlobStore::sealed_metadata`] opens it.
pub const SEALED_METADATA_KEY: &str = "saltblob:sealed";

const TAG_INLINE: u8 = 0;
const TAG_CHUNKED: u8 = 1;
const TAG_SEGMENTED: u8 = 2;

/// One committed (or about to be committed) version of a blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The version id.
    pub version: VersionId,
    /// Size of the blob in bytes.
    pub size: u64,
    /// When the put started, in Unix microseconds.
    pub created_micros: u64,
    /// When the version expires, in Unix microseconds; `None` for never.
    pub expires_micros: Option<u64>,
    /// BLAKE3-256 of the whole blob; of a sealed one, that keyed with its digest key
    /// ([`crate::encryption::seal::VersionKeys::seal_digest`]).
    pub digest: [u8; 32],
    /// Where the bytes are. A sealed inline body holds the sealed value (ciphertext and tag).
    pub body: ManifestBody,
    /// Optional MIME type.
    pub content_type: Option<String>,
    /// Small user metadata map.
    pub metadata: BTreeMap<String, String>,
    /// How the version is sealed; `None` for plaintext. Never set on a segmented version.
    pub sealing: Option<Sealing>,
}

/// Where a version's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestBody {
    /// The bytes themselves (raw).
    Inline(Bytes),
    /// In chunks.
    Chunked {
        /// Geometry.
        layout: ChunkLayout,
        /// Compression tried on each chunk (each chunk's header says what it got).
        codec: Codec,
        /// Sum of the stored (encoded) chunk sizes.
        stored_bytes: u64,
    },
    /// The concatenation of segments, each written as its own version of the same key (by
    /// [`crate::store::BlobStore::put_segment`]) and composed without copying (by [`crate::store::BlobStore::compose`]).
    Segmented(Vec<Segment>),
}

/// One part of a segmented blob: the bytes of an uncommitted version of the same key, whose chunks the
/// segmented version owns once committed. Encoded as in `docs/format.md`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The version the segment's chunks are stored under.
    pub version: VersionId,
    /// Size in bytes.
    pub size: u64,
    /// BLAKE3-256 of the segment's bytes.
    pub digest: [u8; 32],
    /// Where its bytes are: inline or chunked, never segmented.
    pub body: ManifestBody,
    /// How the segment is sealed (under its own version); `None` for plaintext.
    pub sealing: Option<Sealing>,
}

impl Segment {
    /// Encodes the segment alone (format byte 1, then as in a segmented manifest), for callers that keep
    /// segments between [`crate::store::BlobStore::put_segment`] and [`crate::store::BlobStore::compose`].
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(80);
        let sealed = self.sealing.is_some();
        b.put_u8(if sealed {
            SEGMENT_FORMAT_V2
        } else {
            SEGMENT_FORMAT_V1
        });
        put_segment(&mut b, self, sealed);
        let crc = crc32c::crc32c(&b);
        b.put_u32_le(crc);
        b.freeze()
    }

    /// Decodes what [`Segment::encode`] wrote, verifying its CRC32C and bounds.
    pub fn decode(bytes: &Bytes) -> Result<Segment> {
        let corrupt = |detail: String| Error::corrupt("segment record", detail);
        let body = checked_body(bytes, &corrupt)?;
        let mut r = Reader::new(body, &corrupt);
        let format = r.u8()?;
        if format != SEGMENT_FORMAT_V1 && format != SEGMENT_FORMAT_V2 {
            return Err(corrupt(format!(
                "unknown segment format version {format} (this build reads {SEGMENT_FORMAT_V1} and {SEGMENT_FORMAT_V2})"
            )));
        }
        let segment = r.segment(format == SEGMENT_FORMAT_V2)?;
        r.end()?;
        Ok(segment)
    }

    /// Number of chunks stored under the segment's version (0 when inline).
    pub fn chunk_count(&self) -> u64 {
        match &self.body {
            ManifestBody::Chunked { layout, .. } => layout.chunk_count,
            _ => 0,
        }
    }
}

/// Format byte of a segment encoded alone ([`Segment::encode`]).
const SEGMENT_FORMAT_V1: u8 = 1;
/// Format byte of a segment encoded alone with its encryption block (a sealed one).
const SEGMENT_FORMAT_V2: u8 = 2;

/// The digest of a segmented blob: BLAKE3-256 of its segments' digests, concatenated in order.
pub fn segments_digest(segments: &[Segment]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for s in segments {
        h.update(&s.digest);
    }
    *h.finalize().as_bytes()
}

impl Manifest {
    /// How the blob is laid out, as the CLI and `describe` name it: `inline`, `single-partition`, `salted` or
    /// `segmented`.
    pub fn layout_kind(&self) -> &'static str {
        match &self.body {
            ManifestBody::Inline(_) => "inline",
            ManifestBody::Chunked { layout, .. } if layout.salt_count == 1 => "single-partition",
            ManifestBody::Chunked { .. } => "salted",
            ManifestBody::Segmented(_) => "segmented",
        }
    }

    /// The layout of this version; a segmented version reports the layout of its largest segment (see
    /// [`Manifest::segments`] for all of them).
    pub fn layout(&self) -> Layout {
        match &self.body {
            ManifestBody::Inline(_) => Layout::Inline,
            ManifestBody::Chunked { layout, .. } => Layout::Chunked(*layout),
            ManifestBody::Segmented(segments) => {
                segments
                    .iter()
                    .max_by_key(|s| s.size)
                    .map_or(Layout::Inline, |s| match &s.body {
                        ManifestBody::Chunked { layout, .. } => Layout::Chunked(*layout),
                        _ => Layout::Inline,
                    })
            }
        }
    }

    /// The parts of this version, each as a segment: one for an inline or chunked version (its own), or the
    /// segments of a segmented one. Every version whose chunks this version owns is among them.
    pub fn segments(&self) -> Vec<Segment> {
        match &self.body {
            ManifestBody::Segmented(segments) => segments.clone(),
            body => vec![Segment {
                version: self.version,
                size: self.size,
                digest: self.digest,
                body: body.clone(),
                sealing: self.sealing.clone(),
            }],
        }
    }

    /// Whether chunks stored under `version` (of this manifest's key) belong to this version: its own, or
    /// one of its segments'.
    pub fn owns(&self, version: VersionId) -> bool {
        self.version == version
            || matches!(&self.body, ManifestBody::Segmented(s) if s.iter().any(|s| s.version == version))
    }

    /// How the version is sealed: its own encryption block, or that of its first sealed segment (a multipart blob's
    /// segments are sealed each, under their own versions); `None` when nothing of it is sealed.
    pub fn sealed_by(&self) -> Option<&Sealing> {
        match &self.body {
            ManifestBody::Segmented(segments) => segments.iter().find_map(|s| s.sealing.as_ref()),
            _ => self.sealing.as_ref(),
        }
    }

    /// The version whose keys seal this version's sealed metadata ([`SEALED_METADATA_KEY`]), with its encryption
    /// block: the version itself, or its first sealed segment; `None` when nothing of it is sealed.
    pub fn sealed_part(&self) -> Option<(VersionId, &Sealing)> {
        match &self.body {
            ManifestBody::Segmented(segments) => segments
                .iter()
                .find_map(|s| Some((s.version, s.sealing.as_ref()?))),
            _ => Some((self.version, self.sealing.as_ref()?)),
        }
    }

    /// [`Manifest::sealed_by`] when the version is sealed under a customer key (S3's SSE-C), which every read of
    /// it must give ([`crate::state::config::GetOptions::customer_key`]); `None` otherwise, when a read must give none.
    pub fn sealed_by_customer(&self) -> Option<&Sealing> {
        self.sealed_by()
            .filter(|s| s.kek.provider == crate::encryption::CUSTOMER)
    }

    /// Sum of the stored (encoded) bytes of its chunks.
    pub fn stored_bytes(&self) -> u64 {
        self.segments()
            .iter()
            .map(|s| match &s.body {
                ManifestBody::Chunked { stored_bytes, .. } => *stored_bytes,
                _ => 0,
            })
            .sum()
    }

    /// The digest as lowercase hex.
    pub fn digest_hex(&self) -> String {
        hex(&self.digest)
    }

    /// Whether the version has expired at `now_micros`.
    pub fn is_expired(&self, now_micros: u64) -> bool {
        self.expires_micros.is_some_and(|t| t <= now_micros)
    }

    /// Checks the sizes of the content type and metadata.
    pub fn validate_attributes(&self) -> Result<()> {
        if let Some(ct) = &self.content_type
            && ct.len() > MAX_CONTENT_TYPE_LEN
        {
            return Err(Error::invalid(
                "content type",
                format!("{} bytes; at most {MAX_CONTENT_TYPE_LEN}", ct.len()),
            ));
        }
        let meta: usize = self.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if meta > MAX_METADATA_BYTES {
            return Err(Error::invalid(
                "metadata",
                format!("{meta} bytes; at most {MAX_METADATA_BYTES}"),
            ));
        }
        Ok(())
    }

    /// Encodes the manifest: format version 1, 2 for a segmented body, 3 for a sealed one (a sealed segmented
    /// version is never made: its segments are refused at their put).
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(128);
        let segmented = matches!(self.body, ManifestBody::Segmented(_));
        let sealing = self.sealing.as_ref().filter(|_| !segmented);
        let sealed_segments = matches!(&self.body, ManifestBody::Segmented(s) if s.iter().any(|s| s.sealing.is_some()));
        b.put_u8(match (segmented, sealing) {
            (true, _) if sealed_segments => MANIFEST_FORMAT_V4,
            (true, _) => MANIFEST_FORMAT_V2,
            (false, Some(_)) => MANIFEST_FORMAT_V3,
            (false, None) => MANIFEST_FORMAT_V1,
        });
        b.put_u8(body_tag(&self.body));
        b.put_u128_le(self.version.0);
        b.put_u64_le(self.size);
        b.put_u64_le(self.created_micros);
        b.put_u64_le(self.expires_micros.unwrap_or(0));
        b.put_u8(match (segmented, sealing) {
            (true, _) => DIGEST_BLAKE3_OF_SEGMENTS,
            (false, Some(_)) => DIGEST_SEALED_BLAKE3,
            (false, None) => DIGEST_BLAKE3,
        });
        b.put_slice(&self.digest);
        put_body(&mut b, &self.body, sealing.is_some() || sealed_segments);
        if let Some(sealing) = sealing {
            put_sealing(&mut b, sealing);
        }
        put_str(&mut b, self.content_type.as_deref().unwrap_or(""));
        b.put_u16_le(u16::try_from(self.metadata.len()).unwrap_or(u16::MAX));
        for (k, v) in &self.metadata {
            put_str(&mut b, k);
            put_str(&mut b, v);
        }
        let crc = crc32c::crc32c(&b);
        b.put_u32_le(crc);
        b.freeze()
    }

    /// Decodes a manifest, verifying its trailer CRC32C and every tag. `what` names it in errors.
    pub fn decode(bytes: &Bytes, what: &dyn Fn() -> String) -> Result<Manifest> {
        let corrupt = |detail: String| Error::corrupt(what(), detail);
        let body = checked_body(bytes, &corrupt)?;
        let mut r = Reader::new(body, &corrupt);
        let format = r.u8()?;
        if !(MANIFEST_FORMAT_V1..=MANIFEST_FORMAT_V4).contains(&format) {
            return Err(corrupt(format!(
                "unknown manifest format version {format} (this build reads {MANIFEST_FORMAT_V1} to {MANIFEST_FORMAT_V4})"
            )));
        }
        let sealed = format == MANIFEST_FORMAT_V3;
        let kind = r.u8()?;
        let segmented_format = format == MANIFEST_FORMAT_V2 || format == MANIFEST_FORMAT_V4;
        if segmented_format != (kind == TAG_SEGMENTED) {
            return Err(corrupt(format!(
                "layout tag {kind} in a manifest of format version {format}"
            )));
        }
        let version = VersionId(r.u128()?);
        let size = r.u64()?;
        let created_micros = r.u64()?;
        let expires_micros = Some(r.u64()?).filter(|t| *t != 0);
        let digest_tag = r.u8()?;
        let expected_tag = if kind == TAG_SEGMENTED {
            DIGEST_BLAKE3_OF_SEGMENTS
        } else if sealed {
            DIGEST_SEALED_BLAKE3
        } else {
            DIGEST_BLAKE3
        };
        if digest_tag != expected_tag {
            return Err(corrupt(format!(
                "digest algorithm tag {digest_tag} where {expected_tag} belongs"
            )));
        }
        let digest: [u8; 32] = r
            .take(32)?
            .as_ref()
            .try_into()
            .map_err(|_| corrupt("short digest".into()))?;
        let body = r.body(kind, size, sealed || format == MANIFEST_FORMAT_V4)?;
        let sealing = if sealed {
            Some(r.sealing()?.ok_or_else(|| {
                corrupt("a manifest of format 3 without its encryption block".into())
            })?)
        } else {
            None
        };
        if let ManifestBody::Segmented(segments) = &body {
            let total = segments.iter().try_fold(0u64, |t, s| t.checked_add(s.size));
            if total != Some(size) {
                return Err(corrupt(format!(
                    "{} segments hold {total:?} bytes, size says {size}",
                    segments.len()
                )));
            }
            if segments_digest(segments) != digest {
                return Err(corrupt(
                    "the digest does not match the segments' digests".into(),
                ));
            }
        }
        let content_type = Some(r.str()?).filter(|s| !s.is_empty());
        let mut metadata = BTreeMap::new();
        for _ in 0..r.u16()? {
            let k = r.str()?;
            metadata.insert(k, r.str()?);
        }
        r.end()?;
        Ok(Manifest {
            version,
            size,
            created_micros,
            expires_micros,
            digest,
            body,
            content_type,
            metadata,
            sealing,
        })
    }
}

/// Splits off and checks the CRC32C trailer of an encoded record; returns the bytes it covers.
fn checked_body(bytes: &Bytes, corrupt: &dyn Fn(String) -> Error) -> Result<Bytes> {
    let n = bytes
        .len()
        .checked_sub(4)
        .ok_or_else(|| corrupt(format!("{} bytes, too short to be a manifest", bytes.len())))?;
    let (body, trailer) = bytes.split_at(n);
    let stored_crc = u32::from_le_bytes(
        trailer
            .try_into()
            .map_err(|_| corrupt("no trailer".into()))?,
    );
    let crc = crc32c::crc32c(body);
    if crc != stored_crc {
        return Err(corrupt(format!(
            "trailer crc32c {stored_crc:#010x} does not match the computed {crc:#010x} over {} bytes",
            body.len()
        )));
    }
    Ok(bytes.slice(..n))
}

fn body_tag(body: &ManifestBody) -> u8 {
    match body {
        ManifestBody::Inline(_) => TAG_INLINE,
        ManifestBody::Chunked { .. } => TAG_CHUNKED,
        ManifestBody::Segmented(_) => TAG_SEGMENTED,
    }
}

/// Writes a body's fields (after its tag, which the caller wrote); an inline body of a `sealed` version holds the
/// sealed value, with the sealed bit in its codec tag; the segments of a `sealed` segmented body (format 4) are
/// each followed by their encryption block.
fn put_body(b: &mut BytesMut, body: &ManifestBody, sealed: bool) {
    match body {
        ManifestBody::Inline(data) => {
            b.put_u8(if sealed {
                Codec::None.tag() | SEALED_CODEC_BIT
            } else {
                Codec::None.tag()
            });
            b.put_u32_le(u32::try_from(data.len()).unwrap_or(u32::MAX));
            b.put_slice(data);
        }
        ManifestBody::Chunked {
            layout,
            codec,
            stored_bytes,
        } => {
            b.put_u32_le(layout.chunk_size);
            b.put_u64_le(layout.chunk_count);
            b.put_u32_le(layout.salt_count);
            b.put_u8(codec.tag());
            b.put_u64_le(*stored_bytes);
        }
        ManifestBody::Segmented(segments) => {
            b.put_u32_le(u32::try_from(segments.len()).unwrap_or(u32::MAX));
            for s in segments {
                put_segment(b, s, sealed);
            }
        }
    }
}

/// Writes one segment: version (u128), size (u64), digest (32 bytes), body tag and body; then, `with_sealing`,
/// its encryption block (or a 0 byte for plaintext).
fn put_segment(b: &mut BytesMut, s: &Segment, with_sealing: bool) {
    b.put_u128_le(s.version.0);
    b.put_u64_le(s.size);
    b.put_slice(&s.digest);
    b.put_u8(body_tag(&s.body));
    put_body(b, &s.body, s.sealing.is_some());
    if with_sealing {
        match &s.sealing {
            Some(sealing) => put_sealing(b, sealing),
            None => b.put_u8(PLAINTEXT),
        }
    }
}

/// Writes the encryption block of a sealed manifest (`docs/format.md`, "Manifest encryption block").
fn put_sealing(b: &mut BytesMut, sealing: &Sealing) {
    b.put_u8(SEALED);
    b.put_u8(provider_tag(sealing.kek.provider).unwrap_or(0));
    let name = sealing.kek.name.as_bytes();
    let name = name.get(..usize::from(u8::MAX)).unwrap_or(name);
    b.put_u8(u8::try_from(name.len()).unwrap_or(u8::MAX));
    b.put_slice(name);
    b.put_u32_le(sealing.kek.version);
    let wrapped = &sealing.wrapped;
    let wrapped = wrapped.get(..usize::from(u16::MAX)).unwrap_or(wrapped);
    b.put_u16_le(u16::try_from(wrapped.len()).unwrap_or(u16::MAX));
    b.put_slice(wrapped);
    b.put_slice(&sealing.commitment);
}

/// Metadata entries as the plaintext of a sealed note: a count (u16 LE), then each key and value as a string
/// (u16 LE length, UTF-8 bytes).
pub fn encode_entries(entries: &BTreeMap<String, String>) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_u16_le(u16::try_from(entries.len()).unwrap_or(u16::MAX));
    for (k, v) in entries.iter().take(usize::from(u16::MAX)) {
        put_str(&mut b, k);
        put_str(&mut b, v);
    }
    b.to_vec()
}

/// The entries [`encode_entries`] wrote.
///
/// # Errors
/// [`Error::Corrupt`] when they do not decode.
pub fn decode_entries(bytes: &[u8]) -> Result<BTreeMap<String, String>> {
    let corrupt = |detail: String| Error::corrupt("sealed metadata", detail);
    let bytes = Bytes::copy_from_slice(bytes);
    let mut r = Reader::new(bytes, &corrupt);
    let mut entries = BTreeMap::new();
    for _ in 0..r.u16()? {
        let k = r.str()?;
        entries.insert(k, r.str()?);
    }
    r.end()?;
    Ok(entries)
}

fn put_str(b: &mut BytesMut, s: &str) {
    let len = s.len().min(usize::from(u16::MAX));
    b.put_u16_le(u16::try_from(len).unwrap_or(u16::MAX));
    b.put_slice(s.as_bytes().get(..len).unwrap_or_default());
}

pub use crate::base::shown::hex;

impl Reader<'_> {
    /// A segment, as [`put_segment`] wrote it.
    fn segment(&mut self, with_sealing: bool) -> Result<Segment> {
        let version = VersionId(self.u128()?);
        let size = self.u64()?;
        let digest: [u8; 32] = self
            .take(32)?
            .as_ref()
            .try_into()
            .map_err(|_| self.corrupt("short digest".into()))?;
        let kind = self.u8()?;
        if kind == TAG_SEGMENTED {
            return Err(self.corrupt("a segment that is itself segmented".into()));
        }
        // An inline body says by its codec tag whether it is sealed; the block after it must agree.
        let inline_sealed = kind == TAG_INLINE && with_sealing && self.next_is_sealed_inline();
        let body = self.body(kind, size, inline_sealed)?;
        let sealing = if with_sealing { self.sealing()? } else { None };
        if kind == TAG_INLINE && inline_sealed != sealing.is_some() {
            return Err(self.corrupt(format!(
                "segment {version}: its inline value is {} but its encryption block says {}",
                if inline_sealed { "sealed" } else { "plaintext" },
                if sealing.is_some() {
                    "sealed"
                } else {
                    "plaintext"
                }
            )));
        }
        Ok(Segment {
            version,
            size,
            digest,
            body,
            sealing,
        })
    }

    /// The body of layout tag `kind` for a blob of `size` bytes, checked against the size and bounds; a
    /// `sealed` inline body holds the sealed value, the GCM tag after it, and each segment of a `sealed` segmented
    /// body (format 4) is followed by its encryption block.
    fn body(&mut self, kind: u8, size: u64, sealed: bool) -> Result<ManifestBody> {
        let corrupt = self.corruption();
        Ok(match kind {
            TAG_INLINE => {
                let tag = self.u8()?;
                let (expected_tag, overhead) = if sealed {
                    (Codec::None.tag() | SEALED_CODEC_BIT, TAG_LEN as u64)
                } else {
                    (Codec::None.tag(), 0)
                };
                if tag != expected_tag {
                    return Err(corrupt(format!(
                        "inline payload has codec tag {tag:#04x}; {expected_tag:#04x} belongs in a manifest of \
                         this format"
                    )));
                }
                let len = self.u32()? as usize;
                let data = self.take(len)?;
                if Some(data.len() as u64) != size.checked_add(overhead) {
                    return Err(corrupt(format!(
                        "inline payload holds {} bytes, size says {size}{}",
                        data.len(),
                        if sealed { " (and 16 of tag)" } else { "" }
                    )));
                }
                ManifestBody::Inline(data)
            }
            TAG_CHUNKED => {
                let layout = ChunkLayout {
                    chunk_size: self.u32()?,
                    chunk_count: self.u64()?,
                    salt_count: self.u32()?,
                };
                let tag = self.u8()?;
                let codec = Codec::from_tag(tag)
                    .ok_or_else(|| corrupt(format!("unknown codec tag {tag}")))?;
                let stored_bytes = self.u64()?;
                let expected_chunks = size.div_ceil(u64::from(layout.chunk_size.max(1)));
                // Bounds first: readers size buffers and lists by these fields.
                if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&layout.chunk_size)
                    || !(1..=MAX_SALT_LIMIT).contains(&layout.salt_count)
                {
                    return Err(corrupt(format!(
                        "layout out of bounds: chunk size {} (must be {MIN_CHUNK_SIZE} to {MAX_CHUNK_SIZE}), salt count {} (must be 1 to {MAX_SALT_LIMIT})",
                        layout.chunk_size, layout.salt_count
                    )));
                }
                if layout.chunk_count != expected_chunks
                    || u64::from(layout.salt_count) > layout.chunk_count
                {
                    return Err(corrupt(format!(
                        "inconsistent layout: size {size}, chunk size {}, chunk count {}, salt count {}",
                        layout.chunk_size, layout.chunk_count, layout.salt_count
                    )));
                }
                ManifestBody::Chunked {
                    layout,
                    codec,
                    stored_bytes,
                }
            }
            TAG_SEGMENTED => {
                let count = self.u32()? as usize;
                if count > MAX_SEGMENTS {
                    return Err(corrupt(format!("{count} segments; at most {MAX_SEGMENTS}")));
                }
                let mut segments = Vec::with_capacity(count);
                for _ in 0..count {
                    segments.push(self.segment(sealed)?);
                }
                ManifestBody::Segmented(segments)
            }
            other => return Err(corrupt(format!("unknown layout tag {other}"))),
        })
    }

    /// Whether the next byte, an inline body's codec tag, has the sealed bit (without reading it).
    fn next_is_sealed_inline(&self) -> bool {
        self.peek_u8()
            .is_some_and(|tag| tag & SEALED_CODEC_BIT != 0)
    }

    /// An encryption block as [`put_sealing`] wrote it, or `None` for a plaintext segment's lone tag 0.
    fn sealing(&mut self) -> Result<Option<Sealing>> {
        let tag = self.u8()?;
        if tag == PLAINTEXT {
            return Ok(None);
        }
        if tag != SEALED {
            return Err(self.corrupt(format!(
                "encryption tag {tag}; {PLAINTEXT} (plaintext) or {SEALED} (sealed) belongs there"
            )));
        }
        let provider_tag = self.u8()?;
        let provider = provider_of_tag(provider_tag)
            .ok_or_else(|| self.corrupt(format!("unknown key provider tag {provider_tag}")))?;
        let name_len = usize::from(self.u8()?);
        let name = self.take(name_len)?;
        let name = String::from_utf8(name.to_vec())
            .map_err(|e| self.corrupt(format!("key name is not UTF-8: {e}")))?;
        let version = self.u32()?;
        let wrapped_len = usize::from(self.u16()?);
        let wrapped = self.take(wrapped_len)?.to_vec();
        let commitment: [u8; 32] = self
            .take(32)?
            .as_ref()
            .try_into()
            .map_err(|_| self.corrupt("short key commitment".into()))?;
        if name.is_empty() || wrapped.is_empty() {
            return Err(
                self.corrupt("a sealed manifest without its key name or wrapped key".into())
            );
        }
        Ok(Some(Sealing {
            kek: KekRef {
                provider,
                name,
                version,
            },
            wrapped,
            commitment,
        }))
    }

    fn str(&mut self) -> Result<String> {
        let n = usize::from(self.u16()?);
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|e| self.corrupt(format!("string is not UTF-8: {e}")))
    }
}

#[cfg(test)]
mod tests;
