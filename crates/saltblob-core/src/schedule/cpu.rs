//! With [`crate::schedule::SchedulerConfig::bulk_cpu_pool`], the CPU work of background classes — chunk checksums and
//! compression, decoding, BLAKE3 digests — runs on a pool of its own instead of the async runtime's workers:
//! one thread per core, each at a lower OS priority ([`POOL_NICE`]). Bulk work then still uses the whole
//! machine while interactive work is idle, and the OS runs an interactive task's worker first when both want
//! a core, so an interactive task never waits for a worker busy hashing a 60 MiB blob. (The pool's first form,
//! half the cores at normal priority, starved bulk work under load: docs/bench/journal/isolation.md,
//! *Isolation: small operations under huge-blob load*.) Work of other classes (and with scheduling off) runs
//! inline.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::oneshot;

use super::ClassTag;
use crate::base::error::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// The pool's job queue; `None` when its threads could not be started (work then runs inline).
static POOL: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();

/// Threads of the pool: one per core.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The nice value of the pool's threads: the OS gives a thread of nice 10 about a tenth of the CPU time of a
/// thread of nice 0 (the runtime's workers) when both are runnable.
pub(crate) const POOL_NICE: i32 = 10;

/// Lowers the calling thread's OS priority to [`POOL_NICE`]: on Linux a thread's nice value is its own, set
/// with `setpriority` on its thread id. A failure is logged: the pool then runs at normal priority.
fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), POOL_NICE) {
        tracing::warn!(
            "cannot lower the priority of a bulk CPU thread (it runs at normal priority): {e}"
        );
    }
}

fn pool() -> Option<&'static Mutex<Sender<Job>>> {
    POOL.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..threads() {
            let rx = Arc::clone(&rx);
            let started = std::thread::Builder::new()
                .name(format!("saltblob-bulk-cpu-{n}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        let job = match rx.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        match job {
                            // A panicking job drops its result sender: its caller gets an error.
                            Ok(job) => drop(catch_unwind(AssertUnwindSafe(job))),
                            Err(_) => return,
                        }
                    }
                });
            if let Err(e) = started {
                tracing::warn!("cannot start a bulk CPU thread, running bulk CPU work inline: {e}");
                return None;
            }
        }
        Some(Mutex::new(tx))
    })
    .as_ref()
}

/// Runs `work` on the bulk CPU pool when `class` is a background class and the store pools bulk CPU work
/// ([`crate::schedule::SchedulerConfig::bulk_cpu_pool`]), else right here.
pub(crate) async fn run<T: Send + 'static>(
    class: Option<&ClassTag>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let Some(pool) = class.is_some_and(ClassTag::pools_cpu).then(pool).flatten() else {
        return Ok(work());
    };
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(work());
    });
    let sent = pool
        .lock()
        .map_err(|_| Error::internal("bulk CPU pool", "its queue is poisoned"))?
        .send(job);
    if sent.is_err() {
        return Err(Error::internal("bulk CPU pool", "its threads are gone"));
    }
    rx.await
        .map_err(|e| Error::internal("bulk CPU work failed (panicked)", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Scheduler, SchedulerConfig};

    fn tag(name: &str) -> ClassTag {
        Scheduler::new(SchedulerConfig::default().with_bulk_cpu_pool(true))
            .tag(&crate::schedule::PriorityClass::new(name).expect("name"))
            .expect("known")
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn background_work_runs_on_the_pool_and_the_rest_inline() {
        let here = thread_name();
        let bulk = run(Some(&tag("bulk")), thread_name).await.expect("run");
        assert!(bulk.starts_with("saltblob-bulk-cpu-"), "{bulk}");
        let interactive = run(Some(&tag("interactive")), thread_name)
            .await
            .expect("run");
        assert_eq!(interactive, here);
        assert_eq!(run(None, thread_name).await.expect("run"), here);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_pool_has_a_thread_per_core_at_a_lower_priority() {
        let nice = || rustix::process::getpriority_process(Some(rustix::thread::gettid()));
        let here = nice().expect("own priority");
        let pooled = run(Some(&tag("bulk")), nice)
            .await
            .expect("run")
            .expect("pool priority");
        assert_eq!(pooled, POOL_NICE.max(here), "this thread's nice: {here}");
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        assert_eq!(threads(), cores);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_job_is_an_error_and_the_pool_survives() {
        let bulk = tag("bulk");
        let failed = run(Some(&bulk), || -> u32 { panic!("boom") }).await;
        assert!(matches!(failed, Err(Error::Internal { .. })), "{failed:?}");
        assert_eq!(run(Some(&bulk), || 7).await.expect("run"), 7);
    }
}
