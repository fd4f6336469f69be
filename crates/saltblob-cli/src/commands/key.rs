//! `saltblob key`: the S3 access keys kept in the store, and their grants per bucket (`docs/s3.md`, *Access
//! keys and grants*). Through the admin socket of the server holding an embedded store when one answers there,
//! else on the store opened here.

use std::path::{Path, PathBuf};

use futures::future::LocalBoxFuture;
use saltblob_server::Right;
use serde_json::Value;

use super::command::{Command, Context};
use crate::access_keys::KeyAction;
use crate::admin;
use crate::failure::Failure;

/// Arguments of `saltblob key`.
#[derive(clap::Args, Debug)]
pub struct KeyCmd {
    #[command(subcommand)]
    action: Action,
    /// The admin socket of the server that holds the store. Defaults to admin.sock in the store's directory,
    /// used when a server answers there; otherwise the store is opened here.
    #[arg(long, value_name = "PATH", global = true)]
    admin_socket: Option<PathBuf>,
    /// Print the outcome as one JSON object.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Make an access key named NAME, with no grant; print its id and secret (the only time the secret is
    /// shown). The secret is kept sealed under the store's encryption key (or --seal-with).
    Create {
        /// A name for people: 1 to 64 bytes.
        name: String,
        /// The key may create buckets (and owns each one it creates).
        #[arg(long)]
        create_buckets: bool,
        /// Seal the secret under this key of the store's provider (a keyring name, a KMS key id) instead of the
        /// store's encryption_key.
        #[arg(long, value_name = "NAME")]
        seal_with: Option<String>,
    },
    /// Grant key ID RIGHT on BUCKET (read, write or owner; each includes those before it), replacing the right
    /// it had there. The bucket must exist.
    Allow {
        /// The access key id.
        id: String,
        /// The bucket.
        bucket: String,
        /// read, write or owner.
        #[arg(value_parser = parse_right)]
        right: Right,
    },
    /// Take key ID's grant on BUCKET away.
    Deny {
        /// The access key id.
        id: String,
        /// The bucket.
        bucket: String,
    },
    /// List the keys kept in the store: id, name, whether it may create buckets, its grants (never a secret).
    List,
    /// Delete key ID: every server refuses it within a second.
    Delete {
        /// The access key id.
        id: String,
    },
}

fn parse_right(s: &str) -> Result<Right, String> {
    s.parse()
}

impl Command for KeyCmd {
    fn is_read_only(&self) -> bool {
        matches!(self.action, Action::List)
    }

    /// No store yet (only `list` gets here): no key to list.
    fn without_store(&self, _dir: &Path) -> Result<(), Failure> {
        if self.json {
            println!("{}", serde_json::json!({ "keys": [] }));
        } else {
            println!("no access key is kept in the store (there is no store yet)");
        }
        Ok(())
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let action = self.key_action();
            let socket = self
                .admin_socket
                .clone()
                .or_else(|| admin::default_socket(&context.url));
            let served = match &socket {
                Some(socket) => admin::request_key(socket, &action).await?,
                None => None,
            };
            let outcome = match (served, &self.admin_socket) {
                (Some(outcome), _) => outcome,
                (None, Some(socket)) => return Err(admin::no_server_at(socket)),
                (None, None) => {
                    let mut outcome = Value::Null;
                    let body = async |store: &saltblob::BlobStore| {
                        outcome = action.run(store).await?;
                        Ok(())
                    };
                    if action.is_read_only() {
                        context.reading_store(body).await?;
                    } else {
                        context.with_store(body).await?;
                    }
                    outcome
                }
            };
            if self.json {
                println!("{outcome}");
            } else {
                print_outcome(&action, &outcome);
            }
            Ok(())
        })
    }
}

impl KeyCmd {
    fn key_action(&self) -> KeyAction {
        match &self.action {
            Action::Create {
                name,
                create_buckets,
                seal_with,
            } => KeyAction::Create {
                name: name.clone(),
                create_buckets: *create_buckets,
                seal_with: seal_with.clone(),
            },
            Action::Allow { id, bucket, right } => KeyAction::Allow {
                id: id.clone(),
                bucket: bucket.clone(),
                right: *right,
            },
            Action::Deny { id, bucket } => KeyAction::Deny {
                id: id.clone(),
                bucket: bucket.clone(),
            },
            Action::List => KeyAction::List,
            Action::Delete { id } => KeyAction::Delete { id: id.clone() },
        }
    }
}

/// Prints an action's outcome for people.
fn print_outcome(action: &KeyAction, outcome: &Value) {
    let s = |field: &str| outcome[field].as_str().unwrap_or_default().to_owned();
    match action {
        KeyAction::Create { .. } => {
            println!("access key id:     {}", s("id"));
            println!("secret access key: {}", s("secret"));
            println!("(the secret is not shown again; grant it buckets with `saltblob key allow`)");
        }
        KeyAction::Allow { .. } => {
            println!("{} may {} bucket {}", s("id"), s("right"), s("bucket"));
        }
        KeyAction::Deny { .. } => {
            if outcome["had_grant"].as_bool() == Some(true) {
                println!(
                    "{} has no grant on bucket {} any more",
                    s("id"),
                    s("bucket")
                );
            } else {
                println!("{} had no grant on bucket {}", s("id"), s("bucket"));
            }
        }
        KeyAction::List => {
            let keys = outcome["keys"].as_array().cloned().unwrap_or_default();
            if keys.is_empty() {
                println!(
                    "no access key is kept in the store (the server's root keys are not listed)"
                );
            }
            for k in keys {
                let grants: Vec<String> = k["grants"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|g| {
                        let stale = if g["stale"].as_bool() == Some(true) {
                            " (bucket gone)"
                        } else {
                            ""
                        };
                        format!(
                            "{}={}{stale}",
                            g["bucket"].as_str().unwrap_or_default(),
                            g["right"].as_str().unwrap_or_default()
                        )
                    })
                    .collect();
                println!(
                    "{}  {:?}{}  {}",
                    k["id"].as_str().unwrap_or_default(),
                    k["name"].as_str().unwrap_or_default(),
                    if k["create_buckets"].as_bool() == Some(true) {
                        "  creates buckets"
                    } else {
                        ""
                    },
                    if grants.is_empty() {
                        "no grant".to_owned()
                    } else {
                        grants.join(" ")
                    }
                );
            }
        }
        KeyAction::Delete { .. } => println!("deleted access key {}", s("id")),
    }
}
