//! What every command uses: the [`Command`] trait and the [`Context`] it runs in (the global options, the
//! store).

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

/// Says that there is no store at `dir`, hence nothing for a maintenance command to do.
pub(crate) fn nothing_to_do(dir: &Path) {
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

    /// Opens the store and runs `body` on it, and nothing else: the read-only commands (`get`, `ls`, `head`,
    /// `describe`) write nothing, not even a reclaim pass (deleting is for the commands that write and `gc`).
    pub async fn reading_store(
        &self,
        body: impl AsyncFnOnce(&BlobStore) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let store = self.open().await?;
        body(&store).await
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
