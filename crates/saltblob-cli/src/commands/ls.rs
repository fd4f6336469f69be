//! `saltblob ls`: lists keys, one a line, or with size, layout, time and version.

use std::io::Write;

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Manifest};

use super::command::{Command, Context};
use crate::failure::{Failure, one_line};
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
        Box::pin(context.reading_store(async |store| self.ls(store).await))
    }
}

impl Ls {
    /// Prints the listing as it is read, a page at a time; a reader that went away (`saltblob ls | head`) ends it without an error.
    ///
    /// A key whose manifest is damaged is named on stderr, in its place in the listing, and the listing goes on;
    /// stdout holds only the keys that read cleanly, and the command then fails with the exit code of damage.
    async fn ls(&self, store: &BlobStore) -> Result<(), Failure> {
        let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
        let mut entries = store.list_stream(prefix);
        let mut out = std::io::stdout().lock();
        let mut damaged = 0u64;
        while let Some(entry) = entries.next().await {
            let entry = entry?;
            let manifest = match &entry.manifest {
                Ok(manifest) => manifest,
                Err(e) => {
                    damaged += 1;
                    // After the lines before it, so that the two streams interleave in listing order.
                    let _ = out.flush();
                    eprintln!("saltblob: damaged: {}", one_line(e));
                    continue;
                }
            };
            if let Err(e) = writeln!(out, "{}", self.line(&entry.key, manifest)) {
                return if e.kind() == std::io::ErrorKind::BrokenPipe {
                    Ok(())
                } else {
                    Err(e.into())
                };
            }
        }
        if damaged > 0 {
            return Err(Failure::new(
                Failure::DAMAGED,
                format!(
                    "{damaged} listed key(s) have a damaged manifest (named above); `saltblob rm KEY` removes \
                     one, `saltblob fsck` checks the whole store"
                ),
            ));
        }
        Ok(())
    }

    /// The key, or with `--long`: size, layout, creation time, version and key; the key %-escaped
    /// ([`human::escape_key`]), as `get`, `head` and `rm` accept it.
    fn line(&self, key: &[u8], m: &Manifest) -> String {
        let key = human::escape_key(key);
        if !self.long {
            return key;
        }
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
