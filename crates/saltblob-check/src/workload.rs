//! The workload: concurrent clients doing random puts, gets and deletes on a few keys, recording every
//! operation in a [`HistorySink`].
//!
//! Each [`Client`] has a random 64-bit id (unique across processes in practice) and a counter; an operation's
//! [`OpId`] is (client id, counter) and a put writes the self-describing value with the same numbers
//! ([`crate::value::generate`]). The invocation is recorded before the operation starts and the completion
//! after it ends, so the recorded interval contains the real one. Reads are verified as they stream in
//! ([`StreamVerifier`]), so even huge values take bounded memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use saltblob_core::{BlobStore, Error, LayoutPolicy, PutCondition, PutOptions};
use serde::Serialize;

use crate::history::{Event, GetResult, HistorySink, OpId, OpKind, OpResult, Outcome, now_micros};
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
            OpKind::Put { .. } => self.puts += 1,
            OpKind::Get { .. } => self.gets += 1,
            OpKind::Delete { .. } => self.deletes += 1,
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
        )
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
        }
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
        let (op, kind) = self.begin(OpKind::Put {
            key: key.to_owned(),
            id,
            len,
        });
        let outcome = match self.store.put(key, value, opts).await {
            Ok(_) => Outcome::Ok(OpResult::Put),
            Err(e @ (Error::AlreadyExists { .. } | Error::PreconditionFailed { .. })) => {
                Outcome::Refused {
                    error: e.to_string(),
                }
            }
            Err(e) => failed(&e),
        };
        self.end(op, &kind, outcome)
    }

    /// A conditional put of a fresh value: reads `key`'s current version, then puts on the condition that it is
    /// still that version (or that the key is still absent). Another writer in between makes the store refuse
    /// it ([`Outcome::Refused`]), and the checker then verifies that its value never shows.
    pub async fn put_conditional(&mut self, key: &str, len: u64) -> Outcome {
        let condition = match self.store.head(key).await {
            Ok(m) => PutCondition::IfVersion(m.version),
            Err(Error::NotFound { .. }) => PutCondition::IfAbsent,
            // Nothing was written: not an operation of the history.
            Err(e) => return failed(&e),
        };
        let opts = self.put_options.clone().with_condition(condition);
        self.put_with(key, len, &opts).await
    }

    /// Reads the whole value of `key`, verifying it as it streams in.
    pub async fn get(&mut self, key: &str) -> Outcome {
        let (op, kind) = self.begin(OpKind::Get {
            key: key.to_owned(),
        });
        let outcome = match read_verified(&self.store, key).await {
            Ok(r) => Outcome::Ok(OpResult::Get(r)),
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

/// Reads `key` (the whole value, digest verified by the store) and identifies what was read.
async fn read_verified(store: &BlobStore, key: &str) -> Result<GetResult, Error> {
    let mut stream = match store.get_stream(key).await {
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
        let config = config.clone();
        let seed = config
            .seed
            .wrapping_add((n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let total = config.mix.total();
            let mut done = 0u64;
            while !config.stop.is_stopped()
                && config.ops_per_client.is_none_or(|max| done < max)
                && deadline.is_none_or(|d| Instant::now() < d)
                && !config.keys.is_empty()
                && total > 0
            {
                let key = &config.keys[rng.random_range(0..config.keys.len())];
                let roll = rng.random_range(0..total);
                if roll < config.mix.put {
                    let len = config.sizes.pick(&mut rng);
                    client.put(key, len).await;
                } else if roll < config.mix.put + config.mix.get {
                    client.get(key).await;
                } else if roll < config.mix.put + config.mix.get + config.mix.delete {
                    client.delete(key).await;
                } else {
                    let len = config.sizes.pick(&mut rng);
                    client.put_conditional(key, len).await;
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

/// Reads every key once, in order, with a fresh client, recording the gets in `sink` (after a crash or at
/// the end of a run, so that the final state is checked too).
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
