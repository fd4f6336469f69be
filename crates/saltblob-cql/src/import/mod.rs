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
//!
//! # Layout
//! Each module uses only those listed before it (no import circles):
//! - `report`: each blob's [`Outcome`] and the [`ImportReport`] that counts them.
//! - `values`: the article's CQL values: keys as saltblob keys, integer columns of any integer type.
//! - `layout`: [`ArticleLayout`], a blob's geometry from its layout row.
//! - `check`: [`ChunkIdCheck`], the constant-memory check of a blob's chunk ids against its layout.
//! - `source`: the source table: schema check, prepared statements, partition listing, and one blob's check
//!   and copy.
//!
//! This file holds the entry point, [`import_salted`]: the loop over the table's partitions.

mod check;
mod layout;
mod report;
mod source;
mod values;

use futures::stream::TryStreamExt;
use saltblob_core::{BlobStore, Result};
use scylla::client::session::Session;
use scylla::statement::Consistency;

pub use self::check::{ChunkIdCheck, MAX_LISTED, id_ranges};
pub use self::layout::ArticleLayout;
pub use self::report::{ImportReport, MAX_REPORTED_REJECTIONS, Outcome};
use self::source::Source;
use self::values::key_bytes;

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
