//! A store's content held against its layout policy: what it holds ([`census`]), what a policy exposes when
//! nodes are lost ([`plan`], `saltblob plan`), and existing blobs rewritten under the current policy
//! ([`relayout`]). Each works through the public API of [`crate::store::BlobStore`].

pub mod census;
pub mod plan;
pub mod relayout;
