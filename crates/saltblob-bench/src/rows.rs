//! The single-row reference of any store that is not a local directory (a cluster): single-row writes and
//! reads of chunk-size values through the backend ([`saltblob::ChunkStore::put_chunks`] of one chunk on a
//! scratch key) at the bench concurrency, then deleted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use saltblob::{BlobRef, ChunkId, ChunkStore, ChunkWrite, Error, Result, VersionId};
use serde::Serialize;

use crate::args::Settings;
use crate::progress::Progress;
use crate::stats::{PhaseReport, Tally};

/// Partitions the single-row probe spreads its rows over.
const ROW_SALTS: u32 = 64;

/// Single-row results through a backend.
#[derive(Clone, Debug, Serialize)]
pub struct RowsProbe {
    /// The backend's name.
    pub backend: &'static str,
    /// Bytes per row (the chunk size).
    pub value_bytes: u64,
    /// Rows in flight.
    pub concurrency: usize,
    /// Single-row writes.
    pub write: PhaseReport,
    /// Single-row reads of what was written, each compared with what was written.
    pub read: PhaseReport,
    /// Write throughput, MiB/s: the reference write bandwidth.
    pub write_mib_s: f64,
    /// Read throughput, MiB/s: the reference read bandwidth.
    pub read_mib_s: f64,
}

/// Single-chunk writes, then reads, of `value_bytes` on a scratch blob, `concurrency` at once; then deletes them.
pub(crate) async fn rows_probe(
    backend: Arc<dyn ChunkStore>,
    settings: &Settings,
) -> Result<RowsProbe> {
    let info = backend.info();
    let limit = settings.point_limit()?;
    let value_bytes = settings.value_bytes;
    if value_bytes == 0 || value_bytes > u64::from(info.max_chunk_bytes) {
        return Err(Error::invalid(
            "probe value size",
            format!(
                "{value_bytes} bytes; the {} backend takes 1 to {} bytes per chunk",
                info.name, info.max_chunk_bytes
            ),
        ));
    }
    let concurrency = settings.concurrency.max(1);
    let max_rows = (settings.options.probe_size / value_bytes).max(1);
    let mut data = vec![0u8; usize::try_from(value_bytes).unwrap_or(0)];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut data);
    let data = Bytes::from(data);
    let blob = BlobRef {
        key: Bytes::from(format!("saltblob-bench/probe/{}", VersionId::generate())),
        version: VersionId::generate(),
    };
    let salt = |i: u64| u32::try_from(i % u64::from(ROW_SALTS)).unwrap_or(0);

    // Writes.
    let progress = Progress::new("probe write", max_rows, "rows", settings.quiet);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (backend, blob, data, next, bar) = (
            Arc::clone(&backend),
            blob.clone(),
            data.clone(),
            Arc::clone(&next),
            progress.handle(),
        );
        tasks.spawn(async move {
            let mut tally = Tally::default();
            let mut written = Vec::new();
            while started.elapsed() < limit {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= max_rows {
                    break;
                }
                let write = ChunkWrite {
                    salt: salt(i),
                    index: i,
                    data: data.clone(),
                };
                let t = Instant::now();
                match backend.put_chunks(&blob, vec![write]).await {
                    Ok(()) => {
                        tally.ok(t.elapsed(), data.len() as u64);
                        written.push(i);
                    }
                    Err(e) => tally.fail(e.to_string()),
                }
                bar.inc(1);
            }
            (tally, written)
        });
    }
    let mut write_tally = Tally::default();
    let mut written = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (t, w) =
            done.map_err(|e| Error::backend("probe", format!("task failed: {e}"), false))?;
        write_tally.merge(&t);
        written.extend(w);
    }
    let write_seconds = started.elapsed().as_secs_f64();
    progress.finish();
    let claimed = next.load(Ordering::Relaxed).min(max_rows);
    written.sort_unstable();

    // Reads of what was written, in the same order.
    let written = Arc::new(written);
    let progress = Progress::new("probe read", written.len() as u64, "rows", settings.quiet);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    for _ in 0..concurrency {
        let (backend, blob, data, next, written, bar) = (
            Arc::clone(&backend),
            blob.clone(),
            data.clone(),
            Arc::clone(&next),
            Arc::clone(&written),
            progress.handle(),
        );
        tasks.spawn(async move {
            let mut tally = Tally::default();
            while started.elapsed() < limit {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = usize::try_from(n).ok().and_then(|n| written.get(n)) else {
                    break;
                };
                let id = ChunkId {
                    salt: salt(i),
                    index: i,
                };
                let t = Instant::now();
                match backend.get_chunks(&blob, &[id]).await {
                    Ok(slots) => {
                        let elapsed = t.elapsed();
                        match slots.first() {
                            Some(Some(got)) if *got == data => tally.ok(elapsed, got.len() as u64),
                            Some(Some(got)) => tally.unverified(format!(
                                "row {i} came back with {} bytes that differ from the {} written",
                                got.len(),
                                data.len()
                            )),
                            _ => tally.unverified(format!("row {i} was written but is missing")),
                        }
                    }
                    Err(e) => tally.fail(e.to_string()),
                }
                bar.inc(1);
            }
            (tally, Vec::new())
        });
    }
    let mut read_tally = Tally::default();
    while let Some(done) = tasks.join_next().await {
        let (t, _) =
            done.map_err(|e| Error::backend("probe", format!("task failed: {e}"), false))?;
        read_tally.merge(&t);
    }
    let read_seconds = started.elapsed().as_secs_f64();
    progress.finish();

    if let Err(e) = backend.delete_chunks(&blob, ROW_SALTS, claimed).await {
        eprintln!(
            "saltblob: warning: could not delete the probe's scratch rows (key {}): {e}",
            String::from_utf8_lossy(&blob.key)
        );
    }
    let describe = |what: &str| {
        format!(
            "single-row {what} of {value_bytes}-byte values through the {} backend, {concurrency} in flight",
            info.name
        )
    };
    let write = write_tally.report("probe_write", describe("writes"), write_seconds, false);
    let read = read_tally.report("probe_read", describe("reads"), read_seconds, true);
    Ok(RowsProbe {
        backend: info.name,
        value_bytes,
        concurrency,
        write_mib_s: write.throughput_mib_s,
        read_mib_s: read.throughput_mib_s,
        write,
        read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ProbeOptions;

    #[tokio::test]
    async fn the_row_probe_writes_reads_and_deletes() {
        let backend: Arc<dyn ChunkStore> = Arc::new(saltblob::MemoryStore::new());
        let settings = Settings {
            options: ProbeOptions {
                probe_size: 1 << 20,
                probe_seconds: 10.0,
            },
            concurrency: 4,
            value_bytes: 65536,
            quiet: true,
        };
        let r = rows_probe(Arc::clone(&backend), &settings)
            .await
            .expect("probes");
        assert_eq!((r.write.ops, r.read.ops), (16, 16));
        assert_eq!((r.write.errors, r.read.errors), (0, 0));
        assert_eq!(r.read.verified, Some(true));
    }
}
