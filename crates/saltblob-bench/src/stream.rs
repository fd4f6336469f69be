//! The memory of a streaming put, measured the way a user runs it: `saltblob put KEY -` in a child process (the
//! running `saltblob` binary), fed `--stream-mb` MiB on its standard input, which reports its peak resident
//! memory (`SALTBLOB_REPORT_PEAK_RSS`). An embedded store is open in the bench's own process, so the child writes
//! to a fresh store beside it (same file system), removed afterwards; any other store is shared, and the child's
//! key lies under the bench's prefix, which the clean-up deletes.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::payload::Outcome;
use crate::stats::{PhaseReport, Tally};

/// Name of the phase.
pub(crate) const STREAM_PUT: &str = "stream_put";
/// Bytes written to the child at a time.
const BLOCK: usize = 1 << 20;

/// Streams `mib` MiB through `saltblob put KEY -` against `url` (the embedded store's sibling when `url` is
/// one), as key `key`; the phase's details hold the child's peak RSS.
pub(crate) fn stream_put(url: &str, key: &str, mib: u64, run_id: &str) -> PhaseReport {
    let mut tally = Tally::default();
    let (outcome, seconds, details) = match run_child(url, key, mib, run_id) {
        Ok((seconds, rss_kib, child_url)) => (
            Outcome::Done(mib << 20),
            seconds,
            json!({ "peak_rss_mib": rss_kib as f64 / 1024.0, "store": saltblob::redact_url(&child_url) }),
        ),
        Err(e) => (Outcome::Failed(e), 0.0, serde_json::Value::Null),
    };
    tally.add(outcome, Duration::from_secs_f64(seconds));
    let mut report = tally.report(
        STREAM_PUT,
        format!("`saltblob put KEY -` of {mib} MiB from standard input, in a child process"),
        seconds,
        false,
    );
    report.details = (!details.is_null()).then_some(details);
    report
}

/// The child's store: a fresh directory beside an embedded store (created here), else `url` itself.
fn child_store(url: &str, run_id: &str) -> Result<(String, Option<PathBuf>), String> {
    let Some(rest) = url.strip_prefix("rocksdb://") else {
        return Ok((url.to_owned(), None));
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let dir = PathBuf::from(format!("{}.stream-{run_id}", path.trim_end_matches('/')));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    Ok((format!("rocksdb://{}{query}", dir.display()), Some(dir)))
}

/// Runs the child; returns its wall time, its peak RSS in KiB and the URL it wrote to.
fn run_child(url: &str, key: &str, mib: u64, run_id: &str) -> Result<(f64, u64, String), String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the saltblob binary: {e}"))?;
    let (child_url, made) = child_store(url, run_id)?;
    let outcome = (|| {
        let started = Instant::now();
        let mut child = Command::new(&exe)
            .args(["--store", &child_url, "--quiet", "put", key, "-"])
            .env("SALTBLOB_REPORT_PEAK_RSS", "1")
            .env_remove("SALTBLOB_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        let fed = child.stdin.take().map(|mut stdin| {
            std::thread::spawn(move || {
                let mut block = vec![0u8; BLOCK];
                let mut state = 0x9e37_79b9_7f4a_7c15_u64;
                for _ in 0..mib {
                    for word in block.chunks_exact_mut(8) {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        word.copy_from_slice(&state.to_le_bytes());
                    }
                    if stdin.write_all(&block).is_err() {
                        return;
                    }
                }
            })
        });
        let out = child
            .wait_with_output()
            .map_err(|e| format!("cannot wait for the child: {e}"))?;
        if let Some(feeder) = fed {
            let _ = feeder.join();
        }
        let seconds = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!("`saltblob put -` failed: {}", stderr.trim()));
        }
        let kib = stderr
            .lines()
            .find_map(|l| l.strip_prefix("peak_rss_kib="))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| format!("the child reported no peak RSS: {}", stderr.trim()))?;
        Ok((seconds, kib, child_url.clone()))
    })();
    if let Some(dir) = made {
        let _ = std::fs::remove_dir_all(&dir);
    }
    outcome
}
