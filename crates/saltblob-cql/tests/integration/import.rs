//! `import_salted` on a table written in the salting article's schema with plain CQL.

use std::sync::Arc;

use saltblob_core::conformance::data;
use saltblob_core::{BlobStore, MemoryStore, StoreConfig};
use saltblob_cql::import::import_salted;
use saltblob_cql::{Consistency, CqlStore};

use crate::{connect, keyspace};

/// Writes blob `key` in the article's layout with `(chunk size, salts)` geometry: chunk i in partition
/// (key, i % salts), the layout in row (0, 0); `skip` lists chunk ids left out, `dup` a chunk id written to a
/// second salt too.
async fn write_article_blob(
    store: &CqlStore,
    table: &str,
    key: &str,
    payload: &[u8],
    (chunk, salts): (usize, i32),
    skip: &[i32],
    dup: Option<i32>,
) {
    let total = i32::try_from(payload.len().div_ceil(chunk)).expect("chunk count");
    let insert = store
        .session()
        .prepare(format!(
            "INSERT INTO {table} (key, salt, chunk_id, chunk, total_chunks, salt_cardinality) VALUES (?, ?, ?, ?, ?, ?)"
        ))
        .await
        .expect("prepare insert");
    for (i, piece) in payload.chunks(chunk).enumerate() {
        let id = i32::try_from(i).expect("id");
        if skip.contains(&id) {
            continue;
        }
        let mut salts_of = vec![id % salts];
        if dup == Some(id) {
            salts_of.push((id + 1) % salts);
        }
        for salt in salts_of {
            let layout = (id == 0 && salt == 0).then_some((total, salts));
            store
                .session()
                .execute_unpaged(
                    &insert,
                    (
                        key,
                        salt,
                        id,
                        piece,
                        layout.map(|l| l.0),
                        layout.map(|l| l.1),
                    ),
                )
                .await
                .expect("insert chunk");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn complete_blobs_are_imported_and_incomplete_ones_reported() {
    let backend = connect("").await;
    let table = format!("{}.article_{:08x}", keyspace(), rand::random::<u32>());
    backend
        .session()
        .query_unpaged(
            format!(
                "CREATE TABLE {table} (key text, salt int, chunk_id int, chunk blob, total_chunks int, \
                 salt_cardinality int, PRIMARY KEY ((key, salt), chunk_id))"
            ),
            (),
        )
        .await
        .expect("create article table");
    backend
        .session()
        .await_schema_agreement()
        .await
        .expect("schema agreement");
    let big = data(3 << 20, 1);
    let small = data(1000, 2);
    let broken = data(10 * 4096, 3);
    write_article_blob(&backend, &table, "big", &big, (65536, 10), &[], None).await;
    write_article_blob(&backend, &table, "small", &small, (65536, 10), &[], None).await;
    write_article_blob(
        &backend,
        &table,
        "holes",
        &broken,
        (4096, 4),
        &[3, 7, 8],
        None,
    )
    .await;
    write_article_blob(&backend, &table, "twice", &broken, (4096, 4), &[], Some(5)).await;
    write_article_blob(&backend, &table, "headless", &broken, (4096, 4), &[0], None).await;
    write_article_blob(&backend, &table, "stray", &small, (4096, 4), &[], None).await;
    let insert = |key: &'static str,
                  salt: i32,
                  id: i32,
                  chunk: &'static [u8],
                  layout: Option<(i32, i32)>| {
        let session = backend.session();
        let table = table.clone();
        async move {
            session
                .query_unpaged(
                    format!(
                        "INSERT INTO {table} (key, salt, chunk_id, chunk, total_chunks, salt_cardinality) \
                         VALUES (?, ?, ?, ?, ?, ?)"
                    ),
                    (key, salt, id, chunk, layout.map(|l| l.0), layout.map(|l| l.1)),
                )
                .await
                .expect("insert row");
        }
    };
    // A row in a salt that the layout of "stray" (1 chunk) never reads.
    insert("stray", 7, 100, b"x", None).await;
    // The article's recipe for an empty value: total_chunks 0, salt_cardinality 1, one empty chunk row.
    insert("empty", 0, 0, b"", Some((0, 1))).await;

    let store = BlobStore::new(Arc::new(backend), StoreConfig::default()).expect("store");
    let session_owner = connect("").await;
    let mut lines = Vec::new();
    let report = import_salted(
        session_owner.session(),
        &table,
        Consistency::One,
        &store,
        &mut |k, o| {
            lines.push((String::from_utf8_lossy(k).into_owned(), o.clone()));
        },
    )
    .await
    .expect("import runs");
    let mut imported: Vec<&str> = lines
        .iter()
        .filter(|(_, o)| o.is_ok())
        .map(|(k, _)| k.as_str())
        .collect();
    imported.sort_unstable();
    assert_eq!(
        imported,
        ["big", "empty", "small", "stray"],
        "complete blobs imported"
    );
    assert_eq!((report.imported, report.rejected), (4, 4), "{report:?}");
    assert_eq!(store.get("big").await.expect("big imported"), big);
    assert_eq!(store.get("small").await.expect("small imported"), small);
    assert_eq!(store.get("stray").await.expect("stray imported"), small);
    assert!(store.get("empty").await.expect("empty imported").is_empty());
    let reason = |key: &str| {
        report
            .rejections
            .iter()
            .find(|(k, _)| &k[..] == key.as_bytes())
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{key} should be rejected: {report:?}"))
    };
    assert!(
        reason("holes").contains("missing chunk ids 3, 7-8 of 0..10"),
        "{}",
        reason("holes")
    );
    assert!(
        reason("twice").contains("duplicated chunk ids 5"),
        "{}",
        reason("twice")
    );
    assert!(
        reason("headless").contains("no layout row"),
        "{}",
        reason("headless")
    );
    assert!(
        reason("stray").contains("partition salt 7 lies outside the blob's layout"),
        "{}",
        reason("stray")
    );
    for key in ["holes", "twice", "headless"] {
        assert!(store.head(key).await.is_err(), "{key} was not imported");
    }
    assert_eq!(
        lines.len(),
        8,
        "one progress line per blob and one for the stray partition: {lines:?}"
    );
}

/// Layout rows that claim 2^62 chunks or salts are rejected after reading the rows that exist, not after
/// 2^62 steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn huge_layouts_are_rejected_quickly() {
    let backend = connect("").await;
    let table = format!("{}.article_{:08x}", keyspace(), rand::random::<u32>());
    let session = backend.session();
    session
        .query_unpaged(
            format!(
                "CREATE TABLE {table} (key text, salt bigint, chunk_id bigint, chunk blob, total_chunks bigint, \
                 salt_cardinality bigint, PRIMARY KEY ((key, salt), chunk_id))"
            ),
            (),
        )
        .await
        .expect("create article table");
    session
        .await_schema_agreement()
        .await
        .expect("schema agreement");
    let huge = 1i64 << 62;
    for (key, cardinality) in [("long", 1i64), ("wide", huge)] {
        session
            .query_unpaged(
                format!(
                    "INSERT INTO {table} (key, salt, chunk_id, chunk, total_chunks, salt_cardinality) \
                     VALUES (?, 0, 0, ?, ?, ?)"
                ),
                (key, &b"chunk"[..], huge, cardinality),
            )
            .await
            .expect("insert layout row");
    }
    let store =
        BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
    let started = std::time::Instant::now();
    let report = import_salted(session, &table, Consistency::One, &store, &mut |_, _| {})
        .await
        .expect("import runs");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!((report.imported, report.rejected), (0, 2), "{report:?}");
    for (key, reason) in &report.rejections {
        assert!(reason.contains("missing chunk ids 1"), "{key:?}: {reason}");
    }
}
