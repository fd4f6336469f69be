//! The listing index: splits while writers write, rows without manifests, bounded reads per page, and the upgrade
//! of a keyspace written by the landed build of schema format 1 (`tests/fixtures/format-1.cql`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use saltblob_core::{BlobStore, PutOptions};
use saltblob_cql::listing::{BuildSteps, RangeState};
use saltblob_cql::{CqlConfig, CqlStore};

use saltblob_core::conformance::small_config;

use super::{connect_to, keyspace, url_of};

/// Index bounds small enough to split in a test: ranges of at most 40 rows, the directory read again at once,
/// splits finished 300 ms after they begin.
const SMALL: &str = "listing_max_rows=40&listing_refresh=1ms&listing_split_wait=300ms";

fn store_of(backend: &Arc<CqlStore>) -> BlobStore {
    BlobStore::new(Arc::clone(backend) as _, small_config()).unwrap()
}

async fn listed(store: &BlobStore, prefix: &str) -> Vec<Bytes> {
    store
        .list_stream(prefix.as_bytes())
        .map_ok(|e| e.key)
        .try_collect()
        .await
        .unwrap()
}

/// Runs the maintenance until no range is moving and none is over the bound (at most `rounds` times).
async fn settle(backend: &CqlStore, rounds: usize) {
    for _ in 0..rounds {
        let report = backend.maintain_listing().await.unwrap();
        let dir = backend.listing_directory().await.unwrap();
        let moving = dir.entries().iter().any(|e| e.state == RangeState::Moving);
        if !moving && report.new_ranges == 0 && !report.skipped {
            return;
        }
        tokio::time::sleep(Duration::from_millis(350)).await;
    }
    panic!("the index did not settle in {rounds} maintenance rounds");
}

/// Two writers put 600 keys in random order (deleting some) while the maintenance splits the index: every
/// listing, taken while ranges move, shows exactly the keys committed before it, in order; at the end no range
/// holds more than the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn splits_keep_every_key_listed_in_order_while_writers_write() {
    let ks = format!("{}_split", keyspace());
    let a = Arc::new(connect_to(&ks, SMALL).await);
    let b = Arc::new(connect_to(&ks, SMALL).await);
    let (sa, sb) = (store_of(&a), store_of(&b));
    let mut keys: Vec<String> = (0..600)
        .map(|i| format!("k/{:04}", (i * 7919) % 600))
        .collect();
    let deleted: BTreeSet<String> = keys.iter().step_by(9).cloned().collect();
    let expected: BTreeSet<String> = keys
        .iter()
        .filter(|k| !deleted.contains(*k))
        .cloned()
        .collect();
    let maintainer = {
        let a = Arc::clone(&a);
        tokio::spawn(async move {
            for _ in 0..40 {
                a.maintain_listing().await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let half = keys.split_off(300);
    let dbg_ks = ks.clone();
    let dbg_backend = Arc::clone(&a);
    let write = |store: BlobStore, keys: Vec<String>| {
        let dbg_ks = dbg_ks.clone();
        let dbg_backend = Arc::clone(&dbg_backend);
        async move {
            for (i, k) in keys.iter().enumerate() {
                store
                    .put(k, Bytes::from(k.clone()), &PutOptions::new())
                    .await
                    .unwrap();
                if i % 50 == 0 {
                    // Every key committed so far by this writer is listed, whatever is moving.
                    let seen: BTreeSet<Bytes> = listed(&store, "k/").await.into_iter().collect();
                    for done in &keys[..=i] {
                        if !seen.contains(done.as_bytes()) {
                            let dir = dbg_backend.listing_directory().await.unwrap();
                            for e in dir.entries() {
                                eprintln!(
                                    "range start={:?} id={:?} state={:?} source={:?} since={}",
                                    e.start,
                                    &e.id[..4],
                                    e.state,
                                    e.source.as_ref().map(|s| s[..4].to_vec()),
                                    e.since
                                );
                            }
                            let rows = dbg_backend.session().query_unpaged(format!("SELECT range, key, writetime(present) FROM {dbg_ks}.listing WHERE key = ? ALLOW FILTERING"), (Bytes::from(done.clone()),)).await.unwrap().into_rows_result().unwrap();
                            for r in rows.rows::<(Bytes, Bytes, Option<i64>)>().unwrap() {
                                eprintln!("row {:?}", r.unwrap());
                            }
                            eprintln!("manifest: {:?}", store.head(done).await.map(|m| m.version));
                            eprintln!(
                                "listed again: {}",
                                listed(&store, "k/")
                                    .await
                                    .contains(&Bytes::from(done.clone()))
                            );
                            panic!("{done} missing mid-split; listed {} keys", seen.len());
                        }
                    }
                }
            }
        }
    };
    tokio::join!(write(sa.clone(), keys), write(sb.clone(), half));
    for k in &deleted {
        sa.delete(k).await.unwrap();
    }
    maintainer.await.unwrap();
    // Each process adds its tally of rows to the ranges' counters every 10 s or 1000 changes; `b`'s maintenance
    // adds it now (and finds `a`'s lease, or does a round).
    b.maintain_listing().await.unwrap();
    settle(&a, 20).await;
    let all: Vec<Bytes> = listed(&sb, "").await;
    let want: Vec<Bytes> = expected.iter().map(|k| Bytes::from(k.clone())).collect();
    assert_eq!(all, want, "every key once, in order, none deleted");
    let dir = a.listing_directory().await.unwrap();
    assert!(
        dir.entries().len() >= 600 / 40,
        "{} ranges",
        dir.entries().len()
    );
    // No range holds more than the bound.
    let starts: Vec<Bytes> = dir.entries().iter().map(|e| e.start.clone()).collect();
    for (i, start) in starts.iter().enumerate() {
        let in_range = all
            .iter()
            .filter(|k| *k >= start && starts.get(i + 1).is_none_or(|next| *k < next))
            .count();
        assert!(in_range <= 40, "range {i} holds {in_range} keys");
    }
    eprintln!(
        "listing index after 600 puts and {} deletes: {} ranges",
        deleted.len(),
        starts.len()
    );
}

/// An index row whose manifest is absent (a writer that died between its two writes) is not listed; once older
/// than the commit window, the listing removes it; a young one (a put in flight) stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn an_index_row_without_its_manifest_is_not_listed_and_a_stale_one_goes() {
    let ks = format!("{}_stale", keyspace());
    let backend = Arc::new(connect_to(&ks, "").await);
    let store = store_of(&backend);
    for k in ["s/a", "s/b", "s/c"] {
        store.put(k, &b"v"[..], &PutOptions::new()).await.unwrap();
    }
    let root = backend.listing_directory().await.unwrap().entries()[0]
        .id
        .clone();
    let now = saltblob_cql::clock::next_timestamp();
    let hour = 3_600_000_000i64;
    for (key, ts) in [("s/bx", now - hour), ("s/by", now)] {
        backend
            .session()
            .query_unpaged(
                format!("INSERT INTO {ks}.listing (range, key, present) VALUES (?, ?, true) USING TIMESTAMP ?"),
                (root.clone(), Bytes::from(key), ts),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        listed(&store, "s/").await,
        ["s/a", "s/b", "s/c"].map(Bytes::from)
    );
    let rows: Vec<(Bytes,)> = backend
        .session()
        .query_unpaged(
            format!("SELECT key FROM {ks}.listing WHERE range = ? AND key >= ?"),
            (root, Bytes::from("s/")),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .rows::<(Bytes,)>()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let left: Vec<&[u8]> = rows.iter().map(|(k,)| &k[..]).collect();
    assert_eq!(
        left,
        [&b"s/a"[..], b"s/b", b"s/by", b"s/c"],
        "the stale row went, the young one stays"
    );
}

/// A listing page and a jump past a common prefix read a bounded number of index partitions, however many ranges
/// the index has: one or two per range the page covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn a_page_reads_a_bounded_number_of_index_partitions() {
    let ks = format!("{}_pages", keyspace());
    let backend = Arc::new(connect_to(&ks, SMALL).await);
    let store = store_of(&backend);
    for p in 0..20 {
        for i in 0..30 {
            let k = format!("p{p:02}/{i:03}");
            store
                .put(&k, Bytes::from(k.clone()), &PutOptions::new())
                .await
                .unwrap();
        }
    }
    settle(&backend, 20).await;
    let ranges = backend.listing_directory().await.unwrap().entries().len();
    assert!(ranges >= 10, "{ranges} ranges");
    // A page of 30 keys from the middle reads 30 + 30/4 + 1 = 38 index rows (spares for keys deleted since their
    // row was read): each range those span once, here three of 20 rows at most (none moving, so no source read),
    // and one more when a range holds exactly the rows left.
    let before = backend.listing_reads();
    let page = store
        .list_page(b"", Some(Bytes::from("p09/999")), 30)
        .await
        .unwrap();
    let reads = backend.listing_reads() - before;
    assert_eq!(
        page.entries.first().map(|e| e.key.clone()),
        Some(Bytes::from("p10/000"))
    );
    assert!(
        reads <= 4,
        "{reads} index reads for one page of {ranges} ranges"
    );
    // A jump past the common prefix `p10/`: the next key, one read.
    let before = backend.listing_reads();
    let next = store
        .list_page(b"", Some(Bytes::from("p10/\u{10ffff}")), 1)
        .await
        .unwrap();
    assert_eq!(
        next.entries.first().map(|e| e.key.clone()),
        Some(Bytes::from("p11/000"))
    );
    let reads = backend.listing_reads() - before;
    assert!(reads <= 2, "{reads} index reads to skip a prefix");
    // S3's walk after a common prefix asks one key: two manifests read, whatever the prefix holds.
    let before = backend.listed_records();
    store
        .list_page(b"", Some(Bytes::from("p11/\u{10ffff}")), 1)
        .await
        .unwrap();
    let records = backend.listed_records() - before;
    assert!(records <= 2, "{records} manifests read to skip a prefix");
}

/// A keyspace written by the landed build of format 1: refused with the way out named, then upgraded in steps (an
/// interrupted upgrade resumes) into several ranges; every blob lists and reads back as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn a_format_1_keyspace_is_refused_then_upgraded_with_nothing_lost() {
    let ks = format!("{}_v1", keyspace());
    let probe = connect_to(keyspace(), "").await;
    probe
        .session()
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            (),
        )
        .await
        .unwrap();
    let fixture = include_str!("../fixtures/format-1.cql");
    for statement in fixture
        .lines()
        .filter(|l| !l.starts_with("--") && !l.trim().is_empty())
    {
        probe
            .session()
            .query_unpaged(statement.replace("{ks}", &ks), ())
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let options = "listing_max_rows=8";
    let config = || CqlConfig::from_url(&url_of(&ks, options)).unwrap();
    let refused = CqlStore::connect(config()).await.expect_err("format 1");
    assert!(
        refused
            .to_string()
            .contains("saltblob --store <URL> upgrade"),
        "{refused}"
    );

    // Interrupted after one page of 10 manifests: still format 1, and refused.
    let steps = BuildSteps {
        pages: Some(1),
        rows: Some(10),
    };
    let first = CqlStore::upgrade_in_steps(config(), false, steps)
        .await
        .unwrap();
    assert_eq!(
        (first.from, first.to, first.report.complete),
        (1, 1, false),
        "{first:?}"
    );
    assert!(first.report.planned && first.report.ranges > 1, "{first:?}");
    assert!(CqlStore::connect(config()).await.is_err());
    let done = CqlStore::upgrade(config(), false).await.unwrap();
    assert!(done.report.resumed && done.report.complete, "{done:?}");
    assert_eq!((done.from, done.to), (1, 3));

    let backend = Arc::new(CqlStore::connect(config()).await.unwrap());
    let store = store_of(&backend);
    let keys: Vec<Bytes> = listed(&store, "").await;
    assert_eq!(keys.len(), 26, "{keys:?}");
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    assert!(keys.contains(&Bytes::from_static(b"d/\xff\x00bin")));
    assert_eq!(
        listed(&store, "a/").await,
        ["a/1.txt", "a/2.txt", "a/b/3.txt", "a/b/4.txt", "a/c/5.txt"].map(Bytes::from)
    );
    let one: Vec<u8> = (0..40_000u32).map(|i| ((i * 7 + 3) % 251) as u8).collect();
    let two: Vec<u8> = (0..50_000u32).map(|i| ((i * 13 + 5) % 253) as u8).collect();
    assert_eq!(store.get("chunked/one.bin").await.unwrap(), one);
    assert_eq!(store.get("chunked/two.bin").await.unwrap(), two);
    assert_eq!(
        store
            .head("chunked/two.bin")
            .await
            .unwrap()
            .content_type
            .as_deref(),
        Some("application/octet-stream")
    );
    for key in &keys {
        store
            .get(key)
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
    }
    // Upgrading again reconciles: nothing to add or remove.
    let again = CqlStore::upgrade(config(), false).await.unwrap();
    assert_eq!(
        (again.from, again.to, again.report.stale_removed),
        (3, 3, 0)
    );
}

/// A keyspace of schema format 2 (intents and the reclaim queue one partition each): refused with the way out
/// named, upgraded at once (nothing to build or copy) to format 3, then a store like any other. (Draining what
/// a format-2 build queued is the conformance case `an_earlier_builds_queue_and_intents_are_drained`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn a_format_2_keyspace_is_refused_then_upgraded() {
    let ks = format!("{}_v2", keyspace());
    let probe = connect_to(keyspace(), "").await;
    let session = probe.session();
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            (),
        )
        .await
        .unwrap();
    // The tables of format 2 (all but the partitioned one), and its marker, as a format-2 build leaves them.
    for (table, ddl) in saltblob_cql::schema::table_ddl(&ks) {
        if table != saltblob_cql::schema::PARTITIONED {
            session.query_unpaged(ddl, ()).await.unwrap();
        }
    }
    session
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.records (ns, key, value) VALUES (-1, ?, 0x02) USING TIMESTAMP 2"
            ),
            (Bytes::from_static(saltblob_cql::schema::MARKER_KEY),),
        )
        .await
        .unwrap();
    let config = || CqlConfig::from_url(&url_of(&ks, "")).unwrap();
    let refused = CqlStore::connect(config()).await.expect_err("format 2");
    let text = refused.to_string();
    assert!(
        text.contains("schema format 2") && text.contains("saltblob --store <URL> upgrade"),
        "{text}"
    );
    let done = CqlStore::upgrade(config(), false).await.unwrap();
    assert_eq!(
        (done.from, done.to, done.report.complete),
        (2, 3, true),
        "{done:?}"
    );
    assert_eq!(done.report.manifests, 0, "nothing was read: {done:?}");

    let backend = Arc::new(CqlStore::connect(config()).await.unwrap());
    let store = store_of(&backend);
    let value = vec![4u8; 300_000];
    store
        .put("after/upgrade", value.clone(), &PutOptions::new())
        .await
        .unwrap();
    store
        .put("after/upgrade", b"small".to_vec(), &PutOptions::new())
        .await
        .unwrap();
    let r = store
        .gc(&saltblob_core::GcOptions::new().with_grace(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(r.reclaim.versions, 1, "{r:?}");
    assert_eq!(
        store.get("after/upgrade").await.unwrap(),
        b"small".as_slice()
    );
    let again = CqlStore::upgrade(config(), false).await.unwrap();
    assert_eq!((again.from, again.to), (3, 3));
}

/// The rows of `key` deleted from every range partition, at the manifest's own write time (a deletion that
/// shadows the manifest's index row, as a row lost by hand would be).
async fn drop_index_row(backend: &CqlStore, ks: &str, key: &str) {
    let session = backend.session();
    let ts: (Option<i64>,) = session
        .query_unpaged(
            format!("SELECT WRITETIME(value) FROM {ks}.manifests WHERE key = ?"),
            (Bytes::from(key.to_owned()),),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    for entry in backend.listing_directory().await.unwrap().entries() {
        session
            .query_unpaged(
                format!("DELETE FROM {ks}.listing USING TIMESTAMP ? WHERE range = ? AND key = ?"),
                (ts.0.unwrap(), entry.id.clone(), Bytes::from(key.to_owned())),
            )
            .await
            .unwrap();
    }
}

/// fsck compares the index with the manifests over several ranges: keys the index lacks are damage (listings
/// miss them) and stale rows are counted; `--repair` writes the keys back (past a deletion that shadows them) and
/// removes the stale rows, and a second check is clean. A prefix limits both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn fsck_finds_what_the_index_lacks_and_its_stale_rows_and_repair_fixes_both() {
    use saltblob_core::FsckOptions;
    let ks = format!("{}_fsck_index", keyspace());
    let backend = Arc::new(connect_to(&ks, SMALL).await);
    let store = store_of(&backend);
    let keys: Vec<String> = (0..120).map(|i| format!("f/{i:03}")).collect();
    for k in keys.iter().map(String::as_str).chain(["g/1", "g/2", "g/3"]) {
        store.put(k, &b"v"[..], &PutOptions::new()).await.unwrap();
    }
    settle(&backend, 40).await;
    assert!(backend.listing_directory().await.unwrap().entries().len() > 2);

    let clean = store.fsck(&FsckOptions::new()).await.unwrap();
    let index = clean
        .index
        .clone()
        .expect("the CQL backend checks its index");
    assert_eq!((index.manifests, index.entries), (123, 123));
    assert!(index.missing.is_empty() && index.stale == 0, "{index:?}");
    assert!(clean.damaged.is_empty(), "{:?}", clean.damaged);

    for key in ["f/007", "f/100"] {
        drop_index_row(&backend, &ks, key).await;
    }
    let root = backend.listing_directory().await.unwrap().entries()[0]
        .id
        .clone();
    let hour = 3_600_000_000i64;
    backend
        .session()
        .query_unpaged(
            format!("INSERT INTO {ks}.listing (range, key, present) VALUES (?, ?, true) USING TIMESTAMP ?"),
            (root, Bytes::from("a/gone"), saltblob_cql::clock::next_timestamp() - hour),
        )
        .await
        .unwrap();
    assert_eq!(listed(&store, "f/").await.len(), 118, "listings miss them");

    let found = store.fsck(&FsckOptions::new()).await.unwrap();
    let index = found.index.clone().unwrap();
    assert_eq!(index.missing, [Bytes::from("f/007"), Bytes::from("f/100")]);
    assert_eq!(
        (index.restored, index.stale, index.stale_removed),
        (0, 1, 0)
    );
    assert_eq!(index.entries, 122, "121 rows and the stale one");
    let damaged: Vec<&[u8]> = found.damaged.iter().map(|d| &d.key[..]).collect();
    assert_eq!(damaged, [&b"f/007"[..], b"f/100"]);
    assert!(found.damaged[0].problem.contains("listing index"));

    let under_g = store
        .fsck(&FsckOptions::new().with_prefix("g/"))
        .await
        .unwrap()
        .index
        .unwrap();
    assert_eq!((under_g.manifests, under_g.entries), (3, 3));
    assert!(under_g.missing.is_empty() && under_g.stale == 0);

    let repaired = store
        .fsck(&FsckOptions::new().with_repair(true))
        .await
        .unwrap();
    let index = repaired.index.unwrap();
    assert_eq!((index.restored, index.stale_removed), (2, 1));
    assert!(repaired.damaged.is_empty(), "{:?}", repaired.damaged);
    assert_eq!(listed(&store, "f/").await.len(), 120);

    let again = store
        .fsck(&FsckOptions::new())
        .await
        .unwrap()
        .index
        .unwrap();
    assert!(again.missing.is_empty() && again.stale == 0, "{again:?}");
    assert_eq!(again.entries, 123);
}
