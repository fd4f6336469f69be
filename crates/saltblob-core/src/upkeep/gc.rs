//! Garbage collection ([`crate::store::BlobStore::gc`]): finds the space that failed and replaced writes left behind.
//!
//! Space is left behind in two ways, and each has a record that finds it again:
//! - a put replaces a version, or a delete removes one: the version goes to the reclaim queue
//!   ([`crate::ledger::reclaim`]), due after the grace period;
//! - a writer dies (or is cancelled) between its first chunk and its commit: its intent (see `intent/`)
//!   expires. gc takes such an intent over and queues the put's chunks for reclaim.
//!
//! Expired blobs are found through the expiry index (`ledger/expiry.rs`), and those earlier builds put by a pass
//! over every manifest ([`GcOptions::full_expiry_every`]).
//!
//! A gc pass handles the intents, deletes the expired blobs, then runs one reclaim pass, asks the backend to return the freed space and, for
//! the whole store, runs the backend's own upkeep ([`crate::backend::ChunkStore::maintain`]).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::backend::{Namespace, SpaceReport};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::timing::CLOCK_MARGIN_MICROS;
use crate::base::units::micros;
use crate::ledger::liveness::{self, Ownership};
use crate::ledger::reclaim::{self, AtOnce, ChunkSet, ReclaimReport};
use crate::ledger::turns::{self, MAX_TURN_NAME, MAX_TURN_TOKEN, Turn};
use crate::ledger::work::{self, Held};
use crate::ledger::{intent, shards};
use crate::schedule;
use crate::state::Inner;
use crate::state::skew;
use crate::store::BlobStore;
use crate::store::pass::{PassEvent, PassOptions, unread_error};

/// Prefix of the intent scan's low-water marks in [`Namespace::Meta`], one per share of the work (this, `/`, the
/// share): a version id (u128 LE) below which every intent of the share's shards of [`Namespace::ShardedIntent`]
/// has been processed, so that gc passes do not read the deletion markers
/// (tombstones on Cassandra) of the intents of long-committed puts again and again. (Segments' intents, in
/// [`Namespace::ParkedIntent`], live for hours: they are read whole, so that they hold no mark back.)
const INTENT_WATERMARK: &[u8] = b"sharded-intent-watermark";

/// The turn of the pass over every manifest for expired blobs ([`GcOptions::full_expiry_every`]).
const EXPIRY_TURN: &str = "gc-expiry";

/// The same mark of the single-partition [`Namespace::Intent`] of earlier builds.
const LEGACY_INTENT_WATERMARK: &[u8] = b"intent-watermark";

/// Options of one garbage collection pass.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct GcOptions {
    /// How long replaced and deleted versions stay readable before their chunks go. `Some(ZERO)` reclaims them
    /// at once (readers still streaming them then fail with [`crate::base::error::Error::VersionReclaimed`]). Defaults to the
    /// store's [`crate::state::config::StoreConfig::grace`]. Entries are assumed to have been queued with the store's grace.
    pub grace: Option<Duration>,
    /// Report what would be reclaimed without deleting anything. Defaults to `false`.
    pub dry_run: bool,
    /// Only collect blobs whose key starts with this. Defaults to empty: every blob.
    pub prefix: Bytes,
    /// Partitions of the intents, the reclaim queue and the expiry index worked on at once. Defaults to 16.
    pub parallel: Option<usize>,
    /// Entries of one partition of the reclaim queue or the expiry index handled at once (each one's reads and
    /// chunk deletion or blob delete). Defaults to 8; with [`GcOptions::parallel`] 1 too, a pass handles one entry
    /// at a time, as builds before the sharded queue did.
    pub entries_at_once: Option<usize>,
    /// Every pass deletes the expired blobs that the expiry index holds (`ledger/expiry.rs`: every version put
    /// with an expiry since the index exists); a pass over every manifest finds those that earlier builds put.
    /// With this set, that pass runs once per this period in one of the runners sharing the store, by turn
    /// ([`BlobStore::take_turn`]), as in a gateway's upkeep loop. Defaults to `None`: every gc pass makes it.
    pub full_expiry_every: Option<Duration>,
}

impl GcOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`GcOptions::grace`].
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Sets [`GcOptions::dry_run`].
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Sets [`GcOptions::prefix`].
    pub fn with_prefix(mut self, prefix: impl Into<Bytes>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets [`GcOptions::full_expiry_every`].
    pub fn with_full_expiry_every(mut self, every: Duration) -> Self {
        self.full_expiry_every = Some(every);
        self
    }

    /// Sets [`GcOptions::parallel`] (at least 1).
    pub fn with_parallel(mut self, partitions: usize) -> Self {
        self.parallel = Some(partitions.max(1));
        self
    }

    /// Sets [`GcOptions::entries_at_once`] (at least 1).
    pub fn with_entries_at_once(mut self, entries: usize) -> Self {
        self.entries_at_once = Some(entries.max(1));
        self
    }

    /// Partitions worked on at once ([`GcOptions::parallel`]).
    pub(crate) fn partitions_at_once(&self) -> usize {
        self.parallel.unwrap_or(AtOnce::DEFAULT.partitions).max(1)
    }

    /// Partitions and entries in flight ([`GcOptions::parallel`], [`GcOptions::entries_at_once`]).
    pub(crate) fn at_once(&self) -> AtOnce {
        AtOnce {
            partitions: self.partitions_at_once(),
            entries: self
                .entries_at_once
                .unwrap_or(AtOnce::DEFAULT.entries)
                .max(1),
        }
    }
}

/// What one garbage collection pass found and freed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this was a dry run (nothing deleted).
    pub dry_run: bool,
    /// Puts in progress (intent lease not expired): left alone.
    pub puts_in_flight: u64,
    /// Intents left behind by puts that did commit: removed.
    pub stale_intents: u64,
    /// Abandoned puts (intent expired, version not committed): their chunks were queued for reclaim.
    pub abandoned_puts: u64,
    /// Chunks the abandoned puts had written, as of their last lease renewal (a lower bound).
    pub abandoned_chunks: u64,
    /// Blobs past their expiry ([`crate::state::config::PutOptions::ttl`]): deleted, their versions queued for reclaim (freed
    /// once the grace period has passed, as a deleted version's). Found through the expiry index, or by the pass
    /// over every manifest.
    pub expired: u64,
    /// What the reclaim queue pass freed (superseded and deleted versions, and the abandoned puts once due).
    pub reclaim: ReclaimReport,
    /// Disk space before and after, when the backend compacts and can tell.
    pub space: Option<SpaceReport>,
    /// Shares of the intents and the reclaim queue (16 in all) that another runner held: left to it.
    pub shares_skipped: u64,
    /// Whether the pass over every manifest for expired blobs was left to another runner or to a later pass (it
    /// ran within its period: [`GcOptions::full_expiry_every`]). The expiry index was read all the same.
    pub full_expiry_skipped: bool,
}

/// Stops the background garbage collector started by [`crate::store::BlobStore::spawn_gc`] when dropped.
#[derive(Debug)]
pub struct GcHandle(tokio::task::JoinHandle<()>);

impl Drop for GcHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One garbage collection pass; see [`crate::store::BlobStore::gc`]. A pass over the whole store shares its work on
/// intents and the reclaim queue with other runners by lease (`ledger/work.rs`); a dry run, a pass under a
/// prefix and a pass on a store one process owns ([`crate::backend::BackendInfo::exclusive`]) do all of it.
pub(crate) async fn run(store: &BlobStore, opts: &GcOptions) -> Result<GcReport> {
    let inner = &*store.inner;
    skew::check(&*inner.backend, "gc").await?;
    let now = inner.now_micros();
    let held = if opts.dry_run || !opts.prefix.is_empty() || inner.info.exclusive {
        Held::all()
    } else {
        let mut runner = [0u8; 16];
        crate::encryption::fill_random(&mut runner)?;
        Held::take(inner, runner, now).await?
    };
    let outcome = pass(store, opts, &held, now).await;
    held.release(inner).await;
    outcome
}

/// The work of [`run`] on the shares of `held`.
async fn pass(store: &BlobStore, opts: &GcOptions, held: &Held, now: u64) -> Result<GcReport> {
    let inner = &*store.inner;
    let mut report = GcReport {
        dry_run: opts.dry_run,
        shares_skipped: held.skipped(),
        ..GcReport::default()
    };
    for (ns, mark) in [
        (Namespace::ShardedIntent, Some(INTENT_WATERMARK)),
        (Namespace::ParkedIntent, None),
        (Namespace::Intent, Some(LEGACY_INTENT_WATERMARK)),
    ] {
        gc_intents(inner, ns, mark, opts, held, now, &mut report).await?;
    }
    let at_once = opts.at_once();
    let full_every = opts
        .full_expiry_every
        .filter(|_| !opts.dry_run && opts.prefix.is_empty());
    // A dry run makes the pass over every manifest, which counts what the index holds too.
    if !opts.dry_run {
        let delete = |key: Bytes, raw: Bytes| -> futures::future::BoxFuture<'_, Result<bool>> {
            Box::pin(async move { crate::store::delete::delete_expired(inner, &key, raw).await })
        };
        let indexed =
            reclaim::run_expiry(inner, now, false, &opts.prefix, held, at_once, &delete).await?;
        report.expired += indexed.expired;
    }
    match full_every {
        None => expire(store, &opts.prefix, now, opts.dry_run, &mut report).await?,
        Some(every) => match store.take_turn(EXPIRY_TURN, b"").await? {
            None => report.full_expiry_skipped = true,
            Some(turn) => match expire(store, &opts.prefix, now, false, &mut report).await {
                Ok(()) => turn.done_for(every).await?,
                Err(e) => {
                    turn.give_back().await;
                    return Err(e);
                }
            },
        },
    }
    let config_grace = micros(inner.config.grace);
    let cutoff = match opts.grace.map(micros) {
        Some(0) => u64::MAX,
        Some(g) => now.saturating_add(config_grace).saturating_sub(g),
        None => now,
    };
    report.reclaim = reclaim::run(inner, cutoff, opts.dry_run, &opts.prefix, held, at_once).await?;
    if !opts.dry_run && report.reclaim.versions > 0 {
        report.space = inner.backend.reclaim_space().await?;
    }
    if !opts.dry_run && opts.prefix.is_empty() {
        inner.backend.maintain().await?;
    }
    Ok(report)
}

/// Deletes the blobs under `prefix` whose expiry is past, counting them: a pass over every manifest under it, for
/// the versions earlier builds put, which the expiry index does not hold
/// (by the backend's ranges for the whole store, in key order under a prefix; see [`BlobStore::pass`]). A
/// range left unread after retries fails the pass once the others are done.
async fn expire(
    store: &BlobStore,
    prefix: &[u8],
    now: u64,
    dry_run: bool,
    report: &mut GcReport,
) -> Result<()> {
    let inner = &store.inner;
    let plan = store.plan_pass(prefix).await?;
    let mut unread = Vec::new();
    let mut events = store.pass(&plan, &PassOptions::new().with_expired(true));
    while let Some(event) = events.next().await {
        let page = match event {
            PassEvent::Page(page) => page,
            PassEvent::Unread { range, error } => {
                unread.push((range, error));
                continue;
            }
        };
        for entry in page.entries {
            // Damaged: fsck's to report, `rm`'s to remove.
            let Ok(manifest) = entry.manifest else {
                continue;
            };
            if !manifest.is_expired(now) {
                continue;
            }
            if dry_run
                || crate::store::delete::delete_expired(inner, &entry.key, entry.record).await?
            {
                report.expired += 1;
            }
        }
    }
    if unread.is_empty() {
        Ok(())
    } else {
        let ranges = plan.range_count();
        Err(unread_error(
            inner.info.name,
            "gc's expiry pass",
            unread,
            ranges,
        ))
    }
}

/// Runs [`run`] every `every` in a background task until the handle is dropped; see
/// [`crate::store::BlobStore::spawn_gc`].
pub(crate) fn spawn(
    store: BlobStore,
    every: Duration,
    opts: GcOptions,
    class: Option<crate::schedule::ClassTag>,
) -> GcHandle {
    GcHandle(tokio::spawn(crate::schedule::in_class(class, async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match run(&store, &opts).await {
                Ok(r) => tracing::debug!("background gc: {r:?}"),
                Err(e) => tracing::warn!("background gc failed (will retry): {e}"),
            }
        }
    })))
}

/// Where the last full gc pass left the intent scan of the namespace whose mark is under `mark`, if it recorded
/// it.
async fn intent_watermark(inner: &Inner, mark: &[u8]) -> Option<u128> {
    inner.read_mark(mark).await.map(u128::from_le_bytes)
}

/// Handles the intents of namespace `ns` in the shards `held` holds ([`GcOptions::parallel`] partitions at once)
/// whose blob key starts with `opts.prefix`, adding to `report`. With a low-water mark (kept under `mark`, one per
/// share of the work), each partition is read from the mark on, and a full pass over a share moves its mark up to
/// its oldest intent left in place (or to now less the clock margin, the oldest version a put starting from now
/// may have). The single partition of an earlier build's namespace goes with share 0, under `mark` itself.
async fn gc_intents(
    inner: &Inner,
    ns: Namespace,
    mark: Option<&'static [u8]>,
    opts: &GcOptions,
    held: &Held,
    now: u64,
    report: &mut GcReport,
) -> Result<()> {
    if ns.partition_len() == 0 {
        if held.has(0) {
            let mark = mark.map(<[u8]>::to_vec);
            gc_intent_share(inner, ns, mark, vec![Vec::new()], opts, held, now, report).await?;
        }
        return Ok(());
    }
    for share in 0..work::SHARES {
        let parts: Vec<Vec<u8>> = shards::all()
            .filter(|s| work::share_of(*s) == share && held.has(*s))
            .map(|s| vec![s])
            .collect();
        if !parts.is_empty() {
            let mark = mark.map(|m| [m, b"/", &[share]].concat());
            gc_intent_share(inner, ns, mark, parts, opts, held, now, report).await?;
        }
    }
    Ok(())
}

/// [`gc_intents`] of one share's partitions `parts`, under low-water mark `mark`.
#[expect(
    clippy::too_many_arguments,
    reason = "one pass's settings, passed down once"
)]
async fn gc_intent_share(
    inner: &Inner,
    ns: Namespace,
    mark: Option<Vec<u8>>,
    parts: Vec<Vec<u8>>,
    opts: &GcOptions,
    held: &Held,
    now: u64,
    report: &mut GcReport,
) -> Result<()> {
    let watermark = match &mark {
        Some(mark) => intent_watermark(inner, mark).await,
        None => None,
    };
    let mut passes = futures::stream::iter(parts.into_iter().map(|part| async move {
        // Every intent at or above the mark ("after" the version just below it).
        let after = watermark.map(|w| {
            let mut after = part.clone();
            after.extend_from_slice(&w.saturating_sub(1).to_be_bytes());
            Bytes::from(after)
        });
        let mut part_report = GcReport::default();
        let mut oldest_kept: Option<u128> = None;
        let mut whole = true;
        let mut seen = 0u64;
        let mut pages = inner.scan(ns, &part, after);
        'scan: while let Some(page) = pages.next_page().await? {
            seen += page.len() as u64;
            for (k, v) in page {
                if !held.in_time(inner.now_micros()) {
                    whole = false;
                    break 'scan;
                }
                let blob = intent::parse_intent_key(ns, &k).ok();
                if blob
                    .as_ref()
                    .is_some_and(|b| !b.key.starts_with(&opts.prefix))
                {
                    continue;
                }
                let kept =
                    gc_intent(inner, ns, &k, &v, now, opts.dry_run, &mut part_report).await?;
                if let (Some(blob), true) = (blob, kept) {
                    oldest_kept =
                        Some(oldest_kept.map_or(blob.version.0, |o| o.min(blob.version.0)));
                }
            }
        }
        if ns == Namespace::Intent && seen == 0 {
            // Nothing at or above the mark, and nothing below it is live: an earlier build's intents are gone.
            inner
                .legacy_intents_gone
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok::<_, Error>((part_report, oldest_kept, whole))
    }))
    .buffer_unordered(opts.partitions_at_once());
    // Versions of puts started from now on are at least this (clocks may lag by the margin).
    let mut oldest_live = (u128::from(now.saturating_sub(CLOCK_MARGIN_MICROS) / 1000)) << 80;
    let mut whole = true;
    while let Some(part) = passes.next().await {
        let (part_report, oldest_kept, part_whole) = part?;
        report.add_intents(&part_report);
        oldest_live = oldest_kept.map_or(oldest_live, |o| oldest_live.min(o));
        whole &= part_whole;
    }
    if let Some(mark) = mark
        && whole
        && !opts.dry_run
        && opts.prefix.is_empty()
        && Some(oldest_live) > watermark
    {
        inner.write_mark(&mark, &oldest_live.to_le_bytes()).await;
    }
    Ok(())
}

impl GcReport {
    /// Adds the intent counts of `other` (a pass over another partition) to these.
    fn add_intents(&mut self, other: &GcReport) {
        self.puts_in_flight += other.puts_in_flight;
        self.stale_intents += other.stale_intents;
        self.abandoned_puts += other.abandoned_puts;
        self.abandoned_chunks += other.abandoned_chunks;
    }
}

/// Handles one intent; returns whether it stays (a put in flight, or an intent left in place).
async fn gc_intent(
    inner: &Inner,
    ns: Namespace,
    k: &Bytes,
    v: &Bytes,
    now: u64,
    dry_run: bool,
    report: &mut GcReport,
) -> Result<bool> {
    let (blob, intent) = match intent::decode_record(ns, k, v) {
        Ok(decoded) => decoded,
        Err(e) => {
            tracing::warn!("{e}, under {:?}: left in place", KeyDisplay::from(&k[..]));
            return Ok(true);
        }
    };
    if liveness::in_flight(inner, blob.version, Some(&intent), now) {
        report.puts_in_flight += 1;
        return Ok(true);
    }
    let owned = match liveness::ownership(inner, &blob).await? {
        Ownership::Owned => true,
        Ownership::NotOwned => false,
        // Unsure what is current: leave it.
        Ownership::Unsure => return Ok(true),
    };
    let found = intent::StoredIntent {
        ns,
        key: k.to_vec(),
        raw: v.clone(),
    };
    // Committed, or a segment of what is committed: the intent outlived its put.
    if owned {
        report.stale_intents += 1;
        if !dry_run {
            intent::take_over(inner, &found).await?;
        }
        return Ok(dry_run);
    }
    report.abandoned_puts += 1;
    report.abandoned_chunks += intent.chunks;
    if dry_run {
        return Ok(true);
    }
    // Queue first, then fence the writer off by taking its intent over: a writer that renewed in between keeps
    // its put (and the queue entry goes again). A crash in between leaves a queue entry that the reclaimer
    // skips while the intent is live.
    let chunks = ChunkSet {
        salt_count: intent.salt_count,
        chunk_count: intent.chunks,
        stored_bytes: intent.stored_bytes,
    };
    let entry_key = reclaim::enqueue(inner, &blob, chunks, now).await?;
    if intent::take_over(inner, &found).await? {
        return Ok(false);
    }
    report.abandoned_puts -= 1;
    report.abandoned_chunks -= intent.chunks;
    report.puts_in_flight += 1;
    reclaim::withdraw(inner, &entry_key).await?;
    Ok(true)
}

impl BlobStore {
    /// Deletes the chunks of every replaced or deleted version whose grace period has passed.
    pub async fn reclaim_due(&self) -> Result<ReclaimReport> {
        skew::check(&*self.inner.backend, "reclaim").await?;
        let now = self.inner.now_micros();
        let all = Held::all();
        let run = crate::ledger::reclaim::run(&self.inner, now, false, b"", &all, AtOnce::DEFAULT);
        schedule::in_class(self.maintenance_class(), run).await
    }

    /// Like [`BlobStore::reclaim_due`], but treats every queued version as due (grace period 0).
    pub async fn reclaim_all(&self) -> Result<ReclaimReport> {
        let all = Held::all();
        let run =
            crate::ledger::reclaim::run(&self.inner, u64::MAX, false, b"", &all, AtOnce::DEFAULT);
        schedule::in_class(self.maintenance_class(), run).await
    }

    /// Runs one garbage collection pass: takes over the intents of abandoned puts (expired lease, version not
    /// committed) and queues their chunks, removes intents left by committed puts, reclaims every queued version
    /// that is due under `opts.grace`, and asks the backend to return the freed space to the file system.
    pub async fn gc(&self, opts: &GcOptions) -> Result<GcReport> {
        schedule::in_class(self.maintenance_class(), run(self, opts)).await
    }

    /// Takes turn `name` for a task that one runner of the store should do at a time and per period, with
    /// `token` naming what the task applies (a turn done under another token is taken again); `None` when another
    /// runner holds the turn or did the task and its period has not ended. See `ledger/turns.rs`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a name that is empty or longer than [`MAX_TURN_NAME`] bytes, or a token
    /// longer than [`MAX_TURN_TOKEN`]; the backend's.
    pub async fn take_turn(&self, name: &str, token: &[u8]) -> Result<Option<Turn>> {
        if name.is_empty() || name.len() > MAX_TURN_NAME || token.len() > MAX_TURN_TOKEN {
            return Err(Error::invalid(
                "turn",
                format!(
                    "a turn's name is 1 to {MAX_TURN_NAME} bytes and its token at most {MAX_TURN_TOKEN}: got {} and {}",
                    name.len(),
                    token.len()
                ),
            ));
        }
        turns::take(&self.inner, name, token).await
    }

    /// Runs [`BlobStore::gc`] every `every` in a background task until the handle is dropped; failures are
    /// logged and retried at the next tick. Needs a Tokio runtime.
    pub fn spawn_gc(&self, every: Duration, opts: GcOptions) -> GcHandle {
        spawn(self.clone(), every, opts, self.maintenance_class())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::Precondition;
    use crate::backend::memory::MemoryStore;
    use crate::base::clock::{Clock, OffsetClock};
    use crate::base::version::VersionId;
    use crate::ledger::reclaim::Queue;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;

    /// A put whose renewals failed for longer than its lease (as in a starved process) is still running: a gc of
    /// the same process leaves it alone, even with grace 0, and the put commits whole. (Taking it over would let
    /// a writer that is killed before it notices leave chunks that nothing refers to: the crash loop's orphans.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_running_in_this_process_is_never_taken_over() {
        let backend = Arc::new(MemoryStore::new());
        let lease = Duration::from_millis(600);
        let clock = OffsetClock::new();
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default()
                .with_intent_lease(lease)
                .with_grace(Duration::ZERO)
                .with_clock(clock.clone()),
        )
        .expect("store");
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let put = tokio::spawn({
            let store = store.clone();
            async move { store.put_stream("k", r, &PutOptions::new()).await }
        });
        let value = vec![5u8; store.config().policy.fanout_threshold as usize + (2 << 20)];
        tokio::io::AsyncWriteExt::write_all(&mut w, &value)
            .await
            .expect("feed");
        backend
            .fail_writes(&[Namespace::ShardedIntent], false)
            .expect("inject");
        clock.advance(lease * 3 / 2);
        // Renewals heal, but the intent has expired: the next renewal is up to a third of the lease away.
        backend.fail_writes(&[], false).expect("heal");
        let r = store
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!((r.puts_in_flight, r.abandoned_puts), (1, 0), "{r:?}");
        drop(w);
        put.await.expect("put task").expect("the put commits");
        assert_eq!(store.get("k").await.expect("get"), value);
    }

    /// Store-wide passes keep a low-water mark of the intent scan; an abandoned put below the newest mark but at
    /// or above the oldest live intent is still found.
    ///
    /// One thread: aborting the put then cancels its chunk writes for good. On several threads a chunk write
    /// being polled at the abort lands afterwards, and this test's clock jumps the lease in microseconds of real
    /// time, so such a write could land after gc deleted the version's chunks (with a real clock the lease and
    /// the takeover hold give it seconds).
    #[tokio::test(flavor = "current_thread")]
    async fn the_intent_watermark_never_skips_a_live_intent() {
        let backend = Arc::new(MemoryStore::new());
        let lease = Duration::from_millis(300);
        let clock = OffsetClock::new();
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default()
                .with_intent_lease(lease)
                .with_clock(clock.clone()),
        )
        .expect("store");
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let put = tokio::spawn({
            let store = store.clone();
            async move { store.put_stream("k", r, &PutOptions::new()).await }
        });
        // Past the read-ahead that picks the layout (the fan-out threshold): the put is writing chunks.
        let fanout = store.config().policy.fanout_threshold as usize;
        tokio::io::AsyncWriteExt::write_all(&mut w, &vec![7u8; fanout + (2 << 20)])
            .await
            .expect("feed");
        let first = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(first.puts_in_flight, 1, "{first:?}");
        let share = work::share_of(crate::ledger::shards::shard_of(b"k"));
        let mark_key = [INTENT_WATERMARK, b"/", &[share]].concat();
        let mark = intent_watermark(&store.inner, &mark_key)
            .await
            .expect("a mark was recorded");
        let live = backend
            .scan_records(
                Namespace::ShardedIntent,
                &[crate::ledger::shards::shard_of(b"k")],
                None,
                10,
            )
            .await
            .expect("scan");
        let version = intent::parse_intent_key(Namespace::ShardedIntent, &live[0].0)
            .expect("intent key")
            .version;
        assert!(
            mark <= version.0,
            "the mark stops at or below the oldest live intent"
        );

        put.abort();
        let _ = put.await;
        drop(w);
        clock.advance(lease * 2);
        let second = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(
            (second.abandoned_puts, second.reclaim.versions),
            (1, 0),
            "found, and queued for after the grace period: {second:?}"
        );
        let third = store
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!(third.reclaim.versions, 1, "{third:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0);
        assert!(
            intent_watermark(&store.inner, &mark_key).await > Some(mark),
            "the mark moved on"
        );
    }

    /// A store whose backend says the cluster's time is the real clock shifted by `cluster_ahead` µs.
    #[derive(Debug)]
    struct ClusterClock {
        inner: Arc<MemoryStore>,
        cluster_ahead: std::sync::atomic::AtomicI64,
    }

    #[async_trait::async_trait]
    impl crate::backend::layer::ChunkStoreLayer for ClusterClock {
        fn inner(&self) -> &dyn ChunkStore {
            &*self.inner
        }

        async fn cluster_time(&self) -> Result<Option<u64>> {
            let now = crate::base::clock::SystemClock.now_micros();
            let ahead = self
                .cluster_ahead
                .load(std::sync::atomic::Ordering::Relaxed);
            Ok(Some(now.saturating_add_signed(ahead)))
        }
    }

    /// A runner whose clock is 12 minutes ahead of the cluster's would reclaim a version replaced 2 minutes
    /// before its grace of 10 minutes ends (its clock says 12 minutes passed): gc and reclaim refuse to run
    /// there, naming the skew, and the version keeps its chunks. Behind by as much, they refuse too; within the
    /// margin, they run.
    #[tokio::test]
    async fn gc_and_reclaim_refuse_a_clock_off_the_clusters() {
        const MINUTES_12: i64 = 12 * 60 * 1_000_000;
        for (cluster_ahead, runner_ahead, refused) in [
            (-MINUTES_12, Duration::from_secs(12 * 60), Some("ahead of")),
            (MINUTES_12, Duration::ZERO, Some("behind")),
            (30_000_000, Duration::ZERO, None),
        ] {
            let backend = Arc::new(MemoryStore::new());
            let clock = OffsetClock::new();
            let layered = Arc::new(ClusterClock {
                inner: Arc::clone(&backend),
                cluster_ahead: 0.into(),
            });
            let store = BlobStore::new(
                Arc::clone(&layered) as Arc<dyn ChunkStore>,
                StoreConfig::default()
                    .with_grace(Duration::from_secs(10 * 60))
                    .with_clock(clock.clone()),
            )
            .expect("store");
            store
                .put("k", vec![1u8; 100_000], &PutOptions::new())
                .await
                .expect("put");
            store
                .put("k", vec![2u8; 100_000], &PutOptions::new())
                .await
                .expect("overwrite");
            let chunks = || async {
                backend
                    .scan_chunks()
                    .filter_map(|c| async move { c.ok() })
                    .count()
                    .await
            };
            let before = chunks().await;
            // The writes agreed with the cluster's clock (a skewed writer refuses: `state/skew.rs`).
            layered
                .cluster_ahead
                .store(cluster_ahead, std::sync::atomic::Ordering::Relaxed);
            clock.advance(runner_ahead);
            let gc = store.gc(&GcOptions::new()).await;
            let reclaim = store.reclaim_due().await;
            match refused {
                Some(way) => {
                    for err in [gc.map(|_| ()), reclaim.map(|_| ())] {
                        let err = err.expect_err("refused").to_string();
                        assert!(err.contains(way) && err.contains("margin is 60 s"), "{err}");
                    }
                    assert_eq!(chunks().await, before, "nothing reclaimed");
                }
                None => {
                    gc.expect("gc within the margin");
                    reclaim.expect("reclaim within the margin");
                }
            }
        }
        assert!(clock_is_checked_only_where_the_backend_has_one().await);
    }

    /// A backend without a time of its own (embedded) is not checked: gc runs whatever the clock says.
    async fn clock_is_checked_only_where_the_backend_has_one() -> bool {
        let clock = OffsetClock::new();
        clock.advance(Duration::from_secs(3600));
        let store = BlobStore::new(
            Arc::new(MemoryStore::new()),
            StoreConfig::default().with_clock(clock),
        )
        .expect("store");
        store.gc(&GcOptions::new()).await.is_ok()
    }

    /// Removes the expiry index entries of `keys`, as if an earlier build (without the index) had put them.
    async fn unindex(store: &BlobStore, keys: &[String]) {
        for key in keys {
            let m = store.head(key.as_str()).await.expect("head");
            let k =
                reclaim::bucketed_key(m.expires_micros.expect("expiry"), m.version, key.as_bytes());
            store
                .inner
                .backend
                .delete_record(Namespace::ExpiryBucket, &k, &Precondition::None)
                .await
                .expect("delete");
        }
    }

    /// Expired blobs are found through the expiry index by every pass, even one that leaves the pass over every
    /// manifest to another runner ([`GcOptions::full_expiry_every`]); blobs that an earlier build put (no index
    /// entry) are found by that pass, which runs in one runner per period, and always in a pass without the
    /// option (the CLI's). Once their buckets are over, the index's partitions are dropped.
    #[tokio::test]
    async fn expired_blobs_are_found_by_the_index_and_earlier_builds_by_the_full_pass() {
        let clock = OffsetClock::new();
        let backend = Arc::new(MemoryStore::new());
        let config = StoreConfig::default().with_clock(clock.clone());
        let a = BlobStore::new(backend.clone(), config.clone()).expect("store");
        let b = BlobStore::new(backend.clone(), config).expect("store");
        let every = Duration::from_secs(600);
        let looped = GcOptions::new().with_full_expiry_every(every);
        let first = a.gc(&looped).await.expect("gc");
        assert!(
            !first.full_expiry_skipped,
            "the first runner takes the turn"
        );
        let short = PutOptions::new().with_ttl(Duration::from_secs(60));
        let put = |prefix: &'static str, n: usize| {
            let a = a.clone();
            let short = short.clone();
            async move {
                let mut keys = Vec::new();
                for i in 0..n {
                    let key = format!("{prefix}/{i}");
                    a.put(key.as_str(), Bytes::from_static(b"x"), &short)
                        .await
                        .expect("put");
                    keys.push(key);
                }
                keys
            }
        };
        put("t", 20).await;
        let kept = a
            .put("kept", Bytes::from_static(b"x"), &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(
            reclaim::stored_in(&*backend, Queue::Expiry)
                .await
                .expect("index")
                .len(),
            20
        );
        clock.advance(Duration::from_secs(61));
        let indexed = b.gc(&looped).await.expect("gc");
        assert_eq!((indexed.expired, indexed.full_expiry_skipped), (20, true));

        let legacy = put("u", 5).await;
        unindex(&a, &legacy).await;
        clock.advance(Duration::from_secs(61));
        let missed = a.gc(&looped).await.expect("gc");
        assert_eq!((missed.expired, missed.full_expiry_skipped), (0, true));
        assert!(
            matches!(a.get("u/0").await, Err(Error::NotFound { .. })),
            "expired: not served"
        );
        clock.advance(every);
        let full = b.gc(&looped).await.expect("gc");
        assert_eq!(
            (full.expired, full.full_expiry_skipped),
            (5, false),
            "the next period"
        );

        let by_hand = put("v", 3).await;
        unindex(&a, &by_hand).await;
        clock.advance(Duration::from_secs(61));
        let cli = a.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!((cli.expired, cli.full_expiry_skipped), (3, false));

        clock.advance(Duration::from_secs(20 * 60));
        a.gc(&looped).await.expect("gc");
        assert!(
            reclaim::stored_in(&*backend, Queue::Expiry)
                .await
                .expect("index")
                .is_empty()
        );
        let markers = backend
            .scan_records(Namespace::Meta, b"expiry-bucket/", None, 10)
            .await
            .expect("markers");
        assert!(markers.is_empty(), "{markers:?}");
        assert_eq!(a.head("kept").await.expect("kept").version, kept.version);
    }

    /// An entry whose blob was put again without an expiry, or deleted, deletes nothing; one whose version is not
    /// current stays for the commit window (its commit may still land), then goes.
    #[tokio::test]
    async fn an_index_entry_deletes_only_an_expired_current_version() {
        let clock = OffsetClock::new();
        let backend = Arc::new(MemoryStore::new());
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default().with_clock(clock.clone()),
        )
        .expect("store");
        let short = PutOptions::new().with_ttl(Duration::from_secs(60));
        for key in ["again", "gone"] {
            store
                .put(key, Bytes::from_static(b"x"), &short)
                .await
                .expect("put");
        }
        store
            .put("again", Bytes::from_static(b"y"), &PutOptions::new())
            .await
            .expect("put again");
        store.delete("gone").await.expect("delete");
        // The entry of a commit that has not landed: another version of "pending", which has no expiry.
        let current = store
            .put("pending", Bytes::from_static(b"z"), &PutOptions::new())
            .await
            .expect("put");
        let expires = clock.now_micros() + 60_000_000;
        backend
            .put_record(
                Namespace::ExpiryBucket,
                &reclaim::bucketed_key(expires, VersionId(current.version.0 + 1), b"pending"),
                Bytes::from_static(&[1]),
                &Precondition::None,
            )
            .await
            .expect("entry");
        clock.advance(Duration::from_secs(61));
        let report = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(report.expired, 0, "{report:?}");
        let left = reclaim::stored_in(&*backend, Queue::Expiry)
            .await
            .expect("index");
        assert_eq!(left.len(), 1, "the pending commit's entry: {left:?}");
        clock.advance(Duration::from_secs(20 * 60));
        let report = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(report.expired, 0, "{report:?}");
        assert!(
            reclaim::stored_in(&*backend, Queue::Expiry)
                .await
                .expect("index")
                .is_empty()
        );
        assert_eq!(
            store.get("again").await.expect("kept"),
            Bytes::from_static(b"y")
        );
        assert_eq!(
            store.get("pending").await.expect("kept"),
            Bytes::from_static(b"z")
        );
    }
}
