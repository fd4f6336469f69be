//! A put: its plan ([`PutPlan`]: key, layout policy with the put's overrides, the start of the blob, class: the one
//! preamble of `put`, `put_stream` and `put_segment`), then its pipeline ([`put`]): the condition is checked (and
//! pinned to the record read: `commit.rs`), an inline value commits at once; a chunked one takes its intent lease
//! (`ledger/intent/`), streams its chunks through the [`ChunkWriter`], claims its intent (which gc can then no
//! longer take over) and commits its manifest through [`commit::change_manifest`], which queues the version it
//! replaces for reclaim first. Where the backend writes atomic groups of records there is no claim: the reclaim
//! entries, the manifest and the intent's conditional removal are one write; and a put whose chunks fit one
//! backend call takes no intent at all: its chunks go into that write too (as its sink says:
//! [`crate::backend::SinkForm::Commit`]), so a small chunked put is one engine write.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use std::sync::Arc;

use crate::backend::{BlobRef, SinkPlan};
use crate::base::error::{Error, Result};
use crate::base::shown::hex;
use crate::format::codec::Codec;
use crate::format::layout::{Layout, LayoutPolicy, STREAM_PLAN_BYTES};
use crate::format::manifest::{Manifest, ManifestBody, SEALED_METADATA_KEY, encode_entries};
use crate::ledger::intent::{IntentLease, Progress};
use crate::schedule::{self, ClassTag, PriorityClass};
use crate::state::Inner;
use crate::state::config::{PutCondition, PutOptions};
use crate::store::chunk_writer::ChunkWriter;
use crate::store::commit::{self, Change, Changed, CommitChunks, Fences, Pinned};
use crate::store::key::validate_key;
use crate::store::sealing::{self, PutSealing};

/// overrides, the start of the blob (all of it when `eof`) and the class the put runs in. Bad input (key,
/// options, class) fails here, before any byte of a stream is read.
pub(crate) struct PutPlan {
    key: Bytes,
    opts: PutOptions,
    policy: LayoutPolicy,
    head: Bytes,
    eof: bool,
    class: Option<ClassTag>,
}

impl PutPlan {
    /// The plan of a put of `data`, whole in memory: its size is known.
    pub(crate) fn of_bytes(
        inner: &Inner,
        key: &[u8],
        opts: &PutOptions,
        data: Bytes,
    ) -> Result<Self> {
        let key = validate_key(key)?;
        let opts = opts.clone().with_size_hint(data.len() as u64);
        let policy = policy_for(inner, &opts)?;
        let class = class_for(inner, &policy, &opts, data.len() as u64, true)?;
        Ok(Self {
            key,
            opts,
            policy,
            head: data,
            eof: true,
            class,
        })
    }

    /// The plan of a put of what `reader` yields: reads the start of it, enough to choose the layout
    /// ([`read_head`]), once the key, options and class are known to be good.
    pub(crate) async fn read<R: AsyncRead + Unpin>(
        inner: &Inner,
        key: &[u8],
        opts: &PutOptions,
        reader: &mut R,
    ) -> Result<Self> {
        let key = validate_key(key)?;
        let policy = policy_for(inner, opts)?;
        inner
            .sched
            .choose(opts.priority.as_ref(), PriorityClass::interactive())?;
        let (head, eof) = read_head(inner, &policy, opts, reader).await?;
        let class = class_for(inner, &policy, opts, head.len() as u64, eof)?;
        Ok(Self {
            key,
            opts: opts.clone(),
            policy,
            head,
            eof,
            class,
        })
    }

    /// Runs the put in its class: [`put`], with `reader` the rest of the blob after the head.
    pub(crate) async fn run<R>(self, inner: &Inner, reader: R, finish: Finish) -> Result<Manifest>
    where
        R: AsyncRead + Unpin + Send,
    {
        let class = self.class.clone();
        schedule::in_class(class, put(inner, self, reader, finish)).await
    }
}

/// The store's layout policy with the put's overrides, checked.
fn policy_for(inner: &Inner, opts: &PutOptions) -> Result<LayoutPolicy> {
    let mut policy = inner.config.policy.clone();
    if let Some(cs) = opts.chunk_size {
        policy = policy.with_single_chunk_size(cs);
    }
    if let Some(s) = opts.max_salt {
        policy.max_salt = s;
    }
    if let Some(c) = opts.codec {
        policy.codec = c;
    }
    policy.validate(inner.info.max_chunk_payload())?;
    Ok(policy)
}

/// The class a put runs in ([`PutOptions::priority`], else the store's default, else by layout): `interactive`
/// when the blob is inline or single-partition, `bulk` when it is salted or a stream longer than its head
/// (`head_len` bytes read, `eof` whether that was all). `None` when scheduling is off.
fn class_for(
    inner: &Inner,
    policy: &LayoutPolicy,
    opts: &PutOptions,
    head_len: u64,
    eof: bool,
) -> Result<Option<ClassTag>> {
    let size = opts.size_hint.or(eof.then_some(head_len));
    let by_layout = PriorityClass::for_layout(size.map(|s| policy.layout_for(s)));
    inner.sched.choose(opts.priority.as_ref(), by_layout)
}

/// Reads the start of a put's stream: enough to choose the layout. Returns it and whether the stream ended.
///
/// When the length is known ([`PutOptions::size_hint`]), that is the inline limit + 1 bytes; otherwise up to the
/// in-flight window (at most the fan-out threshold + 1 bytes).
async fn read_head<R: AsyncRead + Unpin>(
    inner: &Inner,
    policy: &LayoutPolicy,
    opts: &PutOptions,
    reader: &mut R,
) -> Result<(Bytes, bool)> {
    let inline_probe = policy.inline_limit + 1;
    let lookahead = match opts.size_hint {
        Some(_) => inline_probe,
        None => (policy.fanout_threshold + 1)
            .min(inner.config.inflight_bytes as u64)
            .max(inline_probe),
    };
    let mut head = Vec::new();
    let target = usize::try_from(lookahead).unwrap_or(usize::MAX);
    let eof = fill(reader, &mut head, target).await?;
    Ok((Bytes::from(head), eof))
}

/// How a put ends once its chunks are stored.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Finish {
    /// Commit the manifest: the version becomes current.
    Commit,
    /// Commit nothing; park the intent until this time (Unix µs), so that the chunks stay a segment that a
    /// compose may claim until then (see `store/segments.rs`). The manifest returned is not stored.
    Park(u64),
}

/// The put pipeline of `plan`, `reader` being the rest of the blob after its head. Writes the intent, the
/// chunks, then commits or parks.
async fn put<R>(inner: &Inner, plan: PutPlan, mut reader: R, finish: Finish) -> Result<Manifest>
where
    R: AsyncRead + Unpin + Send,
{
    let PutPlan {
        key,
        opts,
        policy,
        head,
        eof,
        class: _,
    } = plan;
    let opts = &opts;
    let head_len = head.len() as u64;
    check_size(inner, &key, head_len, opts.size_hint)?;
    let known_size = match (opts.size_hint, eof) {
        (Some(hint), true) if hint != head_len => {
            return Err(Error::SizeMismatch {
                key: key.as_ref().into(),
                expected: hint,
                actual: head_len,
            });
        }
        (Some(hint), _) => Some(hint),
        (None, true) => Some(head_len),
        (None, false) => None,
    };
    if let Some(size) = known_size {
        check_size(inner, &key, size, None)?;
    }
    let now = inner.now_micros();
    let mut manifest = Manifest {
        version: inner.config.clock.draw_version(now),
        size: 0,
        created_micros: now,
        expires_micros: opts.expiry(now)?,
        digest: [0; 32],
        body: ManifestBody::Inline(Bytes::new()),
        content_type: opts.content_type.clone(),
        metadata: opts.metadata.clone(),
        sealing: None,
    };
    manifest.validate_attributes()?;
    // A segment (parked) is sealed under its own version, as a put is.
    let sealed = sealing::for_put(inner, &key, manifest.version, opts).await?;
    let codec = match &sealed {
        Some(s) if !s.compress => Codec::None,
        _ => policy.codec,
    };
    manifest.sealing = sealed.as_ref().map(|s| s.sealing.clone());
    let expect = check_condition(inner, &key, opts.condition).await?;

    let layout = known_size.map(|s| policy.layout_for(s));
    if layout == Some(Layout::Inline) {
        add_late_metadata(&mut manifest, opts, sealed.as_ref())?;
        manifest.size = head_len;
        let digest = blake3::hash(&head);
        (manifest.digest, manifest.body) = match &sealed {
            Some(PutSealing { keys, .. }) => (
                keys.seal_digest(&digest),
                ManifestBody::Inline(keys.seal_inline(&head)?),
            ),
            None => (*digest.as_bytes(), ManifestBody::Inline(head)),
        };
        if let Finish::Commit = finish {
            commit_put(inner, &key, &manifest, opts, expect, Fences::none()).await?;
        }
        return Ok(manifest);
    }

    let planned_salt = match layout {
        Some(Layout::Chunked(l)) => l.salt_count,
        _ => policy.stream_salt_count(inner.config.max_blob_size.unwrap_or(STREAM_PLAN_BYTES)),
    };
    let blob = BlobRef {
        key: key.clone(),
        version: manifest.version,
    };
    // Held until the put returns, then freed off its path (see `FreedOffPath`).
    let _payload = FreedOffPath::of(&head, eof);
    let chunk_size = policy.chunk_size_for(known_size);
    // The backend chooses how the chunks are stored, and whether the commit is one atomic group.
    let plan = SinkPlan::new(
        chunk_size,
        known_size,
        known_size.unwrap_or(head_len),
        inner.chunks_per_batch(chunk_size, schedule::current_class().as_ref()),
        matches!(finish, Finish::Commit),
    );
    let progress = Arc::new(Progress::default());
    let mut writer = ChunkWriter::new(
        inner,
        blob.clone(),
        planned_salt,
        codec,
        chunk_size,
        inner.backend.chunk_sink(&plan),
        Arc::clone(&progress),
        sealed.as_ref().map(|s| Arc::clone(&s.keys)),
    );
    // A put whose chunks its commit writes (in one atomic group with the manifest) stores nothing before it, and
    // takes no intent. Any other takes its intent first: a writer that dies from here on leaves a record that
    // lets gc find its chunks.
    let lease = if writer.in_commit() {
        None
    } else {
        let group = writer.commit_group();
        let parked = matches!(finish, Finish::Park(_));
        Some(IntentLease::acquire(inner, &blob, planned_salt, group, parked, progress).await?)
    };
    let written = match writer.begin().await {
        Ok(()) => {
            write_chunks(
                inner,
                &key,
                &mut reader,
                head,
                eof,
                &mut writer,
                opts.size_hint,
            )
            .await
        }
        Err(e) => Err(e),
    };
    let written = written.and_then(|written| match opts.size_hint {
        Some(hint) if hint != written.size => Err(Error::SizeMismatch {
            key: key.as_ref().into(),
            expected: hint,
            actual: written.size,
        }),
        _ => Ok(written),
    });
    let written =
        written.and_then(|w| add_late_metadata(&mut manifest, opts, sealed.as_ref()).map(|()| w));
    // A put whose intent was taken over must not commit: gc may already be deleting its chunks. The claim
    // settles that race for good (see `intent/`).
    let written = match (written, finish, &lease) {
        (Ok(w), Finish::Commit, Some(lease)) => lease.claim(inner).await.map(|()| w),
        (written, _, _) => written,
    };
    let written = match written {
        Ok(v) => v,
        Err(e) => {
            let deleted = writer.abort().await;
            end_lease(lease, deleted).await;
            return Err(e);
        }
    };
    manifest.size = written.size;
    manifest.digest = match &sealed {
        Some(s) => s.keys.seal_digest(&written.digest),
        None => *written.digest.as_bytes(),
    };
    manifest.body = ManifestBody::Chunked {
        layout: writer.layout(),
        codec,
        stored_bytes: written.stored_bytes,
    };
    let chunks = match (writer.take_for_commit(), lease) {
        (Some(chunks), _) => CommitChunks::InGroup(chunks),
        (None, Some(lease)) => CommitChunks::Leased(lease),
        (None, None) => {
            return Err(Error::internal(
                "put",
                "a chunked put with neither an intent nor chunks for its commit",
            ));
        }
    };
    match (finish, chunks) {
        (Finish::Commit, chunks) => {
            let fences = Fences::chunks(chunks);
            commit_put(inner, &key, &manifest, opts, expect, fences).await?
        }
        // A failure leaves the intent to expire at its last renewal, after which gc reclaims the chunks.
        (Finish::Park(until), CommitChunks::Leased(lease)) => lease.park(until).await?,
        (Finish::Park(_), _) => {
            return Err(Error::internal("put", "a parked put without an intent"));
        }
    }
    Ok(manifest)
}

/// The smallest buffer [`FreedOffPath`] frees on a blocking thread: below it, freeing costs less than handing
/// it over.
const FREE_OFF_PATH_MIN: usize = 4 << 20;

/// A reference to the buffer a put was given whole (`put` of a value in memory), dropped on a blocking thread
/// when the put returns. The chunks are slices of that buffer, so without it whichever chunk task finished
/// last would free it, and the put would wait for that: unmapping 60 MiB took 15–18 ms on the machine of
/// docs/bench/journal/extents.md (*Where a 60 MiB put's time goes*), a third of the put. Freeing the caller's
/// memory is no part of making the value durable. Smaller buffers are dropped where they are, and so is a
/// stream's read-ahead (holding it to the end would only add to the put's memory).
struct FreedOffPath(Option<Bytes>);

impl FreedOffPath {
    /// Holds `head` when it is the whole value (`eof`) and large.
    fn of(head: &Bytes, eof: bool) -> Self {
        Self((eof && head.len() >= FREE_OFF_PATH_MIN).then(|| head.clone()))
    }
}

impl Drop for FreedOffPath {
    fn drop(&mut self) {
        if let Some(buffer) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn_blocking(move || drop(buffer));
        }
    }
}

/// Stores what the body told [`PutOptions::late_metadata`] in `manifest`, once the body has ended: in the clear,
/// or, for a version `sealed`, sealed under its keys as one entry ([`SEALED_METADATA_KEY`]), since what is learnt
/// from the body (its checksums) tells of the plaintext.
fn add_late_metadata(
    manifest: &mut Manifest,
    opts: &PutOptions,
    sealed: Option<&PutSealing>,
) -> Result<()> {
    let Some(late) = &opts.late_metadata else {
        return Ok(());
    };
    let entries = late.entries();
    match sealed {
        None => manifest.metadata.extend(entries),
        Some(_) if entries.is_empty() => {}
        Some(s) => {
            let note = s.keys.seal_note(&encode_entries(&entries))?;
            manifest
                .metadata
                .insert(SEALED_METADATA_KEY.to_owned(), hex(&note));
        }
    }
    manifest.validate_attributes()
}

/// What [`write_chunks`] wrote.
struct Written {
    /// Raw bytes.
    size: u64,
    stored_bytes: u64,
    digest: blake3::Hash,
}

/// Feeds `head` and then the rest of `reader` to `writer` chunk by chunk.
async fn write_chunks<R: AsyncRead + Unpin + Send>(
    inner: &Inner,
    key: &Bytes,
    reader: &mut R,
    mut head: Bytes,
    mut eof: bool,
    writer: &mut ChunkWriter,
    size_hint: Option<u64>,
) -> Result<Written> {
    let cs = writer.chunk_size() as usize;
    let mut size = 0u64;
    loop {
        while head.len() >= cs || (eof && !head.is_empty()) {
            let chunk = head.split_to(cs.min(head.len()));
            size += chunk.len() as u64;
            writer.push(chunk).await?;
        }
        if eof {
            break;
        }
        let mut buf = Vec::with_capacity(cs);
        buf.extend_from_slice(&head);
        eof = fill(reader, &mut buf, cs).await?;
        check_size(inner, key, size + buf.len() as u64, size_hint)?;
        head = Bytes::from(buf);
    }
    let (stored_bytes, digest) = writer.finish().await?;
    Ok(Written {
        size,
        stored_bytes,
        digest,
    })
}

/// Fails as soon as a put has seen more bytes than the configured maximum or its announced size.
pub(crate) fn check_size(
    inner: &Inner,
    key: &[u8],
    seen: u64,
    size_hint: Option<u64>,
) -> Result<()> {
    if let Some(max) = inner.config.max_blob_size
        && seen > max
    {
        return Err(Error::TooLarge {
            key: key.into(),
            size: seen,
            max,
        });
    }
    match size_hint {
        Some(hint) if seen > hint => Err(Error::SizeMismatch {
            key: key.into(),
            expected: hint,
            actual: seen,
        }),
        _ => Ok(()),
    }
}

/// Checks a put's `condition` before any chunk is written, and pins it to the record read (see [`commit::pin`]).
///
/// # Errors
/// [`Error::AlreadyExists`] or [`Error::PreconditionFailed`] when it does not hold.
pub(crate) async fn check_condition(
    inner: &Inner,
    key: &Bytes,
    condition: PutCondition,
) -> Result<Pinned> {
    commit::pin(inner, key, condition.into())
        .await?
        .map_err(|current| condition_error(inner, key, condition, current.as_ref()))
}

/// Commits `manifest` as the current version of `key` under the put's pinned `expect` and `fences` (see
/// [`commit::change_manifest`]), keeping the version it replaces when `opts` say so
/// ([`PutOptions::keep_replaced`]).
///
/// # Errors
/// Those of [`commit::change_manifest`]; [`Error::AlreadyExists`] or [`Error::PreconditionFailed`] when the
/// put's condition no longer holds.
pub(crate) async fn commit_put(
    inner: &Inner,
    key: &Bytes,
    manifest: &Manifest,
    opts: &PutOptions,
    expect: Pinned,
    fences: Fences,
) -> Result<()> {
    let change = if opts.keep_replaced {
        Change::PutKeeping(manifest)
    } else {
        Change::Put(manifest)
    };
    match commit::change_manifest(inner, key, change, expect.into(), fences).await? {
        Changed::Written { .. } => Ok(()),
        Changed::Refused { current } => Err(condition_error(
            inner,
            key,
            opts.condition,
            current.as_ref(),
        )),
    }
}

/// The error of a put whose `condition` failed, `current` being the record found (an expired blob is none).
fn condition_error(
    inner: &Inner,
    key: &[u8],
    condition: PutCondition,
    current: Option<&Bytes>,
) -> Error {
    let actual = current
        .and_then(|b| inner.decode_manifest(key, b).ok())
        .filter(|m| !m.is_expired(inner.now_micros()))
        .map(|m| m.version);
    match (condition, actual) {
        (PutCondition::IfVersion(v), actual) => Error::PreconditionFailed {
            key: key.into(),
            expected: v,
            actual,
        },
        (_, current) => Error::AlreadyExists {
            key: key.into(),
            current,
        },
    }
}

/// Ends a chunked put's lease, if any (see [`IntentLease::end`]).
async fn end_lease(lease: Option<IntentLease>, settled: bool) {
    if let Some(lease) = lease {
        lease.end(settled).await;
    }
}

/// Reads from `reader` until `buf` holds `target` bytes or the stream ends; returns whether it ended.
async fn fill<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    target: usize,
) -> Result<bool> {
    while buf.len() < target {
        let want = target - buf.len();
        let n = reader.take(want as u64).read_buf(buf).await?;
        if n == 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests;
