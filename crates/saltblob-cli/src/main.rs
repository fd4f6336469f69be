//! `saltblob`: the command-line tool. Every command takes `--store URL` (or `SALTBLOB_STORE`); without it, the
//! embedded store in `./saltblob-data` is used.
//!
//! Exit codes: 0 success, 1 failure (backend, I/O), 2 invalid usage or input, 3 key not found, 4 corrupt data.
//!
//! Modules: [`commands`] holds one struct per command (its arguments and how it runs), [`failure`] the message
//! and exit code of a failed command, [`human`] parsing and printing for people, [`progress`] progress bars.
//! This file parses the command line, checks what can be checked before the store is opened, and runs the
//! command.

mod commands;
mod failure;
mod human;
mod progress;

use std::process::ExitCode;

use clap::Parser;
use saltblob::StoreConfig;

use crate::commands::{Commands, Context};
use crate::failure::Failure;

/// saltblob: one key-value store for values of any size, from a few bytes to many gigabytes.
#[derive(Parser, Debug)]
#[command(name = "saltblob", version, about, long_about = None)]
struct Cli {
    /// Store URL: rocksdb:///path/to/dir (embedded), cql://host1,host2:9042/keyspace (ScyllaDB or Cassandra)
    /// or memory://. Defaults to the embedded store in
    /// ./saltblob-data.
    /// A password in it is never shown (not in this help, errors or bench output).
    #[arg(
        long,
        global = true,
        env = "SALTBLOB_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
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
    command: Commands,
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SALTBLOB_LOG")
                // The server's access log and gc passes are at info level; s3s logs every refused request as
                // an error, which the access log already shows with its status; the CQL driver logs each failed
                // connection attempt, which saltblob's one-line error already explains (`SALTBLOB_LOG=debug`
                // shows them).
                .unwrap_or_else(|_| "warn,s3s=off,scylla=off,saltblob_server=info".into()),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: the server's access log is often a file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("saltblob: error: cannot start the async runtime: {e}");
            return ExitCode::from(Failure::FAILED);
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

/// Checks the command's key, answers a read-only command on a store that does not exist without creating it,
/// and runs the command.
async fn run(cli: Cli) -> Result<(), Failure> {
    let mut config = StoreConfig::default();
    if let Some(lease) = cli.intent_lease {
        config = config.with_intent_lease(lease);
    }
    let context = Context {
        url: cli
            .store
            .unwrap_or_else(|| saltblob::DEFAULT_STORE_URL.to_owned()),
        quiet: cli.quiet,
        config,
    };
    let command = cli.command.command();
    // Bad input is reported before the store is opened (or created): it changes nothing.
    if let Some(key) = command.key() {
        saltblob::store::validate_key(key.as_ref())?;
    }
    if command.is_read_only()
        && let Some(dir) = saltblob::missing_local_store(&context.url)
    {
        return command.without_store(&dir);
    }
    command.run(&context).await
}
