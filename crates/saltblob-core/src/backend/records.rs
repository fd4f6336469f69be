//! Records: small values under a key in a [`Namespace`] (manifests and saltblob's own bookkeeping), written one
//! at a time under a [`Precondition`] or in atomic groups ([`RecordChange`]), and what a write reports.

use bytes::Bytes;

/// A keyspace of small records.
///
/// A namespace with a [`Namespace::partition_len`] keeps its records in partitions: the first that many bytes of
/// a key name the record's partition. A cluster backend stores each partition apart (so that no one partition
/// takes every write of the namespace), and a scan of such a namespace always gives a prefix that names one
/// partition. Backends that keep every record in one ordered keyspace may ignore partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Namespace {
    /// Blob key → encoded manifest of its current version. Listing by prefix scans it.
    Manifest,
    /// Deferred deletions of superseded versions' chunks, keyed by due time, in one partition: written by
    /// builds before the sharded queue ([`Namespace::ReclaimBucket`]); read and drained, no longer written.
    Reclaim,
    /// A few store-wide bookkeeping values (e.g. how far the reclaim queue has been processed).
    Meta,
    /// Intents of puts in progress, keyed by version, in one partition: written by builds before the sharded
    /// intents ([`Namespace::ShardedIntent`]); read and taken over by gc, no longer written.
    Intent,
    /// Intents of puts in progress: written before a put's first chunk, renewed while it runs, removed after
    /// its commit. An expired intent marks an abandoned put whose chunks garbage collection may reclaim. Key:
    /// shard (1 byte, of the blob key's hash), version, blob key; one partition per shard.
    ShardedIntent,
    /// Intents of segments (parked puts, e.g. multipart parts), which live for hours: apart from the intents of
    /// running puts so that they never hold back the intent scan's low-water mark. Sharded as
    /// [`Namespace::ShardedIntent`].
    ParkedIntent,
    /// The reclaim queue: deferred deletions of superseded versions' chunks. Key: due bucket (u64), shard
    /// (1 byte), due time, version, blob key; one partition per bucket and shard, dropped whole once drained.
    ReclaimBucket,
    /// The expiry index: the blobs put with an expiry, by due time. Key: due bucket (u64), shard (1 byte), expiry
    /// time, version, blob key, as [`Namespace::ReclaimBucket`]'s; one partition per bucket and shard, dropped
    /// whole once drained.
    ExpiryBucket,
    /// Kept versions: the manifest records of versions a put asked to keep when it replaced them (S3's bucket
    /// versioning). Key: partition (the first 8 bytes of the blob key's BLAKE3 hash), blob key, version id
    /// (u128 big-endian); one partition per key (but for hash collisions). See `ledger/kept.rs`.
    Kept,
}

impl Namespace {
    /// The tag byte of the namespace, where a backend needs one. Part of the format: never renumber.
    pub fn tag(self) -> u8 {
        match self {
            Namespace::Manifest => 0,
            Namespace::Reclaim => 1,
            Namespace::Meta => 2,
            Namespace::Intent => 3,
            Namespace::ShardedIntent => 4,
            Namespace::ParkedIntent => 5,
            Namespace::ReclaimBucket => 6,
            Namespace::ExpiryBucket => 7,
            Namespace::Kept => 8,
        }
    }

    /// How many leading bytes of a key name its partition: 0 for a namespace kept in one partition (on a
    /// cluster), and for [`Namespace::Manifest`], whose every record is its own partition. Part of the format.
    pub fn partition_len(self) -> usize {
        match self {
            Namespace::Manifest | Namespace::Reclaim | Namespace::Meta | Namespace::Intent => 0,
            Namespace::ShardedIntent | Namespace::ParkedIntent => 1,
            Namespace::ReclaimBucket | Namespace::ExpiryBucket => 9,
            Namespace::Kept => 8,
        }
    }
}

/// A condition on the current value of a record, checked atomically with the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Write unconditionally.
    None,
    /// Write only if the record does not exist.
    Absent,
    /// Write only if the record's current value is exactly these bytes.
    Equals(Bytes),
}

impl Precondition {
    /// Whether the condition holds for a record whose current value is `current`.
    pub fn holds(&self, current: Option<&Bytes>) -> bool {
        match self {
            Precondition::None => true,
            Precondition::Absent => current.is_none(),
            Precondition::Equals(expected) => current == Some(expected),
        }
    }

    /// The condition a delete checks: `Absent` means nothing for a delete and is treated as `None`.
    pub fn for_delete(&self) -> &Precondition {
        match self {
            Precondition::Absent => &Precondition::None,
            other => other,
        }
    }
}

/// What a record write found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordWrite {
    /// The write happened; this is what it replaced.
    Done(Previous),
    /// The precondition did not hold; nothing was written. Carries the current value.
    ConditionFailed(Option<Bytes>),
}

/// The value a record write replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Previous {
    /// There was no record.
    Absent,
    /// This was the record's value, observed atomically with the write.
    Value(Bytes),
    /// The backend cannot tell without extra cost (see [`BackendInfo::reports_previous`]).
    Unknown,
}

/// One write of an atomic group ([`ChunkStore::write_records`]): a put (`value` given) or a delete (`None`) of
/// one record, if `cond` holds (for a delete, as [`Precondition::for_delete`] reads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordChange {
    /// The record's namespace.
    pub ns: Namespace,
    /// The record's key.
    pub key: Bytes,
    /// The condition on the record's current value.
    pub cond: Precondition,
    /// The new value; `None` deletes the record.
    pub value: Option<Bytes>,
}

impl RecordChange {
    /// A put of `value` under `key` if `cond` holds.
    pub fn put(ns: Namespace, key: impl Into<Bytes>, value: Bytes, cond: Precondition) -> Self {
        Self {
            ns,
            key: key.into(),
            cond,
            value: Some(value),
        }
    }

    /// A delete of `key` if `cond` holds.
    pub fn delete(ns: Namespace, key: impl Into<Bytes>, cond: Precondition) -> Self {
        Self {
            ns,
            key: key.into(),
            cond,
            value: None,
        }
    }

    /// The condition the write checks: `cond`, as a delete reads it for a delete ([`Precondition::for_delete`]).
    pub fn condition(&self) -> &Precondition {
        match self.value {
            Some(_) => &self.cond,
            None => self.cond.for_delete(),
        }
    }
}

/// What an atomic group of record writes found and did ([`ChunkStore::write_records`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupWrite {
    /// Every write happened; for each, in order, what it replaced.
    Done(Vec<Previous>),
    /// The condition of write `index` (the first, in order, that did not hold) failed; nothing was written.
    /// Carries that record's current value.
    ConditionFailed {
        /// The position of the write in the group.
        index: usize,
        /// Its record's current value.
        current: Option<Bytes>,
    },
}
