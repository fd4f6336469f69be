//! `saltblob sync`: makes a prefix hold what a directory tree holds, or a directory tree what a prefix holds,
//! copying only what differs (size, then BLAKE3 digest), and with `--delete` removing what the source lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Manifest, PutOptions};

use super::bulk::{Side, Summary, dir_prefix, no_store, relative_path, shown, shown_key, walk};
use super::command::{Command, Context};
use super::transfer::{Check, Job, Runner};
use crate::failure::{Failure, one_line};

/// Arguments of `saltblob sync`.
#[derive(clap::Args, Debug)]
pub struct SyncCmd {
    /// The source: a local directory, or sb:PREFIX in the store (%-escaped as `ls` prints keys).
    src: OsString,
    /// The destination: sb:PREFIX, or a local directory (made as needed).
    dst: OsString,
    /// How many transfers run at once.
    #[arg(short, long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: u16,
    /// Also delete what the destination holds and the source does not (not when part of a local source could
    /// not be read).
    #[arg(long)]
    delete: bool,
    /// Print what would be copied and deleted (`copy SRC -> DST`, `delete DST`), change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print a summary as one JSON object on stdout: {"copied", "bytes", "skipped", "deleted", "failed",
    /// "errors": [{"path", "error"}], "dry_run"}.
    #[arg(long)]
    json: bool,
}

impl Command for SyncCmd {
    fn is_read_only(&self) -> bool {
        self.dry_run || matches!(Side::parse(&self.dst), Ok(Side::Local(_)))
    }

    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        Err(no_store(dir))
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let mut summary = Summary::default();
            match (Side::parse(&self.src)?, Side::parse(&self.dst)?) {
                (Side::Local(src), Side::Store(dst)) => {
                    if !std::fs::metadata(&src).is_ok_and(|m| m.is_dir()) {
                        return Err(Failure::usage(format!(
                            "{} is not a directory; sync copies a directory tree (cp copies one file)",
                            shown(&src)
                        )));
                    }
                    let body = async |store: &BlobStore| {
                        self.up(store, context.quiet, &src, &dst, &mut summary)
                            .await
                    };
                    if self.dry_run {
                        context.reading_store(body).await?;
                    } else {
                        context.with_store(body).await?;
                    }
                }
                (Side::Store(src), Side::Local(dst)) => {
                    context
                        .reading_store(async |store| {
                            self.down(store, context.quiet, &src, &dst, &mut summary)
                                .await
                        })
                        .await?;
                }
                (Side::Store(_), Side::Store(_)) | (Side::Local(_), Side::Local(_)) => {
                    return Err(Failure::usage(
                        "sync works between a local directory and the store: one side is a local path, the \
                         other sb:PREFIX",
                    ));
                }
            }
            summary.print_copy(self.json, Some(self.dry_run));
            summary.outcome()
        })
    }
}

impl SyncCmd {
    /// The runner of the transfers.
    fn runner<'a>(&self, store: &'a BlobStore, quiet: bool) -> Runner<'a> {
        Runner {
            store,
            put: PutOptions::new(),
            no_clobber: false,
            dry_run: self.dry_run,
            jobs: usize::from(self.jobs),
            json: self.json,
            quiet,
        }
    }

    /// The blobs under `prefix`, by their key less the prefix: the manifest, or `None` when it is damaged.
    async fn listed(
        store: &BlobStore,
        prefix: &[u8],
    ) -> Result<BTreeMap<Vec<u8>, (Vec<u8>, Option<Manifest>)>, Failure> {
        let mut listed = BTreeMap::new();
        let mut entries = store.list_stream(prefix);
        while let Some(entry) = entries.next().await {
            let entry = entry?;
            listed.insert(
                entry.key[prefix.len()..].to_vec(),
                (entry.key.to_vec(), entry.manifest.ok()),
            );
        }
        Ok(listed)
    }

    /// Local tree `src` to prefix `dst`.
    async fn up(
        &self,
        store: &BlobStore,
        quiet: bool,
        src: &Path,
        dst: &[u8],
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        let prefix = dir_prefix(dst);
        let mut tree = walk(src);
        let complete = tree.problems.is_empty();
        summary.record_walk(&mut tree);
        let mut listed = Self::listed(store, &prefix).await?;
        let mut copies = Vec::new();
        for (rel, file) in tree.files {
            let existing = listed.remove(&rel).and_then(|(_, m)| m).map(Box::new);
            let mut key = prefix.clone();
            key.extend_from_slice(&rel);
            copies.push(Job::Upload {
                file,
                key,
                check: Check::Listed(existing),
            });
        }
        let runner = self.runner(store, quiet);
        runner.run(copies, "sync", summary).await;
        if self.delete {
            if complete {
                let deletes = listed
                    .into_values()
                    .map(|(key, _)| Job::DeleteKey(key))
                    .collect();
                runner.run(deletes, "sync", summary).await;
            } else {
                eprintln!(
                    "saltblob: not deleting anything: part of {} could not be read",
                    shown(src)
                );
            }
        }
        Ok(())
    }

    /// Prefix `src` to local tree `dst`.
    async fn down(
        &self,
        store: &BlobStore,
        quiet: bool,
        src: &[u8],
        dst: &Path,
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        if std::fs::metadata(dst).is_ok_and(|m| !m.is_dir()) {
            return Err(Failure::usage(format!("{} is not a directory", shown(dst))));
        }
        let prefix = dir_prefix(src);
        // Every relative path the source has, whether copied or not: none of them is deleted.
        let mut kept = BTreeSet::new();
        let mut copies = Vec::new();
        for (rel, (key, manifest)) in Self::listed(store, &prefix).await? {
            let path = match relative_path(&rel) {
                Ok(path) => path,
                Err(why) => {
                    summary.fail(
                        shown_key(&key),
                        format!("not copied: {why} would not stay under {}", shown(dst)),
                    );
                    continue;
                }
            };
            kept.insert(rel);
            match manifest {
                Some(manifest) => copies.push(Job::Download {
                    key,
                    manifest: Box::new(manifest),
                    dest: dst.join(path),
                    check: true,
                }),
                None => summary.fail(
                    shown_key(&key),
                    store
                        .head(&key)
                        .await
                        .err()
                        .map_or_else(|| "its manifest is damaged".into(), |e| one_line(&e)),
                ),
            }
        }
        let mut tree = walk(dst);
        let complete = tree.problems.is_empty();
        summary.record_walk(&mut tree);
        let runner = self.runner(store, quiet);
        runner.run(copies, "sync", summary).await;
        if self.delete {
            if complete {
                let deletes = tree
                    .files
                    .into_iter()
                    .filter(|(rel, _)| !kept.contains(rel))
                    .map(|(_, file)| Job::DeleteFile(file.path))
                    .collect();
                runner.run(deletes, "sync", summary).await;
            } else {
                eprintln!(
                    "saltblob: not deleting anything: part of {} could not be read",
                    shown(dst)
                );
            }
        }
        Ok(())
    }
}
