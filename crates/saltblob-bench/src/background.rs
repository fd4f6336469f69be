//! `saltblob bench --background`: gc's background work at cluster scale in one run (issue 57: records that shard,
//! work shared by lease, partitions bounded by bytes). On the store of `--store` (a `cql://` keyspace to see a
//! cluster's figures), with a layer that counts record writes per partition and chunk deletions per version:
//! - `busiest_partition_share`: a mixed run over `--reclaim-queue N` keys (a chunked put of each, an overwrite of
//!   each, a delete of every other one): the writes of the busiest partition of the internal records (intents,
//!   the reclaim queue, bookkeeping; manifests apart, each its own partition on a cluster) ÷ all of them;
//! - `reclaim_entries_per_s`: the queue that run left (1.5 N entries) drained by one gc pass, 16 partitions at once
//!   and 8 entries at once in each (the defaults), beside `reclaim_entries_per_s_partitions_only`: a queue of the
//!   same size drained 16 partitions at once, one entry at a time in each (`GcOptions::with_entries_at_once(1)`),
//!   and `reclaim_entries_per_s_one_at_a_time`: one entry at a time (`with_parallel(1).with_entries_at_once(1)`,
//!   as builds before the sharded queue did), in the same run;
//! - `duplicate_deletes`: a third queue drained by three runners (three stores on one backend, as three gateways)
//!   at once: versions whose chunks were deleted more than once;
//! - `expiry_index_pass_s`: a gc pass that finds `expiry_blobs` (N ÷ 10, at most [`EXPIRY_BLOBS`]: the same work
//!   whatever N, so that how the pass grows with the store shows) blobs whose short ttl has passed among the
//!   N ÷ 2 live keys through the expiry index (its pass over every manifest already made that day, as in a
//!   server's loop), beside `expiry_full_pass_s`: a pass that also reads every manifest (the CLI's `gc`), for as
//!   many blobs;
//! - `max_chunk_partition_bytes`: the largest chunk partition the layout policy gives a 10 GiB and a 1 TiB blob,
//!   on this store's backend and on a cluster (CQL's bound), computed by the policy itself.
//!
//! Printed, and written as `"background": {...}` with `--json`. The keys (`bench-background/…`) are deleted at the
//! end and the queue drained.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use saltblob::backend::counting::CountingStore;
use saltblob::layout::{Layout, LayoutPolicy};
use saltblob::{BlobStore, GcOptions, GcReport, PutOptions, Result, StoreConfig};
use serde::Serialize;
use serde_json::json;

use crate::args::BenchArgs;
use crate::output::write_output;

/// Puts in flight while filling.
const IN_FLIGHT: usize = 32;
/// Bytes of each value: above the default inline limit (16 KiB), so every put is chunked.
const VALUE_BYTES: usize = 20 * 1024;
/// Most blobs with a short ttl put for each expiry pass.
const EXPIRY_BLOBS: u64 = 1000;
/// Where the keys go.
const PREFIX: &str = "bench-background/";

/// The figures of one run (`background` in the JSON).
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackgroundRun {
    /// Keys of the mixed run (`--reclaim-queue`).
    pub keys: u64,
    /// Record writes of the busiest partition of the internal records ÷ all of them, in the mixed run.
    pub busiest_partition_share: f64,
    /// That partition: namespace and partition key (hex).
    pub busiest_partition: String,
    /// Internal record writes of the mixed run.
    pub record_writes: u64,
    /// Queue entries drained per second by one gc pass, 16 partitions at once, 8 entries at once in each.
    pub reclaim_entries_per_s: f64,
    /// The same, 16 partitions at once, one entry at a time in each.
    pub reclaim_entries_per_s_partitions_only: f64,
    /// The same, one entry at a time.
    pub reclaim_entries_per_s_one_at_a_time: f64,
    /// `reclaim_entries_per_s` ÷ `reclaim_entries_per_s_one_at_a_time`.
    pub reclaim_speedup: f64,
    /// Versions reclaimed by the three runners together.
    pub shared_versions: u64,
    /// Versions whose chunks were deleted more than once by the three runners.
    pub duplicate_deletes: u64,
    /// Shares (of 16) each of the three runners left to another.
    pub shares_skipped: Vec<u64>,
    /// Blobs with a short ttl put for each expiry pass.
    pub expiry_blobs: u64,
    /// Of them, those the pass through the expiry index deleted.
    pub expired_by_index: u64,
    /// Seconds of that gc pass.
    pub expiry_index_pass_s: f64,
    /// Of the second batch, those the pass that also reads every manifest deleted.
    pub expired_by_full_pass: u64,
    /// Seconds of that gc pass.
    pub expiry_full_pass_s: f64,
    /// The largest chunk partition of a 10 GiB and a 1 TiB blob on this backend, bytes.
    pub max_chunk_partition_bytes: [u64; 2],
    /// The same on a cluster (CQL's 128 MiB bound).
    pub max_chunk_partition_bytes_cluster: [u64; 2],
}

/// Runs `saltblob bench --background` on the store of `url`; see the module's documentation.
///
/// # Errors
/// The store's.
pub async fn background_bench(url: &str, args: &BenchArgs) -> Result<BackgroundRun> {
    let n = args.reclaim_queue.max(2);
    let (backend_url, config) = saltblob::split_store_params(url, StoreConfig::default())?;
    let config = config.with_grace(Duration::ZERO);
    let backend = saltblob::open_backend(&backend_url).await?;
    let info = backend.info();
    let counting = Arc::new(CountingStore::new(backend));
    let store = BlobStore::new(counting.clone(), config.clone())?;
    println!(
        "saltblob bench --background on {}: {n} keys of {} KiB",
        saltblob::redact_url(url),
        VALUE_BYTES / 1024
    );
    let mut run = BackgroundRun {
        keys: n,
        ..BackgroundRun::default()
    };
    // Anything queued before: drained first, so that each timed pass drains what this run queued alone.
    store.gc(&GcOptions::new()).await?;

    // The mixed run: a put of each key, an overwrite of each, a delete of every other one.
    counting.reset();
    mixed_round(&store, n, (0..n).collect()).await?;
    if let Some(busiest) = counting.busiest() {
        run.record_writes = busiest.total;
        run.busiest_partition_share = busiest.share();
        let (ns, part) = &busiest.partition;
        run.busiest_partition = format!("{ns:?} {}", hex(part));
    }

    // The queue of the mixed run, drained 16 partitions × 8 entries at once; then one of the same size with one
    // entry at a time in each partition, and one drained one entry at a time.
    let (versions, secs) = drain(&store, &GcOptions::new()).await?;
    run.reclaim_entries_per_s = versions as f64 / secs;
    requeue(&store, n).await?;
    let (versions_p, secs_p) = drain(&store, &GcOptions::new().with_entries_at_once(1)).await?;
    run.reclaim_entries_per_s_partitions_only = versions_p as f64 / secs_p;
    requeue(&store, n).await?;
    let one_at_a_time = GcOptions::new().with_parallel(1).with_entries_at_once(1);
    let (versions_1, secs_1) = drain(&store, &one_at_a_time).await?;
    run.reclaim_entries_per_s_one_at_a_time = versions_1 as f64 / secs_1;
    run.reclaim_speedup = run.reclaim_entries_per_s
        / run
            .reclaim_entries_per_s_one_at_a_time
            .max(f64::MIN_POSITIVE);

    // Three runners at once on a third queue.
    requeue(&store, n).await?;
    counting.reset();
    let runners: Vec<BlobStore> = (0..3)
        .map(|_| BlobStore::new(counting.clone(), config.clone()))
        .collect::<Result<_>>()?;
    let opts = GcOptions::new();
    let reports: Vec<GcReport> =
        futures::future::try_join_all(runners.iter().map(|r| r.gc(&opts))).await?;
    let deletes = counting.chunk_deletes();
    run.shared_versions = reports.iter().map(|r| r.reclaim.versions).sum();
    run.duplicate_deletes = deletes.values().filter(|c| **c > 1).count() as u64;
    run.shares_skipped = reports.iter().map(|r| r.shares_skipped).collect();

    // Expiry among the live keys: through the index, then with the pass over every manifest.
    let looped = GcOptions::new().with_full_expiry_every(Duration::from_secs(86_400));
    store.gc(&looped).await?;
    run.expiry_blobs = (n / 10).clamp(1, EXPIRY_BLOBS);
    (run.expired_by_index, run.expiry_index_pass_s) =
        expire_round(&store, run.expiry_blobs, "index", &looped).await?;
    (run.expired_by_full_pass, run.expiry_full_pass_s) =
        expire_round(&store, run.expiry_blobs, "full", &GcOptions::new()).await?;

    let sizes = [10u64 << 30, 1u64 << 40];
    let largest = |policy: LayoutPolicy| {
        sizes.map(|size| match policy.layout_for(size) {
            Layout::Chunked(l) => l.max_partition_bytes(),
            _ => size,
        })
    };
    run.max_chunk_partition_bytes = largest(
        config
            .policy
            .clone()
            .resolve_for(info.large_chunk_size, info.max_partition_bytes),
    );
    let cluster = saltblob::cql::CqlStore::backend_info();
    run.max_chunk_partition_bytes_cluster = largest(
        config
            .policy
            .clone()
            .resolve_for(cluster.large_chunk_size, cluster.max_partition_bytes),
    );

    stream::iter(0..n)
        .map(|i| {
            let store = store.clone();
            async move { store.delete(key_of(i)).await.map(drop) }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    store.gc(&GcOptions::new()).await?;
    print(&run, versions, versions_1);
    if let Some(path) = &args.json {
        let doc = json!({"store": saltblob::redact_url(url), "background": run});
        write_output(
            path,
            &serde_json::to_string_pretty(&doc).unwrap_or_default(),
        )?;
    }
    Ok(run)
}

/// The key of blob `i`.
fn key_of(i: u64) -> String {
    format!("{PREFIX}{i:09}")
}

/// A chunked put of each of the keys `keys` (`first`: values of one seed; else another).
async fn write_round(store: &BlobStore, keys: Vec<u64>, first: bool) -> Result<()> {
    let value = Bytes::from(vec![if first { 1u8 } else { 2 }; VALUE_BYTES]);
    stream::iter(keys)
        .map(|i| {
            let (store, value) = (store.clone(), value.clone());
            async move {
                store
                    .put(key_of(i), value, &PutOptions::new())
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Queues 1.5 `n` entries again, as the mixed run did: the deleted keys put back (nothing queued), then a
/// [`mixed_round`].
async fn requeue(store: &BlobStore, n: u64) -> Result<()> {
    mixed_round(store, n, (0..n).step_by(2).collect()).await
}

/// A put of each of `first` keys, an overwrite of every key of the `n`, a delete of every other one.
async fn mixed_round(store: &BlobStore, n: u64, first: Vec<u64>) -> Result<()> {
    write_round(store, first, true).await?;
    write_round(store, (0..n).collect(), false).await?;
    stream::iter((0..n).step_by(2))
        .map(|i| {
            let store = store.clone();
            async move { store.delete(key_of(i)).await.map(drop) }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Puts `count` small blobs with a one-second ttl under `tag`, waits for them to expire, and times one gc pass under
/// `opts`: (blobs it deleted as expired, seconds).
async fn expire_round(
    store: &BlobStore,
    count: u64,
    tag: &str,
    opts: &GcOptions,
) -> Result<(u64, f64)> {
    let short = PutOptions::new().with_ttl(Duration::from_secs(1));
    stream::iter(0..count)
        .map(|i| {
            let (store, short) = (store.clone(), short.clone());
            async move {
                let key = format!("{PREFIX}ttl-{tag}/{i:09}");
                store
                    .put(key, Bytes::from_static(&[7; 100]), &short)
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let t = Instant::now();
    let report = store.gc(opts).await?;
    Ok((report.expired, t.elapsed().as_secs_f64().max(1e-9)))
}

/// One gc pass under `opts`, timed: (versions reclaimed, seconds).
async fn drain(store: &BlobStore, opts: &GcOptions) -> Result<(u64, f64)> {
    let t = Instant::now();
    let report = store.gc(opts).await?;
    Ok((report.reclaim.versions, t.elapsed().as_secs_f64().max(1e-9)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn print(run: &BackgroundRun, versions: u64, versions_1: u64) {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    println!(
        "busiest partition of the internal records: {:.3}% of {} writes ({})",
        run.busiest_partition_share * 100.0,
        run.record_writes,
        run.busiest_partition
    );
    println!(
        "reclaim: {:.0} entries/s 16 partitions x 8 entries at once ({versions} entries), {:.0} 16 partitions x 1, \
         {:.0} one at a time ({versions_1}): {:.1}x",
        run.reclaim_entries_per_s,
        run.reclaim_entries_per_s_partitions_only,
        run.reclaim_entries_per_s_one_at_a_time,
        run.reclaim_speedup
    );
    println!(
        "three runners at once: {} versions reclaimed, {} deleted more than once; shares skipped {:?}",
        run.shared_versions, run.duplicate_deletes, run.shares_skipped
    );
    println!(
        "expiry: {} of {} expired blobs found through the index by a {:.3} s gc pass; {} of {} by a {:.3} s pass that \
         also reads every manifest ({:.1}x)",
        run.expired_by_index,
        run.expiry_blobs,
        run.expiry_index_pass_s,
        run.expired_by_full_pass,
        run.expiry_blobs,
        run.expiry_full_pass_s,
        run.expiry_full_pass_s / run.expiry_index_pass_s.max(1e-9)
    );
    println!(
        "largest chunk partition, 10 GiB and 1 TiB blob: {:.3} and {:.3} GiB here, {:.3} and {:.3} GiB on a cluster",
        gib(run.max_chunk_partition_bytes[0]),
        gib(run.max_chunk_partition_bytes[1]),
        gib(run.max_chunk_partition_bytes_cluster[0]),
        gib(run.max_chunk_partition_bytes_cluster[1])
    );
}
