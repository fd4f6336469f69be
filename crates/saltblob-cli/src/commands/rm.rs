//! `saltblob rm`: deletes a key.

use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Error};

use super::{Command, Context};
use crate::failure::Failure;

/// Arguments of `saltblob rm`.
#[derive(clap::Args, Debug)]
pub struct Rm {
    /// The key.
    key: String,
}

impl Command for Rm {
    fn key(&self) -> Option<&str> {
        Some(&self.key)
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.with_store(async |store| self.rm(store).await))
    }
}

impl Rm {
    /// Deletes the key; a key that holds no blob is "not found" (exit code 3).
    async fn rm(&self, store: &BlobStore) -> Result<(), Failure> {
        match store.delete(&self.key).await? {
            Some(v) => {
                eprintln!("deleted {} (version {v})", self.key);
                Ok(())
            }
            None => Err(Error::NotFound {
                key: self.key.as_bytes().into(),
            }
            .into()),
        }
    }
}
