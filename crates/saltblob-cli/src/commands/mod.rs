//! The commands: one struct per command with its arguments, and its [`Command`] implementation saying which key
//! it names, whether it only reads, and how it runs. [`Commands`] is clap's list of them, in help order, and
//! the dispatch to them. `command.rs` holds what every command uses ([`Command`], [`Context`]); each command's
//! file uses it and nothing of this file. The bulk commands (`cp`, `sync`, `rm` of many keys) share `bulk.rs`
//! (the sides of a copy, local walks, the summary) and `transfer.rs` (the transfers, run a few at once);
//! `export` and `import` share `portable.rs` (the format of their stream).

mod bulk;
mod command;
mod portable;
mod transfer;

mod backup;
mod bench;
mod census;
mod cp;
mod demo;
mod export;
mod fsck;
mod gc;
mod get;
mod import;
mod import_salted;
mod inspect;
mod key;
mod keyring;
mod ls;
mod plan;
mod put;
mod relayout;
mod reseal;
mod rm;
mod serve;
mod shell;
mod sync;
mod upgrade;
mod walk;

pub use self::command::{Command, Context};

/// The commands, as clap parses them; the doc comment of each is its line in `saltblob --help`.
#[derive(clap::Subcommand, Debug)]
pub enum Commands {
    /// Store FILE (or standard input when FILE is absent or "-") under KEY.
    Put(put::Put),
    /// Write the blob under KEY to standard output or to a file.
    Get(get::Get),
    /// Show the manifest of KEY's current version.
    Head(inspect::Head),
    /// Delete keys, or with --prefix every key under prefixes (their chunks are reclaimed after the grace
    /// period); --dry-run lists them.
    Rm(rm::Rm),
    /// List keys starting with PREFIX (all keys when absent): names, -l details, --json lines, --delimiter
    /// groups, --summarize totals.
    Ls(ls::Ls),
    /// Copy files into the store and blobs out of it: one, or with -r a directory tree to and from a prefix, a
    /// few at once (-j).
    ///
    /// A store side is written sb:KEY (or sb:PREFIX/), the key %-escaped as `ls` prints it (%XX a byte, %25 a
    /// '%'); anything else is a local path (write ./sb:x for a local file named sb:x). Local names are bytes:
    /// a name that is not UTF-8 becomes the same bytes in the key, and is printed %-escaped.
    ///
    /// Each transfer is streamed. A local file is written to a temporary file beside it, fsynced, then renamed:
    /// nothing half-written is left under its name. Symlinks to files are followed; symlinks to directories are
    /// not (so a link loop is never walked), nor are FIFOs, sockets and devices: they are named and counted as
    /// skipped. What cannot be read is named and the rest goes on; the exit code is then 1.
    ///
    /// Examples: `saltblob cp -r photos sb:photos/`, `saltblob cp -r sb:photos/ restored`,
    /// `saltblob cp report.pdf sb:docs/`, `saltblob cp sb:docs/report.pdf .`
    Cp(cp::Cp),
    /// Make a prefix hold what a local directory holds, or a directory what a prefix holds, copying only what
    /// differs (size, or BLAKE3 digest); --delete removes what the source lacks; --dry-run changes nothing.
    ///
    /// Sides are written as for `cp` (sb:PREFIX for the store). A file and a blob are the same when their sizes
    /// and BLAKE3 digests are (the digest `head` shows); a sealed or composed (multipart) blob has no plain
    /// digest and is copied again. --delete deletes nothing when part of a local source could not be read.
    Sync(sync::SyncCmd),
    /// Write every blob of the store (or under --prefix, after --after KEY, in key order) to FILE or standard
    /// output as a portable stream, with its metadata, expiry, encryption key name and BLAKE3 digest, each blob
    /// streamed: what `import` reads into another store (RocksDB or Cassandra). Reads only.
    ///
    /// Sealed blobs are written as plaintext (the store URL must give their key provider) with the name of the
    /// key they were sealed under; a blob sealed with a customer key (SSE-C) cannot be read: it is named in the
    /// stream and on stderr, and the exit code is then 1. FILE is written under a temporary name (mode 0600)
    /// beside it and renamed when complete; an existing FILE only with --force.
    ///
    /// Examples: `saltblob --store rocksdb:///data export all.sbx`,
    /// `saltblob --store rocksdb:///data export - | saltblob --store cql://h:9042/ks import -`
    Export(export::Export),
    /// Read a stream of `export` (FILE, or standard input) into the store, each blob streamed into a put whose
    /// BLAKE3 digest is checked before it commits; sealed blobs are sealed again under the same key name.
    ///
    /// A key that already holds the same blob (size, metadata, key name, digest) is skipped, so running an
    /// interrupted import again goes on where it stopped. A corrupt or truncated stream stops the import where it
    /// is damaged (exit code 4), every blob before imported, naming the last complete key: export the rest with
    /// `export --after KEY`. A blob the store cannot take is named and the rest goes on (exit code 1).
    Import(import::Import),
    /// Show how KEY is laid out: layout, chunk size, chunk count, salt count, bytes per salt.
    Describe(inspect::Describe),
    /// Store and read back a mixed-size set of blobs (bytes to 60 MiB), verify every digest, print each layout
    /// and latency.
    Demo(demo::Demo),
    /// Copy every blob of a table in the salting article's schema ((key, salt), chunk_id; chunk, total_chunks,
    /// salt_cardinality) into the store, verifying each is complete; incomplete blobs are reported, not copied.
    ImportSalted(import_salted::ImportSalted),
    /// Benchmark the store: large blobs vs the same volume of small ones (and, optionally, unchunked and mixed
    /// phases), with the probe's hardware reference; deletes its keys at the end.
    Bench(bench::Bench),
    /// Measure the storage under the store: sector sizes and O_DIRECT bandwidth of the embedded store's device,
    /// or single-row throughput of a cluster store.
    Probe(bench::Probe),
    /// Reclaim space: replaced and deleted versions past the grace period, and puts abandoned by a writer that
    /// died (intent expired); then let the engine return the space to the file system.
    Gc(gc::Gc),
    /// Check every blob (manifest, every chunk present once and in place, checksums, digest) and list orphaned
    /// chunks; exit code 4 if a blob is damaged. --repair removes orphans and nothing else.
    Fsck(fsck::Fsck),
    /// Count the store's blobs by size and layout (inline, single-partition, salted): counts, bytes,
    /// percentiles, as text, JSON or an SVG histogram.
    Census(census::CensusCmd),
    /// Show what a layout policy exposes when one node in each of two racks is lost, for the store's blobs (or
    /// a census), on a modelled cluster or the live ring of a cql:// store; compare policies, recommend one.
    Plan(plan::Plan),
    /// Rewrite the blobs whose layout differs from the store's policy (or --policy), each atomically (a put
    /// conditional on the version read: a concurrent writer wins), in the bulk class; resumable with --after.
    Relayout(relayout::Relayout),
    /// Take a consistent copy of an embedded store into a new directory DEST, which opens as a store: while
    /// `serve` holds the store (through its admin socket) or not; --verify then fscks the copy.
    ///
    /// The copy holds what the store held at one instant during the command: RocksDB's checkpoint and the
    /// extent files it refers to (deletions are held back meanwhile), the format marker and store id with them.
    /// On the store's file system its files are hard links (instant, sharing blocks: --copy to copy them); on
    /// another, copies. It is made beside DEST and renamed into place when complete. The keyring is not in it:
    /// back it up apart (docs/operations.md).
    Backup(backup::Backup),
    /// Make and change the local key provider's keyring file (encryption at rest, docs/format.md): new, add,
    /// rotate, retire, list.
    Keyring(keyring::KeyringCmd),
    /// Manage the S3 access keys kept in the store and their grants per bucket: create (shows the new key's
    /// credentials once), allow ID BUCKET read|write|owner, deny, list, delete. The server's --credentials keys
    /// stay root keys. Through the serving process's admin socket when one holds the store (docs/s3.md).
    Key(key::KeyCmd),
    /// Seal the plaintext blobs under a prefix with --key NAME, each rewritten atomically (a put conditional on
    /// the version read: a concurrent writer wins); resumable with --after.
    Encrypt(reseal::Encrypt),
    /// Re-wrap the data keys of sealed blobs under the current version of their key (manifests only, no chunk
    /// rewritten), so that older key versions can be retired; resumable with --after.
    Rekey(reseal::Rekey),
    /// Bring a cql:// keyspace written by an earlier saltblob to this build's schema (build its listing index),
    /// resumable; --reconcile repairs the listing index of a current one. Run it with the store's writers stopped.
    Upgrade(upgrade::Upgrade),
    /// Serve the store over S3 (awscli, boto3, any S3 SDK); see docs/s3.md. Stops on SIGINT or SIGTERM, letting
    /// requests in flight finish.
    Serve(serve::Serve),
    /// Print the completion script of a shell: `saltblob completions bash > /etc/bash_completion.d/saltblob`,
    /// `saltblob completions zsh > "${fpath[1]}/_saltblob"`, `saltblob completions fish`.
    Completions(shell::Completions),
    /// Print the manual page (roff): `saltblob man > saltblob.1`, then `man ./saltblob.1`.
    Man(shell::Man),
}

impl Commands {
    /// The command parsed.
    pub fn command(&self) -> &dyn Command {
        match self {
            Commands::Put(c) => c,
            Commands::Get(c) => c,
            Commands::Head(c) => c,
            Commands::Rm(c) => c,
            Commands::Ls(c) => c,
            Commands::Cp(c) => c,
            Commands::Sync(c) => c,
            Commands::Export(c) => c,
            Commands::Import(c) => c,
            Commands::Describe(c) => c,
            Commands::Demo(c) => c,
            Commands::ImportSalted(c) => c,
            Commands::Bench(c) => c,
            Commands::Probe(c) => c,
            Commands::Gc(c) => c,
            Commands::Fsck(c) => c,
            Commands::Census(c) => c,
            Commands::Plan(c) => c,
            Commands::Relayout(c) => c,
            Commands::Backup(c) => c,
            Commands::Keyring(c) => c,
            Commands::Key(c) => c,
            Commands::Encrypt(c) => c,
            Commands::Rekey(c) => c,
            Commands::Upgrade(c) => c,
            Commands::Serve(c) => c,
            Commands::Completions(c) => c,
            Commands::Man(c) => c,
        }
    }
}
