//! `import_salted` on a table written in the salting article's schema with plain CQL.

use std::sync::Arc;

use saltblob_core::conformance::data;
use saltblob_core::{BlobStore, StoreConfig};
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
    let imported: Vec<&[u8]> = report.imported.iter().map(|(k, _)| &k[..]).collect();
    assert_eq!(imported, [&b"big"[..], b"small"], "complete blobs imported");
    assert_eq!(store.get("big").await.expect("big imported"), big);
    assert_eq!(store.get("small").await.expect("small imported"), small);
    let reason = |key: &str| {
        report
            .rejected
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
    for key in ["holes", "twice", "headless"] {
        assert!(store.head(key).await.is_err(), "{key} was not imported");
    }
    assert_eq!(lines.len(), 5, "one progress line per blob");
}
