//! How an object's S3 attributes sit in its manifest, the conditional headers checked against them (of reads,
//! [`Conditions`]; of deletes, [`DeleteConditions`]), the `response-*` overrides of a read
//! ([`ResponseOverrides`]), and the one version id objects have ([`NULL_VERSION`]), also a copy's source's
//! ([`copy_source`]).
//!
//! Content-Type is the manifest's content type; user metadata `x-amz-meta-<name>` is stored under the key
//! `x-amz-meta-<name>`; the server's own attributes under `s3:` keys, which no user metadata key can be: `s3:etag`
//! (hex MD5), `s3:checksum-<algorithm>` (base64, as sent or computed), `s3:cache-control`,
//! `s3:content-disposition`, `s3:content-encoding` (without `aws-chunked`, the request body's framing),
//! `s3:content-language`, `s3:expires` (the `Expires` header, an HTTP date), `s3:tagging` (the tags: `tagging.rs`).
//! Multipart upload records keep the object's attributes to be in the same keys (`multipart/upload.rs`). A sealed
//! version keeps its MD5 and checksums sealed (`saltblob:sealed`,
//! [`saltblob_core::manifest::SEALED_METADATA_KEY`]), opened only for a request that may read it ([`with_opened`]);
//! its ETag is opaque ([`sealed_etag`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue};
use s3s::dto::{CopySource, ETag, ETagCondition, Metadata, Timestamp, TimestampFormat};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use saltblob_core::manifest::{SEALED_METADATA_KEY, hex};
use saltblob_core::{Manifest, ManifestBody};

use crate::body::Algorithm;

/// Prefix of user metadata keys in a manifest (and of their HTTP headers).
const USER_META: &str = "x-amz-meta-";
/// Metadata key of the ETag (hex MD5 of the body).
pub(crate) const ETAG_KEY: &str = "s3:etag";
/// Prefix of the metadata keys of stored checksums.
pub(crate) const CHECKSUM_KEY: &str = "s3:checksum-";
/// The version id of an object written while its bucket's versioning was never enabled or was suspended, as S3
/// names it (`versioning.rs`).
pub(crate) const NULL_VERSION: &str = "null";
/// Metadata key of a delete marker (`versioning.rs`).
pub(crate) const DELETE_MARKER_KEY: &str = "s3:delete-marker";

/// Metadata key of the checksum type of an object composed by a multipart upload (`COMPOSITE` or
/// `FULL_OBJECT`); an object without it has full-object checksums.
pub(crate) const CHECKSUM_TYPE_KEY: &str = "s3:checksum-type";
/// Most bytes of user metadata (names and values) an object may carry, as S3 allows.
const MAX_USER_METADATA: usize = 2048;

/// The bucket, key and version id (if any) of a copy's source (`x-amz-copy-source`).
///
/// # Errors
/// `NotImplemented` for a source that is not `bucket/key` (an access point).
pub(crate) fn versioned_copy_source(source: &CopySource) -> S3Result<(&str, &str, Option<&str>)> {
    let CopySource::Bucket {
        bucket,
        key,
        version_id,
    } = source
    else {
        return Err(s3_error!(
            NotImplemented,
            "Only copy sources of the form bucket/key are supported"
        ));
    };
    Ok((bucket, key, version_id.as_deref()))
}

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

    /// Writes the headers that are set into `metadata`, each under `s3:<name>`. `aws-chunked` is the framing
    /// of the request's body, not an encoding of the object: it is left out of Content-Encoding (and a
    /// Content-Encoding of only `aws-chunked` is not stored), as S3 stores it.
    pub(crate) fn insert_into(&self, metadata: &mut BTreeMap<String, String>) {
        for (name, value) in Self::NAMES.iter().zip(self.values()) {
            let value = match value {
                Some(v) if *name == "content-encoding" => without_aws_chunked(v),
                other => other.clone(),
            };
            if let Some(value) = value {
                metadata.insert(format!("s3:{name}"), value);
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

/// `encoding` (a Content-Encoding) without its `aws-chunked` codings (the others joined by `, `); as sent when
/// it has none; `None` when nothing else is left.
fn without_aws_chunked(encoding: &str) -> Option<String> {
    let is_framing = |c: &str| c.trim().eq_ignore_ascii_case("aws-chunked");
    if !encoding.split(',').any(is_framing) {
        return Some(encoding.to_owned());
    }
    let kept: Vec<&str> = encoding
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !is_framing(c))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// Metadata key of the `Expires` header of an object, as an HTTP date.
const EXPIRES_KEY: &str = "s3:expires";

/// Stores `expires` (an object's `Expires` header) in `metadata`.
pub(crate) fn insert_expires(expires: Option<&Timestamp>, metadata: &mut BTreeMap<String, String>) {
    let mut date = Vec::new();
    if let Some(e) = expires
        && e.format(TimestampFormat::HttpDate, &mut date).is_ok()
        && let Ok(date) = String::from_utf8(date)
    {
        metadata.insert(EXPIRES_KEY.to_owned(), date);
    }
}

/// The `Expires` header stored with `m`, if any (a value that does not parse, which this server never
/// writes, is left out).
fn expires_of(m: &Manifest) -> Option<Timestamp> {
    m.metadata
        .get(EXPIRES_KEY)
        .and_then(|d| Timestamp::parse(TimestampFormat::HttpDate, d).ok())
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

/// The manifest metadata an S3 input with user metadata and the standard headers (PutObjectInput,
/// CopyObjectInput, CreateMultipartUploadInput) sets: [`user_metadata`] of its `metadata`, then its
/// [`StoredHeaders`], `Expires`, tags (`x-amz-tagging`, checked: `InvalidTag`) and canned ACL (`x-amz-acl`);
/// moves those fields out of `$input` (but the tags and the ACL).
macro_rules! object_metadata {
    ($input:ident) => {
        $crate::attrs::user_metadata($input.metadata).and_then(|mut metadata| {
            $crate::attrs::StoredHeaders {
                cache_control: $input.cache_control,
                content_disposition: $input.content_disposition,
                content_encoding: $input.content_encoding,
                content_language: $input.content_language,
            }
            .insert_into(&mut metadata);
            $crate::attrs::insert_expires($input.expires.as_ref(), &mut metadata);
            if let Some(tags) = $input.tagging.as_deref() {
                $crate::tagging::Tags::from_header(tags, $crate::tagging::MAX_OBJECT_TAGS)?
                    .store_in(&mut metadata);
            }
            $crate::acl::Canned::asked($input.acl.as_ref().map(|a| a.as_str()))?
                .store_in(&mut metadata);
            Ok(metadata)
        })
    };
}
pub(crate) use object_metadata;

/// The user metadata of `m`, as s3s returns it (names without `x-amz-meta-`).
fn user_metadata_of(m: &Manifest) -> Option<Metadata> {
    let user: Metadata = m
        .metadata
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(USER_META)?.to_owned(), v.clone())))
        .collect();
    (!user.is_empty()).then_some(user)
}

/// The ETag of `m`: for a sealed version (SSE-C, SSE-KMS), [`sealed_etag`] of its digest, which says nothing
/// of the plaintext; else the MD5 of its body when it was stored through S3; otherwise (a blob written by
/// another client of the store) derived from its BLAKE3 digest, marked `-b3` so that no client takes it for an
/// MD5.
pub(crate) fn etag_of(m: &Manifest) -> ETag {
    if m.sealed_by().is_some() {
        let parts = match &m.body {
            ManifestBody::Segmented(segments) => Some(segments.len()),
            _ => None,
        };
        return ETag::Strong(sealed_etag(&m.digest, parts));
    }
    match m.metadata.get(ETAG_KEY) {
        Some(etag) => ETag::Strong(etag.clone()),
        None => ETag::Strong(format!("{}-b3", hex(m.digest.get(..16).unwrap_or(&[])))),
    }
}

/// The ETag of a sealed version (or part) whose manifest digest is `digest`, composed of `parts` parts if it is
/// a multipart object: the hex of the digest's first 16 bytes (with `-<parts>` after, as S3's multipart
/// ETags). A sealed version's digest is keyed with a secret of its own (`docs/format.md`, "Derived keys"), so
/// this ETag is opaque: another for every version, and nothing anyone without the key can compare a guess of the
/// contents with.
pub(crate) fn sealed_etag(digest: &[u8; 32], parts: Option<usize>) -> String {
    let head = hex(digest.get(..16).unwrap_or(&[]));
    match parts {
        Some(n) => format!("{head}-{n}"),
        None => head,
    }
}

/// `m` with its sealed metadata (`sealed`, from [`saltblob_core::BlobStore::sealed_metadata`]: the checksums of a
/// sealed version) in its metadata, for a request that may see them. Its `s3:etag` stays: a sealed version's MD5
/// is never shown, its ETag is opaque.
pub(crate) fn with_opened(m: &Manifest, sealed: BTreeMap<String, String>) -> Manifest {
    let mut m = m.clone();
    m.metadata.remove(SEALED_METADATA_KEY);
    m.metadata
        .extend(sealed.into_iter().filter(|(k, _)| k != ETAG_KEY));
    m
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

/// `$output { fields }`, an s3s struct with the five checksum fields (PutObjectOutput, UploadPartOutput, Part,
/// …), with the checksums of `$sums` (an `s3s::dto::Checksum`, such as [`stored_checksums`] gives) and every
/// other field defaulted.
macro_rules! with_checksums {
    ($output:ident { $($field:ident: $value:expr),* $(,)? }, $sums:expr) => {{
        let sums: s3s::dto::Checksum = $sums;
        $output {
            $($field: $value,)*
            checksum_crc32: sums.checksum_crc32,
            checksum_crc32c: sums.checksum_crc32c,
            checksum_crc64nvme: sums.checksum_crc64nvme,
            checksum_sha1: sums.checksum_sha1,
            checksum_sha256: sums.checksum_sha256,
            ..$output::default()
        }
    }};
}
pub(crate) use with_checksums;

/// `$output { fields }`, a GetObjectOutput or HeadObjectOutput, with the object's [`Attributes`] `$attrs` (ETag,
/// Last-Modified, content type, user metadata, stored headers, checksums) and every other field defaulted.
macro_rules! with_attributes {
    ($output:ident { $($field:ident: $value:expr),* $(,)? }, $attrs:expr) => {{
        let attrs: $crate::attrs::Attributes = $attrs;
        $crate::attrs::with_checksums!(
            $output {
                $($field: $value,)*
                e_tag: Some(attrs.etag),
                last_modified: Some(attrs.last_modified),
                content_type: attrs.content_type,
                metadata: attrs.metadata,
                cache_control: attrs.headers.cache_control,
                content_disposition: attrs.headers.content_disposition,
                content_encoding: attrs.headers.content_encoding,
                content_language: attrs.headers.content_language,
                expires: attrs.expires,
                checksum_type: attrs.checksum_type,
            },
            attrs.checksums
        )
    }};
}
pub(crate) use with_attributes;

/// The conditional headers of a GET or HEAD (or of a copy's source).
#[derive(Default)]
pub(crate) struct Conditions {
    pub if_match: Option<ETagCondition>,
    pub if_none_match: Option<ETagCondition>,
    pub if_modified_since: Option<Timestamp>,
    pub if_unmodified_since: Option<Timestamp>,
}

impl Conditions {
    /// Checks the conditions against `m` in RFC 9110's order: If-Match (else If-Unmodified-Since) fails with
    /// 412 PreconditionFailed; If-None-Match (else If-Modified-Since) with 304 NotModified (`not_modified`), or
    /// 412 for a copy's source.
    pub(crate) fn check(&self, m: &Manifest, not_modified: S3ErrorCode) -> S3Result<()> {
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
            return Err(precondition_failed());
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

/// `PreconditionFailed` (412), for a conditional read or put whose condition did not hold.
pub(crate) fn precondition_failed() -> S3Error {
    s3_error!(
        PreconditionFailed,
        "At least one of the pre-conditions you specified did not hold"
    )
}

/// What a GET or HEAD returns about an object, from its manifest.
pub(crate) struct Attributes {
    pub etag: ETag,
    pub last_modified: Timestamp,
    pub content_type: Option<String>,
    pub metadata: Option<Metadata>,
    pub headers: StoredHeaders,
    pub checksums: s3s::dto::Checksum,
    /// `Expires`: as stored with the object, or a `response-expires` override.
    pub expires: Option<Timestamp>,
    /// The checksums' type, when there are checksums (see [`CHECKSUM_TYPE_KEY`]).
    pub checksum_type: Option<s3s::dto::ChecksumType>,
}

impl Attributes {
    /// The attributes of `m`; its checksums only when `with_checksums` (ChecksumMode ENABLED on a whole read).
    pub(crate) fn of(m: &Manifest, with_checksums: bool) -> Self {
        let checksums = if with_checksums {
            stored_checksums(m)
        } else {
            s3s::dto::Checksum::default()
        };
        let any = with_checksums
            && Algorithm::ALL
                .into_iter()
                .any(|a| checksum_of(m, a).is_some());
        let checksum_type = any.then(|| {
            s3s::dto::ChecksumType::from(
                m.metadata
                    .get(CHECKSUM_TYPE_KEY)
                    .cloned()
                    .unwrap_or_else(|| s3s::dto::ChecksumType::FULL_OBJECT.to_owned()),
            )
        });
        Self {
            etag: etag_of(m),
            last_modified: last_modified_of(m),
            content_type: m.content_type.clone(),
            metadata: user_metadata_of(m),
            headers: StoredHeaders::from_manifest(m),
            checksums,
            expires: expires_of(m),
            checksum_type,
        }
    }

    /// The attributes with the `response-*` overrides of a GET or HEAD in place of the stored ones.
    pub(crate) fn overridden(mut self, overrides: ResponseOverrides) -> Self {
        let ResponseOverrides {
            content_type,
            headers,
            expires,
        } = overrides;
        self.content_type = content_type.or(self.content_type);
        self.headers = StoredHeaders {
            cache_control: headers.cache_control.or(self.headers.cache_control),
            content_disposition: headers
                .content_disposition
                .or(self.headers.content_disposition),
            content_encoding: headers.content_encoding.or(self.headers.content_encoding),
            content_language: headers.content_language.or(self.headers.content_language),
        };
        self.expires = expires.or(self.expires);
        self
    }
}

/// The `response-*` query parameters of a GET or HEAD: header values the response carries in place of the
/// stored ones (a presigned download link that names the file, for instance).
#[derive(Default)]
pub(crate) struct ResponseOverrides {
    pub content_type: Option<String>,
    pub headers: StoredHeaders,
    pub expires: Option<Timestamp>,
}

impl ResponseOverrides {
    /// Whether any override is asked for.
    pub(crate) fn any(&self) -> bool {
        self.content_type.is_some()
            || self.expires.is_some()
            || self.headers.values().iter().any(|v| v.is_some())
    }

    /// Checks that a request with these overrides may have them: AWS serves them only to signed requests.
    ///
    /// # Errors
    /// `InvalidRequest` (400) for an anonymous request that asks for any.
    pub(crate) fn check(&self, signed: bool) -> S3Result<()> {
        if self.any() && !signed {
            return Err(s3_error!(
                InvalidRequest,
                "Request specific response headers cannot be used for anonymous GET requests."
            ));
        }
        Ok(())
    }
}

/// The conditions of a delete (DeleteObject's `If-Match`, `x-amz-if-match-last-modified-time` and
/// `x-amz-if-match-size` headers, or the `ETag`, `LastModifiedTime` and `Size` of a DeleteObjects entry): the
/// object is deleted only if every one given holds for its current version.
#[derive(Default)]
pub(crate) struct DeleteConditions {
    pub etag: Option<ETagCondition>,
    pub last_modified: Option<Timestamp>,
    pub size: Option<i64>,
}

impl DeleteConditions {
    /// Whether any condition is given.
    pub(crate) fn any(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some() || self.size.is_some()
    }

    /// Whether every condition given holds for `m` (an ETag of `*` holds for any version; a delete marker, marked
    /// by [`DELETE_MARKER_KEY`] in its metadata, has no ETag another matches).
    pub(crate) fn hold_for(&self, m: &Manifest) -> bool {
        let marker = m.metadata.contains_key(DELETE_MARKER_KEY);
        let etag = self.etag.as_ref().is_none_or(|c| match c {
            ETagCondition::Any => true,
            ETagCondition::ETag(e) => {
                e.value() == "*" || (!marker && e.value() == etag_of(m).value())
            }
        });
        let modified = self
            .last_modified
            .as_ref()
            .is_none_or(|t| *t == last_modified_of(m));
        let size = self
            .size
            .is_none_or(|s| u64::try_from(s).is_ok_and(|s| s == m.size));
        etag && modified && size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_chunked_is_taken_out_of_a_content_encoding_and_the_rest_kept() {
        for (sent, stored) in [
            ("gzip", Some("gzip")),
            ("deflate, gzip", Some("deflate, gzip")),
            ("deflate,gzip", Some("deflate,gzip")),
            ("gzip, aws-chunked", Some("gzip")),
            ("aws-chunked, gzip", Some("gzip")),
            ("deflate, AWS-CHUNKED, gzip", Some("deflate, gzip")),
            ("aws-chunked", None),
            ("aws-chunked, aws-chunked", None),
        ] {
            assert_eq!(without_aws_chunked(sent).as_deref(), stored, "{sent}");
        }
    }
}
