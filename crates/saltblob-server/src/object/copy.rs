//! CopyObject: the source's bytes streamed into a new put of the destination (a get feeding a put, in the
//! store's in-flight window), with a fresh ETag (the MD5 of the bytes, as AWS gives a copy, also of a multipart
//! source) and fresh checksums of the algorithms the source had.
//!
//! A copy runs in its own task. If it has not finished after [`HEAD_AFTER`], the response starts (200, XML) and
//! a space follows every [`KEEP_ALIVE_EVERY`] until it ends, then the `CopyObjectResult`, or the `Error` it
//! failed with, as AWS does: a client's read timeout (60 s in botocore) then never cuts a long copy. The task
//! runs to its end even if the client goes away.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::HeaderMap;
use http_body::{Body as HttpBody, Frame};
use s3s::dto::{
    CopyObjectInput, CopyObjectOutput, CopyObjectResult, ETagCondition, MetadataDirective,
    TaggingDirective,
};
use s3s::{HttpResponse, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use saltblob_core::PutOptions;
use saltblob_core::manifest::SEALED_METADATA_KEY;
use tokio::task::JoinHandle;

use crate::acl::Canned;
use crate::attrs::{
    CHECKSUM_KEY, Conditions, ETAG_KEY, etag_of, last_modified_of, object_metadata,
    stored_checksums, versioned_copy_source, with_checksums, with_opened,
};
use crate::body::Algorithm;
use crate::keys::object_key;
use crate::put_body::{MAX_PUT_BYTES, PutBody};
use crate::service::SaltS3;
use crate::sse::customer;
use crate::sse::rules::is_sse_key;
use crate::tagging::{MAX_OBJECT_TAGS, Tags};
use crate::versioning::{self, State};

/// How long a copy may run before its response starts and is kept alive.
const HEAD_AFTER: Duration = Duration::from_secs(1);
/// How often a kept-alive copy response sends a space while the copy runs.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(1);

/// The outcome of a copy's task.
type CopyTask = JoinHandle<S3Result<(CopyObjectResult, Option<String>)>>;

/// A copy still running when its response started, handed from the handler to [`keep_alive_body`] in the
/// response's extensions (which must be `Clone`: the task is taken out once).
#[derive(Clone)]
struct RunningCopy(Arc<Mutex<Option<CopyTask>>>);

/// The destination's `If-Match` and `If-None-Match` headers (which s3s 0.14 does not parse for CopyObject).
///
/// # Errors
/// `InvalidArgument` for a value that is not an ETag list or `*`.
fn destination_conditions(
    headers: &HeaderMap,
) -> S3Result<(Option<ETagCondition>, Option<ETagCondition>)> {
    let parse = |name: http::HeaderName| {
        headers
            .get(&name)
            .map(|v| {
                ETagCondition::parse_http_header(v.as_bytes())
                    .map_err(|_| s3_error!(InvalidArgument, "Invalid {} header", name.as_str()))
            })
            .transpose()
    };
    Ok((
        parse(http::header::IF_MATCH)?,
        parse(http::header::IF_NONE_MATCH)?,
    ))
}

/// CopyObject: checks the source (its version may only be `null`; its `x-amz-copy-source-if-*` conditions;
/// at most 5 GiB, as S3) and the destination's `If-Match`/`If-None-Match`, then streams the source into the
/// destination. The attributes are copied (`x-amz-metadata-directive: COPY`, the default) or replaced
/// (`REPLACE`); the ETag and checksums are computed from the bytes.
pub(crate) async fn handle_copy_object(
    s3: &SaltS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let mut input = req.input;
    let (src_bucket, src_key, src_version) = versioned_copy_source(&input.copy_source)?;
    let (if_match, if_none_match) = destination_conditions(&req.headers)?;
    s3.require_bucket(src_bucket).await?;
    let record = s3.require_bucket(&input.bucket).await?;
    let src = object_key(src_bucket, src_key)?;
    let dst = object_key(&input.bucket, &input.key)?;
    let src_version = versioning::read_version(&s3.store, &src, src_version).await?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    let replace_tags = match input
        .tagging_directive
        .as_ref()
        .map(TaggingDirective::as_str)
    {
        None | Some(TaggingDirective::COPY) => false,
        Some(TaggingDirective::REPLACE) => true,
        Some(other) => {
            return Err(s3_error!(
                InvalidArgument,
                "Unknown tagging directive: {other}"
            ));
        }
    };
    // The tags are the source's (`x-amz-tagging-directive: COPY`, the default) or the request's (`REPLACE`),
    // whatever the metadata directive; the ACL is the request's (`private` without one), never the source's.
    let tags = match input.tagging.take() {
        Some(header) if replace_tags => Tags::from_header(&header, MAX_OBJECT_TAGS)?,
        _ => Tags::default(),
    };
    let acl = Canned::asked(input.acl.take().as_ref().map(|a| a.as_str()))?;
    let asked = s3.sse.asked(&req.headers)?;
    let source_customer = s3.sse.reader(&req.headers, true)?;
    if src == dst && !replace && !asked.any() {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
        ));
    }
    let mut read = customer::get_options(source_customer.as_ref());
    read.version = src_version;
    let stream = s3
        .store
        .get_stream_with(&src, &read)
        .await
        .map_err(|e| customer::read_failed(e, source_customer.as_ref()))?;
    versioning::refuse_marker(&stream.manifest, src_version.is_some())?;
    customer::check_read(&s3.store, &stream.manifest, source_customer.as_ref()).await?;
    Conditions {
        if_match: input.copy_source_if_match,
        if_none_match: input.copy_source_if_none_match,
        if_modified_since: input.copy_source_if_modified_since,
        if_unmodified_since: input.copy_source_if_unmodified_since,
    }
    .check(&stream.manifest, S3ErrorCode::PreconditionFailed)?;
    let source = stream.manifest.clone();
    if source.size > MAX_PUT_BYTES {
        return Err(s3_error!(
            InvalidRequest,
            "The specified copy source is larger than the maximum allowable size for a copy source: {MAX_PUT_BYTES}"
        ));
    }
    let condition = s3
        .put_condition(&dst, if_match.as_ref(), if_none_match.as_ref())
        .await?;
    s3.record_class_of(&req.extensions, &source);
    // Fresh ETag and checksums: those of the source are not copied but computed again from its bytes.
    // The destination's encryption is the request's (SSE-C, else SSE-S3 or SSE-KMS) or its bucket's default,
    // not the source's (as AWS).
    let sse = s3
        .sse
        .choose(&s3.store, &input.bucket, &record, asked)
        .await?;
    let is_own = |k: &String| {
        k == ETAG_KEY
            || k == SEALED_METADATA_KEY
            || k.starts_with(CHECKSUM_KEY)
            || is_sse_key(k)
            || versioning::is_own_key(k)
    };
    // A sealed source's checksums are sealed with it: opened with the key the copy read it with.
    let sealed_sums = s3
        .store
        .sealed_metadata(&src, &source, source_customer.as_ref().map(|c| &c.key))
        .await
        .map_err(|e| customer::read_failed(e, source_customer.as_ref()))?;
    let mut computed: Vec<Algorithm> = source
        .metadata
        .keys()
        .chain(sealed_sums.keys())
        .filter_map(|k| Algorithm::parse(k.strip_prefix(CHECKSUM_KEY)?))
        .collect();
    computed.extend(
        input
            .checksum_algorithm
            .as_ref()
            .and_then(|a| Algorithm::parse(a.as_str())),
    );
    let mut opts = PutOptions::new()
        .with_size_hint(source.size)
        .with_condition(condition);
    if replace {
        opts.metadata = object_metadata!(input)?;
        opts.content_type = input.content_type;
    } else {
        opts.metadata = source
            .metadata
            .iter()
            .filter(|(k, _)| !is_own(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        opts.content_type = source.content_type.clone();
    }
    if replace_tags {
        tags.store_in(&mut opts.metadata);
    } else {
        Tags::of(&source).store_in(&mut opts.metadata);
    }
    acl.store_in(&mut opts.metadata);
    let state = State::of(&record);
    state.prepare(&mut opts);
    let copy_source_version_id = src_version.map(|_| versioning::version_id_of(&source));
    let body = PutBody::copied(stream, computed);
    let store = s3.store.clone();
    let put = sse.clone();
    let mut task: CopyTask = tokio::spawn(async move {
        let (manifest, verified) = body.store_object(&store, &dst, opts, &put).await?;
        let version_id = state.after_write(&store, &dst, &manifest).await?;
        let result = with_checksums!(
            CopyObjectResult {
                e_tag: Some(etag_of(&manifest)),
                last_modified: Some(last_modified_of(&manifest)),
            },
            stored_checksums(&with_opened(&manifest, verified))
        );
        Ok((result, version_id))
    });
    // Known before the copy ends: its headers may be sent while it runs (then without the version id).
    if let Ok(joined) = tokio::time::timeout(HEAD_AFTER, &mut task).await {
        let (result, version_id) = joined.map_err(task_failed)??;
        return Ok(sse.echo.respond(CopyObjectOutput {
            copy_object_result: Some(result),
            version_id,
            copy_source_version_id,
            ..CopyObjectOutput::default()
        }));
    }
    let mut response = sse.echo.respond(CopyObjectOutput {
        copy_source_version_id,
        ..CopyObjectOutput::default()
    });
    response
        .extensions
        .insert(RunningCopy(Arc::new(Mutex::new(Some(task)))));
    Ok(response)
}

/// `InternalError` for a copy task that panicked or was cancelled (the runtime shutting down).
fn task_failed(e: tokio::task::JoinError) -> S3Error {
    tracing::error!(error = %e, "a copy task failed");
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "We encountered an internal error. Please try again.",
    )
}

/// Gives a CopyObject response whose copy still runs (see the module doc) the body that keeps its connection
/// alive; any other response is left as it is.
pub(super) fn keep_alive_body(response: &mut HttpResponse) {
    let Some(RunningCopy(task)) = response.extensions_mut().remove::<RunningCopy>() else {
        return;
    };
    let Some(task) = task.lock().ok().and_then(|mut t| t.take()) else {
        return;
    };
    response.headers_mut().remove(http::header::CONTENT_LENGTH);
    *response.body_mut() = s3s::Body::http_body_unsync(KeepAlive::new(task, KEEP_ALIVE_EVERY));
}

/// The body of a kept-alive copy response: the XML declaration, a space every `every` while the copy runs,
/// then its result or error document.
struct KeepAlive {
    task: Option<CopyTask>,
    started: bool,
    tick: tokio::time::Interval,
}

impl KeepAlive {
    fn new(task: CopyTask, every: Duration) -> Self {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            task: Some(task),
            started: false,
            tick,
        }
    }
}

/// The XML document (without declaration) of a copy's outcome.
fn outcome_document(outcome: S3Result<CopyObjectResult>) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    let mut ser = s3s::xml::Serializer::new(&mut buf);
    let written = match &outcome {
        Ok(result) => s3s::xml::Serialize::serialize(result, &mut ser),
        Err(e) => s3s::xml::Serialize::serialize(e, &mut ser),
    };
    if let Err(e) = written {
        tracing::error!(error = %e, "a copy's result could not be written as XML");
        buf = b"<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>".to_vec();
    }
    Bytes::from(buf)
}

impl HttpBody for KeepAlive {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if !this.started {
            this.started = true;
            let decl = &b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"[..];
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(decl)))));
        }
        let Some(task) = this.task.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(joined) = task.poll_unpin(cx) {
            this.task = None;
            let outcome = joined
                .map_err(task_failed)
                .and_then(|r| r.map(|(result, _)| result));
            if let Err(e) = &outcome {
                tracing::info!(code = e.code().as_str(), "a kept-alive copy failed");
            }
            return Poll::Ready(Some(Ok(Frame::data(outcome_document(outcome)))));
        }
        match this.tick.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b" "))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.started && self.task.is_none()
    }
}
