//! Import from the salting article's original schema.
//!
//! Users who followed the article have a table `((key, salt), chunk_id)` with columns `chunk`, `total_chunks`
//! and `salt_cardinality`, where chunk `i` lives in partition `(key, i % salt_cardinality)` and the row
//! `(salt = 0, chunk_id = 0)` carries the layout. An empty value is one empty chunk row: `total_chunks` 0 and
//! chunk 0 empty. [`import_salted`] copies every complete blob of such a table into a [`BlobStore`] and reports,
//! instead of importing, every blob that is not complete: a missing or invalid layout row, missing or
//! duplicated chunk ids, chunks in the wrong partition or beyond the count.
//!
//! Stored rows are not trusted: memory stays bounded whatever the table holds. The table is read as a stream
//! of partitions (one page at a time), each blob's chunk ids as a stream checked against its layout in
//! constant memory ([`ChunkIdCheck`]: at most [`MAX_LISTED`] ids are kept per kind of problem), and the check
//! of a blob stops once it has found more than [`MAX_LISTED`] problems, so that a `total_chunks` or
//! `salt_cardinality` of 2^62 costs no more than the rows that exist.

use std::collections::BTreeSet;
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
/// Rows per page when reading the table's partitions and a partition's chunk ids.
const PAGE_ROWS: i32 = 1000;
/// Most chunk ids kept and named per kind of problem of one blob; a blob with more problems than this is
/// rejected without reading the rest of its partitions.
pub const MAX_LISTED: usize = 64;
/// Most rejections an [`ImportReport`] keeps (the progress callback sees every one).
pub const MAX_REPORTED_REJECTIONS: usize = 1000;

/// The outcome of one blob: its size when imported, or why it was not.
pub type Outcome = std::result::Result<u64, String>;

/// What an import did. Counts, and a bounded sample of the rejections: the progress callback of
/// [`import_salted`] sees every outcome.
#[derive(Clone, Debug, Default)]
pub struct ImportReport {
    /// Blobs copied.
    pub imported: u64,
    /// Bytes copied.
    pub imported_bytes: u64,
    /// Blobs (and partitions outside any blob's layout) not copied.
    pub rejected: u64,
    /// The first [`MAX_REPORTED_REJECTIONS`] of them: key and reason (naming missing chunk ids and the like).
    pub rejections: Vec<(Bytes, String)>,
}

impl ImportReport {
    fn record(&mut self, key: Bytes, outcome: Outcome) {
        match outcome {
            Ok(size) => {
                self.imported += 1;
                self.imported_bytes = self.imported_bytes.saturating_add(size);
            }
            Err(reason) => {
                self.rejected += 1;
                if self.rejections.len() < MAX_REPORTED_REJECTIONS {
                    self.rejections.push((key, reason));
                }
            }
        }
    }
}

/// Copies every complete blob of the article-schema table `keyspace.table`, read through `session` at
/// `consistency`, into `store` (overwriting keys that exist there), in the table's partition order. Incomplete
/// blobs are reported, not copied; so is a partition that lies outside its blob's layout (a salt at or beyond
/// the blob's salts in use, or any salt of a key that has no partition 0), once per such partition.
/// Calls `progress(key, outcome)` after each blob and each such partition.
///
/// # Errors
/// A table that is not in the article's schema, a key or integer column of an unsupported type, a failure of
/// the cluster; a blob's own problems are outcomes, not errors.
pub async fn import_salted(
    session: &Session,
    table: &str,
    consistency: Consistency,
    store: &BlobStore,
    progress: &mut (dyn FnMut(&[u8], &Outcome) + Send),
) -> Result<ImportReport> {
    let source = Source::open(session, table, consistency).await?;
    let mut report = ImportReport::default();
    let mut partitions = source.partitions().await?;
    while let Some((key, salt)) = partitions.try_next().await? {
        let key_bytes = key_bytes(&key)?;
        let outcome = if salt == 0 {
            source.import_blob(&key, &key_bytes, store).await?
        } else {
            match source.stray_partition(&key, salt).await? {
                Some(reason) => Err(reason),
                None => continue,
            }
        };
        progress(&key_bytes, &outcome);
        report.record(key_bytes, outcome);
    }
    Ok(report)
}

/// The geometry of one article blob, from its layout row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArticleLayout {
    /// Chunks of the value: 0 for an empty value.
    pub total_chunks: i64,
    /// Partitions the chunks are spread over: chunk `i` lives in salt `i % salt_cardinality`.
    pub salt_cardinality: i64,
}

impl ArticleLayout {
    /// The layout in `row`'s `total_chunks` and `salt_cardinality`, or why it is not one: a missing value,
    /// not an integer, `total_chunks` below 0 or `salt_cardinality` below 1.
    pub fn from_row(
        total_chunks: Option<&CqlValue>,
        salt_cardinality: Option<&CqlValue>,
    ) -> std::result::Result<Self, String> {
        let (Some(total), Some(cardinality)) = (total_chunks, salt_cardinality) else {
            return Err(
                "no layout row (salt 0, chunk_id 0 with total_chunks and salt_cardinality)".into(),
            );
        };
        let (Some(total), Some(cardinality)) = (as_i64(total), as_i64(cardinality)) else {
            return Err("total_chunks or salt_cardinality is not an integer".into());
        };
        if total < 0 || cardinality < 1 {
            return Err(format!(
                "invalid layout: total_chunks {total}, salt_cardinality {cardinality}"
            ));
        }
        Ok(Self {
            total_chunks: total,
            salt_cardinality: cardinality,
        })
    }

    /// Chunk rows of the blob: chunk ids `0..rows`. An empty value has one (empty) row.
    pub fn rows(&self) -> i64 {
        self.total_chunks.max(1)
    }

    /// Salts that hold rows: `0..salts_in_use`.
    pub fn salts_in_use(&self) -> i64 {
        self.salt_cardinality.min(self.rows())
    }

    /// Why the blob's largest salt or chunk id does not fit the columns' integer types, if it does not.
    fn fits(&self, salt_type: &str, chunk_id_type: &str) -> std::result::Result<(), String> {
        let fits = |column: &str, ty: &str, largest: i64| {
            int_value(ty, largest).map(|_| ()).map_err(|_| {
                format!(
                    "invalid layout: total_chunks {}, salt_cardinality {}: its largest {column} {largest} does \
                     not fit the column's type {ty}",
                    self.total_chunks, self.salt_cardinality
                )
            })
        };
        fits("salt", salt_type, self.salts_in_use() - 1)?;
        fits("chunk_id", chunk_id_type, self.rows() - 1)
    }

    /// Checks chunk `index` of `len` bytes: an empty value's one row must be empty.
    pub fn check_chunk(&self, index: i64, len: usize) -> std::result::Result<(), String> {
        if self.total_chunks == 0 && len > 0 {
            return Err(format!(
                "total_chunks is 0 but chunk {index} holds {len} bytes"
            ));
        }
        Ok(())
    }
}

/// The smallest [`MAX_LISTED`] ids of a set, and how many ids the set holds.
#[derive(Clone, Debug, Default)]
struct IdSample {
    kept: BTreeSet<i64>,
    count: u64,
}

impl IdSample {
    fn insert(&mut self, id: i64) {
        self.count = self.count.saturating_add(1);
        self.keep(id);
    }

    /// Adds the ids `start, start + step, …` below `end` (`step` ≥ 1) in at most [`MAX_LISTED`] steps.
    fn insert_progression(&mut self, start: i64, step: i64, end: i64) {
        if start >= end {
            return;
        }
        let count = (end - 1 - start) / step + 1;
        self.count = self.count.saturating_add(count.unsigned_abs());
        let mut id = start;
        for _ in 0..count.min(MAX_LISTED as i64) {
            if self.kept.len() >= MAX_LISTED && self.kept.last().is_some_and(|&max| id >= max) {
                break;
            }
            self.keep(id);
            match id.checked_add(step) {
                Some(next) if next < end => id = next,
                _ => break,
            }
        }
    }

    fn keep(&mut self, id: i64) {
        self.kept.insert(id);
        if self.kept.len() > MAX_LISTED {
            self.kept.pop_last();
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `3, 7-8`, or `1-64 and 99 more`.
    fn describe(&self) -> String {
        let ids: Vec<i64> = self.kept.iter().copied().collect();
        let more = self.count.saturating_sub(ids.len() as u64);
        if more == 0 {
            id_ranges(&ids)
        } else {
            format!("{} and {more} more", id_ranges(&ids))
        }
    }
}

/// Checks the chunk ids of one article blob as they are read, salt by salt in the order `0..salts_in_use`
/// and each salt's ids in ascending order, in constant memory: at most [`MAX_LISTED`] ids per kind of problem.
///
/// Call [`ChunkIdCheck::begin_salt`], [`ChunkIdCheck::id`] for each id of that salt, then
/// [`ChunkIdCheck::end_salt`]; stop reading once [`ChunkIdCheck::has_enough`] is true; then
/// [`ChunkIdCheck::verdict`].
#[derive(Clone, Debug)]
pub struct ChunkIdCheck {
    layout: ArticleLayout,
    salt: i64,
    /// The next id the current salt should hold.
    next: i64,
    /// The last id seen in the current salt.
    last: Option<i64>,
    missing: IdSample,
    misplaced: IdSample,
    beyond: IdSample,
    disordered: IdSample,
    salts_done: i64,
}

impl ChunkIdCheck {
    /// A check of a blob laid out as `layout`.
    pub fn new(layout: ArticleLayout) -> Self {
        Self {
            layout,
            salt: 0,
            next: 0,
            last: None,
            missing: IdSample::default(),
            misplaced: IdSample::default(),
            beyond: IdSample::default(),
            disordered: IdSample::default(),
            salts_done: 0,
        }
    }

    /// Starts reading the ids of `salt` (in `0..salts_in_use`).
    pub fn begin_salt(&mut self, salt: i64) {
        self.salt = salt;
        self.next = salt;
        self.last = None;
    }

    /// One id read from the current salt.
    pub fn id(&mut self, id: i64) {
        if self.last.is_some_and(|last| id <= last) {
            self.disordered.insert(id);
            return;
        }
        self.last = Some(id);
        let rows = self.layout.rows();
        let cardinality = self.layout.salt_cardinality;
        if id < 0 || id >= rows {
            self.beyond.insert(id);
        } else if id % cardinality != self.salt {
            self.misplaced.insert(id);
        } else {
            // id ≥ next: the ids of this salt are ascending and next was the one after the last.
            self.missing.insert_progression(self.next, cardinality, id);
            self.next = id.saturating_add(cardinality);
        }
    }

    /// Ends the current salt: the ids it should still hold are missing.
    pub fn end_salt(&mut self) {
        self.missing.insert_progression(
            self.next,
            self.layout.salt_cardinality,
            self.layout.rows(),
        );
        self.next = i64::MAX;
        self.salts_done += 1;
    }

    /// Whether the check has found more problems than it lists: reading further would not change the verdict.
    pub fn has_enough(&self) -> bool {
        let problems = [
            &self.missing,
            &self.misplaced,
            &self.beyond,
            &self.disordered,
        ]
        .iter()
        .fold(0u64, |n, s| n.saturating_add(s.count));
        problems > MAX_LISTED as u64
    }

    /// `Ok` when every chunk id is present once, in its salt; otherwise why not.
    pub fn verdict(&self) -> std::result::Result<(), String> {
        let total = self.layout.total_chunks;
        let cardinality = self.layout.salt_cardinality;
        let finished = self.salts_done >= self.layout.salts_in_use();
        // An id outside its salt is duplicated when its own salt holds it too: known when every salt was read
        // and every missing id is listed.
        let exact = finished && self.missing.count <= MAX_LISTED as u64;
        let (duplicated, misplaced): (Vec<i64>, Vec<i64>) = self
            .misplaced
            .kept
            .iter()
            .partition(|id| exact && !self.missing.kept.contains(id));
        let mut problems = Vec::new();
        if !self.missing.is_empty() {
            problems.push(format!(
                "missing chunk ids {} of 0..{total}",
                self.missing.describe()
            ));
        }
        if !duplicated.is_empty() {
            problems.push(format!(
                "duplicated chunk ids {} (in more than one salt)",
                id_ranges(&duplicated)
            ));
        }
        if !misplaced.is_empty() {
            let more = self
                .misplaced
                .count
                .saturating_sub((duplicated.len() + misplaced.len()) as u64);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            problems.push(format!(
                "chunk ids {}{more} not in salt chunk_id % {cardinality}{}",
                id_ranges(&misplaced),
                if exact { "" } else { " (or duplicated)" }
            ));
        }
        if !self.beyond.is_empty() {
            problems.push(format!(
                "chunk ids {} beyond total_chunks {total}",
                self.beyond.describe()
            ));
        }
        if !self.disordered.is_empty() {
            problems.push(format!(
                "chunk ids {} read out of order",
                self.disordered.describe()
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        if !finished {
            problems.push(format!(
                "check stopped after salt {} of 0..{}: more than {MAX_LISTED} problems",
                self.salts_done - 1,
                self.layout.salts_in_use()
            ));
        }
        Err(problems.join("; "))
    }
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
    any_chunk: PreparedStatement,
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
        let prepare = |cql: String| async move {
            let mut st = session
                .prepare(cql.as_str())
                .await
                .map_err(|e| error::prepare(&cql, e))?;
            st.set_consistency(consistency);
            st.set_is_idempotent(true);
            st.set_page_size(PAGE_ROWS);
            Ok::<_, Error>(st)
        };
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
    async fn partitions(&self) -> Result<BoxStream<'_, Result<(CqlValue, i64)>>> {
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
    async fn import_blob(
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
    async fn stray_partition(&self, key: &CqlValue, salt: i64) -> Result<Option<String>> {
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
        let row = self
            .session
            .execute_unpaged(&self.layout, (key, &zero_salt, &zero_id))
            .await
            .map_err(|e| error::execution("reading a layout row", e, &Default::default()))?
            .into_rows_result()
            .map_err(|e| error::shape("layout row", e))?
            .maybe_first_row::<(Option<CqlValue>, Option<CqlValue>)>()
            .map_err(|e| error::shape("layout row", e))?;
        let (total, cardinality) = row.unwrap_or((None, None));
        Ok(ArticleLayout::from_row(
            total.as_ref(),
            cardinality.as_ref(),
        ))
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
        while end
            .checked_add(1)
            .is_some_and(|next| iter.peek() == Some(&next))
        {
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
    use proptest::prelude::*;

    use super::*;

    fn layout(total_chunks: i64, salt_cardinality: i64) -> ArticleLayout {
        ArticleLayout {
            total_chunks,
            salt_cardinality,
        }
    }

    /// The recipe's chunk ids of `layout`, per salt in use.
    fn recipe_ids(layout: ArticleLayout) -> Vec<Vec<i64>> {
        let mut salts = vec![Vec::new(); usize::try_from(layout.salts_in_use()).expect("small")];
        for id in 0..layout.rows() {
            salts[usize::try_from(id % layout.salt_cardinality).expect("small")].push(id);
        }
        salts
    }

    /// Runs a check as the import does (salts in order, stopping once it has enough) over `salts`, the ids of
    /// each salt (missing salts are empty); returns the verdict and how many salts it read.
    fn run(layout: ArticleLayout, salts: &[Vec<i64>]) -> (std::result::Result<(), String>, i64) {
        let mut check = ChunkIdCheck::new(layout);
        let mut read = 0;
        let mut salt = 0;
        while salt < layout.salts_in_use() && !check.has_enough() {
            check.begin_salt(salt);
            let ids = usize::try_from(salt)
                .ok()
                .and_then(|s| salts.get(s))
                .map_or(&[][..], Vec::as_slice);
            for &id in ids {
                check.id(id);
                assert!(
                    [
                        &check.missing,
                        &check.misplaced,
                        &check.beyond,
                        &check.disordered
                    ]
                    .iter()
                    .all(|sample| sample.kept.len() <= MAX_LISTED),
                    "kept ids stay within MAX_LISTED"
                );
                if check.has_enough() {
                    break;
                }
            }
            check.end_salt();
            read += 1;
            salt += 1;
        }
        (check.verdict(), read)
    }

    #[test]
    fn complete_blobs_pass() {
        for (total, cardinality) in [(10, 4), (1, 10), (3, 1), (100, 100), (7, 3)] {
            let l = layout(total, cardinality);
            assert_eq!(run(l, &recipe_ids(l)).0, Ok(()), "{l:?}");
        }
    }

    #[test]
    fn problems_are_named_as_before() {
        let l = layout(10, 4);
        let mut holes = recipe_ids(l);
        holes[3].retain(|id| *id != 3 && *id != 7);
        holes[0].retain(|id| *id != 8);
        assert_eq!(
            run(l, &holes).0,
            Err("missing chunk ids 3, 7-8 of 0..10".into())
        );

        let mut twice = recipe_ids(l);
        twice[2].insert(1, 5); // 2, 5, 6
        assert_eq!(
            run(l, &twice).0,
            Err("duplicated chunk ids 5 (in more than one salt)".into())
        );

        let mut moved = recipe_ids(l);
        moved[1].retain(|id| *id != 5);
        moved[2].insert(1, 5);
        let verdict = run(l, &moved).0.expect_err("misplaced");
        assert!(
            verdict.contains("missing chunk ids 5 of 0..10")
                && verdict.contains("chunk ids 5 not in salt chunk_id % 4"),
            "{verdict}"
        );

        let mut beyond = recipe_ids(l);
        beyond[0].push(12);
        assert_eq!(
            run(l, &beyond).0,
            Err("chunk ids 12 beyond total_chunks 10".into())
        );
    }

    /// The article's recipe writes an empty value as `total_chunks 0, salt_cardinality 1` and one empty chunk
    /// row: that is a complete blob of zero bytes, not an invalid layout.
    #[test]
    fn an_empty_value_is_a_complete_blob() {
        let row = ArticleLayout::from_row(Some(&CqlValue::Int(0)), Some(&CqlValue::Int(1)))
            .expect("a valid layout");
        assert_eq!((row.rows(), row.salts_in_use()), (1, 1));
        assert_eq!(run(row, &[vec![0]]).0, Ok(()));
        assert_eq!(row.check_chunk(0, 0), Ok(()));
        assert!(
            row.check_chunk(0, 3).is_err(),
            "an empty value's row is empty"
        );
        assert_eq!(
            run(row, &[vec![0, 1]]).0,
            Err("chunk ids 1 beyond total_chunks 0".into())
        );
        assert_eq!(run(layout(0, 5), &[vec![0]]).0, Ok(()), "any cardinality");
    }

    #[test]
    fn layout_rows_are_checked() {
        let int = |v: i32| CqlValue::Int(v);
        for (total, cardinality, expect) in [
            (None, Some(int(1)), "no layout row"),
            (Some(int(1)), None, "no layout row"),
            (
                Some(CqlValue::Text("1".into())),
                Some(int(1)),
                "not an integer",
            ),
            (
                Some(int(-1)),
                Some(int(1)),
                "invalid layout: total_chunks -1",
            ),
            (Some(int(3)), Some(int(0)), "salt_cardinality 0"),
        ] {
            let err =
                ArticleLayout::from_row(total.as_ref(), cardinality.as_ref()).expect_err(expect);
            assert!(err.contains(expect), "{err}");
        }
        let huge = layout(1 << 40, 1 << 40);
        assert!(huge.fits("bigint", "bigint").is_ok());
        let err = huge
            .fits("int", "bigint")
            .expect_err("salt too large for int");
        assert!(err.contains("largest salt 1099511627775"), "{err}");
        assert!(layout(1 << 40, 3).fits("int", "int").is_err());
        assert!(layout(0, i64::MAX).fits("tinyint", "tinyint").is_ok());
    }

    /// A `total_chunks` or `salt_cardinality` of 2^62 costs no more than the rows that exist: the check reads
    /// a bounded number of salts and keeps a bounded number of ids.
    #[test]
    fn huge_layouts_are_rejected_in_bounded_work() {
        let huge = 1i64 << 62;
        let (verdict, salts_read) = run(layout(huge, 1), &[vec![0]]);
        let verdict = verdict.expect_err("incomplete");
        assert!(
            verdict.starts_with(&format!(
                "missing chunk ids 1-64 and {} more of 0..{huge}",
                huge - 65
            )),
            "{verdict}"
        );
        assert_eq!(salts_read, 1);

        let (verdict, salts_read) = run(layout(huge, huge), &[vec![0]]);
        let verdict = verdict.expect_err("incomplete");
        assert!(
            salts_read <= MAX_LISTED as i64 + 2,
            "{salts_read} salts read"
        );
        assert!(verdict.contains("check stopped after salt"), "{verdict}");

        let (verdict, _) = run(layout(i64::MAX, 7), &[vec![0, 7, i64::MAX - 3]]);
        assert!(verdict.is_err());
    }

    #[test]
    fn id_ranges_are_compact() {
        assert_eq!(id_ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        assert_eq!(id_ranges(&[5]), "5");
        assert_eq!(id_ranges(&[]), "");
        // The last id of the range does not overflow looking for its successor.
        assert_eq!(
            id_ranges(&[i64::MAX - 1, i64::MAX]),
            format!("{}-{}", i64::MAX - 1, i64::MAX)
        );
        assert_eq!(
            id_ranges(&[i64::MIN, i64::MAX]),
            format!("{}, {}", i64::MIN, i64::MAX)
        );
        // Past the maximum is not the minimum.
        assert_eq!(
            id_ranges(&[i64::MAX, i64::MIN]),
            format!("{}, {}", i64::MAX, i64::MIN)
        );
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

    /// Longest verdict: four kinds of problem, each at most `MAX_LISTED` ids of up to 20 digits and a sign,
    /// plus fixed text.
    const MAX_VERDICT_LEN: usize = 4 * (MAX_LISTED * 44 + 120) + 200;

    fn any_integer() -> impl Strategy<Value = CqlValue> {
        prop_oneof![
            any::<i64>().prop_map(CqlValue::BigInt),
            any::<i32>().prop_map(CqlValue::Int),
            any::<i16>().prop_map(CqlValue::SmallInt),
            any::<i8>().prop_map(CqlValue::TinyInt),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(CqlValue::Blob),
        ]
    }

    proptest! {
        /// The article's rows, whatever they hold (layout values of any integer type or none, chunk ids of
        /// any value in any order, chunks of any length), never panic the import's checks, which keep at most
        /// `MAX_LISTED` ids per kind of problem, read at most `MAX_LISTED + 2` salts past the first problem,
        /// and return a verdict of bounded length.
        #[test]
        fn arbitrary_rows_never_panic_and_stay_bounded(
            total in proptest::option::of(any_integer()),
            cardinality in proptest::option::of(any_integer()),
            salts in proptest::collection::vec(proptest::collection::vec(any::<i64>(), 0..40), 0..8),
            chunk_len in 0usize..100,
            key in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            prop_assert_eq!(key_bytes(&CqlValue::Blob(key.clone())).ok(), Some(Bytes::from(key)));
            if let Ok(layout) = ArticleLayout::from_row(total.as_ref(), cardinality.as_ref()) {
                prop_assert!(layout.rows() >= 1 && layout.salts_in_use() >= 1);
                let _ = layout.fits("int", "bigint");
                let _ = layout.check_chunk(0, chunk_len);
                let (verdict, salts_read) = run(layout, &salts);
                prop_assert!(salts_read <= layout.salts_in_use());
                prop_assert!(salts_read <= salts.len().max(1) as i64 + MAX_LISTED as i64 + 2);
                if let Err(reason) = verdict {
                    prop_assert!(reason.len() <= MAX_VERDICT_LEN, "{} bytes", reason.len());
                }
            }
        }

        /// Sorted ids of the recipe, with any ids taken out, give exactly those ids as missing (or pass).
        #[test]
        fn missing_ids_are_exact(total in 1i64..200, cardinality in 1i64..20, holes in proptest::collection::btree_set(0i64..200, 0..10)) {
            let l = layout(total, cardinality);
            let mut salts = recipe_ids(l);
            for salt in &mut salts {
                salt.retain(|id| !holes.contains(id));
            }
            let holes: Vec<i64> = holes.into_iter().filter(|h| *h < total).collect();
            let verdict = run(l, &salts).0;
            if holes.is_empty() {
                prop_assert_eq!(verdict, Ok(()));
            } else {
                prop_assert_eq!(verdict, Err(format!("missing chunk ids {} of 0..{total}", id_ranges(&holes))));
            }
        }
    }
}
