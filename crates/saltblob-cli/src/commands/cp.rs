//! `saltblob cp`: copies a file into a key or a blob into a file, or with `-r` a directory tree into a prefix
//! or a prefix into a directory tree, a few transfers at once, each streamed.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, PutOptions};

use super::bulk::{
    LocalFile, Side, Summary, base_name, dir_prefix, no_store, relative_path, shown, shown_key,
    walk,
};
use super::command::{Command, Context};
use super::transfer::{Check, Job, Runner};
use crate::failure::{Failure, one_line};

/// Arguments of `saltblob cp`.
#[derive(clap::Args, Debug)]
pub struct Cp {
    /// What to copy: a local path, or sb:KEY in the store (with -r, sb:PREFIX), the key %-escaped as `ls`
    /// prints it.
    src: OsString,
    /// Where to: sb:KEY (sb:PREFIX/ or sb: adds the file's name), or a local path (an existing directory, or a
    /// path ending in /, adds the key's last /-separated segment).
    dst: OsString,
    /// Copy a directory tree into a prefix (key = PREFIX/ + path under the directory, / separated), or the keys
    /// under a prefix into a directory tree (made as needed). Keys that would land outside it (.., an absolute
    /// path, empty segments) are reported and skipped.
    #[arg(short, long)]
    recursive: bool,
    /// How many transfers run at once.
    #[arg(short, long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: u16,
    /// Leave an existing destination (file or key) as it is, and count it as skipped.
    #[arg(short = 'n', long, conflicts_with = "skip_existing")]
    no_clobber: bool,
    /// Skip a destination that already holds the same bytes: the same size and the same BLAKE3 digest (a key's
    /// digest as `head` shows it; a sealed or composed blob is copied again).
    #[arg(long)]
    skip_existing: bool,
    /// Print a summary as one JSON object on stdout: {"copied", "bytes", "skipped", "failed", "errors":
    /// [{"path", "error"}]}.
    #[arg(long)]
    json: bool,
}

impl Command for Cp {
    fn is_read_only(&self) -> bool {
        matches!(Side::parse(&self.dst), Ok(Side::Local(_)))
    }

    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        Err(no_store(dir))
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let mut summary = Summary::default();
            match (Side::parse(&self.src)?, Side::parse(&self.dst)?) {
                (Side::Local(src), Side::Store(dst)) => {
                    // The local side is read before the store is opened: a bad source creates no store.
                    let jobs = self.upload_jobs(&src, &dst, &mut summary)?;
                    context
                        .with_store(async |store| {
                            self.runner(store, context.quiet)
                                .run(jobs, "cp", &mut summary)
                                .await;
                            Ok(())
                        })
                        .await?;
                }
                (Side::Store(src), Side::Local(dst)) => {
                    context
                        .reading_store(async |store| {
                            let jobs = self.download_jobs(store, &src, &dst, &mut summary).await?;
                            self.runner(store, context.quiet)
                                .run(jobs, "cp", &mut summary)
                                .await;
                            Ok(())
                        })
                        .await?;
                }
                (Side::Store(_), Side::Store(_)) | (Side::Local(_), Side::Local(_)) => {
                    return Err(Failure::usage(
                        "cp copies between local paths and the store: one side is a local path, the other \
                         sb:KEY (or sb:PREFIX/)",
                    ));
                }
            }
            summary.print_copy(self.json, None);
            summary.outcome()
        })
    }
}

impl Cp {
    /// The runner of the transfers.
    fn runner<'a>(&self, store: &'a BlobStore, quiet: bool) -> Runner<'a> {
        Runner {
            store,
            put: PutOptions::new(),
            no_clobber: self.no_clobber,
            dry_run: false,
            jobs: usize::from(self.jobs),
            json: self.json,
            quiet,
        }
    }

    /// How an upload compares before copying.
    fn check(&self) -> Check {
        if self.skip_existing {
            Check::Head
        } else {
            Check::Never
        }
    }

    /// The uploads of `src` (a file, or with `-r` a tree) to `dst`.
    fn upload_jobs(
        &self,
        src: &Path,
        dst: &[u8],
        summary: &mut Summary,
    ) -> Result<Vec<Job>, Failure> {
        let meta = std::fs::metadata(src)
            .map_err(|e| Failure::usage(format!("cannot read {}: {}", shown(src), one_line(&e))))?;
        if meta.is_dir() {
            if !self.recursive {
                return Err(Failure::usage(format!(
                    "{} is a directory; copy a tree with -r",
                    shown(src)
                )));
            }
            let prefix = dir_prefix(dst);
            let mut walk = walk(src);
            summary.record_walk(&mut walk);
            return Ok(walk
                .files
                .into_values()
                .map(|file| {
                    let mut key = prefix.clone();
                    key.extend_from_slice(&file.rel);
                    Job::Upload {
                        file,
                        key,
                        check: self.check(),
                    }
                })
                .collect());
        }
        if !meta.is_file() {
            return Err(Failure::usage(format!(
                "{} is not a regular file nor a directory",
                shown(src)
            )));
        }
        let mut key = dst.to_vec();
        if dst.is_empty() || dst.ends_with(b"/") {
            let name = src.file_name().ok_or_else(|| {
                Failure::usage(format!("{} has no file name to make a key of", shown(src)))
            })?;
            key.extend_from_slice(name.as_bytes());
        }
        let file = LocalFile {
            path: src.to_path_buf(),
            rel: Vec::new(),
            size: meta.len(),
        };
        Ok(vec![Job::Upload {
            file,
            key,
            check: self.check(),
        }])
    }

    /// The downloads of `src` (a key, or with `-r` the keys under a prefix) to `dst`.
    async fn download_jobs(
        &self,
        store: &BlobStore,
        src: &[u8],
        dst: &Path,
        summary: &mut Summary,
    ) -> Result<Vec<Job>, Failure> {
        if !self.recursive {
            if src.is_empty() || src.ends_with(b"/") {
                return Err(Failure::usage(format!(
                    "{} names a prefix; copy the keys under it with -r",
                    shown_key(src)
                )));
            }
            let manifest = store.head(src).await?;
            let into_dir = dst.as_os_str().as_bytes().ends_with(b"/")
                || std::fs::metadata(dst).is_ok_and(|m| m.is_dir());
            let dest = if into_dir {
                let name = relative_path(base_name(src)).map_err(|why| {
                    Failure::usage(format!(
                        "{}: its last segment is not a file name ({why}); name the file to write",
                        shown_key(src)
                    ))
                })?;
                dst.join(name)
            } else {
                dst.to_path_buf()
            };
            return Ok(vec![Job::Download {
                key: src.to_vec(),
                manifest: Box::new(manifest),
                dest,
                check: self.skip_existing,
            }]);
        }
        let prefix = dir_prefix(src);
        let mut jobs = Vec::new();
        let mut entries = store.list_stream(&prefix);
        while let Some(entry) = entries.next().await {
            let entry = entry?;
            let manifest = match entry.manifest {
                Ok(m) => m,
                Err(e) => {
                    summary.fail(shown_key(&entry.key), one_line(&e));
                    continue;
                }
            };
            match relative_path(&entry.key[prefix.len()..]) {
                Ok(rel) => jobs.push(Job::Download {
                    key: entry.key.to_vec(),
                    manifest: Box::new(manifest),
                    dest: dst.join(rel),
                    check: self.skip_existing,
                }),
                Err(why) => summary.fail(
                    shown_key(&entry.key),
                    format!("not copied: {why} would not stay under {}", shown(dst)),
                ),
            }
        }
        Ok(jobs)
    }
}
