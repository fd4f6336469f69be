//! With [`crate::SchedulerConfig::bulk_cpu_pool`], the CPU work of background classes — chunk checksums and
//! compression, decoding, BLAKE3 digests — runs on a pool of its own: at most half the cores (at least one
//! thread), instead of the async runtime's workers. On a 2-core machine, bulk hashing then takes at most one
//! core, and an interactive task never waits for a worker busy hashing a 60 MiB blob; but bulk work then gets
//! at most that one core, which under load starved it (measured: BENCHMARKS.md), so it is off by default.
//! Work of other classes (and with scheduling off) runs inline.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::oneshot;

use super::ClassTag;
use crate::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// The pool's job queue; `None` when its threads could not be started (work then runs inline).
static POOL: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();

/// Threads of the pool: half the cores, at least one.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
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
/// ([`crate::SchedulerConfig::bulk_cpu_pool`]), else right here.
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
            .tag(&crate::PriorityClass::new(name).expect("name"))
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
    async fn a_panicking_job_is_an_error_and_the_pool_survives() {
        let bulk = tag("bulk");
        let failed = run(Some(&bulk), || -> u32 { panic!("boom") }).await;
        assert!(matches!(failed, Err(Error::Internal { .. })), "{failed:?}");
        assert_eq!(run(Some(&bulk), || 7).await.expect("run"), 7);
    }
}
