//! `saltblob head` and `saltblob describe`: what a key holds and how it is laid out, in text or JSON.

use futures::future::LocalBoxFuture;
use saltblob::BlobStore;

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::{self, KeyArg, parse_key};

/// Arguments of `saltblob head`.
#[derive(clap::Args, Debug)]
pub struct Head {
    /// The key, %-escaped as `ls` prints it: %XX is a byte (e.g. %00), %25 a '%'.
    #[arg(value_parser = parse_key)]
    key: KeyArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Command for Head {
    fn key(&self) -> Option<&KeyArg> {
        Some(&self.key)
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.reading_store(async |store| self.head(store).await))
    }
}

impl Head {
    async fn head(&self, store: &BlobStore) -> Result<(), Failure> {
        let m = store.head(&self.key).await?;
        let key = &self.key.0;
        if self.json {
            println!("{}", human::manifest_json(key, &m));
        } else {
            println!("{}", human::manifest_text(key, &m));
        }
        Ok(())
    }
}

/// Arguments of `saltblob describe`.
#[derive(clap::Args, Debug)]
pub struct Describe {
    /// The key, %-escaped as `ls` prints it: %XX is a byte (e.g. %00), %25 a '%'.
    #[arg(value_parser = parse_key)]
    key: KeyArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Command for Describe {
    fn key(&self) -> Option<&KeyArg> {
        Some(&self.key)
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.reading_store(async |store| self.describe(store).await))
    }
}

impl Describe {
    async fn describe(&self, store: &BlobStore) -> Result<(), Failure> {
        let d = store.describe(&self.key).await?;
        if self.json {
            println!("{}", human::describe_json(&d));
        } else {
            println!("{}", human::manifest_text(&d.key, &d.manifest));
            if let Some(storage) = &d.storage {
                println!("stored in:    {storage}");
            }
            if !d.bytes_per_salt.is_empty() {
                println!(
                    "bytes per salt: {}",
                    human::per_salt_summary(&d.bytes_per_salt)
                );
            }
        }
        Ok(())
    }
}
