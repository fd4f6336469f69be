//! `saltblob relayout`: rewrites the blobs whose layout differs from the store's policy (or `--policy`), each as
//! a put conditional on the version it read, in the `bulk` class, with a progress spinner and a report of what
//! moved: counts, and each moved key with its layout before and after.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Layout, Manifest, PriorityClass, Relaid};
use serde_json::json;

use super::command::{Command, Context, nothing_to_do};
use super::plan::parse_policy;
use super::put::parse_priority;
use super::walk::{Route, Walked, conclude, walk};
use crate::failure::Failure;
use crate::human::{self, KeyArg, layout_json, layout_text, parse_key, short};

/// Moved keys the text report lists without `--verbose`.
const LISTED: usize = 20;

/// Arguments of `saltblob relayout`.
#[derive(clap::Args, Debug)]
pub struct Relayout {
    /// Only keys starting with PREFIX (%-escaped as keys are printed).
    #[arg(long, value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// The policy to apply instead of the store's, e.g. `fanout=1MiB,max_salt=16` (fields as `plan --policy`:
    /// fanout, inline, max_salt, max_partition, chunk_size, large_chunk_size; the others are the store's),
    /// checked against this store's backend (its largest chunk: 64 MiB embedded, 8 MiB on a cluster).
    #[arg(long, value_name = "SPEC")]
    policy: Option<String>,
    /// Walk in key order after KEY: the last key a previous run reported (blobs that already fit are skipped
    /// anyway).
    #[arg(long, value_parser = parse_key, conflicts_with = "resume")]
    after: Option<KeyArg>,
    /// Keep where the walk stands in FILE, and start from there when it exists: a rerun with the same FILE goes
    /// on where the last one stopped. Removed once every blob was read.
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Count what would move; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Priority class of the rewrites. Defaults to bulk.
    #[arg(long, value_name = "CLASS", value_parser = parse_priority)]
    priority: Option<PriorityClass>,
    /// Print the report as JSON (it lists every moved key, held in memory until the end).
    #[arg(long)]
    json: bool,
    /// List every moved key in the text report; without it, the first 20.
    #[arg(long)]
    verbose: bool,
}

/// A blob moved, or that would move in a dry run.
struct Move {
    key: Bytes,
    from: Layout,
    to: Layout,
    bytes: u64,
}

/// What a run did to the blobs it read (the walk itself: [`Walked`]).
#[derive(Default)]
struct Report {
    moved: u64,
    moved_bytes: u64,
    fits: u64,
    lost_to_writers: u64,
    skipped: std::collections::BTreeMap<&'static str, u64>,
    /// The moves listed: the first `keep` of them.
    moves: Vec<Move>,
    keep: usize,
}

impl Report {
    /// Counts `m`, and lists it while fewer than `keep` are.
    fn moved(&mut self, m: Move) {
        self.moved += 1;
        self.moved_bytes += m.bytes;
        if self.moves.len() < self.keep {
            self.moves.push(m);
        }
    }
}

impl Command for Relayout {
    fn is_read_only(&self) -> bool {
        self.dry_run
    }

    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        nothing_to_do(dir);
        Ok(())
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let (url, mut config) =
                saltblob::split_store_params(&context.url, context.config.clone())?;
            if let Some(spec) = &self.policy {
                config.policy = parse_policy(spec, &config.policy)?.1;
            }
            let backend = saltblob::open_backend(&url)
                .await
                .map_err(|e| failed("relayout", e))?;
            let what = match &self.policy {
                Some(spec) => format!(
                    "relayout --policy {spec} on the {} backend",
                    backend.info().name
                ),
                None => "relayout".to_owned(),
            };
            // The store checks its policy against this backend (its largest chunk, salt limits) before anything
            // is read.
            let store = BlobStore::new(backend, config).map_err(|e| failed(&what, e))?;
            self.relayout(&store, context.quiet).await
        })
    }
}

/// What became of one blob.
enum Outcome {
    Moved(Move),
    Fits,
    LostToAWriter,
    Skipped(&'static str),
}

impl Relayout {
    async fn relayout(&self, store: &BlobStore, quiet: bool) -> Result<(), Failure> {
        let mut report = Report {
            keep: if self.json || self.verbose {
                usize::MAX
            } else {
                LISTED
            },
            ..Report::default()
        };
        let visit = |key: Bytes, manifest: Manifest| async move {
            let to = store.config().policy.layout_for(manifest.size);
            Ok(if store.fits_policy(&manifest) {
                Outcome::Fits
            } else if self.dry_run {
                Outcome::Moved(Move {
                    key,
                    from: manifest.layout(),
                    to,
                    bytes: manifest.size,
                })
            } else {
                match store.relayout(&key, self.priority.clone()).await? {
                    Relaid::Moved { from, to, bytes } => Outcome::Moved(Move {
                        key,
                        from,
                        to,
                        bytes,
                    }),
                    Relaid::Fits => Outcome::Fits,
                    Relaid::LostToAWriter => Outcome::LostToAWriter,
                    Relaid::Skipped(why) => Outcome::Skipped(why),
                }
            })
        };
        let (walked, outcome) = walk(
            store,
            "relayout",
            Route {
                prefix: self.prefix.as_ref(),
                after: self.after.as_ref(),
                resume: self.resume.as_deref(),
            },
            quiet,
            visit,
            |_, outcome| match outcome {
                Outcome::Moved(m) => report.moved(m),
                Outcome::Fits => report.fits += 1,
                Outcome::LostToAWriter => report.lost_to_writers += 1,
                Outcome::Skipped(why) => *report.skipped.entry(why).or_default() += 1,
            },
        )
        .await;
        let text = self.report(&walked, &report);
        conclude("relayout", &text, &walked, outcome)
    }

    fn report(&self, walked: &Walked, r: &Report) -> String {
        if self.json {
            let v = json!({
                "dry_run": self.dry_run,
                "scanned": walked.scanned,
                "moved": r.moved,
                "moved_bytes": r.moved_bytes,
                "fits": r.fits,
                "lost_to_writers": r.lost_to_writers,
                "skipped": r.skipped,
                "damaged": walked.damaged,
                "last_key": walked.last_key.as_ref().map(|k| human::escape_key(k)),
                "moves": r.moves.iter().map(|m| json!({
                    "key": human::escape_key(&m.key),
                    "bytes": m.bytes,
                    "from": layout_json(&m.from),
                    "to": layout_json(&m.to),
                })).collect::<Vec<_>>(),
            });
            return format!("{v}\n");
        }
        let verb = if self.dry_run { "would move" } else { "moved" };
        let mut s = format!(
            "relayout: scanned {}, {verb} {} ({}), already fitting {}, lost to a concurrent writer {}",
            walked.scanned,
            r.moved,
            short(r.moved_bytes),
            r.fits,
            r.lost_to_writers
        );
        for (why, n) in &r.skipped {
            s.push_str(&format!(", skipped {n} ({why})"));
        }
        if walked.damaged > 0 {
            s.push_str(&format!(", damaged {}", walked.damaged));
        }
        s.push('\n');
        for m in &r.moves {
            s.push_str(&format!(
                "  {}: {} -> {}, {}\n",
                human::escape_key(&m.key),
                layout_text(&m.from),
                layout_text(&m.to),
                short(m.bytes)
            ));
        }
        let unlisted = r.moved - r.moves.len() as u64;
        if unlisted > 0 {
            s.push_str(&format!(
                "  ... and {unlisted} more (--verbose or --json lists them all)\n"
            ));
        }
        s.push_str(&walked.last_key_line("relayout"));
        s
    }
}

/// `e` as a failure whose message starts with `what`.
fn failed(what: &str, e: saltblob::Error) -> Failure {
    let failure = Failure::from(e);
    Failure::new(failure.code, format!("{what}: {}", failure.message))
}
