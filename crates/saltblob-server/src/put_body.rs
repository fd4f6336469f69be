//! The one path a body takes into the store (PutObject, CopyObject, UploadPart, UploadPartCopy): what an S3
//! input says the body must match ([`BodyChecks`]), the [`VerifyingReader`] that checks it and records the ETag
//! and checksums before the commit ([`PutBody`], made by [`put_body!`] from a request or by [`PutBody::copied`]
//! from a copy's source), its write sealed as the request's encryption says ([`PutBody::store_object`],
//! [`PutBody::store_segment`]), and the one outcome of a write whose failure may be the body's, the key's or
//! the store's.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use http::HeaderMap;
use s3s::S3Result;
use s3s::dto::StreamingBlob;
use saltblob_core::manifest::hex;
use saltblob_core::{BlobStore, BlobStream, Error, LateMetadata, Manifest, PutOptions, Segment};
use tracing::Instrument;

use crate::attrs::{CHECKSUM_KEY, ETAG_KEY};
use crate::body::{
    Algorithm, Expected, SharedOutcome, Verified, VerifyingReader, body_error, entity_too_large,
};
use crate::error::{from_sealed_put, from_store};
use crate::sse::Sse;

/// The largest object one request may put, as S3: 5 GiB (PutObject, and each part of a multipart upload).
pub(crate) const MAX_PUT_BYTES: u64 = 5 << 30;

/// The checksum algorithm whose value an `aws-chunked` body announces in its trailer (`x-amz-trailer`).
pub(crate) fn announced_trailer(headers: &HeaderMap) -> Option<Algorithm> {
    headers
        .get("x-amz-trailer")
        .and_then(|v| v.to_str().ok())
        .and_then(Algorithm::parse)
}

/// The [`PutBody`] of request `$req` whose input `$input` (a PutObjectInput or UploadPartInput, already moved
/// out of `$req`) has a body and the body's checksum fields, which it moves out: [`verified_body`] with the
/// input's [`BodyChecks`] and Content-Length. An `S3Result`.
macro_rules! put_body {
    ($req:ident, $input:ident) => {
        $crate::put_body::verified_body(
            $input.body,
            $crate::put_body::BodyChecks {
                trailer: $crate::put_body::announced_trailer(&$req.headers)
                    .zip($req.trailing_headers),
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
            },
            $input.content_length,
        )
    };
}
pub(crate) use put_body;

/// What a request's body (PutObject, UploadPart) must match: the checksum announced for its `aws-chunked` trailer
/// (with the handle s3s fills at the body's end), its checksum headers, the checksum to compute
/// (`x-amz-checksum-algorithm`) and Content-MD5.
pub(crate) struct BodyChecks {
    pub trailer: Option<(Algorithm, s3s::TrailingHeaders)>,
    pub checksums: [(Algorithm, Option<String>); 5],
    pub algorithm: Option<s3s::dto::ChecksumAlgorithm>,
    pub content_md5: Option<String>,
}

/// A put's body made ready for the store.
pub(crate) struct PutBody {
    /// The body, verified as the store reads it.
    reader: VerifyingReader,
    /// Why the reader refused the body, once it has.
    outcome: SharedOutcome,
    /// Where the reader records the ETag (`s3:etag`, hex MD5) and the checksums (`s3:checksum-<algorithm>`)
    /// when the body verified, before it reports the end (so before any commit).
    late: LateMetadata,
    /// The length the request announced (Content-Length), as the store's size hint.
    size_hint: Option<u64>,
}

impl PutBody {
    /// The bytes of a copy's source `stream` as a body, with fresh checksums of the `computed` algorithms (its
    /// ETag, the MD5 of the bytes, is always computed).
    pub(crate) fn copied(stream: BlobStream, computed: Vec<Algorithm>) -> Self {
        let expected = Expected {
            computed,
            ..Expected::default()
        };
        Self::of(stream.map_err(from_store).boxed(), expected, None)
    }

    fn of(
        stream: futures::stream::BoxStream<'static, S3Result<bytes::Bytes>>,
        expected: Expected,
        size_hint: Option<u64>,
    ) -> Self {
        let outcome = SharedOutcome::default();
        let late = LateMetadata::new();
        let reader = VerifyingReader::new(stream, expected, outcome.clone())
            .on_verified(record_into(late.clone()));
        Self {
            reader,
            outcome,
            late,
            size_hint,
        }
    }

    /// Stores the body as the new version of object `key` with `opts`, sealed as `sse` says: the ETag and
    /// checksums the body verified with are in the version's metadata when it commits (sealed, for a sealed
    /// version); returns the version with them, for the response.
    ///
    /// # Errors
    /// As [`PutBody::store_segment`].
    pub(crate) async fn store_object(
        self,
        store: &BlobStore,
        key: &str,
        opts: PutOptions,
        sse: &Sse,
    ) -> S3Result<(Manifest, BTreeMap<String, String>)> {
        let late = self.late.clone();
        let opts = opts.with_late_metadata(self.late.clone());
        let (store, key) = (store.clone(), key.to_owned());
        let manifest = self
            .store(opts, sse, |reader, opts| async move {
                store.put_stream(&key, reader, &opts).await
            })
            .await?;
        Ok((manifest, late.entries()))
    }

    /// Stores the body as a segment of object `key` (a part of a multipart upload), claimable for `lease`, sealed
    /// as `sse` says; returns it with the ETag and checksums the body verified with.
    ///
    /// # Errors
    /// The body's own failure when it was refused (a digest mismatch, a bad signature, too large);
    /// `KMS.NotFoundException` for a server key the provider cannot seal under; else the store's.
    pub(crate) async fn store_segment(
        self,
        store: &BlobStore,
        key: &str,
        opts: PutOptions,
        sse: &Sse,
        lease: Duration,
    ) -> S3Result<(Segment, BTreeMap<String, String>)> {
        let late = self.late.clone();
        let (store, key) = (store.clone(), key.to_owned());
        let segment = self
            .store(opts, sse, |reader, opts| async move {
                store.put_segment(&key, reader, &opts, lease).await
            })
            .await?;
        Ok((segment, late.entries()))
    }

    /// Runs `write` on the body with `opts` (their size hint, else the body's), sealed as `sse` says, and gives
    /// its outcome as [`PutBody::store_segment`] says.
    ///
    /// The write runs in a task of its own, so that a request dropped midway (its client gone, the connection
    /// closed) does not drop the put between two awaits: the body then ends in an error, and the put fails and
    /// cleans up as any failed put does (its writer stopped, its extent file and fd released at once).
    async fn store<T, F>(
        self,
        mut opts: PutOptions,
        sse: &Sse,
        write: impl FnOnce(VerifyingReader, PutOptions) -> F,
    ) -> S3Result<T>
    where
        F: Future<Output = saltblob_core::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        opts.size_hint = opts.size_hint.or(self.size_hint);
        sse.seal(&mut opts);
        let task = tokio::spawn(write(self.reader, opts).instrument(tracing::Span::current()));
        let written = task.await.unwrap_or_else(|e| {
            Err(Error::internal(
                "put",
                format!("the put's task failed: {e}"),
            ))
        });
        let result = match (written, sse.server_key()) {
            // Refused before anything was written: the key's failure, not the body's.
            (Err(e @ Error::KeyUnavailable { .. }), Some(key)) => {
                return Err(from_sealed_put(e, key));
            }
            (result, _) => result,
        };
        let failure = self.outcome.lock().ok().and_then(|mut o| o.take());
        match (result, failure) {
            (Ok(stored), _) => Ok(stored),
            (Err(_), Some(failure)) => Err(failure),
            (Err(e), None) => Err(from_store(e)),
        }
    }
}

/// `body` as a [`PutBody`] whose reader verifies `checks` at its end and then records the ETag and checksums;
/// `content_length` becomes its size hint. A body over [`MAX_PUT_BYTES`] is refused: at once when
/// Content-Length says so, before a byte is read; else by the reader, as soon as it has read more.
///
/// # Errors
/// `EntityTooLarge` when Content-Length is over [`MAX_PUT_BYTES`]; `InvalidDigest` for a malformed Content-MD5.
pub(crate) fn verified_body(
    body: Option<StreamingBlob>,
    checks: BodyChecks,
    content_length: Option<i64>,
) -> S3Result<PutBody> {
    let size_hint = content_length.and_then(|l| u64::try_from(l).ok());
    if size_hint.is_some_and(|size| size > MAX_PUT_BYTES) {
        return Err(entity_too_large());
    }
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
            .and_then(|a| Algorithm::parse(a.as_str()))
            .into_iter()
            .collect(),
        max_bytes: Some(MAX_PUT_BYTES),
        ..Expected::default()
    }
    .with_content_md5(checks.content_md5.as_deref())?;
    let body = match body {
        Some(body) => body.map_err(body_error).boxed(),
        None => futures::stream::empty().boxed(),
    };
    Ok(PutBody::of(body, expected, size_hint))
}

/// What records a verified body's ETag (`s3:etag`, hex MD5) and checksums (`s3:checksum-<algorithm>`) into
/// `late`, for [`VerifyingReader::on_verified`].
fn record_into(late: LateMetadata) -> impl FnOnce(&Verified) + Send + 'static {
    move |v| {
        late.insert(ETAG_KEY, hex(&v.md5));
        for (algorithm, value) in &v.checksums {
            late.insert(format!("{CHECKSUM_KEY}{}", algorithm.name()), value.clone());
        }
    }
}
