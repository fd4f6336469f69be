//! `saltblob export`: writes every live blob of the store (or under `--prefix`, after `--after`), in key order,
//! as a portable stream (`portable.rs`) to a file or standard output, each blob streamed: what `saltblob
//! import` reads into any store. Reads only.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::manifest::SEALED_METADATA_KEY;
use saltblob::{BlobStore, Error, Manifest};
use tokio::io::AsyncWrite;

use super::bulk::no_store;
use super::command::{Command, Context};
use super::get::create_replacement;
use super::portable::{BlobHead, SealedBy, StreamHeader, StreamWriter};
use super::transfer::plain_digest;
use crate::failure::{Failure, one_line};
use crate::human::{self, KeyArg, parse_key};
use crate::progress::Progress;

/// Arguments of `saltblob export`.
#[derive(clap::Args, Debug)]
pub struct Export {
    /// Where to write the stream: FILE (written beside it under a temporary name, renamed when complete), or
    /// standard output when absent or "-".
    file: Option<OsString>,
    /// Only keys starting with PREFIX (%-escaped as `ls` prints keys).
    #[arg(long, value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// Only keys after KEY, in key order: the last key a cut-short export or import named.
    #[arg(long, value_name = "KEY", value_parser = parse_key)]
    after: Option<KeyArg>,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Print a summary as one JSON object: {"exported", "bytes", "skipped", "failed", "errors": [{"key",
    /// "error"}], "last_key"}; on stdout, or on stderr when the stream goes to stdout.
    #[arg(long)]
    json: bool,
}

/// Where the stream goes.
enum Dest {
    /// Standard output.
    Stdout,
    /// A device, FIFO or socket, written in place.
    InPlace(PathBuf),
    /// A regular file, written under a temporary name beside it and renamed.
    Replace(PathBuf),
}

/// The counts of an export, and its errors.
#[derive(Debug, Default)]
struct Summary {
    exported: u64,
    bytes: u64,
    /// Blobs sealed with a customer key: named, not exported.
    skipped: u64,
    failed: u64,
    errors: Vec<(String, String)>,
    last_key: Option<Vec<u8>>,
}

impl Summary {
    fn fail(&mut self, key: &[u8], error: String) {
        let shown = human::escape_key(key);
        eprintln!("saltblob: error: {shown}: {error}");
        self.failed += 1;
        self.errors.push((shown, error));
    }
}

impl Command for Export {
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        Err(no_store(dir))
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            // The destination is checked before the store is opened: a bad one opens nothing.
            let dest = self.dest()?;
            let mut summary = Summary::default();
            let outcome = context
                .reading_store(async |store| {
                    self.export(store, &dest, context.quiet, &mut summary).await
                })
                .await;
            self.print(&summary, matches!(dest, Dest::Stdout));
            outcome?;
            let left_out = summary.skipped + summary.failed;
            if left_out > 0 {
                return Err(Failure::new(
                    Failure::FAILED,
                    format!(
                        "{left_out} blob(s) were not exported (named above): {} sealed with a customer key, {} \
                         failed; the stream holds the rest and names them",
                        summary.skipped, summary.failed
                    ),
                ));
            }
            Ok(())
        })
    }
}

impl Export {
    /// Where the stream goes; an existing regular file only with `--force`.
    fn dest(&self) -> Result<Dest, Failure> {
        let path = match self.file.as_deref() {
            None => return Ok(Dest::Stdout),
            Some(p) if p.as_bytes() == b"-" => return Ok(Dest::Stdout),
            Some(p) if p.is_empty() => return Err(Failure::usage("an empty path names nothing")),
            Some(p) => PathBuf::from(p),
        };
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => Err(Failure::usage(format!(
                "{} is a directory; name the file to write",
                path.display()
            ))),
            Ok(m) if m.is_file() && !self.force => Err(Failure::usage(format!(
                "{} exists; pass --force to replace it",
                path.display()
            ))),
            Ok(m) if !m.is_file() => Ok(Dest::InPlace(path)),
            _ => Ok(Dest::Replace(path)),
        }
    }

    /// Exports to `dest`: a file is written under a temporary name and renamed once the trailer is written and
    /// synced; on a failure of the whole export it is removed.
    async fn export(
        &self,
        store: &BlobStore,
        dest: &Dest,
        quiet: bool,
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        match dest {
            Dest::Stdout => {
                let out = tokio::io::BufWriter::with_capacity(1 << 20, tokio::io::stdout());
                self.write(store, out, "standard output", true, quiet, summary)
                    .await
                    .map(drop)
            }
            Dest::InPlace(path) => {
                let file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .await
                    .map_err(|e| cannot_write(path, &e))?;
                let out = tokio::io::BufWriter::with_capacity(1 << 20, file);
                self.write(
                    store,
                    out,
                    &path.display().to_string(),
                    true,
                    quiet,
                    summary,
                )
                .await
                .map(drop)
            }
            Dest::Replace(path) => {
                let tmp = temp_path(path);
                let result = async {
                    let file = create_private(&tmp, path)
                        .await
                        .map_err(|e| cannot_write(&tmp, &e))?;
                    let out = tokio::io::BufWriter::with_capacity(1 << 20, file);
                    let out = self
                        .write(
                            store,
                            out,
                            &tmp.display().to_string(),
                            false,
                            quiet,
                            summary,
                        )
                        .await?;
                    let file = out.into_inner();
                    file.sync_all().await.map_err(|e| cannot_write(&tmp, &e))?;
                    drop(file);
                    tokio::fs::rename(&tmp, path)
                        .await
                        .map_err(|e| cannot_write(path, &e))
                }
                .await;
                if result.is_err() {
                    let _ = tokio::fs::remove_file(&tmp).await;
                }
                result
            }
        }
    }

    /// Writes the stream to `out` (named `name` in errors); returns it flushed. When the stream stops short,
    /// the error names the last key written in full if what was written is `kept` (a pipe, a device).
    async fn write<W: AsyncWrite + Unpin>(
        &self,
        store: &BlobStore,
        out: W,
        name: &str,
        kept: bool,
        quiet: bool,
        summary: &mut Summary,
    ) -> Result<W, Failure> {
        let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
        let header = StreamHeader {
            created_micros: store.config().clock.now_micros(),
            writer: format!("saltblob {}", env!("CARGO_PKG_VERSION")),
            prefix: prefix.to_vec(),
            after: self.after.as_ref().map(|a| a.0.clone()),
        };
        let output = |e: std::io::Error, at: u64| {
            Failure::new(
                Failure::FAILED,
                format!(
                    "cannot write {name} at byte {at}: {}; the stream is incomplete",
                    one_line(&e)
                ),
            )
        };
        let mut w = StreamWriter::start(out, &header)
            .await
            .map_err(|e| output(e, 0))?;
        let mut progress = Progress::new("export", None, quiet);
        let start = self
            .after
            .as_ref()
            .map(|a| Bytes::copy_from_slice(a.as_ref()));
        let mut entries = store.list_stream_after(prefix, start);
        let mut last_key: Option<Vec<u8>> = None;
        while let Some(entry) = entries.next().await {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    progress.finish();
                    summary.last_key = last_key.clone();
                    return Err(Failure::new(
                        Failure::FAILED,
                        format!(
                            "listing the store failed: {}; the stream is incomplete (no trailer){}",
                            one_line(&e),
                            resume_hint(last_key.as_deref().filter(|_| kept))
                        ),
                    ));
                }
            };
            let key = entry.key.to_vec();
            let manifest = match entry.manifest {
                Ok(m) => m,
                Err(e) => {
                    let reason = format!("its manifest is damaged: {}", one_line(&e));
                    summary.fail(&key, reason.clone());
                    let at = w.offset();
                    w.left_out(&key, &reason).await.map_err(|e| output(e, at))?;
                    last_key = Some(key);
                    continue;
                }
            };
            let at = w.offset();
            let done = self
                .one(store, &mut w, &key, &manifest, &mut progress, summary)
                .await;
            match done {
                Ok(()) => last_key = Some(key),
                Err(e) => {
                    progress.finish();
                    summary.last_key = last_key.clone();
                    return Err(Failure::new(
                        Failure::FAILED,
                        format!(
                            "cannot write {name} at byte {}: {}; the stream is incomplete (no trailer){}",
                            w.offset().max(at),
                            one_line(&e),
                            resume_hint(last_key.as_deref().filter(|_| kept))
                        ),
                    ));
                }
            }
        }
        progress.finish();
        summary.last_key = last_key;
        let at = w.offset();
        w.finish().await.map_err(|e| output(e, at))
    }

    /// Exports blob `key`, listed with `listed`: its record, or a left-out record (counted in `summary` and said
    /// on stderr) when it is sealed with a customer key or cannot be read. Nothing when it went away since the
    /// listing.
    ///
    /// # Errors
    /// An error of the output only: the stream cannot go on.
    async fn one<W: AsyncWrite + Unpin>(
        &self,
        store: &BlobStore,
        w: &mut StreamWriter<W>,
        key: &[u8],
        listed: &Manifest,
        progress: &mut Progress,
        summary: &mut Summary,
    ) -> std::io::Result<()> {
        if listed.sealed_by_customer().is_some() {
            return skip_customer(w, summary, key).await;
        }
        let mut stream = match store.get_stream(key).await {
            Ok(s) => s,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(Error::KeyUnavailable { provider, .. })
                if provider == saltblob::encryption::CUSTOMER =>
            {
                return skip_customer(w, summary, key).await;
            }
            Err(e) => {
                let reason = match &e {
                    Error::KeyUnavailable { .. } => format!(
                        "{} (open the store with its key provider: encryption=local&keyring=FILE)",
                        one_line(&e)
                    ),
                    _ => one_line(&e),
                };
                summary.fail(key, reason.clone());
                return w.left_out(key, &reason).await;
            }
        };
        let m = stream.manifest.clone();
        let mut metadata = m.metadata.clone();
        let sealed_metadata = if metadata.remove(SEALED_METADATA_KEY).is_some() {
            match store.sealed_metadata(key, &m, None).await {
                Ok(entries) => entries,
                Err(e) => {
                    let reason = format!("its sealed metadata does not open: {}", one_line(&e));
                    summary.fail(key, reason.clone());
                    return w.left_out(key, &reason).await;
                }
            }
        } else {
            Default::default()
        };
        let head = BlobHead {
            key: key.to_vec(),
            size: m.size,
            content_type: m.content_type.clone(),
            expires_micros: m.expires_micros,
            sealed: m.sealed_by().map(|s| SealedBy {
                provider: s.kek.provider.to_owned(),
                key: s.kek.name.clone(),
            }),
            metadata,
            sealed_metadata,
            digest: plain_digest(&m),
        };
        w.begin_blob(&head).await?;
        while let Some(piece) = stream.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(e) => return abort(w, summary, key, one_line(&e)).await,
            };
            if piece.len() as u64 > w.remaining() {
                let reason = format!("the store read more than its {} bytes", m.size);
                return abort(w, summary, key, reason).await;
            }
            w.data(&piece).await?;
            progress.add(piece.len() as u64);
        }
        if w.remaining() > 0 {
            let reason = format!(
                "the store's read ended {} bytes short of its {} bytes",
                w.remaining(),
                m.size
            );
            return abort(w, summary, key, reason).await;
        }
        let digest = w.end_blob().await?;
        if let Some(d) = head.digest
            && d != digest
        {
            // The store checks a whole read's digest before it ends; this is a second look.
            summary.fail(
                key,
                "its data does not hash to its manifest's digest".into(),
            );
            return Ok(());
        }
        summary.exported += 1;
        summary.bytes += m.size;
        Ok(())
    }

    /// Prints the summary: JSON (on stderr when the stream is on stdout), or a line on stderr.
    fn print(&self, s: &Summary, stream_on_stdout: bool) {
        let last_key = s.last_key.as_deref().map(human::escape_key);
        if self.json {
            let v = serde_json::json!({
                "exported": s.exported,
                "bytes": s.bytes,
                "skipped": s.skipped,
                "failed": s.failed,
                "errors": s.errors.iter().map(|(k, e)| serde_json::json!({"key": k, "error": e})).collect::<Vec<_>>(),
                "last_key": last_key,
            });
            if stream_on_stdout {
                eprintln!("{v}");
            } else {
                println!("{v}");
            }
            return;
        }
        let mut line = format!(
            "exported {} blob(s) ({}), skipped {} (sealed with a customer key), failed {}",
            s.exported,
            human::short(s.bytes),
            s.skipped,
            s.failed
        );
        if let Some(k) = last_key {
            line.push_str(&format!("; last key {k}"));
        }
        eprintln!("{line}");
    }
}

/// Names blob `key`, sealed with a customer key, as left out: said on stderr, counted as skipped.
async fn skip_customer<W: AsyncWrite + Unpin>(
    w: &mut StreamWriter<W>,
    summary: &mut Summary,
    key: &[u8],
) -> std::io::Result<()> {
    const CUSTOMER: &str = "sealed with a customer key (SSE-C): it cannot be read without that key";
    eprintln!(
        "saltblob: not exported: {}: {CUSTOMER}",
        human::escape_key(key)
    );
    summary.skipped += 1;
    w.left_out(key, CUSTOMER).await
}

/// Ends blob `key`'s record cut short for `reason`, counted as failed.
async fn abort<W: AsyncWrite + Unpin>(
    w: &mut StreamWriter<W>,
    summary: &mut Summary,
    key: &[u8],
    reason: String,
) -> std::io::Result<()> {
    summary.fail(
        key,
        format!("{reason} (its record in the stream is cut short)"),
    );
    w.abort_blob(&reason).await
}

/// How to go on from `last`, the last key written in full.
fn resume_hint(last: Option<&[u8]>) -> String {
    match last {
        Some(k) => format!(
            "; the last key written in full is {}: export the rest with --after {}",
            human::escape_key(k),
            shell_quoted(&human::escape_key(k))
        ),
        None => String::new(),
    }
}

/// `s` quoted for a POSIX shell.
pub(super) fn shell_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn cannot_write(path: &Path, e: &std::io::Error) -> Failure {
    Failure::new(
        Failure::FAILED,
        format!("cannot write {}: {}", path.display(), one_line(e)),
    )
}

/// `dir/.NAME.saltblob-XXXXXXXX` beside `dest`, so that the rename stays on one file system.
fn temp_path(dest: &Path) -> PathBuf {
    let name = dest.file_name().map_or(&b"export"[..], |n| n.as_bytes());
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(name.get(..name.len().min(200)).unwrap_or(name));
    tmp.extend_from_slice(format!(".saltblob-{:08x}", rand::random::<u32>()).as_bytes());
    dest.with_file_name(std::ffi::OsStr::from_bytes(&tmp))
}

/// Creates `tmp` for a stream that will replace `dest`: mode 0600 (the stream holds the plaintext of sealed
/// blobs), or the mode of the file it replaces.
async fn create_private(tmp: &Path, dest: &Path) -> std::io::Result<tokio::fs::File> {
    use std::os::unix::fs::PermissionsExt;
    if tokio::fs::metadata(dest).await.is_ok_and(|m| m.is_file()) {
        return create_replacement(tmp, dest).await;
    }
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .await?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .await?;
    Ok(file)
}
