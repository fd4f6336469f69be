//! `saltblob encrypt` and `saltblob rekey` (encryption at rest, `docs/format.md`): each walks the blobs (a pass
//! over the store's ranges, or the keys under a prefix in order: module `walk`), with a progress spinner, acting
//! on one blob at a time (a rewrite conditional on the version read, or a compare-and-set of the manifest), and
//! reports what it did by outcome; a run that stops says how to resume (`--resume FILE`, or `--after` the last
//! key of a walk in key order).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Manifest, PriorityClass, Rekeyed, Relaid};
use serde_json::json;

use super::command::{Command, Context, nothing_to_do};
use super::put::parse_priority;
use super::walk::{Route, Walked, conclude, walk};
use crate::failure::Failure;
use crate::human::{self, KeyArg, parse_key};

/// Where a walk goes: the blobs under `--prefix` (all without it), after `--after`, or from `--resume FILE`.
#[derive(clap::Args, Debug)]
struct WalkArgs {
    /// Only keys starting with PREFIX (%-escaped as keys are printed).
    #[arg(long, value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// Walk in key order after KEY: the last key a previous run reported (blobs already done are skipped anyway).
    #[arg(long, value_parser = parse_key, conflicts_with = "resume")]
    after: Option<KeyArg>,
    /// Keep where the walk stands in FILE, and start from there when it exists: a rerun with the same FILE goes
    /// on where the last one stopped. Removed once every blob was read.
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Print the report as JSON: {"scanned", "outcomes": {OUTCOME: N}, "damaged", "last_key"}.
    #[arg(long)]
    json: bool,
}

/// Arguments of `saltblob encrypt`.
#[derive(clap::Args, Debug)]
pub struct Encrypt {
    /// The key to seal the plaintext blobs under, of the provider the store URL must name: a keyring name
    /// (`encryption=local&keyring=FILE`) or a KMS key id, ARN or alias (`encryption=aws-kms`).
    #[arg(long, value_name = "NAME")]
    key: String,
    #[command(flatten)]
    walk: WalkArgs,
    /// Priority class of the rewrites. Defaults to bulk.
    #[arg(long, value_name = "CLASS", value_parser = parse_priority)]
    priority: Option<PriorityClass>,
}

/// Arguments of `saltblob rekey`.
#[derive(clap::Args, Debug)]
pub struct Rekey {
    #[command(flatten)]
    walk: WalkArgs,
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
                .run(
                    "encrypt",
                    store,
                    context.quiet,
                    |key, manifest| async move {
                        // As listed: a sealed blob needs no read (nor its key).
                        if manifest.sealed_by().is_some() {
                            return Ok("sealed already");
                        }
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
                    },
                )
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
                .run("rekey", store, context.quiet, |key, _| async move {
                    // Each key is read, a plaintext one too: its kept versions may be sealed.
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

/// What a walk did, by outcome.
#[derive(Default)]
struct Outcomes(BTreeMap<&'static str, u64>);

impl WalkArgs {
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
        let mut outcomes = Outcomes::default();
        let (walked, outcome) = walk(
            store,
            what,
            Route {
                prefix: self.prefix.as_ref(),
                after: self.after.as_ref(),
                resume: self.resume.as_deref(),
            },
            quiet,
            act,
            |_, outcome| *outcomes.0.entry(outcome).or_default() += 1,
        )
        .await;
        let text = self.report(what, &walked, &outcomes);
        conclude(what, &text, &walked, outcome)
    }

    fn report(&self, what: &str, walked: &Walked, outcomes: &Outcomes) -> String {
        if self.json {
            let v = json!({
                "scanned": walked.scanned,
                "outcomes": outcomes.0,
                "damaged": walked.damaged,
                "last_key": walked.last_key.as_ref().map(|k| human::escape_key(k)),
            });
            return format!("{v}\n");
        }
        let mut s = format!("{what}: scanned {}", walked.scanned);
        for (outcome, n) in &outcomes.0 {
            s.push_str(&format!(", {outcome} {n}"));
        }
        if walked.damaged > 0 {
            s.push_str(&format!(", damaged {}", walked.damaged));
        }
        s.push('\n');
        s.push_str(&walked.last_key_line(what));
        s
    }
}
