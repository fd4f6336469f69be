//! `saltblob`: the command-line tool. Every command takes `--store URL` (or `SALTBLOB_STORE`); without it, the
//! embedded store in `./saltblob-data` is used.
//!
//! Exit codes: 0 success, 1 failure (backend, I/O), 2 invalid usage or input, 3 key not found, 4 corrupt data.
//!
//! Modules: [`commands`] holds one struct per command (its arguments and how it runs), [`admin`] the admin
//! socket of `serve` (which `backup` uses), [`failure`] the message
//! and exit code of a failed command, [`human`] parsing and printing for people, [`progress`] progress bars.
//! This file parses the command line, checks what can be checked before the store is opened, and runs the
//! command.

mod access_keys;
mod admin;
mod commands;
mod failure;
mod human;
mod profile;
mod progress;
mod secret_file;

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
    /// A named store of the configuration file ($SALTBLOB_CONFIG, else ~/.config/saltblob/config.toml):
    /// `[profiles.NAME]` with `store = "URL"` and, for a password kept off the command line, `password_file =
    /// "FILE"` (mode 0600) or `password_env = "VARIABLE"`. Not with --store.
    #[arg(long, global = true, env = "SALTBLOB_PROFILE", value_name = "NAME")]
    profile: Option<String>,
    /// No progress bars.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// How long a put's intent stays valid without renewal (renewed every third of it while the put runs); gc
    /// reclaims the chunks of a put whose writer died once it expires. Defaults to 60s.
    #[arg(long, global = true, env = "SALTBLOB_INTENT_LEASE", value_name = "DURATION",
          value_parser = crate::human::parse_duration)]
    intent_lease: Option<std::time::Duration>,
    /// How logs are written to stderr: text (for people) or json (one JSON object per line, for log
    /// collectors). SALTBLOB_LOG sets which logs are written.
    #[arg(
        long,
        global = true,
        env = "SALTBLOB_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Commands,
}

/// The command line's definition, for what is made from it: shell completions and the manual page.
pub(crate) fn cli_definition() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    // Before any store opens: its shares of the open files are read from the soft limit then.
    saltblob::fds::raise_open_files_limit();
    let cli = Cli::parse();
    init_logging(cli.log_format);
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

/// The default log filter. The server's access log and gc passes are at info level; s3s logs every refused
/// request as an error, which the access log already shows with its status; the CQL driver logs each failed
/// connection attempt, which saltblob's one-line error already explains (`SALTBLOB_LOG=debug` shows them).
const DEFAULT_LOG_FILTER: &str = "warn,s3s=off,scylla=off,saltblob_server=info";

/// How logs are written ([`Cli::log_format`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// One line of text per event.
    Text,
    /// One JSON object per event and line (`timestamp`, `level`, `fields`, `target`).
    Json,
}

/// Logs to stderr in `format`, filtered by `SALTBLOB_LOG` (else [`DEFAULT_LOG_FILTER`]) and by [`may_log`]
/// whatever `SALTBLOB_LOG` says.
fn init_logging(format: LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt as _;
    // Colours only on a terminal: the server's access log is often a file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let setting = std::env::var("SALTBLOB_LOG").ok();
    subscriber(format, setting.as_deref(), ansi, std::io::stderr).init();
}

/// The log subscriber: events in `format` (text with colours if `ansi`) to `writer`, filtered by the
/// `SALTBLOB_LOG` `setting` and by [`may_log`].
fn subscriber<W>(
    format: LogFormat,
    setting: Option<&str>,
    ansi: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter(setting))
        .with_writer(writer);
    let may_log = tracing_subscriber::filter::filter_fn(may_log);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish().with(may_log)),
        LogFormat::Json => Box::new(builder.json().with_ansi(false).finish().with(may_log)),
    }
}

/// The filter `SALTBLOB_LOG` (`setting`) asks for, or [`DEFAULT_LOG_FILTER`] when it is unset or invalid.
fn log_filter(setting: Option<&str>) -> tracing_subscriber::EnvFilter {
    setting
        .and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER))
}

/// Whether an event or span may be logged at all. s3s's debug logs carry what lets a reader forge requests:
/// the expected signature of every refused request (`s3s::ops::signature`), and whole requests with their
/// `Authorization` header or presigned URL (`s3s::service`, and the form fields in `s3s::ops`). Those are
/// never logged, whatever `SALTBLOB_LOG` says (its span directives included); s3s's warnings and errors are.
fn may_log(meta: &tracing::Metadata<'_>) -> bool {
    let target = meta.target();
    let under = |module: &str| {
        target
            .strip_prefix(module)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    };
    if under("s3s::ops::signature") || under("s3s::sig_v2") || under("s3s::sig_v4") {
        return false;
    }
    !(under("s3s") && *meta.level() > tracing::Level::WARN)
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
    let url = match (cli.store, cli.profile) {
        (Some(_), Some(name)) => {
            return Err(Failure::usage(format!(
                "--store (or SALTBLOB_STORE) and --profile {name} both name a store: give one"
            )));
        }
        (Some(url), None) => url,
        (None, Some(name)) => {
            let path = profile::config_path().ok_or_else(|| {
                Failure::usage(format!(
                    "--profile {name}: no configuration file (set {} or HOME)",
                    profile::CONFIG_ENV
                ))
            })?;
            profile::store_url(&path, &name).map_err(Failure::usage)?
        }
        (None, None) => saltblob::DEFAULT_STORE_URL.to_owned(),
    };
    let context = Context {
        url,
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A log writer that keeps what it is given.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(buf);
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Whatever `SALTBLOB_LOG` enables, s3s's logs of expected signatures and whole requests are not written;
    /// s3s's errors and saltblob's own debug logs are. In either log format.
    #[test]
    fn signatures_are_never_logged_whatever_saltblob_log_says() {
        for (format, setting) in [LogFormat::Text, LogFormat::Json]
            .into_iter()
            .flat_map(|f| {
                [
                    "trace",
                    "s3s=trace,s3s::ops::signature=trace",
                    "[check]=trace",
                ]
                .map(|s| (f, s))
            })
        {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = subscriber(format, Some(setting), false, move || writer.clone());
            tracing::subscriber::with_default(subscriber, || {
                let span = tracing::debug_span!(target: "s3s::ops::signature", "check");
                let _entered = span.enter();
                tracing::debug!(target: "s3s::ops::signature", expected = "f00dfeed", "signature mismatch");
                tracing::debug!(target: "s3s::service", req = "X-Amz-Signature=cafebabe", "request");
                tracing::error!(target: "s3s::ops", "failed to prepare");
                tracing::debug!(target: "saltblob_server::own", "own debug line");
            });
            let log = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
            if setting == "trace" {
                assert!(
                    log.contains("failed to prepare") && log.contains("own debug line"),
                    "{log}"
                );
            }
            assert!(
                !log.contains("f00dfeed") && !log.contains("cafebabe"),
                "{format:?} {setting}: a signature in the log:\n{log}"
            );
            if format == LogFormat::Json {
                for line in log.lines() {
                    let event: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                    assert!(
                        event.get("level").is_some() && event.get("fields").is_some(),
                        "{line}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_invalid_saltblob_log_falls_back_to_the_default() {
        assert_eq!(
            log_filter(Some("=[")).to_string(),
            log_filter(None).to_string()
        );
    }
}
