//! The workload: concurrent clients doing random puts, gets and deletes on a few keys, recording every
//! operation in a [`HistorySink`].
//!
//! Each [`Client`] has a random 64-bit id (unique across processes in practice) and a counter; an operation's
//! [`OpId`] is (client id, counter) and a put writes the self-describing value with the same numbers
//! ([`crate::value::generate`]). The invocation is recorded before the operation starts and the completion
//! after it ends, so the recorded interval contains the real one. Reads are verified as they stream in
//! ([`StreamVerifier`]), so even huge values take bounded memory.
//!
//! **Keeping clients** ([`WorkloadConfig::keeping`], off by default): puts that keep the version they replace
//! (`PutOptions::keep_replaced`), every put's completion recording the version it created; gets by a version
//! some acknowledged put of the run created; removals of such versions ([`Keeping`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use saltblob_core::{
    BlobStore, Error, GetOptions, LayoutPolicy, PutCondition, PutOptions, RemovedVersion, VersionId,
};
use serde::Serialize;

use crate::history::{
    Event, GetResult, History, HistorySink, OpId, OpKind, OpResult, Outcome, now_micros,
};
use crate::value::{Identified, StreamVerifier, ValueId, generate, to_hex};

/// The value sizes a workload picks from, uniformly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeMix {
    /// The sizes, in bytes.
    pub sizes: Vec<u64>,
}

impl SizeMix {
    /// Exactly these sizes (an empty list means 0-byte values only).
    pub fn fixed(sizes: impl Into<Vec<u64>>) -> Self {
        Self {
            sizes: sizes.into(),
        }
    }

    /// The sizes at the edges of `policy`'s layouts, all at most `max`, sorted and distinct: 0, 1, the inline
    /// limit ±1, the chunk size ±1, two chunks, the fan-out threshold and one byte more, then a few larger
    /// sizes up to `max` (fan-out plus a partial chunk, `max / 2`, `max`).
    pub fn boundaries(policy: &LayoutPolicy, max: u64) -> Self {
        let il = policy.inline_limit;
        let cs = u64::from(policy.chunk_size);
        let ft = policy.fanout_threshold;
        let mut sizes = vec![
            0,
            1,
            il.saturating_sub(1),
            il,
            il + 1,
            cs - 1,
            cs,
            cs + 1,
            2 * cs,
            ft,
            ft + 1,
            ft + cs / 2 + 1,
            max / 2,
            max,
        ];
        sizes.retain(|s| *s <= max);
        sizes.sort_unstable();
        sizes.dedup();
        Self { sizes }
    }

    fn pick(&self, rng: &mut StdRng) -> u64 {
        if self.sizes.is_empty() {
            0
        } else {
            self.sizes[rng.random_range(0..self.sizes.len())]
        }
    }
}

/// Relative weights of the operation kinds (e.g. percentages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpMix {
    /// Weight of puts.
    pub put: u32,
    /// Weight of gets.
    pub get: u32,
    /// Weight of deletes.
    pub delete: u32,
    /// Weight of conditional puts (see [`Client::put_conditional`]).
    pub conditional_put: u32,
}

impl OpMix {
    fn total(&self) -> u32 {
        self.put + self.get + self.delete + self.conditional_put
    }
}

impl Default for OpMix {
    /// 45 % puts, 45 % gets, 10 % deletes, no conditional puts.
    fn default() -> Self {
        Self {
            put: 45,
            get: 45,
            delete: 10,
            conditional_put: 0,
        }
    }
}

/// Stops a running workload from outside (e.g. while a test kills database nodes). Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A flag not yet raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every client to stop after its current operation.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`Stop::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The versions acknowledged puts created, by key, in the order their puts completed: what keeping clients
/// read and remove by id. Clones share them.
#[derive(Clone, Debug, Default)]
pub struct VersionLog(Arc<Mutex<HashMap<String, Vec<VersionId>>>>);

impl VersionLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The versions the acknowledged puts of `history` reported creating ([`OpResult::PutVersion`]), by
    /// completion time; completions whose version does not parse are left out.
    pub fn from_history(history: &History) -> Self {
        let mut created: Vec<(u64, &str, VersionId)> = history
            .ops
            .iter()
            .filter_map(|op| {
                let version = op.created_version()?.parse().ok()?;
                Some((op.end, op.kind.key(), version))
            })
            .collect();
        created.sort_unstable();
        let log = Self::new();
        for (_, key, version) in created {
            log.record(key, version);
        }
        log
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<VersionId>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that an acknowledged put created `version` of `key`.
    pub fn record(&self, key: &str, version: VersionId) {
        self.lock().entry(key.to_owned()).or_default().push(version);
    }

    /// Every version recorded, by key, then in recording order.
    pub fn all(&self) -> Vec<(String, VersionId)> {
        let mut all: Vec<(String, VersionId)> = self
            .lock()
            .iter()
            .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), *v)))
            .collect();
        // Versions are time-ordered: within a key this is the recording order, up to concurrent puts.
        all.sort();
        all
    }

    /// How many versions are recorded.
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A version of `key`: half the time one of its 8 newest, else any; `None` when it has none.
    fn pick(&self, key: &str, rng: &mut StdRng) -> Option<VersionId> {
        let log = self.lock();
        let versions = log.get(key).filter(|v| !v.is_empty())?;
        let from = if rng.random_bool(0.5) {
            versions.len().saturating_sub(8)
        } else {
            0
        };
        versions
            .get(rng.random_range(from..versions.len()))
            .copied()
    }
}

/// What keeping clients do beside [`WorkloadConfig::mix`] (see [`WorkloadConfig::keeping`]).
#[derive(Clone, Debug)]
pub struct Keeping {
    /// Percentage (0 to 100) of puts that keep the version they replace; the others replace it without
    /// keeping it. Defaults to 75.
    pub keep_percent: u32,
    /// Whether conditional puts keep too, as often as the others; when false they never keep. Defaults to
    /// true.
    pub keep_conditional: bool,
    /// Weight of gets by version (a version of the key from [`Keeping::versions`]; a plain get when the key
    /// has none yet), on [`OpMix`]'s scale. Defaults to 30.
    pub get_version: u32,
    /// Weight of removals of a version (picked as for gets by version; a plain get when the key has none yet).
    /// Defaults to 10.
    pub remove_version: u32,
    /// Where the clients record the versions their acknowledged puts created, and pick versions from.
    /// Defaults to an empty log.
    pub versions: VersionLog,
    /// Whether removals may name the key's current version, which makes the newest kept version current.
    /// When false, a removal first lists the key's versions (`BlobStore::versions`, not an operation of the
    /// history) and is done only if the version picked is listed as kept: no removal then names a current
    /// version, so no version is ever made current again and a kept version stays kept until removed.
    /// Defaults to true.
    pub remove_current: bool,
}

impl Default for Keeping {
    fn default() -> Self {
        Self {
            keep_percent: 75,
            keep_conditional: true,
            get_version: 30,
            remove_version: 10,
            versions: VersionLog::new(),
            remove_current: true,
        }
    }
}

/// What a workload does. Each client runs until the first of: `duration` elapsed, `ops_per_client`
/// operations done, `stop` raised. With neither limit set it runs until stopped.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Concurrent clients (tokio tasks). Defaults to 4.
    pub clients: usize,
    /// The keys, each op picks one uniformly.
    pub keys: Vec<String>,
    /// Value sizes of puts. Defaults to 0, 16 and 1000 bytes.
    pub sizes: SizeMix,
    /// Operation weights. Defaults to [`OpMix::default`].
    pub mix: OpMix,
    /// How long each client runs. Defaults to 1 s.
    pub duration: Option<Duration>,
    /// How many operations each client does at most. Defaults to no limit.
    pub ops_per_client: Option<u64>,
    /// Seeds the clients' choices of operation, key and size (not their ids, which are always random).
    pub seed: u64,
    /// Options of every put. Defaults to [`PutOptions::new`].
    pub put_options: PutOptions,
    /// Raised to stop the clients early.
    pub stop: Stop,
    /// Keeping clients: puts that keep what they replace, gets and removals by version ([`Keeping`]).
    /// Defaults to `None`: no version is recorded, read or removed.
    pub keeping: Option<Keeping>,
}

impl WorkloadConfig {
    /// A workload on `keys` with the defaults of every other field.
    pub fn new(keys: Vec<String>) -> Self {
        Self {
            clients: 4,
            keys,
            sizes: SizeMix::fixed([0, 16, 1000]),
            mix: OpMix::default(),
            duration: Some(Duration::from_secs(1)),
            ops_per_client: None,
            seed: 0,
            put_options: PutOptions::new(),
            stop: Stop::new(),
            keeping: None,
        }
    }
}

/// `count` keys `{prefix}{i}`.
pub fn key_set(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

/// What the clients of a workload did, as they saw it (the checker's [`crate::Report`] is the verdict).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Puts done.
    pub puts: u64,
    /// Gets done.
    pub gets: u64,
    /// Deletes done.
    pub deletes: u64,
    /// Removals of a version done.
    pub removals: u64,
    /// Operations that returned without error.
    pub ok: u64,
    /// Operations that returned an error.
    pub failed: u64,
    /// Conditional puts refused by their condition (not counted as failed).
    pub refused: u64,
    /// Failures that were corruption errors.
    pub corrupt: u64,
    /// Gets that returned a value that verified.
    pub gets_with_value: u64,
    /// Gets that returned bytes failing verification.
    pub torn_reads: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Stats {
    fn count(&mut self, kind: &OpKind, outcome: &Outcome) {
        match kind {
            OpKind::Put { .. } | OpKind::PutKeeping { .. } => self.puts += 1,
            OpKind::Get { .. } | OpKind::GetVersion { .. } => self.gets += 1,
            OpKind::Delete { .. } => self.deletes += 1,
            OpKind::RemoveVersion { .. } => self.removals += 1,
        }
        match outcome {
            Outcome::Ok(r) => {
                self.ok += 1;
                match r {
                    OpResult::Get(GetResult::Value { .. }) => self.gets_with_value += 1,
                    OpResult::Get(GetResult::Torn { .. }) => self.torn_reads += 1,
                    _ => {}
                }
            }
            Outcome::Failed { corrupt, .. } => {
                self.failed += 1;
                self.corrupt += u64::from(*corrupt);
            }
            Outcome::Refused { .. } => self.refused += 1,
        }
    }

    /// Adds `other`'s counts to these (keeping the longer elapsed time).
    pub fn merge(&mut self, other: &Stats) {
        self.puts += other.puts;
        self.gets += other.gets;
        self.deletes += other.deletes;
        self.removals += other.removals;
        self.ok += other.ok;
        self.failed += other.failed;
        self.refused += other.refused;
        self.corrupt += other.corrupt;
        self.gets_with_value += other.gets_with_value;
        self.torn_reads += other.torn_reads;
        self.elapsed = self.elapsed.max(other.elapsed);
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} puts, {} gets ({} with a value, {} torn), {} deletes: {} ok, {} failed ({} corrupt), {} refused \
             by their condition in {:.2?}",
            self.puts,
            self.gets,
            self.gets_with_value,
            self.torn_reads,
            self.deletes,
            self.ok,
            self.failed,
            self.corrupt,
            self.refused,
            self.elapsed
        )?;
        if self.removals > 0 {
            write!(f, "; {} version removals", self.removals)?;
        }
        Ok(())
    }
}

/// One client: does operations on a store and records each in a sink.
///
/// Dropping an operation's future before it ends leaves it indeterminate in the history, as a killed process
/// would.
#[derive(Debug)]
pub struct Client {
    store: BlobStore,
    sink: Arc<dyn HistorySink>,
    id: u64,
    seq: u64,
    stats: Stats,
    put_options: PutOptions,
    versions: Option<VersionLog>,
}

impl Client {
    /// A client with a fresh random id.
    pub fn new(store: BlobStore, sink: Arc<dyn HistorySink>) -> Self {
        Self {
            store,
            sink,
            id: rand::random(),
            seq: 0,
            stats: Stats::default(),
            put_options: PutOptions::new(),
            versions: None,
        }
    }

    /// Records in `log` the version each acknowledged put creates, and records it in the history too
    /// ([`OpResult::PutVersion`]).
    #[must_use]
    pub fn with_versions(mut self, log: VersionLog) -> Self {
        self.versions = Some(log);
        self
    }

    /// Uses `opts` for every put.
    #[must_use]
    pub fn with_put_options(mut self, opts: PutOptions) -> Self {
        self.put_options = opts;
        self
    }

    /// The client's random id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// What this client did so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn begin(&mut self, kind: OpKind) -> (OpId, OpKind) {
        let op = OpId {
            client: self.id,
            seq: self.seq,
        };
        self.seq += 1;
        self.sink.record(&Event::Invoke {
            op,
            at: now_micros(),
            kind: kind.clone(),
        });
        (op, kind)
    }

    fn end(&mut self, op: OpId, kind: &OpKind, outcome: Outcome) -> Outcome {
        self.sink.record(&Event::Complete {
            op,
            at: now_micros(),
            outcome: outcome.clone(),
        });
        self.stats.count(kind, &outcome);
        outcome
    }

    /// Puts a fresh self-describing value of `len` bytes under `key`.
    pub async fn put(&mut self, key: &str, len: u64) -> Outcome {
        let opts = self.put_options.clone();
        self.put_with(key, len, &opts).await
    }

    /// Puts a fresh value of `len` bytes under `key`, keeping the version it replaces
    /// ([`OpKind::PutKeeping`]); its completion records the version it created.
    pub async fn put_keeping(&mut self, key: &str, len: u64) -> Outcome {
        let opts = self.put_options.clone().with_keep_replaced(true);
        self.put_with(key, len, &opts).await
    }

    /// A put with `opts`: recorded as [`OpKind::PutKeeping`] when they keep what it replaces, else as
    /// [`OpKind::Put`]; an acknowledged one records the version it created when it keeps or when the client
    /// has a [`VersionLog`].
    async fn put_with(&mut self, key: &str, len: u64, opts: &PutOptions) -> Outcome {
        let id = ValueId {
            writer: self.id,
            seq: self.seq,
        };
        let value = generate(
            key.as_bytes(),
            id,
            usize::try_from(len).unwrap_or(usize::MAX),
        );
        let key_owned = key.to_owned();
        let (op, kind) = self.begin(if opts.keep_replaced {
            OpKind::PutKeeping {
                key: key_owned,
                id,
                len,
            }
        } else {
            OpKind::Put {
                key: key_owned,
                id,
                len,
            }
        });
        let mut created = None;
        let outcome = match self.store.put(key, value, opts).await {
            Ok(m) if opts.keep_replaced || self.versions.is_some() => {
                created = Some(m.version);
                Outcome::Ok(OpResult::PutVersion {
                    version: m.version.to_string(),
                })
            }
            Ok(_) => Outcome::Ok(OpResult::Put),
            Err(e @ (Error::AlreadyExists { .. } | Error::PreconditionFailed { .. })) => {
                Outcome::Refused {
                    error: e.to_string(),
                }
            }
            Err(e) => failed(&e),
        };
        let outcome = self.end(op, &kind, outcome);
        // Logged once the completion is recorded: a get by this version begins after it.
        if let (Some(log), Some(version)) = (&self.versions, created) {
            log.record(key, version);
        }
        outcome
    }

    /// A conditional put of a fresh value: reads `key`'s current version, then puts on the condition that it is
    /// still that version (or that the key is still absent). Another writer in between makes the store refuse
    /// it ([`Outcome::Refused`]), and the checker then verifies that its value never shows.
    pub async fn put_conditional(&mut self, key: &str, len: u64) -> Outcome {
        let opts = self.put_options.clone();
        self.put_conditional_with(key, len, opts).await
    }

    async fn put_conditional_with(&mut self, key: &str, len: u64, opts: PutOptions) -> Outcome {
        let condition = match self.store.head(key).await {
            Ok(m) => PutCondition::IfVersion(m.version),
            Err(Error::NotFound { .. }) => PutCondition::IfAbsent,
            // Nothing was written: not an operation of the history.
            Err(e) => return failed(&e),
        };
        let opts = opts.with_condition(condition);
        self.put_with(key, len, &opts).await
    }

    /// Reads the whole value of `key`, verifying it as it streams in.
    pub async fn get(&mut self, key: &str) -> Outcome {
        let (op, kind) = self.begin(OpKind::Get {
            key: key.to_owned(),
        });
        let outcome = match read_verified(&self.store, key, &GetOptions::new()).await {
            Ok(r) => Outcome::Ok(OpResult::Get(r)),
            Err(e) => failed(&e),
        };
        self.end(op, &kind, outcome)
    }

    /// Reads the whole value of version `version` of `key`, verifying it as it streams in; no such version
    /// (`Error::VersionNotFound`) is recorded as [`GetResult::NotFound`].
    pub async fn get_version(&mut self, key: &str, version: VersionId) -> Outcome {
        let (op, kind) = self.begin(OpKind::GetVersion {
            key: key.to_owned(),
            version: version.to_string(),
        });
        let opts = GetOptions::new().with_version(version);
        let outcome = match read_verified(&self.store, key, &opts).await {
            Ok(r) => Outcome::Ok(OpResult::Get(r)),
            Err(Error::VersionNotFound { .. }) => Outcome::Ok(OpResult::Get(GetResult::NotFound)),
            Err(e) => failed(&e),
        };
        self.end(op, &kind, outcome)
    }

    /// Removes version `version` of `key` if it is kept, not current: lists the key's versions first (not an
    /// operation of the history), and does nothing (returns `None`) when the listing fails or does not show
    /// `version` as kept.
    pub async fn remove_kept_version(&mut self, key: &str, version: VersionId) -> Option<Outcome> {
        let listed = self.store.versions(key).await.ok()?;
        listed
            .iter()
            .any(|v| v.version == version && !v.current)
            .then_some(())?;
        Some(self.remove_version(key, version).await)
    }

    /// Removes version `version` of `key`; no such version (`Error::VersionNotFound`) is recorded as a removal
    /// that found nothing.
    pub async fn remove_version(&mut self, key: &str, version: VersionId) -> Outcome {
        let (op, kind) = self.begin(OpKind::RemoveVersion {
            key: key.to_owned(),
            version: version.to_string(),
        });
        let outcome = match self.store.remove_version(key, version).await {
            Ok(removed) => Outcome::Ok(OpResult::RemoveVersion {
                found: true,
                promoted: match removed {
                    RemovedVersion::CurrentPromoting(v) => Some(v.to_string()),
                    RemovedVersion::Kept | RemovedVersion::Current => None,
                },
            }),
            Err(Error::VersionNotFound { .. }) => Outcome::Ok(OpResult::RemoveVersion {
                found: false,
                promoted: None,
            }),
            Err(e) => failed(&e),
        };
        self.end(op, &kind, outcome)
    }

    /// Deletes `key`.
    pub async fn delete(&mut self, key: &str) -> Outcome {
        let (op, kind) = self.begin(OpKind::Delete {
            key: key.to_owned(),
        });
        let outcome = match self.store.delete(key).await {
            Ok(found) => Outcome::Ok(OpResult::Delete {
                found: found.is_some(),
            }),
            Err(e) => failed(&e),
        };
        self.end(op, &kind, outcome)
    }
}

fn failed(e: &Error) -> Outcome {
    Outcome::Failed {
        error: e.to_string(),
        corrupt: e.is_corruption(),
    }
}

/// Reads `key` as `opts` say (the whole value, digest verified by the store) and identifies what was read.
async fn read_verified(
    store: &BlobStore,
    key: &str,
    opts: &GetOptions,
) -> Result<GetResult, Error> {
    let mut stream = match store.get_stream_with(key, opts).await {
        Ok(s) => s,
        Err(Error::NotFound { .. }) => return Ok(GetResult::NotFound),
        Err(e) => return Err(e),
    };
    let mut verifier = StreamVerifier::new(key.as_bytes());
    while let Some(piece) = stream.next().await {
        verifier.update(&piece?);
    }
    let len = verifier.len();
    Ok(match verifier.finish() {
        Identified::Whole(id) => GetResult::Value {
            id: Some(id),
            len,
            small_bytes_hex: None,
        },
        Identified::Small(_) => GetResult::Value {
            id: None,
            len,
            small_bytes_hex: Some(to_hex(verifier.small_bytes().unwrap_or_default())),
        },
        Identified::Torn { reason } => GetResult::Torn { reason, len },
    })
}

/// Runs `config.clients` clients concurrently on `store`, recording into `sink`; returns their summed stats.
/// Needs a Tokio runtime; panics if a client task panics. Dropping the returned future (or aborting its task)
/// aborts the clients mid-operation: their current operations stay indeterminate in the history. (Aborting is
/// asynchronous: a client being polled at that moment finishes its poll, which may start one more operation.
/// To stop everything at once, as a kill would, drop the Tokio runtime, which waits for running polls.)
pub async fn run(store: BlobStore, config: &WorkloadConfig, sink: Arc<dyn HistorySink>) -> Stats {
    let started = Instant::now();
    let deadline = config.duration.map(|d| started + d);
    // Dropping the JoinSet (e.g. when this future is dropped or its task aborted) aborts every client
    // mid-operation, leaving those operations indeterminate, as a killed process would.
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..config.clients {
        let mut client = Client::new(store.clone(), Arc::clone(&sink))
            .with_put_options(config.put_options.clone());
        if let Some(keeping) = &config.keeping {
            client = client.with_versions(keeping.versions.clone());
        }
        let config = config.clone();
        let seed = config
            .seed
            .wrapping_add((n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let (get_version, remove_version) = config
                .keeping
                .as_ref()
                .map_or((0, 0), |k| (k.get_version, k.remove_version));
            let total = config.mix.total() + get_version + remove_version;
            let mut done = 0u64;
            while !config.stop.is_stopped()
                && config.ops_per_client.is_none_or(|max| done < max)
                && deadline.is_none_or(|d| Instant::now() < d)
                && !config.keys.is_empty()
                && total > 0
            {
                let key = &config.keys[rng.random_range(0..config.keys.len())];
                let roll = rng.random_range(0..total);
                let mix = config.mix;
                if roll < mix.put {
                    let len = config.sizes.pick(&mut rng);
                    if keeps(config.keeping.as_ref(), &mut rng) {
                        client.put_keeping(key, len).await;
                    } else {
                        client.put(key, len).await;
                    }
                } else if roll < mix.put + mix.get {
                    client.get(key).await;
                } else if roll < mix.put + mix.get + mix.delete {
                    client.delete(key).await;
                } else if roll < mix.total() {
                    let len = config.sizes.pick(&mut rng);
                    let keeping = config.keeping.as_ref().filter(|k| k.keep_conditional);
                    let keep = keeps(keeping, &mut rng);
                    let opts = client.put_options.clone();
                    let opts = if keep {
                        opts.with_keep_replaced(true)
                    } else {
                        opts
                    };
                    client.put_conditional_with(key, len, opts).await;
                } else {
                    let log = config.keeping.as_ref().map(|k| &k.versions);
                    let picked = log.and_then(|log| log.pick(key, &mut rng));
                    match picked {
                        Some(v) if roll < mix.total() + get_version => {
                            client.get_version(key, v).await;
                        }
                        Some(v) if config.keeping.as_ref().is_none_or(|k| k.remove_current) => {
                            client.remove_version(key, v).await;
                        }
                        Some(v) => {
                            client.remove_kept_version(key, v).await;
                        }
                        None => {
                            client.get(key).await;
                        }
                    }
                }
                done += 1;
                // Operations on an in-memory store may never suspend: let the timer and other tasks run.
                tokio::task::yield_now().await;
            }
            client.stats
        });
    }
    let mut stats = Stats::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(s) => stats.merge(&s),
            Err(e) => panic!("workload client failed: {e}"),
        }
    }
    stats.elapsed = started.elapsed();
    stats
}

/// Whether a put of keeping clients keeps what it replaces ([`Keeping::keep_percent`]); never without them.
fn keeps(keeping: Option<&Keeping>, rng: &mut StdRng) -> bool {
    keeping.is_some_and(|k| rng.random_range(0..100) < k.keep_percent)
}

/// Reads every key once, in order, with a fresh client, recording the gets in `sink` (after a crash or at
/// the end of a run, so that the final state is checked too). The versions keeping clients recorded are read
/// by [`final_version_reads`].
pub async fn final_reads(store: BlobStore, keys: &[String], sink: Arc<dyn HistorySink>) -> Stats {
    let started = Instant::now();
    let mut client = Client::new(store, sink);
    for key in keys {
        client.get(key).await;
    }
    let mut stats = client.stats;
    stats.elapsed = started.elapsed();
    stats
}

/// Reads every version of `versions` (e.g. [`VersionLog::all`], or [`VersionLog::from_history`] after a
/// crash) once by its id, in order, with a fresh client, recording the gets in `sink`: every version that was
/// neither removed nor replaced without being kept must still read back whole.
pub async fn final_version_reads(
    store: BlobStore,
    versions: &[(String, VersionId)],
    sink: Arc<dyn HistorySink>,
) -> Stats {
    let started = Instant::now();
    let mut client = Client::new(store, sink);
    for (key, version) in versions {
        client.get_version(key, *version).await;
    }
    let mut stats = client.stats;
    stats.elapsed = started.elapsed();
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::history::MemorySink;
    use saltblob_core::{MemoryStore, StoreConfig};

    fn store() -> BlobStore {
        let policy = LayoutPolicy::default()
            .with_inline_limit(1024)
            .with_chunk_size(4096)
            .with_fanout_threshold(64 * 1024)
            .with_max_salt(8);
        let config = StoreConfig::default()
            .with_policy(policy)
            .with_inflight_bytes(16 * 1024);
        BlobStore::new(Arc::new(MemoryStore::new()), config).expect("valid config")
    }

    #[test]
    fn boundaries_cover_the_layout_edges() {
        let policy = LayoutPolicy::default()
            .with_inline_limit(1024)
            .with_chunk_size(4096)
            .with_fanout_threshold(65_536);
        let mix = SizeMix::boundaries(&policy, 200_000);
        assert_eq!(
            mix.sizes,
            vec![
                0, 1, 1023, 1024, 1025, 4095, 4096, 4097, 8192, 65_536, 65_537, 67_585, 100_000,
                200_000
            ]
        );
        let small = SizeMix::boundaries(&policy, 4096);
        assert_eq!(small.sizes, vec![0, 1, 1023, 1024, 1025, 2048, 4095, 4096]);
        assert!(
            SizeMix::boundaries(&LayoutPolicy::default(), 64 << 20)
                .sizes
                .contains(&(8 * 1024 * 1024 + 1))
        );
    }

    #[test]
    fn stop_is_shared_by_clones() {
        let stop = Stop::new();
        let other = stop.clone();
        assert!(!other.is_stopped());
        stop.stop();
        assert!(other.is_stopped());
    }

    #[test]
    fn key_set_numbers_keys() {
        assert_eq!(key_set("k", 3), vec!["k0", "k1", "k2"]);
    }

    #[tokio::test]
    async fn client_records_each_op_and_reads_verify() {
        let sink = MemorySink::new();
        let mut c = Client::new(store(), Arc::new(sink.clone()));
        assert_eq!(
            c.get("a").await,
            Outcome::Ok(OpResult::Get(GetResult::NotFound))
        );
        for len in [0, 5, 1000, 5000, 70_000] {
            assert_eq!(c.put("a", len).await, Outcome::Ok(OpResult::Put));
            match c.get("a").await {
                Outcome::Ok(OpResult::Get(GetResult::Value {
                    id,
                    len: got,
                    small_bytes_hex,
                })) => {
                    assert_eq!(got, len);
                    assert_eq!(id.is_some(), small_bytes_hex.is_none());
                    if let Some(id) = id {
                        assert_eq!((id.writer, id.seq), (c.id(), c.seq - 2));
                    }
                }
                other => panic!("get after put of {len} bytes: {other:?}"),
            }
        }
        assert_eq!(
            c.delete("a").await,
            Outcome::Ok(OpResult::Delete { found: true })
        );
        assert_eq!(
            c.delete("a").await,
            Outcome::Ok(OpResult::Delete { found: false })
        );
        match c.get("").await {
            Outcome::Failed { corrupt: false, .. } => {}
            other => panic!("empty key: {other:?}"),
        }
        assert_eq!((c.stats().ok, c.stats().failed), (13, 1));
        let history = sink.history();
        assert_eq!(history.ops.len(), 14);
        let report = check(&history);
        println!("{report}");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.gets_with_value, 5);
    }

    #[tokio::test]
    async fn keeping_clients_record_versions_and_read_and_remove_them() {
        let sink = MemorySink::new();
        let log = VersionLog::new();
        let mut c = Client::new(store(), Arc::new(sink.clone())).with_versions(log.clone());
        for (len, keep) in [(10, false), (5000, true)] {
            let outcome = if keep {
                c.put_keeping("a", len).await
            } else {
                c.put("a", len).await
            };
            assert!(
                matches!(outcome, Outcome::Ok(OpResult::PutVersion { .. })),
                "{outcome:?}"
            );
        }
        let all = log.all();
        assert_eq!(all.len(), 2);
        let (v1, v2) = (all[0].1, all[1].1);
        assert!(v1 < v2);
        match c.get_version("a", v1).await {
            Outcome::Ok(OpResult::Get(GetResult::Value { len: 10, .. })) => {}
            other => panic!("kept version: {other:?}"),
        }
        assert_eq!(
            c.remove_version("a", v2).await,
            Outcome::Ok(OpResult::RemoveVersion {
                found: true,
                promoted: Some(v1.to_string())
            })
        );
        match c.get("a").await {
            Outcome::Ok(OpResult::Get(GetResult::Value { len: 10, .. })) => {}
            other => panic!("promoted version: {other:?}"),
        }
        assert_eq!(
            c.remove_version("a", v2).await,
            Outcome::Ok(OpResult::RemoveVersion {
                found: false,
                promoted: None
            })
        );
        assert_eq!(
            c.get_version("a", v2).await,
            Outcome::Ok(OpResult::Get(GetResult::NotFound))
        );
        assert_eq!((c.stats().removals, c.stats().puts), (2, 2));
        let history = sink.history();
        let kinds: Vec<&str> = history.ops.iter().map(|op| op.kind.name()).collect();
        assert_eq!(
            kinds,
            vec![
                "put",
                "put_keeping",
                "get_version",
                "remove_version",
                "get",
                "remove_version",
                "get_version"
            ]
        );
        let report = check(&history);
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(VersionLog::from_history(&history).all(), all);
        // Without a log, only keeping puts record their version.
        let mut plain = Client::new(store(), Arc::new(MemorySink::new()));
        assert_eq!(plain.put("b", 1).await, Outcome::Ok(OpResult::Put));
        assert!(matches!(
            plain.put_keeping("b", 1).await,
            Outcome::Ok(OpResult::PutVersion { .. })
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keeping_workloads_read_and_remove_versions_and_check_clean() {
        let sink = MemorySink::new();
        let mut config = WorkloadConfig::new(key_set("k", 2));
        config.ops_per_client = Some(150);
        config.duration = None;
        config.sizes = SizeMix::fixed([0, 16, 1000, 5000]);
        // Removals of kept versions only: removing current ones races in the store (see
        // `crate::scenario::kept_versions_with_promotions`).
        config.keeping = Some(Keeping {
            remove_current: false,
            ..Keeping::default()
        });
        let log = config
            .keeping
            .as_ref()
            .map(|k| k.versions.clone())
            .unwrap_or_default();
        let s = store();
        let mut stats = run(s.clone(), &config, Arc::new(sink.clone())).await;
        stats.merge(&final_version_reads(s, &log.all(), Arc::new(sink.clone())).await);
        println!("{stats}");
        let history = sink.history();
        let count = |name: &str| {
            history
                .ops
                .iter()
                .filter(|op| op.kind.name() == name)
                .count()
        };
        assert!(
            count("put_keeping") > 0
                && count("get_version") > log.len()
                && count("remove_version") > 0,
            "{stats}"
        );
        assert!(count("put") > 0, "some puts do not keep");
        let report = check(&history);
        println!("{report}");
        assert!(report.is_clean(), "{:#?}", report.violations);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn run_honours_op_budget_and_stop() {
        let sink = MemorySink::new();
        let mut config = WorkloadConfig::new(key_set("k", 2));
        config.ops_per_client = Some(25);
        config.duration = None;
        config.clients = 3;
        let stats = run(store(), &config, Arc::new(sink.clone())).await;
        assert_eq!(stats.puts + stats.gets + stats.deletes, 75);
        assert_eq!(sink.history().ops.len(), 75);

        // Without limits it runs until stopped.
        let mut config = WorkloadConfig::new(key_set("k", 2));
        config.duration = None;
        let stop = config.stop.clone();
        let handle = tokio::spawn({
            let sink: Arc<dyn HistorySink> = Arc::new(sink.clone());
            async move { run(store(), &config, sink).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.stop();
        let stats = handle.await.expect("workload ends once stopped");
        assert!(stats.puts + stats.gets + stats.deletes > 0);

        let before = sink.history().ops.len();
        let stats = final_reads(store(), &key_set("k", 3), Arc::new(sink.clone())).await;
        assert_eq!((stats.gets, stats.ok), (3, 3));
        assert_eq!(sink.history().ops.len(), before + 3);
    }
}
