//! Multipart upload: CreateMultipartUpload, UploadPart, UploadPartCopy, CompleteMultipartUpload,
//! AbortMultipartUpload, ListParts and ListMultipartUploads, on the store's segments (`docs/format.md`,
//! *Manifest, format version 2*), and the sweep of finished and expired uploads.
//!
//! Each part is written with [`saltblob_core::BlobStore::put_segment`] under the object's own store key, as a
//! segment claimable for [`PART_LEASE`], and recorded (`part.rs`) before it is used; completing the upload
//! composes the listed parts into the object without copying a byte ([`saltblob_core::BlobStore::compose`]).
//!
//! The upload record is the one point of agreement between requests, which may run in several servers on one
//! store: every change of it is a conditional put on the version read. An UploadPart *touches* it (rewrites it
//! unchanged, which records the upload's last activity) after recording its part, and gives up the segment it
//! replaced only once that touch succeeded on an `open` record: a complete that read the record before then has
//! to read it again, and lists the new part. Complete and abort move the record out of `open`; of two such
//! moves exactly one succeeds. Segments are only given up by whoever knows the final set: the part's own upload
//! (its replaced segment, as above), a complete after its commit (every segment of the upload the object does
//! not own), an abort (all of them), the sweep (what requests that raced them left behind).
//!
//! # Layout
//! Each file uses only those listed before it (and this file's limits and helpers).
//! - `checksum.rs`: the upload's checksum algorithm and type, and the object's checksum made of the parts'.
//! - `upload.rs`: the records' layout, the upload record and its typed state.
//! - `parts.rs`: the part and segment records.
//! - `compose.rs`: the compose records.
//! - `cleanup.rs`: giving up segments and deleting the records a finished upload no longer needs.
//! - `create.rs`: CreateMultipartUpload.
//! - `part.rs`: UploadPart, and the recording of a part (UploadPart, UploadPartCopy).
//! - `copy.rs`: UploadPartCopy.
//! - `listing.rs`: ListParts and ListMultipartUploads.
//! - `choose.rs`: the parts a complete lists, checked, and the compose record of the object they make.
//! - `complete.rs`: CompleteMultipartUpload, run to its end in a task of its own.
//! - `abort.rs`: AbortMultipartUpload, and the abort of an upload (also the sweep's).
//! - `sweep.rs`: the sweep of finished and expired uploads, and DeleteBucket's abort of all.
//! - this file: the limits, and the helpers the others share.

mod abort;
mod checksum;
mod choose;
mod cleanup;
mod complete;
mod compose;
mod copy;
mod create;
mod listing;
mod part;
mod parts;
mod sweep;
mod upload;

use std::time::Duration;

use s3s::crypto::{Checksum as _, Md5};
use s3s::{S3Error, S3Result, s3_error};
use saltblob_core::BlobStore;
use saltblob_core::manifest::hex;
use saltblob_core::units::micros;

pub(crate) use self::abort::handle_abort_multipart_upload;
pub(crate) use self::complete::handle_complete_multipart_upload;
pub(crate) use self::copy::handle_upload_part_copy;
pub(crate) use self::create::handle_create_multipart_upload;
pub(crate) use self::listing::{handle_list_multipart_uploads, handle_list_parts};
pub(crate) use self::part::handle_upload_part;
pub(crate) use self::sweep::{abort_all_uploads, abort_due_uploads, sweep_expired_uploads};

/// Runs a part's request (UploadPart, UploadPartCopy) with `bulk` as the class of each store operation in it that
/// names none. Its records (the upload's, the segment's, the part's) are the part's bookkeeping: in the default
/// class, the records of eight parts at once made a foreground load for the scheduler, whose pauses then held the
/// parts back (a 256 MiB upload of 16 MiB parts, 8 at once: 264–312 MiB/s, against 421 with the pauses off;
/// docs/bench/journal/s3.md).
///
/// # Errors
/// The request's; an `InternalError` if the store has no `bulk` class.
pub(crate) async fn as_part_work<T>(
    s3: &crate::service::SaltS3,
    request: impl std::future::Future<Output = S3Result<T>>,
) -> S3Result<T> {
    s3.store
        .in_class(saltblob_core::PriorityClass::bulk(), request)
        .await
        .map_err(crate::error::from_store)?
}

/// How long a part stays claimable after it was written: a part older than this is refused at completion
/// (`InvalidPart`) and gc reclaims it. Thirty days.
pub const PART_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long an upload may go without activity (a part uploaded, or its creation) before the sweep aborts it:
/// seven days, as S3's common lifecycle rule.
pub const UPLOAD_IDLE_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long the record of a completed or aborted upload is kept: a repeated CompleteMultipartUpload answers as
/// the first one did for this long. One day.
pub const FINISHED_KEPT: Duration = Duration::from_secs(24 * 3600);
/// The largest part, as S3 allows: 5 GiB.
const MAX_PART_SIZE: u64 = 5 << 30;
/// The smallest part but the last, as S3 requires.
const MIN_PART_SIZE: u64 = 5 << 20;
/// The largest part number, as S3 allows.
const MAX_PART_NUMBER: i32 = 10_000;
/// The most parts or uploads one listing returns, as S3 does.
const MAX_LISTED: usize = 1000;
/// How far apart the clocks of two servers on one store may be (the store's own assumption, one minute).
const CLOCK_MARGIN: Duration = Duration::from_secs(60);
/// Records written, deleted or segments given up at once by a cleanup.
const CLEANUP_CONCURRENCY: usize = 16;

/// Now, on the store's clock (Unix µs).
fn now(store: &BlobStore) -> u64 {
    store.config().clock.now_micros()
}

/// How long after a complete moved an upload to `completing` its compose may still commit: it starts composing
/// within a quarter of the intent lease of the move (or not at all), and a compose settles within
/// [`BlobStore::compose_settles_within`]; plus the clock margin, as another server may have written the record.
fn completing_window(store: &BlobStore) -> u64 {
    micros(store.config().intent_lease / 4 + store.compose_settles_within() + CLOCK_MARGIN)
}

fn check_part_number(number: i32) -> S3Result<()> {
    if (1..=MAX_PART_NUMBER).contains(&number) {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive"
        ))
    }
}

/// `EntityTooLarge` for a part over [`MAX_PART_SIZE`].
fn part_too_large() -> S3Error {
    s3_error!(
        EntityTooLarge,
        "Your proposed upload exceeds the maximum allowed size: a part holds at most {MAX_PART_SIZE} bytes"
    )
}

/// How many entries a listing of parts or uploads returns: as `requested`, at most (and by default)
/// [`MAX_LISTED`].
fn max_listed(requested: Option<i32>) -> usize {
    requested
        .and_then(|m| usize::try_from(m).ok())
        .unwrap_or(MAX_LISTED)
        .min(MAX_LISTED)
}

/// The ETag of an object composed of parts with these hex MD5s: MD5 of their binary MD5s, `-<count>`.
fn multipart_etag<'a>(md5s: impl Iterator<Item = &'a str>) -> String {
    let mut h = Md5::new();
    let mut count = 0usize;
    for part in md5s {
        let part = part.trim().trim_matches('"');
        let mut raw = [0u8; 16];
        for (i, byte) in raw.iter_mut().enumerate() {
            *byte = part
                .get(2 * i..2 * i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .unwrap_or(0);
        }
        h.update(&raw);
        count += 1;
    }
    format!("{}-{count}", hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etags_are_the_md5_of_the_part_md5s() {
        // Two parts whose MD5s are those of "a" and "b": MD5(md5("a") ‖ md5("b")), then "-2".
        let a = "0cc175b9c0f1b6a831c399e269772661";
        let b = "92eb5ffee6ae2fec3ad71c777531578f";
        let etag = multipart_etag([a, b].into_iter());
        assert!(etag.ends_with("-2"), "{etag}");
        let mut raw = Vec::new();
        for h in [a, b] {
            raw.extend((0..16).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex")));
        }
        let mut md5 = Md5::new();
        md5.update(&raw);
        assert_eq!(etag, format!("{}-2", hex(&md5.finalize())));
        assert_eq!(
            multipart_etag(["\"0cc175b9c0f1b6a831c399e269772661\"", b].into_iter()),
            etag,
            "quoted ETags as clients list them"
        );
    }
}
