//! Keys: what a key may be ([`validate_key`]). A leaf of the store module.

use bytes::Bytes;

use crate::base::error::{Error, Result};

/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a key: 1 to [`MAX_KEY_LEN`] bytes.
pub fn validate_key(key: &[u8]) -> Result<Bytes> {
    if key.is_empty() {
        return Err(Error::InvalidKey {
            reason: "the key is empty; keys are 1 to 1024 bytes".into(),
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            reason: format!(
                "the key is {} bytes long; keys are 1 to {MAX_KEY_LEN} bytes",
                key.len()
            ),
        });
    }
    Ok(Bytes::copy_from_slice(key))
}
