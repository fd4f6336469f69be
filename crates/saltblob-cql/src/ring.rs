//! The ring of the store's keyspace as the driver sees it, for `saltblob plan`: the nodes of the data center the
//! store writes to, and the replica set of every token range of the chunks table ([`saltblob_core::plan::Ring`]).

use saltblob_core::plan::{ReplicaRange, Ring, RingNode};
use saltblob_core::{Error, Result};

use crate::backend::CqlStore;
use crate::error::NAME;
use crate::schema::CHUNKS;

impl CqlStore {
    /// The ring of the store's keyspace: every range between two consecutive tokens of the driver's token ring,
    /// its share of the ring and its replicas in the store's data center (as the keyspace's replication places
    /// them). The driver refreshes its metadata in the background; a topology change shows after its refresh.
    ///
    /// # Errors
    /// [`Error::Backend`] when the driver knows no token of the cluster yet.
    pub fn ring(&self) -> Result<Ring> {
        let cluster = &self.cluster;
        let state = cluster.session.get_cluster_state();
        let dc = cluster.datacenter.as_str();
        let mut nodes: Vec<RingNode> = Vec::new();
        let mut index_of = std::collections::HashMap::new();
        for node in state.get_nodes_info() {
            if node.datacenter.as_deref() != Some(dc) {
                continue;
            }
            index_of.insert(node.host_id, nodes.len());
            nodes.push(RingNode {
                name: node.address.ip().to_string(),
                rack: node.rack.clone().unwrap_or_else(|| "(no rack)".to_owned()),
            });
        }
        let tokens: Vec<i64> = state
            .replica_locator()
            .ring()
            .iter()
            .map(|(token, _)| token.value())
            .collect();
        let Some(&last) = tokens.last() else {
            return Err(Error::backend(
                NAME,
                "the driver knows no token of the cluster yet",
                true,
            ));
        };
        let mut ranges = Vec::with_capacity(tokens.len());
        let mut previous = last;
        for &token in &tokens {
            // The range (previous, token], a share of the 2^64 tokens; one token alone owns the whole ring.
            let width = (token as u64).wrapping_sub(previous as u64);
            let share = if tokens.len() == 1 {
                1.0
            } else {
                width as f64 / 2f64.powi(64)
            };
            previous = token;
            let replicas = state
                .get_token_endpoints(
                    &cluster.config.keyspace,
                    CHUNKS,
                    scylla::routing::Token::new(token),
                )
                .iter()
                .filter_map(|(node, _)| index_of.get(&node.host_id).copied())
                .collect();
            ranges.push(ReplicaRange { share, replicas });
        }
        Ok(Ring { nodes, ranges })
    }
}
