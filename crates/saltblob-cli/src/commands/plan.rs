//! `saltblob plan`: what a layout policy exposes when one node in each of two racks is lost (the salting
//! article's blast radius), for the store's blobs as they are, for its policy and for alternatives, on a cluster
//! shape (`--racks`, `--nodes-per-rack`, `--rf`) or on the live ring of a `cql://` store. The model is
//! `saltblob::plan`'s; docs/scaling.md explains it.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use saltblob::cql::{CqlConfig, CqlStore};
use saltblob::plan::{Exposure, Placement, Ring, Risk, Shape, relaid, worst_of};
use saltblob::{BlobStore, Census, LayoutPolicy, Tally, parse_size};
use serde_json::{Value, json};

use super::census::{census_from_json, census_json, count, emit};
use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::{KeyArg, parse_key, short};

/// Arguments of `saltblob plan`.
#[derive(clap::Args, Debug)]
pub struct Plan {
    /// Racks of the cluster to model (with --nodes-per-rack); without it, the live ring of the cql:// store.
    #[arg(long, requires = "nodes_per_rack")]
    racks: Option<u32>,
    /// Nodes in each rack of the modelled cluster.
    #[arg(long, requires = "racks")]
    nodes_per_rack: Option<u32>,
    /// Replication factor of the modelled cluster (one replica per rack).
    #[arg(long, default_value_t = 3, requires = "racks")]
    rf: u32,
    /// How the model places a blob's partitions: hashed (saltblob: each partition where its key hashes) or
    /// spread (the article: on distinct nodes of each rack; only with as many racks as replicas).
    #[arg(long, default_value = "hashed", value_parser = parse_placement)]
    placement: Placement,
    /// The size distribution: a file written by `saltblob census --json`; without it, the store is counted
    /// (and with it, the store is not opened, unless the ring is read).
    #[arg(long, value_name = "FILE")]
    census: Option<PathBuf>,
    /// When counting the store: only keys starting with PREFIX.
    #[arg(long, value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// When counting the store: the first N blobs in key order only (not random: it leans toward the first
    /// prefixes).
    #[arg(long, value_name = "N")]
    sample: Option<u64>,
    /// An alternative policy to compare, e.g. `name=wide,fanout=1MiB,max_salt=16,chunk_size=64KiB,
    /// large_chunk_size=1MiB,inline=16KiB` (unnamed fields are the store's); repeatable. Checked against the
    /// cluster (cql) backend's limits whatever the store, as the plan models a cluster: chunks of at most 8 MiB
    /// less a chunk header.
    #[arg(long = "policy", value_name = "SPEC")]
    policies: Vec<String>,
    /// Recommend the lowest fan-out threshold (the most salting, the fastest large blobs) whose keys at risk
    /// stay at or under this share, e.g. 2%.
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    target_exposure: Option<f64>,
    /// A `saltblob bench --json` result of this cluster: its large-put throughput (salted) and unchunked-put
    /// throughput (one partition) give each policy's expected put time of the largest blobs (P99.9).
    #[arg(long, value_name = "FILE")]
    bench: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_placement(s: &str) -> Result<Placement, String> {
    match s {
        "hashed" => Ok(Placement::Hashed),
        "spread" => Ok(Placement::Spread),
        other => Err(format!("\"{other}\": hashed or spread")),
    }
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let number = s.strip_suffix('%').unwrap_or(s);
    match number.trim().parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p / 100.0),
        _ => Err(format!("\"{s}\": a share between 0% and 100%, e.g. 2%")),
    }
}

impl Command for Plan {
    /// With `--census FILE` the store is not needed: the plan runs whether or not it exists.
    fn is_read_only(&self) -> bool {
        self.census.is_none()
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(self.plan(context))
    }
}

/// Blobs and bytes by the number of partitions they depend on.
type Blobs = [(u64, Tally)];

/// One policy compared.
struct Compared {
    name: String,
    /// `None` for the blobs as stored.
    policy: Option<LayoutPolicy>,
    blobs: Vec<(u64, Tally)>,
}

/// Throughputs read from a bench result.
struct BenchFigures {
    salted_mib_s: Option<f64>,
    one_partition_mib_s: Option<f64>,
    file: String,
}

impl Plan {
    async fn plan(&self, context: &Context) -> Result<(), Failure> {
        // Everything given is checked before any I/O.
        let shape = match (self.racks, self.nodes_per_rack) {
            (Some(r), Some(n)) => Some(Shape::new(r, n, self.rf)?),
            _ => None,
        };
        let model = shape
            .as_ref()
            .map(|s| Exposure::of_shape(s, self.placement))
            .transpose()?;
        if shape.is_none() && self.placement != Placement::Hashed {
            return Err(Failure::usage(
                "--placement: a live ring places partitions where they hash; spread is for a modelled shape (--racks)",
            ));
        }
        let store_policy = cluster_policy(context.config.policy.clone());
        let extra = self
            .policies
            .iter()
            .map(|spec| compared_policy(spec, &store_policy))
            .collect::<Result<Vec<_>, _>>()?;
        let bench = self.bench.as_ref().map(read_bench).transpose()?;
        let census_file = self
            .census
            .as_ref()
            .map(|path| {
                let what = path.display().to_string();
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Failure::usage(format!("--census {what}: {e}")))?;
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| Failure::usage(format!("--census {what}: {e}")))?;
                census_from_json(&v, &format!("--census {what}"))
            })
            .transpose()?;

        let cluster = match shape {
            Some(_) => None,
            None => Some(connect_cluster(context).await?),
        };
        let ring = cluster.as_ref().map(|c| c.ring()).transpose()?;
        if let Some(ring) = &ring
            && ring.nodes.len() < 2
        {
            return Err(Failure::usage(format!(
                "the ring has {} node(s) in the store's data center: losing two needs at least two; model a \
                 cluster instead (--racks R --nodes-per-rack N --rf 3)",
                ring.nodes.len()
            )));
        }
        let census = match census_file {
            Some(census) => census,
            None => {
                let store = match &cluster {
                    Some(c) => BlobStore::new(c.clone(), context.config.clone())?,
                    None => context.open().await?,
                };
                let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
                count(&store, prefix, self.sample, context.quiet).await?
            }
        };

        let mut compared = vec![Compared {
            name: "current".to_owned(),
            policy: None,
            blobs: census.partitions.iter().map(|(p, t)| (*p, *t)).collect(),
        }];
        let mut add = |name: String, policy: LayoutPolicy| {
            if !compared.iter().any(|c| c.policy.as_ref() == Some(&policy)) {
                let blobs = relaid(&census, &policy);
                compared.push(Compared {
                    name,
                    policy: Some(policy),
                    blobs,
                });
            }
        };
        add("store-policy".to_owned(), store_policy.clone());
        add(
            "unsalted".to_owned(),
            store_policy.clone().with_fanout_threshold(u64::MAX),
        );
        let sizes = census.all_sizes();
        for (name, q) in [
            ("fanout=P90", 0.9),
            ("fanout=P99", 0.99),
            ("fanout=P99.9", 0.999),
        ] {
            if let Some(size) = sizes.percentile(q) {
                add(
                    name.to_owned(),
                    store_policy.clone().with_fanout_threshold(size),
                );
            }
        }
        add(
            "salt-all".to_owned(),
            store_policy
                .clone()
                .with_fanout_threshold(store_policy.inline_limit),
        );
        for (name, policy) in extra {
            add(name, policy);
        }

        // Exactly one of `model` (a shape was given) and `ring` (it was not) is set; the ring is enumerated once.
        let pairs = ring.as_ref().map(|r| (r.pairs(), r.rf()));
        let evaluate = |blobs: &[(u64, Tally)]| -> (Risk, Option<(usize, usize)>) {
            if let Some(model) = &model {
                return (model.over(blobs), None);
            }
            match pairs.as_ref().and_then(|(p, rf)| worst_of(p, *rf, blobs)) {
                Some((a, b, risk)) => (risk, Some((a, b))),
                None => (Risk::default(), None),
            }
        };

        let large_size = sizes.percentile(0.999).unwrap_or(0);
        let mut rows = Vec::new();
        for c in &compared {
            let (risk, pair) = evaluate(&c.blobs);
            let salted = salted_share(&c.blobs);
            let large_salted = match &c.policy {
                Some(p) => {
                    saltblob::LayoutClass::of_layout(&p.layout_for(large_size))
                        == saltblob::LayoutClass::Salted
                }
                None => largest_stored_salted(&census),
            };
            let expected_ms = bench.as_ref().and_then(|b| {
                let mib_s = if large_salted {
                    b.salted_mib_s
                } else {
                    b.one_partition_mib_s
                }?;
                Some(large_size as f64 / (1024.0 * 1024.0) / mib_s * 1000.0)
            });
            rows.push(json!({
                "name": c.name,
                "fanout_threshold": c.policy.as_ref().map(|p| p.fanout_threshold),
                "max_salt": c.policy.as_ref().map(|p| p.max_salt),
                "max_partition_bytes": c.policy.as_ref().map(|p| p.max_partition_bytes),
                "chunk_size": c.policy.as_ref().map(|p| p.chunk_size),
                "large_chunk_size": c.policy.as_ref().and_then(|p| p.large_chunk_size),
                "inline_limit": c.policy.as_ref().map(|p| p.inline_limit),
                "salted_keys": salted.0,
                "salted_bytes": salted.1,
                "keys_at_risk": risk.keys_at_risk,
                "bytes_at_risk": risk.bytes_at_risk,
                "keys_quorum_lost": risk.keys_quorum_lost,
                "bytes_quorum_lost": risk.bytes_quorum_lost,
                "worst_pair": pair.and_then(|(a, b)| ring.as_ref().map(|r| json!([node_name(r, a), node_name(r, b)]))),
                "large_put_ms": expected_ms,
            }));
        }
        let recommendation = self
            .target_exposure
            .map(|target| recommend(&census, &store_policy, target, &|b| evaluate(b).0));

        let where_ = match (&shape, &ring) {
            (Some(s), _) => json!({
                "model": { "racks": s.racks, "nodes_per_rack": s.nodes_per_rack, "rf": s.rf, "placement": self.placement.as_str() }
            }),
            (None, Some(r)) => json!({
                "ring": {
                    "nodes": r.nodes.iter().map(|n| json!({"name": n.name, "rack": n.rack})).collect::<Vec<_>>(),
                    "racks": r.racks(),
                    "rf": r.rf(),
                    "ranges": r.ranges.len(),
                    "pairs": pairs.as_ref().map_or(0, |(p, _)| p.len()),
                }
            }),
            _ => json!({}),
        };
        let mut out = json!({
            "lost": "one node in each of two racks (any two nodes when the ring has one rack); writes reached only a quorum",
            "census": census_json(&census, ""),
            "large_size": large_size,
            "bench": bench.as_ref().map(|b| json!({"file": b.file, "salted_mib_s": b.salted_mib_s, "one_partition_mib_s": b.one_partition_mib_s})),
            "policies": rows,
            "recommendation": recommendation,
        });
        if let (Some(o), Some(w)) = (out.as_object_mut(), where_.as_object()) {
            for (k, v) in w {
                o.insert(k.clone(), v.clone());
            }
        }
        if self.json {
            emit(&format!("{out:#}\n"))
        } else {
            emit(&plan_text(&out))
        }
    }
}

/// The store's policy as a cluster would resolve it: an unset large chunk size and partition bound are the
/// cluster backend's.
fn cluster_policy(policy: LayoutPolicy) -> LayoutPolicy {
    let info = CqlStore::backend_info();
    policy.resolve_for(info.large_chunk_size, info.max_partition_bytes)
}

/// Connects to the cql:// store named by the context, for its ring.
async fn connect_cluster(context: &Context) -> Result<Arc<CqlStore>, Failure> {
    let (url, _) = saltblob::split_store_params(&context.url, context.config.clone())?;
    if !url.starts_with(&format!("{}://", saltblob::cql::SCHEME)) {
        return Err(Failure::usage(
            "plan: give a cluster shape (--racks R --nodes-per-rack N [--rf 3]), or a cql:// store (--store) \
             whose live ring is read",
        ));
    }
    Ok(Arc::new(
        CqlStore::connect(CqlConfig::from_url(&url)?).await?,
    ))
}

/// A `--policy` to compare, on top of the store's policy `base` as a cluster resolves it: parsed, and checked
/// against the cluster (cql) backend's limits, whatever the store, since the plan models a cluster.
fn compared_policy(spec: &str, base: &LayoutPolicy) -> Result<(String, LayoutPolicy), Failure> {
    let (name, policy) = parse_policy(spec, base)?;
    let cluster = CqlStore::backend_info();
    policy
        .validate(cluster.max_chunk_payload())
        .map_err(|e| {
            Failure::usage(format!(
                "--policy {spec}: {e}; the plan models a cluster, so a policy is checked against the {} \
                 backend's limits",
                cluster.name
            ))
        })?;
    Ok((name, policy))
}

/// `name=...,fanout=SIZE,max_salt=N,max_partition=SIZE,chunk_size=SIZE,large_chunk_size=SIZE,inline=SIZE`, on
/// top of `base`. Its
/// values are not checked against any backend: that is the caller's part (a store checks its policy as it opens).
pub(super) fn parse_policy(
    spec: &str,
    base: &LayoutPolicy,
) -> Result<(String, LayoutPolicy), Failure> {
    let bad = |why: String| Failure::usage(format!("--policy {spec}: {why}"));
    let mut policy = base.clone();
    let mut name = None;
    for field in spec.split(',').filter(|f| !f.is_empty()) {
        let (k, v) = field
            .split_once('=')
            .ok_or_else(|| bad(format!("\"{field}\" is not NAME=VALUE")))?;
        let size = || parse_size(v).map_err(|e| bad(format!("{k}: {e}")));
        let small = |n: u64| u32::try_from(n).map_err(|_| bad(format!("{k}: {v} is too large")));
        match k {
            "name" => name = Some(v.to_owned()),
            "fanout" => policy.fanout_threshold = size()?,
            "inline" => policy.inline_limit = size()?,
            "max_salt" => {
                policy.max_salt = v
                    .parse()
                    .map_err(|_| bad(format!("max_salt: \"{v}\" is not a count")))?
            }
            "max_partition" => policy.max_partition_bytes = Some(size()?),
            "chunk_size" => policy.chunk_size = small(size()?)?,
            "large_chunk_size" => policy.large_chunk_size = Some(small(size()?)?),
            other => {
                return Err(bad(format!(
                    "unknown field \"{other}\"; the fields are name, fanout, inline, max_salt, max_partition, chunk_size, large_chunk_size"
                )));
            }
        }
    }
    Ok((name.unwrap_or_else(|| spec.to_owned()), policy))
}

/// Reads a bench result's large-put (salted) and unchunked-put (one partition) throughputs.
fn read_bench(path: &PathBuf) -> Result<BenchFigures, Failure> {
    let file = path.display().to_string();
    let bad = |why: String| Failure::usage(format!("--bench {file}: {why}"));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let phases = v["phases"]
        .as_array()
        .ok_or_else(|| bad("no \"phases\": not a `saltblob bench --json` result".to_owned()))?;
    let mib_s = |name: &str| {
        phases
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["throughput_mib_s"].as_f64())
            .filter(|x| *x > 0.0)
    };
    let figures = BenchFigures {
        salted_mib_s: mib_s("large_write"),
        one_partition_mib_s: mib_s("unchunked_write"),
        file: file.clone(),
    };
    if figures.salted_mib_s.is_none() && figures.one_partition_mib_s.is_none() {
        return Err(bad(
            "neither a large_write nor an unchunked_write throughput in it".to_owned(),
        ));
    }
    Ok(figures)
}

/// The shares of blobs and of bytes over more than one chunk partition.
fn salted_share(blobs: &[(u64, Tally)]) -> (f64, f64) {
    let (mut all, mut salted) = (Tally::default(), Tally::default());
    for (p, t) in blobs {
        all.count += t.count;
        all.bytes = all.bytes.saturating_add(t.bytes);
        if *p > 2 {
            salted.count += t.count;
            salted.bytes = salted.bytes.saturating_add(t.bytes);
        }
    }
    (
        salted.count as f64 / all.count.max(1) as f64,
        salted.bytes as f64 / all.bytes.max(1) as f64,
    )
}

/// Whether the largest blobs stored are salted (their class holds the P99.9 size).
fn largest_stored_salted(census: &Census) -> bool {
    let salted = census.sizes_of(saltblob::LayoutClass::Salted);
    let largest_other = [
        saltblob::LayoutClass::Inline,
        saltblob::LayoutClass::SinglePartition,
    ]
    .iter()
    .filter_map(|c| census.sizes_of(*c).percentile(1.0))
    .max()
    .unwrap_or(0);
    salted.percentile(1.0).is_some_and(|s| s >= largest_other)
}

fn node_name(ring: &Ring, i: usize) -> String {
    ring.nodes.get(i).map_or_else(
        || format!("node {i}"),
        |n| format!("{} ({})", n.name, n.rack),
    )
}

/// The lowest fan-out threshold, among the inline limit and the census's bucket bounds, whose keys at risk stay at or under
/// `target`; the search ends at "unsalted" when even that exceeds it.
fn recommend(
    census: &Census,
    store_policy: &LayoutPolicy,
    target: f64,
    evaluate: &dyn Fn(&Blobs) -> Risk,
) -> Value {
    let mut thresholds: Vec<u64> = census
        .all_sizes()
        .buckets()
        .map(|(i, _)| saltblob::census::bucket_bounds(i).1)
        .filter(|t| *t >= store_policy.inline_limit)
        .chain([store_policy.inline_limit])
        .collect();
    thresholds.sort_unstable();
    thresholds.dedup();
    thresholds.push(u64::MAX);
    for threshold in thresholds {
        let policy = store_policy.clone().with_fanout_threshold(threshold);
        let blobs = relaid(census, &policy);
        let risk = evaluate(&blobs);
        if risk.keys_at_risk <= target {
            let salted = salted_share(&blobs);
            return json!({
                "target": target,
                "met": true,
                "fanout_threshold": (threshold != u64::MAX).then_some(threshold),
                "keys_at_risk": risk.keys_at_risk,
                "bytes_at_risk": risk.bytes_at_risk,
                "salted_keys": salted.0,
                "salted_bytes": salted.1,
            });
        }
    }
    let unsalted = evaluate(&relaid(
        census,
        &store_policy.clone().with_fanout_threshold(u64::MAX),
    ));
    json!({
        "target": target,
        "met": false,
        "fanout_threshold": null,
        "keys_at_risk": unsalted.keys_at_risk,
        "why": "unsalted blobs alone expose more than the target: more racks or nodes per rack, or a higher rf, lower it",
    })
}

fn pct(v: &Value) -> String {
    v.as_f64()
        .map_or("-".to_owned(), |x| format!("{:.2}%", 100.0 * x))
}

fn size_or(v: &Value, none: &str) -> String {
    match v.as_u64() {
        Some(u64::MAX) => "never".to_owned(),
        Some(n) => short(n),
        None => none.to_owned(),
    }
}

/// The plan as text: where, then a table of the policies, then the recommendation.
fn plan_text(out: &Value) -> String {
    let mut s = String::new();
    let census = &out["census"]["all"];
    if let Some(m) = out.get("model") {
        let _ = writeln!(
            s,
            "model: {} racks x {} nodes, rf {}, placement {}; one node lost in each of two racks",
            m["racks"],
            m["nodes_per_rack"],
            m["rf"],
            m["placement"].as_str().unwrap_or("")
        );
    }
    if let Some(r) = out.get("ring") {
        let _ = writeln!(
            s,
            "live ring: {} nodes in {} rack(s), rf {}, {} ranges; worst of {} node pairs",
            r["nodes"].as_array().map_or(0, Vec::len),
            r["racks"],
            r["rf"],
            r["ranges"],
            r["pairs"]
        );
    }
    let _ = writeln!(
        s,
        "blobs: {} ({}), P99.9 size {}; at risk: data on both lost nodes; quorum lost: a partition lost a quorum-only write",
        census["count"],
        size_or(&census["bytes"], "-"),
        size_or(&out["large_size"], "-"),
    );
    let _ = writeln!(
        s,
        "{:<16} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "policy", "fan-out", "max salt", "salted", "keys", "bytes", "keys", "bytes", "P99.9 put"
    );
    let _ = writeln!(
        s,
        "{:<16} {:>9} {:>8} {:>8} {:>19} {:>19}",
        "", "", "", "keys", "at risk", "quorum lost"
    );
    for p in out["policies"].as_array().into_iter().flatten() {
        let put = p["large_put_ms"]
            .as_f64()
            .map_or("-".to_owned(), |ms| format!("{ms:.0} ms"));
        let _ = writeln!(
            s,
            "{:<16} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11}",
            p["name"].as_str().unwrap_or(""),
            size_or(&p["fanout_threshold"], "(stored)"),
            p["max_salt"]
                .as_u64()
                .map_or("-".to_owned(), |n| n.to_string()),
            pct(&p["salted_keys"]),
            pct(&p["keys_at_risk"]),
            pct(&p["bytes_at_risk"]),
            pct(&p["keys_quorum_lost"]),
            pct(&p["bytes_quorum_lost"]),
            put
        );
        if let Some(pair) = p["worst_pair"].as_array() {
            let names: Vec<&str> = pair.iter().filter_map(Value::as_str).collect();
            let _ = writeln!(s, "{:<16} worst pair: {}", "", names.join(" + "));
        }
    }
    let r = &out["recommendation"];
    if !r.is_null() {
        if r["met"] == true {
            let _ = writeln!(
                s,
                "recommended for {} keys at risk: fan-out threshold {} ({} keys at risk, {} of the keys salted)",
                pct(&r["target"]),
                size_or(&r["fanout_threshold"], "never (unsalted)"),
                pct(&r["keys_at_risk"]),
                pct(&r["salted_keys"])
            );
        } else {
            let _ = writeln!(
                s,
                "no fan-out threshold meets {}: {} ({} keys at risk unsalted)",
                pct(&r["target"]),
                r["why"].as_str().unwrap_or(""),
                pct(&r["keys_at_risk"])
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_on_top_of_the_stores_and_bad_ones_name_the_field() {
        let base = cluster_policy(LayoutPolicy::default());
        assert_eq!(base.large_chunk_size, Some(1 << 20));
        let (name, p) = compared_policy("name=wide,fanout=1MiB,max_salt=16", &base).unwrap();
        assert_eq!(
            (name.as_str(), p.fanout_threshold, p.max_salt, p.chunk_size),
            ("wide", 1 << 20, 16, 64 << 10)
        );
        for (spec, says) in [
            ("fanout", "NAME=VALUE"),
            ("colour=red", "unknown field"),
            ("max_salt=0", "max salt"),
            ("chunk_size=16MiB", "chunk size"),
            ("large_chunk_size=16MiB", "against the cql backend's limits"),
            ("fanout=lots", "fanout"),
        ] {
            let e = compared_policy(spec, &base).unwrap_err();
            assert!(
                e.message.contains(says) && e.message.contains("--policy"),
                "{spec}: {}",
                e.message
            );
        }
    }

    #[test]
    fn percents_and_placements_parse() {
        assert_eq!(parse_percent("2%"), Ok(0.02));
        assert_eq!(parse_percent("0.5"), Ok(0.005));
        assert!(parse_percent("120%").is_err());
        assert_eq!(parse_placement("spread"), Ok(Placement::Spread));
        assert!(parse_placement("random").is_err());
    }

    #[test]
    fn the_partition_bound_salts_blobs_past_it() {
        // A cluster's policy lays out a 500 MiB blob below a raised fan-out threshold in 4 partitions of at most
        // 128 MiB, not one: what the planner counts is what a put would store.
        let policy = cluster_policy(LayoutPolicy::default().with_fanout_threshold(1 << 30));
        match policy.layout_for(500 << 20) {
            saltblob::Layout::Chunked(l) => {
                assert_eq!(l.salt_count, 4, "{l:?}");
                assert!(l.max_partition_bytes() <= 128 << 20, "{l:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_recommendation_is_the_lowest_threshold_under_the_target() {
        let mut census = Census::default();
        let mut add = |size: u64, n: u64| {
            for _ in 0..n {
                census.sizes[saltblob::LayoutClass::SinglePartition as usize].add(size);
                census.partitions.entry(2).or_default().count += 1;
            }
        };
        add(100 << 10, 980);
        add(20 << 20, 15);
        add(500 << 20, 5);
        // The cluster's chunk size without its partition bound, so that an unsalted 500 MiB blob stays in one
        // partition (with the bound it has 4: `the_partition_bound_salts_blobs_past_it`).
        let info = CqlStore::backend_info();
        let policy = LayoutPolicy::default().resolve_for(info.large_chunk_size, None);
        let model = Exposure::of_shape(&Shape::new(3, 5, 3).unwrap(), Placement::Hashed).unwrap();
        let evaluate = |b: &[(u64, Tally)]| model.over(b);
        // Unsalted: 2 partitions each (manifest + chunks), 12.96% at risk at 5 nodes per rack.
        let low = recommend(&census, &policy, 0.02, &evaluate);
        assert_eq!(low["met"], false, "{low}");
        assert!(
            (low["keys_at_risk"].as_f64().unwrap() - 0.1296).abs() < 1e-9,
            "{low}"
        );
        // 14% admits salting the 0.5% largest (each then at risk: 13.4%) but not the 2% largest (14.7%).
        let high = recommend(&census, &policy, 0.14, &evaluate);
        assert_eq!(high["met"], true, "{high}");
        let threshold = high["fanout_threshold"].as_u64().unwrap();
        assert!((20 << 20..500 << 20).contains(&threshold), "{threshold}");
        assert!(high["keys_at_risk"].as_f64().unwrap() <= 0.14);
        // A target everything meets salts everything above the inline limit.
        let all = recommend(&census, &policy, 1.0, &evaluate);
        assert!(
            all["fanout_threshold"].as_u64().unwrap() < 100 << 10,
            "{all}"
        );
    }
}
