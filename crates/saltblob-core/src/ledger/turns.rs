//! Turns: a periodic task that every runner of a store starts on its own schedule (every gateway's upkeep loop)
//! but that one of them should do per period — gc's expiry pass, a server's multipart sweep, a bucket's lifecycle
//! pass of the day.
//!
//! A turn is a record in [`Namespace::Meta`] (`turn/` ‖ name) written with a compare-and-set: format byte 1, the
//! runner's id (16 random bytes), the end of the turn (u64 LE, Unix µs), then a token (the rest; for example a
//! digest of the rules the task applies). A runner takes a turn whose record is absent, does not decode, has
//! ended, or holds another token (the rules changed: the task must run again); while it runs, the turn ends a
//! lease ([`work::LEASE`]) later, so that a runner that dies mid-task holds it back that long at most. A task
//! that succeeds ends its turn when the next run is due ([`Turn::done`]); one that fails gives it back
//! ([`Turn::give_back`]) for the next runner's tick.
//!
//! Like gc's leases, turns make the work efficient, not safe: every task run under one must be safe when two
//! runners do it at once (a task that outlives its lease, clocks off by more than the margin). A store that one
//! process owns ([`crate::backend::BackendInfo::exclusive`]) keeps its turns in memory, not in records: its tasks
//! still run once per period, and a process killed mid-task holds nothing back.

use std::sync::Arc;

use bytes::Bytes;

use crate::backend::{Namespace, Precondition, RecordWrite};
use crate::base::error::{Error, Result};
use crate::base::units::micros;
use crate::format::decode::Reader;
use crate::ledger::work;
use crate::state::Inner;

/// Prefix of the turn records in [`Namespace::Meta`].
const TURN_KEY: &[u8] = b"turn/";

/// Format byte of a turn record.
const TURN_FORMAT: u8 = 1;

/// The longest name of a turn, in bytes.
pub const MAX_TURN_NAME: usize = 512;

/// The longest token of a turn, in bytes.
pub const MAX_TURN_TOKEN: usize = 256;

/// A turn taken by [`crate::store::BlobStore::take_turn`]: end it with [`Turn::done`] once the task succeeded, or give it back
/// with [`Turn::give_back`]. A turn dropped without either ends when its lease does.
#[derive(Debug)]
#[must_use = "a turn is ended with done() or give_back(); dropped, it holds the task back until its lease ends"]
pub struct Turn {
    inner: Arc<Inner>,
    /// The record's key (in memory on a store one process owns).
    key: Vec<u8>,
    runner: [u8; 16],
    token: Bytes,
    /// The record as written when the turn was taken.
    written: Bytes,
}

/// See [`crate::store::BlobStore::take_turn`].
pub(crate) async fn take(inner: &Arc<Inner>, name: &str, token: &[u8]) -> Result<Option<Turn>> {
    let mut runner = [0u8; 16];
    crate::encryption::fill_random(&mut runner)?;
    let token = Bytes::copy_from_slice(token);
    let now = inner.now_micros();
    let written = encode(&runner, now.saturating_add(micros(work::LEASE)), &token);
    let key = [TURN_KEY, name.as_bytes()].concat();
    let turn = Turn {
        inner: Arc::clone(inner),
        key,
        runner,
        token,
        written,
    };
    if inner.info.exclusive {
        let Ok(mut local) = inner.turns.lock() else {
            return Ok(Some(turn));
        };
        let free = local
            .get(&turn.key)
            .is_none_or(|held| is_free(held, now, &turn.token));
        if !free {
            return Ok(None);
        }
        local.insert(turn.key.clone(), turn.written.clone());
        return Ok(Some(turn));
    }
    let key = &turn.key;
    let current = inner.backend.get_record(Namespace::Meta, key).await?;
    if !current
        .as_ref()
        .is_none_or(|c| is_free(c, now, &turn.token))
    {
        return Ok(None);
    }
    let cond = current.map_or(Precondition::Absent, Precondition::Equals);
    let write = inner
        .backend
        .put_record(Namespace::Meta, key, turn.written.clone(), &cond)
        .await?;
    Ok(matches!(write, RecordWrite::Done(_)).then_some(turn))
}

/// Whether turn record `held` leaves the turn free at `now` to a runner with `token`: it does not decode, has
/// ended, or holds another token.
fn is_free(held: &Bytes, now: u64, token: &[u8]) -> bool {
    decode(held).is_none_or(|(end, held_token)| end <= now || held_token != token)
}

impl Turn {
    /// Ends the turn at `next_micros` (Unix µs, by the store's clock): the task is done, and no runner takes the
    /// turn again before then under the same token.
    ///
    /// # Errors
    /// The backend's; a turn that another runner took meanwhile (its lease had ended) is left to it.
    pub async fn done(self, next_micros: u64) -> Result<()> {
        let value = encode(&self.runner, next_micros, &self.token);
        if self.inner.info.exclusive {
            if let Ok(mut local) = self.inner.turns.lock()
                && local.get(&self.key) == Some(&self.written)
            {
                local.insert(self.key.clone(), value);
            }
            return Ok(());
        }
        self.inner
            .backend
            .put_record(
                Namespace::Meta,
                &self.key,
                value,
                &Precondition::Equals(self.written.clone()),
            )
            .await?;
        Ok(())
    }

    /// Ends the turn nine tenths of `period` from now: the task is done, and the runner whose tick comes next
    /// after that takes it again, not the one after ([`Turn::done`]).
    ///
    /// # Errors
    /// As [`Turn::done`].
    pub async fn done_for(self, period: std::time::Duration) -> Result<()> {
        let next = self
            .inner
            .now_micros()
            .saturating_add(micros(period) / 10 * 9);
        self.done(next).await
    }

    /// Gives the turn back (the task failed): the next runner to ask takes it. Best effort: a record left behind
    /// ends with its lease.
    pub async fn give_back(self) {
        if self.inner.info.exclusive {
            if let Ok(mut local) = self.inner.turns.lock()
                && local.get(&self.key) == Some(&self.written)
            {
                local.remove(&self.key);
            }
            return;
        }
        let cond = Precondition::Equals(self.written.clone());
        if let Err(e) = self
            .inner
            .backend
            .delete_record(Namespace::Meta, &self.key, &cond)
            .await
        {
            tracing::warn!(
                "could not give back turn {} (it ends with its lease): {e}",
                String::from_utf8_lossy(self.key.get(TURN_KEY.len()..).unwrap_or_default())
            );
        }
    }
}

/// A turn record: format, runner, end, token.
fn encode(runner: &[u8; 16], end: u64, token: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(25 + token.len());
    v.push(TURN_FORMAT);
    v.extend_from_slice(runner);
    v.extend_from_slice(&end.to_le_bytes());
    v.extend_from_slice(token);
    Bytes::from(v)
}

/// The end and token of a turn record; `None` for one that does not decode (taken as free).
fn decode(record: &Bytes) -> Option<(u64, Bytes)> {
    if record.len() < 25 {
        return None;
    }
    let corrupt = |detail: String| Error::corrupt("turn", detail);
    let mut r = Reader::new(record.clone(), &corrupt);
    if r.u8().ok()? != TURN_FORMAT {
        return None;
    }
    r.u128_be().ok()?;
    let end = r.u64().ok()?;
    Some((end, record.slice(25..)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::memory::MemoryStore;
    use crate::base::clock::{Clock, OffsetClock};
    use crate::state::config::StoreConfig;
    use crate::store::BlobStore;

    fn two_runners(clock: &Arc<OffsetClock>) -> (BlobStore, BlobStore) {
        let backend = Arc::new(MemoryStore::new());
        let config = StoreConfig::default().with_clock(clock.clone());
        let a = BlobStore::new(backend.clone(), config.clone()).expect("store");
        let b = BlobStore::new(backend, config).expect("store");
        (a, b)
    }

    /// One runner of two takes a turn; done, it is not taken again before its end under the same token, but at
    /// once under another; given back, the other runner takes it.
    #[tokio::test]
    async fn one_runner_takes_a_turn_per_period() {
        let clock = OffsetClock::new();
        let (a, b) = two_runners(&clock);
        let turn = a
            .take_turn("task", b"v1")
            .await
            .expect("take")
            .expect("free");
        assert!(
            b.take_turn("task", b"v1").await.expect("take").is_none(),
            "held"
        );
        let next = clock.now_micros() + 3_600_000_000;
        turn.done(next).await.expect("done");
        assert!(
            a.take_turn("task", b"v1").await.expect("take").is_none(),
            "done for the period"
        );
        assert!(b.take_turn("task", b"v1").await.expect("take").is_none());
        let other = b
            .take_turn("task", b"v2")
            .await
            .expect("take")
            .expect("new token: due again");
        other.give_back().await;
        let again = a
            .take_turn("task", b"v2")
            .await
            .expect("take")
            .expect("given back");
        again.done(next).await.expect("done");
        clock.advance(Duration::from_secs(3_601));
        assert!(
            b.take_turn("task", b"v2").await.expect("take").is_some(),
            "the period is over"
        );
        assert!(
            a.take_turn("other", b"").await.expect("take").is_some(),
            "turns are by name"
        );
    }

    /// A runner that dies holding a turn holds it back until its lease ends, no longer; the dead runner's late
    /// `done` does not overwrite the turn the next runner took.
    #[tokio::test]
    async fn a_dead_runners_turn_ends_with_its_lease() {
        let clock = OffsetClock::new();
        let (a, b) = two_runners(&clock);
        let dead = a.take_turn("task", b"").await.expect("take").expect("free");
        clock.advance(work::LEASE - Duration::from_secs(1));
        assert!(b.take_turn("task", b"").await.expect("take").is_none());
        clock.advance(Duration::from_secs(2));
        let live = b
            .take_turn("task", b"")
            .await
            .expect("take")
            .expect("lease over");
        dead.done(u64::MAX)
            .await
            .expect("a late done is refused quietly");
        let next = clock.now_micros() + 1_000_000;
        live.done(next).await.expect("done");
        clock.advance(Duration::from_secs(2));
        assert!(
            a.take_turn("task", b"").await.expect("take").is_some(),
            "the live runner's end held"
        );
    }

    /// Bad names and tokens are refused; a record that does not decode is taken as free.
    #[tokio::test]
    async fn bad_arguments_are_refused_and_bad_records_taken() {
        let clock = OffsetClock::new();
        let (a, _) = two_runners(&clock);
        for (name, token) in [("", 0), ("x", MAX_TURN_TOKEN + 1)] {
            let err = a
                .take_turn(name, &vec![0; token])
                .await
                .expect_err("refused");
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        }
        let long = "n".repeat(MAX_TURN_NAME + 1);
        assert!(a.take_turn(&long, b"").await.is_err());
        a.inner
            .backend
            .put_record(
                Namespace::Meta,
                b"turn/task",
                Bytes::from_static(b"\x09junk"),
                &Precondition::None,
            )
            .await
            .expect("put");
        assert!(a.take_turn("task", b"").await.expect("take").is_some());
    }

    /// A memory store declared owned by one process, as an embedded engine is.
    #[derive(Debug)]
    struct Owned(MemoryStore);

    impl crate::backend::layer::ChunkStoreLayer for Owned {
        fn inner(&self) -> &dyn crate::backend::ChunkStore {
            &self.0
        }

        fn info(&self) -> crate::backend::BackendInfo {
            crate::backend::ChunkStore::info(&self.0).with_exclusive()
        }
    }

    /// On a store one process owns, turns are kept in memory: taken once per period all the same, and no record is
    /// written.
    #[tokio::test]
    async fn an_owned_store_keeps_its_turns_in_memory() {
        let clock = OffsetClock::new();
        let backend = Arc::new(Owned(MemoryStore::new()));
        let config = StoreConfig::default().with_clock(clock.clone());
        let store = BlobStore::new(backend.clone(), config).expect("store");
        let turn = store
            .take_turn("task", b"")
            .await
            .expect("take")
            .expect("free");
        assert!(
            store.take_turn("task", b"").await.expect("take").is_none(),
            "held"
        );
        turn.done(clock.now_micros() + 60_000_000)
            .await
            .expect("done");
        assert!(
            store.take_turn("task", b"").await.expect("take").is_none(),
            "done"
        );
        let failed = store
            .take_turn("task", b"other")
            .await
            .expect("take")
            .expect("new token");
        failed.give_back().await;
        assert!(
            store
                .take_turn("task", b"other")
                .await
                .expect("take")
                .is_some(),
            "given back"
        );
        let records = backend
            .0
            .scan_records(Namespace::Meta, TURN_KEY, None, 10)
            .await
            .expect("scan");
        assert!(records.is_empty(), "{records:?}");
    }
}
