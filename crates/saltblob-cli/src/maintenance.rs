//! `saltblob gc` and `saltblob fsck`: reports in text (default) or JSON.

use std::time::Duration;

use saltblob::{BlobStore, FsckOptions, FsckReport, GcOptions, GcReport, OrphanReason};
use serde_json::json;

use crate::Failure;
use crate::human::short;

/// Options of `saltblob gc`.
#[derive(clap::Args, Debug)]
pub struct GcArgs {
    /// Report what would be reclaimed; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Reclaim replaced and deleted versions older than this (e.g. 0s, 90s, 10m). Defaults to the store's grace
    /// period (5 minutes); 0s reclaims them at once, failing readers still streaming them.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    grace: Option<Duration>,
    /// Only collect keys starting with PREFIX.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// Keep running, one pass every DURATION (e.g. 1m), until interrupted.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    every: Option<Duration>,
    /// Print JSON (one object per pass).
    #[arg(long)]
    json: bool,
}

/// Options of `saltblob fsck`.
#[derive(clap::Args, Debug)]
pub struct FsckArgs {
    /// Remove orphaned chunks (and nothing else).
    #[arg(long)]
    repair: bool,
    /// With --repair, leave orphans younger than this (by version time). Defaults to the store's grace period.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    min_age: Option<Duration>,
    /// Only check keys starting with PREFIX.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `gc`: one pass, or one every `--every` until interrupted.
pub async fn gc(store: &BlobStore, args: &GcArgs) -> Result<(), Failure> {
    let mut opts = GcOptions::new().with_dry_run(args.dry_run);
    if let Some(g) = args.grace {
        opts = opts.with_grace(g);
    }
    if let Some(p) = &args.prefix {
        opts = opts.with_prefix(p.clone().into_bytes());
    }
    let Some(every) = args.every else {
        let report = store.gc(&opts).await?;
        print_gc(&report, args.json);
        return Ok(());
    };
    if every.is_zero() {
        return Err(crate::usage(
            "invalid --every: 0s; give an interval such as 1m",
        ));
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        match store.gc(&opts).await {
            Ok(report) => print_gc(&report, args.json),
            Err(e) => eprintln!("saltblob: warning: gc pass failed (will retry): {e}"),
        }
    }
}

fn print_gc(r: &GcReport, as_json: bool) {
    if as_json {
        let space = r.space.map(|s| {
            json!({"bytes_before": s.bytes_before, "bytes_after": s.bytes_after,
                   "rewrote_live_data": s.rewrote_live_data})
        });
        let v = json!({
            "dry_run": r.dry_run,
            "puts_in_flight": r.puts_in_flight,
            "stale_intents": r.stale_intents,
            "abandoned_puts": r.abandoned_puts,
            "abandoned_chunks": r.abandoned_chunks,
            "reclaimed_versions": r.reclaim.versions,
            "reclaimed_chunks": r.reclaim.chunks,
            "reclaimed_bytes": r.reclaim.bytes,
            "still_current": r.reclaim.still_current,
            "awaiting_commit": r.reclaim.awaiting_commit,
            "in_flight_skipped": r.reclaim.in_flight,
            "undecodable_entries": r.reclaim.undecodable,
            "next_due_micros": r.reclaim.next_due_micros,
            "space": space,
        });
        println!("{v}");
        return;
    }
    let (verb, tag) = if r.dry_run {
        ("would reclaim", "gc (dry run)")
    } else {
        ("reclaimed", "gc")
    };
    println!(
        "{tag}: {verb} {} version(s), {} chunk(s), {}",
        r.reclaim.versions,
        r.reclaim.chunks,
        short(r.reclaim.bytes)
    );
    println!(
        "{tag}: abandoned puts {} (at least {} chunk(s), counted at their last lease renewal), puts in flight {}, stale intents {}",
        r.abandoned_puts, r.abandoned_chunks, r.puts_in_flight, r.stale_intents
    );
    if let Some(due) = r.reclaim.next_due_micros {
        let wait = Duration::from_micros(due.saturating_sub(saltblob::version::now_micros()));
        println!(
            "{tag}: more versions wait for their grace period; the next is due in {}",
            humantime::format_duration(Duration::from_secs(wait.as_secs()))
        );
    }
    if r.reclaim.undecodable > 0 {
        println!(
            "{tag}: warning: {} reclaim queue entries do not decode (left in place)",
            r.reclaim.undecodable
        );
    }
    if let Some(s) = r.space {
        println!(
            "{tag}: disk {} -> {}{}",
            short(s.bytes_before),
            short(s.bytes_after),
            if s.rewrote_live_data {
                " (live chunks rewritten out of partly-garbage files)"
            } else {
                ""
            }
        );
    }
}

/// Runs `fsck`; fails with exit code 4 when a blob is damaged.
pub async fn fsck(store: &BlobStore, args: &FsckArgs) -> Result<(), Failure> {
    let mut opts = FsckOptions::new().with_repair(args.repair);
    if let Some(age) = args.min_age {
        opts = opts.with_min_age(age);
    }
    if let Some(p) = &args.prefix {
        opts = opts.with_prefix(p.clone().into_bytes());
    }
    let r = store.fsck(&opts).await?;
    if args.json {
        println!("{}", fsck_json(&r));
    } else {
        print_fsck(&r, args.repair);
    }
    if r.damaged.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            message: format!(
                "{} damaged blob(s) (listed above); fsck --repair does not touch them",
                r.damaged.len()
            ),
            code: 4,
        })
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
            json!({"key": String::from_utf8_lossy(&d.key), "version": d.version.map(|v| v.to_string()),
                   "problem": d.problem})
        })
        .collect();
    let orphans: Vec<_> = r
        .orphans
        .iter()
        .map(|o| {
            json!({"key": String::from_utf8_lossy(&o.key), "version": o.version.to_string(),
                   "chunks": o.chunks, "reason": reason(o.reason), "removed": o.removed})
        })
        .collect();
    json!({
        "blobs": r.blobs,
        "bytes": r.bytes,
        "chunks": r.chunks,
        "damaged": damaged,
        "orphans": orphans,
        "orphans_left": r.orphans_left(),
        "puts_in_flight": r.puts_in_flight,
        "awaiting_reclaim": r.awaiting_reclaim,
    })
}

fn print_fsck(r: &FsckReport, repair: bool) {
    for d in &r.damaged {
        let version = d.version.map_or_else(|| "?".to_owned(), |v| v.to_string());
        println!(
            "DAMAGED {} version {version}: {}",
            String::from_utf8_lossy(&d.key),
            d.problem
        );
    }
    for o in &r.orphans {
        println!(
            "ORPHAN {} version {}: {} chunk(s), {}{}",
            String::from_utf8_lossy(&o.key),
            o.version,
            o.chunks,
            reason(o.reason),
            if o.removed { " (removed)" } else { "" }
        );
    }
    println!(
        "fsck: {} blob(s) checked, {} read and verified, {} chunk(s) listed",
        r.blobs,
        short(r.bytes),
        r.chunks
    );
    let removed = r.orphans.len() - r.orphans_left();
    println!(
        "fsck: damaged {}, orphan versions {} (removed {removed}), puts in flight {}, awaiting reclaim {}",
        r.damaged.len(),
        r.orphans.len(),
        r.puts_in_flight,
        r.awaiting_reclaim
    );
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
