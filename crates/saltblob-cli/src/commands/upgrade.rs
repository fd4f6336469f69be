//! `saltblob upgrade`: brings a cluster keyspace written by an earlier build to this build's schema format (builds
//! the listing index of a format-1 keyspace; moves a format-2 one's marker), resumable; `--reconcile` repairs the
//! index of a current one.

use futures::future::LocalBoxFuture;
use saltblob::cql::{CqlConfig, CqlStore, Upgraded};
use serde_json::json;

use super::command::{Command, Context};
use crate::failure::Failure;

/// Arguments of `saltblob upgrade`.
#[derive(clap::Args, Debug)]
pub struct Upgrade {
    /// Also go through every manifest of a keyspace that is already current: add the index rows a fault left
    /// missing and remove those whose manifest is gone (what fsck reports as listing-index problems).
    #[arg(long)]
    reconcile: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Command for Upgrade {
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(self.upgrade(context))
    }
}

impl Upgrade {
    /// Upgrades the `cql://` store of the context; an embedded or memory store has nothing to upgrade.
    async fn upgrade(&self, context: &Context) -> Result<(), Failure> {
        let (url, _) = saltblob::split_store_params(&context.url, context.config.clone())?;
        if !url.starts_with(&format!("{}://", saltblob::cql::SCHEME)) {
            eprintln!(
                "saltblob: {url}: only cql:// keyspaces have a schema to upgrade; this store is current"
            );
            return Ok(());
        }
        let upgraded = CqlStore::upgrade(CqlConfig::from_url(&url)?, self.reconcile).await?;
        if self.json {
            println!("{}", upgraded_json(&upgraded));
        } else {
            println!("{}", upgraded_text(&upgraded));
        }
        if upgraded.report.complete {
            Ok(())
        } else {
            Err(Failure::new(
                Failure::FAILED,
                "the upgrade stopped before the last manifest; run it again to resume",
            ))
        }
    }
}

/// One line: formats, manifests read, ranges, repairs.
fn upgraded_text(u: &Upgraded) -> String {
    let r = &u.report;
    let formats = if u.from == u.to {
        format!("schema format {} (current)", u.to)
    } else {
        format!("schema format {} -> {}", u.from, u.to)
    };
    format!(
        "{formats}: {} manifests read{}, listing index of {} range(s){}, {} stale index row(s) removed",
        r.manifests,
        if r.resumed { " (resumed)" } else { "" },
        r.ranges,
        if r.planned { " (planned now)" } else { "" },
        r.stale_removed
    )
}

fn upgraded_json(u: &Upgraded) -> serde_json::Value {
    let r = &u.report;
    json!({
        "from_format": u.from,
        "to_format": u.to,
        "manifests": r.manifests,
        "ranges": r.ranges,
        "planned": r.planned,
        "resumed": r.resumed,
        "stale_removed": r.stale_removed,
        "complete": r.complete,
    })
}
