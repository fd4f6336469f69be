//! What the bulk commands (`cp`, `sync`, `rm` of many keys) share: the two sides of a transfer (`sb:KEY` in the
//! store, a local path), the walk of a local tree, the keys under a store prefix made into relative paths
//! (refusing those that would escape the destination), and the summary they print.
//!
//! Names are bytes on both sides: a local path is its operating system bytes (`OsStrExt`), a key its bytes;
//! both are printed %-escaped ([`saltblob::escape_key`]), as `ls` prints keys.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::failure::{Failure, one_line};
use crate::human;

/// How a store side is written on the command line: `sb:KEY` (or `sb:PREFIX/`), the key %-escaped.
pub const STORE_MARK: &str = "sb:";

/// One side of a copy.
#[derive(Clone, Debug)]
pub enum Side {
    /// A key, or a prefix, of the store (`sb:...`).
    Store(Vec<u8>),
    /// A local path (anything not starting with `sb:`).
    Local(PathBuf),
}

impl Side {
    /// Reads a command-line argument: `sb:KEY` (%-escaped) is the store, anything else a local path (write
    /// `./sb:name` for a local file whose name starts with `sb:`).
    pub fn parse(arg: &OsStr) -> Result<Self, Failure> {
        match arg.as_bytes().strip_prefix(STORE_MARK.as_bytes()) {
            Some(key) => {
                let text = std::str::from_utf8(key).map_err(|_| {
                    Failure::usage(format!(
                        "{}: a key is written %-escaped (%XX for a byte that is not UTF-8)",
                        shown(arg)
                    ))
                })?;
                saltblob::unescape_key(text)
                    .map(Side::Store)
                    .map_err(|e| Failure::usage(format!("{}: {e}", shown(arg))))
            }
            None if arg.is_empty() => Err(Failure::usage("an empty path names nothing")),
            None => Ok(Side::Local(PathBuf::from(arg))),
        }
    }
}

/// A path or a name as printed: its bytes %-escaped.
pub fn shown(path: impl AsRef<OsStr>) -> String {
    human::escape_key(path.as_ref().as_bytes())
}

/// A store side as printed: `sb:` and the key %-escaped.
pub fn shown_key(key: &[u8]) -> String {
    format!("{STORE_MARK}{}", human::escape_key(key))
}

/// The prefix a tree is copied under: `prefix` with a `/` added when it is neither empty nor ends with one
/// (`sb:photos` and `sb:photos/` both name the keys `photos/...`).
pub fn dir_prefix(prefix: &[u8]) -> Vec<u8> {
    let mut p = prefix.to_vec();
    if !p.is_empty() && !p.ends_with(b"/") {
        p.push(b'/');
    }
    p
}

/// The relative path a key (less its prefix) stands for under a destination directory, or why it would land
/// outside it or cannot be a file name: empty, absolute, an empty, `.` or `..` segment, a NUL byte.
pub fn relative_path(rel: &[u8]) -> Result<PathBuf, &'static str> {
    if rel.is_empty() {
        return Err("an empty name");
    }
    if rel.starts_with(b"/") {
        return Err("an absolute path");
    }
    for segment in rel.split(|&b| b == b'/') {
        match segment {
            b"" => return Err("an empty path segment (// or a trailing /)"),
            b"." | b".." => return Err("a . or .. path segment"),
            s if s.contains(&0) => return Err("a NUL byte"),
            _ => {}
        }
    }
    Ok(PathBuf::from(OsStr::from_bytes(rel)))
}

/// What a bulk command that reads the store says when there is no embedded store at `dir`: not found.
pub fn no_store(dir: &Path) -> Failure {
    Failure::new(
        Failure::NOT_FOUND,
        format!(
            "not found: there is no store at {} yet (pass --store or set SALTBLOB_STORE)",
            dir.display()
        ),
    )
}

/// The last `/`-separated segment of a key: the file name a single key is copied to in a directory.
pub fn base_name(key: &[u8]) -> &[u8] {
    key.rsplit(|&b| b == b'/').next().unwrap_or(key)
}

/// A regular file found by [`walk`] (or a symlink to one).
#[derive(Clone, Debug)]
pub struct LocalFile {
    /// Its path.
    pub path: PathBuf,
    /// Its path under the walked root, `/`-separated bytes.
    pub rel: Vec<u8>,
    /// Its size when walked.
    pub size: u64,
}

/// What a walk of a local tree found.
#[derive(Debug, Default)]
pub struct Walk {
    /// The regular files (and symlinks to regular files), by relative path.
    pub files: BTreeMap<Vec<u8>, LocalFile>,
    /// What could not be read (an unreadable directory, a dangling symlink): path and error.
    pub problems: Vec<(String, String)>,
    /// What was passed over on purpose (symlinks to directories, FIFOs, sockets, devices): path and why.
    pub passed_over: Vec<(String, &'static str)>,
}

/// Walks the tree under `root`: regular files, and symlinks to regular files (followed); a symlink to a
/// directory is not followed (so a link loop is not walked), nor is anything that is not a regular file.
/// `root` itself may be a symlink to a directory. A tree that does not exist is an empty walk.
pub fn walk(root: &Path) -> Walk {
    let mut out = Walk::default();
    let mut dirs: Vec<(PathBuf, Vec<u8>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if rel.is_empty() && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.problems.push((shown(&dir), one_line(&e)));
                continue;
            }
        };
        let mut names: Vec<OsString> = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => names.push(entry.file_name()),
                Err(e) => out.problems.push((shown(&dir), one_line(&e))),
            }
        }
        names.sort();
        // Depth first, in name order: subdirectories are pushed in reverse so that the first is walked first.
        let mut subdirs = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let mut child_rel = rel.clone();
            if !child_rel.is_empty() {
                child_rel.push(b'/');
            }
            child_rel.extend_from_slice(name.as_bytes());
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) => {
                    out.problems.push((shown(&path), one_line(&e)));
                    continue;
                }
            };
            let meta = if meta.file_type().is_symlink() {
                match std::fs::metadata(&path) {
                    Ok(target) if target.is_dir() => {
                        out.passed_over
                            .push((shown(&path), "a symlink to a directory (not followed)"));
                        continue;
                    }
                    Ok(target) => target,
                    Err(e) => {
                        out.problems
                            .push((shown(&path), format!("dangling symlink: {}", one_line(&e))));
                        continue;
                    }
                }
            } else {
                meta
            };
            if meta.is_dir() {
                subdirs.push((path, child_rel));
            } else if meta.is_file() {
                out.files.insert(
                    child_rel.clone(),
                    LocalFile {
                        path,
                        rel: child_rel,
                        size: meta.len(),
                    },
                );
            } else {
                out.passed_over.push((
                    shown(&path),
                    "not a regular file (a FIFO, socket or device)",
                ));
            }
        }
        dirs.extend(subdirs.into_iter().rev());
    }
    out
}

/// The counts of a bulk command, and its errors, printed at its end.
#[derive(Debug, Default)]
pub struct Summary {
    /// Files or blobs copied (or, in a dry run, that would be).
    pub copied: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Destinations left as they were: already the same, or kept by `--no-clobber`; things passed over.
    pub skipped: u64,
    /// Destination entries (or keys) deleted (or, in a dry run, that would be).
    pub deleted: u64,
    /// Keys that held no blob (`rm`).
    pub not_found: u64,
    /// What failed: each one is in `errors`.
    pub failed: u64,
    /// What failed: path (or key) as printed, and the error.
    pub errors: Vec<(String, String)>,
}

impl Summary {
    /// Records a failure of `path`, and says it on stderr at once.
    pub fn fail(&mut self, path: String, error: String) {
        eprintln!("saltblob: error: {path}: {error}");
        self.failed += 1;
        self.errors.push((path, error));
    }

    /// Records what a walk could not read (failures) and passed over (skipped, said on stderr).
    pub fn record_walk(&mut self, walk: &mut Walk) {
        for (path, error) in walk.problems.drain(..) {
            self.fail(path, error);
        }
        for (path, why) in walk.passed_over.drain(..) {
            eprintln!("saltblob: skipping {path}: {why}");
            self.skipped += 1;
        }
    }

    /// The summary as one JSON object with `fields` (of `copied`, `bytes`, `skipped`, `deleted`, `not_found`,
    /// `failed`) and `errors`.
    pub fn json(&self, fields: &[&str], dry_run: Option<bool>) -> serde_json::Value {
        let mut v = serde_json::Map::new();
        for &field in fields {
            let n = match field {
                "copied" => self.copied,
                "bytes" => self.bytes,
                "skipped" => self.skipped,
                "deleted" => self.deleted,
                "not_found" => self.not_found,
                _ => self.failed,
            };
            v.insert(field.to_owned(), n.into());
        }
        v.insert("failed".into(), self.failed.into());
        v.insert(
            "errors".into(),
            self.errors
                .iter()
                .map(|(path, error)| serde_json::json!({ "path": path, "error": error }))
                .collect(),
        );
        if let Some(dry_run) = dry_run {
            v.insert("dry_run".into(), dry_run.into());
        }
        serde_json::Value::Object(v)
    }

    /// The outcome of the command: a failure naming how many failed, if any did.
    pub fn outcome(&self) -> Result<(), Failure> {
        if self.failed == 0 {
            return Ok(());
        }
        Err(Failure::new(
            Failure::FAILED,
            format!(
                "{} failed (named above: {})",
                self.failed,
                self.errors
                    .iter()
                    .take(3)
                    .map(|(p, _)| p.as_str())
                    .chain((self.errors.len() > 3).then_some("..."))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    /// Prints the summary of a copy (`cp`, `sync`): JSON on stdout with `json`, else a line on stderr.
    pub fn print_copy(&self, json: bool, dry_run: Option<bool>) {
        if json {
            let mut fields = vec!["copied", "bytes", "skipped"];
            if dry_run.is_some() {
                fields.push("deleted");
            }
            println!("{}", self.json(&fields, dry_run));
            return;
        }
        let would = if dry_run == Some(true) {
            "would have "
        } else {
            ""
        };
        let mut line = format!(
            "{would}copied {} file(s) ({}), skipped {}",
            self.copied,
            human::short(self.bytes),
            self.skipped
        );
        if dry_run.is_some() {
            line.push_str(&format!(", {would}deleted {}", self.deleted));
        }
        line.push_str(&format!(", failed {}", self.failed));
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_would_escape_are_refused() {
        for bad in [
            &b""[..],
            b"/etc/passwd",
            b"a//b",
            b"a/",
            b"../x",
            b"a/../../x",
            b"./a",
            b"a\0b",
        ] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            relative_path(b"a/b\xff/c..d").ok(),
            Some(PathBuf::from(OsStr::from_bytes(b"a/b\xff/c..d")))
        );
        assert_eq!(base_name(b"a/b/c"), b"c");
        assert_eq!(base_name(b"c"), b"c");
        assert_eq!(dir_prefix(b"p"), b"p/");
        assert_eq!(dir_prefix(b"p/"), b"p/");
        assert_eq!(dir_prefix(b""), b"");
    }

    #[test]
    fn sides_are_the_store_with_sb_and_local_otherwise() {
        assert!(matches!(Side::parse(OsStr::new("sb:a%20b")), Ok(Side::Store(k)) if k == b"a b"));
        assert!(matches!(Side::parse(OsStr::new("sb:")), Ok(Side::Store(k)) if k.is_empty()));
        assert!(matches!(
            Side::parse(OsStr::new("./sb:x")),
            Ok(Side::Local(_))
        ));
        assert!(Side::parse(OsStr::new("sb:50%")).is_err());
        assert!(Side::parse(OsStr::from_bytes(b"sb:\xff")).is_err());
        assert!(matches!(
            Side::parse(OsStr::from_bytes(b"d/\xff")),
            Ok(Side::Local(_))
        ));
    }
}
