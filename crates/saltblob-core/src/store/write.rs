//! The write protocol: a put's pipeline (pre-check, intent, chunks, commit) and a delete.
//!
//! A put reads top to bottom: its [`PutPlan`] (key, layout policy, the start of the blob, class: the one
//! preamble of `put`, `put_stream` and `put_segment`), then [`put`]: the condition is checked, an inline value
//! commits at once; a chunked one takes its intent lease (`intent/`), streams its chunks through the
//! [`ChunkWriter`], claims its intent (which gc can then no longer take over) and [`commit`]s the manifest,
//! queueing the version it replaces for reclaim first. Where the backend writes atomic groups of records, there
//! is no claim: the reclaim entries, the manifest and the intent's conditional removal are one write; and a put
//! whose chunks fit one backend call takes no intent at all: its chunks go into that write too
//! ([`crate::state::Inner::commits_chunks_in_group`]), so a small chunked put is one engine write.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::backend::{
    BlobRef, GroupChunks, GroupWrite, Namespace, Precondition, Previous, RecordChange, RecordWrite,
};
use crate::codec::Codec;
use crate::config::{PutCondition, PutOptions};
use crate::intent::IntentLease;
use crate::layout::{Layout, LayoutPolicy};
use crate::manifest::{Manifest, ManifestBody};
use crate::reclaim;
use crate::retry::Backoff;
use crate::schedule::{self, ClassTag, PriorityClass};
use crate::state::Inner;
use crate::store::chunk_writer::ChunkWriter;
use crate::store::key::validate_key;
use crate::store::sealing::{self, PutSealing};
use crate::version::VersionId;
use crate::{Error, Result};

/// What every put decides before it writes: the validated key, the options, the layout policy with the put's
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
        version: VersionId::generate_at(now),
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
    let pre = precheck(inner, &key, opts.condition).await?;

    let layout = known_size.map(|s| policy.layout_for(s));
    if layout == Some(Layout::Inline) {
        add_late_metadata(&mut manifest, opts)?;
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
            commit(inner, &key, &manifest, pre, CommitChunks::None, None).await?;
        }
        return Ok(manifest);
    }

    let planned_salt = match layout {
        Some(Layout::Chunked(l)) => l.salt_count,
        _ => policy.max_salt,
    };
    let blob = BlobRef {
        key: key.clone(),
        version: manifest.version,
    };
    // Held until the put returns, then freed off its path (see `FreedOffPath`).
    let _payload = FreedOffPath::of(&head, eof);
    let chunk_size = policy.chunk_size_for(known_size);
    // A put whose chunks its commit writes (in one atomic group with the manifest) stores nothing before it, and
    // takes no intent. Any other takes its intent first: a writer that dies from here on leaves a record that
    // lets gc find its chunks.
    let in_commit = matches!(finish, Finish::Commit)
        && known_size.is_some_and(|size| {
            inner.commits_chunks_in_group(size, chunk_size, schedule::current_class().as_ref())
        });
    let lease = if in_commit {
        None
    } else {
        Some(IntentLease::acquire(inner, &blob, planned_salt).await?)
    };
    let writer = ChunkWriter::new(
        inner,
        blob.clone(),
        planned_salt,
        codec,
        chunk_size,
        known_size,
        known_size.unwrap_or(head_len),
        lease
            .as_ref()
            .map_or_else(Default::default, IntentLease::progress),
        sealed.as_ref().map(|s| std::sync::Arc::clone(&s.keys)),
    );
    let mut writer = if in_commit {
        writer.in_commit()
    } else {
        writer
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
    let written = written.and_then(|w| add_late_metadata(&mut manifest, opts).map(|()| w));
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
        (Finish::Commit, chunks) => commit(inner, &key, &manifest, pre, chunks, None).await?,
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
/// BENCHMARKS.md (*Where a 60 MiB put's time goes*), a third of the put. Freeing the caller's memory is no part
/// of making the value durable. Smaller buffers are dropped where they are, and so is a stream's read-ahead
/// (holding it to the end would only add to the put's memory).
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

/// Stores what the body told [`PutOptions::late_metadata`] in `manifest`, once the body has ended.
fn add_late_metadata(manifest: &mut Manifest, opts: &PutOptions) -> Result<()> {
    if let Some(late) = &opts.late_metadata {
        manifest.metadata.extend(late.entries());
        manifest.validate_attributes()?;
    }
    Ok(())
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

/// Checks the put condition before any chunk is written and returns what the commit needs.
pub(crate) async fn precheck(
    inner: &Inner,
    key: &Bytes,
    condition: PutCondition,
) -> Result<PreCheck> {
    let read_raw = || inner.backend.get_record(Namespace::Manifest, key);
    match condition {
        // What an unconditional put replaces is read right before its commit.
        PutCondition::None => Ok(PreCheck {
            condition: Precondition::None,
            expected: condition,
        }),
        PutCondition::IfAbsent => match read_raw().await? {
            Some(bytes) => Err(condition_error(inner, key, condition, Some(&bytes))),
            None => Ok(PreCheck {
                condition: Precondition::Absent,
                expected: condition,
            }),
        },
        PutCondition::IfVersion(v) => {
            let raw = read_raw().await?;
            let current = raw
                .as_ref()
                .map(|b| inner.decode_manifest(key, b))
                .transpose()?;
            match (raw, current) {
                (Some(raw), Some(m)) if m.version == v => Ok(PreCheck {
                    condition: Precondition::Equals(raw),
                    expected: condition,
                }),
                (raw, _) => Err(condition_error(inner, key, condition, raw.as_ref())),
            }
        }
    }
}

/// Writes the manifest: the commit point. The version it replaces is queued for reclaim first, so that a
/// crash right after the commit cannot orphan it (if the commit does not happen, the reclaimer finds that
/// version still current and drops the entry); a failure to queue fails the put before anything changed. Where
/// the backend writes atomic groups, a chunked put's entries, manifest and intent removal are one write
/// ([`IntentLease::commit_group`]).
///
/// On backends whose conditional writes are cheap (those that report the replaced record), an unconditional
/// put commits with a compare-and-set on the manifest it read and queued, and reads, queues and tries again
/// when another put committed in between, so that what it replaces is always queued first. Elsewhere (CQL,
/// where a condition costs a Paxos round) it writes plainly: a put committing in between is queued after the
/// commit, and left to `fsck --repair` if this process dies in that moment.
///
/// A chunked put's lease ([`CommitChunks::Leased`]) is ended once the chunks are committed, deleted or queued
/// for reclaim; if cleaning up after a failure fails, the intent is left to expire, and gc reclaims the chunks.
/// A manifest write is issued only while the lease's claim holds, and (a compose's) not after `issue_by` (Unix
/// µs): past it the commit fails with `IntentLost` before writing. Chunks the commit writes itself
/// ([`CommitChunks::InGroup`]) are stored with the manifest or not at all, so a failure leaves nothing to clean.
pub(crate) async fn commit(
    inner: &Inner,
    key: &Bytes,
    manifest: &Manifest,
    pre: PreCheck,
    chunks: CommitChunks,
    issue_by: Option<u64>,
) -> Result<()> {
    let outcome = write_manifest(inner, key, manifest, pre, &chunks, issue_by).await;
    let lease = match chunks {
        CommitChunks::Leased(lease) => lease,
        CommitChunks::None | CommitChunks::InGroup(_) => {
            return outcome.map_err(CommitFailure::into_error);
        }
    };
    // The one exit of a leased put: the lease ends once the chunks are committed, deleted, or queued for reclaim.
    let settled = match &outcome {
        Ok(()) => true,
        Err(CommitFailure::NotWritten(_)) => discard(inner, key, manifest).await,
        // The commit may or may not have happened. Queue this version for reclaim: the reclaimer leaves it alone
        // if it did become current.
        Err(CommitFailure::Unknown(_)) => reclaim::schedule_logged(inner, key, manifest).await,
    };
    lease.end(settled).await;
    outcome.map_err(CommitFailure::into_error)
}

/// What of a version's chunks its [`commit`] deals with besides the manifest.
pub(crate) enum CommitChunks {
    /// None: an inline value, or a compose (whose segments' claims and `issue_by` fence it).
    None,
    /// Chunks written under the put's intent lease, which the commit ends.
    Leased(IntentLease),
    /// Chunks not stored yet: the commit writes them in its atomic group
    /// ([`crate::backend::ChunkStore::write_records`]), and there is no intent.
    InGroup(GroupChunks),
}

impl CommitChunks {
    fn lease(&self) -> Option<&IntentLease> {
        match self {
            CommitChunks::Leased(lease) => Some(lease),
            CommitChunks::None | CommitChunks::InGroup(_) => None,
        }
    }

    /// What the commit's atomic group holds besides the manifest and the reclaim entries, where it commits with
    /// one ([`BackendInfo::atomic_record_groups`](crate::backend::BackendInfo::atomic_record_groups)); `None`
    /// where it writes the manifest alone.
    fn group(&self, atomic: bool) -> Option<Group<'_>> {
        match self {
            CommitChunks::Leased(lease) if atomic => Some(Group::IntentRemoval(lease)),
            CommitChunks::InGroup(chunks) => Some(Group::Chunks(chunks)),
            CommitChunks::None | CommitChunks::Leased(_) => None,
        }
    }
}

/// What a commit's atomic group holds besides the manifest and the reclaim entries ([`commit_group`]).
#[derive(Clone, Copy)]
enum Group<'a> {
    /// The removal of the put's intent ([`IntentLease::commit_group`]).
    IntentRemoval(&'a IntentLease),
    /// The put's chunks.
    Chunks(&'a GroupChunks),
}

/// How a commit failed: before its manifest write (nothing changed), or in it (the outcome is unknown).
enum CommitFailure {
    NotWritten(Error),
    Unknown(Error),
}

impl CommitFailure {
    fn into_error(self) -> Error {
        match self {
            CommitFailure::NotWritten(e) | CommitFailure::Unknown(e) => e,
        }
    }
}

/// The steps of [`commit`] up to and including the manifest write, and the queueing of what it replaced.
async fn write_manifest(
    inner: &Inner,
    key: &Bytes,
    manifest: &Manifest,
    pre: PreCheck,
    chunks: &CommitChunks,
    issue_by: Option<u64>,
) -> std::result::Result<(), CommitFailure> {
    use CommitFailure::{NotWritten, Unknown};
    let cas = pre.condition == Precondition::None && inner.info.reports_previous;
    let mut raw = match &pre.condition {
        // Not knowing what the commit replaces would leave it unqueued: fail instead.
        Precondition::None => inner
            .backend
            .get_record(Namespace::Manifest, key)
            .await
            .map_err(NotWritten)?,
        Precondition::Equals(expected) => Some(expected.clone()),
        Precondition::Absent => None,
    };
    // Where the backend writes atomic groups, a chunked put's reclaim entries, manifest and intent removal (or
    // chunks, for a put without an intent) are one write (see `commit_group`).
    let lease = chunks.lease();
    let group = chunks.group(inner.info.atomic_record_groups);
    let mut cas_tries = Backoff::COMMIT_CAS.start();
    loop {
        let before = raw
            .as_ref()
            .and_then(|b| inner.decode_manifest(key, b).ok());
        let queued_at = inner.now_micros();
        if let (Some(old), None) = (&before, group) {
            reclaim::schedule(inner, key, old)
                .await
                .map_err(NotWritten)?;
        }
        // A manifest write is issued only while the claim holds with a margin, so that it lands before gc may
        // take the intent over.
        if let Some(lease) = lease {
            lease.check_claim().map_err(NotWritten)?;
        }
        if let Some(by) = issue_by {
            let now = inner.now_micros();
            if now > by {
                return Err(NotWritten(Error::IntentLost {
                    key: key[..].into(),
                    version: manifest.version,
                    detail: format!(
                        "its commit was due {} µs ago (the claims of its segments may no longer hold)",
                        now - by
                    ),
                }));
            }
        }
        let condition = if cas && cas_tries.next_attempt().await {
            raw.clone()
                .map_or(Precondition::Absent, Precondition::Equals)
        } else {
            pre.condition.clone()
        };
        let outcome = match group {
            Some(group) => {
                let replaces = before.as_ref();
                commit_group(inner, group, key, manifest, replaces, queued_at, &condition).await?
            }
            None => inner
                .backend
                .put_record(Namespace::Manifest, key, manifest.encode(), &condition)
                .await
                .map_err(Unknown)?,
        };
        let replaced = match outcome {
            RecordWrite::Done(Previous::Value(bytes)) => inner.decode_manifest(key, &bytes).ok(),
            RecordWrite::Done(Previous::Absent) => None,
            RecordWrite::Done(Previous::Unknown) => before.clone(),
            // Another put committed since the read: queue what it committed and try again.
            RecordWrite::ConditionFailed(current) if condition != pre.condition => {
                raw = current;
                continue;
            }
            RecordWrite::ConditionFailed(current) => {
                return Err(NotWritten(condition_error(
                    inner,
                    key,
                    pre.expected,
                    current.as_ref(),
                )));
            }
        };
        reclaim::queue_replaced(
            inner,
            key,
            Some(manifest.version),
            replaced,
            before.as_ref(),
            queued_at,
        )
        .await;
        return Ok(());
    }
}

/// The manifest write of [`write_manifest`] as one atomic group with the reclaim entries of `replaces` (queued
/// at `queued_at`) and either the removal of the put's intent ([`IntentLease::commit_group`]) or the put's
/// chunks, reported as the manifest write alone.
async fn commit_group(
    inner: &Inner,
    group: Group<'_>,
    key: &Bytes,
    manifest: &Manifest,
    replaces: Option<&Manifest>,
    queued_at: u64,
    condition: &Precondition,
) -> std::result::Result<RecordWrite, CommitFailure> {
    let mut changes = replaces.map_or_else(Vec::new, |old| {
        reclaim::schedule_changes(inner, key, old, queued_at)
    });
    let at = changes.len();
    changes.push(RecordChange::put(
        Namespace::Manifest,
        key.clone(),
        manifest.encode(),
        condition.clone(),
    ));
    let written = match group {
        Group::IntentRemoval(lease) => lease.commit_group(changes).await,
        Group::Chunks(chunks) => {
            inner
                .backend
                .write_records(changes, Some(chunks.clone()))
                .await
        }
    };
    match written {
        Ok(GroupWrite::Done(previous)) => previous
            .get(at)
            .cloned()
            .map(RecordWrite::Done)
            .ok_or_else(|| {
                CommitFailure::Unknown(Error::internal(
                    "commit",
                    "the backend reported fewer writes than the group held",
                ))
            }),
        Ok(GroupWrite::ConditionFailed { index, current }) if index == at => {
            Ok(RecordWrite::ConditionFailed(current))
        }
        // Reclaim entries are written unconditionally: nothing was written, yet a condition that cannot fail
        // did.
        Ok(GroupWrite::ConditionFailed { index, .. }) => {
            Err(CommitFailure::NotWritten(Error::internal(
                "commit",
                format!("the backend failed the condition-less write {index} of a commit's group"),
            )))
        }
        Err(e @ Error::IntentLost { .. }) => Err(CommitFailure::NotWritten(e)),
        Err(e) => Err(CommitFailure::Unknown(e)),
    }
}

/// Deletes the manifest of a validated `key`; see [`crate::BlobStore::delete`].
pub(crate) async fn delete(
    inner: &Inner,
    key: Bytes,
    only: Option<VersionId>,
) -> Result<Option<VersionId>> {
    if only.is_none() && inner.info.reports_previous {
        return delete_current(inner, key).await;
    }
    // Queued before the delete, as in a put's commit, so that a crash right after it orphans nothing.
    let (pre_read, condition) = match only {
        None => match inner.read_manifest(&key).await {
            Ok(m) => (m, Precondition::None),
            // A damaged manifest must stay deletable; its chunks are left to `fsck --repair`.
            Err(e) if e.is_corruption() => (None, Precondition::None),
            Err(e) => return Err(e),
        },
        Some(version) => {
            let raw = inner.backend.get_record(Namespace::Manifest, &key).await?;
            let current = version_check(inner, &key, version, raw.as_ref())?;
            // `version_check` found the record, so `raw` is there.
            (
                Some(current),
                raw.map_or(Precondition::None, Precondition::Equals),
            )
        }
    };
    let queued_at = inner.now_micros();
    if let Some(old) = &pre_read {
        reclaim::schedule(inner, &key, old).await?;
    }
    let previous = match inner
        .backend
        .delete_record(Namespace::Manifest, &key, &condition)
        .await?
    {
        RecordWrite::Done(previous) => removed(inner, &key, previous, pre_read.as_ref()),
        // Replaced or deleted since the read (only a conditional delete has a condition to fail): what the
        // schedule above queued is still current, or was queued again by whoever replaced it.
        RecordWrite::ConditionFailed(current) => {
            return Err(match only {
                Some(version) => condition_lost(inner, &key, version, current.as_ref()),
                None => Error::internal(
                    "delete",
                    "an unconditional delete reported a failed condition",
                ),
            });
        }
    };
    let version = previous.as_ref().map(|m| m.version);
    reclaim::queue_replaced(inner, &key, None, previous, pre_read.as_ref(), queued_at).await;
    Ok(version)
}

/// Deletes `key`'s expired manifest `expired` (its record `raw`), if it is still the current record; returns
/// whether it was. Its version is queued for reclaim first, as a delete does; a put that replaced it since queued
/// it itself.
pub(crate) async fn delete_expired(
    inner: &Inner,
    key: Bytes,
    raw: Bytes,
    expired: &Manifest,
) -> Result<bool> {
    let queued_at = inner.now_micros();
    reclaim::schedule(inner, &key, expired).await?;
    match inner
        .backend
        .delete_record(Namespace::Manifest, &key, &Precondition::Equals(raw))
        .await?
    {
        RecordWrite::Done(previous) => {
            let previous = removed(inner, &key, previous, Some(expired));
            reclaim::queue_replaced(inner, &key, None, previous, Some(expired), queued_at).await;
            Ok(true)
        }
        RecordWrite::ConditionFailed(_) => Ok(false),
    }
}

/// The manifest a delete removed, from what the backend reported: `read` (what the delete read before) when the
/// backend cannot tell, and none when the removed record is damaged (deleted all the same, its version unknown).
fn removed(
    inner: &Inner,
    key: &Bytes,
    previous: Previous,
    read: Option<&Manifest>,
) -> Option<Manifest> {
    match previous {
        Previous::Value(bytes) => inner.decode_manifest(key, &bytes).ok(),
        Previous::Absent => None,
        Previous::Unknown => read.cloned(),
    }
}

/// An unconditional delete on a backend whose conditional writes are cheap (those that report the replaced
/// record): a compare-and-set on the record it read and queued, which reads, queues and tries again when a put
/// committed in between, so that what it deletes is always queued first, as a put's commit does. Without it, a
/// version committed between the read and the delete would be queued only after the delete, and a crash in
/// between would leave its chunks named by nothing. A key absent when read is left alone: the delete took
/// effect then.
async fn delete_current(inner: &Inner, key: Bytes) -> Result<Option<VersionId>> {
    let mut raw = inner.backend.get_record(Namespace::Manifest, &key).await?;
    let mut tries = Backoff::COMMIT_CAS.start();
    loop {
        let Some(expected) = raw.clone() else {
            return Ok(None);
        };
        // A damaged manifest must stay deletable; its chunks are left to `fsck --repair`.
        let read = inner.decode_manifest(&key, &expected).ok();
        let queued_at = inner.now_micros();
        if let Some(old) = &read {
            reclaim::schedule(inner, &key, old).await?;
        }
        let condition = if tries.next_attempt().await {
            Precondition::Equals(expected)
        } else {
            Precondition::None
        };
        let previous = match inner
            .backend
            .delete_record(Namespace::Manifest, &key, &condition)
            .await?
        {
            RecordWrite::Done(previous) => removed(inner, &key, previous, read.as_ref()),
            // Replaced (or deleted) since the read: queue what is there now and try again.
            RecordWrite::ConditionFailed(current) => {
                raw = current;
                continue;
            }
        };
        let version = previous.as_ref().map(|m| m.version);
        reclaim::queue_replaced(inner, &key, None, previous, read.as_ref(), queued_at).await;
        return Ok(version);
    }
}

/// The current manifest of `key` (its record `raw`) when it is `version`, not expired.
///
/// # Errors
/// [`Error::NotFound`] when the key holds no blob (or an expired one); [`Error::PreconditionFailed`] when it
/// holds another version (`actual: None` when its manifest does not decode).
fn version_check(
    inner: &Inner,
    key: &Bytes,
    version: VersionId,
    raw: Option<&Bytes>,
) -> Result<Manifest> {
    let not_found = || Error::NotFound {
        key: key.as_ref().into(),
    };
    let raw = raw.ok_or_else(not_found)?;
    match inner.decode_manifest(key, raw) {
        Ok(m) if m.is_expired(inner.now_micros()) => Err(not_found()),
        Ok(m) if m.version == version => Ok(m),
        current => Err(Error::PreconditionFailed {
            key: key.as_ref().into(),
            expected: version,
            actual: current.ok().map(|m| m.version),
        }),
    }
}

/// The error of a conditional delete of `version` whose record write found `current` instead.
fn condition_lost(
    inner: &Inner,
    key: &Bytes,
    version: VersionId,
    current: Option<&Bytes>,
) -> Error {
    match version_check(inner, key, version, current) {
        Err(e) => e,
        // The same version under other bytes: still not the record the delete was conditioned on.
        Ok(m) => Error::PreconditionFailed {
            key: key.as_ref().into(),
            expected: version,
            actual: Some(m.version),
        },
    }
}

/// The error of a put whose condition `expected` failed, `current` being the record found.
fn condition_error(
    inner: &Inner,
    key: &[u8],
    expected: PutCondition,
    current: Option<&Bytes>,
) -> Error {
    let actual = current
        .and_then(|b| inner.decode_manifest(key, b).ok())
        .map(|m| m.version);
    match (expected, actual) {
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

/// Deletes the chunks of a version that was never committed; false if that failed (logged). A segmented
/// version has no chunks of its own: its segments stay as they were, claimable by another compose until their
/// leases end.
async fn discard(inner: &Inner, key: &Bytes, manifest: &Manifest) -> bool {
    if let ManifestBody::Chunked { layout, .. } = &manifest.body {
        let blob = BlobRef {
            key: key.clone(),
            version: manifest.version,
        };
        if let Err(e) = inner
            .backend
            .delete_chunks(&blob, layout.salt_count, layout.chunk_count)
            .await
        {
            tracing::warn!(
                "could not delete the chunks of uncommitted version {}: {e}",
                manifest.version
            );
            return false;
        }
    }
    true
}

/// What the commit of a put needs from its pre-check.
pub(crate) struct PreCheck {
    condition: Precondition,
    expected: PutCondition,
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
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::clock::OffsetClock;
    use crate::{BlobStore, GcOptions, MemoryStore, StoreConfig};

    /// A put whose commit fails and whose cleanup fails too (chunks not deleted, not queued) keeps its intent,
    /// so that gc reclaims the chunks once the lease is over; removing the intent would orphan them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_that_cannot_clean_up_leaves_its_intent_to_gc() {
        let backend = Arc::new(MemoryStore::new());
        let lease = Duration::from_millis(300);
        let clock = OffsetClock::new();
        let config = StoreConfig::default()
            .with_grace(Duration::ZERO)
            .with_intent_lease(lease)
            .with_clock(clock.clone());
        let store = BlobStore::new(backend.clone(), config).expect("store");
        backend
            .fail_writes(&[Namespace::Manifest, Namespace::Reclaim], true)
            .expect("inject");
        let failed = store
            .put("k", Bytes::from(vec![1u8; 300_000]), &PutOptions::new())
            .await;
        assert!(failed.is_err(), "the commit failed: {failed:?}");
        backend.fail_writes(&[], false).expect("heal");
        assert!(backend.chunk_count().expect("count") > 0);
        let intents = backend
            .scan_records(Namespace::Intent, b"", None, 10)
            .await
            .expect("scan");
        assert_eq!(intents.len(), 1, "the intent stays");

        // The intent was claimed for the commit: it holds for the lease and the commit hold (one more lease here).
        clock.advance(lease * 2 + Duration::from_millis(100));
        let gc = store
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!((gc.abandoned_puts, gc.reclaim.versions), (1, 1), "{gc:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0, "nothing orphaned");
    }

    /// Counts the record writes that reach a store: `put`/`delete` with the namespace, or one `group` listing
    /// the namespaces of its writes.
    #[derive(Debug)]
    struct RecordWrites {
        inner: MemoryStore,
        seen: std::sync::Mutex<Vec<String>>,
    }

    impl RecordWrites {
        fn new(inner: MemoryStore) -> Arc<Self> {
            Arc::new(Self {
                inner,
                seen: std::sync::Mutex::new(Vec::new()),
            })
        }

        fn log(&self, what: String) {
            self.seen.lock().expect("log").push(what);
        }

        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.seen.lock().expect("log"))
        }
    }

    #[async_trait::async_trait]
    impl crate::layer::ChunkStoreLayer for RecordWrites {
        fn inner(&self) -> &dyn ChunkStore {
            &self.inner
        }

        async fn put_record(
            &self,
            ns: Namespace,
            key: &[u8],
            value: Bytes,
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            self.log(format!("put {ns:?}"));
            self.inner.put_record(ns, key, value, cond).await
        }

        async fn delete_record(
            &self,
            ns: Namespace,
            key: &[u8],
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            self.log(format!("delete {ns:?}"));
            self.inner.delete_record(ns, key, cond).await
        }

        async fn write_records(
            &self,
            changes: Vec<RecordChange>,
            chunks: Option<GroupChunks>,
        ) -> Result<GroupWrite> {
            let chunk_count = chunks.as_ref().map(|c| c.chunks.len());
            let what: Vec<String> = chunk_count
                .map(|n| format!("{n} chunks"))
                .into_iter()
                .chain(changes.iter().map(|c| match c.value {
                    Some(_) => format!("put {:?}", c.ns),
                    None => format!("delete {:?}", c.ns),
                }))
                .collect();
            self.log(format!("group [{}]", what.join(", ")));
            self.inner.write_records(changes, chunks).await
        }
    }

    /// A chunked put that replaces a version makes these record writes besides its chunks: where the backend
    /// writes atomic groups, one group that holds its chunks too (the chunks, the replaced version's reclaim
    /// entry, the manifest) when they fit one backend call, else its intent and then one group (the reclaim
    /// entry, the manifest, the intent's removal); elsewhere its intent, the claim, the reclaim entry, the
    /// manifest and the intent's removal, one after another. Either way the value reads back, the replaced
    /// version is queued and no intent is left.
    #[tokio::test]
    async fn a_chunked_put_commits_in_one_group_where_the_backend_writes_them() {
        let one_by_one = [
            "put Intent",
            "put Intent",
            "put Reclaim",
            "put Manifest",
            "delete Intent",
        ];
        let with_intent = [
            "put Intent",
            "group [put Reclaim, put Manifest, delete Intent]",
        ];
        let with_chunks = ["group [2 chunks, put Reclaim, put Manifest]"];
        // 100 000 bytes are two chunks of 64 KiB: one call of the default 1 MiB batches, two of 64 KiB ones.
        for (memory, batch_bytes, expected) in [
            (MemoryStore::new(), 1 << 20, &one_by_one[..]),
            (
                MemoryStore::with_atomic_record_groups(),
                64 << 10,
                &with_intent[..],
            ),
            (
                MemoryStore::with_atomic_record_groups(),
                1 << 20,
                &with_chunks[..],
            ),
        ] {
            let backend = RecordWrites::new(memory);
            let config = StoreConfig::default()
                .with_grace(Duration::from_secs(60))
                .with_batch_bytes(batch_bytes);
            let store = BlobStore::new(backend.clone(), config).expect("store");
            let value = Bytes::from(vec![7u8; 100_000]);
            store
                .put("k", value.clone(), &PutOptions::new())
                .await
                .expect("first");
            backend.take();
            store
                .put("k", value.clone(), &PutOptions::new())
                .await
                .expect("replace");
            assert_eq!(backend.take(), expected);
            assert_eq!(store.get("k").await.expect("get"), value);
            let scan = |ns| backend.inner.scan_records(ns, b"", None, 10);
            assert_eq!(scan(Namespace::Intent).await.expect("intents").len(), 0);
            assert_eq!(scan(Namespace::Reclaim).await.expect("queue").len(), 1);
        }
    }

    /// The buffer a put was given whole is freed off the put's path, on a blocking thread, not by whichever
    /// chunk task dropped its last slice (here the test's own thread, which runs every task): freeing a big
    /// buffer takes milliseconds that the put must not wait for.
    #[tokio::test]
    async fn a_large_buffer_given_to_a_put_is_freed_off_its_path() {
        struct Owner(Vec<u8>, std::sync::mpsc::Sender<std::thread::ThreadId>);
        impl AsRef<[u8]> for Owner {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }
        impl Drop for Owner {
            fn drop(&mut self) {
                let _ = self.1.send(std::thread::current().id());
            }
        }
        let (freed, freed_on) = std::sync::mpsc::channel();
        let store =
            BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
        let value = Bytes::from_owner(Owner(vec![7; FREE_OFF_PATH_MIN], freed));
        store
            .put("big", value, &PutOptions::new())
            .await
            .expect("put");
        let thread = freed_on
            .recv_timeout(Duration::from_secs(30))
            .expect("the buffer is freed once the put returned");
        assert_ne!(
            thread,
            std::thread::current().id(),
            "freed on the put's thread"
        );
        assert_eq!(
            store.get("big").await.expect("get").len(),
            FREE_OFF_PATH_MIN,
            "the value was stored before its buffer went"
        );
    }

    /// A put that commits while an unconditional delete of its key is between its read of the manifest and its
    /// delete: the delete removes the new version, which it did not queue first; a crash before it queues it
    /// afterwards (here: reclaim writes fail from the delete on) leaves chunks that no manifest, intent or queue
    /// entry names, and gc never reclaims them (the crash loop's "no orphan after gc" flake).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delete_racing_a_commit_leaves_no_orphan_after_a_crash() {
        use crate::layer::ChunkStoreLayer;
        use crate::{FsckOptions, GcOptions};

        #[derive(Debug)]
        struct CommitBeforeDelete {
            backend: Arc<MemoryStore>,
            racer: std::sync::Mutex<Option<BlobStore>>,
            armed: std::sync::Mutex<bool>,
        }
        #[async_trait::async_trait]
        impl ChunkStoreLayer for CommitBeforeDelete {
            fn inner(&self) -> &dyn ChunkStore {
                &*self.backend
            }
            async fn delete_record(
                &self,
                ns: Namespace,
                key: &[u8],
                cond: &Precondition,
            ) -> Result<RecordWrite> {
                let racer = if ns == Namespace::Manifest {
                    self.racer.lock().expect("lock").take()
                } else {
                    None
                };
                if let Some(racer) = racer {
                    racer
                        .put(key, Bytes::from(vec![2u8; 40_000]), &PutOptions::new())
                        .await
                        .expect("the racing put commits");
                    *self.armed.lock().expect("lock") = true;
                }
                let out = self.backend.delete_record(ns, key, cond).await;
                if ns == Namespace::Manifest
                    && matches!(out, Ok(RecordWrite::Done(_)))
                    && *self.armed.lock().expect("lock")
                {
                    // The process dies once the manifest is deleted: nothing more reaches the store.
                    self.backend
                        .fail_writes(&[Namespace::Reclaim], false)
                        .expect("inject");
                }
                out
            }
        }

        let backend = Arc::new(MemoryStore::new());
        let config = StoreConfig::default().with_grace(Duration::ZERO);
        let plain = BlobStore::new(backend.clone(), config.clone()).expect("store");
        let layer = Arc::new(CommitBeforeDelete {
            backend: backend.clone(),
            racer: std::sync::Mutex::new(None),
            armed: std::sync::Mutex::new(false),
        });
        let store = BlobStore::new(layer.clone(), config).expect("store");
        store
            .put("k", Bytes::from(vec![1u8; 40_000]), &PutOptions::new())
            .await
            .expect("put");
        *layer.racer.lock().expect("lock") = Some(plain.clone());
        store.delete("k").await.expect("delete");
        backend.fail_writes(&[], false).expect("heal");
        plain
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        let fsck = plain.fsck(&FsckOptions::new()).await.expect("fsck");
        assert!(fsck.orphans.is_empty(), "no orphan after gc: {fsck:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0);
    }

    /// A large put stores its chunks unlogged where the backend asks for it, and makes them durable before its
    /// commit: losing whatever was not synced (a crash of such an engine) right after the commit loses nothing
    /// of it. A put below the threshold writes its chunks logged.
    #[tokio::test]
    async fn unlogged_chunks_are_synced_before_the_commit() {
        use crate::memory::MEMORY_UNLOGGED_MIN_BYTES;

        let backend = Arc::new(MemoryStore::new());
        let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
        let min = usize::try_from(MEMORY_UNLOGGED_MIN_BYTES).expect("fits");
        let large = Bytes::from((0..min * 3).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        let small = Bytes::from(vec![5u8; min / 2]);
        store
            .put("large", large.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 0);
        assert_eq!(store.get("large").await.expect("get after a crash"), large);

        // The same chunks, written unlogged and not synced, are lost: the test can tell.
        let blob = BlobRef {
            key: Bytes::from_static(b"probe"),
            version: VersionId(1),
        };
        let chunk = crate::backend::ChunkWrite {
            salt: 0,
            index: 0,
            data: Bytes::from_static(b"x"),
        };
        backend
            .put_chunks_unlogged(&blob, vec![chunk])
            .await
            .expect("write");
        assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 1);

        // A stream of unknown length past the threshold is unlogged too; a small put is logged.
        store
            .put_stream("stream", &large[..], &PutOptions::new())
            .await
            .expect("stream");
        store
            .put("small", small.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 0);
        assert_eq!(store.get("stream").await.expect("get"), large);
        assert_eq!(store.get("small").await.expect("get"), small);
    }

    /// A put of at least the backend's records threshold begins its version's storage (a "file"), stores its
    /// chunks as records and syncs them before its commit: losing what was not synced right after the commit
    /// loses nothing of it. A put that fails after the begin deletes the file with its chunks; reclaiming a
    /// replaced version deletes its file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunk_records_are_synced_before_the_commit() {
        use crate::memory::MEMORY_RECORDS_MIN_BYTES;

        let backend = Arc::new(MemoryStore::new());
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default().with_grace(Duration::ZERO),
        )
        .expect("store");
        let min = usize::try_from(MEMORY_RECORDS_MIN_BYTES).expect("fits");
        let large = Bytes::from(
            (0..min * 2 + 7)
                .map(|i| (i % 253) as u8)
                .collect::<Vec<_>>(),
        );
        store
            .put("large", large.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 0);
        assert_eq!(backend.version_file_count().expect("files"), 1);
        assert_eq!(store.get("large").await.expect("get after a crash"), large);
        let d = store.describe("large").await.expect("describe");
        assert_eq!(d.storage.as_deref(), Some("version file"));

        // A stream of unknown length that fails after its begin leaves no file and no chunk behind.
        struct Failing(usize);
        impl AsyncRead for Failing {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                if self.0 == 0 {
                    return std::task::Poll::Ready(Err(std::io::Error::other("source failed")));
                }
                let n = self.0.min(buf.remaining()).min(1 << 20);
                buf.put_slice(&vec![9u8; n]);
                self.0 -= n;
                std::task::Poll::Ready(Ok(()))
            }
        }
        let chunks = backend.chunk_count().expect("count");
        let failed = store
            .put_stream("failing", Failing(min * 3), &PutOptions::new())
            .await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(backend.version_file_count().expect("files"), 1);
        assert_eq!(backend.chunk_count().expect("count"), chunks);

        // Replaced, then reclaimed: the replaced version's file goes.
        store
            .put(
                "large",
                Bytes::from_static(b"small now"),
                &PutOptions::new(),
            )
            .await
            .expect("overwrite");
        store.reclaim_all().await.expect("reclaim");
        assert_eq!(backend.version_file_count().expect("files"), 0);
        assert_eq!(backend.chunk_count().expect("count"), 0);
    }

    /// What a reader puts in [`LateMetadata`] before its end is stored with the version, for inline and chunked
    /// puts alike; oversized late metadata fails the put before anything is stored.
    #[tokio::test]
    async fn late_metadata_learnt_from_the_body_is_stored() {
        use tokio::io::AsyncRead;

        /// Yields `data`, then records its length in `late` just before its end.
        struct Measuring {
            data: Bytes,
            late: crate::LateMetadata,
            value: String,
        }
        impl AsyncRead for Measuring {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let n = self.data.len().min(buf.remaining());
                if n == 0 {
                    let value = self.value.clone();
                    self.late.insert("learnt", value);
                } else {
                    let part = self.data.split_to(n);
                    buf.put_slice(&part);
                }
                std::task::Poll::Ready(Ok(()))
            }
        }

        let store =
            BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
        for (key, len) in [("small", 10usize), ("large", 3 << 20)] {
            let late = crate::LateMetadata::new();
            let body = Measuring {
                data: Bytes::from(vec![1u8; len]),
                late: late.clone(),
                value: len.to_string(),
            };
            let opts = PutOptions::new()
                .with_metadata("given", "yes")
                .with_late_metadata(late);
            store.put_stream(key, body, &opts).await.expect("put");
            let m = store.head(key).await.expect("head");
            assert_eq!(m.metadata.get("learnt"), Some(&len.to_string()), "{key}");
            assert_eq!(m.metadata.get("given").map(String::as_str), Some("yes"));
        }
        let late = crate::LateMetadata::new();
        let body = Measuring {
            data: Bytes::from(vec![1u8; 3 << 20]),
            late: late.clone(),
            value: "x".repeat(10_000),
        };
        let err = store
            .put_stream(
                "too-much",
                body,
                &PutOptions::new().with_late_metadata(late),
            )
            .await
            .expect_err("oversized metadata");
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(matches!(
            store.head("too-much").await,
            Err(Error::NotFound { .. })
        ));
    }
}
