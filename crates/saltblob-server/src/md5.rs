//! MD5, the digest of S3's ETags (a single put's, each part's) and Content-MD5, through aws-lc's assembly.
//!
//! A put's body is hashed at the speed of one core, and MD5 cannot be split: on this project's x86-64 machines
//! aws-lc hashes at about 760 MB/s against 640 for the pure-Rust `md-5` (the same body through S3 is bounded by
//! it; docs/bench/journal/s3.md). aws-lc is already linked (rustls and the encryption at rest use it); this module
//! holds the crate's only `unsafe` code, three calls into its C API with pointers to memory this module owns.
#![allow(unsafe_code)]

use aws_lc_sys::{MD5_CTX, MD5_Final, MD5_Init, MD5_Update};

/// An MD5 being computed.
pub(crate) struct Md5(MD5_CTX);

impl Md5 {
    /// The MD5 of nothing yet.
    pub(crate) fn new() -> Self {
        let mut ctx = MD5_CTX {
            h: [0; 4],
            Nl: 0,
            Nh: 0,
            data: [0; 64],
            num: 0,
        };
        // SAFETY: `ctx` is an MD5_CTX this function owns; MD5_Init only writes its fields (and always returns 1).
        unsafe { MD5_Init(&mut ctx) };
        Self(ctx)
    }

    /// Hashes `bytes` after what was hashed before.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        // SAFETY: the context was initialized by `new`; `bytes` is valid for `bytes.len()` bytes and only read.
        unsafe { MD5_Update(&mut self.0, bytes.as_ptr().cast(), bytes.len()) };
    }

    /// The digest of everything hashed.
    pub(crate) fn finalize(mut self) -> [u8; 16] {
        let mut digest = [0u8; 16];
        // SAFETY: the context was initialized by `new`; `digest` has the 16 bytes MD5_Final writes.
        unsafe { MD5_Final(digest.as_mut_ptr(), &mut self.0) };
        digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use s3s::crypto::Checksum as _;

    fn md5_hex(parts: &[&[u8]]) -> String {
        let mut h = Md5::new();
        for p in parts {
            h.update(p);
        }
        saltblob_core::manifest::hex(&h.finalize())
    }

    /// The test suite of RFC 1321 (appendix A.5), each input also fed in two parts.
    #[test]
    fn rfc_1321_test_suite() {
        let suite: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, digest) in suite {
            assert_eq!(md5_hex(&[input.as_bytes()]), digest, "{input:?}");
            let (a, b) = input.as_bytes().split_at(input.len() / 2);
            assert_eq!(md5_hex(&[a, b]), digest, "{input:?} in two parts");
        }
    }

    proptest! {
        /// Any bytes fed in any parts give the digest of the pure-Rust implementation fed them at once.
        #[test]
        fn agrees_with_the_rust_implementation(
            bytes in proptest::collection::vec(any::<u8>(), 0..5000),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut ours = Md5::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                ours.update(&bytes[from..cut]);
                from = cut;
            }
            let mut rust = s3s::crypto::Md5::new();
            rust.update(&bytes);
            prop_assert_eq!(ours.finalize(), rust.finalize());
        }
    }
}
