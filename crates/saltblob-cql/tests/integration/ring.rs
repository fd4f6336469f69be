//! The ring `saltblob plan` reads ([`CqlStore::ring`]), checked against the nodes' own token lists in
//! `system.local` and `system.peers`: every range's share and replicas, and what a pair of lost nodes exposes.

use std::collections::HashMap;
use std::net::IpAddr;

use saltblob_core::Tally;
use saltblob_core::plan::Ring;
use saltblob_cql::CqlStore;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::policies::load_balancing::{NodeIdentifier, SingleTargetLoadBalancingPolicy};
use scylla::statement::Statement;

use crate::connect_to;

/// Each node's tokens, by address, as each node lists its own (`system.local`, asked of that node).
pub async fn node_tokens(store: &CqlStore) -> HashMap<String, Vec<i64>> {
    let session = store.session();
    let mut tokens = HashMap::new();
    for node in session.get_cluster_state().get_nodes_info() {
        let policy = SingleTargetLoadBalancingPolicy::new(NodeIdentifier::Node(node.clone()), None);
        let profile = ExecutionProfile::builder()
            .load_balancing_policy(policy)
            .build();
        let mut query = Statement::new("SELECT broadcast_address, tokens FROM system.local");
        query.set_execution_profile_handle(Some(profile.into_handle()));
        let rows = session
            .query_unpaged(query, ())
            .await
            .unwrap()
            .into_rows_result()
            .unwrap();
        for row in rows.rows::<(IpAddr, Vec<String>)>().unwrap() {
            let (address, list) = row.unwrap();
            assert_eq!(address, node.address.ip(), "asked {node:?}");
            let parsed = list.iter().map(|t| t.parse::<i64>().unwrap()).collect();
            tokens.insert(address.to_string(), parsed);
        }
    }
    tokens
}

/// Checks `ring` against the nodes' token lists: one range ending at each token, shares that add up to the
/// ring, `rf` replicas per range in the first, and with `rf` 1 each node's share where its tokens say.
pub fn check_ring(ring: &Ring, tokens: &HashMap<String, Vec<i64>>, rf: usize) {
    let mut all: Vec<(i64, &str)> = tokens
        .iter()
        .flat_map(|(node, ts)| ts.iter().map(move |t| (*t, node.as_str())))
        .collect();
    all.sort_unstable();
    assert_eq!(ring.nodes.len(), tokens.len(), "{ring:?}");
    assert_eq!(ring.ranges.len(), all.len(), "one range per token");
    let total: f64 = ring.ranges.iter().map(|r| r.share).sum();
    assert!((total - 1.0).abs() < 1e-9, "shares add up to {total}");
    for range in &ring.ranges {
        assert_eq!(range.replicas.len(), rf, "{range:?}");
    }
    if rf != 1 {
        return;
    }
    // The share of the ranges ending at each node's tokens, computed here from the token lists alone.
    let mut expected: HashMap<&str, f64> = HashMap::new();
    let mut previous = all.last().map_or(0, |(t, _)| *t);
    for (token, node) in &all {
        let width = (*token as u64).wrapping_sub(previous as u64) as f64 / 2f64.powi(64);
        *expected.entry(node).or_default() += if all.len() == 1 { 1.0 } else { width };
        previous = *token;
    }
    for (i, node) in ring.nodes.iter().enumerate() {
        let held: f64 = ring
            .ranges
            .iter()
            .filter(|r| r.replicas == [i])
            .map(|r| r.share)
            .sum();
        let want = expected.get(node.name.as_str()).copied().unwrap_or(-1.0);
        assert!(
            (held - want).abs() < 1e-9,
            "{}: ring says {held}, tokens say {want}",
            node.name
        );
    }
    // rf 1: no partition is on two nodes; losing a pair loses what either held.
    let blob = [(1, Tally { count: 1, bytes: 1 })];
    if let Some((a, b, risk)) = ring.worst_pair(&blob) {
        assert!(risk.keys_at_risk.abs() < 1e-12, "{risk:?}");
        let (sa, sb) = (
            expected[ring.nodes[a].name.as_str()],
            expected[ring.nodes[b].name.as_str()],
        );
        assert!((risk.keys_quorum_lost - (sa + sb)).abs() < 1e-9, "{risk:?}");
    }
}

/// The suite's keyspace is at rf 1: each node holds the ranges its tokens end (one node in the suite's step).
#[tokio::test]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn the_ring_at_rf_1_is_each_nodes_tokens() {
    let store = connect_to(crate::keyspace(), "").await;
    let ring = store.ring().unwrap();
    let tokens = node_tokens(&store).await;
    check_ring(&ring, &tokens, 1);
    let nodes = tokens.len();
    assert_eq!(
        ring.pairs().len(),
        nodes * (nodes - 1) / 2,
        "one rack: every pair"
    );
}
