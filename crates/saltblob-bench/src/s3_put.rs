//! `saltblob bench --s3-put MIB`: what a put through S3 costs beside the same put made directly (issue 60 item
//! 5). One process holds the store of `--store`, `saltblob serve` over it on a loopback port, and object_store's
//! S3 client (the client of a Rust service, and of obstore in Python). Each of `--count` rounds puts one blob
//! of MIB MiB (random bytes, in memory on the client's side) five ways, the order rotating each round:
//! - `direct`: `BlobStore::put_stream` of the bytes in memory (the strict anchor);
//! - `file`: `BlobStore::put_stream` of a file holding them (in the page cache), as `saltblob put KEY FILE` does:
//!   the anchor of issue 60's goal, which compared a PutObject with the CLI's put of the same file;
//! - `single`: one PutObject, its payload signed (object_store's default: the client sends the body's SHA-256,
//!   which the server checks);
//! - `single_unsigned`: one PutObject with `UNSIGNED-PAYLOAD`;
//! - `multipart`: a multipart upload of 16 MiB parts, 8 in flight (obstore's default shape).
//!
//! Each put is timed from its call to its acknowledgement, with the CPU seconds of the whole process (client,
//! server and store together) over it; the blob is deleted and the space reclaimed between puts, untimed.
//! Printed with the ratios of each round (throughput of the S3 way ÷ the direct put's, and ÷ the file put's, in
//! that round) and their medians, and written as `"s3_put": {...}` with `--json`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, WriteMultipart};
use saltblob::{BlobStore, Error, GcOptions, PutOptions, Result, StoreConfig};
use serde::Serialize;
use serde_json::json;

use crate::args::BenchArgs;
use crate::cpu::process_cpu_seconds;
use crate::direct::io_error;
use crate::output::write_output;
use crate::payload::random_bytes;
use crate::s3::{S3Target, Served};
use crate::stats::MIB;

/// The bucket the puts go to.
const BUCKET: &str = "bench-s3-put";
/// Part size of the multipart way: obstore's default `chunk_size`.
const PART_BYTES: usize = 16 << 20;
/// Parts in flight at once in the multipart way.
const PARTS_IN_FLIGHT: usize = 8;

/// The ways a blob is put, in the order of round 0.
const WAYS: [Way; 5] = [
    Way::Direct,
    Way::File,
    Way::Single,
    Way::SingleUnsigned,
    Way::Multipart,
];

/// One way of putting the blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Direct,
    File,
    Single,
    SingleUnsigned,
    Multipart,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Direct => "direct",
            Way::File => "file",
            Way::Single => "single",
            Way::SingleUnsigned => "single_unsigned",
            Way::Multipart => "multipart",
        }
    }
}

/// One put: its throughput and the process's CPU seconds per GiB put.
#[derive(Clone, Debug, Default, Serialize)]
pub struct S3PutSample {
    /// MiB put per second, from the call to the acknowledgement.
    pub mib_per_s: f64,
    /// CPU seconds of the whole process (client, server, store) per GiB put.
    pub cpu_s_per_gib: f64,
}

/// The figures of one way over the rounds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct S3PutWay {
    /// Each round's put.
    pub rounds: Vec<S3PutSample>,
    /// Each round's throughput ÷ the direct put's in the same round (1 for `direct` itself).
    pub ratios: Vec<f64>,
    /// The median of `ratios`.
    pub median_ratio: f64,
    /// Each round's throughput ÷ the file put's in the same round.
    pub ratios_to_file: Vec<f64>,
    /// The median of `ratios_to_file`: issue 60's figure (goal ≥ 0.7 for `single` and `multipart`).
    pub median_ratio_to_file: f64,
    /// The median throughput, MiB/s.
    pub median_mib_per_s: f64,
    /// The median CPU seconds per GiB (every thread of the process: client, server and store).
    pub median_cpu_s_per_gib: f64,
}

/// The figures of a run (`s3_put` in the JSON).
#[derive(Clone, Debug, Default, Serialize)]
pub struct S3PutRun {
    /// Bytes of each blob.
    pub bytes: u64,
    /// Rounds run.
    pub rounds: u64,
    /// `BlobStore::put_stream` of the bytes in memory (the strict anchor).
    pub direct: S3PutWay,
    /// `BlobStore::put_stream` of a file in the page cache, as `saltblob put KEY FILE` (the goal's anchor).
    pub file: S3PutWay,
    /// One PutObject, its payload signed.
    pub single: S3PutWay,
    /// One PutObject with `UNSIGNED-PAYLOAD`.
    pub single_unsigned: S3PutWay,
    /// A multipart upload of 16 MiB parts, 8 in flight.
    pub multipart: S3PutWay,
}

impl S3PutRun {
    fn way_mut(&mut self, way: Way) -> &mut S3PutWay {
        match way {
            Way::Direct => &mut self.direct,
            Way::File => &mut self.file,
            Way::Single => &mut self.single,
            Way::SingleUnsigned => &mut self.single_unsigned,
            Way::Multipart => &mut self.multipart,
        }
    }
}

/// `saltblob bench --s3-put MIB` on the store at `url` (see the module doc).
///
/// # Errors
/// A store that cannot be opened, a put that fails (through S3: the client's error), or MIB of 0.
pub async fn s3_put_bench(url: &str, args: &BenchArgs, mib: u64) -> Result<S3PutRun> {
    if mib == 0 {
        return Err(Error::invalid(
            "--s3-put",
            "give the blob's size in MiB, at least 1",
        ));
    }
    let rounds = args.count.max(1);
    let (backend_url, config) = saltblob::split_store_params(url, StoreConfig::default())?;
    let backend = saltblob::open_backend(&backend_url).await?;
    let store = BlobStore::new(backend, config.with_grace(Duration::ZERO))?;
    let server = Served::start(store.clone(), BUCKET).await?;
    let unsigned = server.client_with("aws_unsigned_payload=true")?;
    let bytes = mib << 20;
    let data = random_bytes(usize::try_from(bytes).map_err(|_| {
        Error::invalid("--s3-put", format!("{mib} MiB does not fit in memory here"))
    })?);
    let file = std::env::temp_dir().join(format!("saltblob-bench-s3-put-{}", std::process::id()));
    tokio::fs::write(&file, &data)
        .await
        .map_err(|e| io_error(format!("writing {}", file.display()), e))?;
    println!(
        "saltblob bench --s3-put on {}: {rounds} rounds of a {mib} MiB put, direct and through an in-process \
         `saltblob serve` (object_store's S3 client: signed, unsigned, multipart of {} MiB parts, {PARTS_IN_FLIGHT} \
         in flight)",
        saltblob::redact_url(url),
        PART_BYTES >> 20
    );
    let mut run = S3PutRun {
        bytes,
        rounds,
        ..S3PutRun::default()
    };
    let mut outcome = Ok(());
    'rounds: for round in 0..rounds {
        let mut line = format!("round {round}:");
        let offset = usize::try_from(round).unwrap_or(0) % WAYS.len();
        for way in WAYS.iter().cycle().skip(offset).take(WAYS.len()) {
            let key = format!("{}/{round}", way.name());
            let cpu = process_cpu_seconds();
            let t = Instant::now();
            let put = match way {
                Way::Direct => direct_put(&store, &key, &data).await,
                Way::File => file_put(&store, &key, &file, bytes).await,
                Way::Single => server.client.put(&key, data.clone()).await.map(drop),
                Way::SingleUnsigned => unsigned.put(&key, data.clone()).await.map(drop),
                Way::Multipart => multipart_put(&server.client, &key, &data).await,
            };
            let secs = t.elapsed().as_secs_f64();
            let cpu = process_cpu_seconds() - cpu;
            if let Err(e) = put {
                outcome = Err(Error::internal(
                    "bench --s3-put",
                    format!("the {} put of round {round} failed: {e}", way.name()),
                ));
                break 'rounds;
            }
            let sample = S3PutSample {
                mib_per_s: bytes as f64 / MIB / secs,
                cpu_s_per_gib: cpu / (bytes as f64 / (1024.0 * MIB)),
            };
            line.push_str(&format!(
                "  {} {:.0} MiB/s ({:.2} CPU s/GiB)",
                way.name(),
                sample.mib_per_s,
                sample.cpu_s_per_gib
            ));
            run.way_mut(*way).rounds.push(sample);
            if matches!(way, Way::Direct | Way::File) {
                store.delete(key.as_bytes()).await?;
            } else {
                server.client.delete(&key).await?;
            }
            store.gc(&GcOptions::new()).await?;
        }
        println!("{line}");
    }
    server.stop().await;
    // Best effort: a file left in the temporary directory is only space.
    let _ = std::fs::remove_file(&file);
    outcome?;
    summarize(&mut run);
    for way in WAYS {
        let w = run.way_mut(way);
        println!(
            "{:<16} median {:>6.0} MiB/s  {:.2} CPU s/GiB  ÷ direct: {:.2} ({})  ÷ file: {:.2} ({})",
            way.name(),
            w.median_mib_per_s,
            w.median_cpu_s_per_gib,
            w.median_ratio,
            listed(&w.ratios),
            w.median_ratio_to_file,
            listed(&w.ratios_to_file),
        );
    }
    if let Some(path) = &args.json {
        let doc = json!({"store": saltblob::redact_url(url), "s3_put": run});
        write_output(
            path,
            &serde_json::to_string_pretty(&doc).unwrap_or_default(),
        )?;
    }
    Ok(run)
}

/// The blob put directly, as `saltblob put` streams a file.
async fn direct_put(store: &BlobStore, key: &str, data: &Bytes) -> Result<()> {
    let opts = PutOptions::default().with_size_hint(data.len() as u64);
    store
        .put_stream(key, std::io::Cursor::new(data.clone()), &opts)
        .await
        .map(drop)
}

/// The blob put from `file` (`bytes` long), as `saltblob put KEY FILE` streams it.
async fn file_put(store: &BlobStore, key: &str, file: &std::path::Path, bytes: u64) -> Result<()> {
    let reader = tokio::fs::File::open(file)
        .await
        .map_err(|e| io_error(format!("opening {}", file.display()), e))?;
    let opts = PutOptions::default().with_size_hint(bytes);
    store.put_stream(key, reader, &opts).await.map(drop)
}

/// The blob put as a multipart upload of [`PART_BYTES`] parts, [`PARTS_IN_FLIGHT`] at once.
async fn multipart_put(client: &S3Target, key: &str, data: &Bytes) -> Result<()> {
    let failed = |e: object_store::Error| Error::backend("s3", e.to_string(), true);
    let upload = client
        .client()
        .put_multipart(&Path::from(key))
        .await
        .map_err(failed)?;
    let mut write = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    for part in data.chunks(PART_BYTES) {
        write
            .wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(failed)?;
        write.put(data.slice_ref(part));
    }
    write.finish().await.map_err(failed).map(drop)
}

/// Fills each way's ratios to the direct and the file put of its round, and the medians.
fn summarize(run: &mut S3PutRun) {
    let throughputs = |w: &S3PutWay| w.rounds.iter().map(|s| s.mib_per_s).collect::<Vec<_>>();
    let (direct, file) = (throughputs(&run.direct), throughputs(&run.file));
    let ratios = |w: &S3PutWay, anchor: &[f64]| -> Vec<f64> {
        w.rounds
            .iter()
            .zip(anchor)
            .map(|(s, a)| s.mib_per_s / a.max(f64::MIN_POSITIVE))
            .collect()
    };
    for way in WAYS {
        let w = run.way_mut(way);
        w.ratios = ratios(w, &direct);
        w.median_ratio = median(&w.ratios);
        w.ratios_to_file = ratios(w, &file);
        w.median_ratio_to_file = median(&w.ratios_to_file);
        w.median_mib_per_s = median(&w.rounds.iter().map(|s| s.mib_per_s).collect::<Vec<_>>());
        w.median_cpu_s_per_gib =
            median(&w.rounds.iter().map(|s| s.cpu_s_per_gib).collect::<Vec<_>>());
    }
}

/// `values` with two decimals, comma-separated.
fn listed(values: &[f64]) -> String {
    values
        .iter()
        .map(|r| format!("{r:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_to_the_direct_put_of_the_same_round() {
        let sample = |mib_per_s| S3PutSample {
            mib_per_s,
            cpu_s_per_gib: 1.0,
        };
        let mut run = S3PutRun::default();
        run.direct.rounds = vec![sample(100.0), sample(200.0), sample(400.0)];
        run.file.rounds = vec![sample(50.0), sample(100.0), sample(200.0)];
        run.single.rounds = vec![sample(50.0), sample(150.0), sample(100.0)];
        summarize(&mut run);
        assert_eq!(run.single.ratios, [0.5, 0.75, 0.25]);
        assert_eq!(run.single.ratios_to_file, [1.0, 1.5, 0.5]);
        assert_eq!(run.single.median_ratio_to_file, 1.0);
        assert_eq!(run.single.median_ratio, 0.5);
        assert_eq!(run.single.median_mib_per_s, 100.0);
        assert_eq!(run.direct.median_ratio, 1.0);
        assert_eq!(median(&[1.0, 4.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
