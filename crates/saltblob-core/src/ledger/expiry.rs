//! The expiry index: an entry for each version put with an expiry ([`crate::state::config::PutOptions::ttl`]),
//! due at that expiry, so that gc finds the blobs to delete by reading the due part of the index instead of every
//! manifest.
//!
//! An entry's key is laid out as a reclaim entry's ([`Namespace::ExpiryBucket`]; `reclaim::bucketed_key`): the
//! bucket of its expiry (15 minutes) and the shard of its blob key name its partition, then the expiry time, the
//! version and the blob key; its value is a format byte. The commit that makes such a version current writes the
//! entry first (in its atomic group where it has one), so that a crash after the manifest write leaves no version
//! with an expiry out of the index; an entry whose version never became current, or was replaced or deleted, is
//! dropped when it falls due. A pass over the index ([`crate::ledger::reclaim::run_expiry`]) drains its due
//! buckets as the reclaim queue's: by shard, 16 partitions at once, in the shares a runner holds, a bucket that is
//! over dropped with one partition deletion per shard.
//!
//! Versions put by builds before the index have no entry: gc's pass over every manifest still finds them (every
//! `saltblob gc`; in a server's loop once a day, by turn: `upkeep/gc.rs`).

use bytes::Bytes;

use crate::backend::{Namespace, Precondition, RecordChange};
use crate::base::error::Result;
use crate::format::manifest::Manifest;
use crate::ledger::reclaim::{self, Queue};
use crate::state::Inner;

/// The index entry of `manifest` of blob `key`, and the bucket it lies in; `None` for a manifest without expiry.
fn entry(key: &[u8], manifest: &Manifest) -> Option<(Vec<u8>, Bytes, u64)> {
    let expires = manifest.expires_micros?;
    let k = reclaim::bucketed_key(expires, manifest.version, key);
    let bucket = reclaim::bucket_of(expires);
    Some((
        k,
        Bytes::from_static(&[reclaim::EXPIRY_ENTRY_FORMAT]),
        bucket,
    ))
}

/// Writes the index entry of `manifest` of `key` (and its bucket's marker, once per process), before the commit
/// that makes it current; nothing for a manifest without expiry.
///
/// # Errors
/// The backend's: the commit must not be written then.
pub(crate) async fn index(inner: &Inner, key: &[u8], manifest: &Manifest) -> Result<()> {
    let Some((k, v, bucket)) = entry(key, manifest) else {
        return Ok(());
    };
    reclaim::mark_bucket(inner, Queue::Expiry, bucket).await?;
    inner
        .backend
        .put_record(Namespace::ExpiryBucket, &k, v, &Precondition::None)
        .await?;
    Ok(())
}

/// The writes of [`index`] for a commit that writes them in one atomic group with its manifest, added to
/// `changes`; returns the buckets marked, for [`reclaim::remember_marked`] once the group is written.
pub(crate) fn index_changes(
    inner: &Inner,
    key: &[u8],
    manifest: &Manifest,
    changes: &mut Vec<RecordChange>,
) -> Vec<u64> {
    let Some((k, v, bucket)) = entry(key, manifest) else {
        return Vec::new();
    };
    changes.push(RecordChange::put(
        Namespace::ExpiryBucket,
        k,
        v,
        Precondition::None,
    ));
    reclaim::marker_changes(inner, Queue::Expiry, vec![bucket], changes)
}
