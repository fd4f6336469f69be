//! Segmented blobs: parts written with [`BlobStore::put_segment`], composed without copying by
//! [`BlobStore::compose`], reclaimed with the blob that owns them, or by gc when abandoned.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::faults::{Faulty, Hold, Point};
use super::gc::chunks_by_version;
use super::{data, prefix, small_config, store};
use crate::backend::{ChunkStore, Namespace};
use crate::base::clock::OffsetClock;
use crate::base::error::Error;
use crate::base::units::KIB;
use crate::format::manifest::segments_digest;
use crate::format::manifest::{ManifestBody, Segment};
use crate::state::config::PutOptions;
use crate::upkeep::fsck::FsckOptions;
use crate::upkeep::gc::GcOptions;

/// A gc pass with grace 0 over the keys under `prefix`.
async fn gc_now(store: &crate::store::BlobStore, prefix: &str) -> crate::upkeep::gc::GcReport {
    store
        .gc(&GcOptions::new()
            .with_grace(Duration::ZERO)
            .with_prefix(prefix.to_owned()))
        .await
        .expect("gc")
}

/// Writes `parts` as segments of `key`, each claimable for `lease`.
pub(super) async fn put_segments(
    store: &crate::store::BlobStore,
    key: &str,
    parts: &[Bytes],
    lease: Duration,
) -> Vec<Segment> {
    let mut out = Vec::new();
    for part in parts {
        let segment = store
            .put_segment(key, &part[..], &PutOptions::new(), lease)
            .await
            .expect("put_segment");
        assert_eq!(segment.size, part.len() as u64);
        // What a caller keeps between the part's upload and the compose survives encoding.
        let kept = Segment::decode(&segment.encode()).expect("segment record");
        assert_eq!(kept, segment);
        out.push(kept);
    }
    out
}

/// Moves `clock` on by `by`, plus the commit window where writes may land late: past every lease the case
/// gave, and past the takeover hold.
fn advance_past_leases(clock: &Arc<OffsetClock>, backend: &Arc<dyn ChunkStore>, by: Duration) {
    clock.advance(by);
    if backend.info().late_writes {
        clock.advance(Duration::from_micros(
            crate::base::timing::COMMIT_WINDOW_MICROS,
        ));
    }
}

/// Two clients of one backend on one clock (intent lease 20 s: long enough for a held compose's deadline to
/// outlast what a case does meanwhile on a slow cluster; grace 0): `composer` through a fault injector, to hold
/// its commit, and `other` direct; and two parts of `key`, written as segments claimable for an hour.
struct TwoClients {
    clock: Arc<OffsetClock>,
    intent_lease: Duration,
    faulty: Arc<Faulty>,
    composer: crate::store::BlobStore,
    other: crate::store::BlobStore,
    parts: [Bytes; 2],
    whole: Vec<u8>,
    segments: Vec<Segment>,
}

impl TwoClients {
    async fn new(backend: &Arc<dyn ChunkStore>, key: &str, seed: u64) -> Self {
        let clock = OffsetClock::new();
        let intent_lease = Duration::from_secs(20);
        let config = small_config()
            .with_intent_lease(intent_lease)
            .with_grace(Duration::ZERO)
            .with_clock(clock.clone());
        let faulty = Faulty::new(Arc::clone(backend));
        let composer = store(
            &(Arc::clone(&faulty) as Arc<dyn ChunkStore>),
            config.clone(),
        );
        let other = store(backend, config);
        let parts = [
            data(200 * KIB as usize, seed),
            data(50 * KIB as usize, seed + 1),
        ];
        let whole = [&parts[0][..], &parts[1][..]].concat();
        let segments = put_segments(&other, key, &parts, Duration::from_secs(3600)).await;
        Self {
            clock,
            intent_lease,
            faulty,
            composer,
            other,
            parts,
            whole,
            segments,
        }
    }

    /// Starts `composer`'s compose of the segments under `key` and returns once it has claimed them and its
    /// commit (the manifest write) is held; release the hold to let it commit.
    async fn held_compose(
        &self,
        key: &str,
    ) -> (
        Hold,
        tokio::task::JoinHandle<crate::base::error::Result<crate::format::manifest::Manifest>>,
    ) {
        let commit = self.faulty.hold(Point::RecordWrite(Namespace::Manifest));
        let compose = tokio::spawn({
            let (composer, key, segments) =
                (self.composer.clone(), key.to_owned(), self.segments.clone());
            async move { composer.compose(&key, &segments, &PutOptions::new()).await }
        });
        commit.reached().await;
        (commit, compose)
    }
}

/// A blob composed of a salted, a single-partition and an inline segment reads back whole and in ranges across
/// segment boundaries, with its attributes; composing wrote no chunk (the segments' chunks are its own), gc
/// and fsck leave it whole, and replacing it reclaims every segment's chunks once the segments' leases, which
/// the compose ended rather than removed, are over.
pub async fn composed_blobs_read_back_and_own_their_segments(backend: Arc<dyn ChunkStore>) {
    let p = prefix("segments");
    let key = format!("{p}composed");
    let clock = OffsetClock::new();
    let intent_lease = Duration::from_secs(5);
    let store = store(
        &backend,
        small_config()
            .with_intent_lease(intent_lease)
            .with_clock(clock.clone()),
    );
    let parts = [
        data(300 * KIB as usize, 1),
        data(20 * KIB as usize, 2),
        data(500, 3),
    ];
    let whole: Bytes = parts
        .iter()
        .fold(BytesMut::new(), |mut b, p| {
            b.extend_from_slice(p);
            b
        })
        .freeze();
    let segments = put_segments(&store, &key, &parts, Duration::from_secs(3600)).await;
    assert!(matches!(segments[2].body, ManifestBody::Inline(_)));
    assert!(
        matches!(store.head(&key).await, Err(Error::NotFound { .. })),
        "segments commit nothing"
    );
    let before = chunks_by_version(&backend, &key).await;
    assert_eq!(before.len(), 2, "two chunked segments: {before:?}");

    let opts = PutOptions::new()
        .with_content_type("video/mp4")
        .with_metadata("owner", "ops");
    let m = store
        .compose(&key, &segments, &opts)
        .await
        .expect("compose");
    assert_eq!(m.size, whole.len() as u64);
    assert_eq!(m.digest, segments_digest(&segments));
    assert_eq!(
        chunks_by_version(&backend, &key).await,
        before,
        "no chunk copied"
    );
    let head = store.head(&key).await.expect("head");
    assert_eq!(head, m);
    assert_eq!(head.content_type.as_deref(), Some("video/mp4"));
    assert_eq!(head.metadata.get("owner").map(String::as_str), Some("ops"));
    assert!(store.get(&key).await.expect("get") == whole, "whole read");
    let first = 300 * KIB;
    let second = first + 20 * KIB;
    for range in [
        0..10,
        first - 5..first + 5,
        second - 100..second + 100,
        first - 1..second + 1,
        second..whole.len() as u64,
        0..whole.len() as u64,
    ] {
        let got = store.get_range(&key, range.clone()).await.expect("range");
        let (s, e) = (range.start as usize, range.end as usize);
        assert!(got == whole.slice(s..e), "range {range:?}");
    }
    let described = store.describe(&key).await.expect("describe");
    assert_eq!(described.manifest, m);
    assert_eq!(described.layout_kind, "segmented");
    assert_eq!(
        described.bytes_per_salt.iter().sum::<u64>(),
        320 * KIB,
        "the chunked segments' bytes, by salt: {:?}",
        described.bytes_per_salt
    );

    // gc and fsck see the segments' chunks as the composed blob's: nothing reclaimed, nothing orphaned.
    let r = gc_now(&store, &p).await;
    assert_eq!((r.abandoned_puts, r.reclaim.versions), (0, 0), "{r:?}");
    let f = store
        .fsck(&FsckOptions::new().with_prefix(p.clone()))
        .await
        .expect("fsck");
    assert!(f.damaged.is_empty() && f.orphans.is_empty(), "{f:?}");
    assert_eq!(f.blobs, 1, "{f:?}");
    assert!(store.get(&key).await.expect("get after gc") == whole);

    // Replaced: every segment's chunks go with it, once the leases the compose left on its segments are over
    // (another compose of the same segments may still land until then: the next case).
    store
        .put(&key, data(10, 4), &PutOptions::new())
        .await
        .expect("overwrite");
    let r = gc_now(&store, &p).await;
    assert_eq!(
        r.reclaim.versions, 0,
        "segments kept while their intents live: {r:?}"
    );
    assert_eq!(chunks_by_version(&backend, &key).await, before);
    // No version id is drawn from here on (see `abandoned_and_discarded_segments_are_reclaimed`).
    advance_past_leases(&clock, &backend, intent_lease * 2);
    // (gc with a prefix: a reclaim pass over every key would move the queue's low-water mark to this advanced
    // clock, and other cases on a shared keyspace would find their entries below it.)
    let r = gc_now(&store, &p).await;
    assert_eq!(r.stale_intents + r.abandoned_puts, 2, "{r:?}");
    assert!(
        chunks_by_version(&backend, &key).await.is_empty(),
        "segments reclaimed with the version that owned them"
    );
    let f = store
        .fsck(&FsckOptions::new().with_prefix(p))
        .await
        .expect("fsck");
    assert!(f.damaged.is_empty() && f.orphans.is_empty(), "{f:?}");
}

/// A segment whose lease ended is reclaimed by gc, and so is one discarded, once a lease has passed since the
/// discard; neither can be composed any more (nothing is committed), while a compose of the segments that remain
/// succeeds.
pub async fn abandoned_and_discarded_segments_are_reclaimed(backend: Arc<dyn ChunkStore>) {
    let p = prefix("segments-gone");
    let key = format!("{p}blob");
    let clock = OffsetClock::new();
    let lease = Duration::from_secs(1);
    let config = small_config()
        .with_intent_lease(Duration::from_millis(300))
        .with_clock(clock.clone());
    let store = store(&backend, config);
    let short = put_segments(&store, &key, &[data(100 * KIB as usize, 1)], lease).await;
    let long = put_segments(
        &store,
        &key,
        &[data(30 * KIB as usize, 2), data(30 * KIB as usize, 3)],
        Duration::from_secs(3600),
    )
    .await;
    assert_eq!(chunks_by_version(&backend, &key).await.len(), 3);

    // Discarded: it cannot be composed, and its chunks go once its lease is over (below).
    assert!(
        store
            .discard_segment(&key, &long[1])
            .await
            .expect("discard")
    );
    assert!(!store.discard_segment(&key, &long[1]).await.expect("twice"));
    match store.compose(&key, &long, &PutOptions::new()).await {
        Err(Error::SegmentGone { version, .. }) => assert_eq!(version, long[1].version),
        other => panic!("compose of a discarded segment: {other:?}"),
    }
    assert!(matches!(
        store.head(&key).await,
        Err(Error::NotFound { .. })
    ));

    // Bad input: nothing, or the same segment twice.
    for bad in [&[][..], &[long[0].clone(), long[0].clone()][..]] {
        assert!(matches!(
            store.compose(&key, bad, &PutOptions::new()).await,
            Err(Error::InvalidArgument { .. })
        ));
    }
    // The segment that is left composes. (Before the clock moves on: version ids drawn later in this process
    // would carry the advanced time, and other cases run in the same process.)
    let m = store
        .compose(&key, &long[..1], &PutOptions::new())
        .await
        .expect("compose");
    assert_eq!(m.size, 30 * KIB);
    assert!(store.get(&key).await.expect("get") == data(30 * KIB as usize, 2));

    // Abandoned, and discarded: once their leases (and, where writes may land late, the commit window) are
    // over, gc reclaims them.
    advance_past_leases(&clock, &backend, lease * 2);
    let r = gc_now(&store, &p).await;
    assert_eq!(r.abandoned_puts, 2, "{r:?}");
    let left = chunks_by_version(&backend, &key).await;
    assert!(
        !left.contains_key(&short[0].version) && !left.contains_key(&long[1].version),
        "{left:?}"
    );
    assert!(matches!(
        store.compose(&key, &short, &PutOptions::new()).await,
        Err(Error::SegmentGone { .. })
    ));
}

/// A compose that dies after its commit, before removing its segments' intents (here: the removals fail),
/// leaves intents that outlive their leases: gc finds the segments owned by the committed blob and only drops
/// the intents; nothing is reclaimed, the blob reads back whole, and fsck finds no orphan.
pub async fn leftover_segment_intents_do_not_reclaim_a_composed_blob(backend: Arc<dyn ChunkStore>) {
    let p = prefix("segments-leftover");
    let key = format!("{p}blob");
    let clock = OffsetClock::new();
    let config = small_config()
        .with_intent_lease(Duration::from_millis(300))
        .with_clock(clock.clone());
    let faulty = Faulty::new(Arc::clone(&backend));
    let composer = store(
        &(Arc::clone(&faulty) as Arc<dyn ChunkStore>),
        config.clone(),
    );
    let cleaner = store(&backend, config);
    let parts = [data(100 * KIB as usize, 5), data(10 * KIB as usize, 6)];
    let segments = put_segments(&composer, &key, &parts, Duration::from_secs(5)).await;

    let commit = faulty.hold(Point::RecordWrite(Namespace::Manifest));
    let compose = tokio::spawn({
        let (composer, key, segments) = (composer.clone(), key.clone(), segments.clone());
        async move { composer.compose(&key, &segments, &PutOptions::new()).await }
    });
    commit.reached().await;
    faulty.fail(Point::RecordWrite(Namespace::ParkedIntent), true);
    commit.release();
    compose
        .await
        .expect("compose task")
        .expect("the commit landed; removing intents is best effort");

    // No version id is drawn from here on (see above).
    advance_past_leases(&clock, &backend, Duration::from_secs(10));
    let r = gc_now(&cleaner, &p).await;
    assert_eq!((r.stale_intents, r.abandoned_puts), (2, 0), "{r:?}");
    let whole = [&parts[0][..], &parts[1][..]].concat();
    assert!(cleaner.get(&key).await.expect("get") == whole);
    let f = cleaner
        .fsck(&FsckOptions::new().with_prefix(p))
        .await
        .expect("fsck");
    assert!(f.damaged.is_empty() && f.orphans.is_empty(), "{f:?}");
}

/// A segment discarded (by another client) while a compose of it is past its claim and about to commit stays
/// with the composed blob: gc with grace 0, run from that other client between the discard and the commit,
/// reclaims nothing, and the blob reads back whole after the commit and after gc. A compose that reaches its
/// commit later than three quarters of the intent lease after its call commits nothing (`IntentLost`), and a
/// compose retried then succeeds.
pub async fn a_segment_discarded_during_its_compose_stays_with_the_composed_blob(
    backend: Arc<dyn ChunkStore>,
) {
    let p = prefix("segments-discard-race");
    let key = format!("{p}blob");
    // The compose has claimed its segments; its manifest write is held.
    let c = TwoClients::new(&backend, &key, 7).await;
    let (commit, compose) = c.held_compose(&key).await;
    let TwoClients {
        clock,
        intent_lease,
        faulty,
        other: cleaner,
        parts,
        whole,
        segments,
        ..
    } = c;
    for segment in &segments {
        assert!(
            cleaner
                .discard_segment(&key, segment)
                .await
                .expect("discard"),
            "the lease was ended"
        );
    }
    let r = gc_now(&cleaner, &p).await;
    assert_eq!(
        (r.abandoned_puts, r.reclaim.versions, r.reclaim.chunks),
        (0, 0, 0),
        "nothing of a segment a compose may commit is reclaimed: {r:?}"
    );
    commit.release();
    let m = compose
        .await
        .expect("compose task")
        .expect("the compose commits");
    assert!(cleaner.get(&key).await.expect("get") == whole);

    // Later, with every lease (and the commit window) over: the blob owns its segments, gc takes nothing.
    advance_past_leases(&clock, &backend, intent_lease * 4);
    let r = gc_now(&cleaner, &p).await;
    assert_eq!((r.abandoned_puts, r.reclaim.chunks), (0, 0), "{r:?}");
    assert_eq!(cleaner.head(&key).await.expect("head").version, m.version);
    assert!(cleaner.get(&key).await.expect("get after gc") == whole);
    let f = cleaner
        .fsck(&FsckOptions::new().with_prefix(p.clone()))
        .await
        .expect("fsck");
    assert!(f.damaged.is_empty() && f.orphans.is_empty(), "{f:?}");

    // A compose held before its commit past its deadline commits nothing; retried, it commits. (The manifest
    // read that precedes an unconditional commit is held for longer than the lease, in real time: no version id
    // is drawn on the advanced clock.)
    let lease = Duration::from_secs(1);
    let quick = store(
        &(Arc::clone(&faulty) as Arc<dyn ChunkStore>),
        small_config().with_intent_lease(lease),
    );
    let late_key = format!("{p}late");
    let late = put_segments(&quick, &late_key, &parts, Duration::from_secs(3600)).await;
    let read = faulty.hold(Point::RecordRead(Namespace::Manifest));
    let compose = tokio::spawn({
        let (quick, key, late) = (quick.clone(), late_key.clone(), late.clone());
        async move { quick.compose(&key, &late, &PutOptions::new()).await }
    });
    read.reached().await;
    tokio::time::sleep(lease).await;
    read.release();
    match compose.await.expect("compose task") {
        Err(Error::IntentLost { .. }) => {}
        other => panic!("a compose past its deadline: {other:?}"),
    }
    assert!(matches!(
        quick.head(&late_key).await,
        Err(Error::NotFound { .. })
    ));
    quick
        .compose(&late_key, &late, &PutOptions::new())
        .await
        .expect("retried, the compose commits");
    assert!(quick.get(&late_key).await.expect("get") == whole);
}

/// A compose stalled between its deadline check and the engine write (its manifest write held in a layer above
/// the backend, as a scheduler's queue or a starved runtime would hold it, until the store's clock is past three
/// quarters of the intent lease after its call) commits nothing: the backend refuses the write at its own check
/// (`IntentLost`, not an unknown outcome), the key keeps the version it had, and a compose retried then commits.
/// (Checked only before the call, the held write landed late.)
pub async fn a_compose_stalled_before_its_engine_write_commits_nothing(
    backend: Arc<dyn ChunkStore>,
) {
    let p = prefix("segments-stalled-commit");
    let key = format!("{p}blob");
    let c = TwoClients::new(&backend, &key, 13).await;
    let kept = data(10, 14);
    let before = c
        .other
        .put(&key, kept.clone(), &PutOptions::new())
        .await
        .expect("put");
    let (commit, compose) = c.held_compose(&key).await;
    c.clock.advance(c.intent_lease);
    commit.release();
    match compose.await.expect("compose task") {
        Err(Error::IntentLost { .. }) => {}
        other => panic!("a compose whose write reached the engine past its deadline: {other:?}"),
    }
    assert_eq!(
        c.other.head(&key).await.expect("head").version,
        before.version,
        "the key keeps the version it had"
    );
    assert!(c.other.get(&key).await.expect("get") == kept);
    let m = c
        .composer
        .compose(&key, &c.segments, &PutOptions::new())
        .await
        .expect("retried, the compose commits");
    assert_eq!(c.other.head(&key).await.expect("head").version, m.version);
    assert!(c.other.get(&key).await.expect("get") == c.whole);
}

/// Two composes of the same segments (a client retrying a complete): the first is held before its commit, the
/// second commits, is replaced by a put, and gc with grace 0 runs; the second's segments are queued but kept,
/// because their intents live on (the compose ended their leases instead of removing them). Then the first
/// commit lands and the blob reads back whole; once the leases are over gc drops the intents (the current
/// version owns the segments) and fsck finds nothing wrong. (That a replaced composed version's chunks do go
/// once its segments' leases are over: `composed_blobs_read_back_and_own_their_segments`.)
pub async fn a_compose_landing_after_a_second_compose_was_replaced_keeps_its_chunks(
    backend: Arc<dyn ChunkStore>,
) {
    let p = prefix("segments-two-composes");
    let key = format!("{p}blob");
    let c = TwoClients::new(&backend, &key, 9).await;
    let stored = chunks_by_version(&backend, &key).await;
    // The first compose has claimed the segments; its commit is held.
    let (commit, held) = c.held_compose(&key).await;
    let TwoClients {
        clock,
        intent_lease,
        other: second,
        whole,
        segments,
        ..
    } = c;
    let m2 = second
        .compose(&key, &segments, &PutOptions::new())
        .await
        .expect("the second compose commits");
    assert!(second.get(&key).await.expect("get") == whole);
    second
        .put(&key, data(10, 11), &PutOptions::new())
        .await
        .expect("replace");
    let r = gc_now(&second, &p).await;
    assert_eq!(
        (r.abandoned_puts, r.reclaim.chunks),
        (0, 0),
        "a segment another compose may still commit is kept: {r:?}"
    );
    assert_eq!(chunks_by_version(&backend, &key).await, stored);

    commit.release();
    let m1 = held
        .await
        .expect("compose task")
        .expect("the first compose commits");
    assert_ne!(m1.version, m2.version);
    assert_eq!(second.head(&key).await.expect("head").version, m1.version);
    assert!(second.get(&key).await.expect("get") == whole);

    // Leases over: the current version owns the segments; gc only drops their intents.
    advance_past_leases(&clock, &backend, intent_lease * 2);
    let r = gc_now(&second, &p).await;
    assert_eq!((r.abandoned_puts, r.reclaim.chunks), (0, 0), "{r:?}");
    assert!(second.get(&key).await.expect("get after gc") == whole);
    let f = second
        .fsck(&FsckOptions::new().with_prefix(p))
        .await
        .expect("fsck");
    assert!(f.damaged.is_empty() && f.orphans.is_empty(), "{f:?}");
}
