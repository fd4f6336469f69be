//! Object operations: PutObject (streamed, verified), GetObject and HeadObject (ranges, conditionals),
//! DeleteObject(s) and CopyObject (streamed get → put).
//!
//! How an object's S3 attributes sit in its manifest: Content-Type in the manifest's content type; user
//! metadata `x-amz-meta-<name>` under the key `x-amz-meta-<name>`; the server's own under `s3:` keys, which no
//! user metadata key can be: `s3:etag` (hex MD5), `s3:checksum-<algorithm>` (base64, as sent or computed),
//! `s3:cache-control`, `s3:content-disposition`, `s3:content-encoding`, `s3:content-language`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::dto::{
    ChecksumMode, CopyObjectInput, CopyObjectOutput, CopyObjectResult, CopySource,
    DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject,
    ETag, ETagCondition, GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput,
    Metadata, MetadataDirective, PutObjectInput, PutObjectOutput, Range, StreamingBlob, Timestamp,
    TimestampFormat,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::manifest::hex;
use saltblob_core::{
    BlobStream, GetOptions, LateMetadata, Layout, Manifest, PutCondition, PutOptions,
};

use crate::auth::record_class;
use crate::body::{Algorithm, BlobBody, Expected, SharedOutcome, VerifyingReader, body_error};
use crate::error::from_store;
use crate::keys::object_key;
use crate::s3::SaltS3;

/// Prefix of user metadata keys in a manifest (and of their HTTP headers).
const USER_META: &str = "x-amz-meta-";
/// Metadata key of the ETag (hex MD5 of the body).
pub(crate) const ETAG_KEY: &str = "s3:etag";
/// Prefix of the metadata keys of stored checksums.
pub(crate) const CHECKSUM_KEY: &str = "s3:checksum-";
/// Most bytes of user metadata (names and values) an object may carry, as S3 allows.
const MAX_USER_METADATA: usize = 2048;

/// Most keys one DeleteObjects request may name, as S3.
const MAX_DELETE_OBJECTS: usize = 1000;

/// How many times a ranged read retries when the object is replaced between its head and its read.
const RANGE_RETRIES: usize = 3;

/// The standard headers stored as `s3:<name>` metadata.
#[derive(Default)]
pub(crate) struct StoredHeaders {
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
}

impl StoredHeaders {
    const NAMES: [&'static str; 4] = [
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
    ];

    fn values(&self) -> [&Option<String>; 4] {
        [
            &self.cache_control,
            &self.content_disposition,
            &self.content_encoding,
            &self.content_language,
        ]
    }

    pub(crate) fn insert_into(&self, metadata: &mut BTreeMap<String, String>) {
        for (name, value) in Self::NAMES.iter().zip(self.values()) {
            if let Some(value) = value {
                metadata.insert(format!("s3:{name}"), value.clone());
            }
        }
    }

    fn from_manifest(m: &Manifest) -> Self {
        let get = |name: &str| m.metadata.get(&format!("s3:{name}")).cloned();
        Self {
            cache_control: get("cache-control"),
            content_disposition: get("content-disposition"),
            content_encoding: get("content-encoding"),
            content_language: get("content-language"),
        }
    }
}

/// The manifest metadata of user metadata `user`.
///
/// # Errors
/// `MetadataTooLarge` over [`MAX_USER_METADATA`] bytes.
pub(crate) fn user_metadata(user: Option<Metadata>) -> S3Result<BTreeMap<String, String>> {
    let user = user.unwrap_or_default();
    let size: usize = user.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_USER_METADATA {
        return Err(s3_error!(
            MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size: {size} bytes, at most {MAX_USER_METADATA}"
        ));
    }
    Ok(user
        .into_iter()
        .map(|(k, v)| (format!("{USER_META}{}", k.to_ascii_lowercase()), v))
        .collect())
}

/// The user metadata of `m`, as s3s returns it (names without `x-amz-meta-`).
fn user_metadata_of(m: &Manifest) -> Option<Metadata> {
    let user: Metadata = m
        .metadata
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(USER_META)?.to_owned(), v.clone())))
        .collect();
    (!user.is_empty()).then_some(user)
}

/// The ETag of `m`: the MD5 of its body when it was stored through S3; otherwise (a blob written by another
/// client of the store) derived from its BLAKE3 digest, marked `-b3` so that no client takes it for an MD5.
pub(crate) fn etag_of(m: &Manifest) -> ETag {
    match m.metadata.get(ETAG_KEY) {
        Some(etag) => ETag::Strong(etag.clone()),
        None => ETag::Strong(format!("{}-b3", hex(m.digest.get(..16).unwrap_or(&[])))),
    }
}

/// The Last-Modified time of `m`: its version's creation, to the second (HTTP dates have seconds).
pub(crate) fn last_modified_of(m: &Manifest) -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_secs(m.created_micros / 1_000_000))
}

/// The stored checksum of `m` for `algorithm`, if any.
pub(crate) fn checksum_of(m: &Manifest, algorithm: Algorithm) -> Option<String> {
    m.metadata
        .get(&format!("{CHECKSUM_KEY}{}", algorithm.name()))
        .cloned()
}

/// Every checksum stored with `m` (PutObject, UploadPart), as s3s returns them.
pub(crate) fn stored_checksums(m: &Manifest) -> s3s::dto::Checksum {
    s3s::dto::Checksum {
        checksum_crc32: checksum_of(m, Algorithm::Crc32),
        checksum_crc32c: checksum_of(m, Algorithm::Crc32c),
        checksum_crc64nvme: checksum_of(m, Algorithm::Crc64Nvme),
        checksum_sha1: checksum_of(m, Algorithm::Sha1),
        checksum_sha256: checksum_of(m, Algorithm::Sha256),
        ..s3s::dto::Checksum::default()
    }
}

/// The priority class the store reads or writes `m`'s chunks in: `bulk` for a salted (large) blob.
pub(crate) fn class_of(m: &Manifest) -> &'static str {
    match m.layout() {
        Layout::Chunked(l) if l.salt_count > 1 => "bulk",
        _ => "interactive",
    }
}

/// The conditional headers of a GET or HEAD (or of a copy's source).
#[derive(Default)]
struct Conditions {
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
    if_modified_since: Option<Timestamp>,
    if_unmodified_since: Option<Timestamp>,
}

impl Conditions {
    /// Checks the conditions against `m` in RFC 9110's order: If-Match (else If-Unmodified-Since) fails with
    /// 412 PreconditionFailed; If-None-Match (else If-Modified-Since) with 304 NotModified (`not_modified`), or
    /// 412 for a copy's source.
    fn check(&self, m: &Manifest, not_modified: S3ErrorCode) -> S3Result<()> {
        let etag = etag_of(m);
        let modified = last_modified_of(m);
        let matches = |c: &ETagCondition| match c {
            ETagCondition::Any => true,
            ETagCondition::ETag(e) => e.value() == etag.value(),
        };
        let failed = match (&self.if_match, &self.if_unmodified_since) {
            (Some(c), _) => !matches(c),
            (None, Some(since)) => modified > *since,
            (None, None) => false,
        };
        if failed {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
        let unchanged = match (&self.if_none_match, &self.if_modified_since) {
            (Some(c), _) => matches(c),
            (None, Some(since)) => modified <= *since,
            (None, None) => false,
        };
        if unchanged {
            let mut error = S3Error::new(not_modified);
            let mut headers = HeaderMap::new();
            if let Ok(v) = etag.to_http_header() {
                headers.insert(http::header::ETAG, v);
            }
            let mut date = Vec::new();
            if modified
                .format(TimestampFormat::HttpDate, &mut date)
                .is_ok()
                && let Ok(v) = HeaderValue::from_bytes(&date)
            {
                headers.insert(http::header::LAST_MODIFIED, v);
            }
            error.set_headers(headers);
            return Err(error);
        }
        Ok(())
    }
}

/// What a GET or HEAD returns about an object, from its manifest.
struct Attributes {
    etag: ETag,
    last_modified: Timestamp,
    content_type: Option<String>,
    metadata: Option<Metadata>,
    headers: StoredHeaders,
    checksums: s3s::dto::Checksum,
}

impl Attributes {
    /// The attributes of `m`; its checksums only when `with_checksums` (ChecksumMode ENABLED on a whole read).
    fn of(m: &Manifest, with_checksums: bool) -> Self {
        let checksums = if with_checksums {
            stored_checksums(m)
        } else {
            s3s::dto::Checksum::default()
        };
        Self {
            etag: etag_of(m),
            last_modified: last_modified_of(m),
            content_type: m.content_type.clone(),
            metadata: user_metadata_of(m),
            headers: StoredHeaders::from_manifest(m),
            checksums,
        }
    }
}

/// `Content-Range` of `range` in an object of `size` bytes.
fn content_range(range: &std::ops::Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{size}",
        range.start,
        range.end.saturating_sub(1)
    )
}

fn wants_checksums(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str() == ChecksumMode::ENABLED)
}

impl SaltS3 {
    /// Opens object `key` for reading after checking `conditions`: all of it, or `range` of it (read from the
    /// version whose size the range was resolved against).
    async fn open(
        &self,
        key: &str,
        range: Option<Range>,
        conditions: &Conditions,
    ) -> S3Result<BlobStream> {
        let Some(range) = range else {
            let stream = self.store.get_stream(key).await.map_err(from_store)?;
            conditions.check(&stream.manifest, S3ErrorCode::NotModified)?;
            return Ok(stream);
        };
        for _ in 0..RANGE_RETRIES {
            let manifest = self.store.head(key).await.map_err(from_store)?;
            conditions.check(&manifest, S3ErrorCode::NotModified)?;
            let bytes = range
                .check(manifest.size)
                .map_err(|_| s3_error!(InvalidRange, "The requested range is not satisfiable"))?;
            let opts = GetOptions::new().with_range(bytes);
            match self.store.get_stream_with(key, &opts).await {
                Ok(stream) if stream.manifest.version == manifest.version => return Ok(stream),
                // Replaced between the head and the read: resolve the range again.
                Ok(_) | Err(saltblob_core::Error::RangeNotSatisfiable { .. }) => continue,
                Err(e) => return Err(from_store(e)),
            }
        }
        Err(s3_error!(
            SlowDown,
            "The object changed during the request; please retry"
        ))
    }

    pub(crate) async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let key = object_key(&input.bucket, &input.key)?;
        check_part_number(input.part_number)?;
        let conditions = Conditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        };
        let stream = self.open(&key, input.range, &conditions).await?;
        record_class(&req.extensions, class_of(&stream.manifest));
        let ranged = input.range.is_some();
        let attrs = Attributes::of(
            &stream.manifest,
            !ranged && wants_checksums(input.checksum_mode.as_ref()),
        );
        let size = stream.manifest.size;
        let range = stream.range.clone();
        let output = GetObjectOutput {
            accept_ranges: Some("bytes".to_owned()),
            content_length: i64::try_from(range.end - range.start).ok(),
            content_range: ranged.then(|| content_range(&range, size)),
            body: Some(StreamingBlob::new(BlobBody::new(stream))),
            e_tag: Some(attrs.etag),
            last_modified: Some(attrs.last_modified),
            content_type: attrs.content_type,
            metadata: attrs.metadata,
            cache_control: attrs.headers.cache_control,
            content_disposition: attrs.headers.content_disposition,
            content_encoding: attrs.headers.content_encoding,
            content_language: attrs.headers.content_language,
            checksum_crc32: attrs.checksums.checksum_crc32,
            checksum_crc32c: attrs.checksums.checksum_crc32c,
            checksum_crc64nvme: attrs.checksums.checksum_crc64nvme,
            checksum_sha1: attrs.checksums.checksum_sha1,
            checksum_sha256: attrs.checksums.checksum_sha256,
            ..GetObjectOutput::default()
        };
        Ok(S3Response::new(output))
    }

    pub(crate) async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let key = object_key(&input.bucket, &input.key)?;
        check_part_number(input.part_number)?;
        let manifest = self.store.head(&key).await.map_err(from_store)?;
        Conditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        }
        .check(&manifest, S3ErrorCode::NotModified)?;
        let range =
            match input.range {
                Some(r) => Some(r.check(manifest.size).map_err(|_| {
                    s3_error!(InvalidRange, "The requested range is not satisfiable")
                })?),
                None => None,
            };
        let attrs = Attributes::of(
            &manifest,
            range.is_none() && wants_checksums(input.checksum_mode.as_ref()),
        );
        let length = range.as_ref().map_or(manifest.size, |r| r.end - r.start);
        let output = HeadObjectOutput {
            accept_ranges: Some("bytes".to_owned()),
            content_length: i64::try_from(length).ok(),
            content_range: range.as_ref().map(|r| content_range(r, manifest.size)),
            e_tag: Some(attrs.etag),
            last_modified: Some(attrs.last_modified),
            content_type: attrs.content_type,
            metadata: attrs.metadata,
            cache_control: attrs.headers.cache_control,
            content_disposition: attrs.headers.content_disposition,
            content_encoding: attrs.headers.content_encoding,
            content_language: attrs.headers.content_language,
            checksum_crc32: attrs.checksums.checksum_crc32,
            checksum_crc32c: attrs.checksums.checksum_crc32c,
            checksum_crc64nvme: attrs.checksums.checksum_crc64nvme,
            checksum_sha1: attrs.checksums.checksum_sha1,
            checksum_sha256: attrs.checksums.checksum_sha256,
            ..HeadObjectOutput::default()
        };
        let status = range.is_some().then_some(StatusCode::PARTIAL_CONTENT);
        let mut response = S3Response::new(output);
        response.status = status;
        Ok(response)
    }

    pub(crate) async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let trailer = announced_trailer(&req.headers);
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let key = object_key(&input.bucket, &input.key)?;
        let mut metadata = user_metadata(input.metadata)?;
        StoredHeaders {
            cache_control: input.cache_control,
            content_disposition: input.content_disposition,
            content_encoding: input.content_encoding,
            content_language: input.content_language,
        }
        .insert_into(&mut metadata);
        let late = LateMetadata::new();
        let (reader, outcome) = verified_body(
            input.body,
            body_checks!(input, trailer.zip(req.trailing_headers)),
            late.clone(),
        )?;
        let mut opts = PutOptions::new().with_late_metadata(late).with_condition(
            self.put_condition(&key, input.if_match.as_ref(), input.if_none_match.as_ref())
                .await?,
        );
        opts.metadata = metadata;
        opts.content_type = input.content_type;
        if let Some(len) = input.content_length.and_then(|l| u64::try_from(l).ok()) {
            opts = opts.with_size_hint(len);
        }
        let result = self.store.put_stream(&key, reader, &opts).await;
        let manifest = finish_put(result, &outcome)?;
        record_class(&req.extensions, class_of(&manifest));
        let checksums = Attributes::of(&manifest, true).checksums;
        let output = PutObjectOutput {
            e_tag: Some(etag_of(&manifest)),
            size: i64::try_from(manifest.size).ok(),
            checksum_crc32: checksums.checksum_crc32,
            checksum_crc32c: checksums.checksum_crc32c,
            checksum_crc64nvme: checksums.checksum_crc64nvme,
            checksum_sha1: checksums.checksum_sha1,
            checksum_sha256: checksums.checksum_sha256,
            ..PutObjectOutput::default()
        };
        Ok(S3Response::new(output))
    }

    /// The store condition of a conditional PutObject: `If-None-Match: *` writes only a new key; `If-Match:
    /// ETAG` only over the version that has that ETag (the version is pinned, so a concurrent overwrite fails the
    /// put instead of being replaced). Either fails with `PreconditionFailed` (412).
    pub(crate) async fn put_condition(
        &self,
        key: &str,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<PutCondition> {
        let failed = || {
            s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            )
        };
        match (if_match, if_none_match) {
            (None, None) => Ok(PutCondition::None),
            (None, Some(ETagCondition::Any)) => Ok(PutCondition::IfAbsent),
            (Some(condition), None) => {
                let current = match self.store.head(key).await {
                    Ok(m) => m,
                    Err(saltblob_core::Error::NotFound { .. }) => return Err(failed()),
                    Err(e) => return Err(from_store(e)),
                };
                match condition {
                    ETagCondition::Any => {}
                    ETagCondition::ETag(etag) if etag.value() == etag_of(&current).value() => {}
                    ETagCondition::ETag(_) => return Err(failed()),
                }
                Ok(PutCondition::IfVersion(current.version))
            }
            _ => Err(s3_error!(
                NotImplemented,
                "PutObject takes If-None-Match: * or If-Match, not both nor another If-None-Match"
            )),
        }
    }

    pub(crate) async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        let key = object_key(&input.bucket, &input.key)?;
        self.store.delete(&key).await.map_err(from_store)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    pub(crate) async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        self.require_bucket(&input.bucket).await?;
        if input.delete.objects.len() > MAX_DELETE_OBJECTS {
            return Err(s3_error!(
                MalformedXML,
                "A DeleteObjects request names at most {MAX_DELETE_OBJECTS} keys"
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for object in input.delete.objects {
            let result = match object_key(&input.bucket, &object.key) {
                Ok(key) => self.store.delete(&key).await.map_err(from_store),
                Err(e) => Err(e),
            };
            match result {
                Ok(_) if quiet => {}
                Ok(_) => deleted.push(DeletedObject {
                    key: Some(object.key),
                    ..DeletedObject::default()
                }),
                Err(e) => errors.push(s3s::dto::Error {
                    code: Some(e.code().as_str().to_owned()),
                    key: Some(object.key),
                    message: e.message().map(str::to_owned),
                    version_id: None,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..DeleteObjectsOutput::default()
        }))
    }

    pub(crate) async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            version_id,
        } = &input.copy_source
        else {
            return Err(s3_error!(
                NotImplemented,
                "Only copy sources of the form bucket/key are supported"
            ));
        };
        if version_id.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "Objects have no versions here; copy without versionId"
            ));
        }
        self.require_bucket(src_bucket).await?;
        self.require_bucket(&input.bucket).await?;
        let src = object_key(src_bucket, src_key)?;
        let dst = object_key(&input.bucket, &input.key)?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if src == dst && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let stream = self.store.get_stream(&src).await.map_err(from_store)?;
        Conditions {
            if_match: input.copy_source_if_match,
            if_none_match: input.copy_source_if_none_match,
            if_modified_since: input.copy_source_if_modified_since,
            if_unmodified_since: input.copy_source_if_unmodified_since,
        }
        .check(&stream.manifest, S3ErrorCode::PreconditionFailed)?;
        let source = stream.manifest.clone();
        record_class(&req.extensions, class_of(&source));
        // The bytes are the same: the ETag and checksums carry over; the rest is copied or replaced.
        let mut opts = PutOptions::new().with_size_hint(source.size);
        let system = source
            .metadata
            .iter()
            .filter(|(k, _)| *k == ETAG_KEY || k.starts_with(CHECKSUM_KEY));
        if replace {
            opts.metadata = user_metadata(input.metadata)?;
            StoredHeaders {
                cache_control: input.cache_control,
                content_disposition: input.content_disposition,
                content_encoding: input.content_encoding,
                content_language: input.content_language,
            }
            .insert_into(&mut opts.metadata);
            opts.content_type = input.content_type;
            opts.metadata
                .extend(system.map(|(k, v)| (k.clone(), v.clone())));
        } else {
            opts.metadata = source.metadata.clone();
            opts.content_type = source.content_type.clone();
        }
        let body = stream.map_err(from_store).boxed();
        let outcome = SharedOutcome::default();
        let reader = VerifyingReader::new(body, Expected::default(), outcome.clone());
        let manifest = finish_put(self.store.put_stream(&dst, reader, &opts).await, &outcome)?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag_of(&manifest)),
                last_modified: Some(last_modified_of(&manifest)),
                ..CopyObjectResult::default()
            }),
            ..CopyObjectOutput::default()
        }))
    }
}

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
        $crate::object::BodyChecks {
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

/// Objects have one part (multipart objects are the lead's `multipart.rs`): part 1 is the whole object.
fn check_part_number(part: Option<i32>) -> S3Result<()> {
    match part {
        None | Some(1) => Ok(()),
        Some(_) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InvalidPartNumber".into()),
                "The requested partnumber is not satisfiable",
            );
            e.set_status_code(StatusCode::RANGE_NOT_SATISFIABLE);
            Err(e)
        }
    }
}
