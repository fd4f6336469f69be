//! Storage keys of the embedded backend. Integers in keys are big-endian so that RocksDB's byte order sorts
//! chunks by (key, version, salt, index) and a version's chunks form one contiguous range.

use bytes::Bytes;
use saltblob_core::{BlobRef, ChunkAddress, Namespace, VersionId};

/// Key of one chunk: key length (u16 BE), key, version (u128 BE), salt (u32 BE), index (u64 BE).
pub fn chunk_key(blob: &BlobRef, salt: u32, index: u64) -> Vec<u8> {
    let mut k = version_prefix(blob);
    k.extend_from_slice(&salt.to_be_bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The address a chunk key encodes, or `None` if it is not a chunk key of this format.
pub fn parse_chunk_key(k: &[u8]) -> Option<ChunkAddress> {
    let key_len = usize::from(u16::from_be_bytes(k.get(..2)?.try_into().ok()?));
    let rest = k.get(2 + key_len..)?;
    if rest.len() != 16 + 4 + 8 || key_len == 0 {
        return None;
    }
    Some(ChunkAddress {
        key: Bytes::copy_from_slice(k.get(2..2 + key_len)?),
        version: VersionId(u128::from_be_bytes(rest.get(..16)?.try_into().ok()?)),
        salt: u32::from_be_bytes(rest.get(16..20)?.try_into().ok()?),
        index: u64::from_be_bytes(rest.get(20..28)?.try_into().ok()?),
    })
}

/// The chunk keys of salts `0..salt_count` of one version lie in `[start, end)`.
pub fn version_range(blob: &BlobRef, salt_count: u32) -> (Vec<u8>, Vec<u8>) {
    let mut start = version_prefix(blob);
    let mut end = start.clone();
    start.extend_from_slice(&0u32.to_be_bytes());
    end.extend_from_slice(&salt_count.to_be_bytes());
    (start, end)
}

fn version_prefix(blob: &BlobRef) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + blob.key.len() + 16 + 12);
    // Keys are at most 1024 bytes, so the length fits.
    k.extend_from_slice(
        &u16::try_from(blob.key.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    k.extend_from_slice(&blob.key);
    k.extend_from_slice(&blob.version.to_be_bytes());
    k
}

/// Key of a record of an internal namespace in the `system` column family: namespace tag, then the key.
/// (Manifests have their own column family, keyed by the blob key alone.)
pub fn system_key(ns: Namespace, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(ns.tag());
    k.extend_from_slice(key);
    k
}

/// The first key after every key that starts with `prefix` (a non-empty prefix whose first byte, a namespace
/// tag, is below 0xff): the exclusive end of a range deletion of the prefix.
pub fn successor_of_prefix(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    // Only for a prefix of 0xff bytes, which no namespace tag is: past the format marker.
    vec![u8::MAX; prefix.len() + 1]
}

/// Key of the format marker in the `system` column family (outside every namespace tag).
pub const FORMAT_MARKER_KEY: &[u8] = b"\xffsaltblob-format";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successors_bound_the_prefix() {
        assert_eq!(successor_of_prefix(b"\x04a"), b"\x04b");
        assert_eq!(successor_of_prefix(b"\x04a\xff\xff"), b"\x04b");
        let start = system_key(Namespace::ReclaimBucket, &[0, 0, 0, 0, 0, 0, 0, 9, 0xff]);
        let end = successor_of_prefix(&start);
        let inside = [&start[..], b"any key"].concat();
        assert!(start < end && inside < end && inside > start);
    }

    #[test]
    fn chunk_keys_parse_back() {
        let blob = BlobRef {
            key: Bytes::from_static(b"some/key"),
            version: VersionId(77),
        };
        let k = chunk_key(&blob, 3, 12);
        assert_eq!(
            parse_chunk_key(&k),
            Some(ChunkAddress {
                key: blob.key.clone(),
                version: blob.version,
                salt: 3,
                index: 12
            })
        );
        assert_eq!(parse_chunk_key(&k[..k.len() - 1]), None);
        assert_eq!(parse_chunk_key(b""), None);
    }

    #[test]
    fn a_version_is_one_contiguous_range_sorted_by_salt_then_index() {
        let blob = BlobRef {
            key: Bytes::from_static(b"k"),
            version: VersionId(5),
        };
        let (start, end) = version_range(&blob, 3);
        let keys: Vec<Vec<u8>> = (0..3)
            .flat_map(|s| (0..300).map(move |i| (s, i)))
            .map(|(s, i)| chunk_key(&blob, s, i))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(keys.iter().all(|k| *k >= start && *k < end));
        assert!(chunk_key(&blob, 3, 0) >= end);
        let other = BlobRef {
            key: Bytes::from_static(b"k"),
            version: VersionId(6),
        };
        assert!(
            chunk_key(&other, 0, 0) >= end,
            "the next version lies outside"
        );
        let longer = BlobRef {
            key: Bytes::from_static(b"k2"),
            version: VersionId(5),
        };
        assert!(
            chunk_key(&longer, 0, 0) >= end,
            "a key with the same start lies outside"
        );
    }
}
