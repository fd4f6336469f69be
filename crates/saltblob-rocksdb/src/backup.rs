//! Backups of an embedded store while it serves ([`saltblob_core::ChunkStore::backup`]): a directory that opens
//! as a store and holds what the store held at one instant.
//!
//! 1. The destination is checked: it must not exist, its parent must, and it must not lie inside the store.
//! 2. Deletions of extent files are held back ([`Extents::hold_removals`]); then RocksDB's checkpoint is taken
//!    into a staging directory inside the store (`backup-staging-*`, on the store's file system): the memtables
//!    are flushed (unlogged chunks included), the tables, blob files, logs and the format marker and store id
//!    (records like any other) are linked or copied. Its instant is the backup's.
//! 3. Every extent file is hard-linked into the staging directory's `extents/`, but those that puts are
//!    writing at that moment: a version committed before the checkpoint had synced its file, so its writer was
//!    gone. (The files of puts that finished writing but had not committed are linked too: the copy holds them
//!    as a crash would, and its first gc reclaims them.) Then deletions go on.
//! 4. The staging directory gets the destination's name (a rename that never replaces anything), or, on
//!    another file system or when asked to copy, is copied to a temporary name beside the destination, every
//!    file and directory synced, then renamed; the staging directory goes.
//!
//! Extent files and RocksDB's tables are never written again once complete, so a hard link is a copy of them
//! as they are. A staging directory left by a process that died during a backup is removed by the next open
//! ([`remove_leftover_staging`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use saltblob_core::{BackupOptions, BackupReport, Error, Result};

use crate::core::RocksCore;
use crate::error::NAME;
use crate::extent::Extents;
use crate::extent::format::{EXTENT_DIR, Named, parse_file_name};

/// The name of a staging directory inside the store begins so.
const STAGING_PREFIX: &str = "backup-staging-";

/// Files and bytes counted while a copy is made.
#[derive(Default)]
struct Tally {
    files: u64,
    bytes: u64,
}

/// Takes a backup of the store `core` and `extents` into `dest`; see the module documentation.
pub(crate) async fn backup(
    core: &Arc<RocksCore>,
    extents: &Arc<Extents>,
    dest: &Path,
    options: &BackupOptions,
) -> Result<BackupReport> {
    let store = core.config().path.clone();
    let dest = dest.to_path_buf();
    {
        let (store, dest) = (store.clone(), dest.clone());
        blocking(move || check_destination(&store, &dest)).await?;
    }
    let staging = store.join(format!(
        "{STAGING_PREFIX}{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));

    let began = Instant::now();
    let hold = extents.hold_removals().await;
    let taken = {
        let (core, extents, staging) = (Arc::clone(core), Arc::clone(extents), staging.clone());
        blocking(move || take_instant(&core, &extents, &staging)).await
    };
    drop(hold);
    let held = began.elapsed();
    let (engine, extent) = match taken {
        Ok(tallies) => tallies,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };

    let copy = options.copy;
    let copied = blocking(move || {
        let placed = place(&staging, &dest, copy);
        let _ = std::fs::remove_dir_all(&staging);
        placed
    })
    .await?;
    Ok(BackupReport {
        engine_files: engine.files,
        engine_bytes: engine.bytes,
        extent_files: extent.files,
        extent_bytes: extent.bytes,
        copied,
        held,
    })
}

/// Removes the staging directories that a process which died during a backup left in the store at `store`
/// (called at open, when this process holds the store's lock, so no backup of another process is running).
pub(crate) fn remove_leftover_staging(store: &Path) {
    let Ok(entries) = std::fs::read_dir(store) else {
        return;
    };
    for entry in entries.flatten() {
        let is_staging = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(STAGING_PREFIX));
        if is_staging && entry.file_type().is_ok_and(|t| t.is_dir()) {
            tracing::info!(
                "removing {}, left by a backup that did not finish",
                entry.path().display()
            );
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(crate::error::join)?
}

/// Refuses a destination that exists, whose parent does not, or that lies inside the store.
fn check_destination(store: &Path, dest: &Path) -> Result<()> {
    let refuse = |why: String| {
        Error::backend(
            NAME,
            format!("cannot back up into {}: {why}", dest.display()),
            false,
        )
    };
    if dest.symlink_metadata().is_ok() {
        return Err(refuse(
            "it exists (a backup goes to a new directory; name another, or remove it)".into(),
        ));
    }
    let parent = parent_of(dest);
    let parent_real = parent.canonicalize().map_err(|e| {
        refuse(format!(
            "its parent directory {} cannot be used: {e}",
            parent.display()
        ))
    })?;
    if !parent_real.is_dir() {
        return Err(refuse(format!("{} is not a directory", parent.display())));
    }
    if let Ok(store_real) = store.canonicalize()
        && parent_real.starts_with(&store_real)
    {
        return Err(refuse(format!(
            "it lies inside the store at {} (put it beside the store or elsewhere)",
            store.display()
        )));
    }
    Ok(())
}

/// The directory `path` is in (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// With deletions of extent files held back: RocksDB's checkpoint into `staging`, then a hard link of each
/// extent file that no put is writing. Returns the tallies of the engine's files and of the extent files.
fn take_instant(core: &RocksCore, extents: &Extents, staging: &Path) -> Result<(Tally, Tally)> {
    core.checkpoint(staging)?;
    let mut engine = Tally::default();
    for entry in read_dir(staging)? {
        let meta = entry
            .metadata()
            .map_err(|e| io_error(&entry.path(), "cannot stat it", e))?;
        if meta.is_file() {
            engine.files += 1;
            engine.bytes += meta.len();
        }
    }
    let mut extent = Tally::default();
    let source = extents.dir();
    if source.is_dir() {
        let target = staging.join(EXTENT_DIR);
        std::fs::create_dir(&target).map_err(|e| io_error(&target, "cannot create it", e))?;
        let writing = extents.being_written()?;
        for entry in read_dir(source)? {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !matches!(parse_file_name(name), Named::Extent(_)) || writing.contains(name) {
                continue;
            }
            match std::fs::hard_link(entry.path(), target.join(name)) {
                Ok(()) => {}
                // Removed by a put that failed before this hold began: nothing refers to it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error(&entry.path(), "cannot link it into the backup", e)),
            }
            extent.files += 1;
            extent.bytes += entry.metadata().map_or(0, |m| m.len());
        }
        sync_dir(&target)?;
    }
    sync_dir(staging)?;
    Ok((engine, extent))
}

/// Gives `staging` the name `dest`: a rename when it can and `copy` is false, else a copy to a temporary name
/// beside `dest`, synced, then renamed. Returns whether the files were copied. Never replaces anything at
/// `dest`.
fn place(staging: &Path, dest: &Path, copy: bool) -> Result<bool> {
    let parent = parent_of(dest);
    if !copy {
        match rename_new(staging, dest) {
            Ok(()) => {
                sync_dir(&parent)?;
                return Ok(false);
            }
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {}
            Err(e) => return Err(io_error(dest, "cannot name the backup so", e)),
        }
    }
    let name = dest
        .file_name()
        .map_or_else(|| "backup".into(), |n| n.to_string_lossy().into_owned());
    let partial = parent.join(format!(".{name}.partial-{}", std::process::id()));
    let copied = copy_tree(staging, &partial).and_then(|()| {
        rename_new(&partial, dest).map_err(|e| io_error(dest, "cannot name the backup so", e))
    });
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e);
    }
    sync_dir(&parent)?;
    Ok(true)
}

/// Copies the directory `from` (files and directories only) to the new directory `to`, every file and
/// directory synced.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to).map_err(|e| io_error(to, "cannot create it", e))?;
    for entry in read_dir(from)? {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry
            .file_type()
            .map_err(|e| io_error(&src, "cannot stat it", e))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| io_error(&dst, "cannot copy into it", e))?;
            std::fs::File::open(&dst)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_error(&dst, "cannot sync it", e))?;
        }
    }
    sync_dir(to)
}

/// Renames `from` to `to`, failing if `to` exists.
fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        from,
        rustix::fs::CWD,
        to,
        rustix::fs::RenameFlags::NOREPLACE,
    )
    .map_err(std::io::Error::from)
}

/// The entries of `dir`.
fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    std::fs::read_dir(dir)
        .and_then(|entries| entries.collect::<std::io::Result<Vec<_>>>())
        .map_err(|e| io_error(dir, "cannot list it", e))
}

/// Makes `dir`'s entries durable.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, "cannot sync it", e))
}

/// An I/O error of the backup on `path`, not retryable as such (a full disk says so).
fn io_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    let hint = if e.raw_os_error() == Some(libc::ENOSPC) {
        " (the device is full)"
    } else {
        ""
    };
    Error::backend_caused(
        NAME,
        format!("backup: {}: {what}: {e}{hint}", path.display()),
        false,
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A destination that exists, whose parent is missing, or inside the store is refused before anything is
    /// made; a new name beside the store is taken.
    #[test]
    fn destinations_are_checked_before_anything_is_made() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("store");
        std::fs::create_dir(&store).expect("store dir");
        let exists = dir.path().join("exists");
        std::fs::create_dir(&exists).expect("dir");
        let e = check_destination(&store, &exists).expect_err("exists");
        assert!(e.to_string().contains("it exists"), "{e}");
        let orphan = dir.path().join("missing/backup");
        let e = check_destination(&store, &orphan).expect_err("no parent");
        assert!(e.to_string().contains("parent directory"), "{e}");
        let inside = store.join("backup");
        let e = check_destination(&store, &inside).expect_err("inside");
        assert!(e.to_string().contains("inside the store"), "{e}");
        check_destination(&store, &dir.path().join("backup")).expect("a new name beside it");
    }

    /// A rename never replaces: a directory already at the name stays, and the copy keeps every file and its
    /// bytes.
    #[test]
    fn placing_never_replaces_and_copies_whole_trees() {
        let dir = tempfile::tempdir().expect("tempdir");
        let staging = dir.path().join("staging");
        std::fs::create_dir_all(staging.join("extents")).expect("dirs");
        std::fs::write(staging.join("CURRENT"), b"MANIFEST-000005\n").expect("file");
        std::fs::write(staging.join("extents/x.extent"), vec![7u8; 10_000]).expect("file");

        let taken = dir.path().join("taken");
        std::fs::create_dir(&taken).expect("dir");
        let e = rename_new(&staging, &taken).expect_err("never replaces an empty directory");
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));

        let copy = dir.path().join("copy");
        assert!(place(&staging, &copy, true).expect("copy"));
        assert_eq!(
            std::fs::read(copy.join("extents/x.extent")).expect("read"),
            vec![7u8; 10_000]
        );
        assert!(
            staging.join("CURRENT").is_file(),
            "a copy leaves its source"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".partial-"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary copy left");

        let moved = dir.path().join("moved");
        assert!(!place(&staging, &moved, false).expect("rename"));
        assert!(moved.join("CURRENT").is_file() && !staging.exists());
    }

    /// Only directories of the staging name are removed at open.
    #[test]
    fn leftover_staging_directories_go_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let staging = dir.path().join(format!("{STAGING_PREFIX}1-2"));
        std::fs::create_dir_all(staging.join("extents")).expect("dirs");
        std::fs::write(dir.path().join(format!("{STAGING_PREFIX}file")), b"x").expect("file");
        std::fs::create_dir(dir.path().join("extents")).expect("dir");
        remove_leftover_staging(dir.path());
        assert!(!staging.exists());
        assert!(dir.path().join(format!("{STAGING_PREFIX}file")).is_file());
        assert!(dir.path().join("extents").is_dir());
    }
}
