//! [`Source`]: the source table. Checks its schema, prepares its statements, lists its partitions, and for
//! one blob reads its layout, checks its chunk ids and copies its chunks into the store.

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use saltblob_core::store::StreamReader;
use saltblob_core::{BlobStore, Error, KeyDisplay, PutOptions, Result};
use scylla::client::session::Session;
use scylla::deserialize::row::DeserializeRow;
use scylla::serialize::row::SerializeRow;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use super::check::ChunkIdCheck;
use super::layout::ArticleLayout;
use super::report::Outcome;
use super::values::{as_i64, int_value};
use crate::config::validate_keyspace;
use crate::error;
use crate::statements::{self, Prepare};

/// Chunk reads in flight while importing one blob.
const FETCH_DEPTH: usize = 16;
/// Rows per page when reading the table's partitions and a partition's chunk ids.
const PAGE_ROWS: i32 = 1000;

/// The source table, its column types and prepared statements.
pub(super) struct Source<'a> {
    session: &'a Session,
    name: String,
    salt_type: String,
    chunk_id_type: String,
    consistency: Consistency,
    layout: PreparedStatement,
    chunk_ids: PreparedStatement,
    any_chunk: PreparedStatement,
    chunk: PreparedStatement,
}

impl<'a> Source<'a> {
    /// Opens table `table` (`KEYSPACE.TABLE`) through `session`: checks that it is in the article's schema, with
    /// integer salt and chunk id columns, and prepares its statements at `consistency`.
    pub(super) async fn open(
        session: &'a Session,
        table: &str,
        consistency: Consistency,
    ) -> Result<Self> {
        let bad = |reason: String| Error::invalid("table", reason);
        let (ks, tb) = table
            .split_once('.')
            .ok_or_else(|| bad(format!("\"{table}\" is not KEYSPACE.TABLE")))?;
        let ks = validate_keyspace(ks).map_err(bad)?;
        let tb = validate_keyspace(tb).map_err(|r| bad(r.replace("keyspace", "table")))?;
        let mut columns: std::collections::BTreeMap<String, String> = Default::default();
        let rows = session
            .query_unpaged(
                "SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
                (&ks, &tb),
            )
            .await
            .map_err(|e| error::execution("reading the source table's schema", e, &Default::default()))?
            .into_rows_result()
            .map_err(|e| error::shape("schema read", e))?;
        for row in rows
            .rows::<(String, String)>()
            .map_err(|e| error::shape("schema read", e))?
        {
            let (name, ty) = row.map_err(|e| error::shape("schema read", e))?;
            columns.insert(name, ty);
        }
        if columns.is_empty() {
            return Err(bad(format!("there is no table {ks}.{tb} on this cluster")));
        }
        let need = [
            "key",
            "salt",
            "chunk_id",
            "chunk",
            "total_chunks",
            "salt_cardinality",
        ];
        let missing: Vec<&str> = need
            .iter()
            .copied()
            .filter(|c| !columns.contains_key(*c))
            .collect();
        if !missing.is_empty() {
            return Err(bad(format!(
                "{ks}.{tb} is not in the salting article's schema: it lacks column(s) {}",
                missing.join(", ")
            )));
        }
        let salt_type = columns.get("salt").cloned().unwrap_or_default();
        let chunk_id_type = columns.get("chunk_id").cloned().unwrap_or_default();
        int_value(&salt_type, 0)?;
        int_value(&chunk_id_type, 0)?;
        let name = format!("{ks}.{tb}");
        let how = Prepare {
            consistency,
            serial: None,
            page_size: Some(PAGE_ROWS),
        };
        let prepare = |cql: String| async move { statements::prepare(session, &cql, how).await };
        Ok(Self {
            session,
            salt_type,
            chunk_id_type,
            consistency,
            layout: prepare(format!(
                "SELECT total_chunks, salt_cardinality FROM {name} WHERE key = ? AND salt = ? AND chunk_id = ?"
            ))
            .await?,
            chunk_ids: prepare(format!(
                "SELECT chunk_id FROM {name} WHERE key = ? AND salt = ? ORDER BY chunk_id ASC"
            ))
            .await?,
            any_chunk: prepare(format!(
                "SELECT chunk_id FROM {name} WHERE key = ? AND salt = ? LIMIT 1"
            ))
            .await?,
            chunk: prepare(format!("SELECT chunk FROM {name} WHERE key = ? AND salt = ? AND chunk_id = ?")).await?,
            name,
        })
    }

    /// Every partition of the table, `(key, salt)`, a page at a time, in the cluster's token order.
    pub(super) async fn partitions(&self) -> Result<BoxStream<'_, Result<(CqlValue, i64)>>> {
        let mut st = scylla::statement::Statement::new(format!(
            "SELECT DISTINCT key, salt FROM {}",
            self.name
        ));
        st.set_consistency(self.consistency);
        st.set_page_size(PAGE_ROWS);
        let pager = self
            .session
            .query_iter(st, ())
            .await
            .map_err(|e| error::driver(format!("listing {}: {e}", self.name), true, e))?;
        let rows = pager
            .rows_stream::<(CqlValue, CqlValue)>()
            .map_err(|e| error::shape("key listing", e))?;
        Ok(rows
            .map(move |row| {
                let (key, salt) =
                    row.map_err(|e| error::driver(format!("listing {}: {e}", self.name), true, e))?;
                let salt = as_i64(&salt)
                    .ok_or_else(|| error::malformed("key listing", "salt is not an integer"))?;
                Ok((key, salt))
            })
            .boxed())
    }

    /// Checks the blob under `key` and, when it is complete, copies it into `store`.
    pub(super) async fn import_blob(
        &self,
        key: &CqlValue,
        key_bytes: &Bytes,
        store: &BlobStore,
    ) -> Result<Outcome> {
        let layout = match self.layout_of(key).await? {
            Ok(layout) => layout,
            Err(reason) => return Ok(Err(reason)),
        };
        if let Err(reason) = layout.fits(&self.salt_type, &self.chunk_id_type) {
            return Ok(Err(reason));
        }
        if let Err(reason) = self.check(key, layout).await?.verdict() {
            return Ok(Err(reason));
        }
        if let Err(e) = saltblob_core::store::validate_key(key_bytes) {
            return Ok(Err(e.to_string()));
        }
        Ok(self
            .copy(key, key_bytes, layout, store)
            .await
            .map_err(|e| e.to_string()))
    }

    /// Why partition `(key, salt)`, `salt` ≠ 0, holds rows no blob's layout reads, if it does; `None` when it
    /// is one of its blob's salts in use, or when the blob's own outcome (at its partition 0) names the
    /// problem.
    pub(super) async fn stray_partition(
        &self,
        key: &CqlValue,
        salt: i64,
    ) -> Result<Option<String>> {
        Ok(match self.layout_of(key).await? {
            Ok(layout) if (0..layout.salts_in_use()).contains(&salt) => None,
            Ok(layout) => Some(format!(
                "partition salt {salt} lies outside the blob's layout (total_chunks {}, salt_cardinality {}): \
                 its rows were not imported",
                layout.total_chunks, layout.salt_cardinality
            )),
            Err(_) if self.has_rows(key, 0).await? => None,
            Err(_) => Some(format!(
                "partition salt {salt}: the blob has no partition salt 0, so no layout row"
            )),
        })
    }

    /// The layout in the row `(key, salt 0, chunk_id 0)`, or why there is none.
    async fn layout_of(
        &self,
        key: &CqlValue,
    ) -> Result<std::result::Result<ArticleLayout, String>> {
        let zero_salt = int_value(&self.salt_type, 0)?;
        let zero_id = int_value(&self.chunk_id_type, 0)?;
        let row: Option<(Option<CqlValue>, Option<CqlValue>)> = self
            .first_row(&self.layout, (key, &zero_salt, &zero_id), "layout row")
            .await?;
        let (total, cardinality) = row.unwrap_or((None, None));
        Ok(ArticleLayout::from_row(
            total.as_ref(),
            cardinality.as_ref(),
        ))
    }

    /// The first row `statement` returns for `values`, if any; `what` names the row in errors (`reading a
    /// {what}`).
    async fn first_row<R>(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        what: &str,
    ) -> Result<Option<R>>
    where
        R: for<'frame, 'metadata> DeserializeRow<'frame, 'metadata>,
    {
        self.session
            .execute_unpaged(statement, values)
            .await
            .map_err(|e| error::execution(&format!("reading a {what}"), e, &Default::default()))?
            .into_rows_result()
            .map_err(|e| error::shape(what, e))?
            .maybe_first_row::<R>()
            .map_err(|e| error::shape(what, e))
    }

    /// Whether partition `(key, salt)` holds a row.
    async fn has_rows(&self, key: &CqlValue, salt: i64) -> Result<bool> {
        let salt = int_value(&self.salt_type, salt)?;
        let rows = self
            .session
            .execute_unpaged(&self.any_chunk, (key, &salt))
            .await
            .map_err(|e| error::execution("reading a partition", e, &Default::default()))?
            .into_rows_result()
            .map_err(|e| error::shape("partition", e))?;
        Ok(rows.rows_num() > 0)
    }

    /// Reads the chunk ids of the salts of `layout` through a [`ChunkIdCheck`], stopping once it has enough.
    async fn check(&self, key: &CqlValue, layout: ArticleLayout) -> Result<ChunkIdCheck> {
        let mut check = ChunkIdCheck::new(layout);
        for salt in 0..layout.salts_in_use() {
            if check.has_enough() {
                break;
            }
            check.begin_salt(salt);
            let salt_value = int_value(&self.salt_type, salt)?;
            let pager = self
                .session
                .execute_iter(self.chunk_ids.clone(), (key, &salt_value))
                .await
                .map_err(|e| error::driver(format!("reading chunk ids: {e}"), true, e))?;
            let mut ids = pager
                .rows_stream::<(CqlValue,)>()
                .map_err(|e| error::shape("chunk ids", e))?;
            while let Some((id,)) = ids
                .try_next()
                .await
                .map_err(|e| error::driver(format!("reading chunk ids: {e}"), true, e))?
            {
                let id = as_i64(&id)
                    .ok_or_else(|| error::malformed("chunk ids", "chunk_id is not an integer"))?;
                check.id(id);
                if check.has_enough() {
                    break;
                }
            }
            check.end_salt();
        }
        Ok(check)
    }

    /// Streams the chunks of a complete blob, in order, into `store`; returns the size.
    async fn copy(
        &self,
        key: &CqlValue,
        key_bytes: &Bytes,
        layout: ArticleLayout,
        store: &BlobStore,
    ) -> Result<u64> {
        let blob = || format!("article blob \"{}\"", KeyDisplay::from(&key_bytes[..]));
        let fetches = stream::iter(0..layout.rows())
            .map(|i| async move {
                let salt = int_value(&self.salt_type, i % layout.salt_cardinality)?;
                let id = int_value(&self.chunk_id_type, i)?;
                let row: Option<(Option<Vec<u8>>,)> = self
                    .first_row(&self.chunk, (key, &salt, &id), "chunk")
                    .await?;
                match row {
                    Some((Some(data),)) => {
                        layout
                            .check_chunk(i, data.len())
                            .map_err(|reason| Error::corrupt(blob(), reason))?;
                        Ok(Bytes::from(data))
                    }
                    _ => Err(Error::corrupt(
                        blob(),
                        format!("chunk {i} vanished or is null during the import"),
                    )),
                }
            })
            .buffered(FETCH_DEPTH)
            .boxed();
        let manifest = store
            .put_stream(key_bytes, StreamReader::new(fetches), &PutOptions::new())
            .await?;
        Ok(manifest.size)
    }
}
