//! `saltblob rm`: deletes a key.

use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Error};

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::{KeyArg, parse_key};

/// Arguments of `saltblob rm`.
#[derive(clap::Args, Debug)]
pub struct Rm {
    /// The key, %-escaped as `ls` prints it: %XX is a byte (e.g. %00), %25 a '%'.
    #[arg(value_parser = parse_key)]
    key: KeyArg,
}

impl Command for Rm {
    fn key(&self) -> Option<&KeyArg> {
        Some(&self.key)
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.with_store(async |store| self.rm(store).await))
    }
}

impl Rm {
    /// Deletes the key; a key that holds no blob is "not found" (exit code 3). A key whose manifest is damaged
    /// is deleted too (its version is then unknown).
    async fn rm(&self, store: &BlobStore) -> Result<(), Failure> {
        let damaged = store
            .head(&self.key)
            .await
            .is_err_and(|e| e.is_corruption());
        match store.delete(&self.key).await? {
            Some(v) => {
                eprintln!("deleted {} (version {v})", self.key.shown());
                Ok(())
            }
            None if damaged => {
                eprintln!(
                    "deleted {} (its manifest was damaged; `saltblob fsck --repair` removes its chunks)",
                    self.key.shown()
                );
                Ok(())
            }
            None => Err(Error::NotFound {
                key: self.key.0.as_slice().into(),
            }
            .into()),
        }
    }
}
