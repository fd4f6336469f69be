//! Token ranges of the manifest table, for passes over the whole store
//! ([`saltblob_core::ChunkStore::manifest_ranges`], [`saltblob_core::ChunkStore::scan_manifest_range`]).
//!
//! The ring as the driver knows it (its token map) is cut at every token, the range that wraps around cut at the
//! ends of the token space, and each range cut again into equal parts until there are about nodes × shards × 3
//! of them (ScyllaDB's and the Spark connector's split): enough that every node and shard has work while a few are
//! read at once. A range is `(start, end]` in Murmur3 tokens, described by 17 bytes (a tag, then both ends); it
//! names tokens, not nodes, so it stays valid when the cluster changes. Ranges are handed out round robin over
//! their first replicas, so that the ranges read at once land on different nodes.
//!
//! A range is read with `SELECT key, value FROM manifests WHERE token(key) > ? AND token(key) <= ?`, values and
//! all (no point read per key), paged by the driver, from a replica of the range in the store's data center: the
//! request's plan is the range's replicas, the first chosen by the range so that ranges spread over replicas,
//! the others taken in turn when one does not answer (a node down), then [`crate::session::Cluster::run`]'s
//! retries (the session's own plan while the driver knows no replica of the range). In a range, rows come in token order, and rows of one token in key byte order (both Cassandra and
//! ScyllaDB order partitions so), which makes "after this key" a place in the range: a read after a key starts
//! at that key's token and drops the rows of that token up to the key (two keys may share a token).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use saltblob_core::backend::{RangePage, ScanPlan, ScanRange};
use saltblob_core::{Error, KeyDisplay, Result};
use scylla::cluster::{ClusterState, Node, NodeRef};
use scylla::policies::load_balancing::{FallbackPlan, LoadBalancingPolicy, RoutingInfo};
use scylla::response::{PagingState, PagingStateResponse};
use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner};
use scylla::routing::{Shard, Token};

use crate::error::{self, NAME};
use crate::schema::MANIFESTS;
use crate::session::Cluster;

/// Ranges per shard of each node (a node of Cassandra counts one shard).
const RANGES_PER_SHARD: usize = 3;
/// Ranges read at once per shard of the data center, at least [`MIN_IN_FLIGHT`].
const IN_FLIGHT_PER_SHARD: usize = 2;
/// Ranges read at once at least (a single node serves several).
const MIN_IN_FLIGHT: usize = 4;
/// The first byte of a range descriptor of this backend.
const TAG: u8 = 1;

/// Tokens `(start, end]` of the Murmur3 partitioner, `start < end`. The partitioner never makes `i64::MIN`, so
/// `(i64::MIN, i64::MAX]` is every token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TokenRange {
    pub(crate) start: i64,
    pub(crate) end: i64,
}

impl TokenRange {
    /// The range as a core descriptor.
    pub(crate) fn encode(self) -> ScanRange {
        let mut bytes = Vec::with_capacity(17);
        bytes.push(TAG);
        bytes.extend_from_slice(&self.start.to_be_bytes());
        bytes.extend_from_slice(&self.end.to_be_bytes());
        ScanRange::from_bytes(bytes)
    }

    /// The range `range` describes, if it is one of this backend's.
    pub(crate) fn decode(range: &ScanRange) -> Result<Self> {
        let bad = || {
            Error::invalid(
                "scan range",
                format!(
                    "{} byte(s) that are not a token range of the {NAME} backend (a resume file of another store?)",
                    range.as_bytes().len()
                ),
            )
        };
        let bytes = range.as_bytes();
        let (Some(&TAG), Some(start), Some(end)) =
            (bytes.first(), bytes.get(1..9), bytes.get(9..17))
        else {
            return Err(bad());
        };
        let start = i64::from_be_bytes(start.try_into().map_err(|_| bad())?);
        let end = i64::from_be_bytes(end.try_into().map_err(|_| bad())?);
        if bytes.len() != 17 || start >= end {
            return Err(bad());
        }
        Ok(Self { start, end })
    }

    /// Whether token `t` lies in the range.
    fn holds(self, t: i64) -> bool {
        self.start < t && t <= self.end
    }
}

impl std::fmt::Display for TokenRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tokens ({}, {}]", self.start, self.end)
    }
}

/// The token of a manifest's key (a one-column partition key: its bytes are what is hashed).
pub(crate) fn token_of(key: &[u8]) -> i64 {
    Murmur3Partitioner.hash_one(key).value()
}

/// The ranges of a ring of `tokens` (sorted or not): one per token, the one that wraps around cut in two at the
/// ends of the token space, each cut into parts of about 2⁶⁴ / `target` tokens: about `target` ranges (at most
/// `target` + one per token), none wider than that.
pub(crate) fn split(tokens: &[i64], target: usize) -> Vec<TokenRange> {
    let mut sorted = tokens.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut ring = Vec::with_capacity(sorted.len() + 1);
    let mut start = i64::MIN;
    for t in sorted {
        if t > start {
            ring.push(TokenRange { start, end: t });
            start = t;
        }
    }
    if start < i64::MAX {
        ring.push(TokenRange {
            start,
            end: i64::MAX,
        });
    }
    // Each range in parts of about 2⁶⁴ / target tokens, so that parts are of one width whatever the ring's.
    let target = i128::try_from(target.max(1)).unwrap_or(i128::MAX);
    ring.into_iter()
        .flat_map(|r| {
            let width = i128::from(r.end) - i128::from(r.start);
            // Rounded up (`div_ceil` of i128 is not stable): both are positive.
            let parts = (width.saturating_mul(target) + (1i128 << 64) - 1) >> 64;
            cut(r, usize::try_from(parts).unwrap_or(usize::MAX))
        })
        .collect()
}

/// `range` cut into `parts` ranges of (nearly) equal width; fewer when it holds fewer tokens.
fn cut(range: TokenRange, parts: usize) -> Vec<TokenRange> {
    let width = i128::from(range.end) - i128::from(range.start);
    let parts = i128::try_from(parts).unwrap_or(1).clamp(1, width);
    let mut out = Vec::new();
    let mut start = range.start;
    for i in 1..=parts {
        let end = i64::try_from(i128::from(range.start) + width * i / parts).unwrap_or(range.end);
        if end > start {
            out.push(TokenRange { start, end });
            start = end;
        }
    }
    out
}

/// The replicas of `range` in data center `dc`, the first chosen by the range (so that ranges spread over their
/// replicas), each with its shard on ScyllaDB.
fn replicas(cluster: &Cluster, range: TokenRange) -> Vec<(Arc<Node>, Option<Shard>)> {
    let state = cluster.session.get_cluster_state();
    let mut local: Vec<(Arc<Node>, Option<Shard>)> = state
        .get_token_endpoints(&cluster.config.keyspace, MANIFESTS, Token::new(range.end))
        .into_iter()
        .filter(|(node, _)| node.datacenter.as_deref() == Some(cluster.datacenter.as_str()))
        .map(|(node, shard)| {
            let shard = node.sharder().map(|_| shard);
            (node, shard)
        })
        .collect();
    if !local.is_empty() {
        let first = usize::try_from((range.end as u64) % local.len() as u64).unwrap_or(0);
        local.rotate_left(first);
    }
    local
}

/// A request plan of the replicas of one range, in order, and nothing else.
#[derive(Debug)]
struct RangeReplicas(Vec<(Arc<Node>, Option<Shard>)>);

impl LoadBalancingPolicy for RangeReplicas {
    fn pick<'a>(
        &'a self,
        _request: &'a RoutingInfo,
        _cluster: &'a ClusterState,
    ) -> Option<(NodeRef<'a>, Option<Shard>)> {
        self.0.first().map(|(node, shard)| (node, *shard))
    }

    fn fallback<'a>(
        &'a self,
        _request: &'a RoutingInfo,
        _cluster: &'a ClusterState,
    ) -> FallbackPlan<'a> {
        Box::new(self.0.iter().skip(1).map(|(node, shard)| (node, *shard)))
    }

    fn name(&self) -> String {
        "saltblob token range replicas".to_owned()
    }
}

/// How a pass over the store's manifests is split ([`saltblob_core::ChunkStore::manifest_ranges`]).
///
/// # Errors
/// [`Error::Backend`], retryable, when the driver knows no token of the cluster yet.
pub(crate) fn plan(cluster: &Cluster) -> Result<ScanPlan> {
    let state = cluster.session.get_cluster_state();
    let tokens: Vec<i64> = state
        .replica_locator()
        .ring()
        .iter()
        .map(|(token, _)| token.value())
        .collect();
    if tokens.is_empty() {
        return Err(Error::backend(
            NAME,
            "the driver knows no token of the cluster yet",
            true,
        ));
    }
    let shards: usize = state
        .get_nodes_info()
        .iter()
        .filter(|n| n.datacenter.as_deref() == Some(cluster.datacenter.as_str()))
        .map(|n| n.sharder().map_or(1, |s| usize::from(s.nr_shards.get())))
        .sum::<usize>()
        .max(1);
    let ranges = split(&tokens, shards * RANGES_PER_SHARD);
    // Round robin over first replicas: the ranges read at once go to different nodes.
    let mut by_node: BTreeMap<String, VecDeque<TokenRange>> = BTreeMap::new();
    for range in ranges {
        let first = replicas(cluster, range)
            .first()
            .map(|(node, _)| node.host_id.to_string())
            .unwrap_or_default();
        by_node.entry(first).or_default().push_back(range);
    }
    let mut ordered = Vec::new();
    while !by_node.is_empty() {
        by_node.retain(|_, queue| {
            if let Some(range) = queue.pop_front() {
                ordered.push(range.encode());
            }
            !queue.is_empty()
        });
    }
    let in_flight = (shards * IN_FLIGHT_PER_SHARD)
        .max(MIN_IN_FLIGHT)
        .min(ordered.len().max(1));
    Ok(ScanPlan {
        ranges: ordered,
        in_flight,
    })
}

/// Up to `limit` manifests of `range` after `after` ([`saltblob_core::ChunkStore::scan_manifest_range`]).
///
/// # Errors
/// [`Error::InvalidArgument`] when `range` is not one of this backend's or `after` does not lie in it; what the
/// reads return after their retries.
pub(crate) async fn read(
    cluster: &Cluster,
    range: &ScanRange,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<RangePage> {
    let tokens = TokenRange::decode(range)?;
    // After a key: from its token on (`> token - 1`), dropping the rows of that token up to the key.
    let (lower, mut skip) = match after {
        None => (tokens.start, None),
        Some(key) => {
            let t = token_of(key);
            if !tokens.holds(t) {
                return Err(Error::invalid(
                    "scan range",
                    format!(
                        "key \"{}\" (token {t}) does not lie in {tokens}",
                        KeyDisplay::from(key)
                    ),
                ));
            }
            (t - 1, Some((t, key)))
        }
    };
    let mut st = cluster.st.scan_manifest_range.clone();
    st.set_page_size(i32::try_from(limit.max(1)).unwrap_or(i32::MAX));
    // No replica known (the driver has not read the keyspace's replication yet): the session's own plan.
    let replicas = replicas(cluster, tokens);
    if !replicas.is_empty() {
        let profile = cluster
            .session
            .get_default_execution_profile_handle()
            .pointee_to_builder()
            .load_balancing_policy(Arc::new(RangeReplicas(replicas)))
            .build()
            .into_handle();
        st.set_execution_profile_handle(Some(profile));
    }
    let values = (lower, tokens.end);
    let mut records: Vec<(Bytes, Bytes)> = Vec::new();
    let mut paging = PagingState::start();
    let done = loop {
        let what = || {
            format!(
                "read of {tokens} of the manifest table of keyspace {}",
                cluster.config.keyspace
            )
        };
        let (result, next) = cluster
            .run(what, true, || {
                cluster
                    .session
                    .execute_single_page(&st, values, paging.clone())
            })
            .await?;
        let rows = result
            .into_rows_result()
            .map_err(|e| error::shape("manifest range read", e))?;
        for row in rows
            .rows::<(Bytes, Bytes)>()
            .map_err(|e| error::shape("manifest range read", e))?
        {
            let (key, value) = row.map_err(|e| error::shape("manifest range read", e))?;
            if let Some((t, after)) = skip {
                if token_of(&key) == t && key.as_ref() <= after {
                    continue;
                }
                skip = None;
            }
            records.push((key, value));
        }
        match next {
            PagingStateResponse::NoMorePages => break true,
            PagingStateResponse::HasMorePages { state } if records.len() < limit => paging = state,
            PagingStateResponse::HasMorePages { .. } => break false,
        }
    };
    // A page past the limit (rows dropped before it) ends at the limit; the next read starts after it.
    let done = done && records.len() <= limit;
    records.truncate(limit);
    Ok(RangePage { records, done })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token of the ring lies in exactly one range, whatever the ring.
    fn covers_every_token_once(ranges: &[TokenRange]) {
        let mut sorted = ranges.to_vec();
        sorted.sort_by_key(|r| r.start);
        assert_eq!(sorted.first().map(|r| r.start), Some(i64::MIN));
        assert_eq!(sorted.last().map(|r| r.end), Some(i64::MAX));
        for pair in sorted.windows(2) {
            assert_eq!(pair[0].end, pair[1].start, "{pair:?}");
        }
        assert!(sorted.iter().all(|r| r.start < r.end));
    }

    #[test]
    fn the_ring_is_cut_at_its_tokens_and_then_into_equal_parts() {
        // One node, 16 tokens in [-2⁶², -2⁵⁸]: 17 ranges (the wrapping one in two), more than 3 wanted, the one
        // after the last token (over half the ring) cut once more.
        let tokens: Vec<i64> = (0..16).map(|i| i64::MIN / 2 + i * (1 << 58)).collect();
        let ranges = split(&tokens, 3);
        assert_eq!(ranges.len(), 18);
        covers_every_token_once(&ranges);
        // Three nodes of 8 shards, one token each, two of them close: the wide ranges are cut into parts of
        // 2⁶⁴ / 72 tokens, the narrow ones left whole.
        let target = 3 * 8 * 3;
        let ranges = split(&[-5, 0, 7], target);
        assert_eq!(ranges.len(), 74);
        covers_every_token_once(&ranges);
        let widest = (1i128 << 64) / 72 + 1;
        assert!(
            ranges
                .iter()
                .all(|r| i128::from(r.end) - i128::from(r.start) <= widest)
        );
        // Tokens spread evenly: as many ranges as asked, one token's range each cut alike.
        let even: Vec<i64> = (-1..=1).map(|i| i * (1 << 62)).collect();
        assert_eq!(split(&even, 72).len(), 72);
        // Tokens at the ends of the space, duplicates, and a range of one token that cannot be cut.
        for tokens in [vec![i64::MIN, i64::MAX], vec![3, 3, 4], vec![i64::MAX]] {
            let ranges = split(&tokens, 50);
            covers_every_token_once(&ranges);
        }
        assert!(split(&[3, 4], 1000).contains(&TokenRange { start: 3, end: 4 }));
    }

    #[test]
    fn descriptors_round_trip_and_others_are_refused() {
        let r = TokenRange {
            start: -7,
            end: 1 << 40,
        };
        assert_eq!(TokenRange::decode(&r.encode()).unwrap(), r);
        for bad in [
            ScanRange::ordered(),
            ScanRange::from_bytes(vec![2; 17]),
            ScanRange::from_bytes(vec![TAG; 16]),
            TokenRange { start: 5, end: 5 }.encode(),
        ] {
            assert!(TokenRange::decode(&bad).is_err(), "{bad:?}");
        }
        assert!(r.holds(1 << 40) && !r.holds(-7));
    }
}
