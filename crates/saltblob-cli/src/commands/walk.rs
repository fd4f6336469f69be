//! Walking the blobs under a prefix in key order, one at a time, for the commands that rewrite them (`relayout`,
//! `encrypt`, `rekey`): a spinner, damaged manifests counted and left alone, the last key done kept for `--after`,
//! and one way to end a walk.

use std::future::Future;

use bytes::Bytes;
use futures::StreamExt;
use saltblob::{BlobStore, Manifest};

use super::census::emit;
use crate::failure::Failure;
use crate::human::{self, KeyArg};
use crate::progress::Progress;

/// What a walk saw, besides what its visits found.
#[derive(Debug, Default)]
pub(super) struct Walked {
    /// Blobs listed.
    pub(super) scanned: u64,
    /// Blobs whose manifest did not decode (left alone).
    pub(super) damaged: u64,
    /// The last key done: where a rerun resumes (`--after`).
    pub(super) last_key: Option<Bytes>,
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

/// Walks the blobs of `store` under `prefix` after `after`, with a spinner named `what`: `visit` acts on each
/// readable one (its key and manifest as listed) and `record` takes what it returned, in key order. Stops at the
/// first error, which is returned beside what was seen.
pub(super) async fn walk<T, V, Fut>(
    store: &BlobStore,
    what: &str,
    (prefix, after): (Option<&KeyArg>, Option<&KeyArg>),
    quiet: bool,
    visit: V,
    mut record: impl FnMut(Bytes, T),
) -> (Walked, saltblob::Result<()>)
where
    V: Fn(Bytes, Manifest) -> Fut,
    Fut: Future<Output = saltblob::Result<T>>,
{
    let prefix = prefix.map_or(&[][..], |p| p.as_ref());
    let after = after.map(|k| Bytes::copy_from_slice(k.as_ref()));
    let mut walked = Walked::default();
    let mut progress = Progress::items(what, "blobs", None, quiet);
    let mut entries = store.list_stream_after(prefix, after);
    let outcome = async {
        while let Some(entry) = entries.next().await {
            let entry = entry?;
            walked.scanned += 1;
            progress.set(walked.scanned);
            match entry.manifest {
                Ok(manifest) => {
                    record(entry.key.clone(), visit(entry.key.clone(), manifest).await?)
                }
                Err(_) => walked.damaged += 1,
            }
            walked.last_key = Some(entry.key);
        }
        Ok(())
    }
    .await;
    progress.finish();
    (walked, outcome)
}

/// Ends a walk named `what` whose report is `text`: on stdout, or, when the walk stopped on an error, on stderr
/// with a failure telling to rerun with `--after` the last key; a failure too when manifests were damaged.
pub(super) fn conclude(
    what: &str,
    text: &str,
    walked: &Walked,
    outcome: saltblob::Result<()>,
) -> Result<(), Failure> {
    if let Err(e) = outcome {
        // What was done stays done; the last key tells where to resume.
        eprint!("{text}");
        let failure = Failure::from(e);
        return Err(Failure::new(
            failure.code,
            format!(
                "{what} stopped (rerun with --after the last key above): {}",
                failure.message
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
