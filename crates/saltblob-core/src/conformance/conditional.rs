//! Conditional puts ([`PutCondition`]) and deletes, and the order in which commits take effect.

use std::sync::Arc;

use super::{assert_holds, data, prefix, small_config, store};
use crate::backend::ChunkStore;
use crate::base::error::Error;
use crate::state::config::{PutCondition, PutOptions};

pub async fn conditional_puts(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("cond"));
    let if_absent = PutOptions::new().with_condition(PutCondition::IfAbsent);
    let v1 = store
        .put(&key, data(70_000, 1), &if_absent)
        .await
        .expect("if-absent on absent key");
    match store.put(&key, data(100, 2), &if_absent).await {
        Err(Error::AlreadyExists { current, .. }) => assert_eq!(current, Some(v1.version)),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    let v2 = store
        .put(
            &key,
            data(200, 3),
            &PutOptions::new().with_condition(PutCondition::IfVersion(v1.version)),
        )
        .await
        .expect("if-version current");
    match store
        .put(
            &key,
            data(300, 4),
            &PutOptions::new().with_condition(PutCondition::IfVersion(v1.version)),
        )
        .await
    {
        Err(Error::PreconditionFailed {
            expected, actual, ..
        }) => {
            assert_eq!((expected, actual), (v1.version, Some(v2.version)));
        }
        other => panic!("expected PreconditionFailed, got {other:?}"),
    }
    assert_holds(&store, &key, &data(200, 3)).await;
    let absent = format!("{key}-absent");
    let r = store
        .put(
            &absent,
            data(10, 5),
            &PutOptions::new().with_condition(PutCondition::IfVersion(v1.version)),
        )
        .await;
    assert!(
        matches!(r, Err(Error::PreconditionFailed { actual: None, .. })),
        "{r:?}"
    );
    assert!(matches!(
        store.head(&absent).await,
        Err(Error::NotFound { .. })
    ));
}

/// Commits take effect in the order they are made, whether plain or conditional (on CQL a conditional commit is
/// a lightweight transaction and a plain one is not, and their timestamps must still order them).
pub async fn plain_and_conditional_commits_apply_in_order(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("order"));
    for i in 0..20u64 {
        // A plain put, then at once a conditional one: the conditional commit is the later, and must win.
        let plain = store
            .put(&key, data(100, i), &PutOptions::new())
            .await
            .expect("plain put");
        let cond = PutOptions::new().with_condition(PutCondition::IfVersion(plain.version));
        let second = store
            .put(&key, data(200, i), &cond)
            .await
            .expect("conditional put");
        assert_eq!(
            store.head(&key).await.expect("head").version,
            second.version,
            "round {i}: the conditional commit is current"
        );
        // And a plain put right after a conditional one wins too.
        let third = store
            .put(&key, data(300, i), &PutOptions::new())
            .await
            .expect("plain put");
        assert_eq!(
            store.head(&key).await.expect("head").version,
            third.version,
            "round {i}: the later plain commit is current"
        );
    }
    assert_holds(&store, &key, &data(300, 19)).await;
}

/// A conditional delete ([`crate::store::BlobStore::delete_version`]) removes only the version it names: another
/// version, a missing key and a repeated delete are refused and change nothing; the deleted version's chunks are
/// reclaimed; and a plain put right after a conditional delete (or a conditional delete right after a plain put)
/// takes effect in order (on CQL the delete is a lightweight transaction and the put is not).
pub async fn conditional_deletes_remove_only_the_named_version(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("cond-delete"));
    let v1 = store
        .put(&key, data(70_000, 1), &PutOptions::new())
        .await
        .expect("put v1");
    let v2 = store
        .put(&key, data(90_000, 2), &PutOptions::new())
        .await
        .expect("put v2");
    match store.delete_version(&key, v1.version).await {
        Err(Error::PreconditionFailed {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (v1.version, Some(v2.version))),
        other => panic!("a delete of a replaced version must fail, got {other:?}"),
    }
    assert_holds(&store, &key, &data(90_000, 2)).await;
    store
        .delete_version(&key, v2.version)
        .await
        .expect("delete the current version");
    assert!(matches!(
        store.head(&key).await,
        Err(Error::NotFound { .. })
    ));
    assert!(
        matches!(
            store.delete_version(&key, v2.version).await,
            Err(Error::NotFound { .. })
        ),
        "a deleted key is not found"
    );
    let missing = format!("{key}-missing");
    assert!(matches!(
        store.delete_version(&missing, v1.version).await,
        Err(Error::NotFound { .. })
    ));
    let left = super::orphans_after_gc(&store, &key).await;
    assert!(
        left.is_empty(),
        "the deleted and replaced versions are reclaimed: {left:?}"
    );
    for i in 0..10u64 {
        let plain = store
            .put(&key, data(100, i), &PutOptions::new())
            .await
            .expect("plain put");
        store
            .delete_version(&key, plain.version)
            .await
            .unwrap_or_else(|e| panic!("round {i}: delete right after the put: {e}"));
        let again = store
            .put(&key, data(200, i), &PutOptions::new())
            .await
            .expect("plain put after the delete");
        assert_eq!(
            store.head(&key).await.expect("head").version,
            again.version,
            "round {i}: the plain put after the conditional delete is current"
        );
    }
    assert_holds(&store, &key, &data(200, 9)).await;
}
