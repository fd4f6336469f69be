//! The blast radius of a layout policy on a cluster: the share of blobs and of bytes whose consistency is at
//! risk when one node in each of two racks is lost, as the salting article counts it, for the blobs a
//! [`Census`] counted. `saltblob plan` prints it for the store's blobs as they are, for its policy and for
//! alternatives; docs/scaling.md states the model.
//!
//! **The model.** Every write reached only a quorum of its replicas (`rf / 2 + 1`). A blob depends on
//! [`partitions_of`] partitions (its manifest's and one per salt). Two nodes, *a* and *b*, in two different
//! racks are lost. A blob is **at risk** when it has data on both: some partition with a replica on *a* and
//! some partition with a replica on *b* (the article's count: every blob salted over all the nodes of a rack
//! is at risk, and an unsalted one when both lost nodes hold its one partition). A blob has **lost a quorum**
//! when one of its partitions lost enough replicas that a quorum-only write may be gone (`rf - rf / 2` of them:
//! both lost nodes at `rf` 3): the stricter count, which is smaller.
//!
//! Where replicas are, for a pair (*a*, *b*), is three shares of the token ring ([`PairShare`]): the
//! partitions with a replica on *a*, on *b*, on both. A cluster [`Shape`] gives them for a
//! NetworkTopologyStrategy ring with one replica per rack in `rf` of the racks and the ring's ranges evenly
//! spread; a live [`Ring`] gives them exactly for each pair of its nodes, from its replica sets.
//!
//! **Placement.** saltblob's partitions are placed by the partitioner's hash of (key, version, salt), each
//! independently of the others ([`Placement::Hashed`]). The article assumes a blob's partitions land on distinct
//! nodes of each rack as far as there are nodes ([`Placement::Spread`], only for a shape with as many racks as
//! replicas): at the same salt count it covers more node pairs, so it is the upper bound of the two.

use crate::base::error::{Error, Result};
use crate::format::layout::LayoutPolicy;
use crate::policy::census::{Census, LayoutClass, Tally, partitions_of_layout};

/// A cluster's shape for the model: racks, nodes in each and the replication factor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Racks (of the data center the store writes to).
    pub racks: u32,
    /// Nodes in each rack.
    pub nodes_per_rack: u32,
    /// Replicas of each partition, one per rack.
    pub rf: u32,
}

impl Shape {
    /// A checked shape.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option (`racks`, `nodes-per-rack`, `rf`) when the shape cannot hold
    /// the replication factor one replica per rack, or has fewer than two racks to lose a node in.
    pub fn new(racks: u32, nodes_per_rack: u32, rf: u32) -> Result<Self> {
        if racks < 2 {
            return Err(Error::invalid(
                "racks",
                format!(
                    "{racks}; the model loses a node in each of two racks, so it needs at least 2"
                ),
            ));
        }
        if nodes_per_rack == 0 {
            return Err(Error::invalid(
                "nodes-per-rack",
                "0; a rack holds at least one node",
            ));
        }
        if rf == 0 || rf > racks {
            return Err(Error::invalid(
                "rf",
                format!(
                    "{rf} replicas cannot be held one per rack by {racks} racks of {nodes_per_rack} node(s); \
                     give 1 to {racks} (NetworkTopologyStrategy places each replica in a rack of its own)"
                ),
            ));
        }
        Ok(Self {
            racks,
            nodes_per_rack,
            rf,
        })
    }

    /// The shares of the ring a pair of nodes in two different racks holds, the same for every such pair.
    pub fn pair_share(&self) -> PairShare {
        let (r, n, rf) = (
            f64::from(self.racks),
            f64::from(self.nodes_per_rack),
            f64::from(self.rf),
        );
        let one = rf / r / n;
        PairShare {
            a: one,
            b: one,
            both: rf * (rf - 1.0) / (r * (r - 1.0)) / (n * n),
        }
    }
}

/// How a blob's partitions are placed on the nodes (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Independently, by the hash of each partition key: saltblob's.
    Hashed,
    /// On distinct nodes of each rack as far as they go: the article's assumption.
    Spread,
}

impl Placement {
    /// The name as printed and parsed: `hashed`, `spread`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hashed => "hashed",
            Self::Spread => "spread",
        }
    }
}

/// The share of the token ring (of partitions) with a replica on node *a*, on node *b*, and on both.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairShare {
    /// With a replica on *a*.
    pub a: f64,
    /// With a replica on *b*.
    pub b: f64,
    /// With replicas on both.
    pub both: f64,
}

/// The chances that one blob of a given number of partitions is at risk, and has lost a quorum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlobRisk {
    /// Data on both lost nodes.
    pub at_risk: f64,
    /// A partition that lost a quorum-only write's replicas.
    pub quorum_lost: f64,
}

/// What the loss of a pair of nodes exposes: the model's [`Shape`] with a [`Placement`], or a pair of a live
/// ring's nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exposure {
    /// The pair's shares of the ring.
    pub pair: PairShare,
    /// Replicas of each partition.
    pub rf: u32,
    /// How partitions are placed; [`Placement::Spread`] needs `nodes_per_rack`.
    pub placement: Placement,
    /// Nodes in each rack, for [`Placement::Spread`].
    pub nodes_per_rack: u32,
}

impl Exposure {
    /// The model's exposure for `shape`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `placement` for [`Placement::Spread`] on a shape with more racks than
    /// replicas (the model spreads a blob over one node of every rack).
    pub fn of_shape(shape: &Shape, placement: Placement) -> Result<Self> {
        if placement == Placement::Spread && shape.racks != shape.rf {
            return Err(Error::invalid(
                "placement",
                format!(
                    "spread is modelled for as many racks as replicas ({} racks, rf {})",
                    shape.racks, shape.rf
                ),
            ));
        }
        Ok(Self {
            pair: shape.pair_share(),
            rf: shape.rf,
            placement,
            nodes_per_rack: shape.nodes_per_rack,
        })
    }

    /// A pair of a live ring's nodes ([`Ring::pairs`]), placed as saltblob places partitions.
    pub fn of_pair(pair: PairShare, rf: u32) -> Self {
        Self {
            pair,
            rf,
            placement: Placement::Hashed,
            nodes_per_rack: 0,
        }
    }

    /// The chance that one partition lost the replicas a quorum-only write may have been on alone.
    fn partition_quorum_lost(&self) -> f64 {
        let PairShare { a, b, both } = self.pair;
        match self.rf - self.rf / 2 {
            0 | 1 => (a + b - both).clamp(0.0, 1.0),
            2 => both,
            _ => 0.0, // Two lost nodes cannot take a quorum of 5 or more replicas.
        }
    }

    /// The risk for one blob spread over `partitions` partitions.
    pub fn blob(&self, partitions: u64) -> BlobRisk {
        let p = i32::try_from(partitions.max(1)).unwrap_or(i32::MAX);
        let PairShare { a, b, both } = self.pair;
        let q = self.partition_quorum_lost();
        match self.placement {
            Placement::Hashed => BlobRisk {
                // Inclusion-exclusion over "no partition on a" and "no partition on b".
                at_risk: (1.0 - (1.0 - a).powi(p) - (1.0 - b).powi(p)
                    + (1.0 - a - b + both).powi(p))
                .clamp(0.0, 1.0),
                quorum_lost: (1.0 - (1.0 - q).powi(p)).clamp(0.0, 1.0),
            },
            Placement::Spread => {
                let n = f64::from(self.nodes_per_rack.max(1));
                let touched = (f64::from(p) / n).min(1.0);
                BlobRisk {
                    at_risk: touched * touched,
                    quorum_lost: (f64::from(p) * q).min(1.0),
                }
            }
        }
    }

    /// The shares of the blobs and of the bytes of `blobs` (tallies by partition count) at risk.
    pub fn over(&self, blobs: &[(u64, Tally)]) -> Risk {
        let mut risk = Risk::default();
        let total = blobs.iter().fold(Tally::default(), |mut t, (_, x)| {
            t.count += x.count;
            t.bytes = t.bytes.saturating_add(x.bytes);
            t
        });
        for (partitions, tally) in blobs {
            let r = self.blob(*partitions);
            let (keys, bytes) = (
                tally.count as f64 / total.count.max(1) as f64,
                tally.bytes as f64 / total.bytes.max(1) as f64,
            );
            risk.keys_at_risk += r.at_risk * keys;
            risk.bytes_at_risk += r.at_risk * bytes;
            risk.keys_quorum_lost += r.quorum_lost * keys;
            risk.bytes_quorum_lost += r.quorum_lost * bytes;
        }
        risk
    }
}

/// Shares (0 to 1) of a set of blobs exposed by a pair of lost nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Risk {
    /// Blobs at risk.
    pub keys_at_risk: f64,
    /// Their bytes.
    pub bytes_at_risk: f64,
    /// Blobs with a partition that lost a quorum.
    pub keys_quorum_lost: f64,
    /// Their bytes.
    pub bytes_quorum_lost: f64,
}

/// A census's blobs as a policy would lay them out: tallies by partition count. "As stored" is
/// [`Census::partitions`]; this re-lays each size bucket at its mean size, as `saltblob relayout` would.
pub fn relaid(census: &Census, policy: &LayoutPolicy) -> Vec<(u64, Tally)> {
    let mut by_partitions = std::collections::BTreeMap::<u64, Tally>::new();
    for class in LayoutClass::ALL {
        for (_, bucket) in census.sizes_of(class).buckets() {
            let mean = bucket.tally.bytes / bucket.tally.count.max(1);
            let entry = by_partitions
                .entry(partitions_of_layout(&policy.layout_for(mean)))
                .or_default();
            entry.count += bucket.tally.count;
            entry.bytes = entry.bytes.saturating_add(bucket.tally.bytes);
        }
    }
    by_partitions.into_iter().collect()
}

/// One node of a live ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingNode {
    /// How it is named (its address).
    pub name: String,
    /// Its rack.
    pub rack: String,
}

/// A range of the token ring and the nodes holding its replicas.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaRange {
    /// Its share of the ring (0 to 1).
    pub share: f64,
    /// Its replicas, as indexes into [`Ring::nodes`].
    pub replicas: Vec<usize>,
}

/// A live cluster's ring for one keyspace, as its driver sees it: nodes and the replica set of every range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ring {
    /// The nodes of the data center the store writes to.
    pub nodes: Vec<RingNode>,
    /// Every range of the ring.
    pub ranges: Vec<ReplicaRange>,
}

impl Ring {
    /// The replication factor: the most replicas of any range.
    pub fn rf(&self) -> u32 {
        let most = self
            .ranges
            .iter()
            .map(|r| r.replicas.len())
            .max()
            .unwrap_or(0);
        u32::try_from(most).unwrap_or(u32::MAX)
    }

    /// How many racks the nodes are in.
    pub fn racks(&self) -> usize {
        let mut racks: Vec<&str> = self.nodes.iter().map(|n| n.rack.as_str()).collect();
        racks.sort_unstable();
        racks.dedup();
        racks.len()
    }

    /// Every pair of nodes in two different racks (any two nodes when they are all in one rack) and the shares
    /// of the ring they hold, by enumeration of the replica sets.
    pub fn pairs(&self) -> Vec<(usize, usize, PairShare)> {
        let one_rack = self.racks() <= 1;
        let mut pairs = Vec::new();
        for a in 0..self.nodes.len() {
            for b in a + 1..self.nodes.len() {
                if !one_rack && self.nodes[a].rack == self.nodes[b].rack {
                    continue;
                }
                let mut share = PairShare {
                    a: 0.0,
                    b: 0.0,
                    both: 0.0,
                };
                for range in &self.ranges {
                    let (on_a, on_b) = (range.replicas.contains(&a), range.replicas.contains(&b));
                    share.a += if on_a { range.share } else { 0.0 };
                    share.b += if on_b { range.share } else { 0.0 };
                    share.both += if on_a && on_b { range.share } else { 0.0 };
                }
                pairs.push((a, b, share));
            }
        }
        pairs
    }

    /// The pair whose loss exposes the most of `blobs` (by keys at risk, then bytes), with what it exposes;
    /// `None` when the ring has fewer than two nodes.
    pub fn worst_pair(&self, blobs: &[(u64, Tally)]) -> Option<(usize, usize, Risk)> {
        worst_of(&self.pairs(), self.rf(), blobs)
    }
}

/// The pair of `pairs` (from [`Ring::pairs`] of a ring of replication factor `rf`) whose loss exposes the most of
/// `blobs`, as [`Ring::worst_pair`]; for comparing several distributions on one ring without enumerating it again.
pub fn worst_of(
    pairs: &[(usize, usize, PairShare)],
    rf: u32,
    blobs: &[(u64, Tally)],
) -> Option<(usize, usize, Risk)> {
    pairs
        .iter()
        .map(|&(a, b, share)| (a, b, Exposure::of_pair(share, rf).over(blobs)))
        .max_by(|x, y| {
            (x.2.keys_at_risk, x.2.bytes_at_risk)
                .partial_cmp(&(y.2.keys_at_risk, y.2.bytes_at_risk))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::units::{KIB, MIB};

    fn close(x: f64, y: f64, within: f64) -> bool {
        (x - y).abs() <= within
    }

    #[test]
    fn the_articles_table_unsalted_blobs_at_risk_by_nodes_per_rack() {
        // 3 racks, rf 3, one node lost in each of two racks: a value in one partition is at risk when both lost
        // nodes are its replicas, 1 / n².
        for (n, article) in [(2, 0.25), (3, 0.11), (4, 0.0625), (5, 0.04)] {
            let shape = Shape::new(3, n, 3).unwrap();
            for placement in [Placement::Hashed, Placement::Spread] {
                let risk = Exposure::of_shape(&shape, placement).unwrap().blob(1);
                assert!(
                    close(risk.at_risk, article, 0.002),
                    "{n} per rack, {placement:?}: {}",
                    risk.at_risk
                );
                // At rf 3 losing both lost nodes' replicas is losing the quorum: the two counts agree.
                assert!(close(risk.quorum_lost, risk.at_risk, 1e-12));
            }
        }
    }

    #[test]
    fn the_articles_table_salted_blobs_are_all_at_risk() {
        for n in 2..=5u32 {
            let shape = Shape::new(3, n, 3).unwrap();
            // The article: salted over at least as many partitions as nodes in a rack, every blob is at risk.
            let spread = Exposure::of_shape(&shape, Placement::Spread).unwrap();
            for salts in [n, n + 1, 100] {
                assert_eq!(
                    spread.blob(u64::from(salts)).at_risk,
                    1.0,
                    "{n} per rack, {salts} salts"
                );
            }
            assert!(spread.blob(u64::from(n - 1)).at_risk < 1.0);
            // saltblob hashes each partition: at its default max salt (100, plus the manifest) the same.
            let hashed = Exposure::of_shape(&shape, Placement::Hashed).unwrap();
            assert!(
                hashed.blob(101).at_risk > 0.999,
                "{n}: {}",
                hashed.blob(101).at_risk
            );
            // Hashed placement covers fewer pairs at a low salt count than spread does.
            assert!(hashed.blob(u64::from(n)).at_risk < spread.blob(u64::from(n)).at_risk);
            // The stricter count grows with the salt count too, but needs many more partitions.
            assert!(hashed.blob(101).quorum_lost > hashed.blob(2).quorum_lost);
        }
    }

    #[test]
    fn the_articles_hybrid_policy_exposes_about_one_percent_more() {
        // 99% of the blobs small (inline), the largest 1% salted over the default max salt: the hybrid policy at
        // its P99 threshold adds about 1% of the keys to the unsalted exposure.
        for n in 2..=5u32 {
            let exposure =
                Exposure::of_shape(&Shape::new(3, n, 3).unwrap(), Placement::Hashed).unwrap();
            let blobs = [
                (
                    1,
                    Tally {
                        count: 9900,
                        bytes: 9900 * 10 * KIB,
                    },
                ),
                (
                    101,
                    Tally {
                        count: 100,
                        bytes: 100 * 60 * MIB,
                    },
                ),
            ];
            let unsalted = exposure.blob(1).at_risk;
            let risk = exposure.over(&blobs);
            let more = risk.keys_at_risk - unsalted;
            assert!(close(more, 0.01 * (1.0 - unsalted), 1e-4), "{n}: {more}");
            // By bytes the salted blobs are most of the store, so most bytes are at risk.
            assert!(risk.bytes_at_risk > 0.98);
        }
    }

    #[test]
    fn shapes_and_placements_that_cannot_be_are_refused_naming_the_option() {
        let named = |e: Error, what: &str| assert!(e.to_string().contains(what), "{e}");
        named(Shape::new(1, 3, 1).unwrap_err(), "racks");
        named(Shape::new(3, 0, 3).unwrap_err(), "nodes-per-rack");
        named(Shape::new(2, 5, 3).unwrap_err(), "rf");
        named(Shape::new(3, 5, 0).unwrap_err(), "rf");
        let wide = Shape::new(4, 2, 3).unwrap();
        named(
            Exposure::of_shape(&wide, Placement::Spread).unwrap_err(),
            "placement",
        );
    }

    #[test]
    fn more_racks_than_replicas_share_the_risk_out() {
        // With 6 racks and rf 3, a pair of lost nodes holds both replicas of fewer partitions than with 3.
        let three = Exposure::of_shape(&Shape::new(3, 2, 3).unwrap(), Placement::Hashed).unwrap();
        let six = Exposure::of_shape(&Shape::new(6, 2, 3).unwrap(), Placement::Hashed).unwrap();
        assert!(close(
            six.blob(1).at_risk,
            0.25 * 3.0 * 2.0 / (6.0 * 5.0),
            1e-12
        ));
        assert!(six.blob(1).at_risk < three.blob(1).at_risk);
        // rf 5 keeps a quorum-only write through any two lost nodes; rf 1 loses it with either.
        let five = Exposure::of_shape(&Shape::new(5, 2, 5).unwrap(), Placement::Hashed).unwrap();
        assert_eq!(five.blob(100).quorum_lost, 0.0);
        let one = Exposure::of_shape(&Shape::new(3, 2, 1).unwrap(), Placement::Hashed).unwrap();
        assert!(close(one.blob(1).quorum_lost, 2.0 / 6.0, 1e-12));
    }

    fn ring(racks: &[&str], ranges: &[(f64, &[usize])]) -> Ring {
        Ring {
            nodes: racks
                .iter()
                .enumerate()
                .map(|(i, rack)| RingNode {
                    name: format!("n{i}"),
                    rack: (*rack).to_owned(),
                })
                .collect(),
            ranges: ranges
                .iter()
                .map(|(share, replicas)| ReplicaRange {
                    share: *share,
                    replicas: replicas.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_ring_is_enumerated_pair_by_pair_and_its_worst_pair_found() {
        // Two racks of two nodes, rf 2; node 0 and node 2 share half the ring.
        let r = ring(
            &["r1", "r1", "r2", "r2"],
            &[(0.5, &[0, 2]), (0.25, &[1, 2]), (0.25, &[1, 3])],
        );
        assert_eq!((r.rf(), r.racks()), (2, 2));
        let pairs = r.pairs();
        assert_eq!(pairs.len(), 4, "only pairs across racks");
        let blobs = [(1, Tally { count: 1, bytes: 1 })];
        let (a, b, risk) = r.worst_pair(&blobs).unwrap();
        assert_eq!((a, b), (0, 2));
        assert!(close(risk.keys_at_risk, 0.5, 1e-12));
        // rf 2: a quorum-only write is on both replicas, so losing either loses it.
        assert!(close(risk.keys_quorum_lost, 0.5 + 0.75 - 0.5, 1e-12));
        // A blob over many partitions touches every node.
        let (_, _, salted) = r
            .worst_pair(&[(101, Tally { count: 1, bytes: 1 })])
            .unwrap();
        assert!(salted.keys_at_risk > 0.999);
    }

    #[test]
    fn a_ring_in_one_rack_pairs_any_two_nodes() {
        let r = ring(&["r", "r", "r"], &[(1.0, &[0, 1, 2])]);
        assert_eq!(r.pairs().len(), 3);
        let (_, _, risk) = r.worst_pair(&[(1, Tally { count: 1, bytes: 1 })]).unwrap();
        assert_eq!((risk.keys_at_risk, risk.keys_quorum_lost), (1.0, 1.0));
        assert!(Ring::default().worst_pair(&[]).is_none());
    }

    #[test]
    fn a_policy_relays_each_size_at_its_mean() {
        let mut census = Census::default();
        let blob = |size| crate::format::manifest::Manifest {
            sealing: None,
            version: crate::base::version::VersionId::generate_at(1),
            size,
            created_micros: 0,
            expires_micros: None,
            digest: [0; 32],
            body: crate::format::manifest::ManifestBody::Inline(bytes::Bytes::new()),
            content_type: None,
            metadata: Default::default(),
        };
        census.add(&blob(100));
        census.add(&blob(20 * MIB));
        let policy = LayoutPolicy::default().with_large_chunk_size(MIB as u32);
        let relaid = relaid(&census, &policy);
        assert_eq!(
            relaid
                .iter()
                .map(|(p, t)| (*p, t.count))
                .collect::<Vec<_>>(),
            [(1, 1), (21, 1)]
        );
        let unsalted = relaid_with(&census, policy.with_fanout_threshold(u64::MAX));
        assert_eq!(unsalted.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [1, 2]);
    }

    fn relaid_with(census: &Census, policy: LayoutPolicy) -> Vec<(u64, Tally)> {
        relaid(census, &policy)
    }
}
