//! The sweep of the multipart uploads of every bucket, run with the server's periodic gc: it removes finished
//! uploads once kept long enough, aborts idle ones, resolves those whose complete stopped half-way, and
//! finishes aborts that stopped half-way; and DeleteBucket's abort of all the uploads of a bucket.

use std::collections::HashSet;

use futures::TryStreamExt;
use futures::future::BoxFuture;
use s3s::{S3ErrorCode, S3Result, s3_error};
use saltblob_core::units::micros;
use saltblob_core::{BlobStore, ListEntry};

use super::abort::{abort, finish_abort};
use super::cleanup::clean_up;
use super::compose::ComposeRecord;
use super::upload::{self, State, Upload};
use super::{FINISHED_KEPT, UPLOAD_IDLE_EXPIRY, complete, completing_window, now};
use crate::error::from_store;
use crate::keys::{MULTIPART_PREFIX, object_key, uploads_prefix};
use crate::lifecycle::{Days, Lifecycle};
use crate::rereads::SWEEP;

/// What the sweep or a bucket deletion does with one upload record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// The periodic sweep: aborts idle uploads, resolves old `completing` ones, removes finished ones once
    /// kept long enough.
    Expired,
    /// DeleteBucket: aborts every upload now (a `completing` one once its compose can no longer commit) and
    /// removes every record.
    All,
}

/// Removes the records of finished uploads kept for [`FINISHED_KEPT`], aborts uploads idle for
/// [`UPLOAD_IDLE_EXPIRY`], resolves `completing` uploads whose compose can no longer commit, and finishes aborts
/// that stopped half-way, in every bucket (also in buckets deleted meanwhile): run with the server's periodic
/// gc. Returns how many upload records it removed. A record that does not decode, or whose handling fails, is
/// logged and skipped: it never stops the sweep.
///
/// # Errors
/// A failed listing of the records.
pub(crate) async fn sweep_expired_uploads(store: &BlobStore) -> S3Result<u64> {
    let mut removed = 0;
    let mut after: Option<bytes::Bytes> = None;
    loop {
        // The next bucket with upload records: `s3/u/<bucket>/`, then jump past it.
        let first = store
            .list_stream_after(MULTIPART_PREFIX.as_bytes(), after.clone())
            .try_next()
            .await
            .map_err(from_store)?;
        let Some(entry) = first else {
            return Ok(removed);
        };
        let rest = entry.key.get(MULTIPART_PREFIX.len()..).unwrap_or_default();
        let Some(bucket) = rest
            .iter()
            .position(|b| *b == b'/')
            .and_then(|end| std::str::from_utf8(rest.get(..end)?).ok())
        else {
            // Not a record of this server's: step past it.
            after = Some(entry.key);
            continue;
        };
        removed += sweep_bucket(store, bucket, Sweep::Expired).await?;
        let mut past = uploads_prefix(bucket).into_bytes();
        past.push(0xff);
        after = Some(past.into());
    }
}

/// Runs `mode` over the upload records of `bucket`; returns how many it removed.
///
/// # Errors
/// A failed listing of the records; with [`Sweep::All`], any upload it could not remove (`OperationAborted`
/// for one whose compose may still commit, `BucketNotEmpty` for one that committed).
async fn sweep_bucket(store: &BlobStore, bucket: &str, mode: Sweep) -> S3Result<u64> {
    let records = upload::upload_records(bucket);
    let mut entries = store.list_stream(records.as_bytes());
    let mut removed = 0;
    while let Some(ListEntry { key, manifest }) = entries.try_next().await.map_err(from_store)? {
        let Some(id) = upload::parse_upload_key(bucket, &key) else {
            continue;
        };
        let mut outcome = match manifest.map_err(from_store) {
            Ok(manifest) => match Upload::decode(store, id, &key, manifest).await {
                Ok(upload) => sweep_one(store, bucket, upload, mode).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        // Another request moved the upload on meanwhile (an abort, a complete): handle it as it is now.
        let mut rereads = SWEEP.start();
        while rereads.next_attempt().await {
            match outcome {
                Err(e) if e.code() == &S3ErrorCode::NoSuchUpload => {
                    outcome = match Upload::read_any(store, bucket, id).await {
                        Ok(Some(upload)) => sweep_one(store, bucket, upload, mode).await,
                        Ok(None) => Ok(false),
                        Err(e) => Err(e),
                    };
                }
                _ => break,
            }
        }
        match outcome {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) if mode == Sweep::All => return Err(e),
            Err(e) => {
                tracing::warn!(bucket, upload = id, error = %e, "the sweep skips an upload record it could not handle");
            }
        }
    }
    Ok(removed)
}

/// Handles one upload record for the sweep or a bucket deletion; returns whether it removed it.
async fn sweep_one(store: &BlobStore, bucket: &str, upload: Upload, mode: Sweep) -> S3Result<bool> {
    let key = object_key(bucket, &upload.key)?;
    let age = now(store).saturating_sub(upload.written_micros());
    let all = mode == Sweep::All;
    let aborting = match upload.state {
        State::Open if all || age > micros(UPLOAD_IDLE_EXPIRY) => {
            match abort(store, bucket, &key, upload).await {
                Ok(aborting) => aborting,
                // Completed meanwhile, or moved on: the next sweep sees it.
                Err(e) if !all => {
                    tracing::debug!(error = %e, "an idle upload moved on while the sweep aborted it");
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        State::Completing if all || age > completing_window(store) => {
            match abort(store, bucket, &key, upload).await {
                Ok(aborting) => aborting,
                Err(e) if e.code() == &S3ErrorCode::NoSuchUpload => {
                    // Its compose had committed: the upload is completed now, and removed once kept long enough.
                    if all {
                        return Err(s3_error!(
                            BucketNotEmpty,
                            "The bucket you tried to delete is not empty: a multipart upload completed into it"
                        ));
                    }
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        State::Aborting => upload,
        State::Completed | State::Aborted if all || age > micros(FINISHED_KEPT) => {
            remove_finished(store, bucket, &key, &upload).await?;
            return Ok(true);
        }
        State::Open | State::Completing | State::Completed | State::Aborted => return Ok(false),
    };
    finish_abort(store, bucket, &key, &aborting).await;
    if all {
        remove_finished(store, bucket, &key, &aborting).await?;
        return Ok(true);
    }
    Ok(false)
}

/// Removes a finished (or `aborting`) upload: gives up what requests that raced it left behind (every segment
/// the object it composed does not own), then deletes its compose record, its index entry and its record.
async fn remove_finished(
    store: &BlobStore,
    bucket: &str,
    key: &str,
    upload: &Upload,
) -> S3Result<()> {
    let mut keep = HashSet::new();
    if upload.state == State::Completed
        && let Some(record) = complete::compose_record(store, bucket, upload).await?
    {
        keep.extend(record.segments.iter().map(|s| s.version));
    }
    clean_up(store, bucket, &upload.id, key, &keep).await;
    ComposeRecord::delete_all(store, bucket, &upload.id).await?;
    upload.delete(store, bucket).await
}

/// Aborts every multipart upload of `bucket` and removes all its upload records, for DeleteBucket (which has
/// checked that the bucket holds no object).
///
/// # Errors
/// `OperationAborted` (409) while a complete of one of its uploads may still commit; `BucketNotEmpty` if one
/// did; a store error.
pub(crate) async fn abort_all_uploads(store: &BlobStore, bucket: &str) -> S3Result<()> {
    sweep_bucket(store, bucket, Sweep::All).await?;
    Ok(())
}

/// Aborts the open multipart uploads of `bucket` that `lifecycle`'s `AbortIncompleteMultipartUpload` made due
/// by `now` (days counted from each upload's initiation, in days `days`); returns how many it aborted. The
/// records stay until the sweep removes them, as after an AbortMultipartUpload. The lifecycle pass's
/// [`crate::lifecycle::AbortUploads`].
pub(crate) fn abort_due_uploads<'a>(
    store: &'a BlobStore,
    bucket: &'a str,
    lifecycle: &'a Lifecycle,
    now: u64,
    days: Days,
) -> BoxFuture<'a, S3Result<u64>> {
    Box::pin(async move {
        let records = upload::upload_records(bucket);
        let mut entries = store.list_stream(records.as_bytes());
        let mut aborted = 0;
        while let Some(ListEntry { key, manifest }) =
            entries.try_next().await.map_err(from_store)?
        {
            let (Some(id), Ok(manifest)) = (upload::parse_upload_key(bucket, &key), manifest)
            else {
                continue;
            };
            let initiated = upload::initiated_millis(id).saturating_mul(1000);
            let upload = match Upload::decode(store, id, &key, manifest).await {
                Ok(upload) if upload.state == State::Open => upload,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(bucket, upload = id, error = %e, "the lifecycle pass skips an upload record it could not read");
                    continue;
                }
            };
            if !lifecycle.abort_due(&upload.key, initiated, now, days) {
                continue;
            }
            let object = object_key(bucket, &upload.key)?;
            match abort(store, bucket, &object, upload).await {
                Ok(aborting) => {
                    finish_abort(store, bucket, &object, &aborting).await;
                    aborted += 1;
                }
                // Completed or aborted meanwhile.
                Err(e) => {
                    tracing::debug!(error = %e, "an upload moved on while the lifecycle pass aborted it");
                }
            }
        }
        Ok(aborted)
    })
}
