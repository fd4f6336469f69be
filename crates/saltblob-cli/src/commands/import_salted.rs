//! `saltblob import-salted`: copies a table in the salting article's schema into the store.

use futures::future::LocalBoxFuture;
use saltblob::BlobStore;

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human;

/// Arguments of `saltblob import-salted`.
#[derive(clap::Args, Debug)]
pub struct ImportSalted {
    /// The source table, KEYSPACE.TABLE.
    table: String,
    /// The cluster holding the table (cql://host1,host2:9042/any). Defaults to the --store URL when it is a
    /// cql:// store.
    #[arg(long, value_name = "URL")]
    source: Option<String>,
}

impl Command for ImportSalted {
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        let source = self.source.as_deref().unwrap_or(&context.url);
        Box::pin(context.with_store(async |store| self.import(store, source).await))
    }
}

impl ImportSalted {
    /// Copies the table from the cluster at `source`, one line per blob, and fails (exit code 4) if any blob
    /// was incomplete.
    async fn import(&self, store: &BlobStore, source: &str) -> Result<(), Failure> {
        let table = &self.table;
        if !source.starts_with("cql://") {
            return Err(Failure::usage(format!(
                "import-salted reads a table on a cluster: pass --source cql://HOST:9042/KEYSPACE (the store is {})",
                saltblob::redact_url(source)
            )));
        }
        let config = saltblob::cql::CqlConfig::from_url(source)?;
        let session = saltblob::cql::CqlStore::open_session(&config).await?;
        let mut report_line = |key: &[u8], outcome: &saltblob::cql::import::Outcome| match outcome {
            Ok(size) => println!(
                "imported {} ({})",
                human::escape_key(key),
                human::short(*size)
            ),
            Err(reason) => println!("REJECTED {}: {reason}", human::escape_key(key)),
        };
        let report = saltblob::cql::import::import_salted(
            &session,
            table,
            config.read_consistency,
            store,
            &mut report_line,
        )
        .await?;
        eprintln!(
            "imported {} blob(s), {}; rejected {} incomplete blob(s)",
            report.imported,
            human::short(report.imported_bytes),
            report.rejected
        );
        if report.rejected == 0 {
            Ok(())
        } else {
            Err(Failure::new(
                Failure::DAMAGED,
                format!(
                    "{} blob(s) of {table} are incomplete and were not imported (listed above)",
                    report.rejected
                ),
            ))
        }
    }
}
