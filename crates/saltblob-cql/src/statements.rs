//! The prepared statements of a store (one set per connection, prepared once at connect with the configured
//! consistencies and idempotence) and the values they bind.

use bytes::Bytes;
use saltblob_core::Result;
use saltblob_core::backend::Namespace;
use scylla::client::session::Session;
use scylla::frame::response::result::ColumnType;
use scylla::serialize::SerializationError;
use scylla::serialize::value::SerializeValue;
use scylla::serialize::writers::{CellWriter, WrittenCellProof};
use scylla::statement::prepared::PreparedStatement;

use crate::config::CqlConfig;
use crate::error;
use crate::schema::{CHUNKS, MANIFESTS, RECORDS};

/// Rows per page of the manifest scan.
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
    pub(crate) scan_manifest_keys: PreparedStatement,
    /// Scans of `records` by lower (>=) and upper (<) bound: [none/none, lower, upper, both].
    pub(crate) scan_records: [PreparedStatement; 4],
    pub(crate) put_chunk: PreparedStatement,
    /// Chunks of one partition by a list of indexes (`idx IN ?`).
    pub(crate) get_chunks: PreparedStatement,
    /// Chunks of one partition by an inclusive index range: one slice, cheaper than a list on the server.
    pub(crate) get_chunk_range: PreparedStatement,
    pub(crate) delete_chunks: PreparedStatement,
    /// Every chunk's address (the primary key alone: no chunk data is read).
    pub(crate) scan_chunks: PreparedStatement,
}

/// A bound value: the few CQL types saltblob uses, without copying blobs.
#[derive(Clone, Debug)]
pub(crate) enum V {
    Blob(Bytes),
    Tiny(i8),
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
            V::Tiny(n) => n.serialize(typ, writer),
            V::Big(n) => n.serialize(typ, writer),
        }
    }
}

/// The primary key values of a record.
pub(crate) fn key_values(ns: Namespace, key: &[u8]) -> Vec<V> {
    let key = V::Blob(Bytes::copy_from_slice(key));
    match ns {
        Namespace::Manifest => vec![key],
        _ => vec![V::Tiny(i8::from_le_bytes([ns.tag()])), key],
    }
}

/// Prepares `cql`, marked idempotent (so that it is retried) or not.
async fn prepare(session: &Session, cql: String, idempotent: bool) -> Result<PreparedStatement> {
    let mut st = session
        .prepare(cql.as_str())
        .await
        .map_err(|e| error::prepare(&cql, e))?;
    st.set_is_idempotent(idempotent);
    Ok(st)
}

impl RecordStatements {
    /// Prepares the statements of record table `table`, whose primary key columns are `key_cols`.
    async fn prepare(
        session: &Session,
        config: &CqlConfig,
        table: &str,
        key_cols: &[&str],
    ) -> Result<Self> {
        let ks = &config.keyspace;
        let cols = key_cols.join(", ");
        let marks = vec!["?"; key_cols.len()].join(", ");
        let cond = key_cols
            .iter()
            .map(|c| format!("{c} = ?"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let t = format!("{ks}.{table}");
        let (read, write, serial) = (
            config.read_consistency,
            config.write_consistency,
            config.serial_consistency,
        );
        let mut get = prepare(session, format!("SELECT value FROM {t} WHERE {cond}"), true).await?;
        let mut get_with_writetime = prepare(
            session,
            format!("SELECT value, WRITETIME(value) FROM {t} WHERE {cond}"),
            true,
        )
        .await?;
        let mut put = prepare(
            session,
            format!("INSERT INTO {t} ({cols}, value) VALUES ({marks}, ?) USING TIMESTAMP ?"),
            true,
        )
        .await?;
        let mut put_if_absent = prepare(
            session,
            format!("INSERT INTO {t} ({cols}, value) VALUES ({marks}, ?) IF NOT EXISTS"),
            false,
        )
        .await?;
        let mut put_if_equal = prepare(
            session,
            format!("UPDATE {t} SET value = ? WHERE {cond} IF value = ?"),
            false,
        )
        .await?;
        let mut delete = prepare(
            session,
            format!("DELETE FROM {t} USING TIMESTAMP ? WHERE {cond}"),
            true,
        )
        .await?;
        let mut delete_if_equal = prepare(
            session,
            format!("DELETE FROM {t} WHERE {cond} IF value = ?"),
            false,
        )
        .await?;
        for st in [&mut get, &mut get_with_writetime] {
            st.set_consistency(read);
        }
        for st in [&mut put, &mut delete] {
            st.set_consistency(write);
        }
        for st in [&mut put_if_absent, &mut put_if_equal, &mut delete_if_equal] {
            st.set_consistency(write);
            st.set_serial_consistency(Some(serial));
        }
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
    pub(crate) async fn prepare(session: &Session, config: &CqlConfig) -> Result<Self> {
        let ks = &config.keyspace;
        let (read, write) = (config.read_consistency, config.write_consistency);
        let manifests = RecordStatements::prepare(session, config, MANIFESTS, &["key"]).await?;
        let records = RecordStatements::prepare(session, config, RECORDS, &["ns", "key"]).await?;
        let mut scan_manifest_keys =
            prepare(session, format!("SELECT key FROM {ks}.{MANIFESTS}"), true).await?;
        scan_manifest_keys.set_consistency(read);
        scan_manifest_keys.set_page_size(SCAN_PAGE);
        let base = format!("SELECT key, value FROM {ks}.{RECORDS} WHERE ns = ?");
        let mut scan_records = [
            prepare(session, format!("{base} LIMIT ?"), true).await?,
            prepare(session, format!("{base} AND key >= ? LIMIT ?"), true).await?,
            prepare(session, format!("{base} AND key < ? LIMIT ?"), true).await?,
            prepare(
                session,
                format!("{base} AND key >= ? AND key < ? LIMIT ?"),
                true,
            )
            .await?,
        ];
        for st in &mut scan_records {
            st.set_consistency(read);
        }
        let mut put_chunk = prepare(
            session,
            format!("INSERT INTO {ks}.{CHUNKS} (key, version, salt, idx, data) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"),
            true,
        )
        .await?;
        put_chunk.set_consistency(write);
        let mut get_chunks = prepare(
            session,
            format!("SELECT idx, data FROM {ks}.{CHUNKS} WHERE key = ? AND version = ? AND salt = ? AND idx IN ?"),
            true,
        )
        .await?;
        get_chunks.set_consistency(read);
        let mut get_chunk_range = prepare(
            session,
            format!("SELECT idx, data FROM {ks}.{CHUNKS} WHERE key = ? AND version = ? AND salt = ? AND idx >= ? AND idx <= ?"),
            true,
        )
        .await?;
        get_chunk_range.set_consistency(read);
        let mut delete_chunks = prepare(
            session,
            format!("DELETE FROM {ks}.{CHUNKS} USING TIMESTAMP ? WHERE key = ? AND version = ? AND salt = ?"),
            true,
        )
        .await?;
        delete_chunks.set_consistency(write);
        let mut scan_chunks = prepare(
            session,
            format!("SELECT key, version, salt, idx FROM {ks}.{CHUNKS}"),
            true,
        )
        .await?;
        scan_chunks.set_consistency(read);
        scan_chunks.set_page_size(SCAN_PAGE);
        Ok(Self {
            manifests,
            records,
            scan_manifest_keys,
            scan_records,
            put_chunk,
            get_chunks,
            get_chunk_range,
            delete_chunks,
            scan_chunks,
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
        match ns {
            Namespace::Manifest => &self.manifests,
            _ => &self.records,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
