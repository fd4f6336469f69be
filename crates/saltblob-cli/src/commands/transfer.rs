//! The transfers of `cp` and `sync`, each a [`Job`]: a file streamed into a key, a blob streamed into a file
//! (through a temporary file beside it, fsynced, then renamed: nothing half-written under the final name), and
//! deletions. [`Runner`] runs them a few at once and counts their outcomes in a [`Summary`].

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use saltblob::{BlobStore, Error, Manifest, ManifestBody, PutCondition, PutOptions};
use tokio::io::AsyncWriteExt;

use super::bulk::{LocalFile, Summary, shown, shown_key};
use super::get::create_replacement;
use crate::failure::one_line;
use crate::progress::{CountingReader, Progress};

/// What an upload compares the file with before copying it.
#[derive(Debug)]
pub enum Check {
    /// Nothing: copy.
    Never,
    /// The key's current manifest, read with `head`: the same size and digest skip the copy.
    Head,
    /// The manifest the listing gave (`None`: no such key): the same size and digest skip the copy.
    Listed(Option<Box<Manifest>>),
}

/// One transfer.
#[derive(Debug)]
pub enum Job {
    /// A local file into a key.
    Upload {
        file: LocalFile,
        key: Vec<u8>,
        check: Check,
    },
    /// A blob into a local file; with `check`, a file of the same size and digest is left as it is.
    Download {
        key: Vec<u8>,
        manifest: Box<Manifest>,
        dest: PathBuf,
        check: bool,
    },
    /// A key that the source does not have.
    DeleteKey(Vec<u8>),
    /// A local file that the source does not have.
    DeleteFile(PathBuf),
}

impl Job {
    /// The bytes it copies.
    fn bytes(&self) -> u64 {
        match self {
            Job::Upload { file, .. } => file.size,
            Job::Download { manifest, .. } => manifest.size,
            _ => 0,
        }
    }

    /// What it copies or deletes, as printed.
    fn shown(&self) -> String {
        match self {
            Job::Upload { file, .. } => shown(&file.path),
            Job::Download { key, .. } | Job::DeleteKey(key) => shown_key(key),
            Job::DeleteFile(path) => shown(path),
        }
    }
}

/// How a job ended.
enum Outcome {
    Copied(u64),
    Skipped,
    Deleted,
}

/// Runs jobs, a few at once.
pub struct Runner<'a> {
    /// The store.
    pub store: &'a BlobStore,
    /// The options of every upload.
    pub put: PutOptions,
    /// An existing destination is left as it is (and counted as skipped).
    pub no_clobber: bool,
    /// Print what would be done, do nothing.
    pub dry_run: bool,
    /// How many jobs run at once.
    pub jobs: usize,
    /// The summary is JSON: no line per job on stdout in a dry run.
    pub json: bool,
    /// No progress bar.
    pub quiet: bool,
}

impl Runner<'_> {
    /// Runs `jobs`, at most [`Runner::jobs`] at once, on one progress bar labelled `label`; each outcome is
    /// counted in `summary`, each failure said there and then.
    pub async fn run(&self, jobs: Vec<Job>, label: &str, summary: &mut Summary) {
        let total = jobs.iter().map(Job::bytes).sum();
        let progress = Progress::new(label, Some(total), self.quiet || self.dry_run);
        let mut outcomes = futures::stream::iter(jobs)
            .map(|job| {
                let progress = progress.clone();
                async move {
                    let outcome = self.one(&job, &progress).await;
                    (job, outcome)
                }
            })
            .buffer_unordered(self.jobs.max(1));
        while let Some((job, outcome)) = outcomes.next().await {
            match outcome {
                Ok(Outcome::Copied(n)) => {
                    summary.copied += 1;
                    summary.bytes += n;
                }
                Ok(Outcome::Skipped) => summary.skipped += 1,
                Ok(Outcome::Deleted) => summary.deleted += 1,
                Err(e) => summary.fail(job.shown(), e),
            }
        }
        progress.finish();
    }

    /// Runs one job.
    async fn one(&self, job: &Job, progress: &Progress) -> Result<Outcome, String> {
        match job {
            Job::Upload { file, key, check } => self.upload(file, key, check, progress).await,
            Job::Download {
                key,
                manifest,
                dest,
                check,
            } => self.download(key, manifest, dest, *check, progress).await,
            Job::DeleteKey(key) => {
                if self.dry_run {
                    self.say(format!("delete {}", shown_key(key)));
                } else {
                    self.store.delete(key).await.map_err(|e| one_line(&e))?;
                }
                Ok(Outcome::Deleted)
            }
            Job::DeleteFile(path) => {
                if self.dry_run {
                    self.say(format!("delete {}", shown(path)));
                } else {
                    tokio::fs::remove_file(path)
                        .await
                        .map_err(|e| format!("cannot delete: {}", one_line(&e)))?;
                }
                Ok(Outcome::Deleted)
            }
        }
    }

    /// A line of a dry run, on stdout (not with `--json`).
    fn say(&self, line: String) {
        if !self.json {
            println!("{line}");
        }
    }

    /// Streams `file` into `key`, unless `check` finds it there already.
    async fn upload(
        &self,
        file: &LocalFile,
        key: &[u8],
        check: &Check,
        progress: &Progress,
    ) -> Result<Outcome, String> {
        let head = matches!(check, Check::Head) || (self.no_clobber && self.dry_run);
        let existing = if head {
            match self.store.head(key).await {
                Ok(m) => Some(m),
                Err(Error::NotFound { .. }) => None,
                Err(e) => return Err(one_line(&e)),
            }
        } else {
            match check {
                Check::Listed(m) => m.as_deref().cloned(),
                _ => None,
            }
        };
        if let Some(m) = &existing
            && ((self.no_clobber && self.dry_run)
                || (!matches!(check, Check::Never) && same_content(&file.path, m).await?))
        {
            progress.clone().add(file.size);
            return Ok(Outcome::Skipped);
        }
        if self.dry_run {
            self.say(format!("copy {} -> {}", shown(&file.path), shown_key(key)));
            return Ok(Outcome::Copied(file.size));
        }
        let f = tokio::fs::File::open(&file.path)
            .await
            .map_err(|e| format!("cannot read: {}", one_line(&e)))?;
        let meta = f
            .metadata()
            .await
            .map_err(|e| format!("cannot read: {}", one_line(&e)))?;
        if !meta.is_file() {
            return Err("not a regular file".into());
        }
        let mut opts = self.put.clone().with_size_hint(meta.len());
        if self.no_clobber {
            opts = opts.with_condition(PutCondition::IfAbsent);
        }
        let reader = CountingReader {
            inner: f,
            progress: progress.clone(),
        };
        match self.store.put_stream(key, reader, &opts).await {
            Ok(m) => Ok(Outcome::Copied(m.size)),
            Err(Error::AlreadyExists { .. }) if self.no_clobber => Ok(Outcome::Skipped),
            Err(e) => Err(one_line(&e)),
        }
    }

    /// Streams `key` into `dest`, unless `check` finds it there already or `--no-clobber` keeps it.
    async fn download(
        &self,
        key: &[u8],
        manifest: &Manifest,
        dest: &Path,
        check: bool,
        progress: &Progress,
    ) -> Result<Outcome, String> {
        if let Ok(meta) = tokio::fs::symlink_metadata(dest).await {
            if meta.is_dir() {
                return Err(format!("{} is a directory", shown(dest)));
            }
            if self.no_clobber
                || (check
                    && tokio::fs::metadata(dest).await.is_ok_and(|m| m.is_file())
                    && same_content(dest, manifest).await?)
            {
                progress.clone().add(manifest.size);
                return Ok(Outcome::Skipped);
            }
        }
        if self.dry_run {
            self.say(format!("copy {} -> {}", shown_key(key), shown(dest)));
            return Ok(Outcome::Copied(manifest.size));
        }
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(|e| {
                format!("cannot make directory {}: {}", shown(parent), one_line(&e))
            })?;
        }
        let mut stream = self.store.get_stream(key).await.map_err(|e| one_line(&e))?;
        let tmp = temp_path(dest);
        let result = async {
            let mut file = create_replacement(&tmp, dest)
                .await
                .map_err(|e| format!("cannot write {}: {}", shown(&tmp), one_line(&e)))?;
            let mut written = 0u64;
            let mut progress = progress.clone();
            while let Some(piece) = stream.next().await {
                let piece = piece.map_err(|e| one_line(&e))?;
                file.write_all(&piece)
                    .await
                    .map_err(|e| format!("cannot write: {}", one_line(&e)))?;
                written += piece.len() as u64;
                progress.add(piece.len() as u64);
            }
            file.sync_all()
                .await
                .map_err(|e| format!("cannot write: {}", one_line(&e)))?;
            drop(file);
            place(&tmp, dest, self.no_clobber)
                .await
                .map_err(|e| format!("cannot rename into place: {}", one_line(&e)))
                .map(|placed| {
                    if placed {
                        Outcome::Copied(written)
                    } else {
                        Outcome::Skipped
                    }
                })
        }
        .await;
        if !matches!(result, Ok(Outcome::Copied(_))) {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }
}

/// Puts the complete temporary file `tmp` under the name `dest`, atomically; with `no_clobber`, only if `dest`
/// does not exist (a hard link, which fails when it does; where the file system has no hard links, a check then
/// a rename). Whether it did.
async fn place(tmp: &Path, dest: &Path, no_clobber: bool) -> std::io::Result<bool> {
    if !no_clobber {
        tokio::fs::rename(tmp, dest).await?;
        return Ok(true);
    }
    match tokio::fs::hard_link(tmp, dest).await {
        Ok(()) => {
            tokio::fs::remove_file(tmp).await?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(_) if tokio::fs::symlink_metadata(dest).await.is_ok() => Ok(false),
        Err(_) => tokio::fs::rename(tmp, dest).await.map(|()| true),
    }
}

/// `dir/.NAME.saltblob-XXXXXXXX` beside `dest` (so that the rename stays on one file system), the name cut to
/// 200 bytes so that the temporary name fits the file system's limit.
fn temp_path(dest: &Path) -> PathBuf {
    let name = dest.file_name().map_or(&b"out"[..], |n| n.as_bytes());
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(&name[..name.len().min(200)]);
    tmp.extend_from_slice(format!(".saltblob-{:08x}", rand::random::<u32>()).as_bytes());
    dest.with_file_name(OsStr::from_bytes(&tmp))
}

/// The digest of `m` when it is BLAKE3 of the blob's bytes: not for a sealed version (keyed digest) nor a
/// segmented one (digest of its segments' digests), which are compared by copying them again.
pub fn plain_digest(m: &Manifest) -> Option<[u8; 32]> {
    (m.sealed_by().is_none() && !matches!(m.body, ManifestBody::Segmented(_))).then_some(m.digest)
}

/// Whether the local file at `path` holds what `m` describes: the same size, and BLAKE3 of its bytes equal to
/// `m`'s plain digest (never when there is none).
pub async fn same_content(path: &Path, m: &Manifest) -> Result<bool, String> {
    let Some(digest) = plain_digest(m) else {
        return Ok(false);
    };
    let size = tokio::fs::metadata(path)
        .await
        .map_err(|e| format!("cannot read: {}", one_line(&e)))?
        .len();
    if size != m.size {
        return Ok(false);
    }
    Ok(local_digest(path).await? == digest)
}

/// BLAKE3 of the file at `path`, read on a blocking thread.
async fn local_digest(path: &Path) -> Result<[u8; 32], String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = std::fs::File::open(&path)?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok::<_, std::io::Error>(*hasher.finalize().as_bytes());
            }
            hasher.update(&buf[..n]);
        }
    })
    .await
    .map_err(|e| format!("hashing failed: {e}"))?
    .map_err(|e| format!("cannot read: {}", one_line(&e)))
}
