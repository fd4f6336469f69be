//! The intent lease of one chunked put ([`IntentLease`]): written before its first chunk, renewed in the
//! background, claimed before the commit and removed after it; and the put's [`Progress`], which the chunk
//! writer records and the renewals write. See the module guide of [`crate::ledger::intent`] for the protocol.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::record::{Intent, intent_key};
use crate::backend::{
    BlobRef, ChunkStore, GroupWrite, Namespace, Precondition, RecordChange, RecordWrite,
};
use crate::base::clock::Clock;
use crate::base::error::{Error, Result};
use crate::base::retry::Backoff;
use crate::base::timing::commit_hold;
use crate::base::units::micros;
use crate::state::Inner;
use crate::state::running::RunningGuard;

/// How far a put has got, shared between its chunk writer and its lease (recorded at each renewal). Kept by
/// the writes themselves, as they start and end, so that it is current while the put waits for its input (a
/// stalled stream, the case of a writer that dies).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Chunks whose writes have started: a bound of the indexes the put may have stored (a write under way when
    /// the writer dies may still land).
    chunks: AtomicU64,
    /// Stored bytes of the chunk writes that completed.
    stored: AtomicU64,
    /// Set once gc took the intent over: the writer stops writing chunks that nothing would refer to.
    lost: AtomicBool,
}

impl Progress {
    /// The writes of the put's chunks below index `chunks` have started.
    pub(crate) fn writing(&self, chunks: u64) {
        self.chunks.fetch_max(chunks, Ordering::Relaxed);
    }

    /// A write of the put's chunks completed, storing `bytes`.
    pub(crate) fn stored(&self, bytes: u64) {
        self.stored.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The chunks whose writes have started and the stored bytes of those that completed: what the intent records.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.chunks.load(Ordering::Relaxed),
            self.stored.load(Ordering::Relaxed),
        )
    }

    /// Whether gc has taken the put's intent over.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct LeaseState {
    /// The intent as last written.
    intent: Intent,
    /// Why the lease was lost, if it was (gc took the intent over).
    lost: Option<String>,
    /// Added to every expiry once the intent is claimed for the commit ([`commit_hold`]); zero before.
    hold: Duration,
    /// Whether the commit's group removed the intent ([`IntentLease::commit_group`]): nothing is left to remove.
    removed: bool,
}

/// The intent lease of one chunked put: written before its first chunk, renewed in the background, claimed
/// before the commit and removed after it. Dropping it (a cancelled put) stops the renewals and leaves the
/// intent to expire, after which gc reclaims the chunks.
pub(crate) struct IntentLease {
    backend: Arc<dyn ChunkStore>,
    clock: Arc<dyn Clock>,
    blob: BlobRef,
    /// The entry of this put in the store's running puts, removed when the lease is dropped.
    _running: RunningGuard,
    /// Where the intent is: [`Namespace::ShardedIntent`], or [`Namespace::ParkedIntent`] for a segment.
    ns: Namespace,
    record_key: Vec<u8>,
    lease: Duration,
    state: Arc<Mutex<LeaseState>>,
    /// Taken by each write of the intent (renewal, claim), so that one never races another.
    writing: Arc<tokio::sync::Mutex<()>>,
    progress: Arc<Progress>,
    renewer: Option<tokio::task::JoinHandle<()>>,
    /// Whether the put commits with one atomic group that removes the intent ([`IntentLease::commit_group`]), as
    /// its sink said ([`crate::backend::SinkShape::commit_group`]).
    commit_group: bool,
}

impl IntentLease {
    /// Writes the intent of `blob` and starts renewing it, recording the put's `progress` at each renewal;
    /// `commit_group`: whether the put commits with one atomic group ([`IntentLease::commits_in_group`]);
    /// `parked`: whether the put is a segment's, which parks its intent ([`Namespace::ParkedIntent`]).
    pub(crate) async fn acquire(
        inner: &Inner,
        blob: &BlobRef,
        salt_count: u32,
        commit_group: bool,
        parked: bool,
        progress: Arc<Progress>,
    ) -> Result<Self> {
        // An intent written by a lagging clock would sit below gc's low-water mark, never found again.
        inner.write_clock.check(&*inner.backend).await?;
        let lease = inner.config.intent_lease;
        let now = inner.now_micros();
        let intent = Intent {
            started_micros: now,
            expires_micros: now.saturating_add(micros(lease)),
            salt_count,
            chunks: 0,
            stored_bytes: 0,
        };
        let record_key = intent_key(blob);
        let ns = if parked {
            Namespace::ParkedIntent
        } else {
            Namespace::ShardedIntent
        };
        // The version is new, so nothing can be there: an unconditional write is enough (and cheaper).
        inner
            .backend
            .put_record(ns, &record_key, intent.encode(), &Precondition::None)
            .await?;
        let running = inner.running.register(blob.version);
        let state = Arc::new(Mutex::new(LeaseState {
            intent,
            lost: None,
            hold: Duration::ZERO,
            removed: false,
        }));
        let writing = Arc::new(tokio::sync::Mutex::new(()));
        let renewer = tokio::spawn(renew(
            Arc::clone(&inner.backend),
            Arc::clone(&inner.config.clock),
            (ns, record_key.clone()),
            lease,
            Arc::clone(&state),
            Arc::clone(&writing),
            Arc::clone(&progress),
        ));
        Ok(Self {
            backend: Arc::clone(&inner.backend),
            clock: Arc::clone(&inner.config.clock),
            blob: blob.clone(),
            _running: running,
            ns,
            record_key,
            lease,
            state,
            writing,
            progress,
            renewer: Some(renewer),
            commit_group,
        })
    }

    /// Whether the put commits with one atomic group that removes the intent ([`IntentLease::commit_group`]).
    pub(crate) fn commits_in_group(&self) -> bool {
        self.commit_group
    }

    fn lost_error(&self, detail: String) -> Error {
        Error::IntentLost {
            key: self.blob.key[..].into(),
            version: self.blob.version,
            detail,
        }
    }

    /// Claims the intent for the commit: a compare-and-set from the value last written to one whose expiry
    /// is a lease plus the commit hold ([`commit_hold`]) from now. Fails with `IntentLost` if gc took the
    /// intent over first; once it succeeded, gc leaves the intent alone until the hold is over. A write whose
    /// outcome is unknown is tried again: finding its own claim in place means it landed.
    ///
    /// Where writes may land late ([`takeover_hold`]) there is no claim: this only checks the lease. Nor is there
    /// one where the commit is an atomic group ([`IntentLease::commits_in_group`]): the group removes the intent
    /// under the condition a claim would check ([`IntentLease::commit_group`]).
    pub(crate) async fn claim(&self, inner: &Inner) -> Result<()> {
        if inner.info.late_writes || self.commit_group {
            return self.check_claim();
        }
        let hold = commit_hold(inner.config.intent_lease);
        self.write_settled("the claim", |state| {
            state.hold = hold;
            Intent {
                expires_micros: expiry(&*self.clock, self.lease, hold),
                ..state.intent
            }
        })
        .await
    }

    /// Succeeds while the claimed lease has at least a quarter of it left (before the hold): a manifest write
    /// issued now lands before gc may take the intent over, given the hold.
    pub(crate) fn check_claim(&self) -> Result<()> {
        let state = self.state.lock().map_err(|_| self.poisoned())?;
        if let Some(why) = &state.lost {
            return Err(self.lost_error(why.clone()));
        }
        let lease_end = state
            .intent
            .expires_micros
            .saturating_sub(micros(state.hold));
        let left = lease_end.saturating_sub(self.clock.now_micros());
        if left < micros(self.lease) / 4 {
            return Err(self.lost_error(format!(
                "only {left} µs of the {:?} lease were left before the commit (renewals failed or stalled)",
                self.lease
            )));
        }
        Ok(())
    }

    fn poisoned(&self) -> Error {
        self.lost_error("the lease state was poisoned by a panic".into())
    }

    /// Stops renewing and leaves the intent in place until `until_micros`, recording the chunks written: the
    /// put of a segment, which [`super::claim_segment`] claims later for a compose, or gc reclaims once it expired.
    pub(crate) async fn park(mut self, until_micros: u64) -> Result<()> {
        if let Some(task) = self.renewer.take() {
            task.abort();
            let _ = task.await;
        }
        let (chunks, stored_bytes) = self.progress.counts();
        self.write_settled("parking", |state| Intent {
            expires_micros: until_micros,
            chunks,
            stored_bytes,
            ..state.intent
        })
        .await
    }

    /// Writes the intent `next` makes of the lease state with a compare-and-set from the value last written,
    /// until it is in place ([`settle`]): tried again while the outcome is unknown or an own late write is found
    /// in place. Fails with `IntentLost` once gc took the intent over; `what` names the write in errors.
    async fn write_settled(
        &self,
        what: &str,
        mut next: impl FnMut(&mut LeaseState) -> Intent,
    ) -> Result<()> {
        let _turn = self.writing.lock().await;
        let mut last_error = None;
        let mut tries = Backoff::INTENT_CAS.start();
        while tries.next_attempt().await {
            let (current, wanted) = {
                let mut state = self.state.lock().map_err(|_| self.poisoned())?;
                if let Some(why) = &state.lost {
                    return Err(self.lost_error(why.clone()));
                }
                (state.intent, next(&mut state))
            };
            let outcome = self
                .backend
                .put_record(
                    self.ns,
                    &self.record_key,
                    wanted.encode(),
                    &Precondition::Equals(current.encode()),
                )
                .await;
            match outcome {
                Ok(outcome) => {
                    if settle(&self.state, &self.progress, wanted, outcome)? {
                        return Ok(());
                    }
                }
                Err(e) if e.is_retryable() => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.map_or_else(
            || self.lost_error(format!("{what} did not settle")),
            |e| tries.give_up(e),
        ))
    }

    /// Commits in one atomic group ([`ChunkStore::write_records`]): `changes` (the manifest write, and the
    /// reclaim entries of what it replaces), and with them the removal of the intent under the condition that it
    /// still holds the value last written. Of the commit and gc's takeover (a compare-and-set removal of the
    /// value gc read) exactly one wins, as with a claim, in one write instead of three. Renewals wait meanwhile;
    /// an own late write found in place is compared against next. Returns the group's outcome for `changes`
    /// alone; fails with `IntentLost` (nothing written) once gc took the intent over, or with the backend's
    /// error (the outcome is unknown).
    pub(crate) async fn commit_group(&self, changes: Vec<RecordChange>) -> Result<GroupWrite> {
        let _turn = self.writing.lock().await;
        let own = changes.len();
        let mut tries = Backoff::INTENT_CAS.start();
        while tries.next_attempt().await {
            let current = {
                let state = self.state.lock().map_err(|_| self.poisoned())?;
                if let Some(why) = &state.lost {
                    return Err(self.lost_error(why.clone()));
                }
                state.intent
            };
            let mut group = changes.clone();
            group.push(RecordChange::delete(
                self.ns,
                self.record_key.clone(),
                Precondition::Equals(current.encode()),
            ));
            match self.backend.write_records(group, None).await? {
                GroupWrite::Done(mut previous) => {
                    previous.truncate(own);
                    self.state.lock().map_err(|_| self.poisoned())?.removed = true;
                    return Ok(GroupWrite::Done(previous));
                }
                GroupWrite::ConditionFailed {
                    index,
                    current: found,
                } if index == own => {
                    settle(
                        &self.state,
                        &self.progress,
                        current,
                        RecordWrite::ConditionFailed(found),
                    )?;
                }
                failed @ GroupWrite::ConditionFailed { .. } => return Ok(failed),
            }
        }
        Err(self.lost_error("the intent kept changing during the commit".into()))
    }

    /// Stops renewing and removes the intent (best effort: a leftover intent of a committed version is removed
    /// by gc, one of a failed put makes gc reclaim its chunks).
    pub(crate) async fn release(mut self) {
        if let Some(task) = self.renewer.take() {
            task.abort();
            let _ = task.await;
        }
        if self.state.lock().is_ok_and(|state| state.removed) {
            return;
        }
        if let Err(e) = self
            .backend
            .delete_record(self.ns, &self.record_key, &Precondition::None)
            .await
        {
            tracing::warn!(
                "could not remove the intent of version {} (gc will): {e}",
                self.blob.version
            );
        }
    }

    /// Ends the lease of a put that is over: removes the intent when the put's chunks are `settled` (committed,
    /// deleted or queued for reclaim), or else leaves it to expire, after which gc reclaims them.
    pub(crate) async fn end(self, settled: bool) {
        if settled {
            self.release().await;
        } else {
            tracing::warn!(
                "left the intent of version {} to expire: gc will reclaim its chunks",
                self.blob.version
            );
        }
    }
}

impl Drop for IntentLease {
    fn drop(&mut self) {
        if let Some(task) = &self.renewer {
            task.abort();
        }
    }
}

/// The expiry of an intent renewed or claimed now, by `clock`.
fn expiry(clock: &dyn Clock, lease: Duration, hold: Duration) -> u64 {
    clock
        .now_micros()
        .saturating_add(micros(lease))
        .saturating_add(micros(hold))
}

/// Records the outcome of a compare-and-set of the intent to `next`; returns whether `next` is in place.
/// Only the put writes values under its intent's key (gc only deletes it), so a different value of this put
/// found in place is one of its own writes whose outcome was unknown and that landed late: it becomes the
/// value to compare against. An absent record means gc took the intent over.
fn settle(
    state: &Mutex<LeaseState>,
    progress: &Progress,
    next: Intent,
    outcome: RecordWrite,
) -> Result<bool> {
    let mut st = state
        .lock()
        .map_err(|_| Error::internal("intent lease", "state lock poisoned"))?;
    match outcome {
        RecordWrite::Done(_) => {
            st.intent = next;
            Ok(true)
        }
        RecordWrite::ConditionFailed(Some(found)) => match Intent::decode(&found) {
            Ok(own) if own == next => {
                st.intent = next;
                Ok(true)
            }
            Ok(own) if own.started_micros == next.started_micros => {
                st.intent = own;
                Ok(false)
            }
            _ => {
                st.lost = Some("the intent record was replaced by another writer".into());
                progress.lost.store(true, Ordering::Relaxed);
                Ok(false)
            }
        },
        RecordWrite::ConditionFailed(None) => {
            st.lost = Some("garbage collection took the expired intent over".into());
            progress.lost.store(true, Ordering::Relaxed);
            Ok(false)
        }
    }
}

/// Renews an intent every third of the lease with a compare-and-set, until aborted or the intent was taken over.
async fn renew(
    backend: Arc<dyn ChunkStore>,
    clock: Arc<dyn Clock>,
    (ns, record_key): (Namespace, Vec<u8>),
    lease: Duration,
    state: Arc<Mutex<LeaseState>>,
    writing: Arc<tokio::sync::Mutex<()>>,
    progress: Arc<Progress>,
) {
    loop {
        tokio::time::sleep(lease / 3).await;
        let _turn = writing.lock().await;
        let Ok((current, hold)) = state.lock().map(|s| (s.intent, s.hold)) else {
            return;
        };
        let (chunks, stored_bytes) = progress.counts();
        let next = Intent {
            expires_micros: expiry(&*clock, lease, hold),
            chunks,
            stored_bytes,
            ..current
        };
        let outcome = backend
            .put_record(
                ns,
                &record_key,
                next.encode(),
                &Precondition::Equals(current.encode()),
            )
            .await;
        match outcome {
            Ok(outcome) => match settle(&state, &progress, next, outcome) {
                Ok(true) => {}
                Ok(false) if progress.lost() => return,
                // Our own late write was found in place: renewed from it at the next tick.
                Ok(false) => {}
                Err(_) => return,
            },
            // Retried at the next tick; the put fails before its commit if the lease runs out meanwhile.
            Err(e) => tracing::warn!("could not renew a put's intent lease: {e}"),
        }
    }
}
