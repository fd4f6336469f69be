//! Which bytes of an object a GET or HEAD selects: all of it, a `Range` (RFC 9110, as S3 reads it), or one part
//! of a multipart object (`partNumber`, a segment of a composed blob), and the stream that reads them.

use std::ops::Range as Bytes;

use http::{HeaderMap, HeaderValue};
use s3s::dto::Range;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use saltblob_core::{BlobStream, Manifest, ManifestBody, VersionId};

use crate::attrs::Conditions;
use crate::error::from_store;
use crate::rereads::REPLACED;
use crate::service::SaltS3;
use crate::sse::customer::{self, Customer};

/// The largest part number, as S3 allows.
const MAX_PART_NUMBER: i32 = 10_000;

/// What of an object a GET or HEAD asks for.
pub(super) enum Selection {
    Whole,
    Range(Range),
    Part(i32),
}

/// A [`Selection`] resolved against one version.
pub(super) struct Selected {
    /// The bytes to read; `None`: all of them.
    pub range: Option<Bytes<u64>>,
    /// Whether the answer is partial (206 with `Content-Range`).
    pub partial: bool,
    /// `x-amz-mp-parts-count`: the parts of a multipart object, when a part was asked for.
    pub parts_count: Option<i32>,
}

impl Selection {
    /// The selection of a request with `range` and `part_number`.
    ///
    /// # Errors
    /// `InvalidRequest` for both at once, as S3; `InvalidArgument` for a part number outside 1–10000.
    pub(super) fn of(range: Option<Range>, part_number: Option<i32>) -> S3Result<Self> {
        match (range, part_number) {
            (Some(_), Some(_)) => Err(s3_error!(
                InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter"
            )),
            (None, Some(n)) if !(1..=MAX_PART_NUMBER).contains(&n) => Err(s3_error!(
                InvalidArgument,
                "Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive"
            )),
            (None, Some(n)) => Ok(Selection::Part(n)),
            (Some(r), None) => Ok(Selection::Range(r)),
            (None, None) => Ok(Selection::Whole),
        }
    }

    /// The bytes of `m` this selection reads.
    ///
    /// A suffix range of an empty object is the whole (empty) object (200), as AWS answers; any other range of
    /// it is unsatisfiable. Part N of a multipart (segmented) object is its Nth segment, with the object's
    /// part count; an object uploaded in one piece has one part, the whole object.
    ///
    /// # Errors
    /// `InvalidRange` (416, with `Content-Range: bytes */SIZE`) for an unsatisfiable range; `InvalidPart`
    /// (400) for a part past the last.
    pub(super) fn resolve(&self, m: &Manifest) -> S3Result<Selected> {
        let all = Selected {
            range: None,
            partial: false,
            parts_count: None,
        };
        match self {
            Selection::Whole => Ok(all),
            Selection::Range(Range::Suffix { length }) if m.size == 0 && *length > 0 => Ok(all),
            Selection::Range(r) => {
                let range = r.check(m.size).map_err(|_| invalid_range(m.size))?;
                Ok(Selected {
                    range: Some(range),
                    partial: true,
                    parts_count: None,
                })
            }
            Selection::Part(n) => {
                let (sizes, parts_count) = match &m.body {
                    ManifestBody::Segmented(segments) => (
                        segments.iter().map(|s| s.size).collect(),
                        i32::try_from(segments.len()).ok(),
                    ),
                    _ => (vec![m.size], None),
                };
                let index = usize::try_from(*n - 1).unwrap_or(usize::MAX);
                let Some(size) = sizes.get(index) else {
                    return Err(invalid_part_number());
                };
                let start: u64 = sizes.iter().take(index).sum();
                Ok(Selected {
                    // An empty object has no byte to name in a Content-Range: it is answered whole.
                    partial: m.size > 0,
                    range: (m.size > 0).then(|| start..start + size),
                    parts_count,
                })
            }
        }
    }
}

/// `Content-Range` of `range` in an object of `size` bytes.
pub(super) fn content_range(range: &Bytes<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{size}",
        range.start,
        range.end.saturating_sub(1)
    )
}

/// `InvalidRange` (416) for an object of `size` bytes, with `Content-Range: bytes */SIZE` as RFC 9110 asks.
fn invalid_range(size: u64) -> S3Error {
    let mut e = s3_error!(InvalidRange, "The requested range is not satisfiable");
    let mut headers = HeaderMap::new();
    // s3s sends an error's own headers in place of its defaults: the content type goes along.
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
        headers.insert(http::header::CONTENT_RANGE, v);
    }
    e.set_headers(headers);
    e
}

/// `InvalidPart` (400), S3's answer to a part number past the object's last part (AWS documents
/// `InvalidPartNumber`, 416, but answers this; ceph/s3-tests' `test_*_get_part` expect it).
fn invalid_part_number() -> S3Error {
    s3_error!(
        InvalidPart,
        "One or more of the specified parts could not be found: the part number is past the object's last part"
    )
}

/// The manifest of object `key`: of `version` when named (current or kept), else the current one.
pub(super) async fn head(s3: &SaltS3, key: &str, version: Option<VersionId>) -> S3Result<Manifest> {
    match version {
        Some(v) => s3.store.head_version(key, v).await,
        None => s3.store.head(key).await,
    }
    .map_err(from_store)
}

/// Opens object `key` (its `version` when named, else its current one) for reading with the request's SSE-C key
/// `customer` (`sse/customer.rs`) after checking `conditions`: the bytes `selection` names, read from the
/// version they were resolved against.
pub(super) async fn open(
    s3: &SaltS3,
    key: &str,
    selection: &Selection,
    conditions: &Conditions,
    customer: Option<&Customer>,
    version: Option<VersionId>,
) -> S3Result<(BlobStream, Selected)> {
    let read_failed = |e| customer::read_failed(e, customer);
    if let Selection::Whole = selection {
        let mut opts = customer::get_options(customer);
        opts.version = version;
        let stream = s3
            .store
            .get_stream_with(key, &opts)
            .await
            .map_err(read_failed)?;
        customer::check_read(&s3.store, &stream.manifest, customer).await?;
        conditions.check(&stream.manifest, S3ErrorCode::NotModified)?;
        let selected = selection.resolve(&stream.manifest)?;
        return Ok((stream, selected));
    }
    let mut tries = REPLACED.start();
    while tries.next_attempt().await {
        let manifest = head(s3, key, version).await?;
        customer::check_read(&s3.store, &manifest, customer).await?;
        conditions.check(&manifest, S3ErrorCode::NotModified)?;
        let selected = selection.resolve(&manifest)?;
        let mut opts = customer::get_options(customer);
        opts.range = selected.range.clone().map(Into::into);
        opts.version = version;
        match s3.store.get_stream_with(key, &opts).await {
            Ok(stream) if stream.manifest.version == manifest.version => {
                return Ok((stream, selected));
            }
            // Replaced between the head and the read: resolve the selection again.
            Ok(_) | Err(saltblob_core::Error::RangeNotSatisfiable { .. }) => continue,
            Err(e) => return Err(read_failed(e)),
        }
    }
    Err(s3_error!(
        SlowDown,
        "The object changed during the request; please retry"
    ))
}
