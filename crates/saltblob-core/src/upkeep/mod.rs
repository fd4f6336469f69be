//! What runs beside the API to keep a store sound: garbage collection ([`gc`]: abandoned puts, the reclaim
//! queue, expired blobs) and the consistency check ([`fsck`]). Each adds its methods to
//! [`crate::store::BlobStore`]; an expired blob is deleted through the store's commit primitive, as any delete.
//!
//! Uses every layer below it (`ledger/`, [`crate::store`]); nothing below uses it.

pub mod fsck;
pub mod gc;
