//! The bytes saltblob stores, and nothing that stores them: the one bounds-checked record decoder (`decode.rs`),
//! the chunk format ([`codec`]), the layout policy and the arithmetic of chunks, salts and ranges ([`layout`]),
//! and the manifest ([`manifest`]). `docs/format.md` is the specification; a change here is a format change.
//!
//! Uses `base/` and the AEAD of [`crate::encryption`] (a sealed chunk's and manifest's layout), nothing else.

pub mod codec;
pub(crate) mod decode;
pub mod layout;
pub mod manifest;
