//! The commands: one struct per command with its arguments, and its [`Command`] implementation saying which key
//! it names, whether it only reads, and how it runs. [`Commands`] is clap's list of them, in help order.

mod bench;
mod demo;
mod fsck;
mod gc;
mod get;
mod import_salted;
mod inspect;
mod ls;
mod put;
mod rm;
mod serve;

use std::path::Path;

use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, StoreConfig};

use crate::failure::{Failure, one_line};
use crate::human::KeyArg;

/// A command of the `saltblob` tool.
pub trait Command {
    /// The key the command names, if any; it is checked before the store is opened, so that bad input changes
    /// nothing.
    fn key(&self) -> Option<&KeyArg> {
        None
    }

    /// Whether the command only reads the store: when the embedded store does not exist, it is not created
    /// (opening creates it) and [`Command::without_store`] answers instead.
    fn is_read_only(&self) -> bool {
        true
    }

    /// The outcome of a read-only command when there is no embedded store at `dir` yet: "not found" for a
    /// command that names a key, success with nothing printed otherwise.
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        match self.key() {
            Some(key) => Err(Failure::new(
                Failure::NOT_FOUND,
                format!(
                    "not found: no blob with key \"{}\" (there is no store at {} yet; pass --store or set SALTBLOB_STORE)",
                    key.shown(),
                    dir.display()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Runs the command.
    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>>;
}

/// The commands, as clap parses them; the doc comment of each is its line in `saltblob --help`.
#[derive(clap::Subcommand, Debug)]
pub enum Commands {
    /// Store FILE (or standard input when FILE is absent or "-") under KEY.
    Put(put::Put),
    /// Write the blob under KEY to standard output or to a file.
    Get(get::Get),
    /// Show the manifest of KEY's current version.
    Head(inspect::Head),
    /// Delete KEY (its chunks are reclaimed after the grace period).
    Rm(rm::Rm),
    /// List keys starting with PREFIX (all keys when absent).
    Ls(ls::Ls),
    /// Show how KEY is laid out: layout, chunk size, chunk count, salt count, bytes per salt.
    Describe(inspect::Describe),
    /// Store and read back a mixed-size set of blobs (bytes to 60 MiB), verify every digest, print each layout
    /// and latency.
    Demo(demo::Demo),
    /// Copy every blob of a table in the salting article's schema ((key, salt), chunk_id; chunk, total_chunks,
    /// salt_cardinality) into the store, verifying each is complete; incomplete blobs are reported, not copied.
    ImportSalted(import_salted::ImportSalted),
    /// Benchmark the store: large blobs vs the same volume of small ones (and, optionally, unchunked and mixed
    /// phases), with the probe's hardware reference; deletes its keys at the end.
    Bench(bench::Bench),
    /// Measure the storage under the store: sector sizes and O_DIRECT bandwidth of the embedded store's device,
    /// or single-row throughput of a cluster store.
    Probe(bench::Probe),
    /// Reclaim space: replaced and deleted versions past the grace period, and puts abandoned by a writer that
    /// died (intent expired); then let the engine return the space to the file system.
    Gc(gc::Gc),
    /// Check every blob (manifest, every chunk present once and in place, checksums, digest) and list orphaned
    /// chunks; exit code 4 if a blob is damaged. --repair removes orphans and nothing else.
    Fsck(fsck::Fsck),
    /// Serve the store over S3 (awscli, boto3, any S3 SDK); see docs/s3.md. Stops on SIGINT or SIGTERM, letting
    /// requests in flight finish.
    Serve(serve::Serve),
}

impl Commands {
    /// The command parsed.
    pub fn command(&self) -> &dyn Command {
        match self {
            Commands::Put(c) => c,
            Commands::Get(c) => c,
            Commands::Head(c) => c,
            Commands::Rm(c) => c,
            Commands::Ls(c) => c,
            Commands::Describe(c) => c,
            Commands::Demo(c) => c,
            Commands::ImportSalted(c) => c,
            Commands::Bench(c) => c,
            Commands::Probe(c) => c,
            Commands::Gc(c) => c,
            Commands::Fsck(c) => c,
            Commands::Serve(c) => c,
        }
    }
}

/// Says that there is no store at `dir`, hence nothing for a maintenance command to do.
fn nothing_to_do(dir: &Path) {
    eprintln!(
        "saltblob: there is no store at {} yet: nothing to do",
        dir.display()
    );
}

/// What every command is given: the global options.
#[derive(Debug)]
pub struct Context {
    /// The store's URL.
    pub url: String,
    /// No progress bars.
    pub quiet: bool,
    /// The configuration the store is opened with.
    pub config: StoreConfig,
}

impl Context {
    /// Opens the store.
    pub async fn open(&self) -> Result<BlobStore, Failure> {
        Ok(saltblob::open(&self.url, self.config.clone()).await?)
    }

    /// Opens the store, runs `body` on it and, when it succeeds, reclaims the replaced versions whose grace
    /// period has passed; a failure to reclaim is a warning, not a failure of the command.
    pub async fn with_store(
        &self,
        body: impl AsyncFnOnce(&BlobStore) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let store = self.open().await?;
        body(&store).await?;
        if let Err(e) = store.reclaim_due().await {
            eprintln!(
                "saltblob: warning: reclaiming replaced versions failed (will retry next time): {}",
                one_line(&e)
            );
        }
        Ok(())
    }
}
