//! The prepared statements of a store (one set per connection, prepared once at connect from one table of
//! statements and what each does, which sets its consistency and idempotence), the one preparing function of
//! the crate ([`prepare`]) and the values statements bind.

use bytes::Bytes;
use saltblob_core::backend::Namespace;
use saltblob_core::{Error, Result};
use scylla::client::session::Session;
use scylla::frame::response::result::ColumnType;
use scylla::serialize::SerializationError;
use scylla::serialize::value::SerializeValue;
use scylla::serialize::writers::{CellWriter, WrittenCellProof};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use crate::config::CqlConfig;
use crate::error;
use crate::schema::{
    CHUNKS, LISTING, LISTING_COUNTS, LISTING_RANGES, MANIFESTS, PARTITIONED, RECORDS,
};

/// Rows per page of a scan (of the whole manifest table, of a token range of it, of the chunk table).
const SCAN_PAGE: i32 = 1000;

/// Prepared statements of one record table.
pub(crate) struct RecordStatements {
    pub(crate) get: PreparedStatement,
    pub(crate) get_with_writetime: PreparedStatement,
    pub(crate) put: PreparedStatement,
    pub(crate) put_if_absent: PreparedStatement,
    pub(crate) put_if_equal: PreparedStatement,
    pub(crate) delete: PreparedStatement,
    pub(crate) delete_if_equal: PreparedStatement,
}

/// Every statement a store runs.
pub(crate) struct Statements {
    pub(crate) manifests: RecordStatements,
    pub(crate) records: RecordStatements,
    /// Those of the partitioned namespaces' table.
    pub(crate) partitioned: RecordStatements,
    pub(crate) scan_manifest_keys: PreparedStatement,
    /// Scans of `records` by lower (>=) and upper (<) bound: [none/none, lower, upper, both].
    pub(crate) scan_records: [PreparedStatement; 4],
    /// Scans of one partition of the partitioned table, by bound as `scan_records`.
    pub(crate) scan_partition: [PreparedStatement; 4],
    /// Deletes one partition of the partitioned table (a partition tombstone).
    pub(crate) drop_partition: PreparedStatement,
    pub(crate) put_chunk: PreparedStatement,
    /// Chunks of one partition by a list of indexes (`idx IN ?`).
    pub(crate) get_chunks: PreparedStatement,
    /// Chunks of one partition by an inclusive index range: one slice, cheaper than a list on the server.
    pub(crate) get_chunk_range: PreparedStatement,
    pub(crate) delete_chunks: PreparedStatement,
    /// Every chunk's address (the primary key alone: no chunk data is read).
    pub(crate) scan_chunks: PreparedStatement,
    /// The manifests of one token range, `(lower, upper]`, with their values ([`crate::ranges`]).
    pub(crate) scan_manifest_range: PreparedStatement,
    /// The listing index's ([`crate::listing`]).
    pub(crate) listing: ListingStatements,
}

/// Prepared statements of the listing index and its directory ([`LISTING_TABLE`], in its order).
pub(crate) struct ListingStatements {
    pub(crate) directory: PreparedStatement,
    pub(crate) add_range: PreparedStatement,
    pub(crate) finish_range: PreparedStatement,
    pub(crate) insert: PreparedStatement,
    pub(crate) delete: PreparedStatement,
    /// Rows of a range from a key (inclusive), with their write times.
    pub(crate) read_from: PreparedStatement,
    /// Rows of a range from a key (inclusive) below another, with their write times.
    pub(crate) read_below: PreparedStatement,
    /// Deletes the rows of a range from a key (a range tombstone).
    pub(crate) clear_from: PreparedStatement,
    /// Deletes the rows of a range from a key below another.
    pub(crate) clear_below: PreparedStatement,
    /// Every manifest's key and write time.
    pub(crate) manifest_times: PreparedStatement,
    /// Takes a lease row of the meta namespace, with a TTL.
    pub(crate) take_lease: PreparedStatement,
    /// Adds to a range's counter.
    pub(crate) add_count: PreparedStatement,
    /// Every range's counter.
    pub(crate) counts: PreparedStatement,
    /// Which of a list of keys a range holds.
    pub(crate) has_keys: PreparedStatement,
}

/// A bound value: the few CQL types saltblob uses, without copying blobs.
#[derive(Clone, Debug)]
pub(crate) enum V {
    Blob(Bytes),
    /// A blob or null.
    OptBlob(Option<Bytes>),
    Tiny(i8),
    Int(i32),
    Big(i64),
}
impl SerializeValue for V {
    fn serialize<'b>(
        &self,
        typ: &ColumnType,
        writer: CellWriter<'b>,
    ) -> std::result::Result<WrittenCellProof<'b>, SerializationError> {
        match self {
            V::Blob(b) => b.serialize(typ, writer),
            V::OptBlob(b) => b.serialize(typ, writer),
            V::Tiny(n) => n.serialize(typ, writer),
            V::Int(n) => n.serialize(typ, writer),
            V::Big(n) => n.serialize(typ, writer),
        }
    }
}

/// The primary key values of a record: the key; or the namespace's tag and the key; or, in a partitioned
/// namespace, the tag, the partition (the key's first [`Namespace::partition_len`] bytes) and the rest of the key.
pub(crate) fn key_values(ns: Namespace, key: &[u8]) -> Vec<V> {
    let tag = V::Tiny(i8::from_le_bytes([ns.tag()]));
    match (ns, ns.partition_len()) {
        (Namespace::Manifest, _) => vec![V::Blob(Bytes::copy_from_slice(key))],
        (_, 0) => vec![tag, V::Blob(Bytes::copy_from_slice(key))],
        (_, n) => {
            let (part, rest) = key.split_at(n.min(key.len()));
            vec![
                tag,
                V::Blob(Bytes::copy_from_slice(part)),
                V::Blob(Bytes::copy_from_slice(rest)),
            ]
        }
    }
}

/// What a statement does, which sets how it is prepared ([`Access::how`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// A read, at the read consistency.
    Read,
    /// A read of a whole table or of a token range of it, at the read consistency, [`SCAN_PAGE`] rows a page.
    Scan,
    /// A plain write, at the write consistency.
    Write,
    /// A conditional write (a lightweight transaction), at the write and the serial consistency.
    Conditional,
}

impl Access {
    /// How a statement of this kind is prepared under `config`.
    fn how(self, config: &CqlConfig) -> Prepare {
        let (read, write) = (config.read_consistency, config.write_consistency);
        let (consistency, serial, page_size) = match self {
            Access::Read => (read, None, None),
            Access::Scan => (read, None, Some(SCAN_PAGE)),
            Access::Write => (write, None, None),
            Access::Conditional => (write, Some(config.serial_consistency), None),
        };
        Prepare {
            consistency,
            serial,
            page_size,
        }
    }
}

/// Every statement of a store, with what it does. The first [`RECORD_STATEMENTS`] are prepared for each record
/// table, one per field of [`RecordStatements`] in its order: `{t}` is the table, `{cols}` its key columns,
/// `{marks}` their bind markers and `{cond}` the condition `column = ?` on each. The others are prepared once,
/// one per field of [`Statements`] in its order (the four scans of records and of a partition apart):
/// `{manifests}`, `{records}`, `{partitioned}` and `{chunks}` are the tables.
#[rustfmt::skip]
const TABLE: [(&str, Access); 23] = [
    // For each record table.
    ("SELECT value FROM {t} WHERE {cond}", Access::Read),
    ("SELECT value, WRITETIME(value) FROM {t} WHERE {cond}", Access::Read),
    ("INSERT INTO {t} ({cols}, value) VALUES ({marks}, ?) USING TIMESTAMP ?", Access::Write),
    ("INSERT INTO {t} ({cols}, value) VALUES ({marks}, ?) IF NOT EXISTS", Access::Conditional),
    ("UPDATE {t} SET value = ? WHERE {cond} IF value = ?", Access::Conditional),
    ("DELETE FROM {t} USING TIMESTAMP ? WHERE {cond}", Access::Write),
    ("DELETE FROM {t} WHERE {cond} IF value = ?", Access::Conditional),
    // Once.
    ("SELECT key FROM {manifests}", Access::Scan),
    ("SELECT key, value FROM {records} WHERE ns = ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {records} WHERE ns = ? AND key >= ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {records} WHERE ns = ? AND key < ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {records} WHERE ns = ? AND key >= ? AND key < ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {partitioned} WHERE ns = ? AND part = ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {partitioned} WHERE ns = ? AND part = ? AND key >= ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {partitioned} WHERE ns = ? AND part = ? AND key < ? LIMIT ?", Access::Read),
    ("SELECT key, value FROM {partitioned} WHERE ns = ? AND part = ? AND key >= ? AND key < ? LIMIT ?", Access::Read),
    ("DELETE FROM {partitioned} USING TIMESTAMP ? WHERE ns = ? AND part = ?", Access::Write),
    ("INSERT INTO {chunks} (key, version, salt, idx, data) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?", Access::Write),
    ("SELECT idx, data FROM {chunks} WHERE key = ? AND version = ? AND salt = ? AND idx IN ?", Access::Read),
    ("SELECT idx, data FROM {chunks} WHERE key = ? AND version = ? AND salt = ? AND idx >= ? AND idx <= ?", Access::Read),
    ("DELETE FROM {chunks} USING TIMESTAMP ? WHERE key = ? AND version = ? AND salt = ?", Access::Write),
    ("SELECT key, version, salt, idx FROM {chunks}", Access::Scan),
    ("SELECT key, value FROM {manifests} WHERE token(key) > ? AND token(key) <= ?", Access::Scan),
];

/// The statements of the listing index ([`crate::listing`]), one per field of [`ListingStatements`] in its order:
/// `{listing}`, `{ranges}` (its directory), `{counts}` (its counters), `{manifests}` and `{records}` are the
/// tables. A counter update is not idempotent: it is retried all the same (a counter is a hint).
#[rustfmt::skip]
const LISTING_TABLE: [(&str, Access); 14] = [
    ("SELECT start, range, state, source, WRITETIME(state) FROM {ranges} WHERE scope = ?", Access::Scan),
    ("INSERT INTO {ranges} (scope, start, range, state, source) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS", Access::Conditional),
    ("UPDATE {ranges} SET state = 0, source = null WHERE scope = ? AND start = ? IF range = ?", Access::Conditional),
    ("INSERT INTO {listing} (range, key, present) VALUES (?, ?, true) USING TIMESTAMP ?", Access::Write),
    ("DELETE FROM {listing} USING TIMESTAMP ? WHERE range = ? AND key = ?", Access::Write),
    ("SELECT key, WRITETIME(present) FROM {listing} WHERE range = ? AND key >= ? LIMIT ?", Access::Read),
    ("SELECT key, WRITETIME(present) FROM {listing} WHERE range = ? AND key >= ? AND key < ? LIMIT ?", Access::Read),
    ("DELETE FROM {listing} USING TIMESTAMP ? WHERE range = ? AND key >= ?", Access::Write),
    ("DELETE FROM {listing} USING TIMESTAMP ? WHERE range = ? AND key >= ? AND key < ?", Access::Write),
    ("SELECT key, WRITETIME(value) FROM {manifests}", Access::Scan),
    ("INSERT INTO {records} (ns, key, value) VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?", Access::Conditional),
    ("UPDATE {counts} SET rows = rows + ? WHERE range = ?", Access::Write),
    ("SELECT range, rows FROM {counts}", Access::Scan),
    ("SELECT key FROM {listing} WHERE range = ? AND key IN ?", Access::Read),
];

/// How many statements of [`TABLE`], from its first, are prepared for each record table.
const RECORD_STATEMENTS: usize = 7;

/// How a statement is prepared.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prepare {
    /// The consistency it runs at.
    pub(crate) consistency: Consistency,
    /// The serial consistency of a conditional write. A statement with one is not idempotent (run twice, it
    /// may apply twice); every other is, so that the driver and [`crate::session::Cluster::run`] retry it.
    pub(crate) serial: Option<SerialConsistency>,
    /// Rows per page, for a statement read a page at a time.
    pub(crate) page_size: Option<i32>,
}

/// Prepares `cql` as `how` says: the one place a statement of this crate is prepared.
pub(crate) async fn prepare(
    session: &Session,
    cql: &str,
    how: Prepare,
) -> Result<PreparedStatement> {
    let mut st = session
        .prepare(cql)
        .await
        .map_err(|e| error::prepare(cql, e))?;
    st.set_consistency(how.consistency);
    if let Some(serial) = how.serial {
        st.set_serial_consistency(Some(serial));
    }
    st.set_is_idempotent(how.serial.is_none());
    if let Some(rows) = how.page_size {
        st.set_page_size(rows);
    }
    Ok(st)
}

/// `template` with each `{name}` replaced by its value in `names`.
fn fill(template: &str, names: &[(&str, &str)]) -> String {
    names
        .iter()
        .fold(template.to_owned(), |cql, (name, value)| {
            cql.replace(&format!("{{{name}}}"), value)
        })
}

/// Prepares the `N` statements of `table` in order, each with `{name}` replaced by its value in `names`.
async fn prepare_table<const N: usize>(
    session: &Session,
    config: &CqlConfig,
    table: &[(&str, Access)],
    names: &[(&str, &str)],
) -> Result<[PreparedStatement; N]> {
    let mut prepared = Vec::with_capacity(N);
    for (template, access) in table {
        let cql = fill(template, names);
        prepared.push(prepare(session, &cql, access.how(config)).await?);
    }
    <[PreparedStatement; N]>::try_from(prepared).map_err(|_| {
        Error::internal(
            "preparing statements",
            "a part of the table of another length",
        )
    })
}

impl RecordStatements {
    /// Prepares the statements of record table `table` (the first [`RECORD_STATEMENTS`] of [`TABLE`]), whose
    /// primary key columns are
    /// `key_cols`.
    async fn prepare(
        session: &Session,
        config: &CqlConfig,
        table: &str,
        key_cols: &[&str],
    ) -> Result<Self> {
        let cols = key_cols.join(", ");
        let marks = vec!["?"; key_cols.len()].join(", ");
        let cond = key_cols
            .iter()
            .map(|c| format!("{c} = ?"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let t = format!("{}.{table}", config.keyspace);
        let names = [
            ("t", t.as_str()),
            ("cols", &cols),
            ("marks", &marks),
            ("cond", &cond),
        ];
        let [
            get,
            get_with_writetime,
            put,
            put_if_absent,
            put_if_equal,
            delete,
            delete_if_equal,
        ] = prepare_table(session, config, &TABLE[..RECORD_STATEMENTS], &names).await?;
        Ok(Self {
            get,
            get_with_writetime,
            put,
            put_if_absent,
            put_if_equal,
            delete,
            delete_if_equal,
        })
    }
}

impl Statements {
    /// Prepares every statement of [`TABLE`].
    pub(crate) async fn prepare(session: &Session, config: &CqlConfig) -> Result<Self> {
        let ks = &config.keyspace;
        let manifests = RecordStatements::prepare(session, config, MANIFESTS, &["key"]).await?;
        let records = RecordStatements::prepare(session, config, RECORDS, &["ns", "key"]).await?;
        let partitioned =
            RecordStatements::prepare(session, config, PARTITIONED, &["ns", "part", "key"]).await?;
        let [manifest_table, record_table, partitioned_table, chunk_table] =
            [MANIFESTS, RECORDS, PARTITIONED, CHUNKS].map(|t| format!("{ks}.{t}"));
        let names = [
            ("manifests", manifest_table.as_str()),
            ("records", &record_table),
            ("partitioned", &partitioned_table),
            ("chunks", &chunk_table),
        ];
        // The four scans of `records`, then of a partition, by bound: none, lower, upper, both.
        let [
            scan_manifest_keys,
            r0,
            r1,
            r2,
            r3,
            p0,
            p1,
            p2,
            p3,
            drop_partition,
            put_chunk,
            get_chunks,
            get_chunk_range,
            delete_chunks,
            scan_chunks,
            scan_manifest_range,
        ] = prepare_table::<16>(session, config, &TABLE[RECORD_STATEMENTS..], &names).await?;
        let [listing_table, ranges_table, counts_table] =
            [LISTING, LISTING_RANGES, LISTING_COUNTS].map(|t| format!("{ks}.{t}"));
        let names = [
            ("listing", listing_table.as_str()),
            ("ranges", &ranges_table),
            ("counts", &counts_table),
            ("manifests", &manifest_table),
            ("records", &record_table),
        ];
        let [
            directory,
            add_range,
            finish_range,
            insert,
            delete,
            read_from,
            read_below,
            clear_from,
            clear_below,
            manifest_times,
            take_lease,
            add_count,
            counts,
            has_keys,
        ] = prepare_table(session, config, &LISTING_TABLE, &names).await?;
        Ok(Self {
            manifests,
            records,
            partitioned,
            scan_manifest_keys,
            scan_records: [r0, r1, r2, r3],
            scan_partition: [p0, p1, p2, p3],
            drop_partition,
            put_chunk,
            get_chunks,
            get_chunk_range,
            delete_chunks,
            scan_chunks,
            scan_manifest_range,
            listing: ListingStatements {
                directory,
                add_range,
                finish_range,
                insert,
                delete,
                read_from,
                read_below,
                clear_from,
                clear_below,
                manifest_times,
                take_lease,
                add_count,
                counts,
                has_keys,
            },
        })
    }
}

/// Bound values followed by a `LIMIT` (an int).
pub(crate) struct LimitRow(pub(crate) Vec<V>, pub(crate) i32);

impl scylla::serialize::row::SerializeRow for LimitRow {
    fn serialize(
        &self,
        ctx: &scylla::serialize::row::RowSerializationContext<'_>,
        writer: &mut scylla::serialize::writers::RowWriter,
    ) -> std::result::Result<(), SerializationError> {
        let mut all: Vec<LimitValue<'_>> = self.0.iter().map(LimitValue::V).collect();
        all.push(LimitValue::Int(self.1));
        scylla::serialize::row::SerializeRow::serialize(&all, ctx, writer)
    }

    fn is_empty(&self) -> bool {
        false
    }
}

enum LimitValue<'a> {
    V(&'a V),
    Int(i32),
}

impl SerializeValue for LimitValue<'_> {
    fn serialize<'b>(
        &self,
        typ: &ColumnType,
        writer: CellWriter<'b>,
    ) -> std::result::Result<WrittenCellProof<'b>, SerializationError> {
        match self {
            LimitValue::V(v) => v.serialize(typ, writer),
            LimitValue::Int(n) => n.serialize(typ, writer),
        }
    }
}

impl Statements {
    /// The statements of the table that holds namespace `ns`.
    pub(crate) fn records(&self, ns: Namespace) -> &RecordStatements {
        match (ns, ns.partition_len()) {
            (Namespace::Manifest, _) => &self.manifests,
            (_, 0) => &self.records,
            _ => &self.partitioned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables fill in to complete statements, and exactly the conditional ones are lightweight
    /// transactions (`IF`), which are prepared as not idempotent.
    #[test]
    fn the_tables_fill_in_to_the_statements() {
        let record = [
            ("t", "ks.records"),
            ("cols", "ns, key"),
            ("marks", "?, ?"),
            ("cond", "ns = ? AND key = ?"),
        ];
        let store = [
            ("manifests", "ks.manifests"),
            ("records", "ks.records"),
            ("partitioned", "ks.partitioned_records"),
            ("chunks", "ks.chunks"),
        ];
        let (per_record_table, per_store) = TABLE.split_at(RECORD_STATEMENTS);
        let filled: Vec<_> = (per_record_table.iter().map(|(t, a)| (fill(t, &record), *a)))
            .chain(per_store.iter().map(|(t, a)| (fill(t, &store), *a)))
            .collect();
        for (cql, access) in &filled {
            assert!(!cql.contains(['{', '}']), "{cql}");
            assert_eq!(
                *access == Access::Conditional,
                cql.contains(" IF "),
                "{cql}"
            );
        }
        assert_eq!(
            filled[0].0,
            "SELECT value FROM ks.records WHERE ns = ? AND key = ?"
        );
        assert_eq!(
            filled[3].0,
            "INSERT INTO ks.records (ns, key, value) VALUES (?, ?, ?) IF NOT EXISTS"
        );
        assert_eq!(filled[7].0, "SELECT key FROM ks.manifests");
        assert_eq!(
            filled[13].0,
            "SELECT key, value FROM ks.partitioned_records WHERE ns = ? AND part = ? AND key >= ? LIMIT ?"
        );
        assert_eq!(
            filled[22].0,
            "SELECT key, value FROM ks.manifests WHERE token(key) > ? AND token(key) <= ?"
        );
        let listing = [
            ("listing", "ks.listing"),
            ("ranges", "ks.listing_ranges"),
            ("counts", "ks.listing_counts"),
            ("manifests", "ks.manifests"),
            ("records", "ks.records"),
        ];
        for (template, access) in LISTING_TABLE {
            let cql = fill(template, &listing);
            assert!(!cql.contains(['{', '}']), "{cql}");
            assert_eq!(access == Access::Conditional, cql.contains(" IF "), "{cql}");
        }
        let config = CqlConfig::new(["h"], "ks");
        let how = Access::Conditional.how(&config);
        assert_eq!(
            (how.consistency, how.serial),
            (config.write_consistency, Some(config.serial_consistency))
        );
        assert_eq!(Access::Scan.how(&config).page_size, Some(SCAN_PAGE));
    }

    #[test]
    fn record_keys_bind_namespace_tags() {
        assert!(matches!(
            key_values(Namespace::Manifest, b"k").as_slice(),
            [V::Blob(_)]
        ));
        assert!(matches!(
            key_values(Namespace::Reclaim, b"k").as_slice(),
            [V::Tiny(1), V::Blob(_)]
        ));
        match key_values(Namespace::ShardedIntent, b"\x07rest").as_slice() {
            [V::Tiny(4), V::Blob(part), V::Blob(rest)] => {
                assert_eq!((&part[..], &rest[..]), (&b"\x07"[..], &b"rest"[..]));
            }
            other => panic!("{other:?}"),
        }
    }
}
