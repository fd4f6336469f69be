//! The data-key cache in front of a key provider ([`CachedProvider`]): what it made and opened is kept for a
//! time, a key asked for by many requests at once is asked for once (single flight), and a provider that did not
//! answer is not asked again for a short time (a negative cache), so that a KMS outage costs each request an
//! immediate, retryable key error instead of a wait, and no request waits behind another's KMS call for long.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::base::clock::Clock;
use crate::base::error::{Error, Result};

use super::{DataKey, KekRef, KeyProvider, STORE_ID_LEN, Secret, recordable};

/// How long [`CachedProvider`] keeps a data key by default: 10 minutes, as ScyllaDB's key cache.
pub const DEFAULT_KEY_CACHE: Duration = Duration::from_secs(600);
/// How long [`CachedProvider`] remembers by default that its provider did not answer (a retryable failure),
/// failing the key requests it cannot serve from its cache at once, with that error, meanwhile: 2 seconds.
pub const DEFAULT_FAILURE_CACHE: Duration = Duration::from_secs(2);
/// Most data keys a [`CachedProvider`] keeps; when full it forgets the expired ones, then all.
const MAX_CACHED_KEYS: usize = 10_000;

/// A key provider in front of another that keeps what it asked for, for a time: the data keys it opened, and,
/// per key-encryption key, the data key it made last, which new versions share (each version's secrets are
/// derived from the data key *and* the version, `seal.rs`). So a KMS is asked once per key and expiry, not per
/// put or read; and a key disabled at the provider stops reads and writes once the entries expire.
///
/// Requests that miss the cache for the same key at the same time make one call to the provider; the others
/// wait for it and take its key (or, if it failed, fail as below). A failure the provider says may pass (no
/// answer, throttling) is remembered for the failure cache's time: meanwhile every request that misses the cache
/// fails at once with it (still retryable), whatever key it wants, instead of waiting for a provider that is
/// down. Other failures (a key disabled or unknown) are not kept: the next request asks again.
#[derive(Debug)]
pub struct CachedProvider {
    inner: Arc<dyn KeyProvider>,
    keep_for_micros: u64,
    failure_for_micros: u64,
    clock: Arc<dyn Clock>,
    made: Mutex<HashMap<String, Kept<Arc<DataKey>>>>,
    opened: Mutex<HashMap<WrappedKey, Kept<Secret>>>,
    /// The last retryable failure, until when it is served.
    failed: Mutex<Option<Kept<Failure>>>,
    /// Calls to the provider in progress, by what they ask for: a request that misses the cache waits on the
    /// call's lock, then reads the cache again.
    making: Mutex<HashMap<String, Flight>>,
    opening: Mutex<HashMap<WrappedKey, Flight>>,
}

/// A cache entry: until when (Unix microseconds on the cache's clock), and what.
type Kept<T> = (u64, T);
/// A wrapped data key and the key that wrapped it.
type WrappedKey = (KekRef, Vec<u8>);
/// The lock of one call to the provider.
type Flight = Arc<tokio::sync::Mutex<()>>;

/// A retryable key error, kept to be served again ([`Error`] is not `Clone`).
#[derive(Clone, Debug)]
struct Failure {
    provider: &'static str,
    key: String,
    reason: String,
}

impl Failure {
    /// The failure `e` if it is a retryable key error.
    fn of(e: &Error) -> Option<Self> {
        match e {
            Error::KeyUnavailable {
                provider,
                key,
                reason,
                retryable: true,
            } => Some(Self {
                provider,
                key: key.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        }
    }

    /// The error to serve again, saying so.
    fn error(&self, failure_for_micros: u64) -> Error {
        Error::KeyUnavailable {
            provider: self.provider,
            key: self.key.clone(),
            reason: format!(
                "{} (the provider's last failure, served again without asking it for up to {} ms)",
                self.reason,
                failure_for_micros / 1000
            ),
            retryable: true,
        }
    }
}

impl CachedProvider {
    /// `inner` behind a cache whose entries last `keep_for` on `clock` (zero: nothing is kept), remembering a
    /// retryable failure for `failure_for` (zero: never).
    pub fn new(
        inner: Arc<dyn KeyProvider>,
        keep_for: Duration,
        failure_for: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Self {
            inner,
            keep_for_micros: micros(keep_for),
            failure_for_micros: micros(failure_for),
            clock,
            made: Mutex::new(HashMap::new()),
            opened: Mutex::new(HashMap::new()),
            failed: Mutex::new(None),
            making: Mutex::new(HashMap::new()),
            opening: Mutex::new(HashMap::new()),
        }
    }

    /// The data key to wrap new versions of the store `store_id` with under `kek`: the one made last while it has
    /// not expired, else a new one from the provider ([`KeyProvider::new_store_data_key`]). A cache serves one
    /// store.
    ///
    /// # Errors
    /// As [`KeyProvider::new_data_key`]; a retryable failure of the provider within the failure cache's time.
    pub async fn data_key(&self, kek: &str, store_id: &[u8; STORE_ID_LEN]) -> Result<Arc<DataKey>> {
        let kept = || cached(&self.made, kek, self.clock.now_micros());
        if let Some(key) = kept() {
            return Ok(key);
        }
        let made = self
            .single_flight(&self.making, kek.to_owned(), kept, async {
                Ok(Arc::new(recordable(
                    self.inner.new_store_data_key(kek, store_id).await?,
                )?))
            })
            .await?;
        self.keep(&self.made, kek.to_owned(), &made);
        Ok(made)
    }

    /// The data key `wrapped` by `kek` for the store `store_id`, from the cache while it has not expired, else
    /// from the provider ([`KeyProvider::open_store_data_key`]).
    ///
    /// # Errors
    /// As [`KeyProvider::open_data_key`]; a retryable failure of the provider within the failure cache's time.
    pub async fn open(
        &self,
        kek: &KekRef,
        wrapped: &[u8],
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<Secret> {
        let id = (kek.clone(), wrapped.to_vec());
        let kept = || cached(&self.opened, &id, self.clock.now_micros());
        if let Some(key) = kept() {
            return Ok(key);
        }
        let key = self
            .single_flight(&self.opening, id.clone(), kept, async {
                self.inner.open_store_data_key(kek, wrapped, store_id).await
            })
            .await?;
        self.keep(&self.opened, id, &key);
        Ok(key)
    }

    /// Runs `ask` unless a call for `id` is in progress (then waits for it and takes what it left in the cache,
    /// `kept`) or the provider's last retryable failure is recent (then fails with it).
    async fn single_flight<K, T>(
        &self,
        flights: &Mutex<HashMap<K, Flight>>,
        id: K,
        kept: impl Fn() -> Option<T>,
        ask: impl Future<Output = Result<T>>,
    ) -> Result<T>
    where
        K: Hash + Eq + Clone,
    {
        self.recent_failure()?;
        let flight = lock(flights).entry(id.clone()).or_default().clone();
        let result = {
            let _turn = flight.lock().await;
            if let Some(value) = kept() {
                Ok(value)
            } else {
                self.recent_failure()?;
                let result = ask.await;
                if let Err(e) = &result
                    && let Some(failure) = Failure::of(e)
                    && self.failure_for_micros > 0
                {
                    let until = self
                        .clock
                        .now_micros()
                        .saturating_add(self.failure_for_micros);
                    *lock(&self.failed) = Some((until, failure));
                }
                result
            }
        };
        let mut flights = lock(flights);
        // The last one out forgets the call (the map holds one reference, this request another).
        if flights
            .get(&id)
            .is_some_and(|f| Arc::ptr_eq(f, &flight) && Arc::strong_count(f) <= 2)
        {
            flights.remove(&id);
        }
        result
    }

    /// The provider's last retryable failure, while it is remembered.
    fn recent_failure(&self) -> Result<()> {
        let now = self.clock.now_micros();
        match lock(&self.failed).as_ref() {
            Some((until, failure)) if now < *until => Err(failure.error(self.failure_for_micros)),
            _ => Ok(()),
        }
    }

    /// Keeps `value` under `id` for the cache's time (nothing when it is zero).
    fn keep<K: Hash + Eq, V: Clone>(&self, map: &Mutex<HashMap<K, Kept<V>>>, id: K, value: &V) {
        if self.keep_for_micros == 0 {
            return;
        }
        let now = self.clock.now_micros();
        let mut map = lock(map);
        if map.len() >= MAX_CACHED_KEYS {
            map.retain(|_, (until, _)| now < *until);
            if map.len() >= MAX_CACHED_KEYS {
                map.clear();
            }
        }
        map.insert(
            id,
            (now.saturating_add(self.keep_for_micros), value.clone()),
        );
    }
}

/// The entry of `id` in `map` while it has not expired at `now`.
fn cached<K, Q, V>(map: &Mutex<HashMap<K, Kept<V>>>, id: &Q, now: u64) -> Option<V>
where
    K: Hash + Eq + std::borrow::Borrow<Q>,
    Q: Hash + Eq + ?Sized,
    V: Clone,
{
    lock(map)
        .get(id)
        .filter(|(until, _)| now < *until)
        .map(|(_, v)| v.clone())
}

/// The map behind `m`, whether or not a holder panicked (every update leaves it whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;

    use super::*;
    use crate::encryption::LocalProvider;
    use crate::encryption::tests::provider;

    const STORE: [u8; STORE_ID_LEN] = [3; STORE_ID_LEN];

    /// How [`Counting`] answers.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    enum Mode {
        #[default]
        Up,
        /// Refuses, as a KMS key that was disabled (not retryable).
        Disabled,
        /// Fails after 50 ms, retryably, as a KMS that does not answer.
        Down,
    }

    /// A provider that counts its calls and answers as its mode says.
    #[derive(Debug)]
    struct Counting {
        inner: LocalProvider,
        calls: AtomicUsize,
        mode: Mutex<Mode>,
    }

    impl Counting {
        fn new(inner: LocalProvider) -> Arc<Self> {
            Arc::new(Self {
                inner,
                calls: AtomicUsize::new(0),
                mode: Mutex::new(Mode::Up),
            })
        }

        fn set(&self, mode: Mode) {
            *lock(&self.mode) = mode;
        }

        async fn answer(&self, kek: &str) -> Result<()> {
            self.calls.fetch_add(1, SeqCst);
            let mode = *lock(&self.mode);
            match mode {
                Mode::Up => Ok(()),
                Mode::Disabled => Err(self.inner.unavailable(kek, "disabled")),
                Mode::Down => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err(Error::KeyUnavailable {
                        provider: "counting",
                        key: kek.to_owned(),
                        reason: "no answer".into(),
                        retryable: true,
                    })
                }
            }
        }
    }

    #[async_trait::async_trait]
    impl KeyProvider for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }

        async fn new_data_key(&self, kek: &str) -> Result<DataKey> {
            self.answer(kek).await?;
            self.inner.new_data_key(kek).await
        }

        async fn wrap_data_key(&self, kek: &str, key: &Secret) -> Result<DataKey> {
            self.inner.wrap_data_key(kek, key).await
        }

        async fn open_data_key(&self, kek: &KekRef, wrapped: &[u8]) -> Result<Secret> {
            self.answer(&kek.name).await?;
            self.inner.open_data_key(kek, wrapped).await
        }
    }

    #[tokio::test]
    async fn the_cache_asks_once_per_expiry_and_a_disabled_key_stops_everything_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let counting = Counting::new(provider(&dir).0);
        let clock = crate::base::clock::OffsetClock::new();
        let cache = CachedProvider::new(
            counting.clone(),
            Duration::from_secs(60),
            DEFAULT_FAILURE_CACHE,
            clock.clone(),
        );
        let first = cache.data_key("a", &STORE).await.unwrap();
        let again = cache.data_key("a", &STORE).await.unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "new versions share the data key while it is kept"
        );
        assert_eq!(
            cache
                .open(&first.kek, &first.wrapped, &STORE)
                .await
                .unwrap(),
            first.key
        );
        assert_eq!(
            cache
                .open(&first.kek, &first.wrapped, &STORE)
                .await
                .unwrap(),
            first.key
        );
        assert_eq!(counting.calls.load(SeqCst), 2, "one make, one open");

        // Disabled at the provider: served from the cache until the entries expire, then refused.
        counting.set(Mode::Disabled);
        assert!(cache.open(&first.kek, &first.wrapped, &STORE).await.is_ok());
        clock.advance(Duration::from_secs(61));
        let e = cache
            .open(&first.kek, &first.wrapped, &STORE)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::KeyUnavailable { .. }), "{e}");
        assert!(cache.data_key("a", &STORE).await.is_err());
        // Enabled again: everything opens at once (a refusal is not kept), nothing was lost.
        counting.set(Mode::Up);
        assert_eq!(
            cache
                .open(&first.kek, &first.wrapped, &STORE)
                .await
                .unwrap(),
            first.key
        );
        let newer = cache.data_key("a", &STORE).await.unwrap();
        assert!(
            !Arc::ptr_eq(&first, &newer),
            "a new data key after the expiry"
        );

        let uncached = CachedProvider::new(
            counting.clone(),
            Duration::ZERO,
            DEFAULT_FAILURE_CACHE,
            clock,
        );
        let before = counting.calls.load(SeqCst);
        uncached
            .open(&first.kek, &first.wrapped, &STORE)
            .await
            .unwrap();
        uncached
            .open(&first.kek, &first.wrapped, &STORE)
            .await
            .unwrap();
        assert_eq!(
            counting.calls.load(SeqCst),
            before + 2,
            "a zero expiry keeps nothing"
        );
    }

    /// Many requests that miss the cache for one key at once make one call; with the provider down, that call's
    /// failure is served to every request (of any key) at once for the failure cache's time, then the provider
    /// is asked again, and once it answers, keys open.
    #[tokio::test]
    async fn misses_ask_once_and_a_provider_that_is_down_is_not_waited_for_again() {
        let dir = tempfile::tempdir().unwrap();
        let counting = Counting::new(provider(&dir).0);
        let clock = crate::base::clock::OffsetClock::new();
        let keep = Duration::from_secs(60);
        let cache = Arc::new(CachedProvider::new(
            counting.clone(),
            keep,
            Duration::from_secs(2),
            clock.clone(),
        ));
        let made: Vec<DataKey> = [
            counting.inner.new_data_key("a").await.unwrap(),
            counting.inner.new_data_key("a").await.unwrap(),
        ]
        .into();

        let opens = (0..16).map(|_| {
            let cache = Arc::clone(&cache);
            let (kek, wrapped) = (made[0].kek.clone(), made[0].wrapped.clone());
            tokio::spawn(async move { cache.open(&kek, &wrapped, &STORE).await })
        });
        for open in futures::future::join_all(opens).await {
            assert_eq!(open.unwrap().unwrap(), made[0].key);
        }
        assert_eq!(counting.calls.load(SeqCst), 1, "16 misses, one call");

        counting.set(Mode::Down);
        let before = counting.calls.load(SeqCst);
        let opens = (0..16).map(|_| {
            let cache = Arc::clone(&cache);
            let (kek, wrapped) = (made[1].kek.clone(), made[1].wrapped.clone());
            tokio::spawn(async move { cache.open(&kek, &wrapped, &STORE).await })
        });
        for open in futures::future::join_all(opens).await {
            let e = open.unwrap().unwrap_err();
            assert!(e.is_retryable(), "{e}");
        }
        assert_eq!(counting.calls.load(SeqCst), before + 1, "one call failed");
        // Another key, a new data key: failed at once, the provider not asked.
        let t = std::time::Instant::now();
        let e = cache.data_key("a", &STORE).await.unwrap_err();
        assert!(e.to_string().contains("served again"), "{e}");
        assert!(t.elapsed() < Duration::from_millis(40), "{:?}", t.elapsed());
        assert_eq!(counting.calls.load(SeqCst), before + 1);
        // Kept keys still open while it is down.
        assert_eq!(
            cache
                .open(&made[0].kek, &made[0].wrapped, &STORE)
                .await
                .unwrap(),
            made[0].key
        );

        // Back up: asked again once the failure is older than the failure cache.
        counting.set(Mode::Up);
        assert!(
            cache
                .open(&made[1].kek, &made[1].wrapped, &STORE)
                .await
                .is_err()
        );
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            cache
                .open(&made[1].kek, &made[1].wrapped, &STORE)
                .await
                .unwrap(),
            made[1].key
        );
        assert!(lock(&cache.opening).is_empty(), "no call left behind");
    }
}
