//! `saltblob import`: reads a stream of `saltblob export` (`portable.rs`) from a file or standard input into the
//! store, one blob at a time, each streamed into a put whose digest is checked before the put can commit.
//!
//! A blob whose key already holds the same blob (size, attributes, encryption key and digest) is skipped, so that
//! a rerun of an interrupted import goes on where it stopped. A blob the store cannot take (its key is not in
//! the store's key provider, the backend fails) is named and the rest goes on; a stream that is corrupt or cut
//! short stops the import where it is damaged, every blob before it imported, naming the last complete key to
//! export again after.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::manifest::SEALED_METADATA_KEY;
use saltblob::{BlobStore, Error, LateMetadata, Manifest, PutOptions};
use tokio::io::AsyncRead;

use super::command::{Command, Context};
use super::export::shell_quoted;
use super::portable::{BlobHead, Decoder, Piece, Record, StreamError, Totals};
use super::transfer::plain_digest;
use crate::failure::{Failure, one_line};
use crate::human;
use crate::progress::Progress;

/// How far apart two expiry times may be and still be the same blob's: an import puts the time left as a TTL,
/// so the target's expiry is the source's give or take the time the put took.
const EXPIRY_SLACK_MICROS: u64 = 120_000_000;

/// Arguments of `saltblob import`.
#[derive(clap::Args, Debug)]
pub struct Import {
    /// The stream to read: FILE, or standard input when absent or "-".
    file: Option<OsString>,
    /// Print a summary as one JSON object on stdout: {"imported", "bytes", "skipped", "failed", "left_out",
    /// "errors": [{"key", "error"}], "complete", "stream": {"blobs", "bytes", "left_out"} (the trailer's counts; null
    /// when the stream was not read to its end), "last_key"}.
    #[arg(long)]
    json: bool,
}

/// The counts of an import, and its errors.
#[derive(Debug, Default)]
struct Summary {
    imported: u64,
    bytes: u64,
    /// Already there, or expired since the export.
    skipped: u64,
    failed: u64,
    /// Named in the stream as not exported.
    left_out: u64,
    errors: Vec<(String, String)>,
    /// The stream was read to its trailer, and what the trailer counts.
    complete: Option<Totals>,
    /// The last key read in full.
    last_key: Option<Vec<u8>>,
}

impl Summary {
    fn fail(&mut self, key: &[u8], error: String) {
        let shown = human::escape_key(key);
        eprintln!("saltblob: error: {shown}: {error}");
        self.failed += 1;
        self.errors.push((shown, error));
    }
}

/// What became of one blob record.
enum Outcome {
    Imported(u64),
    /// Already there, or expired since the export.
    Skipped,
    /// The exporter cut it short: why.
    LeftOut(String),
    /// The store did not take it: why.
    Failed(String),
}

/// Why a put fed from the stream stopped reading it.
enum Stop {
    /// The stream is damaged there.
    Damaged(StreamError),
    /// The exporter cut the blob short.
    Aborted(String),
}

impl Command for Import {
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            // The stream's header is read before the store is opened: a file that is not a stream changes
            // nothing.
            let input: Box<dyn AsyncRead + Unpin + Send> = match self.file.as_deref() {
                None => Box::new(tokio::io::stdin()),
                Some(p) if p.as_bytes() == b"-" => Box::new(tokio::io::stdin()),
                Some(p) => Box::new(tokio::fs::File::open(p).await.map_err(|e| {
                    Failure::usage(format!(
                        "cannot read {}: {}",
                        Path::new(p).display(),
                        one_line(&e)
                    ))
                })?),
            };
            let input = tokio::io::BufReader::with_capacity(1 << 20, input);
            let mut decoder = Decoder::open(input)
                .await
                .map_err(|e| stream_failure(&e, None))?;
            let mut summary = Summary::default();
            let outcome = context
                .with_store(async |store| {
                    self.import(store, &mut decoder, context.quiet, &mut summary)
                        .await
                })
                .await;
            summary.last_key = decoder.last_complete().map(<[u8]>::to_vec);
            self.print(&summary);
            outcome?;
            if summary.failed > 0 {
                return Err(Failure::new(
                    Failure::FAILED,
                    format!(
                        "{} blob(s) failed (named above); the others were imported: import the same stream again \
                         once fixed (what is there already is skipped)",
                        summary.failed
                    ),
                ));
            }
            Ok(())
        })
    }
}

impl Import {
    /// Imports every record of `decoder` into `store`, to the trailer.
    ///
    /// # Errors
    /// A damaged or unreadable stream, at the record where it is: the records before it are imported.
    async fn import<R: AsyncRead + Unpin + Send>(
        &self,
        store: &BlobStore,
        decoder: &mut Decoder<R>,
        quiet: bool,
        summary: &mut Summary,
    ) -> Result<(), Failure> {
        let header = decoder.header().clone();
        if !quiet {
            let mut what = format!(
                "saltblob: importing a stream of {} made {}",
                header.writer,
                human::time(header.created_micros)
            );
            if !header.prefix.is_empty() {
                what.push_str(&format!(
                    ", keys under {}",
                    human::escape_key(&header.prefix)
                ));
            }
            if let Some(after) = &header.after {
                what.push_str(&format!(", after {}", human::escape_key(after)));
            }
            eprintln!("{what}");
        }
        let mut progress = Progress::new("import", None, quiet);
        let mut keys = KeyChecks::default();
        let result = loop {
            let record = match decoder.next_record().await {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            let head = match record {
                Record::End(totals) => {
                    summary.complete = Some(totals);
                    break Ok(());
                }
                Record::LeftOut { key, reason } => {
                    eprintln!(
                        "saltblob: not in the stream: {}: {reason}",
                        human::escape_key(&key)
                    );
                    summary.left_out += 1;
                    continue;
                }
                Record::Blob(head) => head,
            };
            match self
                .one(store, decoder, &head, &mut keys, &mut progress)
                .await
            {
                Ok(Outcome::Imported(n)) => {
                    summary.imported += 1;
                    summary.bytes += n;
                }
                Ok(Outcome::Skipped) => summary.skipped += 1,
                Ok(Outcome::LeftOut(reason)) => {
                    eprintln!(
                        "saltblob: not in the stream: {}: the export could not read it all: {reason}",
                        human::escape_key(&head.key)
                    );
                    summary.left_out += 1;
                }
                Ok(Outcome::Failed(error)) => summary.fail(&head.key, error),
                Err(e) => break Err(e),
            }
        };
        progress.finish();
        result.map_err(|e| stream_failure(&e, Some(decoder.last_complete())))
    }

    /// Imports the blob record `head`, whose data `decoder` is at.
    ///
    /// # Errors
    /// The stream is damaged (then nothing of the blob was committed).
    async fn one<R: AsyncRead + Unpin + Send>(
        &self,
        store: &BlobStore,
        decoder: &mut Decoder<R>,
        head: &BlobHead,
        keys: &mut KeyChecks,
        progress: &mut Progress,
    ) -> Result<Outcome, StreamError> {
        let now = store.config().clock.now_micros();
        let outcome = async {
            if head.expires_micros.is_some_and(|t| t <= now) {
                return Some(Outcome::Skipped);
            }
            if let Some(sealed) = &head.sealed
                && let Err(why) = keys.check(store, &sealed.key).await
            {
                return Some(Outcome::Failed(format!(
                    "sealed under {} key {:?} in the source; this store cannot seal under it: {why} (open it \
                     with a key provider that has the key, e.g. encryption=local&keyring=FILE)",
                    sealed.provider, sealed.key
                )));
            }
            if same(store, head, now).await {
                return Some(Outcome::Skipped);
            }
            None
        }
        .await;
        if let Some(outcome) = outcome {
            // The data is read through (and checked) all the same: the stream goes on after it.
            return Ok(match decoder.finish_blob().await? {
                Some(reason) => Outcome::LeftOut(reason),
                None => {
                    progress.add(head.size);
                    outcome
                }
            });
        }
        let mut opts = PutOptions::new().with_size_hint(head.size);
        opts.content_type = head.content_type.clone();
        opts.metadata = head.metadata.clone();
        if !head.sealed_metadata.is_empty() {
            let late = LateMetadata::new();
            for (k, v) in &head.sealed_metadata {
                late.insert(k.clone(), v.clone());
            }
            opts = opts.with_late_metadata(late);
        }
        opts.encryption_key = head.sealed.as_ref().map(|s| s.key.clone());
        opts.ttl = head
            .expires_micros
            .map(|t| Duration::from_micros(t.saturating_sub(now).max(1)));
        let mut stop: Option<Stop> = None;
        let put = {
            let pieces = futures::stream::unfold(
                (&mut *decoder, &mut stop, progress.clone()),
                |(decoder, stop, mut progress)| async move {
                    if stop.is_some() {
                        return None;
                    }
                    let failed =
                        |stop: &mut Option<Stop>, why: Stop| -> saltblob::Result<bytes::Bytes> {
                            let message = match &why {
                                Stop::Damaged(e) => e.to_string(),
                                Stop::Aborted(reason) => {
                                    format!("the export cut this blob short: {reason}")
                                }
                            };
                            *stop = Some(why);
                            Err(Error::Io(std::io::Error::other(message)))
                        };
                    let item = match decoder.next_piece().await {
                        Ok(Piece::Data(bytes)) => {
                            progress.add(bytes.len() as u64);
                            Ok(bytes)
                        }
                        Ok(Piece::End) => return None,
                        Ok(Piece::Aborted(reason)) => failed(stop, Stop::Aborted(reason)),
                        Err(e) => failed(stop, Stop::Damaged(e)),
                    };
                    Some((item, (decoder, stop, progress)))
                },
            );
            let reader = saltblob::store::StreamReader::new(pieces.boxed());
            store.put_stream(&head.key, reader, &opts).await
        };
        match stop {
            Some(Stop::Damaged(e)) => return Err(e),
            Some(Stop::Aborted(reason)) => return Ok(Outcome::LeftOut(reason)),
            None => {}
        }
        match put {
            Ok(m) => {
                // The digest is read before the data's last bytes reach the put, so a put that took them all has
                // had it checked. Should a put commit without reading to the end, the rest is checked now and
                // what it committed is taken back if it does not check.
                if !decoder.blob_done()
                    && let Err(e) = decoder.finish_blob().await
                {
                    let _ = store.delete_version(&head.key, m.version).await;
                    return Err(e);
                }
                decoder.finish_blob().await?;
                Ok(Outcome::Imported(m.size))
            }
            Err(e) => {
                let error = match &e {
                    Error::KeyUnavailable { .. } | Error::InvalidArgument { .. }
                        if head.sealed.is_some() =>
                    {
                        format!(
                            "{} (sealed under {:?} in the source: open this store with a key provider that has it)",
                            one_line(&e),
                            head.sealed.as_ref().map_or("", |s| s.key.as_str())
                        )
                    }
                    _ => one_line(&e),
                };
                Ok(match decoder.finish_blob().await? {
                    Some(reason) => Outcome::LeftOut(reason),
                    None => Outcome::Failed(error),
                })
            }
        }
    }

    /// Prints the summary: JSON on stdout, or a line on stderr.
    fn print(&self, s: &Summary) {
        let last_key = s.last_key.as_deref().map(human::escape_key);
        if self.json {
            let v = serde_json::json!({
                "imported": s.imported,
                "bytes": s.bytes,
                "skipped": s.skipped,
                "failed": s.failed,
                "left_out": s.left_out,
                "errors": s.errors.iter().map(|(k, e)| serde_json::json!({"key": k, "error": e})).collect::<Vec<_>>(),
                "complete": s.complete.is_some(),
                "stream": s.complete.map(|t| serde_json::json!({"blobs": t.blobs, "bytes": t.bytes, "left_out": t.left_out})),
                "last_key": last_key,
            });
            println!("{v}");
            return;
        }
        let mut line = format!(
            "imported {} blob(s) ({}), skipped {} (already there or expired), failed {}",
            s.imported,
            human::short(s.bytes),
            s.skipped,
            s.failed
        );
        if s.left_out > 0 {
            line.push_str(&format!(", not in the stream {}", s.left_out));
        }
        if s.complete.is_none() {
            line.push_str(" (the stream was not read to its end)");
        }
        eprintln!("{line}");
    }
}

/// The failure of a stream that cannot be read on: exit code 4 when it is damaged (with the key to export again
/// after, when `last` is known: `Some(None)` means no record was complete), 2 when it is not a stream of this
/// format, 1 when the input cannot be read.
fn stream_failure(e: &StreamError, last: Option<Option<&[u8]>>) -> Failure {
    let code = match e {
        StreamError::Read { .. } => Failure::FAILED,
        StreamError::NotAStream { .. } | StreamError::Version { .. } => Failure::USAGE,
        StreamError::Truncated { .. } | StreamError::Corrupt { .. } => Failure::DAMAGED,
    };
    let mut message = e.to_string();
    match last {
        Some(Some(k)) if e.is_damage() || matches!(e, StreamError::Read { .. }) => {
            let shown = human::escape_key(k);
            message.push_str(&format!(
                ". Every blob before it was imported; the last complete key is {shown}: export the rest with \
                 `saltblob export --after {}` and import that",
                shell_quoted(&shown)
            ));
        }
        Some(None) if e.is_damage() => {
            message.push_str(". No record before it was complete: export again");
        }
        _ => {}
    }
    Failure::new(code, message)
}

/// Whether `key` can seal, by key name, asked once per name.
#[derive(Default)]
struct KeyChecks(BTreeMap<String, Result<(), String>>);

impl KeyChecks {
    async fn check(&mut self, store: &BlobStore, name: &str) -> Result<(), String> {
        if let Some(known) = self.0.get(name) {
            return known.clone();
        }
        let result = store
            .check_encryption_key(name)
            .await
            .map_err(|e| one_line(&e));
        // A failure that may pass (a KMS that did not answer) is asked again next time.
        if result.is_ok() {
            self.0.insert(name.to_owned(), Ok(()));
        }
        result
    }
}

/// Whether `key` already holds the blob `head` describes: the same size, content type, metadata, encryption key
/// (the target's default one for a plaintext blob), expiry (to within [`EXPIRY_SLACK_MICROS`]) and data (its
/// digest: the manifest's for a plaintext blob; read back for a sealed one). A blob whose digest the stream gives
/// only after its data (sealed or multipart in the source) is never the same: it is imported again.
async fn same(store: &BlobStore, head: &BlobHead, now: u64) -> bool {
    let Some(digest) = head.digest else {
        return false;
    };
    let Ok(m) = store.head(&head.key).await else {
        return false;
    };
    if m.size != head.size
        || m.content_type != head.content_type
        || m.sealed_by_customer().is_some()
    {
        return false;
    }
    let mut metadata = m.metadata.clone();
    metadata.remove(SEALED_METADATA_KEY);
    if metadata != head.metadata {
        return false;
    }
    let expected_key = head.sealed.as_ref().map(|s| s.key.clone()).or_else(|| {
        store
            .config()
            .encryption
            .as_ref()
            .and_then(|e| e.key.clone())
    });
    if m.sealed_by().map(|s| &s.kek.name) != expected_key.as_ref() {
        return false;
    }
    let expiry_close = match (m.expires_micros, head.expires_micros) {
        (None, None) => true,
        (Some(a), Some(b)) => a.abs_diff(b) <= EXPIRY_SLACK_MICROS,
        _ => false,
    };
    if !expiry_close || m.expires_micros.is_some_and(|t| t <= now) {
        return false;
    }
    if let Some(d) = plain_digest(&m) {
        return d == digest;
    }
    if !head.sealed_metadata.is_empty()
        && store
            .sealed_metadata(&head.key, &m, None)
            .await
            .ok()
            .as_ref()
            != Some(&head.sealed_metadata)
    {
        return false;
    }
    read_digest(store, &head.key, &m).await == Some(digest)
}

/// BLAKE3 of the data of version `m` of `key`, read back; `None` when it cannot be read (or another version is
/// current by then).
async fn read_digest(store: &BlobStore, key: &[u8], m: &Manifest) -> Option<[u8; 32]> {
    let mut stream = store.get_stream(key).await.ok()?;
    if stream.manifest.version != m.version {
        return None;
    }
    let mut hasher = blake3::Hasher::new();
    while let Some(piece) = stream.next().await {
        hasher.update(&piece.ok()?);
    }
    Some(*hasher.finalize().as_bytes())
}
