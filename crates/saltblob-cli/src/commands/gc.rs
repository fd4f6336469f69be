//! `saltblob gc`: reclaims space, once or every `--every`; reports in text (default) or JSON.

use std::path::Path;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, GcOptions, GcReport};
use serde_json::json;

use super::command::{Command, Context, nothing_to_do};
use crate::failure::{Failure, one_line};
use crate::human::short;

/// Arguments of `saltblob gc`.
#[derive(clap::Args, Debug)]
pub struct Gc {
    /// Report what would be reclaimed; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Reclaim replaced and deleted versions older than this (e.g. 0s, 90s, 10m). Defaults to the store's grace
    /// period (5 minutes); 0s reclaims them at once, failing readers still streaming them.
    #[arg(long, value_name = "DURATION", value_parser = crate::human::parse_duration)]
    grace: Option<Duration>,
    /// Only collect keys starting with PREFIX.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<String>,
    /// Keep running, one pass every DURATION (e.g. 1m), until interrupted.
    #[arg(long, value_name = "DURATION", value_parser = crate::human::parse_duration)]
    every: Option<Duration>,
    /// Print JSON (one object per pass).
    #[arg(long)]
    json: bool,
}

impl Command for Gc {
    /// A store that does not exist holds nothing to reclaim: said on stderr, success.
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        nothing_to_do(dir);
        Ok(())
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move { self.gc(&context.open().await?).await })
    }
}

impl Gc {
    /// One pass, or one every `--every` until interrupted (a failed pass is then a warning).
    async fn gc(&self, store: &BlobStore) -> Result<(), Failure> {
        let mut opts = GcOptions::new().with_dry_run(self.dry_run);
        if let Some(g) = self.grace {
            opts = opts.with_grace(g);
        }
        if let Some(p) = &self.prefix {
            opts = opts.with_prefix(p.clone().into_bytes());
        }
        let Some(every) = self.every else {
            let report = store.gc(&opts).await?;
            print_gc(&report, self.json);
            return Ok(());
        };
        if every.is_zero() {
            return Err(Failure::usage(
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
                Ok(report) => print_gc(&report, self.json),
                Err(e) => eprintln!(
                    "saltblob: warning: gc pass failed (will retry): {}",
                    one_line(&e)
                ),
            }
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
            "expired": r.expired,
            "reclaimed_versions": r.reclaim.versions,
            "reclaimed_chunks": r.reclaim.chunks,
            "reclaimed_bytes": r.reclaim.bytes,
            "still_current": r.reclaim.still_current,
            "awaiting_commit": r.reclaim.awaiting_commit,
            "in_flight_skipped": r.reclaim.in_flight,
            "undecodable_entries": r.reclaim.undecodable,
            "removal_markers": r.reclaim.removal_markers,
            "next_due_micros": r.reclaim.next_due_micros,
            "shares_skipped": r.shares_skipped,
            "full_expiry_skipped": r.full_expiry_skipped,
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
    if r.expired > 0 {
        let did = if r.dry_run { "would delete" } else { "deleted" };
        println!(
            "{tag}: {did} {} expired blob(s) (their chunks go after the grace period)",
            r.expired
        );
    }
    if r.reclaim.removal_markers > 0 {
        println!(
            "{tag}: deleted {} removal marker(s) of kept versions",
            r.reclaim.removal_markers
        );
    }
    if r.shares_skipped > 0 {
        println!(
            "{tag}: {} of 16 shares of the intents and the reclaim queue were held by another gc runner (left to it)",
            r.shares_skipped
        );
    }
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
