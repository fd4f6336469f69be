//! Conditional puts ([`PutCondition`]) and the order in which commits take effect.

use std::sync::Arc;

use super::{assert_holds, data, prefix, small_config, store};
use crate::{ChunkStore, Error, PutCondition, PutOptions};

pub async fn conditional_puts(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("cond"));
    let if_absent = PutOptions::new().with_condition(PutCondition::IfAbsent);
    let v1 = store
        .put(&key, data(70_000, 1), &if_absent)
        .await
        .expect("if-absent on absent key");
    match store.put(&key, data(100, 2), &if_absent).await {
        Err(Error::AlreadyExists { current, .. }) => assert_eq!(current, v1.version),
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
