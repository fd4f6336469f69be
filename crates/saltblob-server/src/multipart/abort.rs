//! AbortMultipartUpload, and the abort of an upload (also the sweep's and DeleteBucket's): the upload record
//! moves from `open` (or, once its compose can no longer commit, `completing`) to `aborting` and out of the
//! listing; then every part is given up, and the record says `aborted` until the sweep removes it.

use std::collections::HashSet;

use s3s::dto::{AbortMultipartUploadInput, AbortMultipartUploadOutput};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::BlobStore;

use super::cleanup::clean_up;
use super::upload::{State, Upload, no_such_upload};
use super::{complete, completing_window, now};
use crate::keys::object_key;
use crate::rereads::UPLOAD_RECORD;
use crate::service::SaltS3;

/// AbortMultipartUpload: see [`abort`].
pub(crate) async fn handle_abort_multipart_upload(
    s3: &SaltS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let key = object_key(&input.bucket, &input.key)?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if upload.state == State::Aborting {
        // Aborted already, but its parts were not all given up (the abort stopped half-way): take that up
        // again, and answer as for an aborted upload.
        let store = s3.store.clone();
        let bucket = input.bucket;
        tokio::spawn(async move { finish_abort(&store, &bucket, &key, &upload).await });
        return Err(no_such_upload());
    }
    let aborting = abort(&s3.store, &input.bucket, &key, upload).await?;
    // The parts are given up in a task of its own, which runs to its end even if the client goes away; a
    // failure there leaves the upload `aborting`, which a later abort or the sweep takes up again.
    let store = s3.store.clone();
    let bucket = input.bucket;
    let cleanup = tokio::spawn(async move { finish_abort(&store, &bucket, &key, &aborting).await });
    if let Err(e) = cleanup.await {
        tracing::warn!(error = %e, "an abort's cleanup task failed (the sweep takes it up again)");
    }
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

/// `OperationAborted` (409): a complete of the upload may still commit.
fn complete_in_progress(wait: u64) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::OperationAborted,
        format!(
            "A CompleteMultipartUpload of this upload is in progress, or its outcome is not known yet: retry the CompleteMultipartUpload, or the abort in {} s",
            wait.div_ceil(1_000_000)
        ),
    );
    e.set_status_code(http::StatusCode::CONFLICT);
    e
}

/// Moves `upload` (of object key `key` in `bucket`) from `open` or `completing` to `aborting` and takes it out
/// of the listing, reading it again whenever another request changed it ([`UPLOAD_RECORD`]). A `completing`
/// upload is aborted only once its compose can no longer commit ([`completing_window`]); if the compose did
/// commit, the upload is completed instead and the abort is `NoSuchUpload`. Returns the `aborting` record, whose
/// parts [`finish_abort`] gives up.
///
/// # Errors
/// `NoSuchUpload` (completed, aborted, gone), `OperationAborted` (a complete may still commit), `SlowDown` (the
/// record kept changing), a store error.
pub(super) async fn abort(
    store: &BlobStore,
    bucket: &str,
    key: &str,
    mut upload: Upload,
) -> S3Result<Upload> {
    let id = upload.id.clone();
    let mut tries = UPLOAD_RECORD.start();
    while tries.next_attempt().await {
        let moved = match upload.state {
            State::Completed | State::Aborted | State::Aborting => return Err(no_such_upload()),
            State::Open => upload.set_state(store, bucket, State::Aborting).await?,
            State::Completing => {
                let record = complete::compose_record(store, bucket, &upload).await?;
                if let Some(record) = &record
                    && complete::committed(store, key, record).await?
                {
                    complete::finish(store, bucket, key, upload, record).await?;
                    return Err(no_such_upload());
                }
                let until = upload
                    .written_micros()
                    .saturating_add(completing_window(store));
                let now = now(store);
                if now < until {
                    return Err(complete_in_progress(until - now));
                }
                upload.set_state(store, bucket, State::Aborting).await?
            }
        };
        match moved {
            Some(aborting) => {
                aborting.delete_index(store, bucket).await;
                return Ok(aborting);
            }
            None => {
                upload = Upload::read_any(store, bucket, &id)
                    .await?
                    .ok_or_else(no_such_upload)?;
            }
        }
    }
    Err(s3_error!(
        SlowDown,
        "The upload kept changing while it was being aborted; please retry"
    ))
}

/// Gives up every part of an `aborting` upload and marks it `aborted` (the record stays until the sweep).
/// Failures are logged: the upload stays `aborting` for the sweep.
pub(super) async fn finish_abort(store: &BlobStore, bucket: &str, key: &str, aborting: &Upload) {
    clean_up(store, bucket, &aborting.id, key, &HashSet::new()).await;
    if let Err(e) = aborting.set_state(store, bucket, State::Aborted).await {
        tracing::warn!(upload = aborting.id, error = %e, "could not mark an upload aborted (the sweep will)");
    }
}
