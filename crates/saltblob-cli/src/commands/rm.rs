//! `saltblob rm`: deletes keys, or every key under prefixes.

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Error};

use super::bulk::Summary;
use super::command::{Command, Context};
use crate::failure::{Failure, one_line};
use crate::human::{KeyArg, parse_key};

/// How many deletes run at once.
const IN_FLIGHT: usize = 8;

/// Arguments of `saltblob rm`.
#[derive(clap::Args, Debug)]
pub struct Rm {
    /// The keys (with --prefix, the prefixes), %-escaped as `ls` prints them: %XX is a byte (e.g. %00), %25 a
    /// '%'.
    #[arg(value_parser = parse_key, required = true, value_name = "KEY")]
    keys: Vec<KeyArg>,
    /// Delete every key that starts with each KEY given (a prefix; never the whole store: an empty prefix is
    /// refused).
    #[arg(short = 'r', long = "prefix", visible_alias = "recursive")]
    prefix: bool,
    /// List the keys that would be deleted (stdout, one a line), delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print a summary as one JSON object on stdout: {"deleted", "not_found", "failed", "errors": [{"path",
    /// "error"}], "dry_run"} (with --dry-run, "deleted" counts the keys that would be).
    #[arg(long)]
    json: bool,
}

impl Command for Rm {
    fn key(&self) -> Option<&KeyArg> {
        // The first key is checked before the store is opened; the others, and prefixes, in `run` (also before).
        self.keys.first().filter(|_| !self.prefix)
    }

    fn is_read_only(&self) -> bool {
        self.dry_run
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            for key in &self.keys {
                if self.prefix && key.0.is_empty() {
                    return Err(Failure::usage(
                        "an empty prefix would delete every key of the store: refused",
                    ));
                }
                saltblob::store::validate_key(key.as_ref())?;
            }
            if self.dry_run {
                context
                    .reading_store(async |store| self.rm(store).await)
                    .await
            } else {
                context.with_store(async |store| self.rm(store).await).await
            }
        })
    }
}

impl Rm {
    /// Deletes the keys (or those under the prefixes). A lone key that holds no blob is "not found" (exit code
    /// 3); among several, each one not found is counted and named, and the exit code is 3 if nothing else failed.
    async fn rm(&self, store: &BlobStore) -> Result<(), Failure> {
        let mut summary = Summary::default();
        let mut targets: Vec<Vec<u8>> = Vec::new();
        if self.prefix {
            for prefix in &self.keys {
                let before = targets.len();
                let mut entries = store.list_stream(prefix.as_ref());
                while let Some(entry) = entries.next().await {
                    // A key whose manifest is damaged is listed, and deleted like the others.
                    targets.push(entry?.key.to_vec());
                }
                if targets.len() == before {
                    eprintln!(
                        "saltblob: no key starts with \"{}\"{}",
                        prefix.shown(),
                        sb_hint(prefix)
                    );
                }
            }
            targets.sort();
            targets.dedup();
        } else {
            targets = self.keys.iter().map(|k| k.0.clone()).collect();
        }
        if self.dry_run {
            for key in &targets {
                if !self.json {
                    println!("{}", saltblob::escape_key(key));
                }
            }
            summary.deleted = targets.len() as u64;
        } else {
            let mut deletes = futures::stream::iter(targets)
                .map(|key| async move {
                    let outcome = delete(store, &key).await;
                    (key, outcome)
                })
                .buffer_unordered(IN_FLIGHT);
            while let Some((key, outcome)) = deletes.next().await {
                let shown = saltblob::escape_key(&key);
                match outcome {
                    Ok(Some(line)) => {
                        summary.deleted += 1;
                        if !self.json {
                            eprintln!("deleted {shown} {line}");
                        }
                    }
                    Ok(None) => {
                        summary.not_found += 1;
                        if self.keys.len() > 1 || self.prefix {
                            eprintln!(
                                "saltblob: not found: no blob with key \"{shown}\"{}",
                                sb_hint(&key)
                            );
                        }
                    }
                    Err(e) => summary.fail(shown, e),
                }
            }
        }
        if self.json {
            println!(
                "{}",
                summary.json(&["deleted", "not_found"], Some(self.dry_run))
            );
        } else if self.keys.len() > 1 || self.prefix {
            let would = if self.dry_run {
                "would delete"
            } else {
                "deleted"
            };
            eprintln!(
                "{would} {} key(s), {} not found, {} failed",
                summary.deleted, summary.not_found, summary.failed
            );
        }
        summary.outcome()?;
        if summary.not_found > 0 {
            return Err(match self.keys.as_slice() {
                [key] => {
                    let mut f = Failure::from(Error::NotFound {
                        key: key.0.as_slice().into(),
                    });
                    f.message.push_str(sb_hint(key));
                    f
                }
                _ => Failure::new(
                    Failure::NOT_FOUND,
                    format!("{} key(s) held no blob (named above)", summary.not_found),
                ),
            });
        }
        Ok(())
    }
}

/// A hint for a key written as `cp` writes a store side (`sb:KEY`): `rm` takes keys as `ls` prints them.
fn sb_hint(key: impl AsRef<[u8]>) -> &'static str {
    if key.as_ref().starts_with(b"sb:") {
        " (rm takes keys as `ls` prints them, without the sb: of cp and sync)"
    } else {
        ""
    }
}

/// Deletes `key`: what to say after "deleted KEY", or `None` when it held no blob. A key whose manifest is
/// damaged is deleted too (its version is then unknown).
async fn delete(store: &BlobStore, key: &[u8]) -> Result<Option<String>, String> {
    let damaged = store.head(key).await.is_err_and(|e| e.is_corruption());
    match store.delete(key).await.map_err(|e| one_line(&e))? {
        Some(v) => Ok(Some(format!("(version {v})"))),
        None if damaged => Ok(Some(
            "(its manifest was damaged; `saltblob fsck --repair` removes its chunks)".into(),
        )),
        None => Ok(None),
    }
}
