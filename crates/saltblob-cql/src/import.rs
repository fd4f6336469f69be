//! Import from the salting article's original schema.
//!
//! Users who followed the article have a table `((key, salt), chunk_id)` with columns `chunk`, `total_chunks`
//! and `salt_cardinality`, where chunk `i` lives in partition `(key, i % salt_cardinality)` and the row
//! `(salt = 0, chunk_id = 0)` carries the layout. [`import_salted`] copies every complete blob of such a table
//! into a [`BlobStore`] and reports, instead of importing, every blob that is not complete: a missing layout row,
//! missing or duplicated chunk ids, chunks in the wrong partition or beyond the count.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use saltblob_core::{BlobStore, Error, KeyDisplay, PutOptions, Result};
use scylla::client::session::Session;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;
use tokio::io::{AsyncRead, ReadBuf};

use crate::config::validate_keyspace;
use crate::error;

/// Chunk reads in flight while importing one blob.
const FETCH_DEPTH: usize = 16;

/// The outcome of one blob: its size when imported, or why it was not.
pub type Outcome = std::result::Result<u64, String>;

/// What an import did.
#[derive(Clone, Debug, Default)]
pub struct ImportReport {
    /// Blobs copied: key and size.
    pub imported: Vec<(Bytes, u64)>,
    /// Blobs not copied: key and the reason (naming missing chunk ids and the like).
    pub rejected: Vec<(Bytes, String)>,
}

/// Copies every complete blob of the article-schema table `keyspace.table`, read through `session` at
/// `consistency`, into `store` (overwriting keys that exist there). Incomplete blobs are reported, not copied.
/// Calls `progress(key, outcome)` after each blob.
pub async fn import_salted(
    session: &Session,
    table: &str,
    consistency: Consistency,
    store: &BlobStore,
    progress: &mut (dyn FnMut(&[u8], &Outcome) + Send),
) -> Result<ImportReport> {
    let source = Source::open(session, table, consistency).await?;
    let mut report = ImportReport::default();
    for (key_bytes, (key, salts)) in source.keys().await? {
        let outcome = match source.check(&key, &salts).await? {
            Err(reason) => Err(reason),
            Ok(layout) => match saltblob_core::store::validate_key(&key_bytes) {
                Err(e) => Err(e.to_string()),
                Ok(_) => source
                    .copy(&key, &key_bytes, layout, store)
                    .await
                    .map_err(|e| e.to_string()),
            },
        };
        progress(&key_bytes, &outcome);
        match outcome {
            Ok(size) => report.imported.push((key_bytes, size)),
            Err(reason) => report.rejected.push((key_bytes, reason)),
        }
    }
    Ok(report)
}

/// The geometry of one complete article blob.
#[derive(Clone, Copy, Debug)]
struct ArticleLayout {
    total_chunks: i64,
    salt_cardinality: i64,
}

/// The source table, its column types and prepared statements.
struct Source<'a> {
    session: &'a Session,
    name: String,
    salt_type: String,
    chunk_id_type: String,
    consistency: Consistency,
    layout: PreparedStatement,
    chunk_ids: PreparedStatement,
    chunk: PreparedStatement,
}

impl<'a> Source<'a> {
    async fn open(session: &'a Session, table: &str, consistency: Consistency) -> Result<Self> {
        let bad = |reason: String| Error::invalid("table", reason);
        let (ks, tb) = table
            .split_once('.')
            .ok_or_else(|| bad(format!("\"{table}\" is not KEYSPACE.TABLE")))?;
        let ks = validate_keyspace(ks).map_err(bad)?;
        let tb = validate_keyspace(tb).map_err(|r| bad(r.replace("keyspace", "table")))?;
        let mut columns: BTreeMap<String, String> = BTreeMap::new();
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
        let name = format!("{ks}.{tb}");
        let prepare = |cql: String| async move {
            let mut st = session
                .prepare(cql.as_str())
                .await
                .map_err(|e| error::prepare(&cql, e))?;
            st.set_consistency(consistency);
            st.set_is_idempotent(true);
            Ok::<_, Error>(st)
        };
        Ok(Self {
            session,
            salt_type: columns.get("salt").cloned().unwrap_or_default(),
            chunk_id_type: columns.get("chunk_id").cloned().unwrap_or_default(),
            consistency,
            layout: prepare(format!(
                "SELECT total_chunks, salt_cardinality FROM {name} WHERE key = ? AND salt = ? AND chunk_id = ?"
            ))
            .await?,
            chunk_ids: prepare(format!("SELECT chunk_id FROM {name} WHERE key = ? AND salt = ?")).await?,
            chunk: prepare(format!("SELECT chunk FROM {name} WHERE key = ? AND salt = ? AND chunk_id = ?")).await?,
            name,
        })
    }

    /// Every key of the table with the salts of its partitions, in key-byte order.
    async fn keys(&self) -> Result<BTreeMap<Bytes, (CqlValue, BTreeSet<i64>)>> {
        let mut st = scylla::statement::Statement::new(format!(
            "SELECT DISTINCT key, salt FROM {}",
            self.name
        ));
        st.set_consistency(self.consistency);
        st.set_page_size(1000);
        let pager = self
            .session
            .query_iter(st, ())
            .await
            .map_err(|e| error::driver(format!("listing {}: {e}", self.name), true, e))?;
        let mut rows = pager
            .rows_stream::<(CqlValue, CqlValue)>()
            .map_err(|e| error::shape("key listing", e))?;
        let mut keys: BTreeMap<Bytes, (CqlValue, BTreeSet<i64>)> = BTreeMap::new();
        while let Some(row) = rows
            .try_next()
            .await
            .map_err(|e| error::driver(format!("listing {}: {e}", self.name), true, e))?
        {
            let (key, salt) = row;
            let bytes = key_bytes(&key)?;
            let salt = as_i64(&salt)
                .ok_or_else(|| error::malformed("key listing", "salt is not an integer"))?;
            keys.entry(bytes)
                .or_insert_with(|| (key, BTreeSet::new()))
                .1
                .insert(salt);
        }
        Ok(keys)
    }

    /// Checks that the blob under `key` is complete; returns its layout or why it is not.
    async fn check(
        &self,
        key: &CqlValue,
        salts: &BTreeSet<i64>,
    ) -> Result<std::result::Result<ArticleLayout, String>> {
        let zero_salt = int_value(&self.salt_type, 0)?;
        let zero_id = int_value(&self.chunk_id_type, 0)?;
        let layout_row = self
            .session
            .execute_unpaged(&self.layout, (key, &zero_salt, &zero_id))
            .await
            .map_err(|e| error::execution("reading a layout row", e, &Default::default()))?
            .into_rows_result()
            .map_err(|e| error::shape("layout row", e))?
            .maybe_first_row::<(Option<CqlValue>, Option<CqlValue>)>()
            .map_err(|e| error::shape("layout row", e))?;
        let Some((Some(total), Some(cardinality))) = layout_row else {
            return Ok(Err(
                "no layout row (salt 0, chunk_id 0 with total_chunks and salt_cardinality)".into(),
            ));
        };
        let (Some(total), Some(cardinality)) = (as_i64(&total), as_i64(&cardinality)) else {
            return Ok(Err(
                "total_chunks or salt_cardinality is not an integer".into()
            ));
        };
        if total < 1 || cardinality < 1 {
            return Ok(Err(format!(
                "invalid layout: total_chunks {total}, salt_cardinality {cardinality}"
            )));
        }
        let mut seen: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for &salt in salts {
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
                seen.entry(id).or_default().push(salt);
            }
        }
        let missing: Vec<i64> = (0..total).filter(|i| !seen.contains_key(i)).collect();
        let duplicated: Vec<i64> = seen
            .iter()
            .filter(|(_, s)| s.len() > 1)
            .map(|(i, _)| *i)
            .collect();
        let beyond: Vec<i64> = seen
            .keys()
            .copied()
            .filter(|i| *i < 0 || *i >= total)
            .collect();
        let misplaced: Vec<i64> = seen
            .iter()
            .filter(|(i, s)| {
                **i >= 0 && **i < total && s.len() == 1 && s.first() != Some(&(**i % cardinality))
            })
            .map(|(i, _)| *i)
            .collect();
        let mut problems = Vec::new();
        if !missing.is_empty() {
            problems.push(format!(
                "missing chunk ids {} of 0..{total}",
                id_ranges(&missing)
            ));
        }
        if !duplicated.is_empty() {
            problems.push(format!(
                "duplicated chunk ids {} (in more than one salt)",
                id_ranges(&duplicated)
            ));
        }
        if !beyond.is_empty() {
            problems.push(format!(
                "chunk ids {} beyond total_chunks {total}",
                id_ranges(&beyond)
            ));
        }
        if !misplaced.is_empty() {
            problems.push(format!(
                "chunk ids {} not in salt chunk_id % {cardinality}",
                id_ranges(&misplaced)
            ));
        }
        Ok(if problems.is_empty() {
            Ok(ArticleLayout {
                total_chunks: total,
                salt_cardinality: cardinality,
            })
        } else {
            Err(problems.join("; "))
        })
    }

    /// Streams the chunks of a complete blob, in order, into `store`; returns the size.
    async fn copy(
        &self,
        key: &CqlValue,
        key_bytes: &Bytes,
        layout: ArticleLayout,
        store: &BlobStore,
    ) -> Result<u64> {
        let fetches = stream::iter(0..layout.total_chunks)
            .map(|i| async move {
                let salt = int_value(&self.salt_type, i % layout.salt_cardinality)?;
                let id = int_value(&self.chunk_id_type, i)?;
                let row = self
                    .session
                    .execute_unpaged(&self.chunk, (key, &salt, &id))
                    .await
                    .map_err(|e| error::execution("reading a chunk", e, &Default::default()))?
                    .into_rows_result()
                    .map_err(|e| error::shape("chunk", e))?
                    .maybe_first_row::<(Option<Vec<u8>>,)>()
                    .map_err(|e| error::shape("chunk", e))?;
                match row {
                    Some((Some(data),)) => Ok(Bytes::from(data)),
                    _ => Err(Error::corrupt(
                        format!("article blob \"{}\"", KeyDisplay::from(&key_bytes[..])),
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

/// An [`AsyncRead`] over a stream of byte pieces; a failed piece becomes an I/O error with its message.
struct StreamReader<'a> {
    pieces: BoxStream<'a, Result<Bytes>>,
    current: Bytes,
}

impl<'a> StreamReader<'a> {
    fn new(pieces: BoxStream<'a, Result<Bytes>>) -> Self {
        Self {
            pieces,
            current: Bytes::new(),
        }
    }
}

impl AsyncRead for StreamReader<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        while self.current.is_empty() {
            match self.pieces.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(piece))) => self.current = piece,
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(std::io::Error::other(e.to_string())));
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.current.len().min(buf.remaining());
        let piece = self.current.split_to(n);
        buf.put_slice(&piece);
        Poll::Ready(Ok(()))
    }
}

/// The saltblob key of an article key: the bytes of a blob, the UTF-8 of a text.
fn key_bytes(key: &CqlValue) -> Result<Bytes> {
    match key {
        CqlValue::Blob(b) => Ok(Bytes::copy_from_slice(b)),
        CqlValue::Text(s) | CqlValue::Ascii(s) => Ok(Bytes::copy_from_slice(s.as_bytes())),
        CqlValue::Int(i) => Ok(Bytes::from(i.to_string())),
        CqlValue::BigInt(i) => Ok(Bytes::from(i.to_string())),
        CqlValue::Uuid(u) => Ok(Bytes::from(u.to_string())),
        other => Err(error::malformed(
            "key",
            format!("unsupported key type {other:?}; use text, blob, int, bigint or uuid"),
        )),
    }
}

fn as_i64(v: &CqlValue) -> Option<i64> {
    match v {
        CqlValue::Int(i) => Some(i64::from(*i)),
        CqlValue::BigInt(i) => Some(*i),
        CqlValue::SmallInt(i) => Some(i64::from(*i)),
        CqlValue::TinyInt(i) => Some(i64::from(*i)),
        _ => None,
    }
}

/// `v` as a value of the CQL integer type `ty`.
fn int_value(ty: &str, v: i64) -> Result<CqlValue> {
    let overflow = || Error::invalid("chunk id", format!("{v} does not fit the column type {ty}"));
    Ok(match ty {
        "int" => CqlValue::Int(i32::try_from(v).map_err(|_| overflow())?),
        "bigint" => CqlValue::BigInt(v),
        "smallint" => CqlValue::SmallInt(i16::try_from(v).map_err(|_| overflow())?),
        "tinyint" => CqlValue::TinyInt(i8::try_from(v).map_err(|_| overflow())?),
        other => {
            return Err(error::malformed(
                "source table",
                format!("integer column of unsupported type {other}"),
            ));
        }
    })
}

/// `0-3, 7, 9-10`.
pub fn id_ranges(ids: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = ids.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_ranges_are_compact() {
        assert_eq!(id_ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        assert_eq!(id_ranges(&[5]), "5");
        assert_eq!(id_ranges(&[]), "");
    }

    #[test]
    fn integer_columns_take_their_own_type() {
        assert_eq!(int_value("int", 5).ok(), Some(CqlValue::Int(5)));
        assert_eq!(int_value("bigint", 5).ok(), Some(CqlValue::BigInt(5)));
        assert!(int_value("smallint", 70_000).is_err());
        assert!(int_value("text", 1).is_err());
        assert_eq!(as_i64(&CqlValue::TinyInt(3)), Some(3));
        assert_eq!(
            key_bytes(&CqlValue::Text("k".into())).ok(),
            Some(Bytes::from_static(b"k"))
        );
    }
}
