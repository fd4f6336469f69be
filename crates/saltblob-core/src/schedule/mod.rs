//! Priority classes, and the scheduler every backend request of a store goes through.
//!
//! Every operation runs in a [`PriorityClass`]. The store's scheduler admits each backend request (a record
//! read or write, a segment of chunks) by class: start-time fair queuing over request bytes, in proportion to
//! the classes' shares (`fair.rs`); background requests in flight are bounded by a limit that follows the
//! measured latency of every class, and below its minimum by a duty, pauses between them (`limit.rs`), while
//! small requests never queue behind them (neither `interactive` ones nor the record reads and writes of a
//! background class, such as gc's). Bulk work is cut into units of [`SchedulerConfig::bulk_unit_bytes`].
//! `scheduled.rs` puts the scheduler in front of the backend; `cpu.rs` can move the CPU work of background
//! classes to a pool ([`SchedulerConfig::bulk_cpu_pool`]).
//!
//! A backend may read the class of the request it is serving ([`current_class`]) to use its engine's own
//! levers (low-priority writes, separate in-flight budgets).
//!
//! Uses `base/`, `format/` (a class by layout) and [`crate::backend`] (the store it schedules), nothing above.

mod class;
pub(crate) mod cpu;
mod fair;
mod limit;
mod scheduled;

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
// Tokio's clock, so that the pauses and latencies can be tested with paused time.
use tokio::time::Instant;

pub use self::class::{BULK, INTERACTIVE, MAX_LIMIT, MAX_SHARES, PriorityClass, SchedulerConfig};
use self::fair::FairQueue;
use self::limit::{GradientLimit, normalized};
pub(crate) use self::scheduled::ScheduledStore;
use crate::base::error::Result;

/// What every request costs besides its bytes, in the fair queue's accounting: a record read is not free.
const REQUEST_OVERHEAD_BYTES: u64 = 4096;
/// Longest pause between background requests when the duty is below 1.0 (see `limit.rs`), so that one slow
/// request does not stop background work for long.
const MAX_BULK_PAUSE: Duration = Duration::from_secs(1);

tokio::task_local! {
    static CURRENT: ClassTag;
    /// The class of the operations of a scope ([`in_scope`]) that name none.
    static SCOPE: PriorityClass;
}

/// Runs `fut` with `class` as the class of each operation in it (on this task) that names none, and `tag`
/// (`class`'s, `None` when scheduling is off) as the class of its requests no operation covers.
pub(crate) async fn in_scope<F: Future>(
    class: PriorityClass,
    tag: Option<ClassTag>,
    fut: F,
) -> F::Output {
    SCOPE.scope(class, in_class(tag, fut)).await
}

/// The class a backend request runs in, as a backend sees it through [`current_class`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassTag {
    id: usize,
    name: Arc<str>,
    shares: u32,
    background: bool,
    /// Whether the CPU work of this class runs on the bulk CPU pool ([`SchedulerConfig::bulk_cpu_pool`]).
    pooled_cpu: bool,
}

impl ClassTag {
    /// The class's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The class's shares.
    pub fn shares(&self) -> u32 {
        self.shares
    }

    /// Whether this class's CPU work runs on the bulk CPU pool.
    pub(crate) fn pools_cpu(&self) -> bool {
        self.pooled_cpu
    }

    /// Whether the class is background work: fewer shares than `interactive` (`bulk` by default). Engines
    /// give its requests their low-priority treatment.
    pub fn is_background(&self) -> bool {
        self.background
    }
}

/// The class of the operation whose backend request runs on this task, if a scheduling store issued it.
/// Backends read it for their engine's levers; read it before handing work to another thread.
pub fn current_class() -> Option<ClassTag> {
    CURRENT.try_with(Clone::clone).ok()
}

/// Runs `fut` with `tag` as its class (none: the caller's class, if any).
pub(crate) async fn in_class<F: Future>(tag: Option<ClassTag>, fut: F) -> F::Output {
    match tag {
        Some(tag) => CURRENT.scope(tag, fut).await,
        None => fut.await,
    }
}

/// What the scheduler did for one class, from [`crate::store::BlobStore::scheduler_stats`].
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ClassStats {
    /// The class.
    pub name: String,
    /// Its shares.
    pub shares: u32,
    /// Requests admitted so far.
    pub admitted: u64,
    /// Bytes those requests moved.
    pub bytes: u64,
    /// Requests waiting now.
    pub queued: usize,
    /// Requests in flight now.
    pub inflight: usize,
    /// Total time admitted requests waited, in µs.
    pub wait_micros: u64,
    /// Longest wait of an admitted request, in µs.
    pub max_wait_micros: u64,
}

/// A snapshot of the scheduler, from [`crate::store::BlobStore::scheduler_stats`].
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct SchedulerStats {
    /// Whether the store schedules requests ([`SchedulerConfig::enabled`]).
    pub enabled: bool,
    /// Requests allowed in flight now (the adaptive limit).
    pub limit: usize,
    /// Share of time background classes may keep a request in flight now (1.0: no pauses; see
    /// [`SchedulerConfig::min_bulk_duty`]).
    pub duty: f64,
    /// Requests in flight now.
    pub inflight: usize,
    /// Per class, in name order.
    pub classes: Vec<ClassStats>,
}

/// The store's scheduler: classes, the fair queue, the adaptive limit.
#[derive(Debug)]
pub(crate) struct Scheduler {
    config: SchedulerConfig,
    /// The start of the clock the limit's samples are timed on.
    epoch: Instant,
    tags: Vec<ClassTag>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    queue: FairQueue<Waiter>,
    limit: GradientLimit,
    inflight: usize,
    classes: Vec<ClassStats>,
    /// Per class: whether it is a background class ([`ClassTag::is_background`]).
    background: Vec<bool>,
    /// Per class: bytes per chunk of its recent chunk reads, to estimate a read's cost before it runs.
    chunk_bytes: Vec<u64>,
    next_waiter: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    since: Instant,
    admitted: oneshot::Sender<Instant>,
}

impl Scheduler {
    /// The scheduler of a validated `config`.
    pub(crate) fn new(config: SchedulerConfig) -> Self {
        let interactive = config.shares.get(INTERACTIVE).copied().unwrap_or(1);
        let tags: Vec<ClassTag> = config
            .shares
            .iter()
            .enumerate()
            .map(|(id, (name, &shares))| ClassTag {
                id,
                name: Arc::from(name.as_str()),
                shares,
                background: shares < interactive,
                pooled_cpu: config.bulk_cpu_pool && shares < interactive,
            })
            .collect();
        let shares: Vec<u32> = tags.iter().map(|t| t.shares).collect();
        let state = State {
            queue: FairQueue::new(&shares),
            limit: GradientLimit::new(
                config.min_limit,
                config.initial_limit,
                config.max_limit,
                config.min_bulk_duty,
                config.latency_tolerance,
                &tags.iter().map(|t| t.background).collect::<Vec<_>>(),
            ),
            inflight: 0,
            classes: tags
                .iter()
                .map(|t| ClassStats {
                    name: t.name.to_string(),
                    shares: t.shares,
                    ..ClassStats::default()
                })
                .collect(),
            background: tags.iter().map(|t| t.background).collect(),
            chunk_bytes: vec![64 << 10; tags.len()],
            next_waiter: 0,
        };
        Self {
            config,
            epoch: Instant::now(),
            tags,
            state: Mutex::new(state),
        }
    }

    /// Whether requests are scheduled.
    pub(crate) fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The tag of a class the configuration has (checked by [`SchedulerConfig::check_known`]).
    pub(crate) fn tag(&self, class: &PriorityClass) -> Result<ClassTag> {
        self.config.check_known(class)?;
        self.tags
            .iter()
            .find(|t| &*t.name == class.name())
            .cloned()
            .ok_or_else(|| {
                crate::base::error::Error::invalid("priority", format!("unknown class \"{class}\""))
            })
    }

    /// The class an operation runs in: the one it names, else its scope's ([`in_scope`]), else the store's
    /// default, else `by_layout` (see [`PriorityClass::for_layout`]). `None` when scheduling is off.
    pub(crate) fn choose(
        &self,
        named: Option<&PriorityClass>,
        by_layout: PriorityClass,
    ) -> Result<Option<ClassTag>> {
        let class = self.resolve(named, by_layout);
        let tag = self.tag(&class)?;
        Ok(self.enabled().then_some(tag))
    }

    /// The class `named`, else the scope's, else the store's default, else `by_layout`, whether scheduling is
    /// on or off.
    pub(crate) fn resolve(
        &self,
        named: Option<&PriorityClass>,
        by_layout: PriorityClass,
    ) -> PriorityClass {
        named
            .cloned()
            .or_else(|| SCOPE.try_with(Clone::clone).ok())
            .or_else(|| self.config.default_class.clone())
            .unwrap_or(by_layout)
    }

    /// Raw chunk bytes of one backend call in `class`: `batch_bytes`, or at most
    /// [`SchedulerConfig::bulk_unit_bytes`] for a background class.
    pub(crate) fn unit_bytes(&self, batch_bytes: usize, class: Option<&ClassTag>) -> usize {
        match class {
            Some(tag) if self.enabled() && tag.background => {
                batch_bytes.min(self.config.bulk_unit_bytes)
            }
            _ => batch_bytes,
        }
    }

    /// The class of a request issued outside any operation's class: the store's default, else `interactive`.
    fn fallback(&self) -> ClassTag {
        let class = self.resolve(None, PriorityClass::interactive());
        let found = self.tags.iter().find(|t| &*t.name == class.name());
        // `interactive` always exists (validated); the first class is a mere safety net.
        found.or(self.tags.first()).cloned().unwrap_or(ClassTag {
            id: 0,
            name: Arc::from(INTERACTIVE),
            shares: 1,
            background: false,
            pooled_cpu: false,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain counters: a panic elsewhere while holding it leaves nothing half-done worth
        // refusing service for.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a request of class `class` may start now. Background classes (`bulk`) together hold at most the
    /// adaptive limit, and each always may start one request when it has none in flight, so that it is never
    /// starved; with the duty below 1.0 they hold one request at a time, its slot kept through the pause after
    /// it (see [`Permit`]'s drop). Any other class (`interactive`) may hold up to [`SchedulerConfig::max_limit`]
    /// by itself: small requests never queue behind bulk units, and the limit, which shrinks when their latency
    /// rises, throttles the bulk work instead.
    fn may_start(&self, state: &State, class: usize, limit: usize) -> bool {
        let inflight = state.classes[class].inflight;
        if state.background[class] {
            let background: usize = (state.classes.iter().zip(&state.background))
                .filter(|(_, b)| **b)
                .map(|(c, _)| c.inflight)
                .sum();
            if state.limit.duty() < 1.0 {
                background == 0
            } else {
                inflight == 0 || background < limit
            }
        } else {
            inflight < self.config.max_limit
        }
    }

    /// Admits queued requests while some may start.
    fn dispatch(&self, state: &mut State) {
        loop {
            let limit = state.limit.limit();
            let runnable: Vec<bool> = (0..state.classes.len())
                .map(|c| self.may_start(state, c, limit))
                .collect();
            let Some((class, waiter)) = state.queue.pop(|c| runnable[c]) else {
                return;
            };
            let now = Instant::now();
            if waiter.admitted.send(now).is_err() {
                continue; // the waiter gave up; its slot was never taken
            }
            let waited =
                u64::try_from(now.duration_since(waiter.since).as_micros()).unwrap_or(u64::MAX);
            state.inflight += 1;
            let stats = &mut state.classes[class];
            stats.inflight += 1;
            stats.admitted += 1;
            stats.wait_micros = stats.wait_micros.saturating_add(waited);
            stats.max_wait_micros = stats.max_wait_micros.max(waited);
        }
    }

    /// Waits until a request of `class` costing `bytes` may run; the permit holds its slot until dropped (and,
    /// in a background class with the duty below 1.0, through the pause after it).
    pub(crate) async fn admit(self: &Arc<Self>, class: usize, bytes: u64) -> Permit {
        self.enqueue(class, bytes, true).await
    }

    /// Queues a request for admission; `data`: whether it is a data request, paced by the duty.
    async fn enqueue(self: &Arc<Self>, class: usize, bytes: u64, data: bool) -> Permit {
        let cost = bytes + REQUEST_OVERHEAD_BYTES;
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = self.lock();
            let id = state.next_waiter;
            state.next_waiter += 1;
            state.queue.push(
                class,
                cost,
                Waiter {
                    id,
                    since: Instant::now(),
                    admitted: tx,
                },
            );
            self.dispatch(&mut state);
            id
        };
        let waiting = Waiting {
            sched: Arc::clone(self),
            class,
            id,
            rx: Some(rx),
            data,
        };
        waiting.admitted(cost).await
    }

    /// Like [`Scheduler::admit`], for a request that moves no data of its own (a record read or write, a
    /// version's deletion): in a background class it starts at once, beside the class's data units and
    /// ahead of those queued, while the class holds fewer than [`SchedulerConfig::max_limit`] requests. Such a
    /// request costs the backend little, and the reclaim pass issues its requests one after another: queued
    /// behind the bulk units of large puts, each waited for those units' disk writes, and gc fell behind.
    pub(crate) async fn admit_record(self: &Arc<Self>, class: usize, bytes: u64) -> Permit {
        {
            let mut state = self.lock();
            let background = state.background.get(class).copied().unwrap_or(false);
            if background && state.classes[class].inflight < self.config.max_limit {
                state.inflight += 1;
                let inflight = state.inflight;
                let stats = &mut state.classes[class];
                stats.inflight += 1;
                stats.admitted += 1;
                let cost = bytes + REQUEST_OVERHEAD_BYTES;
                return Permit {
                    sched: Arc::clone(self),
                    class,
                    cost,
                    bytes,
                    started: Instant::now(),
                    inflight,
                    paced: false,
                };
            }
        }
        self.enqueue(class, bytes, false).await
    }

    /// Estimated bytes of a read of `chunks` chunks in `class`.
    pub(crate) fn estimate_chunk_read(&self, class: usize, chunks: usize) -> u64 {
        let per_chunk = self
            .lock()
            .chunk_bytes
            .get(class)
            .copied()
            .unwrap_or(64 << 10);
        per_chunk.saturating_mul(chunks as u64)
    }

    /// Learns the bytes per chunk of a read that returned `bytes` for `chunks` chunks.
    pub(crate) fn learn_chunk_read(&self, class: usize, chunks: usize, bytes: u64) {
        if chunks > 0
            && let Some(estimate) = self.lock().chunk_bytes.get_mut(class)
        {
            *estimate = bytes / chunks as u64;
        }
    }

    /// A snapshot for [`crate::store::BlobStore::scheduler_stats`].
    pub(crate) fn stats(&self) -> SchedulerStats {
        let state = self.lock();
        SchedulerStats {
            enabled: self.enabled(),
            limit: state.limit.limit(),
            duty: state.limit.duty(),
            inflight: state.inflight,
            classes: state
                .classes
                .iter()
                .enumerate()
                .map(|(id, c)| ClassStats {
                    queued: state.queue.queued(id),
                    ..c.clone()
                })
                .collect(),
        }
    }
}

/// A request waiting for admission. Dropped before it is admitted, it leaves the queue; dropped after, it gives
/// its slot back.
struct Waiting {
    sched: Arc<Scheduler>,
    class: usize,
    id: u64,
    rx: Option<oneshot::Receiver<Instant>>,
    /// Whether it is a data request ([`Permit`]'s `paced` in a background class).
    data: bool,
}

impl Waiting {
    async fn admitted(mut self, cost: u64) -> Permit {
        let rx = self.rx.as_mut();
        let started = match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Instant::now()),
            None => Instant::now(),
        };
        self.rx = None;
        let (inflight, paced) = {
            let state = self.sched.lock();
            let background = state.background.get(self.class).copied();
            (state.inflight, self.data && background.unwrap_or(false))
        };
        Permit {
            sched: Arc::clone(&self.sched),
            class: self.class,
            cost,
            bytes: cost - REQUEST_OVERHEAD_BYTES,
            started,
            inflight,
            paced,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        let mut state = self.sched.lock();
        let id = self.id;
        state.queue.remove(self.class, |w| w.id == id);
        if rx.try_recv().is_ok() {
            // Admitted, but nobody will run the request: give the slot back.
            self.sched.release(&mut state, self.class);
        }
    }
}

/// One admitted request's slot. Dropping it records the request's latency and lets the next one in.
#[derive(Debug)]
pub(crate) struct Permit {
    sched: Arc<Scheduler>,
    class: usize,
    /// The cost the request was queued with.
    cost: u64,
    /// The bytes it moved (the estimate until [`Permit::moved`] says otherwise).
    bytes: u64,
    started: Instant,
    inflight: usize,
    /// Whether the duty's pause follows this request: a background class's data request (record requests of
    /// background classes, admitted beside its data, are not paced).
    paced: bool,
}

impl Permit {
    /// Records the bytes the request really moved.
    pub(crate) fn moved(&mut self, bytes: u64) {
        self.bytes = bytes;
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let latency = normalized(self.elapsed(), self.bytes);
        let real_cost = self.bytes + REQUEST_OVERHEAD_BYTES;
        let mut state = self.sched.lock();
        let at = self.sched.epoch.elapsed().as_secs_f64();
        state
            .limit
            .sample_at(self.class, latency, self.inflight, at);
        if real_cost != self.cost {
            let delta = i64::try_from(real_cost).unwrap_or(i64::MAX)
                - i64::try_from(self.cost).unwrap_or(i64::MAX);
            state.queue.charge(self.class, delta);
        }
        let stats = &mut state.classes[self.class];
        stats.bytes = stats.bytes.saturating_add(self.bytes);
        let duty = state.limit.duty();
        if self.paced && duty < 1.0 {
            let pause = self.elapsed().mul_f64(1.0 / duty - 1.0).min(MAX_BULK_PAUSE);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                // The slot stays taken through the pause, so that no background request starts in it; it is
                // given back when the pause ends, or when the runtime drops the task.
                let slot = PausedSlot {
                    sched: Arc::clone(&self.sched),
                    class: self.class,
                };
                drop(state);
                runtime.spawn(async move {
                    tokio::time::sleep(pause).await;
                    drop(slot);
                });
                return;
            }
        }
        self.sched.release(&mut state, self.class);
    }
}

/// A background slot kept through the pause after its request; dropping it gives the slot back.
struct PausedSlot {
    sched: Arc<Scheduler>,
    class: usize,
}

impl Drop for PausedSlot {
    fn drop(&mut self) {
        self.sched.release(&mut self.sched.lock(), self.class);
    }
}

impl Scheduler {
    /// Gives back one slot of `class` and admits what may start now.
    fn release(&self, state: &mut State, class: usize) {
        state.inflight = state.inflight.saturating_sub(1);
        let stats = &mut state.classes[class];
        stats.inflight = stats.inflight.saturating_sub(1);
        self.dispatch(state);
    }
}

#[cfg(test)]
mod tests;
