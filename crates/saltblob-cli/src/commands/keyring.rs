//! `saltblob keyring`: the local key provider's keyring file (`docs/format.md`, "Keyring file, format 1") —
//! make one, add a key, rotate a key, retire a key version, list the keys (names, versions, dates; never key bytes). The store is not
//! opened.

use std::path::PathBuf;

use futures::future::LocalBoxFuture;
use saltblob::encryption::{KekState, Keyring};
use serde_json::json;

use super::command::{Command, Context};
use crate::failure::Failure;

/// Arguments of `saltblob keyring`.
#[derive(clap::Args, Debug)]
pub struct KeyringCmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Make an empty keyring FILE, readable by its owner only (mode 0600); an existing file is never replaced.
    New {
        /// The keyring file to make.
        file: PathBuf,
    },
    /// Add key NAME (version 1, 256 random bits) to keyring FILE.
    Add {
        /// The keyring file.
        file: PathBuf,
        /// The key's name: 1 to 64 of A-Z a-z 0-9 - _ .
        name: String,
    },
    /// Make a new version of key NAME in keyring FILE: it wraps the data keys made from now on, the older
    /// versions keep opening what they wrapped.
    Rotate {
        /// The keyring file.
        file: PathBuf,
        /// The key's name.
        name: String,
    },
    /// Retire version VERSION of key NAME in keyring FILE: it is kept but opens nothing, so blobs it still
    /// wraps become unreadable; run `saltblob rekey` first to re-wrap them under the current version.
    Retire {
        /// The keyring file.
        file: PathBuf,
        /// The key's name.
        name: String,
        /// The version to retire.
        version: u32,
    },
    /// List the keys of keyring FILE: name, version, state, when made (never the key bytes).
    List {
        /// The keyring file.
        file: PathBuf,
        /// Print JSON: {"keys": [{"name", "version", "state", "created_micros", "current"}]}.
        #[arg(long)]
        json: bool,
    },
}

impl Command for KeyringCmd {
    /// Not read-only in [`Command::is_read_only`]'s sense: it never opens the store, so whether the store
    /// exists does not matter.
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let now = context.config.clock.now_micros();
            match &self.action {
                Action::New { file } => {
                    Keyring::create(file)?;
                    println!("made keyring {} (mode 0600, no keys yet)", file.display());
                }
                Action::Add { file, name } => {
                    let mut ring = Keyring::open(file)?;
                    let kek = ring.add(name, now)?;
                    println!(
                        "added key {} version {} to {}",
                        kek.name,
                        kek.version,
                        file.display()
                    );
                }
                Action::Rotate { file, name } => {
                    let mut ring = Keyring::open(file)?;
                    let kek = ring.rotate(name, now)?;
                    println!(
                        "key {} is now at version {}: new data keys are wrapped by it; older versions still open \
                         theirs",
                        kek.name, kek.version
                    );
                }
                Action::Retire {
                    file,
                    name,
                    version,
                } => {
                    let mut ring = Keyring::open(file)?;
                    ring.retire(name, *version)?;
                    let current = ring.current(name).map(|k| k.version);
                    match current {
                        Some(current) => println!(
                            "retired key {name} version {version}: it opens nothing now; version {current} is current"
                        ),
                        None => println!(
                            "retired key {name} version {version}: no version of {name} is active now, so puts \
                             under it fail until it is rotated"
                        ),
                    }
                }
                Action::List { file, json } => {
                    let ring = Keyring::open(file)?;
                    let keys: Vec<_> = ring
                        .keks()
                        .iter()
                        .map(|k| {
                            let current = ring
                                .current(&k.name)
                                .is_some_and(|c| c.version == k.version);
                            let state = match k.state {
                                KekState::Active => "active",
                                KekState::Retired => "retired",
                            };
                            (k, state, current)
                        })
                        .collect();
                    if *json {
                        let rows: Vec<_> = keys
                            .iter()
                            .map(|(k, state, current)| {
                                json!({
                                    "name": k.name,
                                    "version": k.version,
                                    "state": state,
                                    "created_micros": k.created_micros,
                                    "current": current,
                                })
                            })
                            .collect();
                        println!("{:#}", json!({ "keys": rows }));
                    } else {
                        for (k, state, current) in keys {
                            let made = std::time::UNIX_EPOCH
                                + std::time::Duration::from_micros(k.created_micros);
                            println!(
                                "{}\tversion {}\t{state}{}\tmade {}",
                                k.name,
                                k.version,
                                if current { " (current)" } else { "" },
                                humantime::format_rfc3339_seconds(made)
                            );
                        }
                    }
                }
            }
            Ok(())
        })
    }
}
