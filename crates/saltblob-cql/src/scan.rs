//! Record scans: the manifests in key order through the listing index ([`crate::listing`]), their values read
//! back; every other namespace is one partition of `records`, or (a partitioned namespace) one partition of the
//! partitioned table per scan, scanned as a range.

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use saltblob_core::Result;
use saltblob_core::backend::Namespace;

use crate::clock::next_timestamp;
use crate::error;
use crate::listing::{STALE_AFTER, prefix_successor, successor};
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

/// Manifests whose keys start with `prefix` and sort after `start_after`, at most `limit`, in key order: keys
/// from the listing index ([`crate::listing`]), each manifest read back (a key whose manifest is absent is a put
/// in flight or a stale row: left out, and a stale one removed).
async fn scan_manifests(
    cluster: &Cluster,
    prefix: &[u8],
    start_after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut out = Vec::with_capacity(limit.min(4096));
    let mut from = match start_after {
        Some(after) if after >= prefix => successor(after),
        _ => Bytes::copy_from_slice(prefix),
    };
    let until = prefix_successor(prefix);
    let stale_before =
        next_timestamp().saturating_sub(i64::try_from(STALE_AFTER.as_micros()).unwrap_or(i64::MAX));
    while out.len() < limit {
        // A spare key per four (and one): a key deleted since its index row was read is skipped, not counted. A
        // one-key page (S3's walk after a common prefix) reads two manifests.
        let left = limit - out.len();
        let want = left.saturating_add(left / 4 + 1);
        let keys = cluster.index_keys(&from, until.as_deref(), want).await?;
        let Some((last, _)) = keys.last() else {
            break;
        };
        from = successor(last);
        let exhausted = keys.len() < want;
        let wanted: Vec<Bytes> = keys.iter().map(|(k, _)| k.clone()).collect();
        let values: Vec<Option<Bytes>> = stream::iter(wanted)
            .map(|k| async move {
                cluster
                    .listed_records
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                cluster.get_record(Namespace::Manifest, &k).await
            })
            .buffered(32)
            .try_collect()
            .await?;
        for ((key, ts), value) in keys.into_iter().zip(values) {
            match value {
                Some(value) if out.len() < limit => out.push((key, value)),
                Some(_) => {}
                None if ts < stale_before => {
                    if let Err(e) = cluster.index_remove(&key, ts).await {
                        tracing::debug!("could not remove a stale listing index row: {e}");
                    }
                }
                None => {}
            }
        }
        if exhausted {
            break;
        }
    }
    Ok(out)
}

/// Records of namespace `ns` (not the manifests) in one range read of one partition: the namespace's own in
/// `records`, or, for a partitioned namespace, the partition of the partitioned table that `prefix` names (its
/// first [`Namespace::partition_len`] bytes; a shorter prefix is refused, as the core never scans across
/// partitions).
async fn scan_namespace(
    cluster: &Cluster,
    ns: Namespace,
    prefix: &[u8],
    start_after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut values = vec![V::Tiny(i8::from_le_bytes([ns.tag()]))];
    let n = ns.partition_len();
    let (part, prefix, start_after, statements) = if n == 0 {
        (&[][..], prefix, start_after, &cluster.st.scan_records)
    } else {
        let Some((part, rest)) = prefix.split_at_checked(n) else {
            return Err(saltblob_core::Error::internal(
                "record scan",
                format!(
                    "a scan of {ns:?} with a prefix of {} bytes names no partition (of {n})",
                    prefix.len()
                ),
            ));
        };
        values.push(V::Blob(Bytes::copy_from_slice(part)));
        // `start_after` within the partition: one before it excludes nothing, one after it leaves nothing.
        let after = match start_after {
            Some(a) if a.starts_with(part) => Some(&a[n..]),
            Some(a) if a > part => return Ok(Vec::new()),
            _ => None,
        };
        (part, rest, after, &cluster.st.scan_partition)
    };
    let lower: Option<&[u8]> = match start_after {
        Some(a) if a >= prefix => Some(a),
        _ if prefix.is_empty() => None,
        _ => Some(prefix),
    };
    let upper = prefix_successor(prefix);
    // `>=` on start_after: one extra row, dropped below if it is start_after itself.
    let fetch = i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX);
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
    let st = statements
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
            let key = if part.is_empty() {
                k
            } else {
                Bytes::from([part, &k[..]].concat())
            };
            out.push((key, v));
        }
    }
    Ok(out)
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
