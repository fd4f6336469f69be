//! A record the server stores (a bucket setting's, an access key's): read from the store ([`read_optional`],
//! [`read_setting`]) and decoded with a cursor ([`Reader`]) whose every failure says what broke and at which byte
//! offset.

use bytes::Bytes;
use saltblob_core::{BlobStore, Error, VersionId};

/// The bytes stored under `key`; `None` when there are none.
///
/// # Errors
/// The store's.
pub(crate) async fn read_optional(
    store: &BlobStore,
    key: &str,
) -> saltblob_core::Result<Option<Bytes>> {
    match store.get(key).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The setting record of `bucket` stored under `key`, decoded by `decode`; `None` when there is none, or when it
/// does not decode: then it is logged as a corrupt `what` record, saying what that means (`consequence`).
///
/// # Errors
/// The store's.
pub(crate) async fn read_setting<T>(
    store: &BlobStore,
    bucket: &str,
    key: &str,
    what: &str,
    consequence: &str,
    decode: impl FnOnce(&[u8]) -> Result<T, String>,
) -> saltblob_core::Result<Option<T>> {
    let Some(bytes) = read_optional(store, key).await? else {
        return Ok(None);
    };
    match decode(&bytes) {
        Ok(setting) => Ok(Some(setting)),
        Err(why) => {
            tracing::warn!(bucket, key, why, "corrupt {what} record: {consequence}");
            Ok(None)
        }
    }
}

/// A cursor over a record being decoded.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    /// The offset of the next byte to read.
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "it ends at {} bytes, inside a field of {n} bytes at offset {}",
                self.bytes.len(),
                self.at
            ));
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// Fails unless the record starts with `magic` (read from the start).
    fn magic(&mut self, magic: &[u8; 4]) -> Result<(), String> {
        if self.take(4)? == magic {
            Ok(())
        } else {
            Err(format!(
                "it does not start with \"{}\"",
                String::from_utf8_lossy(magic)
            ))
        }
    }

    /// The head of every record: `magic`, then a format byte among `formats` (one or two), which it returns.
    pub(crate) fn head(&mut self, magic: &[u8; 4], formats: &[u8]) -> Result<u8, String> {
        self.magic(magic)?;
        let format = self.u8()?;
        if !formats.contains(&format) {
            let known = match formats {
                [one] => format!("format {one}"),
                [first, second] => format!("formats {first} and {second}"),
                _ => format!("formats {formats:?}"),
            };
            return Err(format!("format {format}; this server reads {known}"));
        }
        Ok(format)
    }

    /// The head every bucket setting's record starts with (lifecycle rules, CORS rules): `magic`, a format byte
    /// among `formats` (one or two), the bucket record's version (u128) and a rule count (u16) of 1 to
    /// `max_rules`. Returns the format, the version and the count.
    pub(crate) fn bucket_setting_head(
        &mut self,
        magic: &[u8; 4],
        formats: &[u8],
        max_rules: usize,
    ) -> Result<(u8, VersionId, usize), String> {
        let format = self.head(magic, formats)?;
        let version = VersionId(u128::from_le_bytes(self.array()?));
        let count_at = self.at;
        let count = usize::from(u16::from_le_bytes(self.array()?));
        if !(1..=max_rules).contains(&count) {
            return Err(format!(
                "{count} rules at offset {count_at}; 1 to {max_rules} are stored"
            ));
        }
        Ok((format, version, count))
    }

    /// The next `N` bytes, as an array.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// The next byte.
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }

    /// The next `n` bytes, which must be UTF-8.
    pub(crate) fn text(&mut self, n: usize) -> Result<String, String> {
        let at = self.at;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| format!("text that is not UTF-8 at offset {at}"))
    }

    /// Fails naming the trailing bytes unless the whole record was read; `after` names what came last.
    pub(crate) fn end(&self, after: &str) -> Result<(), String> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(format!(
                "{} bytes after {after} (offset {})",
                self.bytes.len() - self.at,
                self.at
            ))
        }
    }
}
