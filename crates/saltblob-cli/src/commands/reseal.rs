//! `saltblob encrypt` and `saltblob rekey` (encryption at rest, `docs/format.md`): each walks the keys under a
//! prefix in order, with a progress spinner, acting on one blob at a time (a rewrite conditional on the version
//! read, or a compare-and-set of the manifest), and reports what it did by outcome; a run that stops says the
//! last key, to resume after with `--after`.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Manifest, PriorityClass, Rekeyed, Relaid};
use serde_json::json;

use super::census::emit;
use super::command::{Command, Context, nothing_to_do};
use super::put::parse_priority;
use crate::failure::Failure;
use crate::human::{self, KeyArg, parse_key};
use crate::progress::Progress;

/// Where a walk goes: the keys under `--prefix`, after `--after`.
#[derive(clap::Args, Debug)]
struct Walk {
    /// Only keys starting with PREFIX (%-escaped as keys are printed).
    #[arg(long, value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// Resume after KEY: the last key a previous run reported (blobs already done are skipped anyway).
    #[arg(long, value_parser = parse_key)]
    after: Option<KeyArg>,
    /// Print the report as JSON: {"scanned", "outcomes": {OUTCOME: N}, "damaged", "last_key"}.
    #[arg(long)]
    json: bool,
}

/// Arguments of `saltblob encrypt`.
#[derive(clap::Args, Debug)]
pub struct Encrypt {
    /// The key to seal the plaintext blobs under (a keyring name of the store's provider: the store URL must
    /// name one, `encryption=local&keyring=FILE`).
    #[arg(long, value_name = "NAME")]
    key: String,
    #[command(flatten)]
    walk: Walk,
    /// Priority class of the rewrites. Defaults to bulk.
    #[arg(long, value_name = "CLASS", value_parser = parse_priority)]
    priority: Option<PriorityClass>,
}

/// Arguments of `saltblob rekey`.
#[derive(clap::Args, Debug)]
pub struct Rekey {
    #[command(flatten)]
    walk: Walk,
}

impl Command for Encrypt {
    /// A store that does not exist holds nothing to seal: said on stderr, success.
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        nothing_to_do(dir);
        Ok(())
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let store = context.open().await?;
            let store = &store;
            self.walk
                .run("encrypt", store, context.quiet, |key, _| async move {
                    Ok(
                        match store
                            .encrypt(&key, &self.key, self.priority.clone())
                            .await?
                        {
                            Relaid::Moved { .. } => "sealed",
                            Relaid::Fits => "sealed already",
                            Relaid::LostToAWriter => "lost to a concurrent writer",
                            Relaid::Skipped(why) => why,
                        },
                    )
                })
                .await
        })
    }
}

impl Command for Rekey {
    /// A store that does not exist holds nothing to seal: said on stderr, success.
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        nothing_to_do(dir);
        Ok(())
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let store = context.open().await?;
            let store = &store;
            self.walk
                .run("rekey", store, context.quiet, |key, manifest| async move {
                    if manifest.sealing.is_none() {
                        return Ok("plaintext");
                    }
                    Ok(match store.rekey(&key).await? {
                        Rekeyed::Rewrapped { .. } => "re-wrapped",
                        Rekeyed::Current => "current already",
                        Rekeyed::Plaintext => "plaintext",
                        Rekeyed::LostToAWriter => "lost to a concurrent writer",
                        Rekeyed::Skipped(why) => why,
                    })
                })
                .await
        })
    }
}

/// What a walk did: blobs seen, how many had each outcome, damaged manifests, the last key done.
#[derive(Default)]
struct Report {
    scanned: u64,
    outcomes: BTreeMap<&'static str, u64>,
    damaged: u64,
    last_key: Option<Bytes>,
}

impl Walk {
    /// Runs `act` on every blob of the walk (its key and manifest as listed), in order, and reports by outcome;
    /// `what` names the command in the report.
    async fn run<F, Fut>(
        &self,
        what: &str,
        store: &BlobStore,
        quiet: bool,
        act: F,
    ) -> Result<(), Failure>
    where
        F: Fn(Bytes, Manifest) -> Fut,
        Fut: std::future::Future<Output = saltblob::Result<&'static str>>,
    {
        let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
        let after = self
            .after
            .as_ref()
            .map(|k| Bytes::copy_from_slice(k.as_ref()));
        let mut report = Report::default();
        let mut progress = Progress::items(what, "blobs", None, quiet);
        let mut entries = store.list_stream_after(prefix, after);
        let outcome = async {
            while let Some(entry) = entries.next().await {
                let entry = entry?;
                report.scanned += 1;
                progress.set(report.scanned);
                match entry.manifest {
                    Ok(manifest) => {
                        let outcome = act(entry.key.clone(), manifest).await?;
                        *report.outcomes.entry(outcome).or_default() += 1;
                    }
                    Err(_) => report.damaged += 1,
                }
                report.last_key = Some(entry.key);
            }
            Ok::<_, saltblob::Error>(())
        }
        .await;
        progress.finish();
        let text = self.report(what, &report);
        if let Err(e) = outcome {
            // What was done stays done; the last key tells where to resume.
            eprint!("{text}");
            let failure = Failure::from(e);
            return Err(Failure::new(
                failure.code,
                format!(
                    "{what} stopped (rerun with --after the last key above): {}",
                    failure.message
                ),
            ));
        }
        emit(&text)?;
        if report.damaged > 0 {
            return Err(Failure::new(
                Failure::DAMAGED,
                format!(
                    "{} damaged manifest(s) left alone: run `saltblob fsck`",
                    report.damaged
                ),
            ));
        }
        Ok(())
    }

    fn report(&self, what: &str, r: &Report) -> String {
        let last = r.last_key.as_ref().map(|k| human::escape_key(k));
        if self.json {
            let v = json!({
                "scanned": r.scanned,
                "outcomes": r.outcomes,
                "damaged": r.damaged,
                "last_key": last,
            });
            return format!("{v}\n");
        }
        let mut s = format!("{what}: scanned {}", r.scanned);
        for (outcome, n) in &r.outcomes {
            s.push_str(&format!(", {outcome} {n}"));
        }
        if r.damaged > 0 {
            s.push_str(&format!(", damaged {}", r.damaged));
        }
        s.push('\n');
        if let Some(last) = last {
            s.push_str(&format!("{what}: last key {last}\n"));
        }
        s
    }
}
