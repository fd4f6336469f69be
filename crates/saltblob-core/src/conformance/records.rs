//! The record level of [`ChunkStore`] itself, below the blob API: preconditions checked with the write and what
//! a write reports ([`RecordWrite`], [`Previous`]), atomic groups ([`ChunkStore::write_records`]), namespaces,
//! and [`ChunkStore::scan_records`] (key order, prefix, `limit`, paging with `start_after`).
//!
//! The cases write records under keys of their own (`rec-<case>-<random>…`) that no blob, intent or queue entry
//! uses (as a reclaim key, such a key reads as due in the far future), and delete them at the end, so they may
//! share a database with other cases.

use std::sync::Arc;

use bytes::Bytes;

use crate::backend::{
    BlobRef, ChunkId, ChunkStore, ChunkWrite, GroupChunks, GroupWrite, Namespace, Precondition,
    Previous, RecordChange, RecordWrite,
};

use crate::base::version::VersionId;

/// Every namespace, each of which a backend may store apart.
const NAMESPACES: [Namespace; 4] = [
    Namespace::Manifest,
    Namespace::Reclaim,
    Namespace::Meta,
    Namespace::Intent,
];

/// The namespaces scans are checked in: manifests (listing) and one internal namespace (the reclaim queue and
/// the intent scan), which backends tend to store differently.
const SCANNED: [Namespace; 2] = [Namespace::Manifest, Namespace::Reclaim];

fn b(s: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(s.as_ref())
}

/// A record key of its own for one case.
fn record_key(case: &str) -> String {
    format!("rec-{case}-{:016x}", rand::random::<u64>())
}

async fn put(
    backend: &Arc<dyn ChunkStore>,
    ns: Namespace,
    key: &[u8],
    value: &str,
    cond: Precondition,
) -> RecordWrite {
    backend
        .put_record(ns, key, b(value), &cond)
        .await
        .unwrap_or_else(|e| panic!("{ns:?}: put {value:?} if {cond:?}: {e}"))
}

async fn delete(
    backend: &Arc<dyn ChunkStore>,
    ns: Namespace,
    key: &[u8],
    cond: Precondition,
) -> RecordWrite {
    backend
        .delete_record(ns, key, &cond)
        .await
        .unwrap_or_else(|e| panic!("{ns:?}: delete if {cond:?}: {e}"))
}

async fn get(backend: &Arc<dyn ChunkStore>, ns: Namespace, key: &[u8]) -> Option<Bytes> {
    backend
        .get_record(ns, key)
        .await
        .unwrap_or_else(|e| panic!("{ns:?}: get: {e}"))
}

async fn scan(
    backend: &Arc<dyn ChunkStore>,
    ns: Namespace,
    prefix: &[u8],
    start_after: Option<&[u8]>,
    limit: usize,
) -> Vec<(Bytes, Bytes)> {
    backend
        .scan_records(ns, prefix, start_after, limit)
        .await
        .unwrap_or_else(|e| panic!("{ns:?}: scan {prefix:?} after {start_after:?}: {e}"))
}

/// Every record of `ns` under `prefix`, a page of `page` records at a time, each page starting after the last
/// key of the one before.
async fn scan_paged(
    backend: &Arc<dyn ChunkStore>,
    ns: Namespace,
    prefix: &[u8],
    page: usize,
) -> Vec<(Bytes, Bytes)> {
    let mut all: Vec<(Bytes, Bytes)> = Vec::new();
    loop {
        let after = all.last().map(|(k, _)| k.clone());
        let got = scan(backend, ns, prefix, after.as_deref(), page).await;
        assert!(
            got.len() <= page,
            "{ns:?}: a page of {page} held {}",
            got.len()
        );
        let full = got.len() == page;
        all.extend(got);
        if !full {
            return all;
        }
    }
}

/// Writes `records` in `ns` in reverse order (so that the store, not the order of writes, sorts them).
async fn write_all(backend: &Arc<dyn ChunkStore>, ns: Namespace, records: &[(Bytes, Bytes)]) {
    for (k, v) in records.iter().rev() {
        backend
            .put_record(ns, k, v.clone(), &Precondition::None)
            .await
            .unwrap_or_else(|e| panic!("{ns:?}: put: {e}"));
    }
}

async fn delete_all<'a>(
    backend: &Arc<dyn ChunkStore>,
    ns: Namespace,
    keys: impl IntoIterator<Item = &'a Bytes>,
) {
    for k in keys {
        delete(backend, ns, k, Precondition::None).await;
    }
}

pub async fn record_writes_check_preconditions(backend: Arc<dyn ChunkStore>) {
    let reports_previous = backend.info().reports_previous;
    // What an unconditional write reports it replaced; a conditional one always knows.
    let replaced = |value: Option<&str>| match (reports_previous, value) {
        (false, _) => Previous::Unknown,
        (true, None) => Previous::Absent,
        (true, Some(v)) => Previous::Value(b(v)),
    };
    for ns in NAMESPACES {
        let key = record_key("cond");
        let k = key.as_bytes();
        let failed = |current: Option<&str>| RecordWrite::ConditionFailed(current.map(b));
        assert_eq!(get(&backend, ns, k).await, None, "{ns:?}: missing is None");
        assert_eq!(
            delete(&backend, ns, k, Precondition::Equals(b("v0"))).await,
            failed(None),
            "{ns:?}: if-equal delete of a missing record"
        );
        assert_eq!(
            delete(&backend, ns, k, Precondition::None).await,
            RecordWrite::Done(replaced(None)),
            "{ns:?}: deleting nothing succeeds"
        );
        assert_eq!(
            put(&backend, ns, k, "v0", Precondition::Equals(b("v0"))).await,
            failed(None),
            "{ns:?}: if-equal put on a missing record"
        );
        assert_eq!(
            get(&backend, ns, k).await,
            None,
            "{ns:?}: a failed put wrote nothing"
        );

        assert_eq!(
            put(&backend, ns, k, "v1", Precondition::Absent).await,
            RecordWrite::Done(Previous::Absent),
            "{ns:?}: if-absent put on a missing record"
        );
        assert_eq!(
            put(&backend, ns, k, "v2", Precondition::Absent).await,
            failed(Some("v1")),
            "{ns:?}: if-absent put on a present record reports the current value"
        );
        assert_eq!(
            put(&backend, ns, k, "v2", Precondition::Equals(b("nope"))).await,
            failed(Some("v1")),
            "{ns:?}: if-equal put on another value"
        );
        assert_eq!(
            get(&backend, ns, k).await,
            Some(b("v1")),
            "{ns:?}: unchanged"
        );
        assert_eq!(
            put(&backend, ns, k, "v2", Precondition::Equals(b("v1"))).await,
            RecordWrite::Done(Previous::Value(b("v1"))),
            "{ns:?}: if-equal put on that value"
        );
        assert_eq!(get(&backend, ns, k).await, Some(b("v2")));
        assert_eq!(
            put(&backend, ns, k, "v3", Precondition::None).await,
            RecordWrite::Done(replaced(Some("v2"))),
            "{ns:?}: unconditional put over a value"
        );
        assert_eq!(get(&backend, ns, k).await, Some(b("v3")));

        assert_eq!(
            delete(&backend, ns, k, Precondition::Equals(b("v2"))).await,
            failed(Some("v3")),
            "{ns:?}: if-equal delete of another value"
        );
        assert_eq!(
            get(&backend, ns, k).await,
            Some(b("v3")),
            "{ns:?}: unchanged"
        );
        assert_eq!(
            delete(&backend, ns, k, Precondition::Absent).await,
            RecordWrite::Done(replaced(Some("v3"))),
            "{ns:?}: `Absent` means nothing to a delete: it deletes"
        );
        assert_eq!(get(&backend, ns, k).await, None, "{ns:?}: deleted");
        assert_eq!(
            put(&backend, ns, k, "v4", Precondition::None).await,
            RecordWrite::Done(replaced(None)),
            "{ns:?}: unconditional put on a missing record"
        );
        assert_eq!(
            delete(&backend, ns, k, Precondition::Equals(b("v4"))).await,
            RecordWrite::Done(Previous::Value(b("v4"))),
            "{ns:?}: if-equal delete of that value"
        );
        assert_eq!(get(&backend, ns, k).await, None, "{ns:?}: deleted");
    }
}

/// [`ChunkStore::write_records`] on a backend that declares atomic groups: every condition is checked before
/// anything is written, a failed one (the first, in order) leaves every record of the group as it was, and a
/// group that holds writes all of it, across namespaces, reporting what each write replaced. A backend that does
/// not declare them refuses groups with an error.
pub async fn record_groups_are_all_or_nothing(backend: Arc<dyn ChunkStore>) {
    let group = |changes: Vec<RecordChange>| {
        let backend = Arc::clone(&backend);
        async move {
            let what = format!("{changes:?}");
            backend
                .write_records(changes, None)
                .await
                .unwrap_or_else(|e| panic!("group {what}: {e}"))
        }
    };
    let (m, r, i) = (
        b(record_key("group-m")),
        b(record_key("group-r")),
        b(record_key("group-i")),
    );
    let commit = |manifest: &str, cond: Precondition, intent: Precondition| {
        vec![
            RecordChange::put(
                Namespace::Reclaim,
                r.clone(),
                b("entry"),
                Precondition::None,
            ),
            RecordChange::put(Namespace::Manifest, m.clone(), b(manifest), cond),
            RecordChange::delete(Namespace::Intent, i.clone(), intent),
        ]
    };
    if !super::writes_commit_groups(&*backend) {
        let refused = backend
            .write_records(commit("m1", Precondition::None, Precondition::None), None)
            .await;
        assert!(refused.is_err(), "a group without the support: {refused:?}");
        assert_eq!(get(&backend, Namespace::Manifest, &m).await, None);
        return;
    }
    put(&backend, Namespace::Intent, &i, "i1", Precondition::Absent).await;
    let unchanged = |why: &'static str| {
        let backend = Arc::clone(&backend);
        let (m, r, i) = (m.clone(), r.clone(), i.clone());
        async move {
            assert_eq!(get(&backend, Namespace::Manifest, &m).await, None, "{why}");
            assert_eq!(get(&backend, Namespace::Reclaim, &r).await, None, "{why}");
            assert_eq!(
                get(&backend, Namespace::Intent, &i).await,
                Some(b("i1")),
                "{why}"
            );
        }
    };

    // The last write's condition fails: the writes before it, whose conditions held, are not made either.
    assert_eq!(
        group(commit(
            "m1",
            Precondition::Absent,
            Precondition::Equals(b("i0"))
        ))
        .await,
        GroupWrite::ConditionFailed {
            index: 2,
            current: Some(b("i1"))
        }
    );
    unchanged("a group whose last condition failed").await;
    // The first failed condition, in order, is the one named.
    assert_eq!(
        group(commit(
            "m1",
            Precondition::Equals(b("m0")),
            Precondition::Equals(b("i0"))
        ))
        .await,
        GroupWrite::ConditionFailed {
            index: 1,
            current: None
        }
    );
    unchanged("a group whose conditions failed").await;

    assert_eq!(
        group(commit(
            "m1",
            Precondition::Absent,
            Precondition::Equals(b("i1"))
        ))
        .await,
        GroupWrite::Done(vec![
            Previous::Absent,
            Previous::Absent,
            Previous::Value(b("i1"))
        ])
    );
    assert_eq!(get(&backend, Namespace::Manifest, &m).await, Some(b("m1")));
    assert_eq!(
        get(&backend, Namespace::Reclaim, &r).await,
        Some(b("entry"))
    );
    assert_eq!(
        get(&backend, Namespace::Intent, &i).await,
        None,
        "the group's delete"
    );

    // A delete's `Absent` means nothing, as for `delete_record`.
    assert_eq!(
        group(vec![
            RecordChange::put(
                Namespace::Manifest,
                m.clone(),
                b("m2"),
                Precondition::Equals(b("m1"))
            ),
            RecordChange::delete(Namespace::Reclaim, r.clone(), Precondition::Absent),
        ])
        .await,
        GroupWrite::Done(vec![Previous::Value(b("m1")), Previous::Value(b("entry"))])
    );
    assert_eq!(get(&backend, Namespace::Manifest, &m).await, Some(b("m2")));
    assert_eq!(get(&backend, Namespace::Reclaim, &r).await, None);
    delete(&backend, Namespace::Manifest, &m, Precondition::None).await;
}

/// Chunks of a version written in an atomic group ([`ChunkStore::write_records`] with [`GroupChunks`]) are
/// stored with the group's records or not at all: a group whose condition fails stores none of them, one that
/// holds stores every one, readable as [`ChunkStore::put_chunks`]'s are. A backend that does not declare atomic
/// groups refuses the group and stores nothing.
pub async fn record_groups_carry_chunks(backend: Arc<dyn ChunkStore>) {
    let m = b(record_key("group-chunks"));
    let blob = BlobRef {
        key: m.clone(),
        version: VersionId(rand::random::<u128>() >> 1),
    };
    let chunks: Vec<ChunkWrite> = (0..3u64)
        .map(|index| ChunkWrite {
            salt: (index % 2) as u32,
            index,
            data: b(format!("chunk {index} of the group")),
        })
        .collect();
    let ids: Vec<ChunkId> = chunks
        .iter()
        .map(|c| ChunkId {
            salt: c.salt,
            index: c.index,
        })
        .collect();
    let stored = || {
        let backend = Arc::clone(&backend);
        let (blob, ids) = (blob.clone(), ids.clone());
        async move {
            backend
                .get_chunks(&blob, &ids)
                .await
                .expect("get_chunks")
                .into_iter()
                .map(|slot| slot.map(|data| String::from_utf8_lossy(&data).into_owned()))
                .collect::<Vec<_>>()
        }
    };
    let with_chunks = |manifest: &str, cond: Precondition| {
        let changes = vec![RecordChange::put(
            Namespace::Manifest,
            m.clone(),
            b(manifest),
            cond,
        )];
        let chunks = GroupChunks {
            blob: blob.clone(),
            chunks: chunks.clone(),
        };
        let backend = Arc::clone(&backend);
        async move { backend.write_records(changes, Some(chunks)).await }
    };
    if !super::writes_commit_groups(&*backend) {
        let refused = with_chunks("m1", Precondition::None).await;
        assert!(refused.is_err(), "a group without the support: {refused:?}");
        assert_eq!(stored().await, vec![None, None, None]);
        return;
    }
    put(
        &backend,
        Namespace::Manifest,
        &m,
        "m0",
        Precondition::Absent,
    )
    .await;
    assert_eq!(
        with_chunks("m1", Precondition::Equals(b("other")))
            .await
            .expect("group"),
        GroupWrite::ConditionFailed {
            index: 0,
            current: Some(b("m0"))
        }
    );
    assert_eq!(
        stored().await,
        vec![None, None, None],
        "a group whose condition failed stores no chunk"
    );
    assert_eq!(get(&backend, Namespace::Manifest, &m).await, Some(b("m0")));
    assert_eq!(
        with_chunks("m1", Precondition::Equals(b("m0")))
            .await
            .expect("group"),
        GroupWrite::Done(vec![Previous::Value(b("m0"))])
    );
    assert_eq!(get(&backend, Namespace::Manifest, &m).await, Some(b("m1")));
    assert_eq!(
        stored().await,
        chunks
            .iter()
            .map(|c| Some(String::from_utf8_lossy(&c.data).into_owned()))
            .collect::<Vec<_>>(),
        "a group that held stores every chunk"
    );
    backend
        .delete_chunks(&blob, 2, chunks.len() as u64)
        .await
        .expect("delete the chunks");
    delete(&backend, Namespace::Manifest, &m, Precondition::None).await;
}

pub async fn records_are_separate_per_namespace(backend: Arc<dyn ChunkStore>) {
    let key = b(record_key("ns"));
    let value = |ns: Namespace| b(format!("value in {ns:?}"));
    for ns in NAMESPACES {
        assert_eq!(
            backend
                .put_record(ns, &key, value(ns), &Precondition::Absent)
                .await
                .expect("put"),
            RecordWrite::Done(Previous::Absent),
            "{ns:?}: the same key in another namespace is another record"
        );
    }
    for ns in NAMESPACES {
        let own = vec![(key.clone(), value(ns))];
        assert_eq!(
            get(&backend, ns, &key).await,
            Some(value(ns)),
            "{ns:?}: get"
        );
        assert_eq!(
            scan(&backend, ns, &key, None, 10).await,
            own,
            "{ns:?}: scan of the key"
        );
        // A scan of the whole namespace runs to its end and no further (backends may store namespaces
        // side by side, one after another).
        let mine: Vec<(Bytes, Bytes)> = scan_paged(&backend, ns, b"", 500)
            .await
            .into_iter()
            .filter(|(k, _)| k.starts_with(&key))
            .collect();
        assert_eq!(mine, own, "{ns:?}: scan of the whole namespace");
    }
    delete(&backend, Namespace::Manifest, &key, Precondition::None).await;
    for ns in NAMESPACES {
        let left = get(&backend, ns, &key).await;
        if ns == Namespace::Manifest {
            assert_eq!(left, None, "deleted");
        } else {
            assert_eq!(
                left,
                Some(value(ns)),
                "{ns:?}: a delete in another namespace left it"
            );
        }
    }
    for ns in NAMESPACES {
        delete(&backend, ns, &key, Precondition::None).await;
    }
}

pub async fn record_scans_page_in_key_order(backend: Arc<dyn ChunkStore>) {
    for ns in SCANNED {
        let p = format!("{}/", record_key("scan"));
        let p = p.as_bytes();
        // The prefix itself, 40 keys with a binary byte, and the highest key of the prefix; each with a value
        // of its own.
        let mut keys: Vec<Bytes> = vec![b(p)];
        keys.extend((0..40u8).map(|i| b([p, &[i * 6], b"x"].concat())));
        keys.push(b([p, &[0xff, 0xff]].concat()));
        let records: Vec<(Bytes, Bytes)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), b(format!("value {i}"))))
            .collect();
        write_all(&backend, ns, &records).await;
        // Keys just before and just past the prefix must not show up.
        let base = &p[..p.len() - 1];
        let outside = [b([base, b"."].concat()), b([base, b"0"].concat())];
        let outside_records: Vec<(Bytes, Bytes)> =
            outside.iter().map(|k| (k.clone(), b("outside"))).collect();
        write_all(&backend, ns, &outside_records).await;

        assert_eq!(
            scan(&backend, ns, p, None, 1000).await,
            records,
            "{ns:?}: every record of the prefix, in byte order of the keys, and nothing else"
        );
        assert_eq!(
            scan(&backend, ns, p, None, 0).await,
            vec![],
            "{ns:?}: limit 0"
        );
        assert_eq!(
            scan(&backend, ns, p, None, 3).await,
            records[..3].to_vec(),
            "{ns:?}: the first `limit` records"
        );
        assert_eq!(
            scan(&backend, ns, p, Some(&keys[10]), 5).await,
            records[11..16].to_vec(),
            "{ns:?}: start_after is exclusive, limit respected"
        );
        let between = [&keys[10][..], &[0]].concat();
        assert_eq!(
            scan(&backend, ns, p, Some(&between), 2).await,
            records[11..13].to_vec(),
            "{ns:?}: start_after need not be a stored key"
        );
        for page in [1, 7, 42, 43] {
            assert_eq!(
                scan_paged(&backend, ns, p, page).await,
                records,
                "{ns:?}: pages of {page} make up the whole scan"
            );
        }
        let last = &keys[keys.len() - 1];
        for after in [
            &last[..],
            &[p, &[0xff, 0xff, 0][..]].concat()[..],
            &outside[1][..],
        ] {
            assert_eq!(
                scan(&backend, ns, p, Some(after), 10).await,
                vec![],
                "{ns:?}: nothing after {after:?}"
            );
        }
        delete_all(&backend, ns, keys.iter().chain(&outside)).await;
        assert_eq!(
            scan(&backend, ns, p, None, 1000).await,
            vec![],
            "{ns:?}: deleted"
        );
    }
}

/// `start_after` that sorts before the prefix excludes nothing: the scan starts at the prefix, whatever lies
/// between the two.
pub async fn record_scan_from_before_the_prefix(backend: Arc<dyn ChunkStore>) {
    for ns in SCANNED {
        let base = record_key("before");
        let base = base.as_bytes();
        let p = [base, b"/"].concat();
        let records: Vec<(Bytes, Bytes)> = ["a", "b", "c"]
            .into_iter()
            .map(|s| (b([&p[..], s.as_bytes()].concat()), b(s)))
            .collect();
        write_all(&backend, ns, &records).await;
        // Records that sort between the `start_after`s below and the prefix ('.' sorts just before '/').
        let below = [b(base), b([base, b"."].concat()), b([base, b".z"].concat())];
        let below_records: Vec<(Bytes, Bytes)> =
            below.iter().map(|k| (k.clone(), b("below"))).collect();
        write_all(&backend, ns, &below_records).await;

        let starts: [&[u8]; 5] = [b"", b"rec-", base, &below[1], &below[2]];
        for after in starts {
            assert_eq!(
                scan(&backend, ns, &p, Some(after), 100).await,
                records,
                "{ns:?}: after {after:?} (before the prefix) comes the whole prefix"
            );
            assert_eq!(
                scan(&backend, ns, &p, Some(after), 2).await,
                records[..2].to_vec(),
                "{ns:?}: after {after:?} (before the prefix), the first 2 of the prefix"
            );
        }
        delete_all(&backend, ns, records.iter().map(|(k, _)| k).chain(&below)).await;
    }
}

/// Namespaces kept in partitions ([`Namespace::partition_len`]): records read and write by key as in any
/// namespace, a scan with a prefix that names a partition reads that partition alone, in key order and by
/// pages, and [`ChunkStore::drop_partition`] removes one partition's records and nothing else; a record written
/// after the drop is kept. The partitions are of a bucket of the reclaim queue far in the future (and of a shard of
/// the intents, by keys of their own), so that no real record shares them.
pub async fn records_of_a_partition_scan_and_drop_apart(backend: Arc<dyn ChunkStore>) {
    let ns = Namespace::ReclaimBucket;
    let bucket = u64::MAX - u64::from(rand::random::<u32>());
    let part = |shard: u8| [&bucket.to_be_bytes()[..], &[shard]].concat();
    let records = |part: &[u8], n: usize| -> Vec<(Bytes, Bytes)> {
        (0..n)
            .map(|i| {
                (
                    b([part, format!("k{i}").as_bytes()].concat()),
                    b(format!("v{i}")),
                )
            })
            .collect()
    };
    let (a, c) = (part(7), part(8));
    let (in_a, in_c) = (records(&a, 5), records(&c, 3));
    write_all(&backend, ns, &in_a).await;
    write_all(&backend, ns, &in_c).await;
    assert_eq!(
        scan(&backend, ns, &a, None, 10).await,
        in_a,
        "one partition, in order"
    );
    assert_eq!(scan_paged(&backend, ns, &a, 2).await, in_a, "by pages");
    let k2 = [&a[..], b"k2"].concat();
    assert_eq!(
        scan(&backend, ns, &k2, None, 10).await,
        in_a[2..3].to_vec(),
        "a longer prefix"
    );
    assert_eq!(
        scan(&backend, ns, &a, Some(&in_a[1].0), 10).await,
        in_a[2..].to_vec(),
        "after a key"
    );
    assert_eq!(
        put(&backend, ns, &in_a[0].0, "again", Precondition::Absent).await,
        RecordWrite::ConditionFailed(Some(b("v0"))),
        "conditions hold in a partition"
    );
    backend.drop_partition(ns, &a).await.expect("drop");
    assert_eq!(scan(&backend, ns, &a, None, 10).await, vec![], "dropped");
    assert_eq!(get(&backend, ns, &in_a[0].0).await, None, "dropped");
    assert_eq!(
        scan(&backend, ns, &c, None, 10).await,
        in_c,
        "the other partition is left"
    );
    put(&backend, ns, &in_a[4].0, "later", Precondition::Absent).await;
    assert_eq!(
        get(&backend, ns, &in_a[4].0).await,
        Some(b("later")),
        "written after the drop"
    );
    delete(&backend, ns, &in_a[4].0, Precondition::None).await;
    backend.drop_partition(ns, &c).await.expect("drop");
    assert_eq!(scan(&backend, ns, &c, None, 10).await, vec![]);

    // A shard of the intents: by keys of its own (a real intent's key is a version and a blob key).
    let ns = Namespace::ShardedIntent;
    let key = [&[3u8][..], record_key("part").as_bytes()].concat();
    put(&backend, ns, &key, "i", Precondition::Absent).await;
    assert_eq!(
        put(&backend, ns, &key, "j", Precondition::Equals(b("i"))).await,
        RecordWrite::Done(Previous::Value(b("i")))
    );
    assert_eq!(
        scan(&backend, ns, &key, None, 10).await,
        vec![(b(&key), b("j"))]
    );
    assert_eq!(
        get(&backend, Namespace::ParkedIntent, &key).await,
        None,
        "another namespace"
    );
    delete(&backend, ns, &key, Precondition::Equals(b("j"))).await;
    assert_eq!(get(&backend, ns, &key).await, None);
}
