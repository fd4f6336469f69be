//! A cursor over a record the server stores (a lifecycle record, an access key record) being decoded: every
//! failure says what broke and at which byte offset.

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
