//! The phase runners: each phase of the bench on one [`Run`] (the store, its keys and payloads), returning
//! its [`PhaseReport`]; and the clean-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use saltblob::layout::MIN_CHUNK_SIZE;
use saltblob::{
    BackendInfo, BlobRef, BlobStore, ChunkId, ChunkStore, ChunkWrite, PutOptions, Result, VersionId,
};
use serde_json::json;

use crate::cpu::process_cpu_seconds;
use crate::direct::{DdReads, DdTimed, DdWrites};
use crate::load::run_concurrent_pair;
use crate::mixed::Load;
use crate::payload::{
    HEAD_LEN, Outcome, TAG_LARGE, TAG_SMALL, TAG_UNCHUNKED, check, check_head, stamped,
};
use crate::progress::Progress;
use crate::results::Cleanup;
use crate::stats::{MIB, PhaseReport, Tally};

/// One bench run: where it writes and what.
pub(crate) struct Run {
    /// The bench's own store (grace period zero).
    pub(crate) store: BlobStore,
    /// The backend under it, for the raw unchunked values.
    pub(crate) backend: Arc<dyn ChunkStore>,
    /// What the backend reports of itself.
    pub(crate) info: BackendInfo,
    /// Sizes, keys and payloads (the store as its target).
    pub(crate) load: Load,
    /// dd's read pattern, run beside each large get (embedded store, with the probe): `large_read_vs_dd`.
    pub(crate) dd_reads: Option<Arc<std::sync::Mutex<DdReads>>>,
    /// dd's write pattern, run beside each large put (embedded store, with the probe):
    /// `large_write_vs_dd_beside`.
    pub(crate) dd_writes: Option<Arc<std::sync::Mutex<DdWrites>>>,
}

impl Run {
    fn key(&self, kind: &str, index: u64) -> String {
        format!("{}{kind}/{index:07}", self.load.prefix)
    }

    pub(crate) async fn large_write(&self) -> PhaseReport {
        let plan = &self.load.plan;
        let mut progress = Progress::new("large_write", plan.count, "blobs", self.load.quiet);
        let mut tally = Tally::default();
        let mut busy = Duration::ZERO;
        let mut cpu = 0.0;
        // dd's writes of as many bytes, beside the puts: before the even ones and after the odd ones, as the
        // reads beside the gets. Counted apart from the puts' disk bytes.
        let mut dd = DdTally::default();
        let mut written_before = process_write_bytes();
        for i in 0..plan.count {
            let data = stamped(&self.load.large_base, self.load.tag, TAG_LARGE, i);
            if i % 2 == 0 {
                written_before = self.dd_write(&mut dd, written_before).await;
            }
            let (t, cpu_before) = (Instant::now(), process_cpu_seconds());
            let result = self
                .store
                .put(self.key("large", i), data, &PutOptions::new())
                .await;
            let elapsed = t.elapsed();
            cpu += process_cpu_seconds() - cpu_before;
            busy += elapsed;
            tally.add(
                match result {
                    Ok(m) => Outcome::Done(m.size),
                    Err(e) => Outcome::Failed(e.to_string()),
                },
                elapsed,
            );
            if i % 2 == 1 {
                written_before = self.dd_write(&mut dd, written_before).await;
            }
            progress.inc(1);
        }
        progress.finish();
        let disk = written_before
            .zip(process_write_bytes())
            .map(|(before, after)| after.saturating_sub(before));
        let mut report = tally.report(
            "large_write",
            format!(
                "{} puts of {} MiB, one at a time",
                plan.count,
                plan.large_bytes >> 20
            ),
            busy.as_secs_f64(),
            false,
        );
        let mut details =
            json!({ "cpu_seconds": cpu, "cpu_seconds_per_gib": per_gib(cpu, report.bytes) });
        if let Some(bytes) = disk {
            details["disk_write_bytes"] = bytes.into();
        }
        dd.into_details("dd_write", &mut details);
        report.details = Some(details);
        report
    }

    /// One dd-pattern write beside the large puts, if the run has the file, added to `dd`. Returns
    /// `written_before` (the process's disk bytes when the phase started) moved up by what it wrote, so that the
    /// puts' disk bytes leave it out.
    async fn dd_write(&self, dd: &mut DdTally, written_before: Option<u64>) -> Option<u64> {
        let Some(file) = self.dd_writes.as_ref().map(Arc::clone) else {
            return written_before;
        };
        let before = process_write_bytes();
        dd.add(Some(
            blocking_dd(move || {
                file.lock()
                    .map_err(|_| saltblob::Error::internal("dd writes", "a write panicked"))?
                    .write()
            })
            .await,
        ));
        let dd_bytes = before
            .zip(process_write_bytes())
            .map(|(before, after)| after.saturating_sub(before));
        written_before
            .zip(dd_bytes)
            .map(|(total, dd_bytes)| total + dd_bytes)
    }

    pub(crate) async fn large_read(&self) -> PhaseReport {
        let plan = &self.load.plan;
        let mut progress = Progress::new("large_read", plan.count, "blobs", self.load.quiet);
        let mut tally = Tally::default();
        let mut busy = Duration::ZERO;
        let mut cpu = 0.0;
        // dd's reads of as many bytes, beside the gets: before the even ones and after the odd ones, so that
        // neither side always meets the device just after the other.
        let mut dd = DdTally::default();
        for i in 0..plan.count {
            if i % 2 == 0 {
                dd.add(self.dd_read(i).await);
            }
            let (t, cpu_before) = (Instant::now(), process_cpu_seconds());
            let result = self.stream_get(self.key("large", i)).await;
            let elapsed = t.elapsed();
            cpu += process_cpu_seconds() - cpu_before;
            busy += elapsed;
            let outcome = match result {
                Ok((read, head)) => {
                    check_head(read, &head, plan.large_bytes, self.load.tag, TAG_LARGE, i)
                }
                Err(e) => Outcome::Failed(e.to_string()),
            };
            tally.add(outcome, elapsed);
            if i % 2 == 1 {
                dd.add(self.dd_read(i).await);
            }
            progress.inc(1);
        }
        progress.finish();
        let mut report = tally.report(
            "large_read",
            format!(
                "{} gets of {} MiB, one at a time, streamed as `saltblob get` and the S3 server read, BLAKE3 \
                 digest verified",
                plan.count,
                plan.large_bytes >> 20
            ),
            busy.as_secs_f64(),
            true,
        );
        let mut details =
            json!({ "cpu_seconds": cpu, "cpu_seconds_per_gib": per_gib(cpu, report.bytes) });
        dd.into_details("dd_read", &mut details);
        report.details = Some(details);
        report
    }

    /// Reads `key` whole as a stream (the store checks every chunk and the digest), as `saltblob get` and the
    /// S3 server do, holding no more than its read-ahead: the bytes read and the first [`HEAD_LEN`] of them.
    /// (Collecting a large value into one fresh buffer would time the first touch of that memory too: up to
    /// 0.6 s for 60 MiB on virtual machines that hand freed memory to the host; docs/bench/journal/extents.md.)
    async fn stream_get(&self, key: String) -> saltblob::Result<(u64, Vec<u8>)> {
        let mut stream = self.store.get_stream(key).await?;
        let (mut read, mut head) = (0u64, Vec::with_capacity(HEAD_LEN));
        while let Some(piece) = stream.next().await {
            let piece = piece?;
            let wanted = HEAD_LEN.saturating_sub(head.len()).min(piece.len());
            head.extend_from_slice(&piece[..wanted]);
            read += piece.len() as u64;
        }
        Ok((read, head))
    }

    /// One dd-pattern read of segment `i` of the bench's own file, if the run has one.
    async fn dd_read(&self, i: u64) -> Option<Result<DdTimed>> {
        let dd = Arc::clone(self.dd_reads.as_ref()?);
        Some(
            blocking_dd(move || {
                dd.lock()
                    .map_err(|_| saltblob::Error::internal("dd reads", "a read panicked"))?
                    .read(i)
            })
            .await,
        )
    }

    /// The small puts; with `twin` (the sealed run), interleaved with the twin's own (one on each side in turn,
    /// the same number, one load of twice the operations), so that both meet the same state of the store. Returns
    /// this run's report, then the twin's. Each side's throughput is its share of the interleaved run.
    pub(crate) async fn small_write(&self, twin: Option<&Run>) -> Result<Vec<PhaseReport>> {
        self.small_phase("small_write", "puts", false, twin, move |run: &Side, i| {
            let (store, data) = (
                run.store.clone(),
                stamped(&run.small_base, run.tag, TAG_SMALL, i),
            );
            let key = format!("{}small/{i:07}", run.prefix);
            async move {
                match store.put(key, data, &PutOptions::new()).await {
                    Ok(m) => Outcome::Done(m.size),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
        })
        .await
    }

    /// The small gets (each checked), paired with `twin`'s as [`Run::small_write`] pairs the puts.
    pub(crate) async fn small_read(&self, twin: Option<&Run>) -> Result<Vec<PhaseReport>> {
        let len = self.load.plan.small_bytes;
        self.small_phase("small_read", "gets", true, twin, move |run: &Side, i| {
            let (store, tag) = (run.store.clone(), run.tag);
            let key = format!("{}small/{i:07}", run.prefix);
            async move {
                match store.get(key).await {
                    Ok(got) => check(&got, len, tag, TAG_SMALL, i),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
        })
        .await
    }

    /// Phase `name` of `op(side, i)` (`what`: "puts", "gets"; `read`: gets, whose digests are verified) on each
    /// small blob `i` of this run and, paired, of `twin`: a report per side.
    async fn small_phase<F, Fut>(
        &self,
        name: &str,
        what: &str,
        read: bool,
        twin: Option<&Run>,
        op: F,
    ) -> Result<Vec<PhaseReport>>
    where
        F: Fn(&Side, u64) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let progress = Progress::new(name, self.paired_count(twin), "blobs", self.load.quiet);
        let (tallies, seconds) = self.run_paired(twin, &progress, op).await?;
        progress.finish();
        let description = format!(
            "{} {what} of {} KiB, {} in flight{}{}",
            self.load.plan.small_count,
            self.load.plan.small_bytes >> 10,
            self.load.concurrency,
            if read { ", BLAKE3 digest verified" } else { "" },
            paired_note(twin)
        );
        Ok(tallies
            .into_iter()
            .take(sides(twin))
            .map(|t| t.report(name, description.clone(), seconds, read))
            .collect())
    }

    /// The operations of a small phase, on both sides when paired.
    fn paired_count(&self, twin: Option<&Run>) -> u64 {
        self.load.plan.small_count * sides(twin) as u64
    }

    /// Runs `op(run, i)` for every small blob `i` of this run and, when given, of `twin`, alternating between
    /// them, with the run's concurrency; a tally per side.
    async fn run_paired<F, Fut>(
        &self,
        twin: Option<&Run>,
        progress: &Progress,
        op: F,
    ) -> Result<([Tally; 2], f64)>
    where
        F: Fn(&Side, u64) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let sides: Vec<Side> = std::iter::once(self)
            .chain(twin)
            .map(|r| Side {
                store: r.store.clone(),
                prefix: r.load.prefix.clone(),
                tag: r.load.tag,
                small_base: r.load.small_base.clone(),
            })
            .collect();
        let n = sides.len() as u64;
        run_concurrent_pair(
            self.load.concurrency,
            self.load.plan.small_count * n,
            progress,
            move |i| {
                let side = usize::try_from(i % n).unwrap_or(0);
                (side, op(&sides[side], i / n))
            },
        )
        .await
    }

    /// Each large blob as one value. Through saltblob (one chunk of the blob's size, one salt) when the
    /// backend's largest chunk allows; otherwise as one raw value written straight to the backend (the
    /// article's one-CQL-row baseline), so that the server itself accepts or refuses it. Returns the raw values
    /// written, for the clean-up.
    pub(crate) async fn unchunked(
        &self,
        largest_chunk: u64,
    ) -> (PhaseReport, PhaseReport, Vec<BlobRef>) {
        let plan = &self.load.plan;
        let size = plan.large_bytes;
        let through_saltblob = size <= largest_chunk && size >= u64::from(MIN_CHUNK_SIZE);
        let mut raw = Vec::new();
        let mut write = Tally::default();
        let mut read = Tally::default();
        let (mut write_busy, mut read_busy) = (Duration::ZERO, Duration::ZERO);
        let mut progress = Progress::new("unchunked_write", plan.count, "blobs", self.load.quiet);
        for i in 0..plan.count {
            let data = stamped(&self.load.large_base, self.load.tag, TAG_UNCHUNKED, i);
            let key = self.key("unchunked", i);
            let t = Instant::now();
            let outcome = if through_saltblob {
                let opts = PutOptions::new()
                    .with_chunk_size(u32::try_from(size).unwrap_or(u32::MAX))
                    .with_max_salt(1);
                match self.store.put(&key, data, &opts).await {
                    Ok(m) => Outcome::Done(m.size),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            } else {
                let blob = BlobRef {
                    key: Bytes::from(key),
                    version: VersionId::generate(),
                };
                let one = ChunkWrite {
                    salt: 0,
                    index: 0,
                    data,
                };
                raw.push(blob.clone());
                match self.backend.put_chunks(&blob, vec![one]).await {
                    Ok(()) => Outcome::Done(size),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            };
            let elapsed = t.elapsed();
            write_busy += elapsed;
            write.add(outcome, elapsed);
            progress.inc(1);
        }
        progress.finish();

        let mut progress = Progress::new("unchunked_read", plan.count, "blobs", self.load.quiet);
        for i in 0..plan.count {
            let key = self.key("unchunked", i);
            let t = Instant::now();
            let outcome = if through_saltblob {
                match self.store.get(&key).await {
                    Ok(got) => check(&got, size, self.load.tag, TAG_UNCHUNKED, i),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            } else {
                let Some(blob) = usize::try_from(i).ok().and_then(|i| raw.get(i)) else {
                    continue;
                };
                match self
                    .backend
                    .get_chunks(blob, &[ChunkId { salt: 0, index: 0 }])
                    .await
                {
                    Ok(slots) => match slots.into_iter().next().flatten() {
                        Some(got) => check(&got, size, self.load.tag, TAG_UNCHUNKED, i),
                        None => Outcome::Failed(
                            "not found (the write of this value did not succeed)".to_owned(),
                        ),
                    },
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            };
            let elapsed = t.elapsed();
            read_busy += elapsed;
            read.add(outcome, elapsed);
            progress.inc(1);
        }
        progress.finish();

        let mib = size >> 20;
        let (mode, how) = if through_saltblob {
            (
                "saltblob_single_chunk",
                format!("through saltblob as one {mib} MiB chunk in one salt"),
            )
        } else {
            (
                "raw_single_value",
                format!(
                    "{mib} MiB is over the {} backend's largest chunk ({largest_chunk} bytes): written as one raw \
                     value straight to the backend, as the article's one-row baseline, so the server decides",
                    self.info.name
                ),
            )
        };
        let details = json!({
            "mode": mode,
            "value_bytes": size,
            "largest_chunk_bytes": largest_chunk,
            "how": how,
        });
        let mut w = write.report(
            "unchunked_write",
            format!(
                "{} puts of {mib} MiB as ONE value each, one at a time",
                plan.count
            ),
            write_busy.as_secs_f64(),
            false,
        );
        let mut r = read.report(
            "unchunked_read",
            format!(
                "{} gets of {mib} MiB stored as ONE value each, one at a time",
                plan.count
            ),
            read_busy.as_secs_f64(),
            true,
        );
        w.details = Some(details.clone());
        r.details = Some(details);
        (w, r, raw)
    }

    /// Deletes every key under the run's prefix and the raw values, then reclaims their chunks (grace 0).
    pub(crate) async fn cleanup(&self, raw: &[BlobRef]) -> Cleanup {
        let mut out = Cleanup::default();
        let progress = Progress::timed("clean-up", None, self.load.quiet);
        // Deleting behind the listing's cursor skips nothing: each page starts after the last key read.
        let mut deletes = self
            .store
            .list_stream(self.load.prefix.as_bytes())
            .map(|entry| {
                let store = self.store.clone();
                async move {
                    let entry =
                        entry.map_err(|e| format!("listing the bench's keys failed: {e}"))?;
                    store
                        .delete(&entry.key)
                        .await
                        .map_err(|e| format!("delete failed: {e}"))
                }
            })
            .buffer_unordered(self.load.concurrency);
        while let Some(deleted) = deletes.next().await {
            match deleted {
                Ok(_) => {
                    out.deleted_keys += 1;
                    progress.handle().inc(1);
                }
                Err(problem) => {
                    out.problems.push(problem);
                    break;
                }
            }
        }
        drop(deletes);
        for blob in raw {
            match self.backend.delete_chunks(blob, 1, 1).await {
                Ok(()) => out.deleted_raw_values += 1,
                Err(e) => out
                    .problems
                    .push(format!("deleting a raw value failed: {e}")),
            }
        }
        match self.store.reclaim_due().await {
            Ok(r) => out.reclaimed_chunks = r.chunks,
            Err(e) => out
                .problems
                .push(format!("reclaim failed (the next command retries): {e}")),
        }
        progress.finish();
        out
    }
}

/// Runs one of dd's patterns (`dd`, blocking) off the async runtime.
async fn blocking_dd(dd: impl FnOnce() -> Result<DdTimed> + Send + 'static) -> Result<DdTimed> {
    tokio::task::spawn_blocking(dd)
        .await
        .map_err(|e| saltblob::Error::internal("dd task", e))
        .and_then(|r| r)
}

/// dd's pattern beside a large phase: its bytes, the time of its requests and of its `fdatasync`s (writes), or
/// the first error.
#[derive(Default)]
struct DdTally {
    bytes: u64,
    io: Duration,
    sync: Duration,
    error: Option<String>,
}

impl DdTally {
    fn add(&mut self, done: Option<Result<DdTimed>>) {
        match done {
            Some(Ok(timed)) => {
                self.bytes += timed.bytes;
                self.io += timed.io;
                self.sync += timed.sync;
            }
            Some(Err(e)) => {
                self.error.get_or_insert_with(|| e.to_string());
            }
            None => {}
        }
    }

    /// Adds `{prefix}_mib_s` (what `large_read_vs_dd` and `large_write_vs_dd_beside` divide by) with its bytes
    /// and seconds to `details` and, when it synced, `{prefix}_sync_seconds` and `{prefix}_durable_mib_s` (what
    /// `large_write_vs_durable_dd_beside` divides by); or `{prefix}_error`.
    fn into_details(self, prefix: &str, details: &mut serde_json::Value) {
        let key = |name: &str| format!("{prefix}_{name}");
        if let Some(e) = self.error {
            details[key("error")] = e.into();
        } else if self.bytes > 0 && !self.io.is_zero() {
            let (io, sync) = (self.io.as_secs_f64(), self.sync.as_secs_f64());
            let mib = self.bytes as f64 / MIB;
            details[key("bytes")] = self.bytes.into();
            details[key("seconds")] = io.into();
            details[key("mib_s")] = (mib / io).into();
            if sync > 0.0 {
                details[key("sync_seconds")] = sync.into();
                details[key("durable_mib_s")] = (mib / (io + sync)).into();
            }
        }
    }
}

/// CPU seconds per GiB of `bytes` (`None` when nothing was moved).
fn per_gib(cpu_seconds: f64, bytes: u64) -> Option<f64> {
    (bytes > 0).then(|| cpu_seconds / (bytes as f64 / (1u64 << 30) as f64))
}

/// Bytes this process (all its threads: the engine's flushes and compactions too) caused to be written to
/// storage so far (`write_bytes` of `/proc/self/io`); `None` where the kernel does not report it.
pub(crate) fn process_write_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/io")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// The sides of a small phase: this run, and `twin` when given.
fn sides(twin: Option<&Run>) -> usize {
    1 + usize::from(twin.is_some())
}

/// What an operation of a small phase needs of its run.
struct Side {
    store: BlobStore,
    prefix: String,
    tag: u64,
    small_base: Bytes,
}

/// What a paired phase's description adds.
fn paired_note(twin: Option<&Run>) -> &'static str {
    if twin.is_some() {
        ", interleaved one for one with the sealed twin's"
    } else {
        ""
    }
}
