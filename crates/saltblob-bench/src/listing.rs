//! `saltblob bench --listing`: how the cost of listings and passes grows with the number of blobs N.
//!
//! For each N of `--listing-sizes` (ascending; default 10 000, 100 000, 1 000 000), the store is filled up to N
//! small blobs (64 bytes, inline) in batches of [`FILL_BATCH`], [`FILL_IN_FLIGHT`] puts at once, under keys
//! `s3/o/bench-listing/pNN/IIIIIIIII` (40 prefixes `pNN/`, the objects of bucket `bench-listing` of
//! `saltblob serve`); on a cluster the listing index's maintenance (what gc runs) splits its ranges between
//! batches. Then a pass and a listing of every key read the store through once, and each page is timed
//! [`REPEATS`] times (the median reported):
//! - `ls_first_page_ms`, `ls_middle_page_ms`: a 1000-key page from the first key, and from the middle key;
//! - `prefix_page_ms`: a 1000-key page under one prefix `pNN/`;
//! - `s3_page_ms`, `s3_delimiter_page_ms`: S3 ListObjectsV2 through an in-process `saltblob serve` on loopback
//!   (feature `s3`): the first page of 1000 keys, and the listing with delimiter `/` (the 40 common prefixes,
//!   each skipped by the server in one jump);
//! - on a cluster, the listing index's partition reads per page (`driver_pages_per_page`) and the manifests read
//!   per common prefix by the delimiter listing (`records_per_prefix`);
//! - `pass_rows_per_s_serial`, `pass_rows_per_s_parallel` (timed before the pages): a pass over every manifest
//!   ([`BlobStore::pass`]), one range at a time and as many as the backend serves well; `list_rows_per_s`: a
//!   key-ordered listing of every key ([`BlobStore::list_stream`]).
//!
//! Printed as a table, written as `"listing": {"runs": [...]}` with `--json`. The keys are deleted at the end
//! unless `--keep`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use saltblob::{BlobStore, ChunkStore, PassEvent, PassOptions, PutOptions, Result, StoreConfig};
use serde::Serialize;
use serde_json::json;

use crate::args::BenchArgs;
use crate::output::write_output;
#[cfg(feature = "s3")]
use crate::s3::Served;

/// Puts per fill batch (then the index's maintenance runs, on a cluster).
const FILL_BATCH: u64 = 50_000;
/// Puts in flight while filling.
const FILL_IN_FLIGHT: usize = 64;
/// Prefixes the keys are spread over.
const PREFIXES: u64 = 40;
/// Keys per listing page, as S3's.
const PAGE: usize = 1000;
/// Timings per figure; the median is reported.
const REPEATS: usize = 9;
/// The S3 bucket the keys belong to when served.
pub const BUCKET: &str = "bench-listing";

/// One N's figures (`listing.runs[]` of the JSON).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ListingRun {
    /// Blobs in the store.
    pub n: u64,
    /// Seconds the fill up to `n` took (from the previous N).
    pub fill_s: f64,
    /// A 1000-key page from the first key.
    pub ls_first_page_ms: f64,
    /// A 1000-key page from the middle key.
    pub ls_middle_page_ms: f64,
    /// A 1000-key page under one prefix.
    pub prefix_page_ms: f64,
    /// S3 ListObjectsV2, first page of 1000 keys (`null` without the `s3` feature).
    pub s3_page_ms: Option<f64>,
    /// S3 ListObjectsV2 with delimiter `/`: the 40 common prefixes.
    pub s3_delimiter_page_ms: Option<f64>,
    /// Listing-index partition reads per 1000-key page (cluster only).
    pub driver_pages_per_page: Option<f64>,
    /// Manifests read per common prefix by the delimiter listing (cluster only).
    pub records_per_prefix: Option<f64>,
    /// A pass over every manifest, one range at a time: rows per second.
    pub pass_rows_per_s_serial: f64,
    /// The same pass, the backend's ranges in flight at once.
    pub pass_rows_per_s_parallel: f64,
    /// Ranges of the pass, and how many were read at once in the parallel one.
    pub pass_ranges: usize,
    /// Ranges read at once in the parallel pass.
    pub pass_in_flight: usize,
    /// A key-ordered listing of every key: keys per second.
    pub list_rows_per_s: f64,
}

/// The store, and what a cluster store tells of its listing index.
struct Subject {
    store: BlobStore,
    cql: Option<Arc<saltblob::cql::CqlStore>>,
}

impl Subject {
    async fn open(url: &str) -> Result<Self> {
        let (backend_url, config) = saltblob::split_store_params(url, StoreConfig::default())?;
        let config = config.with_grace(Duration::ZERO);
        if backend_url.starts_with(&format!("{}://", saltblob::cql::SCHEME)) {
            let cql = Arc::new(
                saltblob::cql::CqlStore::connect(saltblob::cql::CqlConfig::from_url(&backend_url)?)
                    .await?,
            );
            let backend: Arc<dyn ChunkStore> = cql.clone();
            return Ok(Self {
                store: BlobStore::new(backend, config)?,
                cql: Some(cql),
            });
        }
        let backend = saltblob::open_backend(&backend_url).await?;
        Ok(Self {
            store: BlobStore::new(backend, config)?,
            cql: None,
        })
    }

    /// (index partition reads, manifests listed) so far, on a cluster.
    fn counters(&self) -> Option<(u64, u64)> {
        if let Some(c) = &self.cql {
            return Some((c.listing_reads(), c.listed_records()));
        }
        None
    }

    /// One round of the listing index's maintenance until it settles (a cluster; nothing elsewhere).
    async fn maintain(&self) -> Result<()> {
        if let Some(c) = &self.cql {
            for _ in 0..200 {
                let report = c.maintain_listing().await?;
                let moving = c
                    .listing_directory()
                    .await?
                    .entries()
                    .iter()
                    .any(|e| e.state == saltblob::cql::listing::RangeState::Moving);
                if !moving && report.new_ranges == 0 && !report.skipped {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Ok(())
    }
}

/// The key of blob `i`.
fn key_of(i: u64) -> String {
    format!("s3/o/{BUCKET}/p{:02}/{:09}", i % PREFIXES, i)
}

/// The median of `REPEATS` timings of `f`, in milliseconds, with the counters' deltas of the last one.
async fn timed<F, Fut>(subject: &Subject, mut f: F) -> Result<(f64, Option<(u64, u64)>)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut times = Vec::with_capacity(REPEATS);
    let mut delta = None;
    for _ in 0..REPEATS {
        let before = subject.counters();
        let t = Instant::now();
        f().await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        delta = before
            .zip(subject.counters())
            .map(|((r0, m0), (r1, m1))| (r1 - r0, m1 - m0));
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], delta))
}

/// Fills blobs `from..to`.
async fn fill(store: &BlobStore, from: u64, to: u64) -> Result<()> {
    let value = Bytes::from_static(&[7u8; 64]);
    stream::iter(from..to)
        .map(|i| {
            let value = value.clone();
            async move {
                store
                    .put(key_of(i), value, &PutOptions::new())
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(FILL_IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Times of one pass over every manifest with `in_flight` ranges at once: (rows, seconds, ranges, in flight).
async fn pass(store: &BlobStore, in_flight: Option<usize>) -> Result<(u64, f64, usize, usize)> {
    let progress = store.plan_pass(b"").await?;
    let mut opts = PassOptions::new();
    if let Some(k) = in_flight {
        opts = opts.with_in_flight(k);
    }
    let in_flight = opts
        .in_flight
        .unwrap_or(progress.in_flight())
        .min(progress.range_count());
    let t = Instant::now();
    let mut rows = 0u64;
    let mut events = store.pass(&progress, &opts);
    while let Some(event) = events.next().await {
        match event {
            PassEvent::Page(page) => rows += page.entries.len() as u64,
            PassEvent::Unread { range, error } => {
                return Err(saltblob::Error::internal(
                    "bench --listing",
                    format!("range {range} of the pass could not be read: {error}"),
                ));
            }
        }
    }
    Ok((
        rows,
        t.elapsed().as_secs_f64(),
        progress.range_count(),
        in_flight,
    ))
}

/// `saltblob bench --listing` on the store at `url` (see the module doc).
pub async fn listing_bench(url: &str, args: &BenchArgs) -> Result<Vec<ListingRun>> {
    let mut sizes = args.listing_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let subject = Subject::open(url).await?;
    let store = &subject.store;
    println!(
        "saltblob bench --listing on {}: N = {sizes:?}, 64-byte blobs under {PREFIXES} prefixes (the in-process S3 \
         server's access log goes to stderr: SALTBLOB_LOG=warn silences it)",
        saltblob::redact_url(url)
    );
    #[cfg(feature = "s3")]
    let server = Served::start(store.clone(), BUCKET).await?;
    // What the store held before (the bucket's record among it): counted in every pass and listing.
    let before = store
        .list_stream(b"")
        .try_fold(0u64, |c, _| async move { Ok(c + 1) })
        .await?;
    let mut runs = Vec::new();
    let mut filled = 0u64;
    for &n in &sizes {
        let t = Instant::now();
        while filled < n {
            let to = (filled + FILL_BATCH).min(n);
            fill(store, filled, to).await?;
            subject.maintain().await?;
            filled = to;
        }
        let fill_s = t.elapsed().as_secs_f64();
        let mut run = ListingRun {
            n,
            fill_s,
            ..ListingRun::default()
        };
        // The passes and the full listing first: they read every key, so that the pages are timed on a store
        // that has been read through once (not on the caches and compactions of the fill just done).
        let (rows, secs, ranges, _) = pass(store, Some(1)).await?;
        check_rows("serial pass", rows, before + n)?;
        run.pass_rows_per_s_serial = rows as f64 / secs;
        let (rows, secs, ranges_p, in_flight) = pass(store, None).await?;
        check_rows("parallel pass", rows, before + n)?;
        run.pass_rows_per_s_parallel = rows as f64 / secs;
        run.pass_ranges = ranges.max(ranges_p);
        run.pass_in_flight = in_flight;
        let t = Instant::now();
        let listed = store
            .list_stream(b"")
            .try_fold(0u64, |c, _| async move { Ok(c + 1) })
            .await?;
        check_rows("listing", listed, before + n)?;
        run.list_rows_per_s = listed as f64 / t.elapsed().as_secs_f64();
        let (ms, first) = timed(&subject, || async {
            store.list_page(b"", None, PAGE).await.map(drop)
        })
        .await?;
        run.ls_first_page_ms = ms;
        // The first key of prefix p20: the middle of the key order.
        let middle = Bytes::from(key_of(PREFIXES / 2));
        let (ms, mid) = timed(&subject, || async {
            store
                .list_page(b"", Some(middle.clone()), PAGE)
                .await
                .map(drop)
        })
        .await?;
        run.ls_middle_page_ms = ms;
        run.driver_pages_per_page = first.zip(mid).map(|((a, _), (b, _))| (a + b) as f64 / 2.0);
        let prefix = format!("s3/o/{BUCKET}/p17/");
        let (ms, _) = timed(&subject, || async {
            store
                .list_page(prefix.as_bytes(), None, PAGE)
                .await
                .map(drop)
        })
        .await?;
        run.prefix_page_ms = ms;
        #[cfg(feature = "s3")]
        {
            let (ms, _) = timed(&subject, || server.first_page(PAGE.min(n as usize))).await?;
            run.s3_page_ms = Some(ms);
            let (ms, delta) = timed(&subject, || server.delimiter_page(PREFIXES as usize)).await?;
            run.s3_delimiter_page_ms = Some(ms);
            run.records_per_prefix = delta.map(|(_, records)| records as f64 / PREFIXES as f64);
        }
        println!("{}", run_line(&run));
        runs.push(run);
    }
    #[cfg(feature = "s3")]
    server.stop().await;
    if !args.keep {
        stream::iter(0..filled)
            .map(|i| async move { store.delete(key_of(i)).await.map(drop) })
            .buffer_unordered(FILL_IN_FLIGHT)
            .try_collect::<()>()
            .await?;
    }
    if let Some(path) = &args.json {
        let doc = json!({
            "store": saltblob::redact_url(url),
            "listing": {"runs": runs, "page": PAGE, "prefixes": PREFIXES, "repeats": REPEATS},
        });
        write_output(
            path,
            &serde_json::to_string_pretty(&doc).unwrap_or_default(),
        )?;
    }
    Ok(runs)
}

/// A pass or listing that saw another number of blobs than the store holds (`n`) is a failed bench, not a figure.
fn check_rows(what: &str, rows: u64, n: u64) -> Result<()> {
    if rows == n {
        Ok(())
    } else {
        Err(saltblob::Error::internal(
            "bench --listing",
            format!("the {what} read {rows} blobs; the store holds {n}"),
        ))
    }
}

/// One line of the printed table.
fn run_line(r: &ListingRun) -> String {
    let opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    format!(
        "N={:>9}  fill {:>6.1}s  ls first {:>7.1} ms  middle {:>7.1} ms  prefix {:>7.1} ms  s3 {:>7} ms  \
         s3 delimiter {:>7} ms  index reads/page {:>5}  manifests/prefix {:>5}  pass {:>8.0} rows/s serial, \
         {:>8.0} parallel ({} ranges, {} at once)  list {:>8.0} keys/s",
        r.n,
        r.fill_s,
        r.ls_first_page_ms,
        r.ls_middle_page_ms,
        r.prefix_page_ms,
        opt(r.s3_page_ms),
        opt(r.s3_delimiter_page_ms),
        opt(r.driver_pages_per_page),
        opt(r.records_per_prefix),
        r.pass_rows_per_s_serial,
        r.pass_rows_per_s_parallel,
        r.pass_ranges,
        r.pass_in_flight,
        r.list_rows_per_s,
    )
}

/// The listings `--listing` times through the in-process server.
#[cfg(feature = "s3")]
impl Served {
    /// ListObjectsV2's first page of `keys` keys (object_store asks 1000 at a time, and a page only when its
    /// stream needs more).
    async fn first_page(&self, keys: usize) -> Result<()> {
        use object_store::ObjectStore;
        let listed = self
            .client
            .client()
            .list(None)
            .take(keys)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| saltblob::Error::backend("s3", e.to_string(), true))?;
        if listed.len() == keys {
            Ok(())
        } else {
            Err(saltblob::Error::internal(
                "bench --listing",
                format!("ListObjectsV2 gave {} keys, not {keys}", listed.len()),
            ))
        }
    }

    /// ListObjectsV2 with delimiter `/`: the bucket's `prefixes` common prefixes.
    async fn delimiter_page(&self, prefixes: usize) -> Result<()> {
        use object_store::ObjectStore;
        let listed = self
            .client
            .client()
            .list_with_delimiter(None)
            .await
            .map_err(|e| saltblob::Error::backend("s3", e.to_string(), true))?;
        if listed.common_prefixes.len() == prefixes && listed.objects.is_empty() {
            Ok(())
        } else {
            Err(saltblob::Error::internal(
                "bench --listing",
                format!(
                    "ListObjectsV2 with a delimiter gave {} common prefixes and {} keys, not {prefixes} and none",
                    listed.common_prefixes.len(),
                    listed.objects.len()
                ),
            ))
        }
    }
}
