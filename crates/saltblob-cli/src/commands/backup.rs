//! `saltblob backup`: a consistent copy of an embedded store, taken while it serves (through the server's admin
//! socket, `crate::admin`) or not (opened here); optionally verified by an fsck of the copy.

use std::path::{Path, PathBuf};

use futures::future::LocalBoxFuture;
use saltblob::{BackupOptions, FsckOptions};
use serde_json::{Value, json};

use super::command::{Command, Context};
use crate::admin;
use crate::failure::{Failure, one_line};
use crate::human;

/// Arguments of `saltblob backup`.
#[derive(clap::Args, Debug)]
pub struct Backup {
    /// The directory to make the copy in: it must not exist, its parent must. It opens as a store:
    /// --store rocksdb:///DEST.
    #[arg(value_name = "DEST")]
    dest: PathBuf,
    /// Copy every file, even on the store's file system (where the default hard-links them: instant, but
    /// sharing their blocks with the store, so such a copy guards against mistakes, not against losing the
    /// device).
    #[arg(long)]
    copy: bool,
    /// Then check the copy: open it and fsck every blob (exit code 4 if one is damaged).
    #[arg(long)]
    verify: bool,
    /// The admin socket of the server that holds the store. Defaults to admin.sock in the store's directory,
    /// used when a server answers there; otherwise the store is opened here.
    #[arg(long, value_name = "PATH")]
    admin_socket: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

impl Command for Backup {
    /// There is nothing to back up: a failure, so that a script does not take an empty directory for a backup.
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        Err(Failure::new(
            Failure::FAILED,
            format!(
                "there is no store at {}: nothing to back up (pass --store or set SALTBLOB_STORE)",
                dir.display()
            ),
        ))
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(self.backup(context))
    }
}

impl Backup {
    /// Takes the backup through the serving process when one answers, else here; then verifies it if asked.
    async fn backup(&self, context: &Context) -> Result<(), Failure> {
        let dest = std::path::absolute(&self.dest)?;
        let socket = self
            .admin_socket
            .clone()
            .or_else(|| admin::default_socket(&context.url));
        let served = match &socket {
            Some(socket) => admin::request_backup(socket, &dest, self.copy).await?,
            None => None,
        };
        let mut report = match (served, &self.admin_socket) {
            (Some(report), _) => report,
            (None, Some(socket)) => return Err(admin::no_server_at(socket)),
            (None, None) => {
                let store = context.open().await?;
                let options = BackupOptions::new().with_copy(self.copy);
                match store.backend().backup(&dest, &options).await? {
                    Some(r) => admin::report_json(&dest, &r),
                    None => {
                        return Err(Failure::new(Failure::FAILED, admin::no_backup_of_its_own()));
                    }
                }
            }
        };
        let verified = if self.verify {
            Some(verify(context, &dest).await?)
        } else {
            None
        };
        if let (Some(v), Some(map)) = (&verified, report.as_object_mut()) {
            map.insert("verified".into(), v.clone());
        }
        if self.json {
            println!("{report}");
        } else {
            print_report(&report);
        }
        match verified {
            Some(v) if v["damaged"].as_u64().unwrap_or(0) > 0 => Err(Failure::new(
                Failure::DAMAGED,
                format!(
                    "the backup at {} has damaged blobs: run saltblob --store rocksdb://{} fsck",
                    dest.display(),
                    dest.display()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Opens the backup at `dest` with the store URL's parameters (its keyring among them) and fscks it; returns
/// the counts.
async fn verify(context: &Context, dest: &Path) -> Result<Value, Failure> {
    let query = context
        .url
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    let url = format!("rocksdb://{}{query}", dest.display());
    let store = saltblob::open(&url, context.config.clone())
        .await
        .map_err(|e| {
            Failure::new(
                Failure::DAMAGED,
                format!(
                    "the backup at {} does not open: {}",
                    dest.display(),
                    one_line(&e)
                ),
            )
        })?;
    let r = store.fsck(&FsckOptions::new()).await?;
    for d in &r.damaged {
        eprintln!(
            "saltblob: backup: DAMAGED {}: {}",
            human::escape_key(&d.key),
            d.problem
        );
    }
    Ok(json!({
        "blobs": r.blobs,
        "bytes": r.bytes,
        "damaged": r.damaged.len(),
        "orphans": r.orphans.len(),
        "puts_in_flight": r.puts_in_flight,
    }))
}

/// The report for people.
fn print_report(r: &Value) {
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    println!(
        "backup at {}: {} engine files ({}), {} extent files ({}), {}; deletions held {:.0} ms",
        r["path"].as_str().unwrap_or("?"),
        n("engine_files"),
        human::bytes(n("engine_bytes")),
        n("extent_files"),
        human::bytes(n("extent_bytes")),
        if r["copied"].as_bool().unwrap_or(false) {
            "copied"
        } else {
            "hard-linked (sharing the store's blocks: copy it to another device to guard against losing this one)"
        },
        r["held_ms"].as_f64().unwrap_or(0.0),
    );
    if let Some(v) = r.get("verified") {
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        println!(
            "verified: {} blobs ({}), {} damaged; {} puts that were in flight are reclaimed by its first gc",
            n("blobs"),
            human::bytes(n("bytes")),
            n("damaged"),
            n("puts_in_flight"),
        );
    }
}
