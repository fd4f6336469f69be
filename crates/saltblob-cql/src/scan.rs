//! Record scans: the manifest table is scanned whole (its partitions are blob keys, in token order) and its
//! matching keys read back in order; every other namespace is one partition of `records`, scanned as a range.

use std::collections::BinaryHeap;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use saltblob_core::Result;
use saltblob_core::backend::Namespace;
use scylla::response::PagingState;

use crate::error;
use crate::session::Cluster;
use crate::statements::{LimitRow, V};

/// Records of namespace `ns` whose keys start with `prefix` and sort after `start_after`, at most `limit`
/// (above zero) of them, in key order.
pub(crate) async fn scan(
    cluster: &Cluster,
    ns: Namespace,
    prefix: &[u8],
    start_after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>> {
    match ns {
        Namespace::Manifest => scan_manifests(cluster, prefix, start_after, limit).await,
        _ => scan_namespace(cluster, ns, prefix, start_after, limit).await,
    }
}

/// Keys of the manifest table that start with `prefix` and sort after `after`, the smallest `keep` of them,
/// in order; and whether more matched than were kept. One full scan of the table.
async fn scan_manifest_keys(
    cluster: &Cluster,
    prefix: &[u8],
    after: Option<&[u8]>,
    keep: usize,
) -> Result<(Vec<Bytes>, bool)> {
    let mut heap: BinaryHeap<Bytes> = BinaryHeap::new();
    let mut more = false;
    let mut paging = PagingState::start();
    loop {
        let what = || {
            format!(
                "scan of the manifest table of keyspace {}",
                cluster.config.keyspace
            )
        };
        let (result, next) = cluster
            .run(what, true, || {
                cluster.session.execute_single_page(
                    &cluster.st.scan_manifest_keys,
                    (),
                    paging.clone(),
                )
            })
            .await?;
        let rows = result
            .into_rows_result()
            .map_err(|e| error::shape("manifest scan", e))?;
        for row in rows
            .rows::<(Bytes,)>()
            .map_err(|e| error::shape("manifest scan", e))?
        {
            let (key,) = row.map_err(|e| error::shape("manifest scan", e))?;
            if !key.starts_with(prefix) || after.is_some_and(|a| key.as_ref() <= a) {
                continue;
            }
            heap.push(key);
            if heap.len() > keep {
                heap.pop();
                more = true;
            }
        }
        match next.into_paging_control_flow() {
            std::ops::ControlFlow::Break(()) => break,
            std::ops::ControlFlow::Continue(state) => paging = state,
        }
    }
    Ok((heap.into_sorted_vec(), more))
}

/// Manifests whose keys start with `prefix` and sort after `start_after`, at most `limit`, in key order.
async fn scan_manifests(
    cluster: &Cluster,
    prefix: &[u8],
    start_after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut out = Vec::with_capacity(limit.min(4096));
    let mut after: Option<Bytes> = start_after.map(Bytes::copy_from_slice);
    // A few spare keys per pass: a key deleted between the scan and its read is skipped, not counted.
    let keep = limit.saturating_add(limit / 4 + 16);
    while out.len() < limit {
        let (keys, more) = scan_manifest_keys(cluster, prefix, after.as_deref(), keep).await?;
        let Some(last) = keys.last().cloned() else {
            break;
        };
        let values: Vec<Option<Bytes>> = stream::iter(keys.clone())
            .map(|k| async move { cluster.get_record(Namespace::Manifest, &k).await })
            .buffered(32)
            .try_collect()
            .await?;
        for (k, v) in keys.into_iter().zip(values) {
            if let Some(v) = v
                && out.len() < limit
            {
                out.push((k, v));
            }
        }
        if !more {
            break;
        }
        after = Some(last);
    }
    Ok(out)
}

/// Records of namespace `ns` (not the manifests) in one range read of its partition.
async fn scan_namespace(
    cluster: &Cluster,
    ns: Namespace,
    prefix: &[u8],
    start_after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>> {
    let ns_value = V::Tiny(i8::from_le_bytes([ns.tag()]));
    let lower: Option<&[u8]> = match start_after {
        Some(a) if a >= prefix => Some(a),
        _ if prefix.is_empty() => None,
        _ => Some(prefix),
    };
    let upper = prefix_successor(prefix);
    // `>=` on start_after: one extra row, dropped below if it is start_after itself.
    let fetch = i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX);
    let mut values = vec![ns_value];
    let index = match (lower, &upper) {
        (None, None) => 0,
        (Some(_), None) => 1,
        (None, Some(_)) => 2,
        (Some(_), Some(_)) => 3,
    };
    if let Some(l) = lower {
        values.push(V::Blob(Bytes::copy_from_slice(l)));
    }
    if let Some(u) = upper {
        values.push(V::Blob(Bytes::from(u)));
    }
    let st = cluster
        .st
        .scan_records
        .get(index)
        .ok_or_else(|| error::malformed("record scan", "statement missing"))?;
    let what = || format!("scan of namespace {ns:?}");
    let result = cluster
        .run(what, true, || {
            cluster
                .session
                .execute_unpaged(st, LimitRow(values.clone(), fetch))
        })
        .await?;
    let rows = result
        .into_rows_result()
        .map_err(|e| error::shape("record scan", e))?;
    let mut out = Vec::new();
    for row in rows
        .rows::<(Bytes, Bytes)>()
        .map_err(|e| error::shape("record scan", e))?
    {
        let (k, v) = row.map_err(|e| error::shape("record scan", e))?;
        if start_after.is_some_and(|a| k.as_ref() <= a) || !k.starts_with(prefix) {
            continue;
        }
        if out.len() < limit {
            out.push((k, v));
        }
    }
    Ok(out)
}

/// The smallest key greater than every key starting with `prefix`, or `None` if there is none.
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successors() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
