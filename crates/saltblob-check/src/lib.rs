//! # saltblob-check: history checking for saltblob
//!
//! Test tooling that checks saltblob's guarantees from the outside, the way Jepsen-style checkers do:
//! concurrent clients record everything they did, and a checker decides whether a correct store could have
//! returned what they read.
//!
//! # Model
//! - **Values describe themselves** ([`value`]): every put writes a value generated from (key, writer id,
//!   sequence number) whose header names all three and its length, and whose body is regenerable from them.
//!   A reader identifies a value on its own and detects torn, mixed, truncated or foreign bytes; values too
//!   short for a header are identified by their raw bytes.
//! - **Histories** ([`history`]): each operation is recorded as an invocation (before it starts) and a
//!   completion (after it ends) with wall-clock microsecond times, as JSON lines or in memory. Completions
//!   say ok (with what a get read), failed (with whether the error was corruption) or are missing: the
//!   operation is then *indeterminate* (process killed, still running) and may take effect at any later time,
//!   unless a barrier recorded that its process is gone.
//! - **Workload** ([`workload`]): concurrent clients doing random puts, gets and deletes on a few hot keys,
//!   with sizes at the layout's boundaries; [`workload::final_reads`] reads every key once at the end or after
//!   a crash. *Keeping clients* ([`workload::Keeping`], off by default) also put keeping the version replaced,
//!   record the version each acknowledged put created, read versions by id and remove them;
//!   [`workload::final_version_reads`] reads every recorded version once.
//! - **Checker** ([`checker`]): acknowledged writes (ok puts and deletes) must be respected; failed and
//!   indeterminate ones may or may not have happened. For every successful get:
//!   - it must have returned exactly one whole value that some put wrote to that key (else *torn* or
//!     *unknown*), of a put invoked before the get completed (else *future*);
//!   - that value must not have been certainly replaced: no acknowledged put or delete may have both
//!     begun after the value's put ended and completed before the get began (else *stale*: last committed
//!     wins, deletes are not undone);
//!   - NotFound is wrong if an acknowledged put completed before the get began and no delete could have
//!     taken effect after it (else *lost*);
//!   - a corruption error is always a violation (*corrupt*).
//!
//!   Kept versions: a version V is known by the acknowledged put P that reported creating it. V is *destroyed*
//!   only by a removal of V, or by a plain (non-keeping) put or a delete while V is current; V stops being
//!   current when any put or delete replaces it, and becomes current again only when a removal of the current
//!   version promotes it. A plain put or delete may destroy V unless *shielded*: an acknowledged keeping put
//!   began after P ended and completed before it began, and no removal that may promote (all but those found
//!   to promote nothing) could have taken effect between the two.
//!   For every successful get by version:
//!   - a value must be exactly P's (else *wrong version*);
//!   - no such version is wrong if P completed before the get began and nothing that may have destroyed V
//!     (a removal of V of any outcome but one that found no such version, an unshielded plain put or delete
//!     that ended after P began) began before the get ended (else *lost version*);
//!   - P's value is wrong after an acknowledged removal that found V completed before the get began, unless
//!     another removal that may have promoted V before it was removed was still running when the get began
//!     (else *resurrected*; plain gets of P's value too);
//!   - a plain get's value that the stale rule would flag is accepted when a keeping put may have kept it and a
//!     removal may have promoted it after every write the stale rule names; a removal may leave the key empty,
//!     as a delete does, for the lost rule.
//! - **Scenarios** ([`scenario`]): ready-made checked loads the backends' suites share (hot keys with a
//!   background gc; keeping clients with a background gc).
//! - **Broken backends** ([`broken`]): wrappers that commit the manifest before the chunks, serve stale
//!   manifests, lose acknowledged commits or drop kept-version records, to show that the checker catches each.
//!
//! ```
//! use std::sync::Arc;
//! use saltblob_check::{MemorySink, WorkloadConfig, check, key_set, run};
//! use saltblob_core::{BlobStore, MemoryStore, StoreConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
//! let sink = MemorySink::new();
//! let mut config = WorkloadConfig::new(key_set("hot/", 2));
//! config.ops_per_client = Some(50);
//! run(store, &config, Arc::new(sink.clone())).await;
//! let report = check(&sink.history());
//! assert!(report.is_clean(), "{report}");
//! # }
//! ```

pub mod broken;
pub mod checker;
pub mod history;
pub mod scenario;
pub mod value;
pub mod workload;

pub use checker::{Report, Violation, ViolationKind, check, context, describe_op};
pub use history::{
    Event, FileSink, GetResult, History, HistorySink, MemorySink, Op, OpId, OpKind, OpResult,
    Outcome, SnapshotSink,
};
pub use value::{Identified, StreamVerifier, ValueId, generate, verify};
pub use workload::{
    Client, Keeping, OpMix, SizeMix, Stats, Stop, VersionLog, WorkloadConfig, final_reads,
    final_version_reads, key_set, run,
};
