//! Walking the blobs of a store one at a time, for the commands that rewrite them (`relayout`, `encrypt`,
//! `rekey`): a spinner, damaged manifests counted and left alone, and one way to end a walk.
//!
//! A walk is a pass ([`BlobStore::pass`]): over the whole store, by the backend's ranges in no key order (token
//! ranges on a cluster, several read at once); under `--prefix`, in key order. `--resume FILE` keeps where the pass
//! stands in FILE ([`PassProgress::to_text`]), saved every [`SAVE_EVERY`] blobs handled, at the end of each page
//! and when the walk stops, so that a rerun with the same FILE starts where the last one stopped (a run killed
//! outright redoes at most the blobs handled since the last save: these commands leave a blob already done
//! alone); the file is removed once the pass is complete. `--after KEY` walks in key order after KEY instead (a
//! listing: the way of older runs, and the only one that prints a last key on a cluster).

use std::future::Future;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use saltblob::{BlobStore, Manifest, PassEvent, PassOptions, PassProgress};

use super::census::emit;
use crate::failure::Failure;
use crate::human::{self, KeyArg};
use crate::progress::Progress;

/// Blobs handled between two saves of a `--resume` file.
const SAVE_EVERY: u64 = 64;

/// What a walk saw, besides what its visits found.
#[derive(Debug, Default)]
pub(super) struct Walked {
    /// Blobs read.
    pub(super) scanned: u64,
    /// Blobs whose manifest did not decode (left alone).
    pub(super) damaged: u64,
    /// The last key done, when the walk goes in key order: where a rerun resumes (`--after`).
    pub(super) last_key: Option<Bytes>,
    /// How to resume this walk, for the message of a walk that stopped.
    pub(super) resume_hint: String,
}

impl Walked {
    /// The report's last line: the key to resume after, if any.
    pub(super) fn last_key_line(&self, what: &str) -> String {
        self.last_key
            .as_ref()
            .map(|k| format!("{what}: last key {}\n", human::escape_key(k)))
            .unwrap_or_default()
    }
}

/// Where a walk goes: the blobs under `prefix` (all when `None`), after `after` in key order, or from where the
/// pass saved in `resume` stands.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Route<'a> {
    pub(super) prefix: Option<&'a KeyArg>,
    pub(super) after: Option<&'a KeyArg>,
    pub(super) resume: Option<&'a Path>,
}

/// Walks the blobs of `store` along `route`, with a spinner named `what`: `visit` acts on each readable one (its
/// key and manifest as read) and `record` takes what it returned, one blob at a time. Stops at the first error of
/// a visit, which is returned beside what was seen; a range of the store left unread after retries does not stop
/// the others, and fails the walk at its end (a `--resume` file then holds it, to be read by a rerun).
pub(super) async fn walk<T, V, Fut>(
    store: &BlobStore,
    what: &str,
    route: Route<'_>,
    quiet: bool,
    visit: V,
    mut record: impl FnMut(Bytes, T),
) -> (Walked, Result<(), Failure>)
where
    V: Fn(Bytes, Manifest) -> Fut,
    Fut: Future<Output = saltblob::Result<T>>,
{
    let prefix = route.prefix.map_or(&[][..], |p| p.as_ref());
    let mut walked = Walked {
        resume_hint: match (route.after, route.resume) {
            (Some(_), _) => "rerun with --after the last key above".to_owned(),
            (None, Some(file)) => format!("rerun with --resume {}", file.display()),
            (None, None) => "rerun; with --resume FILE a run keeps where it stands".to_owned(),
        },
        ..Walked::default()
    };
    let mut progress = Progress::items(what, "blobs", None, quiet);
    let outcome = match route.after {
        Some(after) => {
            let after = Bytes::copy_from_slice(after.as_ref());
            listing(
                store,
                prefix,
                after,
                &mut walked,
                &mut progress,
                &visit,
                &mut record,
            )
            .await
        }
        None => {
            let resume = route.resume;
            by_pass(
                store,
                prefix,
                resume,
                &mut walked,
                &mut progress,
                &visit,
                &mut record,
            )
            .await
        }
    };
    progress.finish();
    (walked, outcome)
}

/// The walk after a key: a listing, in key order.
async fn listing<T, V, Fut>(
    store: &BlobStore,
    prefix: &[u8],
    after: Bytes,
    walked: &mut Walked,
    progress: &mut Progress,
    visit: &V,
    record: &mut impl FnMut(Bytes, T),
) -> Result<(), Failure>
where
    V: Fn(Bytes, Manifest) -> Fut,
    Fut: Future<Output = saltblob::Result<T>>,
{
    let mut entries = store.list_stream_after(prefix, Some(after));
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        walked.scanned += 1;
        progress.set(walked.scanned);
        match entry.manifest {
            Ok(manifest) => record(entry.key.clone(), visit(entry.key.clone(), manifest).await?),
            Err(_) => walked.damaged += 1,
        }
        walked.last_key = Some(entry.key);
    }
    Ok(())
}

/// The walk as a pass, from the progress saved in `resume` when that file exists (it must be of a pass under the
/// same prefix), else from the start.
async fn by_pass<T, V, Fut>(
    store: &BlobStore,
    prefix: &[u8],
    resume: Option<&Path>,
    walked: &mut Walked,
    progress: &mut Progress,
    visit: &V,
    record: &mut impl FnMut(Bytes, T),
) -> Result<(), Failure>
where
    V: Fn(Bytes, Manifest) -> Fut,
    Fut: Future<Output = saltblob::Result<T>>,
{
    let mut pass = match resume {
        Some(file) if file.exists() => load(file, prefix)?,
        _ => store.plan_pass(prefix).await?,
    };
    let ordered = pass.is_ordered();
    let mut unread = Vec::new();
    let outcome = async {
        let mut events = store.pass(&pass, &PassOptions::new());
        while let Some(event) = events.next().await {
            match event {
                PassEvent::Page(page) => {
                    for entry in &page.entries {
                        walked.scanned += 1;
                        progress.set(walked.scanned);
                        match &entry.manifest {
                            Ok(manifest) => record(
                                entry.key.clone(),
                                visit(entry.key.clone(), manifest.clone()).await?,
                            ),
                            Err(_) => walked.damaged += 1,
                        }
                        pass.record_key(page.range, &entry.key);
                        if ordered {
                            walked.last_key = Some(entry.key.clone());
                        }
                        if walked.scanned.is_multiple_of(SAVE_EVERY) {
                            save(resume, &pass)?;
                        }
                    }
                    pass.record_page(&page);
                    save(resume, &pass)?;
                }
                PassEvent::Unread { range, error } => unread.push((range, error)),
            }
        }
        Ok::<(), Failure>(())
    }
    .await;
    // Where the pass stands is kept whatever stopped it.
    save(resume, &pass)?;
    outcome?;
    let count = unread.len();
    if let Some((range, error)) = unread.into_iter().next() {
        let message = format!(
            "{count} of the store's {} ranges left unread after retries (range {range}: {error})",
            pass.range_count()
        );
        return Err(Failure::new(Failure::from(error).code, message));
    }
    if let Some(file) = resume {
        std::fs::remove_file(file).map_err(|e| {
            Failure::new(
                Failure::FAILED,
                format!("the pass is complete but {} stays: {e}", file.display()),
            )
        })?;
    }
    Ok(())
}

/// The progress saved in `file`, checked to be of a pass under `prefix`.
fn load(file: &Path, prefix: &[u8]) -> Result<PassProgress, Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::new(
            Failure::USAGE,
            format!("--resume {}: cannot read it: {e}", file.display()),
        )
    })?;
    let pass = PassProgress::from_text(&text).map_err(|e| {
        Failure::new(
            Failure::USAGE,
            format!("--resume {}: not a pass's progress: {e}", file.display()),
        )
    })?;
    if pass.prefix() != prefix {
        return Err(Failure::new(
            Failure::USAGE,
            format!(
                "--resume {}: a pass under prefix \"{}\", not \"{}\"",
                file.display(),
                human::escape_key(pass.prefix()),
                human::escape_key(prefix)
            ),
        ));
    }
    Ok(pass)
}

/// Writes `pass` to `file`, if any, whole or not at all (a temporary file beside it, renamed over it).
fn save(file: Option<&Path>, pass: &PassProgress) -> Result<(), Failure> {
    let Some(file) = file else {
        return Ok(());
    };
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, pass.to_text())
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| {
            Failure::new(
                Failure::FAILED,
                format!("--resume {}: cannot save the progress: {e}", file.display()),
            )
        })
}

/// Ends a walk named `what` whose report is `text`: on stdout, or, when the walk stopped on an error, on stderr
/// with a failure telling how to resume ([`Walked::resume_hint`]); a failure too when manifests were damaged.
pub(super) fn conclude(
    what: &str,
    text: &str,
    walked: &Walked,
    outcome: Result<(), Failure>,
) -> Result<(), Failure> {
    if let Err(failure) = outcome {
        // What was done stays done; the hint tells where to resume.
        eprint!("{text}");
        return Err(Failure::new(
            failure.code,
            format!(
                "{what} stopped ({}): {}",
                walked.resume_hint, failure.message
            ),
        ));
    }
    emit(text)?;
    if walked.damaged > 0 {
        return Err(Failure::new(
            Failure::DAMAGED,
            format!(
                "{} damaged manifest(s) left alone: run `saltblob fsck`",
                walked.damaged
            ),
        ));
    }
    Ok(())
}
