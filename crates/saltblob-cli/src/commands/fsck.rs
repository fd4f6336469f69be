//! `saltblob fsck`: checks every blob and lists orphaned chunks; reports in text (default) or JSON.

use std::path::Path;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, FsckOptions, FsckReport, OrphanReason};
use serde_json::json;

use super::command::{Command, Context, nothing_to_do};
use crate::failure::Failure;
use crate::human::{self, short};

/// Arguments of `saltblob fsck`.
#[derive(clap::Args, Debug)]
pub struct Fsck {
    /// Remove orphaned chunks (and nothing else).
    #[arg(long)]
    repair: bool,
    /// With --repair, leave orphans younger than this (by version time). Defaults to the store's grace period.
    #[arg(long, value_name = "DURATION", value_parser = crate::human::parse_duration)]
    min_age: Option<Duration>,
    /// Only check keys starting with PREFIX.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Command for Fsck {
    /// A store that does not exist holds nothing to check: said on stderr, success.
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        nothing_to_do(dir);
        Ok(())
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move { self.fsck(&context.open().await?).await })
    }
}

impl Fsck {
    /// Checks (and with `--repair` removes orphans); fails with exit code 4 when a blob is damaged.
    async fn fsck(&self, store: &BlobStore) -> Result<(), Failure> {
        let mut opts = FsckOptions::new().with_repair(self.repair);
        if let Some(age) = self.min_age {
            opts = opts.with_min_age(age);
        }
        if let Some(p) = &self.prefix {
            opts = opts.with_prefix(p.clone().into_bytes());
        }
        let r = store.fsck(&opts).await?;
        if self.json {
            println!("{}", fsck_json(&r));
        } else {
            print_fsck(&r, self.repair);
        }
        if r.damaged.is_empty() {
            return Ok(());
        }
        let unindexed = r
            .index
            .as_ref()
            .map_or(0, |i| if i.restored == 0 { i.missing.len() } else { 0 });
        let message = if unindexed == r.damaged.len() {
            format!(
                "{unindexed} blob(s) missing from the listing index (listed above); fsck --repair writes them back"
            )
        } else {
            format!(
                "{} damaged blob(s) (listed above); fsck --repair does not touch them, only the {unindexed} \
                 missing from the listing index",
                r.damaged.len()
            )
        };
        Err(Failure::new(Failure::DAMAGED, message))
    }
}

fn reason(r: OrphanReason) -> &'static str {
    match r {
        OrphanReason::Abandoned => "abandoned put",
        OrphanReason::Unreferenced => "unreferenced",
    }
}

fn fsck_json(r: &FsckReport) -> serde_json::Value {
    let damaged: Vec<_> = r
        .damaged
        .iter()
        .map(|d| {
            json!({"key": human::escape_key(&d.key), "version": d.version.map(|v| v.to_string()),
                   "problem": d.problem})
        })
        .collect();
    let orphans: Vec<_> = r
        .orphans
        .iter()
        .map(|o| {
            json!({"key": human::escape_key(&o.key), "version": o.version.to_string(),
                   "chunks": o.chunks, "files": o.files, "reason": reason(o.reason),
                   "removed": o.removed})
        })
        .collect();
    json!({
        "blobs": r.blobs,
        "bytes": r.bytes,
        "chunks": r.chunks,
        "version_files": r.version_files,
        "damaged": damaged,
        "orphans": orphans,
        "orphans_left": r.orphans_left(),
        "puts_in_flight": r.puts_in_flight,
        "awaiting_reclaim": r.awaiting_reclaim,
        "unverified": r.unverified.iter().map(|u| json!({
            "key": human::escape_key(&u.key), "version": u.version.to_string(), "reason": u.reason,
        })).collect::<Vec<_>>(),
        "index": r.index.as_ref().map(|i| json!({
            "name": i.name, "manifests": i.manifests, "entries": i.entries,
            "missing": i.missing.iter().map(|k| human::escape_key(k)).collect::<Vec<_>>(),
            "restored": i.restored, "stale": i.stale, "stale_removed": i.stale_removed,
        })),
    })
}

fn print_fsck(r: &FsckReport, repair: bool) {
    for d in &r.damaged {
        let version = d.version.map_or_else(|| "?".to_owned(), |v| v.to_string());
        println!(
            "DAMAGED {} version {version}: {}",
            human::escape_key(&d.key),
            d.problem
        );
    }
    for o in &r.orphans {
        let files = match o.files {
            0 => String::new(),
            1 => ", its extent file".to_owned(),
            n => format!(", {n} extent files"),
        };
        println!(
            "ORPHAN {} version {}: {} chunk(s){files}, {}{}",
            human::escape_key(&o.key),
            o.version,
            o.chunks,
            reason(o.reason),
            if o.removed { " (removed)" } else { "" }
        );
    }
    println!(
        "fsck: {} blob(s) checked, {} read and verified, {} chunk(s) and {} extent file(s) listed",
        r.blobs,
        short(r.bytes),
        r.chunks,
        r.version_files
    );
    let removed = r.orphans.len() - r.orphans_left();
    println!(
        "fsck: damaged {}, orphan versions {} (removed {removed}), puts in flight {}, awaiting reclaim {}",
        r.damaged.len(),
        r.orphans.len(),
        r.puts_in_flight,
        r.awaiting_reclaim
    );
    if let Some(i) = &r.index {
        println!(
            "fsck: {}: {} manifest(s) looked up, {} entr(ies) read; missing {} (restored {}), stale {} (removed {})",
            i.name,
            i.manifests,
            i.entries,
            i.missing.len(),
            i.restored,
            i.stale,
            i.stale_removed
        );
    }
    if let Some(first) = r.unverified.first() {
        println!(
            "fsck: {} sealed blob(s) not verified, their key unavailable (first: {} version {}: {}); open the \
             store with its key provider to verify them",
            r.unverified.len(),
            human::escape_key(&first.key),
            first.version,
            first.reason
        );
    }
    if r.orphans_left() > 0 {
        println!(
            "fsck: {}",
            if repair {
                "orphans younger than --min-age were left alone"
            } else {
                "remove orphans with `saltblob gc` (abandoned puts) or `saltblob fsck --repair`"
            }
        );
    }
}
