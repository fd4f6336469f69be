//! `saltblob ls`: lists keys, one a line, or with size, layout, time and version.

use std::io::Write;

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, ListEntry};

use super::{Command, Context};
use crate::failure::Failure;
use crate::human::{self, KeyArg, parse_key};

/// Arguments of `saltblob ls`.
#[derive(clap::Args, Debug)]
pub struct Ls {
    /// Key prefix, %-escaped as keys are printed: %XX is a byte, %25 a '%'.
    #[arg(value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// Show size, layout and version of each key.
    #[arg(short, long)]
    long: bool,
}

impl Command for Ls {
    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.with_store(async |store| self.ls(store).await))
    }
}

impl Ls {
    /// Prints the listing as it is read, a page at a time; a reader that went away (`saltblob ls | head`) ends it without an error.
    async fn ls(&self, store: &BlobStore) -> Result<(), Failure> {
        let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
        let mut entries = store.list_stream(prefix);
        let mut out = std::io::stdout().lock();
        while let Some(entry) = entries.next().await {
            if let Err(e) = writeln!(out, "{}", self.line(&entry?)) {
                return if e.kind() == std::io::ErrorKind::BrokenPipe {
                    Ok(())
                } else {
                    Err(e.into())
                };
            }
        }
        Ok(())
    }

    /// The key, or with `--long`: size, layout, creation time, version and key; the key %-escaped
    /// ([`human::escape_key`]), as `get`, `head` and `rm` accept it.
    fn line(&self, entry: &ListEntry) -> String {
        let key = human::escape_key(&entry.key);
        if !self.long {
            return key;
        }
        let m = &entry.manifest;
        let layout = match m.layout() {
            saltblob::Layout::Inline => "inline".to_owned(),
            saltblob::Layout::Chunked(l) => format!("{}x{}", l.chunk_count, l.salt_count),
        };
        format!(
            "{:>12}  {:<10}  {}  {}  {key}",
            m.size,
            layout,
            human::time(m.created_micros),
            m.version
        )
    }
}
