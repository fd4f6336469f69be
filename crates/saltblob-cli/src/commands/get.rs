//! `saltblob get`: writes a blob, or a byte range of it, to standard output or to a file.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, GetOptions, PriorityClass};
use tokio::io::AsyncWriteExt;

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::{KeyArg, parse_key, parse_range};
use crate::progress::Progress;

/// Arguments of `saltblob get`.
#[derive(clap::Args, Debug)]
pub struct Get {
    /// The key, %-escaped as `ls` prints it: %XX is a byte (e.g. %00), %25 a '%'.
    #[arg(value_parser = parse_key)]
    key: KeyArg,
    /// Output file ("-" or absent: standard output). Written to a temporary file and renamed when complete; a
    /// device, FIFO or socket (`/dev/null`, a named pipe) is written in place.
    #[arg(short, long, value_name = "FILE")]
    output: Option<String>,
    /// Inclusive byte range, as in HTTP: START-END, START- or -SUFFIX_LENGTH.
    #[arg(long, value_name = "START-END", allow_hyphen_values = true)]
    range: Option<String>,
    /// Priority class of the read: interactive, bulk, or a class the store URL configures. Defaults to the
    /// layout's: interactive for inline and single-partition blobs, bulk for larger ones.
    #[arg(long, value_name = "CLASS", value_parser = super::put::parse_priority)]
    priority: Option<PriorityClass>,
    /// The customer key in FILE (32 raw bytes, mode 0600) a blob put with `put --customer-key` (or S3's SSE-C)
    /// was sealed under: such a blob reads only with it, and a blob not sealed under one refuses it.
    #[arg(long, value_name = "FILE")]
    customer_key: Option<PathBuf>,
}

impl Command for Get {
    fn key(&self) -> Option<&KeyArg> {
        Some(&self.key)
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.reading_store(async |store| self.get(store, context.quiet).await))
    }
}

impl Get {
    async fn get(&self, store: &BlobStore, quiet: bool) -> Result<(), Failure> {
        let mut opts = GetOptions::new();
        if let Some(spec) = self.range.as_deref() {
            let spec =
                parse_range(spec).map_err(|e| Failure::usage(format!("invalid range: {e}")))?;
            opts = opts.with_range(spec);
        }
        if let Some(class) = &self.priority {
            opts = opts.with_priority(class.clone());
        }
        if let Some(path) = &self.customer_key {
            let key = crate::secret_file::customer_key(path).map_err(Failure::usage)?;
            opts = opts.with_customer_key(key);
        }
        let mut stream = store.get_stream_with(&self.key, &opts).await?;
        let total = stream.range.end - stream.range.start;
        let mut progress = Progress::new(&format!("get {}", self.key.shown()), Some(total), quiet);
        match self.output.as_deref() {
            None | Some("-") => {
                let mut out = tokio::io::stdout();
                while let Some(piece) = stream.next().await {
                    let piece = piece?;
                    if let Err(e) = out.write_all(&piece).await {
                        progress.finish();
                        // A reader that went away (`saltblob get k | head`) is not an error of ours.
                        return if e.kind() == std::io::ErrorKind::BrokenPipe {
                            Ok(())
                        } else {
                            Err(e.into())
                        };
                    }
                    progress.add(piece.len() as u64);
                }
                out.flush().await.or_else(|e| {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })?;
            }
            // A device, a pipe or a socket (`-o /dev/null`, a FIFO) is written in place: replacing it by a rename
            // would put a regular file where the special one was.
            Some(path) if is_special(Path::new(path)).await => {
                let mut file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .await
                    .map_err(|e| {
                        Failure::new(Failure::FAILED, format!("cannot write {path}: {e}"))
                    })?;
                copy(&mut stream, &mut file, &mut progress).await?;
                file.flush().await?;
            }
            Some(path) => {
                let tmp = temp_path(Path::new(path));
                let result = async {
                    let mut file =
                        create_replacement(&tmp, Path::new(path))
                            .await
                            .map_err(|e| {
                                Failure::new(
                                    Failure::FAILED,
                                    format!("cannot write {}: {e}", tmp.display()),
                                )
                            })?;
                    copy(&mut stream, &mut file, &mut progress).await?;
                    file.sync_all().await?;
                    tokio::fs::rename(&tmp, path).await?;
                    Ok::<(), Failure>(())
                }
                .await;
                if result.is_err() {
                    let _ = tokio::fs::remove_file(&tmp).await;
                }
                result?;
            }
        }
        progress.finish();
        Ok(())
    }
}

/// Writes what `stream` yields to `file`, counting it on `progress`.
async fn copy(
    stream: &mut saltblob::BlobStream,
    file: &mut tokio::fs::File,
    progress: &mut Progress,
) -> Result<(), Failure> {
    while let Some(piece) = stream.next().await {
        let piece = piece?;
        file.write_all(&piece).await?;
        progress.add(piece.len() as u64);
    }
    Ok(())
}

/// Whether `path` is there and is neither a regular file nor a directory (a device, a FIFO, a socket): what a get
/// writes into rather than replaces.
async fn is_special(path: &Path) -> bool {
    tokio::fs::metadata(path)
        .await
        .is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Creates the temporary file that will replace `dest`. When `dest` is a file already, the new one gets its
/// permission bits from the start (before any byte is written), so that a get never makes a file readable by
/// more users than it was; otherwise the usual mode for a new file (0666 less the umask).
pub(crate) async fn create_replacement(
    tmp: &Path,
    dest: &Path,
) -> std::io::Result<tokio::fs::File> {
    use std::os::unix::fs::PermissionsExt;

    let replaced = tokio::fs::metadata(dest)
        .await
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions().mode() & 0o7777);
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(replaced.unwrap_or(0o666))
        .open(tmp)
        .await?;
    if let Some(mode) = replaced {
        // The umask may have narrowed the mode given to open: keep the replaced file's exactly.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .await?;
    }
    Ok(file)
}

/// `dir/.name.saltblob-XXXX`, beside the destination so that the final rename stays on one filesystem.
fn temp_path(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    dest.with_file_name(format!(".{name}.saltblob-{:08x}", rand::random::<u32>()))
}
