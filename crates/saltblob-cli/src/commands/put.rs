//! `saltblob put`: stores a file or standard input under a key.

use std::io::IsTerminal;

use futures::future::LocalBoxFuture;
use saltblob::{
    BlobStore, Codec, Error, Manifest, PriorityClass, PutCondition, PutOptions, VersionId,
};
use tokio::io::AsyncRead;

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::{self, KeyArg, parse_key, parse_size};
use crate::progress::{CountingReader, Progress};

/// Arguments of `saltblob put`.
#[derive(clap::Args, Debug)]
pub struct Put {
    /// The key (1 to 1024 bytes), %-escaped as `ls` prints it: %XX is a byte (e.g. %00), %25 a '%'.
    #[arg(value_parser = parse_key)]
    key: KeyArg,
    /// Input file; standard input when absent or "-".
    file: Option<String>,
    /// Chunk size for this blob (e.g. 65536, 64KiB, 1MiB). Defaults to 64 KiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    chunk_size: Option<u64>,
    /// Largest salt count (fan-out) for this blob. Defaults to 100.
    #[arg(long, value_name = "N")]
    max_salt: Option<u32>,
    /// Per-chunk compression: none, zstd or lz4 (kept only where a chunk shrinks). Defaults to none.
    #[arg(long, value_parser = parse_codec)]
    codec: Option<Codec>,
    /// Fail if KEY already holds a blob.
    #[arg(long, conflicts_with = "if_version")]
    if_absent: bool,
    /// Fail unless KEY's current version is this one (32 hex digits, from `head`).
    #[arg(long, value_name = "VERSION", value_parser = parse_version)]
    if_version: Option<VersionId>,
    /// MIME type stored with the blob (`head` shows it; the S3 server answers it as Content-Type).
    #[arg(long)]
    content_type: Option<String>,
    /// An entry of metadata stored with the blob, NAME=VALUE; repeatable (at most 8 KiB in all). `head` shows
    /// them; the S3 server shows NAME=x-amz-meta-foo as user metadata foo. Names starting with `s3:` or
    /// `saltblob:` are the server's and the store's own, refused here.
    #[arg(long = "metadata", value_name = "NAME=VALUE", value_parser = parse_metadata)]
    metadata: Vec<(String, String)>,
    /// Priority class of the put: interactive, bulk, or a class the store URL configures (classes=NAME:SHARES).
    /// Defaults to the layout's: interactive for inline and single-partition blobs, bulk for larger ones.
    #[arg(long, value_name = "CLASS", value_parser = parse_priority)]
    priority: Option<PriorityClass>,
    /// Expire the blob this long after the put (e.g. 90s, 12h, 30d): it then reads as not found and gc
    /// reclaims it; `head` shows when. Defaults to never.
    #[arg(long, value_name = "DURATION", value_parser = crate::human::parse_duration)]
    ttl: Option<std::time::Duration>,
    /// Seal the blob under this key of the store's key provider, over the store's `encryption_key=`: a keyring
    /// name (`encryption=local&keyring=FILE`) or a KMS key id, ARN or alias (`encryption=aws-kms`); the store URL
    /// must name the provider. Defaults to the store's key, if any.
    #[arg(long, value_name = "KEY")]
    encrypt: Option<String>,
    /// Seal the blob under the customer key in FILE (32 raw bytes, mode 0600; S3's SSE-C): it is never stored,
    /// and every read must give it again (`get --customer-key`). No key provider is needed.
    #[arg(long, value_name = "FILE", conflicts_with = "encrypt")]
    customer_key: Option<std::path::PathBuf>,
}

/// Parses a priority class name (whether the store has it is checked when the store is open).
pub(crate) fn parse_priority(s: &str) -> Result<PriorityClass, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// Parses `NAME=VALUE` (clap's value parser of `--metadata`).
fn parse_metadata(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("\"{s}\" is not NAME=VALUE"))?;
    if name.is_empty() {
        return Err(format!("\"{s}\": the name is empty"));
    }
    if name.starts_with("s3:") || name.starts_with("saltblob:") {
        return Err(format!(
            "\"{name}\": names starting with s3: or saltblob: are reserved"
        ));
    }
    Ok((name.to_owned(), value.to_owned()))
}

fn parse_codec(s: &str) -> Result<Codec, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

fn parse_version(s: &str) -> Result<VersionId, String> {
    s.parse::<VersionId>()
        .map_err(|e| Error::from(e).to_string())
}

impl Command for Put {
    fn key(&self) -> Option<&KeyArg> {
        Some(&self.key)
    }

    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.with_store(async |store| self.put(store, context.quiet).await))
    }
}

impl Put {
    /// The put options the flags ask for.
    fn options(&self) -> Result<PutOptions, Failure> {
        let mut opts = PutOptions::new();
        if let Some(cs) = self.chunk_size {
            let cs = u32::try_from(cs).map_err(|_| {
                Failure::usage(format!(
                    "invalid chunk size: {cs} bytes; it must be at most {} bytes",
                    u32::MAX
                ))
            })?;
            opts = opts.with_chunk_size(cs);
        }
        if let Some(s) = self.max_salt {
            opts = opts.with_max_salt(s);
        }
        if let Some(c) = self.codec {
            opts = opts.with_codec(c);
        }
        if self.if_absent {
            opts = opts.with_condition(PutCondition::IfAbsent);
        }
        if let Some(v) = self.if_version {
            opts = opts.with_condition(PutCondition::IfVersion(v));
        }
        if let Some(ct) = &self.content_type {
            opts = opts.with_content_type(ct.clone());
        }
        for (name, value) in &self.metadata {
            if opts.metadata.contains_key(name) {
                return Err(Failure::usage(format!("--metadata {name}= is given twice")));
            }
            opts = opts.with_metadata(name.clone(), value.clone());
        }
        if let Some(class) = &self.priority {
            opts = opts.with_priority(class.clone());
        }
        if let Some(ttl) = self.ttl {
            opts = opts.with_ttl(ttl);
        }
        if let Some(key) = &self.encrypt {
            opts = opts.with_encryption_key(key.clone());
        }
        if let Some(path) = &self.customer_key {
            let key = crate::secret_file::customer_key(path).map_err(Failure::usage)?;
            opts = opts.with_customer_key(key);
        }
        Ok(opts)
    }

    async fn put(&self, store: &BlobStore, quiet: bool) -> Result<(), Failure> {
        let mut opts = self.options()?;
        let label = format!("put {}", self.key.shown());
        let manifest = match self.file.as_deref() {
            None | Some("-") => {
                if std::io::stdin().is_terminal() {
                    eprintln!(
                        "saltblob: reading {} from standard input; end with Ctrl-D",
                        self.key.shown()
                    );
                }
                let reader = CountingReader {
                    inner: tokio::io::stdin(),
                    progress: Progress::new(&label, None, quiet),
                };
                put_reader(store, &self.key, reader, &opts).await?
            }
            Some(path) => {
                let file = tokio::fs::File::open(path)
                    .await
                    .map_err(|e| Failure::usage(format!("cannot read {path}: {e}")))?;
                let meta = file.metadata().await?;
                if meta.is_dir() {
                    return Err(Failure::usage(format!(
                        "{path} is a directory; put takes a file or standard input"
                    )));
                }
                if meta.is_file() {
                    opts = opts.with_size_hint(meta.len());
                }
                let total = meta.is_file().then_some(meta.len());
                let reader = CountingReader {
                    inner: file,
                    progress: Progress::new(&label, total, quiet),
                };
                put_reader(store, &self.key, reader, &opts).await?
            }
        };
        let layout = match manifest.layout() {
            saltblob::Layout::Inline => "inline".to_owned(),
            saltblob::Layout::Chunked(l) => {
                format!("{} chunks over {} salts", l.chunk_count, l.salt_count)
            }
        };
        eprintln!(
            "stored {} as version {} ({}, {layout})",
            self.key.shown(),
            manifest.version,
            human::short(manifest.size)
        );
        Ok(())
    }
}

/// Streams `reader` into the store under `key`, then removes its progress bar.
async fn put_reader<R: AsyncRead + Unpin + Send>(
    store: &BlobStore,
    key: &KeyArg,
    mut reader: CountingReader<R>,
    opts: &PutOptions,
) -> Result<Manifest, Failure> {
    let result = store.put_stream(key, &mut reader, opts).await;
    reader.progress.finish();
    Ok(result?)
}
