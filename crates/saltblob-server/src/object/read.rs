//! GetObject and HeadObject: one preamble ([`Read::check`]: the `response-*` overrides, the version, the
//! bucket and its lifecycle, the key, the selection, the SSE-C key), then the object read (GET: `select.rs`
//! opens its stream) or headed (HEAD), its conditional headers checked against the version read, and one
//! answer ([`Answer`]) whose fields both responses carry.

use std::ops::Range;
use std::sync::Arc;

use http::HeaderMap;
use s3s::dto::{
    ChecksumMode, GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, StreamingBlob,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use saltblob_core::manifest::SEALED_METADATA_KEY;
use saltblob_core::{Manifest, VersionId};

use super::around::PartialContent;
use super::select::{Selected, Selection, content_range, head, open};
use crate::attrs::{Attributes, Conditions, ResponseOverrides, with_attributes, with_opened};
use crate::body::BlobBody;
use crate::keys::object_key;
use crate::lifecycle::{Lifecycle, expiration_of};
use crate::service::SaltS3;
use crate::sse::Echo;
use crate::sse::customer::{self, Customer};
use crate::tagging::tag_count_of;
use crate::versioning::{self, Named, State};

/// What a GetObject or HeadObject asks for: the fields both inputs have, moved out of either by [`read_of!`].
struct Read {
    bucket: String,
    key: String,
    version_id: Option<String>,
    range: Option<s3s::dto::Range>,
    part_number: Option<i32>,
    conditions: Conditions,
    overrides: ResponseOverrides,
    checksum_mode: Option<ChecksumMode>,
}

/// The [`Read`] of a GetObjectInput or HeadObjectInput `$input`.
macro_rules! read_of {
    ($input:ident) => {
        Read {
            bucket: $input.bucket,
            key: $input.key,
            version_id: $input.version_id,
            range: $input.range,
            part_number: $input.part_number,
            conditions: Conditions {
                if_match: $input.if_match,
                if_none_match: $input.if_none_match,
                if_modified_since: $input.if_modified_since,
                if_unmodified_since: $input.if_unmodified_since,
            },
            overrides: ResponseOverrides {
                content_type: $input.response_content_type,
                headers: crate::attrs::StoredHeaders {
                    cache_control: $input.response_cache_control,
                    content_disposition: $input.response_content_disposition,
                    content_encoding: $input.response_content_encoding,
                    content_language: $input.response_content_language,
                },
                expires: $input.response_expires,
            },
            checksum_mode: $input.checksum_mode,
        }
    };
}

/// A GET or HEAD checked before the object is read.
struct Checked {
    /// The object key, as the request names it.
    key: String,
    /// Its store key.
    store_key: String,
    selection: Selection,
    conditions: Conditions,
    overrides: ResponseOverrides,
    /// Whether the response carries the object's checksums (ChecksumMode ENABLED).
    checksums: bool,
    /// The SSE-C key the request gives.
    customer: Option<Customer>,
    lifecycle: Option<Arc<Lifecycle>>,
    /// The version the request names (`None`: the current one).
    version: Option<VersionId>,
    /// Whether the bucket has (or had) versioning: the response names the version read.
    versioned: bool,
}

impl Read {
    /// The preamble both reads share: the overrides (only for a `signed` request), the version (`versioning.rs`),
    /// the bucket (with its lifecycle), the key, the selection, and the SSE-C key of the request's `headers`, in
    /// that order.
    async fn check(self, s3: &SaltS3, signed: bool, headers: &HeaderMap) -> S3Result<Checked> {
        self.overrides.check(signed)?;
        let named = Named::of(self.version_id.as_deref())?;
        let (record, lifecycle) = s3.bucket_and_lifecycle(&self.bucket).await?;
        let store_key = object_key(&self.bucket, &self.key)?;
        let version = versioning::read_named(&s3.store, &store_key, named).await?;
        let selection = Selection::of(self.range, self.part_number)?;
        let customer = s3.sse.reader(headers, false)?;
        Ok(Checked {
            key: self.key,
            store_key,
            selection,
            conditions: self.conditions,
            overrides: self.overrides,
            checksums: self
                .checksum_mode
                .is_some_and(|m| m.as_str() == ChecksumMode::ENABLED),
            customer,
            lifecycle,
            version,
            versioned: State::of(&record) != State::Unversioned,
        })
    }
}

impl Checked {
    /// The version id a response about `manifest` names: in a bucket that has or had versioning.
    fn version_id(&self, manifest: &Manifest) -> Option<String> {
        versioning::shown_version_id(self.versioned, manifest)
    }
}

/// What a GET and a HEAD both answer about version `manifest`, of which they give `range`.
struct Answer {
    expiration: Option<String>,
    content_length: Option<i64>,
    content_range: Option<String>,
    parts_count: Option<i32>,
    attrs: Attributes,
    echo: Echo,
}

impl Checked {
    /// The answer about `manifest`; its checksums, when asked for, opened from its sealed metadata for a sealed
    /// version (the read gave its SSE-C key, or the store opens its SSE-KMS key).
    ///
    /// # Errors
    /// As a read of the version, when its sealed metadata does not open.
    async fn answer(
        self,
        s3: &SaltS3,
        manifest: &Manifest,
        selected: &Selected,
        range: &Range<u64>,
    ) -> S3Result<Answer> {
        let whole = matches!(self.selection, Selection::Whole);
        let checksums = whole && self.checksums;
        let opened;
        let shown = if checksums && manifest.metadata.contains_key(SEALED_METADATA_KEY) {
            let customer = self.customer.as_ref().map(|c| &c.key);
            let sealed = s3
                .store
                .sealed_metadata(&self.store_key, manifest, customer)
                .await
                .map_err(|e| customer::read_failed(e, self.customer.as_ref()))?;
            opened = with_opened(manifest, sealed);
            &opened
        } else {
            manifest
        };
        Ok(Answer {
            expiration: expiration_of(self.lifecycle.as_deref(), &self.key, manifest),
            content_length: i64::try_from(range.end - range.start).ok(),
            content_range: selected
                .partial
                .then(|| content_range(range, manifest.size)),
            parts_count: selected.parts_count,
            attrs: Attributes::of(shown, checksums).overridden(self.overrides),
            echo: s3.sse.read_echo(manifest, self.customer.as_ref()),
        })
    }
}

/// Error `e` of a read of `version` (`None`: the current one), said not to be a delete marker when the key holds
/// nothing.
fn unnamed_missing(e: S3Error, version: Option<VersionId>) -> S3Error {
    if version.is_none() {
        versioning::not_a_marker(e)
    } else {
        e
    }
}

/// GetObject: the object, a range of it or one of its parts, after its conditional headers; the `response-*`
/// overrides replace the headers they name.
pub(crate) async fn handle_get_object(
    s3: &SaltS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let input = req.input;
    let checked = read_of!(input)
        .check(s3, req.credentials.is_some(), &req.headers)
        .await?;
    let (stream, selected) = open(
        s3,
        &checked.store_key,
        &checked.selection,
        &checked.conditions,
        checked.customer.as_ref(),
        checked.version,
    )
    .await
    .map_err(|e| unnamed_missing(e, checked.version))?;
    versioning::refuse_marker(&stream.manifest, checked.version.is_some())?;
    s3.record_class_of(&req.extensions, &stream.manifest);
    let version_id = checked.version_id(&stream.manifest);
    let range = stream.range.clone();
    let a = checked
        .answer(s3, &stream.manifest, &selected, &range)
        .await?;
    let output = with_attributes!(
        GetObjectOutput {
            expiration: a.expiration,
            accept_ranges: Some("bytes".to_owned()),
            content_length: a.content_length,
            content_range: a.content_range,
            parts_count: a.parts_count,
            tag_count: tag_count_of(&stream.manifest),
            version_id: version_id,
            body: Some(StreamingBlob::new(BlobBody::new(stream))),
        },
        a.attrs
    );
    Ok(a.echo.respond(output))
}

/// HeadObject: the object's attributes (of a range or a part of it), after its conditional headers.
pub(crate) async fn handle_head_object(
    s3: &SaltS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let input = req.input;
    let checked = read_of!(input)
        .check(s3, req.credentials.is_some(), &req.headers)
        .await?;
    let manifest = head(s3, &checked.store_key, checked.version)
        .await
        .map_err(|e| unnamed_missing(e, checked.version))?;
    versioning::refuse_marker(&manifest, checked.version.is_some())?;
    customer::check_read(&s3.store, &manifest, checked.customer.as_ref()).await?;
    let version_id = checked.version_id(&manifest);
    checked
        .conditions
        .check(&manifest, S3ErrorCode::NotModified)?;
    let selected = checked.selection.resolve(&manifest)?;
    let range = selected.range.clone().unwrap_or(0..manifest.size);
    let a = checked.answer(s3, &manifest, &selected, &range).await?;
    let output = with_attributes!(
        HeadObjectOutput {
            expiration: a.expiration,
            accept_ranges: Some("bytes".to_owned()),
            content_length: a.content_length,
            content_range: a.content_range,
            parts_count: a.parts_count,
            version_id: version_id,
        },
        a.attrs
    );
    let mut response = a.echo.respond(output);
    // s3s's HeadObjectOutput has no field for it.
    if let Some(n) = tag_count_of(&manifest) {
        response
            .headers
            .insert("x-amz-tagging-count", http::HeaderValue::from(n));
    }
    if selected.partial {
        response.extensions.insert(PartialContent);
    }
    Ok(response)
}
