//! A put's body as the store reads it (PutObject, UploadPart, CopyObject): what an S3 input says the body must
//! match ([`BodyChecks`], built by [`body_checks!`]), the [`VerifyingReader`] that checks it and records the
//! ETag and checksums as the object's attributes before the commit ([`verified_body`]), and the one outcome of a
//! put whose failure may be the body's or the store's ([`finish_put`]).

use futures::{StreamExt, TryStreamExt};
use http::HeaderMap;
use s3s::S3Result;
use s3s::dto::StreamingBlob;
use saltblob_core::LateMetadata;
use saltblob_core::manifest::hex;

use crate::attrs::{CHECKSUM_KEY, ETAG_KEY};
use crate::body::{Algorithm, Expected, SharedOutcome, VerifyingReader, body_error};
use crate::error::from_store;

/// The checksum algorithm whose value an `aws-chunked` body announces in its trailer (`x-amz-trailer`).
pub(crate) fn announced_trailer(headers: &HeaderMap) -> Option<Algorithm> {
    headers
        .get("x-amz-trailer")
        .and_then(|v| v.to_str().ok())
        .and_then(Algorithm::parse)
}

/// The [`BodyChecks`] of an S3 input with a body's checksum fields (PutObjectInput, UploadPartInput), whose
/// fields it moves out; `$trailer` is the announced trailer with its handle.
macro_rules! body_checks {
    ($input:ident, $trailer:expr) => {
        $crate::put_body::BodyChecks {
            trailer: $trailer,
            checksums: [
                ($crate::body::Algorithm::Crc32, $input.checksum_crc32),
                ($crate::body::Algorithm::Crc32c, $input.checksum_crc32c),
                (
                    $crate::body::Algorithm::Crc64Nvme,
                    $input.checksum_crc64nvme,
                ),
                ($crate::body::Algorithm::Sha1, $input.checksum_sha1),
                ($crate::body::Algorithm::Sha256, $input.checksum_sha256),
            ],
            algorithm: $input.checksum_algorithm,
            content_md5: $input.content_md5,
        }
    };
}
pub(crate) use body_checks;

/// What a put's body (PutObject, UploadPart) must match: its checksum headers, the checksum of its
/// `aws-chunked` trailer, the checksum to compute (`x-amz-checksum-algorithm`) and Content-MD5.
pub(crate) struct BodyChecks {
    pub trailer: Option<(Algorithm, s3s::TrailingHeaders)>,
    pub checksums: [(Algorithm, Option<String>); 5],
    pub algorithm: Option<s3s::dto::ChecksumAlgorithm>,
    pub content_md5: Option<String>,
}

/// `body` as a reader that verifies `checks` at its end and then records the ETag (`s3:etag`, hex MD5) and the
/// checksums (`s3:checksum-<algorithm>`) in `late`, before it reports the end (so before any commit). The
/// outcome tells the put why the body was refused ([`finish_put`]).
///
/// # Errors
/// `InvalidDigest` for a malformed Content-MD5.
pub(crate) fn verified_body(
    body: Option<StreamingBlob>,
    checks: BodyChecks,
    late: LateMetadata,
) -> S3Result<(VerifyingReader, SharedOutcome)> {
    let expected = Expected {
        checksums: checks
            .checksums
            .into_iter()
            .filter_map(|(a, v)| Some((a, v?)))
            .collect(),
        trailer: checks.trailer,
        computed: checks
            .algorithm
            .as_ref()
            .and_then(|a| Algorithm::parse(a.as_str())),
        ..Expected::default()
    }
    .with_content_md5(checks.content_md5.as_deref())?;
    let body = match body {
        Some(body) => body.map_err(body_error).boxed(),
        None => futures::stream::empty().boxed(),
    };
    let outcome = SharedOutcome::default();
    let reader = VerifyingReader::new(body, expected, outcome.clone()).on_verified(move |v| {
        late.insert(ETAG_KEY, hex(&v.md5));
        for (algorithm, value) in &v.checksums {
            late.insert(format!("{CHECKSUM_KEY}{}", algorithm.name()), value.clone());
        }
    });
    Ok((reader, outcome))
}

/// The outcome of a put of a [`VerifyingReader`]'s body: the reader's own failure when it refused the body
/// (a digest mismatch, a bad signature), else the store's.
pub(crate) fn finish_put<T>(
    result: saltblob_core::Result<T>,
    outcome: &SharedOutcome,
) -> S3Result<T> {
    let failure = outcome.lock().ok().and_then(|mut o| o.take());
    match (result, failure) {
        (Ok(m), _) => Ok(m),
        (Err(_), Some(failure)) => Err(failure),
        (Err(e), None) => Err(from_store(e)),
    }
}
