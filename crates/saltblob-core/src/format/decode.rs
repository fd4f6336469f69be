//! The one decoder of saltblob's records ([`Reader`]): bounds-checked reads of fixed-width integers that report
//! short or overlong input as [`Error::Corrupt`] with evidence (how many bytes were needed and left). Manifests,
//! intent records and reclaim entries decode through it; integers are little-endian, except in record keys,
//! which are big-endian so that they sort by value.

use bytes::{Buf, Bytes};

use crate::base::error::{Error, Result};

/// A bounds-checked reader over one record; `corrupt` builds the error that names the record.
pub(crate) struct Reader<'a> {
    buf: Bytes,
    corrupt: &'a dyn Fn(String) -> Error,
}

impl<'a> Reader<'a> {
    /// A reader of `buf`, whose errors `corrupt` makes.
    pub(crate) fn new(buf: Bytes, corrupt: &'a dyn Fn(String) -> Error) -> Self {
        Self { buf, corrupt }
    }

    /// The error of this record, with `detail` as evidence.
    pub(crate) fn corrupt(&self, detail: String) -> Error {
        (self.corrupt)(detail)
    }

    /// What builds this record's errors, for a caller that reads on while it builds one.
    pub(crate) fn corruption(&self) -> &'a dyn Fn(String) -> Error {
        self.corrupt
    }

    fn need(&self, n: usize) -> Result<()> {
        if self.buf.remaining() < n {
            return Err(self.corrupt(format!(
                "truncated: needed {n} more bytes, {} left",
                self.buf.remaining()
            )));
        }
        Ok(())
    }

    /// The next byte, left unread; `None` at the end.
    pub(crate) fn peek_u8(&self) -> Option<u8> {
        self.buf.first().copied()
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        self.need(1)?;
        Ok(self.buf.get_u8())
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        self.need(2)?;
        Ok(self.buf.get_u16_le())
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        self.need(4)?;
        Ok(self.buf.get_u32_le())
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        self.need(8)?;
        Ok(self.buf.get_u64_le())
    }

    pub(crate) fn u128(&mut self) -> Result<u128> {
        self.need(16)?;
        Ok(self.buf.get_u128_le())
    }

    /// A big-endian u64, as record keys hold them.
    pub(crate) fn u64_be(&mut self) -> Result<u64> {
        self.need(8)?;
        Ok(self.buf.get_u64())
    }

    /// A big-endian u128, as record keys hold them.
    pub(crate) fn u128_be(&mut self) -> Result<u128> {
        self.need(16)?;
        Ok(self.buf.get_u128())
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<Bytes> {
        self.need(n)?;
        Ok(self.buf.split_to(n))
    }

    /// Everything not read yet; fails if that is nothing (a record key's trailing blob key).
    pub(crate) fn rest_nonempty(&mut self) -> Result<Bytes> {
        if !self.buf.has_remaining() {
            return Err(self.corrupt("truncated: no key after the fixed fields".into()));
        }
        Ok(self.buf.split_off(0))
    }

    /// Fails unless every byte was read.
    pub(crate) fn end(&self) -> Result<()> {
        if self.buf.has_remaining() {
            return Err(self.corrupt(format!(
                "{} unexpected bytes after the last field",
                self.buf.remaining()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_input_is_corrupt_with_evidence() {
        let corrupt = |d: String| Error::corrupt("test record", d);
        let mut r = Reader::new(Bytes::from_static(&[1, 2, 0, 0, 0, 9]), &corrupt);
        assert_eq!(r.u8().ok(), Some(1));
        assert_eq!(r.u32().ok(), Some(2));
        let err = r.u64().expect_err("short").to_string();
        assert!(
            err.contains("test record") && err.contains("needed 8 more bytes, 1 left"),
            "{err}"
        );
        assert!(r.end().is_err());
        assert_eq!(r.rest_nonempty().ok(), Some(Bytes::from_static(&[9])));
        assert!(r.end().is_ok() && r.rest_nonempty().is_err());
        let mut be = Reader::new(Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 0]), &corrupt);
        assert_eq!(be.u64_be().ok(), Some(256));
    }
}
