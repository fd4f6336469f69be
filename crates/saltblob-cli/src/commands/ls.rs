//! `saltblob ls`: lists keys, one a line, or with size, layout, time and version, or as JSON lines; with a
//! delimiter, the keys that hold it after the prefix are listed once as their common prefix.

use std::io::Write;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Manifest};

use super::command::{Command, Context};
use crate::failure::{Failure, one_line};
use crate::human::{self, KeyArg, parse_key};

/// Width of the columns of `ls -l` before the key: size, layout, time and version, with their gaps.
const LONG_COLUMNS: usize = 12 + 2 + 10 + 2 + 24 + 2 + 32 + 2;

/// Arguments of `saltblob ls`.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct Ls {
    /// Key prefix, %-escaped as keys are printed: %XX is a byte, %25 a '%'.
    #[arg(value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// Show size, layout, creation time and version of each key.
    #[arg(short, long)]
    long: bool,
    /// With -l (or --summarize), sizes for people: 1.5 MiB rather than 1572864.
    #[arg(short = 'h', long)]
    human_readable: bool,
    /// One JSON object a line: {"key", "size", "version", "created", "layout", "content_type"}, a common prefix as
    /// {"prefix"}, the --summarize totals as {"total_objects", "total_size"}; keys %-escaped.
    #[arg(long)]
    json: bool,
    /// List the keys that hold DELIM after the prefix once, as their common prefix up to and including DELIM:
    /// `PRE photos/` (as awscli), or {"prefix": "photos/"} with --json. %-escaped, as keys.
    #[arg(long, value_name = "DELIM", value_parser = parse_key)]
    delimiter: Option<KeyArg>,
    /// End with the number of keys listed and their total size.
    #[arg(long)]
    summarize: bool,
    /// Print help (-h is --human-readable here).
    #[arg(long, action = clap::ArgAction::HelpLong)]
    help: Option<bool>,
}

impl Command for Ls {
    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.reading_store(async |store| self.ls(store).await))
    }
}

impl Ls {
    /// Prints the listing as it is read, a page at a time; a reader that went away (`saltblob ls | head`) ends
    /// it without an error.
    ///
    /// A key whose manifest is damaged is named on stderr, in its place in the listing, and the listing goes on;
    /// stdout holds only the keys that read cleanly, and the command then fails with the exit code of damage.
    async fn ls(&self, store: &BlobStore) -> Result<(), Failure> {
        let mut out = std::io::stdout().lock();
        match self.list(store, &mut out).await {
            Err(Listing::Failed(f)) => Err(f),
            Err(Listing::Closed) => Ok(()),
            Ok(0) => Ok(()),
            Ok(damaged) => Err(Failure::new(
                Failure::DAMAGED,
                format!(
                    "{damaged} listed key(s) have a damaged manifest (named above); `saltblob rm KEY` removes \
                     one, `saltblob fsck` checks the whole store"
                ),
            )),
        }
    }

    /// Writes the listing to `out`; the number of damaged keys.
    async fn list(&self, store: &BlobStore, out: &mut impl Write) -> Result<u64, Listing> {
        let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
        let delimiter = self.delimiter.as_ref().filter(|d| !d.0.is_empty());
        let (mut damaged, mut objects, mut total) = (0u64, 0u64, 0u64);
        let mut start_after: Option<Bytes> = None;
        'scan: loop {
            let mut entries = store.list_stream_after(prefix, start_after.take());
            while let Some(entry) = entries.next().await {
                let entry = entry.map_err(|e| Listing::Failed(e.into()))?;
                if let Some(group) = delimiter.and_then(|d| common_prefix(&entry.key, prefix, &d.0))
                {
                    writeln!(out, "{}", self.prefix_line(group))?;
                    // On past every key of the group: the group padded with 0xFF to the longest key sorts after
                    // them all.
                    let mut past = group.to_vec();
                    past.resize(saltblob::MAX_KEY_LEN.max(group.len()), 0xFF);
                    start_after = Some(Bytes::from(past));
                    continue 'scan;
                }
                let manifest = match &entry.manifest {
                    Ok(manifest) => manifest,
                    Err(e) => {
                        damaged += 1;
                        // After the lines before it, so that the two streams interleave in listing order.
                        out.flush()?;
                        eprintln!("saltblob: damaged: {}", one_line(e));
                        continue;
                    }
                };
                objects += 1;
                total += manifest.size;
                writeln!(out, "{}", self.line(&entry.key, manifest))?;
            }
            break;
        }
        if self.summarize {
            if self.json {
                let totals = serde_json::json!({ "total_objects": objects, "total_size": total });
                writeln!(out, "{totals}")?;
            } else {
                writeln!(
                    out,
                    "\nTotal Objects: {objects}\n   Total Size: {}",
                    self.size(total)
                )?;
            }
        }
        Ok(damaged)
    }

    /// A size, for people with `-h`.
    fn size(&self, n: u64) -> String {
        if self.human_readable {
            human::short(n)
        } else {
            n.to_string()
        }
    }

    /// The line of a common prefix: `PRE prefix` (under the key column with `-l`), or its JSON.
    fn prefix_line(&self, group: &[u8]) -> String {
        let group = human::escape_key(group);
        if self.json {
            serde_json::json!({ "prefix": group }).to_string()
        } else if self.long {
            format!("{:>LONG_COLUMNS$}{group}", "PRE ")
        } else {
            format!("PRE {group}")
        }
    }

    /// The key, or with `--long`: size, layout, creation time, version and key; or its JSON. The key %-escaped
    /// ([`human::escape_key`]), as `get`, `head` and `rm` accept it.
    fn line(&self, key: &[u8], m: &Manifest) -> String {
        let key = human::escape_key(key);
        if self.json {
            return serde_json::json!({
                "key": key,
                "size": m.size,
                "version": m.version.to_string(),
                "created": human::time(m.created_micros),
                "layout": m.layout_kind(),
                "content_type": m.content_type,
            })
            .to_string();
        }
        if !self.long {
            return key;
        }
        let layout = match m.layout() {
            saltblob::Layout::Inline => "inline".to_owned(),
            saltblob::Layout::Chunked(l) => format!("{}x{}", l.chunk_count, l.salt_count),
        };
        format!(
            "{:>12}  {:<10}  {}  {}  {key}",
            self.size(m.size),
            layout,
            human::time(m.created_micros),
            m.version
        )
    }
}

/// Why a listing stopped early.
enum Listing {
    /// The store failed.
    Failed(Failure),
    /// Stdout was closed (`saltblob ls | head`): not an error.
    Closed,
}

impl From<std::io::Error> for Listing {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Listing::Closed
        } else {
            Listing::Failed(e.into())
        }
    }
}

/// `key` up to and including the first `delimiter` after `prefix`; `None` when it has none there.
fn common_prefix<'k>(key: &'k [u8], prefix: &[u8], delimiter: &[u8]) -> Option<&'k [u8]> {
    let rest = key.get(prefix.len()..)?;
    let at = rest.windows(delimiter.len()).position(|w| w == delimiter)?;
    key.get(..prefix.len() + at + delimiter.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefixes_end_at_the_first_delimiter_after_the_prefix() {
        assert_eq!(common_prefix(b"a/b/c", b"", b"/"), Some(&b"a/"[..]));
        assert_eq!(common_prefix(b"a/b/c", b"a/", b"/"), Some(&b"a/b/"[..]));
        assert_eq!(common_prefix(b"a/b", b"a/", b"/"), None);
        assert_eq!(common_prefix(b"x--y", b"", b"--"), Some(&b"x--"[..]));
    }
}
