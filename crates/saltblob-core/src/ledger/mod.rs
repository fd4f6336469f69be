//! The store's records beside its manifests, and the rules that read them: the intent a chunked put holds while
//! it writes (`intent/`), the versions kept past their replacement (`kept.rs`), the reclaim queue of replaced, deleted and abandoned versions and the pass that drains
//! it ([`reclaim`]), the expiry index of versions put with a ttl (`expiry.rs`), how they spread over partitions
//! (`shards.rs`), how runners share gc's work on them by lease (`work.rs`) and take turns at periodic tasks
//! (`turns.rs`), and the one rule of whether a version's chunks are still needed (`liveness.rs`).
//!
//! Uses `base/`, `format/`, [`crate::backend`], [`crate::schedule`] and `state/`. The store's protocols
//! (`store/put.rs`, `store/commit.rs`) and upkeep (gc, fsck) build on it.

pub(crate) mod expiry;
pub(crate) mod intent;
pub(crate) mod kept;
pub(crate) mod liveness;
pub mod reclaim;
pub(crate) mod shards;
pub(crate) mod turns;
pub(crate) mod work;
