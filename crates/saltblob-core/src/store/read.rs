//! A read: its preamble ([`open`]: the current manifest read in the read's class, the customer key and the range
//! checked against it, the class of the chunk reads chosen by layout, the keys opened), then streaming: a
//! version's chunks fetched batch by batch, at most the in-flight window ahead of the
//! consumer and within the store's read-ahead budget shared by all reads (`ReadBudget`), each checked as it
//! arrives, the digest verified at the end of a full read (each chunk's BLAKE3
//! subtree hashed in the task that fetches and checks it, when the chunk size allows; see `digest.rs`). The
//! chunks of a sealed version are opened there too, with the keys `sealing.rs` derived before the first fetch.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::stream::{self, BoxStream, Stream, StreamExt};

use crate::backend::{BlobRef, ChunkId};
use crate::base::collect::{Collector, ValueBuffers};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::encryption::CustomerKey;
use crate::encryption::seal::VersionKeys;
use crate::format::codec::{ChunkPlace, Opener, decode_owned_chunk};
use crate::format::layout::ChunkLayout;
use crate::format::manifest::{Manifest, ManifestBody, Segment, hex};
use crate::ledger::kept;
use crate::ledger::liveness::{self, Ownership};
use crate::schedule::{ClassTag, PriorityClass, cpu, current_class, in_class};
use crate::state::config::GetOptions;
use crate::state::{BudgetHeld, Inner, ReadBudget};
use crate::store::digest::{BlobDigest, ChunkHash, ChunkHasher};
use crate::store::sealing;

/// The bytes of one version (or a range of it), chunk by chunk, in order.
///
/// At most the store's in-flight window of chunks is fetched ahead of the consumer, and only as far as the
/// store's read-ahead budget allows (the next batch always). A full read verifies the
/// manifest's digest after the last chunk and yields [`Error::DigestMismatch`] instead of ending cleanly if it
/// differs; every chunk is checked against its CRC32C as it arrives.
pub struct BlobStream {
    /// The manifest of the version being read.
    pub manifest: Manifest,
    /// The byte range being read (half-open).
    pub range: Range<u64>,
    stream: BoxStream<'static, Result<Bytes>>,
    /// Where [`BlobStream::collect_bytes`] takes a large value's buffer from: the store's.
    buffers: Arc<ValueBuffers>,
}

impl std::fmt::Debug for BlobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStream")
            .field("manifest", &self.manifest)
            .field("range", &self.range)
            .finish()
    }
}

impl Stream for BlobStream {
    type Item = Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

impl BlobStream {
    /// Reads the whole stream into one buffer (a large value into huge pages: see `collect.rs`).
    pub async fn collect_bytes(mut self) -> Result<Bytes> {
        let len = usize::try_from(self.range.end - self.range.start).unwrap_or(0);
        let mut out = Collector::new(len, &self.buffers);
        while let Some(piece) = self.stream.next().await {
            out.push(&piece?);
        }
        Ok(out.finish())
    }
}

/// Opens a read of the current version of a validated `key` as `opts` say; see
/// [`crate::store::BlobStore::get_stream_with`], whose errors these are.
pub(crate) async fn open(inner: &Arc<Inner>, key: Bytes, opts: &GetOptions) -> Result<BlobStream> {
    let sched = &inner.sched;
    let manifest_class = sched.choose(opts.priority.as_ref(), PriorityClass::interactive())?;
    let manifest = in_class(manifest_class, kept::manifest_of(inner, &key, opts.version)).await?;
    let customer = opts.customer_key.as_ref();
    if customer.is_some() && manifest.sealed_by_customer().is_none() {
        return Err(Error::invalid(
            crate::encryption::CUSTOMER_KEY_NOT_APPLICABLE,
            format!(
                "version {} of key \"{}\" is not sealed under a customer key, so a read of it takes none \
                 (its manifest's encryption says how it is sealed, if at all)",
                manifest.version,
                KeyDisplay::from(key.as_ref())
            ),
        ));
    }
    let range = match opts.range {
        Some(range) => range.resolve(manifest.size),
        None => 0..manifest.size,
    };
    if range.start > range.end || range.end > manifest.size {
        return Err(Error::RangeNotSatisfiable {
            key: key.as_ref().into(),
            start: range.start,
            end: range.end,
            size: manifest.size,
        });
    }
    let by_layout = PriorityClass::for_layout(Some(manifest.layout()));
    let class = sched.choose(opts.priority.as_ref(), by_layout)?;
    let keys = sealing::for_read(inner, &key, &manifest, customer).await?;
    sealing::check_segments(inner, &key, &manifest, &range, customer).await?;
    Ok(stream_version(
        inner,
        key,
        manifest,
        range,
        class,
        keys,
        opts.customer_key.clone(),
    ))
}

/// Streams bytes `range` of version `manifest` of `key` (a range within the blob), its chunks read in `class`
/// and, for a sealed version, opened with `keys` (`sealing::for_read`; a segmented version's segments are
/// opened each, with the read's customer key `customer` where they need it); verifies the digest when the range
/// is the whole blob.
pub(crate) fn stream_version(
    inner: &Arc<Inner>,
    key: Bytes,
    manifest: Manifest,
    range: Range<u64>,
    class: Option<ClassTag>,
    keys: Option<Arc<VersionKeys>>,
    customer: Option<CustomerKey>,
) -> BlobStream {
    let full = range.start == 0 && range.end == manifest.size;
    let stream: BoxStream<'static, Result<Bytes>> = match &manifest.body {
        ManifestBody::Inline(stored) => {
            let opened = match &keys {
                Some(keys) => keys.open_inline(stored, manifest.size).map_err(|e| {
                    Error::corrupt(
                        format!(
                            "inline value of key \"{}\" version {}",
                            KeyDisplay::from(&key[..]),
                            manifest.version
                        ),
                        e.to_string(),
                    )
                }),
                None => Ok(stored.clone()),
            };
            let item = match opened {
                Err(e) => Err(e),
                Ok(data)
                    if full
                        && !digest_matches(&manifest, keys.as_deref(), &blake3::hash(&data)) =>
                {
                    Err(digest_error(&key, &manifest, blake3::hash(&data)))
                }
                Ok(data) => {
                    let (s, e) = (usize::try_from(range.start), usize::try_from(range.end));
                    match (s, e) {
                        (Ok(s), Ok(e)) if s <= e && e <= data.len() => Ok(data.slice(s..e)),
                        _ => Err(Error::corrupt(
                            "inline manifest",
                            "range outside the inline payload",
                        )),
                    }
                }
            };
            stream::once(async move { item }).boxed()
        }
        ManifestBody::Chunked { layout, .. } => stream_chunks(
            inner,
            key,
            &manifest,
            *layout,
            range.clone(),
            full,
            class,
            keys,
        ),
        ManifestBody::Segmented(segments) => stream_segments(
            inner,
            key,
            &manifest,
            segments,
            range.clone(),
            class,
            customer,
        ),
    };
    BlobStream {
        manifest,
        range,
        stream,
        buffers: Arc::clone(&inner.value_buffers),
    }
}

/// Streams `range` of a segmented version: each segment it touches in turn, read as a version of its own
/// (whose digest is verified when the range covers the segment whole), so that memory stays that of one read.
fn stream_segments(
    inner: &Arc<Inner>,
    key: Bytes,
    manifest: &Manifest,
    segments: &[Segment],
    range: Range<u64>,
    class: Option<ClassTag>,
    customer: Option<CustomerKey>,
) -> BoxStream<'static, Result<Bytes>> {
    let mut parts = Vec::new();
    let mut start = 0u64;
    for segment in segments {
        let end = start + segment.size;
        if start < range.end && range.start < end && segment.size > 0 {
            let part = Manifest {
                version: segment.version,
                size: segment.size,
                digest: segment.digest,
                body: segment.body.clone(),
                content_type: None,
                metadata: Default::default(),
                sealing: segment.sealing.clone(),
                ..manifest.clone()
            };
            let within = range.start.max(start) - start..range.end.min(end) - start;
            parts.push((part, within));
        }
        start = end;
    }
    let inner = Arc::clone(inner);
    stream::iter(parts)
        .then(move |(part, within)| {
            let (inner, key, class) = (Arc::clone(&inner), key.clone(), class.clone());
            let customer = customer.clone();
            async move {
                // A sealed segment is opened with its own keys, derived when the read reaches it.
                match sealing::for_read(&inner, &key, &part, customer.as_ref()).await {
                    Ok(keys) => stream_version(&inner, key, part, within, class, keys, None).stream,
                    Err(e) => stream::once(async move { Err(e) }).boxed(),
                }
            }
        })
        .flatten()
        .boxed()
}

#[expect(clippy::too_many_arguments, reason = "the read's plan, passed once")]
fn stream_chunks(
    inner: &Arc<Inner>,
    key: Bytes,
    manifest: &Manifest,
    layout: ChunkLayout,
    range: Range<u64>,
    verify_digest: bool,
    class: Option<ClassTag>,
    keys: Option<Arc<VersionKeys>>,
) -> BoxStream<'static, Result<Bytes>> {
    let chunks = layout.chunks_covering(&range);
    let (per_batch, depth) =
        inner.read_batches_of(layout.chunk_size, class.as_ref(), manifest.size);
    // Lazily: a blob of millions of chunks needs no list of its batches.
    let batches = (chunks.start..chunks.end)
        .step_by(usize::try_from(per_batch).unwrap_or(1))
        .map(move |s| s..(s + per_batch).min(chunks.end));
    let budget = Arc::clone(&inner.read_budget);
    let inner = Arc::clone(inner);
    let digest = verify_digest.then(|| BlobDigest::new(layout.chunk_size, class.clone()));
    let hasher = digest.as_ref().and_then(BlobDigest::chunk_hasher);
    let (version, size) = (manifest.version, manifest.size);
    let blob = BlobRef {
        key: key.clone(),
        version,
    };
    let chunk_size = u64::from(layout.chunk_size);
    let digest_keys = keys.clone();
    let fetches = Fetches {
        batches: Box::new(batches.peekable()),
        start: Box::new(move |batch: Range<u64>| {
            let fetch = fetch_batch(
                Arc::clone(&inner),
                blob.clone(),
                layout,
                size,
                batch,
                range.clone(),
                hasher,
                keys.clone(),
            );
            AbortOnDrop(tokio::spawn(in_class(class.clone(), fetch)))
        }),
        queue: VecDeque::new(),
        depth,
        budget,
        chunk_size,
    };
    let state = ReadState {
        fetches,
        pending: VecDeque::new(),
        held: None,
        digest,
        digest_keys,
        key,
        manifest: manifest.clone(),
        done: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(piece) = st.pending.pop_front() {
                return Some((Ok(piece), st));
            }
            // The consumer has taken the last batch: its read-ahead goes back to the budget.
            st.held = None;
            if st.done {
                return None;
            }
            match st.fetches.next().await {
                Some((Ok((pieces, hashes)), held)) => {
                    st.held = Some(held);
                    if let Some(d) = st.digest.as_mut()
                        && let Err(e) = add_to_digest(d, &pieces, hashes).await
                    {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                    st.pending.extend(pieces);
                }
                Some((Err(e), _)) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                None => {
                    st.done = true;
                    if let Some(mut d) = st.digest.take() {
                        let got = match d.finalize().await {
                            Ok(got) => got,
                            Err(e) => return Some((Err(e), st)),
                        };
                        if !digest_matches(&st.manifest, st.digest_keys.as_deref(), &got) {
                            let err = digest_error(&st.key, &st.manifest, got);
                            return Some((Err(err), st));
                        }
                    }
                    return None;
                }
            }
        }
    })
    .boxed()
}

/// Adds a fetched batch to the digest of a full read: its subtrees to a tree, its bytes to a sequential one.
async fn add_to_digest(
    digest: &mut BlobDigest,
    pieces: &[Bytes],
    hashes: Vec<ChunkHash>,
) -> Result<()> {
    digest.add(hashes)?;
    for piece in pieces {
        digest.update(piece).await?;
    }
    Ok(())
}

/// A spawned task that is aborted when its handle is dropped, so that a reader who stops early does not leave
/// chunk fetches running.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A read's batch fetches: started in order, at most `depth` in flight, each holding its bytes of the store's
/// read-ahead budget until the consumer has taken it; the first in the queue always starts (see
/// [`ReadBudget`]).
struct Fetches {
    batches: Box<dyn PeekableBatches>,
    start: Box<dyn Fn(Range<u64>) -> AbortOnDrop<Result<Fetched>> + Send>,
    queue: VecDeque<(AbortOnDrop<Result<Fetched>>, BudgetHeld)>,
    depth: usize,
    budget: Arc<ReadBudget>,
    chunk_size: u64,
}

/// The batches of a read still to fetch.
trait PeekableBatches: Iterator<Item = Range<u64>> + Send {
    fn peek_batch(&mut self) -> Option<&Range<u64>>;
}

impl<I: Iterator<Item = Range<u64>> + Send> PeekableBatches for std::iter::Peekable<I> {
    fn peek_batch(&mut self) -> Option<&Range<u64>> {
        self.peek()
    }
}

impl Fetches {
    /// The next batch in order, with its share of the budget; `None` when all have been fetched.
    async fn next(&mut self) -> Option<(Result<Fetched>, BudgetHeld)> {
        while self.queue.len() < self.depth {
            let Some(batch) = self.batches.peek_batch() else {
                break;
            };
            let bytes = (batch.end - batch.start) * self.chunk_size;
            let Some(held) = self.budget.take(bytes, self.queue.is_empty()) else {
                break;
            };
            let Some(batch) = self.batches.next() else {
                break;
            };
            self.queue.push_back(((self.start)(batch), held));
        }
        let (task, held) = self.queue.pop_front()?;
        let fetched = task
            .await
            .map_err(|e| Error::internal("read task failed", e))
            .and_then(|r| r);
        Some((fetched, held))
    }
}

struct ReadState {
    fetches: Fetches,
    pending: VecDeque<Bytes>,
    /// The read-ahead of the batch in `pending`.
    held: Option<BudgetHeld>,
    /// Present when the read covers the whole blob and its digest is to be verified.
    digest: Option<BlobDigest>,
    /// The keys of a sealed version, whose manifest holds its digest keyed ([`digest_matches`]).
    digest_keys: Option<Arc<VersionKeys>>,
    key: Bytes,
    manifest: Manifest,
    done: bool,
}

/// A fetched batch: its chunks' raw bytes in order, trimmed to the range read, and their subtrees when hashed.
type Fetched = (Vec<Bytes>, Vec<ChunkHash>);

/// Fetches and decodes chunks `batch`, trimmed to `range`; hashes their subtrees with `hasher` if given; opens
/// them with `keys` when the version is sealed.
#[expect(clippy::too_many_arguments, reason = "one batch of the read's plan")]
async fn fetch_batch(
    inner: Arc<Inner>,
    blob: BlobRef,
    layout: ChunkLayout,
    size: u64,
    batch: Range<u64>,
    range: Range<u64>,
    hasher: Option<ChunkHasher>,
    keys: Option<Arc<VersionKeys>>,
) -> Result<Fetched> {
    let ids: Vec<ChunkId> = batch
        .map(|index| ChunkId {
            salt: layout.salt_of(index),
            index,
        })
        .collect();
    let slots = inner
        .chunk_backoff()
        .run(|| inner.backend.get_chunks(&blob, &ids))
        .await?;
    if slots.len() != ids.len() {
        return Err(Error::backend(
            inner.info.name,
            format!("asked for {} chunks, got {} slots", ids.len(), slots.len()),
            false,
        ));
    }
    if let Some(at) = slots.iter().position(Option::is_none) {
        return Err(missing_chunk(&inner, &blob, ids[at]).await);
    }
    let stored: Vec<Bytes> = slots.into_iter().flatten().collect();
    // Checksums (and decompression, hashing) of a background class run on the bulk CPU pool.
    cpu::run(current_class().as_ref(), move || {
        decode_batch(
            &blob,
            layout,
            size,
            &ids,
            stored,
            &range,
            hasher,
            keys.as_deref(),
        )
    })
    .await?
}

/// The raw bytes of `stored` chunks `ids` of `blob`, checked (and opened with `keys`, for a sealed version) and
/// trimmed to `range`, and the subtrees of the whole chunks when `hasher` is given.
#[expect(clippy::too_many_arguments, reason = "one batch of the read's plan")]
fn decode_batch(
    blob: &BlobRef,
    layout: ChunkLayout,
    size: u64,
    ids: &[ChunkId],
    stored: Vec<Bytes>,
    range: &Range<u64>,
    hasher: Option<ChunkHasher>,
    keys: Option<&VersionKeys>,
) -> Result<Fetched> {
    let mut out = Vec::with_capacity(ids.len());
    let mut hashes = Vec::with_capacity(if hasher.is_some() { ids.len() } else { 0 });
    for (id, stored) in ids.iter().zip(stored) {
        let place = ChunkPlace {
            key: &blob.key,
            version: blob.version,
            index: id.index,
        };
        let span = layout.chunk_span(id.index, size);
        let opener = keys.map(|keys| Opener {
            keys,
            last: id.index + 1 == layout.chunk_count,
        });
        let raw = decode_owned_chunk(place, stored, span.end - span.start, opener)?;
        if let Some(hasher) = hasher {
            hashes.push(hasher.hash(id.index, &raw));
        }
        let lo = range.start.max(span.start) - span.start;
        let hi = range.end.min(span.end) - span.start;
        out.push(raw.slice(usize::try_from(lo).unwrap_or(0)..usize::try_from(hi).unwrap_or(0)));
    }
    Ok((out, hashes))
}

/// The error for a chunk that is not there: the version was replaced and reclaimed during the read, or the
/// chunk is lost.
async fn missing_chunk(inner: &Inner, blob: &BlobRef, id: ChunkId) -> Error {
    match liveness::ownership(inner, blob).await {
        Ok(Ownership::NotOwned) => Error::VersionReclaimed {
            key: blob.key[..].into(),
            version: blob.version,
        },
        _ => Error::MissingChunk {
            key: blob.key[..].into(),
            version: blob.version,
            chunk: id.index,
            salt: id.salt,
        },
    }
}

/// Whether `got`, the BLAKE3-256 of what a full read of `manifest` returned, is the digest the manifest holds
/// (keyed with `keys` for a sealed version).
fn digest_matches(manifest: &Manifest, keys: Option<&VersionKeys>, got: &blake3::Hash) -> bool {
    match keys {
        Some(keys) => keys.seal_digest(got) == manifest.digest,
        None => got.as_bytes() == &manifest.digest,
    }
}

fn digest_error(key: &[u8], manifest: &Manifest, got: blake3::Hash) -> Error {
    Error::DigestMismatch {
        key: key.into(),
        version: manifest.version,
        expected: manifest.digest_hex(),
        actual: hex(got.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use crate::backend::memory::MemoryStore;
    use crate::base::units::KIB;
    use crate::format::layout::LayoutPolicy;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;

    /// Readers that stop reading hold the store's one read-ahead budget plus at most one batch each, not a
    /// window each (audit F10); each still reads its blob whole, and the budget is all given back.
    #[tokio::test]
    async fn readers_share_one_read_ahead_budget() {
        const READERS: u64 = 8;
        let batch = 64 * KIB;
        let budget = 256 * KIB;
        let config = StoreConfig::default()
            .with_policy(
                LayoutPolicy::default()
                    .with_inline_limit(1000)
                    .with_single_chunk_size(16 * KIB as u32),
            )
            .with_inflight_bytes(1024 * KIB as usize)
            .with_batch_bytes(batch as usize)
            .with_read_ahead_budget(budget as usize);
        let store = BlobStore::new(std::sync::Arc::new(MemoryStore::new()), config).expect("store");
        let data: Vec<u8> = (0..4096 * KIB).map(|i| (i % 253) as u8).collect();
        store
            .put("k", data.clone(), &PutOptions::new())
            .await
            .expect("put");
        let mut readers = Vec::new();
        for _ in 0..READERS {
            let mut stream = store.get_stream("k").await.expect("stream");
            let first = stream.next().await.expect("a piece").expect("read");
            readers.push((stream, first.to_vec()));
        }
        // Let every fetch the readers may start finish.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let (held, limit) = store.read_ahead();
        println!(
            "{READERS} stalled readers hold {} KiB of read-ahead (budget {} KiB, one window {} KiB)",
            held / KIB,
            limit / KIB,
            1024
        );
        assert_eq!(limit, budget);
        assert!(
            held <= budget + READERS * batch,
            "{held} bytes held: more than the budget plus a batch per reader"
        );
        for (mut stream, mut got) in readers {
            while let Some(piece) = stream.next().await {
                got.extend_from_slice(&piece.expect("read"));
            }
            assert!(got == data, "read whole");
        }
        assert_eq!(store.read_ahead().0, 0, "all given back");
    }
}
