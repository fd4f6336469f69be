//! `saltblob`: the command-line tool. Every command takes `--store URL` (or `SALTBLOB_STORE`); without it, the
//! embedded store in `./saltblob-data` is used.
//!
//! Exit codes: 0 success, 1 failure (backend, I/O), 2 invalid usage or input, 3 key not found, 4 corrupt data.

mod demo;
mod human;
mod maintenance;
mod progress;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use futures::StreamExt;
use saltblob::{BlobStore, Codec, Error, PutCondition, PutOptions, StoreConfig, VersionId};
use tokio::io::{AsyncRead, AsyncWriteExt};

use crate::human::{parse_range, parse_size};
use crate::progress::{CountingReader, Progress};

/// saltblob: one key-value store for values of any size, from a few bytes to many gigabytes.
#[derive(Parser, Debug)]
#[command(name = "saltblob", version, about, long_about = None)]
struct Cli {
    /// Store URL: rocksdb:///path/to/dir (embedded), cql://host1,host2:9042/keyspace (ScyllaDB or Cassandra)
    /// or memory://. Defaults to the embedded store in
    /// ./saltblob-data.
    #[arg(long, global = true, env = "SALTBLOB_STORE", value_name = "URL")]
    store: Option<String>,
    /// No progress bars.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// How long a put's intent stays valid without renewal (renewed every third of it while the put runs); gc
    /// reclaims the chunks of a put whose writer died once it expires. Defaults to 60s.
    #[arg(long, global = true, env = "SALTBLOB_INTENT_LEASE", value_name = "DURATION",
          value_parser = humantime::parse_duration)]
    intent_lease: Option<std::time::Duration>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store FILE (or standard input when FILE is absent or "-") under KEY.
    Put(PutArgs),
    /// Write the blob under KEY to standard output or to a file.
    Get {
        /// The key.
        key: String,
        /// Output file ("-" or absent: standard output). Written to a temporary file and renamed when complete.
        #[arg(short, long, value_name = "FILE")]
        output: Option<String>,
        /// Inclusive byte range, as in HTTP: START-END, START- or -SUFFIX_LENGTH.
        #[arg(long, value_name = "START-END", allow_hyphen_values = true)]
        range: Option<String>,
    },
    /// Show the manifest of KEY's current version.
    Head {
        /// The key.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete KEY (its chunks are reclaimed after the grace period).
    Rm {
        /// The key.
        key: String,
    },
    /// List keys starting with PREFIX (all keys when absent).
    Ls {
        /// Key prefix.
        prefix: Option<String>,
        /// Show size, layout and version of each key.
        #[arg(short, long)]
        long: bool,
    },
    /// Show how KEY is laid out: layout, chunk size, chunk count, salt count, bytes per salt.
    Describe {
        /// The key.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store and read back a mixed-size set of blobs (bytes to 60 MiB), verify every digest, print each layout
    /// and latency.
    Demo {
        /// Skip the 60 MiB blob.
        #[arg(long)]
        small: bool,
    },
    /// Copy every blob of a table in the salting article's schema ((key, salt), chunk_id; chunk, total_chunks,
    /// salt_cardinality) into the store, verifying each is complete; incomplete blobs are reported, not copied.
    ImportSalted {
        /// The source table, KEYSPACE.TABLE.
        table: String,
        /// The cluster holding the table (cql://host1,host2:9042/any). Defaults to the --store URL when it is a
        /// cql:// store.
        #[arg(long, value_name = "URL")]
        source: Option<String>,
    },
    /// Benchmark the store: large blobs vs the same volume of small ones (and, optionally, unchunked and mixed
    /// phases), with the probe's hardware reference; deletes its keys at the end.
    Bench(saltblob_bench::BenchArgs),
    /// Measure the storage under the store: sector sizes and O_DIRECT bandwidth of the embedded store's device,
    /// or single-row throughput of a cluster store.
    Probe(saltblob_bench::ProbeArgs),
    /// Reclaim space: replaced and deleted versions past the grace period, and puts abandoned by a writer that
    /// died (intent expired); then let the engine return the space to the file system.
    Gc(maintenance::GcArgs),
    /// Check every blob (manifest, every chunk present once and in place, checksums, digest) and list orphaned
    /// chunks; exit code 4 if a blob is damaged. --repair removes orphans and nothing else.
    Fsck(maintenance::FsckArgs),
}

#[derive(Args, Debug)]
struct PutArgs {
    /// The key (1 to 1024 bytes).
    key: String,
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
    /// MIME type stored with the blob.
    #[arg(long)]
    content_type: Option<String>,
}

fn parse_codec(s: &str) -> Result<Codec, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

fn parse_version(s: &str) -> Result<VersionId, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// A failure and its exit code.
struct Failure {
    message: String,
    code: u8,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::NotFound { .. } => 3,
            e if e.is_corruption() => 4,
            Error::InvalidKey { .. }
            | Error::InvalidArgument { .. }
            | Error::InvalidUrl { .. }
            | Error::RangeNotSatisfiable { .. }
            | Error::AlreadyExists { .. }
            | Error::PreconditionFailed { .. }
            | Error::TooLarge { .. }
            | Error::SizeMismatch { .. } => 2,
            _ => 1,
        };
        Failure {
            message: e.to_string(),
            code,
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure {
            message: format!("i/o error: {e}"),
            code: 1,
        }
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        code: 2,
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SALTBLOB_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("saltblob: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(run(cli));
    drop(runtime);
    if std::env::var_os("SALTBLOB_REPORT_PEAK_RSS").is_some() {
        report_peak_rss();
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("saltblob: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// Caps glibc malloc at two arenas before any thread starts. Chunk buffers are allocated and freed on many
/// threads (Tokio workers, RocksDB's writers and flushers); with glibc's default of 8 arenas per core, a 1 GiB
/// streamed put kept ~60 MiB more resident in half-empty arenas (measured: 190 MiB peak against 133 MiB).
#[allow(unsafe_code)]
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator tuning; it is called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Prints the process's peak resident memory (the kernel's `VmHWM`) to stderr as `peak_rss_kib=N`; used by the
/// memory tests.
fn report_peak_rss() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kib) = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    {
        eprintln!("peak_rss_kib={kib}");
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let url = cli
        .store
        .clone()
        .unwrap_or_else(|| saltblob::DEFAULT_STORE_URL.to_owned());
    // Bad input is reported before the store is opened (or created): it changes nothing.
    let key = match &cli.command {
        Command::Put(PutArgs { key, .. })
        | Command::Get { key, .. }
        | Command::Head { key, .. }
        | Command::Rm { key }
        | Command::Describe { key, .. } => Some(key.clone()),
        Command::Ls { .. }
        | Command::Demo { .. }
        | Command::ImportSalted { .. }
        | Command::Bench(_)
        | Command::Probe(_)
        | Command::Gc(_)
        | Command::Fsck(_) => None,
    };
    if let Some(key) = &key {
        saltblob::store::validate_key(key.as_bytes())?;
    }
    // `bench` writes; `probe` measures the device of a store that may not exist yet (it creates nothing).
    let read_only = !matches!(
        cli.command,
        Command::Put(_)
            | Command::Demo { .. }
            | Command::ImportSalted { .. }
            | Command::Bench(_)
            | Command::Probe(_)
    );
    if read_only && let Some(path) = saltblob::missing_local_store(&url) {
        return match key {
            Some(key) => Err(Failure {
                message: format!(
                    "not found: no blob with key \"{key}\" (there is no store at {} yet; pass --store or set SALTBLOB_STORE)",
                    path.display()
                ),
                code: 3,
            }),
            None => {
                if matches!(cli.command, Command::Gc(_) | Command::Fsck(_)) {
                    eprintln!(
                        "saltblob: there is no store at {} yet: nothing to do",
                        path.display()
                    );
                }
                Ok(())
            }
        };
    }
    // bench and probe open the store themselves, with their own configuration (an embedded store can be open
    // only once per process).
    match cli.command {
        Command::Bench(args) => {
            saltblob_bench::bench(&url, &args, cli.quiet).await?;
            return Ok(());
        }
        Command::Probe(args) => {
            saltblob_bench::probe(&url, &args, cli.quiet).await?;
            return Ok(());
        }
        _ => {}
    }
    let mut config = StoreConfig::default();
    if let Some(lease) = cli.intent_lease {
        config = config.with_intent_lease(lease);
    }
    let store = saltblob::open(&url, config).await?;
    let quiet = cli.quiet;
    match cli.command {
        Command::Put(args) => put(&store, args, quiet).await?,
        Command::Get { key, output, range } => {
            get(&store, &key, output.as_deref(), range.as_deref(), quiet).await?
        }
        Command::Head { key, json } => {
            let m = store.head(&key).await?;
            if json {
                println!("{}", human::manifest_json(key.as_bytes(), &m));
            } else {
                println!("{}", human::manifest_text(key.as_bytes(), &m));
            }
        }
        Command::Rm { key } => match store.delete(&key).await? {
            Some(v) => eprintln!("deleted {key} (version {v})"),
            None => {
                return Err(Error::NotFound {
                    key: key.as_bytes().into(),
                }
                .into());
            }
        },
        Command::Ls { prefix, long } => ls(&store, prefix.as_deref().unwrap_or(""), long).await?,
        Command::Describe { key, json } => {
            let d = store.describe(&key).await?;
            if json {
                println!("{}", human::describe_json(&d));
            } else {
                println!("{}", human::manifest_text(&d.key, &d.manifest));
                if !d.bytes_per_salt.is_empty() {
                    println!(
                        "bytes per salt: {}",
                        human::per_salt_summary(&d.bytes_per_salt)
                    );
                }
            }
        }
        Command::Demo { small } => demo::run(&store, small).await?,
        Command::ImportSalted { table, source } => {
            import_salted(&store, &table, source.as_deref().unwrap_or(&url)).await?
        }
        Command::Gc(args) => return maintenance::gc(&store, &args).await,
        Command::Fsck(args) => return maintenance::fsck(&store, &args).await,
        // Run above, before the store is opened.
        Command::Bench(_) | Command::Probe(_) => {}
    }
    // Reclaim replaced versions whose grace period has passed; a failure here does not fail the command.
    if let Err(e) = store.reclaim_due().await {
        eprintln!(
            "saltblob: warning: reclaiming replaced versions failed (will retry next time): {e}"
        );
    }
    Ok(())
}

/// `import-salted`: copies an article-schema table into the store, one line per blob, and fails (exit 4) if
/// any blob was incomplete.
async fn import_salted(store: &BlobStore, table: &str, source: &str) -> Result<(), Failure> {
    if !source.starts_with("cql://") {
        return Err(usage(format!(
            "import-salted reads a table on a cluster: pass --source cql://HOST:9042/KEYSPACE (the store is {source})"
        )));
    }
    let config = saltblob::cql::CqlConfig::from_url(source)?;
    let session = saltblob::cql::CqlStore::open_session(&config).await?;
    let mut report_line = |key: &[u8], outcome: &saltblob::cql::import::Outcome| match outcome {
        Ok(size) => println!(
            "imported {} ({})",
            String::from_utf8_lossy(key),
            human::short(*size)
        ),
        Err(reason) => println!("REJECTED {}: {reason}", String::from_utf8_lossy(key)),
    };
    let report = saltblob::cql::import::import_salted(
        &session,
        table,
        config.read_consistency,
        store,
        &mut report_line,
    )
    .await?;
    let bytes: u64 = report.imported.iter().map(|(_, n)| n).sum();
    eprintln!(
        "imported {} blob(s), {}; rejected {} incomplete blob(s)",
        report.imported.len(),
        human::short(bytes),
        report.rejected.len()
    );
    if report.rejected.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            message: format!(
                "{} blob(s) of {table} are incomplete and were not imported (listed above)",
                report.rejected.len()
            ),
            code: 4,
        })
    }
}

async fn put(store: &BlobStore, args: PutArgs, quiet: bool) -> Result<(), Failure> {
    let mut opts = PutOptions::new();
    if let Some(cs) = args.chunk_size {
        let cs = u32::try_from(cs).map_err(|_| {
            usage(format!(
                "invalid chunk size: {cs} bytes; it must be at most {} bytes",
                u32::MAX
            ))
        })?;
        opts = opts.with_chunk_size(cs);
    }
    if let Some(s) = args.max_salt {
        opts = opts.with_max_salt(s);
    }
    if let Some(c) = args.codec {
        opts = opts.with_codec(c);
    }
    if args.if_absent {
        opts = opts.with_condition(PutCondition::IfAbsent);
    }
    if let Some(v) = args.if_version {
        opts = opts.with_condition(PutCondition::IfVersion(v));
    }
    if let Some(ct) = args.content_type {
        opts = opts.with_content_type(ct);
    }
    let label = format!("put {}", args.key);
    let manifest = match args.file.as_deref() {
        None | Some("-") => {
            if std::io::stdin().is_terminal() {
                eprintln!(
                    "saltblob: reading {} from standard input; end with Ctrl-D",
                    args.key
                );
            }
            let reader = CountingReader {
                inner: tokio::io::stdin(),
                progress: Progress::new(&label, None, quiet),
            };
            put_from(store, &args.key, reader, &opts).await?
        }
        Some(path) => {
            let file = tokio::fs::File::open(path).await.map_err(|e| Failure {
                message: format!("cannot read {path}: {e}"),
                code: 2,
            })?;
            let meta = file.metadata().await?;
            if meta.is_dir() {
                return Err(usage(format!(
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
            put_from(store, &args.key, reader, &opts).await?
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
        args.key,
        manifest.version,
        human::short(manifest.size)
    );
    Ok(())
}

async fn put_from<R: AsyncRead + Unpin + Send>(
    store: &BlobStore,
    key: &str,
    reader: CountingReader<R>,
    opts: &PutOptions,
) -> Result<saltblob::Manifest, Failure> {
    let mut reader = reader;
    let result = store.put_stream(key, &mut reader, opts).await;
    reader.progress.finish();
    Ok(result?)
}

async fn get(
    store: &BlobStore,
    key: &str,
    output: Option<&str>,
    range: Option<&str>,
    quiet: bool,
) -> Result<(), Failure> {
    let mut stream = match range {
        None => store.get_stream(key).await?,
        Some(spec) => {
            let spec = parse_range(spec).map_err(|e| usage(format!("invalid range: {e}")))?;
            let size = store.head(key).await?.size;
            store.get_range_stream(key, spec.resolve(size)).await?
        }
    };
    let total = stream.range.end - stream.range.start;
    let mut progress = Progress::new(&format!("get {key}"), Some(total), quiet);
    match output {
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
        Some(path) => {
            let tmp = temp_path(Path::new(path));
            let result = async {
                let mut file = tokio::fs::File::create(&tmp).await.map_err(|e| Failure {
                    message: format!("cannot write {}: {e}", tmp.display()),
                    code: 1,
                })?;
                while let Some(piece) = stream.next().await {
                    let piece = piece?;
                    file.write_all(&piece).await?;
                    progress.add(piece.len() as u64);
                }
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

/// `dir/.name.saltblob-XXXX`, beside the destination so that the final rename stays on one filesystem.
fn temp_path(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    dest.with_file_name(format!(".{name}.saltblob-{:08x}", rand::random::<u32>()))
}

async fn ls(store: &BlobStore, prefix: &str, long: bool) -> Result<(), Failure> {
    let mut after: Option<bytes::Bytes> = None;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        let page = store
            .list_page(prefix.as_bytes(), after.as_deref(), 1000)
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.key.clone());
        for e in &page {
            let key = String::from_utf8_lossy(&e.key);
            let line = if long {
                let layout = match e.manifest.layout() {
                    saltblob::Layout::Inline => "inline".to_owned(),
                    saltblob::Layout::Chunked(l) => format!("{}x{}", l.chunk_count, l.salt_count),
                };
                format!(
                    "{:>12}  {:<10}  {}  {}  {key}",
                    e.manifest.size,
                    layout,
                    human::time(e.manifest.created_micros),
                    e.manifest.version
                )
            } else {
                key.into_owned()
            };
            if let Err(e) = writeln!(out, "{line}") {
                return if e.kind() == std::io::ErrorKind::BrokenPipe {
                    Ok(())
                } else {
                    Err(e.into())
                };
            }
        }
        if page.len() < 1000 {
            break;
        }
    }
    Ok(())
}
