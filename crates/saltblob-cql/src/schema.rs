//! The keyspace and tables saltblob keeps in a cluster (documented in `docs/format.md`, "Cluster backend"),
//! and their creation (`ensure`, at connect). The format marker is checked once the statements are
//! prepared, by the session's bootstrap.

use std::collections::HashMap;

use saltblob_core::{Error, Result};
use scylla::client::session::Session;
use scylla::errors::ExecutionError;

use crate::config::{CqlConfig, DEFAULT_RF};
use crate::error;

/// Table of manifests: blob key → encoded manifest of its current version.
pub const MANIFESTS: &str = "manifests";
/// Table of chunks: one partition per (key, version, salt), one row per chunk.
pub const CHUNKS: &str = "chunks";
/// Table of internal records of the other namespaces kept in one partition each (and the format marker).
pub const RECORDS: &str = "records";
/// Table of internal records of the namespaces kept in partitions ([`Namespace::partition_len`]: the intents,
/// the reclaim queue): one partition per namespace and partition, so that no one partition takes every write.
///
/// [`Namespace::partition_len`]: saltblob_core::backend::Namespace::partition_len
pub const PARTITIONED: &str = "partitioned_records";
/// The listing index: one partition per key range, its keys in order ([`crate::listing`]).
pub const LISTING: &str = "listing";
/// The listing index's directory: one partition, a row per range.
pub const LISTING_RANGES: &str = "listing_ranges";
/// The listing index's range counters (hints of each range's rows).
pub const LISTING_COUNTS: &str = "listing_counts";

/// Format of the schema; stored in `records` under [`MARKER_NS`] / [`MARKER_KEY`] and checked at connect. Format 2
/// added the listing index ([`LISTING`], [`LISTING_RANGES`]); format 3 the sharded intents and the bucketed
/// reclaim queue ([`PARTITIONED`]). A keyspace of an earlier format is upgraded by `saltblob upgrade`
/// ([`crate::CqlStore::upgrade`]), and a build of an earlier format refuses one of a later one.
pub const SCHEMA_FORMAT: u8 = 3;
/// The format before the listing index.
pub const SCHEMA_FORMAT_1: u8 = 1;
/// The format before the partitioned records: intents and the reclaim queue one partition each.
pub const SCHEMA_FORMAT_2: u8 = 2;
/// Namespace of the format marker (tag 0xff, never a real namespace).
pub const MARKER_NS: i8 = -1;
/// Key of the format marker.
pub const MARKER_KEY: &[u8] = b"saltblob-format";

/// `gc_grace_seconds` of the chunk and record tables: 3 hours (Cassandra's default hint window) instead of 10
/// days, so that the space of reclaimed chunks and the tombstones of the reclaim queue go sooner. A deletion
/// that a node misses for longer can only resurrect an orphan chunk or a queue entry, both harmless (the
/// reclaimer re-checks every entry against the current manifest). Manifests keep Cassandra's default.
pub const GC_GRACE_SECONDS: u32 = 3 * 3600;

/// The `CREATE TABLE` statements, in creation order.
pub fn table_ddl(ks: &str) -> [(&'static str, String); 7] {
    [
        (
            MANIFESTS,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{MANIFESTS} (key blob PRIMARY KEY, value blob) \
                 WITH compression = {{'class': 'LZ4Compressor', 'chunk_length_in_kb': 4}} \
                 AND comment = 'saltblob manifests, schema format {SCHEMA_FORMAT}'"
            ),
        ),
        (
            CHUNKS,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{CHUNKS} (key blob, version blob, salt int, idx bigint, data blob, \
                 PRIMARY KEY ((key, version, salt), idx)) \
                 WITH compression = {{'enabled': 'false'}} AND gc_grace_seconds = {GC_GRACE_SECONDS} \
                 AND comment = 'saltblob chunks, schema format {SCHEMA_FORMAT}'"
            ),
        ),
        (
            RECORDS,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{RECORDS} (ns tinyint, key blob, value blob, PRIMARY KEY ((ns), key)) \
                 WITH CLUSTERING ORDER BY (key ASC) \
                 AND compression = {{'class': 'LZ4Compressor', 'chunk_length_in_kb': 4}} \
                 AND gc_grace_seconds = {GC_GRACE_SECONDS} \
                 AND comment = 'saltblob internal records, schema format {SCHEMA_FORMAT}'"
            ),
        ),
        (
            PARTITIONED,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{PARTITIONED} (ns tinyint, part blob, key blob, value blob, \
                 PRIMARY KEY ((ns, part), key)) WITH CLUSTERING ORDER BY (key ASC) \
                 AND compression = {{'class': 'LZ4Compressor', 'chunk_length_in_kb': 4}} \
                 AND gc_grace_seconds = {GC_GRACE_SECONDS} \
                 AND comment = 'saltblob partitioned internal records, schema format {SCHEMA_FORMAT}'"
            ),
        ),
        (
            LISTING,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{LISTING} (range blob, key blob, present boolean, \
                 PRIMARY KEY ((range), key)) WITH CLUSTERING ORDER BY (key ASC) \
                 AND compression = {{'class': 'LZ4Compressor', 'chunk_length_in_kb': 4}} \
                 AND gc_grace_seconds = {GC_GRACE_SECONDS} \
                 AND comment = 'saltblob listing index, schema format {SCHEMA_FORMAT}'"
            ),
        ),
        (
            LISTING_RANGES,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{LISTING_RANGES} (scope tinyint, start blob, range blob, \
                 state tinyint, source blob, PRIMARY KEY ((scope), start)) WITH CLUSTERING ORDER BY (start ASC) \
                 AND comment = 'saltblob listing directory, schema format {SCHEMA_FORMAT}'"
            ),
        ),
        (
            LISTING_COUNTS,
            format!(
                "CREATE TABLE IF NOT EXISTS {ks}.{LISTING_COUNTS} (range blob PRIMARY KEY, rows counter) \
                 WITH comment = 'saltblob listing range counters, schema format {SCHEMA_FORMAT}'"
            ),
        ),
    ]
}

/// The `CREATE KEYSPACE` statement.
pub fn keyspace_ddl(ks: &str, dc: &str, rf: usize) -> String {
    format!(
        "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': 'NetworkTopologyStrategy', '{}': {rf}}}",
        dc.replace('\'', "''")
    )
}

/// Creates keyspace `config.keyspace` in data center `dc` (which has `nodes` nodes) and its tables, each if
/// missing, and waits for schema agreement. An explicit replication factor over `nodes` is refused before
/// anything is created; without one the keyspace gets [`DEFAULT_RF`], at most `nodes`.
pub(crate) async fn ensure(
    session: &Session,
    config: &CqlConfig,
    dc: &str,
    nodes: usize,
) -> Result<()> {
    let ks = &config.keyspace;
    if keyspace_replication(session, ks).await?.is_none() {
        let rf = match config.replication_factor {
            Some(rf) => {
                let rf = usize::try_from(rf).unwrap_or(usize::MAX);
                if rf > nodes {
                    return Err(Error::invalid(
                        "replication factor",
                        format!(
                            "rf={rf}, but data center \"{dc}\" has {nodes} node(s); keyspace {ks} was not created. \
                             Use rf={nodes} or less, or add nodes"
                        ),
                    ));
                }
                rf
            }
            None => (DEFAULT_RF as usize).min(nodes).max(1),
        };
        tracing::info!("creating keyspace {ks} with replication factor {rf} in data center {dc}");
        ddl(session, &keyspace_ddl(ks, dc, rf)).await?;
    }
    let existing = tables(session, ks).await?;
    for (table, statement) in table_ddl(ks) {
        if !existing.iter().any(|t| t == table) {
            tracing::info!("creating table {ks}.{table}");
            ddl(session, &statement).await?;
        }
    }
    session
        .await_schema_agreement()
        .await
        .map_err(error::schema)?;
    session.refresh_metadata().await.map_err(|e| {
        error::driver(
            format!("cannot read the cluster's metadata after creating the schema: {e}"),
            true,
            e,
        )
    })?;
    Ok(())
}

/// The replication options of keyspace `ks`, or `None` if it does not exist.
pub async fn keyspace_replication(
    session: &Session,
    ks: &str,
) -> Result<Option<HashMap<String, String>>> {
    let what = format!("reading the definition of keyspace {ks}");
    let rows = session
        .query_unpaged(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
            (ks,),
        )
        .await
        .map_err(|e| error::execution(&what, e, &error::Context::default()))?
        .into_rows_result()
        .map_err(|e| error::shape(&what, e))?;
    rows.maybe_first_row::<(HashMap<String, String>,)>()
        .map(|r| r.map(|(m,)| m))
        .map_err(|e| error::shape(&what, e))
}

/// Names of the tables of keyspace `ks`.
pub async fn tables(session: &Session, ks: &str) -> Result<Vec<String>> {
    let what = format!("listing the tables of keyspace {ks}");
    let rows = session
        .query_unpaged(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
            (ks,),
        )
        .await
        .map_err(|e| error::execution(&what, e, &error::Context::default()))?
        .into_rows_result()
        .map_err(|e| error::shape(&what, e))?;
    rows.rows::<(String,)>()
        .map_err(|e| error::shape(&what, e))?
        .map(|r| r.map(|(t,)| t).map_err(|e| error::shape(&what, e)))
        .collect()
}

/// Runs one DDL statement (the driver then waits for schema agreement).
pub async fn ddl(session: &Session, statement: &str) -> Result<()> {
    session.query_unpaged(statement, ()).await.map_err(|e| {
        let retryable = matches!(e, ExecutionError::RequestTimeout(_));
        error::driver(
            format!("schema change \"{statement}\" failed: {e}"),
            retryable,
            e,
        )
    })?;
    Ok(())
}

/// The replication factor of `replication` in data center `dc`.
pub fn rf_in(replication: &HashMap<String, String>, dc: &str) -> Option<usize> {
    let class = replication
        .get("class")
        .map(String::as_str)
        .unwrap_or_default();
    if class.ends_with("SimpleStrategy") {
        return replication
            .get("replication_factor")
            .and_then(|v| v.parse().ok());
    }
    replication
        .get(dc)
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_names_keyspace_and_options() {
        let [m, c, r, p, l, d, n] = table_ddl("ks");
        assert!(
            p.1.contains("ks.partitioned_records") && p.1.contains("PRIMARY KEY ((ns, part), key)")
        );
        assert!(n.1.contains("rows counter"));
        assert!(l.1.contains("PRIMARY KEY ((range), key)") && l.1.contains("present boolean"));
        assert!(d.1.contains("PRIMARY KEY ((scope), start)") && d.1.contains("source blob"));
        assert!(m.1.contains("ks.manifests (key blob PRIMARY KEY"));
        assert!(
            c.1.contains("PRIMARY KEY ((key, version, salt), idx)")
                && c.1.contains("'enabled': 'false'")
        );
        assert!(
            r.1.contains("PRIMARY KEY ((ns), key)")
                && r.1.contains("CLUSTERING ORDER BY (key ASC)")
        );
        assert_eq!(
            keyspace_ddl("ks", "dc'1", 3),
            "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'NetworkTopologyStrategy', 'dc''1': 3}"
        );
    }

    #[test]
    fn replication_factor_of_a_data_center() {
        let nts: HashMap<String, String> = [
            (
                "class",
                "org.apache.cassandra.locator.NetworkTopologyStrategy",
            ),
            ("dc1", "3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(rf_in(&nts, "dc1"), Some(3));
        assert_eq!(rf_in(&nts, "dc2"), None);
        let simple: HashMap<String, String> = [
            ("class", "org.apache.cassandra.locator.SimpleStrategy"),
            ("replication_factor", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(rf_in(&simple, "any"), Some(2));
    }
}
