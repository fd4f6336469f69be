//! Bucket lifecycle (`docs/s3.md`, "Lifecycle"): rules by key prefix, tags and size that expire objects, remove
//! noncurrent versions and lone delete markers, and abort incomplete multipart uploads.
//!
//! - Put/Get/DeleteBucketLifecycleConfiguration (`bucket/lifecycle.rs`) keep a bucket's rules in its lifecycle
//!   record (`keys.rs`, `record.rs`); transitions (one storage class here) are refused with `NotImplemented`,
//!   never stored and ignored.
//! - An object expires, as on AWS, at the first midnight UTC after its creation plus the rule's days (or at its
//!   date); under several rules, at the earliest. GET, HEAD and PUT say when, in `x-amz-expiration`. A
//!   noncurrent version is removed at the first midnight after it became noncurrent (its successor's creation)
//!   plus the rule's days, unless it is among the newest `NewerNoncurrentVersions`.
//! - The server's gc loop runs the pass ([`Expirer`]): each expiry a conditional delete of the version it judged
//!   (in a versioned bucket, a delete marker pinned on it), so an object written again since is never deleted by
//!   an older verdict. Until that pass runs an expired object is still served, as AWS serves one until it
//!   removes it.
//!
//! The record names the bucket record's version it was written for: rules left behind by a deleted bucket are
//! never applied to a new bucket of the same name. Its format is `record.rs`'s.

mod record;
mod rules;

use std::collections::HashMap;

use futures::TryStreamExt;
use s3s::S3Result;
use saltblob_core::{BlobStore, Error, Manifest, PutCondition, PutOptions};

use self::rules::expiration_header;
pub(crate) use self::rules::{Days, Lifecycle};
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

/// The `x-amz-expiration` of object `key` of a bucket with `lifecycle`, stored as `manifest`: always in 24-hour
/// days (a server whose lifecycle day is shorter, to test rules, still shows them, as RGW does).
pub(crate) fn expiration_of(
    lifecycle: Option<&Lifecycle>,
    key: &str,
    manifest: &Manifest,
) -> Option<String> {
    let (rule, at) = lifecycle?.expiry(key, manifest, Days::default())?;
    Some(expiration_header(rule, at))
}

/// What a lifecycle pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expired {
    /// Objects looked at.
    pub scanned: u64,
    /// Objects deleted (a delete marker written, in a versioned bucket).
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Noncurrent versions and lone delete markers removed.
    pub versions: u64,
    /// Incomplete multipart uploads aborted.
    pub uploads: u64,
}

/// Aborts the incomplete multipart uploads of a bucket that its rules made due by a time (`multipart/`, which
/// comes after this module, gives it to [`Expirer::with_days`]); returns how many it aborted.
pub(crate) type AbortUploads = for<'a> fn(
    &'a BlobStore,
    &'a str,
    &'a Lifecycle,
    u64,
    Days,
) -> futures::future::BoxFuture<'a, S3Result<u64>>;

/// The lifecycle passes of one server's gc loop.
///
/// Every expiry is a midnight UTC, so between two midnights only a change of a bucket's rules makes more of its
/// objects expire (an object written since the last pass expires a day later at the earliest): a bucket whose
/// last complete pass ran on the same day (by the store's clock) with the same rules is not scanned again.
#[derive(Default)]
pub struct Expirer {
    /// Per bucket: the day (since the epoch) and the rules of its last complete pass.
    done: HashMap<String, (u64, Lifecycle)>,
    /// The length of a day.
    days: Days,
    /// What aborts incomplete uploads; `None`: nothing does.
    abort_uploads: Option<AbortUploads>,
}

impl std::fmt::Debug for Expirer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expirer")
            .field("buckets_done", &self.done.len())
            .field("days", &self.days)
            .finish_non_exhaustive()
    }
}

impl Expirer {
    /// A fresh expirer of 24-hour days that expires objects and versions but aborts no upload (the server's
    /// loop, [`Expirer::with_days`], does): its first pass scans every bucket with enabled rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh expirer of days `days` that aborts incomplete uploads with `abort_uploads`.
    pub(crate) fn with_days(days: Days, abort_uploads: AbortUploads) -> Self {
        Self {
            done: HashMap::new(),
            days,
            abort_uploads: Some(abort_uploads),
        }
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
        let days = self.days;
        let today = days.of(now);
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
            // Shortened days (tests) are not rounded to their ends: every pass scans.
            if !days.shortened()
                && self
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
            let pass = Pass {
                bucket: &bucket,
                lifecycle: &lifecycle,
                now,
                days,
            };
            if let Err(e) = pass.expire(store, &mut expired).await {
                turn.give_back().await;
                return Err(e);
            }
            if let Some(abort) = self.abort_uploads.filter(|_| lifecycle.aborts_uploads()) {
                match abort(store, &bucket, &lifecycle, now, days).await {
                    Ok(n) => expired.uploads += n,
                    Err(e) => {
                        // The bucket's pass is taken up again by the next one.
                        tracing::warn!(bucket, error = %e, "aborting incomplete uploads failed (will retry)");
                        turn.give_back().await;
                        continue;
                    }
                }
            }
            let until = if days.shortened() {
                now
            } else {
                days.next_midnight(now)
            };
            turn.done(until).await?;
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

/// One bucket's lifecycle pass.
struct Pass<'a> {
    bucket: &'a str,
    lifecycle: &'a Lifecycle,
    now: u64,
    days: Days,
}

impl Pass<'_> {
    /// Expires the objects of the bucket that its rules expired by now, and (in a bucket that keeps versions) the
    /// noncurrent versions and lone delete markers they removed, counting into `expired`.
    async fn expire(&self, store: &BlobStore, expired: &mut Expired) -> saltblob_core::Result<()> {
        let objects = objects_prefix(self.bucket);
        // In a bucket with versioning an expiry writes a delete marker, as S3's: the object's versions stay.
        let state = match store.head(bucket_key(self.bucket)).await {
            Ok(record) => versioning::State::of(&record),
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let versions = state.keeps() && self.lifecycle.removes_versions();
        for prefix in self.lifecycle.scanned_prefixes() {
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
                let store_key = String::from_utf8_lossy(&entry.key);
                if self
                    .expire_current(store, state, &store_key, key, &m)
                    .await?
                {
                    expired.objects += 1;
                    expired.bytes += m.size;
                } else if versions {
                    expired.versions += self.remove_versions(store, &store_key, key).await?;
                }
            }
        }
        Ok(())
    }

    /// Expires current version `m` of object `key` (`store_key` in the store) if a rule expired it by now;
    /// returns whether it did (a delete marker written in a bucket in versioning state `state` that keeps
    /// versions).
    async fn expire_current(
        &self,
        store: &BlobStore,
        state: versioning::State,
        store_key: &str,
        key: &str,
        m: &Manifest,
    ) -> saltblob_core::Result<bool> {
        if versioning::is_delete_marker(m) {
            return Ok(false);
        }
        let Some((_, at)) = self.lifecycle.expiry(key, m, self.days) else {
            return Ok(false);
        };
        if at > self.now {
            return Ok(false);
        }
        let deleted = if state.keeps() {
            let condition = PutCondition::IfVersion(m.version);
            versioning::put_marker(store, state, store_key, condition)
                .await
                .map(drop)
        } else {
            store.delete_version(store_key, m.version).await
        };
        match deleted {
            Ok(()) => Ok(true),
            // Deleted or written again since it was listed: nothing to do.
            Err(Error::NotFound { .. } | Error::PreconditionFailed { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes the noncurrent versions of object `key` that a rule's `NoncurrentVersionExpiration` made due,
    /// then its current delete marker if that leaves it alone and a rule removes lone markers; returns how many
    /// versions it removed.
    async fn remove_versions(
        &self,
        store: &BlobStore,
        store_key: &str,
        key: &str,
    ) -> saltblob_core::Result<u64> {
        let versions = store.versions(store_key).await?;
        let mut removed = 0;
        let mut left = 0;
        // Newest first: each kept version became noncurrent when the one listed before it was written.
        let mut successor: Option<u64> = None;
        let mut newer = 0;
        let mut current: Option<&Manifest> = None;
        for v in &versions {
            let Ok(m) = &v.manifest else {
                // Undecodable: kept, and it keeps the marker company.
                left += 1;
                continue;
            };
            if v.current {
                current = Some(m);
                successor = Some(m.created_micros);
                continue;
            }
            let since = successor.unwrap_or(m.created_micros);
            successor = Some(m.created_micros);
            let due = self
                .lifecycle
                .noncurrent_due(key, m, newer, since, self.now, self.days);
            newer += 1;
            if !due {
                left += 1;
                continue;
            }
            match store.remove_version(store_key, v.version).await {
                Ok(_) => removed += 1,
                Err(Error::VersionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(marker) = current.filter(|m| versioning::is_delete_marker(m))
            && left == 0
            && self
                .lifecycle
                .lone_marker_due(key, marker, self.now, self.days)
        {
            match store.remove_version(store_key, marker.version).await {
                Ok(_) => removed += 1,
                Err(Error::VersionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }
}
