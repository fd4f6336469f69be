//! Operations on several keys or ranges in one call, run on the runtime without bytes passing through Python:
//! [`copy`] (a read of the source streamed into a put of the destination; `rename` deletes the source's version
//! after it), [`delete_many`] (deletes in flight together) and [`get_ranges`] (ranges of one version of a blob,
//! nearby ones read as one).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use futures::{Stream, StreamExt, TryStreamExt};
use saltblob::encryption::CustomerKey;
use saltblob::{BlobStore, BlobStream, Error, GetOptions, PutCondition, PutOptions, VersionId};
use tokio::io::{AsyncRead, ReadBuf};

/// Deletes (and range reads) one call keeps in flight.
const IN_FLIGHT: usize = 16;

/// Requested ranges closer than this are read as one range (the gap is read and dropped): one request costs more
/// than reading a chunk's worth of bytes.
const COALESCE_GAP: u64 = 64 << 10;

/// How often [`get_ranges`] reads again when the key was overwritten between its range reads.
const ATTEMPTS: u32 = 3;

/// The bytes of a read as an [`AsyncRead`]: the source of a copy. A read error is kept in `failed`, so that the
/// copy reports it as it is, not as the put's I/O error.
struct StreamRead {
    stream: BlobStream,
    current: Bytes,
    failed: Arc<Mutex<Option<Error>>>,
}

impl AsyncRead for StreamRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.current.is_empty() {
                let n = self.current.len().min(buf.remaining());
                buf.put_slice(&self.current[..n]);
                self.current.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.stream).poll_next(cx)) {
                Some(Ok(piece)) => self.current = piece,
                Some(Err(e)) => {
                    let shown = e.to_string();
                    *self
                        .failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                    return Poll::Ready(Err(io::Error::other(shown)));
                }
                None => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// What a copy did: the destination's new version, and the version of the source it copied.
pub(crate) struct Copied {
    pub(crate) manifest: saltblob::Manifest,
    pub(crate) source_version: VersionId,
}

/// Copies the current version of `src` to `dst` as a new version of `dst`, with the source's content type and
/// metadata; with `overwrite` false, only if `dst` holds no blob (else [`Error::AlreadyExists`]). A version sealed
/// under `customer_key` is read with it, and the copy sealed under it too.
pub(crate) async fn copy(
    store: &BlobStore,
    src: Bytes,
    dst: Bytes,
    overwrite: bool,
    customer_key: Option<CustomerKey>,
) -> saltblob::Result<Copied> {
    let mut read = GetOptions::new();
    let mut opts = PutOptions::new();
    if let Some(k) = customer_key {
        read = read.with_customer_key(k.clone());
        opts = opts.with_customer_key(k);
    }
    let stream = store.get_stream_with(src, &read).await?;
    let source = stream.manifest.clone();
    opts = opts.with_size_hint(source.size);
    if !overwrite {
        opts = opts.with_condition(PutCondition::IfAbsent);
    }
    opts.content_type = source.content_type.clone();
    opts.metadata = source.metadata.clone();
    let failed = Arc::new(Mutex::new(None));
    let reader = StreamRead {
        stream,
        current: Bytes::new(),
        failed: Arc::clone(&failed),
    };
    match store.put_stream(dst, reader, &opts).await {
        Ok(manifest) => Ok(Copied {
            manifest,
            source_version: source.version,
        }),
        Err(e) => Err(failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or(e)),
    }
}

/// `copy`, then a delete of the source's copied version: a source replaced (or deleted) meanwhile keeps its newer
/// state. Returns the destination's manifest.
pub(crate) async fn rename(
    store: &BlobStore,
    src: Bytes,
    dst: Bytes,
    overwrite: bool,
    customer_key: Option<CustomerKey>,
) -> saltblob::Result<saltblob::Manifest> {
    let copied = copy(store, src.clone(), dst, overwrite, customer_key).await?;
    match store.delete_version(src, copied.source_version).await {
        Ok(()) | Err(Error::NotFound { .. } | Error::PreconditionFailed { .. }) => {
            Ok(copied.manifest)
        }
        Err(e) => Err(e),
    }
}

/// Deletes every key of `keys`, [`IN_FLIGHT`] at a time; returns the version each held (`None` for none), in
/// order. Every delete is tried; the first error, in the order of `keys`, is returned after all ended.
pub(crate) async fn delete_many(
    store: &BlobStore,
    keys: Vec<Bytes>,
) -> saltblob::Result<Vec<Option<VersionId>>> {
    let results: Vec<saltblob::Result<Option<VersionId>>> = futures::stream::iter(keys)
        .map(|k| store.delete(k))
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Ranges `(start, end)` (end exclusive) as the ranges read: each a span `(start, end)` and the requested ranges
/// it covers, by index. Empty requested ranges are in none.
fn coalesce(ranges: &[(u64, u64)]) -> Vec<((u64, u64), Vec<usize>)> {
    let mut order: Vec<usize> = (0..ranges.len())
        .filter(|&i| ranges[i].0 < ranges[i].1)
        .collect();
    order.sort_by_key(|&i| ranges[i]);
    let mut spans: Vec<((u64, u64), Vec<usize>)> = Vec::new();
    for i in order {
        let (start, end) = ranges[i];
        match spans.last_mut() {
            Some(((_, span_end), members)) if start <= span_end.saturating_add(COALESCE_GAP) => {
                *span_end = (*span_end).max(end);
                members.push(i);
            }
            _ => spans.push(((start, end), vec![i])),
        }
    }
    spans
}

/// The version read and the bytes of one range read (`opts` has the range).
async fn read_span(
    store: BlobStore,
    key: Bytes,
    opts: GetOptions,
) -> saltblob::Result<(VersionId, Bytes)> {
    let stream = store.get_stream_with(key, &opts).await?;
    let version = stream.manifest.version;
    Ok((version, stream.collect_bytes().await?))
}

/// The stream of one range (`start < end`) of the current version of `key` (or, with `if_version`, of that version
/// only: another is [`Error::PreconditionFailed`]): [`get_ranges`] of a single range, whose bytes the caller copies
/// once, as they come, into the object it returns, not first into a buffer of their own.
pub(crate) async fn get_range_stream(
    store: &BlobStore,
    key: Bytes,
    (start, end): (u64, u64),
    opts: GetOptions,
    if_version: Option<VersionId>,
) -> saltblob::Result<BlobStream> {
    match store
        .get_stream_with(key.clone(), &opts.with_range(start..end))
        .await
    {
        Ok(stream) => match if_version {
            Some(expected) if stream.manifest.version != expected => {
                Err(Error::PreconditionFailed {
                    key: key.as_ref().into(),
                    expected,
                    actual: Some(stream.manifest.version),
                })
            }
            _ => Ok(stream),
        },
        // A range beyond the current version: when that is not the version asked for, say so (as `get_ranges`).
        Err(e @ Error::RangeNotSatisfiable { .. }) => {
            Err(match (if_version, store.head(key.clone()).await) {
                (Some(expected), Ok(m)) if m.version != expected => Error::PreconditionFailed {
                    key: key.as_ref().into(),
                    expected,
                    actual: Some(m.version),
                },
                _ => e,
            })
        }
        Err(e) => Err(e),
    }
}

/// The bytes of `ranges` (`(start, end)`, end exclusive, each within the blob) of the current version of `key`
/// (or, with `if_version`, of that version only: another is [`Error::PreconditionFailed`]), in the order given.
/// Nearby ranges are read as one, the spans [`IN_FLIGHT`] at a time; all come from one version (read again when
/// the key is overwritten between them).
pub(crate) async fn get_ranges(
    store: &BlobStore,
    key: Bytes,
    ranges: Vec<(u64, u64)>,
    opts: GetOptions,
    if_version: Option<VersionId>,
) -> saltblob::Result<Vec<Bytes>> {
    let spans = coalesce(&ranges);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reads: Vec<_> = spans
            .iter()
            .map(|((start, end), _)| {
                read_span(
                    store.clone(),
                    key.clone(),
                    opts.clone().with_range(*start..*end),
                )
            })
            .collect();
        let read: Vec<(VersionId, Bytes)> = match futures::stream::iter(reads)
            .buffered(IN_FLIGHT)
            .try_collect()
            .await
        {
            Ok(read) => read,
            // A range beyond the current version: when that is not the version asked for, say so.
            Err(e @ Error::RangeNotSatisfiable { .. }) => {
                return Err(match (if_version, store.head(key.clone()).await) {
                    (Some(expected), Ok(m)) if m.version != expected => Error::PreconditionFailed {
                        key: key.as_ref().into(),
                        expected,
                        actual: Some(m.version),
                    },
                    _ => e,
                });
            }
            Err(e) => return Err(e),
        };
        let expected = if_version.or_else(|| read.first().map(|(v, _)| *v));
        if let Some(expected) = expected
            && let Some(other) = read.iter().map(|(v, _)| *v).find(|v| *v != expected)
        {
            if if_version.is_some() || attempt == ATTEMPTS {
                return Err(Error::PreconditionFailed {
                    key: key.as_ref().into(),
                    expected,
                    actual: Some(other),
                });
            }
            continue;
        }
        let mut out = vec![Bytes::new(); ranges.len()];
        for (((span_start, _), members), (_, bytes)) in spans.iter().zip(read) {
            for &i in members {
                let (start, end) = ranges[i];
                let from = usize::try_from(start - span_start).unwrap_or(usize::MAX);
                let to = usize::try_from(end - span_start).unwrap_or(usize::MAX);
                out[i] = bytes
                    .get(from..to)
                    .map(|_| bytes.slice(from..to))
                    .ok_or_else(|| {
                        Error::corrupt(
                            "read",
                            format!(
                                "a range read of {} bytes ended before byte {end} of the blob",
                                bytes.len()
                            ),
                        )
                    })?;
            }
        }
        return Ok(out);
    }
}
