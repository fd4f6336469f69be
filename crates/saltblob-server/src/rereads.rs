//! How a request reads again what another request changed under it: the named policies of the server's re-read
//! loops, each a [`Backoff`] of the core (the one way every crate retries). A loop starts a session
//! (`POLICY.start()`), runs `while tries.next_attempt().await { … }` and takes its fallback once the attempts are
//! used up; the waits between attempts are jittered, so that requests that collided do not collide again in step.
//! A leaf: it uses no other module of the crate.

use std::time::Duration;

use saltblob_core::{Backoff, Jitter};

/// An object (or a copy source) replaced between a request's head and its read: 3 reads, after waits of up to
/// 5 and 10 ms.
pub(crate) const REPLACED: Backoff = Backoff::new(3, Duration::from_millis(5))
    .growing(2)
    .with_jitter(Jitter::Full);

/// A compare-and-set of an upload record that another request's write overtook (a part's touch, a complete, an
/// abort): 8 attempts, each reading the record again, after waits growing from up to 1 ms to at most 50 ms.
pub(crate) const UPLOAD_RECORD: Backoff = Backoff::new(8, Duration::from_millis(1))
    .growing(2)
    .capped(Duration::from_millis(50))
    .with_jitter(Jitter::Full);

/// A complete whose compose committed, marking its upload `completed` while another request writes the record:
/// 8 attempts, up to 50 ms apart.
pub(crate) const MARK_COMPLETED: Backoff =
    Backoff::new(8, Duration::from_millis(50)).with_jitter(Jitter::Full);

/// A change of a bucket record in place (its ACL, its versioning) that another change of the record overtook:
/// 16 attempts, each reading the record again, after waits growing from up to 1 ms to at most 50 ms (clients
/// that set a bucket's ACL from many threads at once, as ceph/s3-tests' `test_bucket_concurrent_set_canned_acl`
/// does with 50).
pub(crate) const BUCKET_RECORD: Backoff = Backoff::new(16, Duration::from_millis(1))
    .growing(2)
    .capped(Duration::from_millis(50))
    .with_jitter(Jitter::Full);

/// The upload sweep reading an upload again after another request moved it on (an abort, a complete): 3 reads,
/// at once.
pub(crate) const SWEEP: Backoff = Backoff::new(3, Duration::ZERO);

#[cfg(test)]
mod tests {
    use super::*;

    /// The policies' schedules, as their docs state them.
    #[test]
    fn the_policies_wait_as_documented() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(REPLACED.nominal_waits().collect::<Vec<_>>(), ms(&[5, 10]));
        assert_eq!(
            UPLOAD_RECORD.nominal_waits().collect::<Vec<_>>(),
            ms(&[1, 2, 4, 8, 16, 32, 50])
        );
        assert_eq!(
            MARK_COMPLETED.nominal_waits().collect::<Vec<_>>(),
            ms(&[50; 7])
        );
        assert_eq!(SWEEP.attempts(), 3);
    }
}
