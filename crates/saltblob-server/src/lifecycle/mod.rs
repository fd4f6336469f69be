//! Bucket lifecycle (`docs/s3.md`, "Lifecycle"): expiration rules by key prefix and age.
//!
//! - Put/Get/DeleteBucketLifecycleConfiguration (`bucket/lifecycle.rs`) keep a bucket's rules in its lifecycle
//!   record (`keys.rs`, `record.rs`). A rule is `Expiration` in `Days` with a `Filter` of a `Prefix` (or none: the whole
//!   bucket) and a `Status`; every other element (transitions, tags, sizes, noncurrent versions, a `Date`,
//!   multipart aborts) is refused with `NotImplemented` naming it, never stored and ignored.
//! - An object expires, as on AWS, at the first midnight UTC after its creation plus the rule's days; under
//!   several rules, at the earliest. GET, HEAD and PUT say when, in `x-amz-expiration`.
//! - The server's gc loop deletes the expired objects ([`Expirer`]): each with a conditional delete of
//!   the version it judged, so an object written again since is never deleted by an older verdict. Until that
//!   pass runs an expired object is still served, as AWS serves one until it removes it.
//!
//! The record names the bucket record's version it was written for: rules left behind by a deleted bucket are
//! never applied to a new bucket of the same name. Its format is `record.rs`'s.

mod record;
mod rules;

use std::collections::HashMap;

use futures::TryStreamExt;
use s3s::S3Result;
use saltblob_core::{BlobStore, Error, Manifest, PutCondition, PutOptions};

pub(crate) use self::rules::Lifecycle;
use self::rules::{DAY_MICROS, expiration_header};
use crate::error::from_store;
use crate::keys::{BUCKET_PREFIX, bucket_key, lifecycle_key, objects_prefix};
use crate::record_reader::read_setting;
use crate::versioning;

/// The content type of lifecycle records.
const CONTENT_TYPE: &str = "application/x-saltblob-lifecycle";

/// The lifecycle record of `bucket` as stored, whatever bucket record it was written for; `None` when there is
/// none or it does not decode (logged: a damaged record expires nothing).
///
/// # Errors
/// The store's.
pub(crate) async fn read_record(store: &BlobStore, bucket: &str) -> S3Result<Option<Lifecycle>> {
    let key = lifecycle_key(bucket);
    let what = "lifecycle";
    read_setting(
        store,
        bucket,
        &key,
        what,
        "its rules are not applied",
        Lifecycle::decode,
    )
    .await
    .map_err(from_store)
}

/// The lifecycle of the bucket whose record is `bucket_record`, read from the store now.
///
/// # Errors
/// The store's.
pub(crate) async fn current(
    store: &BlobStore,
    bucket: &str,
    bucket_record: &Manifest,
) -> S3Result<Option<Lifecycle>> {
    Ok(read_record(store, bucket)
        .await?
        .filter(|l| l.bucket_version == bucket_record.version))
}

/// Writes `lifecycle` as `bucket`'s record.
///
/// # Errors
/// The store's.
pub(crate) async fn put_record(
    store: &BlobStore,
    bucket: &str,
    lifecycle: &Lifecycle,
) -> saltblob_core::Result<()> {
    let opts = PutOptions::new().with_content_type(CONTENT_TYPE);
    store
        .put(lifecycle_key(bucket), lifecycle.encode(), &opts)
        .await?;
    Ok(())
}

/// Deletes `bucket`'s record (whether or not it has one).
///
/// # Errors
/// The store's.
pub(crate) async fn delete_record(store: &BlobStore, bucket: &str) -> saltblob_core::Result<()> {
    store.delete(lifecycle_key(bucket)).await?;
    Ok(())
}

/// The `x-amz-expiration` of object `key` of a bucket with `lifecycle`, stored as `manifest`.
pub(crate) fn expiration_of(
    lifecycle: Option<&Lifecycle>,
    key: &str,
    manifest: &Manifest,
) -> Option<String> {
    let (rule, at) = lifecycle?.expiry(key, manifest.created_micros)?;
    Some(expiration_header(rule, at))
}

/// What a lifecycle pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Objects looked at.
    pub scanned: u64,
    /// Objects deleted.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The lifecycle passes of one server's gc loop.
///
/// Every expiry is a midnight UTC, so between two midnights only a change of a bucket's rules makes more of its
/// objects expire (an object written since the last pass expires a day later at the earliest): a bucket whose
/// last complete pass ran on the same day (by the store's clock) with the same rules is not scanned again.
#[derive(Debug, Default)]
pub struct Expirer {
    /// Per bucket: the day (since the epoch) and the rules of its last complete pass.
    done: HashMap<String, (u64, Lifecycle)>,
}

impl Expirer {
    /// A fresh expirer: its first pass scans every bucket with enabled rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes every object whose lifecycle expiry has passed on the store's clock, in every bucket with enabled
    /// rules (but those already passed over today with the same rules), each with a conditional delete of the
    /// version judged: an object written again since stays.
    ///
    /// # Errors
    /// The store's, when a scan or a delete fails; what was deleted before stays deleted, and the bucket is
    /// scanned again by the next pass.
    pub async fn pass(&mut self, store: &BlobStore) -> saltblob_core::Result<Expired> {
        let now = store.config().clock.now_micros();
        let today = now / DAY_MICROS;
        let buckets: Vec<(String, Manifest)> = store
            .list_stream(BUCKET_PREFIX.as_bytes())
            .try_filter_map(|entry| async move {
                let name = entry.key.get(BUCKET_PREFIX.len()..).unwrap_or_default();
                Ok(match (std::str::from_utf8(name), entry.manifest) {
                    (Ok(name), Ok(m)) => Some((name.to_owned(), m)),
                    _ => None,
                })
            })
            .try_collect()
            .await?;
        // The listing is in key order, so in name order: a deleted bucket is forgotten by a binary search.
        self.done.retain(|bucket, _| {
            buckets
                .binary_search_by(|(b, _)| b.as_str().cmp(bucket))
                .is_ok()
        });
        let mut expired = Expired::default();
        for (bucket, record) in buckets {
            let lifecycle = match current(store, &bucket, &record).await {
                Ok(Some(l)) => l,
                Ok(None) => {
                    self.done.remove(&bucket);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(bucket, error = %e, "reading the lifecycle failed (will retry)");
                    continue;
                }
            };
            if self
                .done
                .get(&bucket)
                .is_some_and(|(day, rules)| *day == today && *rules == lifecycle)
            {
                continue;
            }
            // One runner of the store (gateway) passes over a bucket per day and set of rules: the others skip
            // it while its turn holds (`ledger/turns.rs` in saltblob-core), and take it up if the pass fails.
            let token = blake3::hash(&lifecycle.encode());
            let Some(turn) = store
                .take_turn(&turn_name(&bucket), token.as_bytes())
                .await?
            else {
                continue;
            };
            if let Err(e) = expire_bucket(store, &bucket, &lifecycle, now, &mut expired).await {
                turn.give_back().await;
                return Err(e);
            }
            turn.done(today.saturating_add(1).saturating_mul(DAY_MICROS))
                .await?;
            self.done.insert(bucket, (today, lifecycle));
        }
        Ok(expired)
    }
}

/// The name of the turn of `bucket`'s daily pass.
fn turn_name(bucket: &str) -> String {
    format!("s3-lifecycle/{bucket}")
}

/// One pass of a fresh [`Expirer`]: deletes every object whose lifecycle expiry has passed.
///
/// # Errors
/// As [`Expirer::pass`].
pub async fn expire_objects(store: &BlobStore) -> saltblob_core::Result<Expired> {
    Expirer::new().pass(store).await
}

/// Deletes the objects of `bucket` that `lifecycle` expired by `now`, counting into `expired`.
async fn expire_bucket(
    store: &BlobStore,
    bucket: &str,
    lifecycle: &Lifecycle,
    now: u64,
    expired: &mut Expired,
) -> saltblob_core::Result<()> {
    let objects = objects_prefix(bucket);
    // In a bucket with versioning an expiry writes a delete marker, as S3's: the object's versions stay.
    let state = match store.head(bucket_key(bucket)).await {
        Ok(record) => versioning::State::of(&record),
        Err(Error::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    for prefix in lifecycle.scanned_prefixes() {
        let scanned = format!("{objects}{prefix}");
        let mut listing = store.list_stream(scanned.as_bytes());
        while let Some(entry) = listing.try_next().await? {
            expired.scanned += 1;
            let Ok(m) = entry.manifest else { continue };
            let Some(key) = entry
                .key
                .get(objects.len()..)
                .and_then(|k| std::str::from_utf8(k).ok())
            else {
                continue;
            };
            let Some((_, at)) = lifecycle.expiry(key, m.created_micros) else {
                continue;
            };
            if at > now || versioning::is_delete_marker(&m) {
                continue;
            }
            let deleted = match state {
                versioning::State::Unversioned => store.delete_version(&entry.key, m.version).await,
                state => {
                    let store_key = String::from_utf8_lossy(&entry.key);
                    let condition = PutCondition::IfVersion(m.version);
                    versioning::put_marker(store, state, &store_key, condition)
                        .await
                        .map(drop)
                }
            };
            match deleted {
                Ok(()) => {
                    expired.objects += 1;
                    expired.bytes += m.size;
                }
                // Deleted or written again since it was listed: nothing to do.
                Err(Error::NotFound { .. } | Error::PreconditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
