//! Clean-up of the blob files that a crashed process left unfinished.
//!
//! RocksDB writes a blob file during a flush or compaction and adds it to the database (its MANIFEST) only
//! after the file's footer is written. A process killed in between leaves a file without a footer that nothing
//! references, and RocksDB never deletes it: its obsolete-file purge keeps every footer-less blob file, because
//! it cannot tell one from a file that blob direct writes are filling (saltblob does not use those). So every
//! crash during a flush would leak up to a memtable's worth of disk. [`remove_unfinished`] removes exactly the
//! files that are
//!
//! - RocksDB's own: named `<number>.blob` as RocksDB names blob files, and starting with the blob-file magic
//!   number (or empty: killed before its first byte);
//! - older than this process's use of the database: listed before the open (RocksDB never reuses a file
//!   number: at open it moves its next file number past every file in the directory), so no background job of
//!   this process is writing them;
//! - not live: not a blob file of the current version of any column family;
//! - unfinished: without a footer (RocksDB deletes the finished ones that are not live itself).
//!
//! Anything else (a foreign file, a file it cannot read, every file when the live set cannot be listed) is kept.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use rocksdb::DB;

/// Magic number at the start of a blob file's header and of its footer (RocksDB's blob log format).
const BLOB_MAGIC: u32 = 0x0024_8f37;
/// Sizes of a blob file's header and footer.
const HEADER_LEN: u64 = 30;
const FOOTER_LEN: u64 = 32;
/// Property listing the current version's files of a column family, blob files included.
const FILES_PROPERTY: &str = "rocksdb.sstables";
/// Property counting the current version's blob files of a column family.
const BLOB_COUNT_PROPERTY: &str = "rocksdb.num-blob-files";

/// A file named as RocksDB names its blob files (`000123.blob`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlobFile {
    /// The file number in its name.
    pub number: u64,
    /// Where it is.
    pub path: PathBuf,
}

/// The files in `dir` named as RocksDB's blob files; empty if `dir` cannot be read. Call it before opening the
/// database, so that the list holds only files of earlier processes.
pub(crate) fn named(dir: &Path) -> Vec<BlobFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let digits = name.to_str()?.strip_suffix(".blob")?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(BlobFile {
                number: digits.parse().ok()?,
                path: entry.path(),
            })
        })
        .collect()
}

/// Removes the files of `earlier` (from [`named`], listed before `db` was opened) that are RocksDB's own,
/// unfinished and not live in `db`; returns the paths removed. Removes nothing when the live blob files cannot
/// be listed.
pub(crate) fn remove_unfinished(
    db: &DB,
    column_families: &[&str],
    earlier: &[BlobFile],
) -> Vec<PathBuf> {
    let Ok(live) = live_numbers(db, column_families) else {
        return Vec::new();
    };
    earlier
        .iter()
        .filter(|f| !live.contains(&f.number) && is_unfinished_own(&f.path))
        .filter(|f| std::fs::remove_file(&f.path).is_ok())
        .map(|f| f.path.clone())
        .collect()
}

/// The numbers of the blob files in the current version of `column_families`. The property text it reads
/// is RocksDB's debug listing; its count is checked against `rocksdb.num-blob-files`, so that a change of that
/// format fails here rather than making live files look dead.
fn live_numbers(db: &DB, column_families: &[&str]) -> Result<BTreeSet<u64>, String> {
    let mut live = BTreeSet::new();
    for name in column_families {
        let handle = db
            .cf_handle(name)
            .ok_or_else(|| format!("column family {name} is missing"))?;
        let listing = db
            .property_value_cf(handle, FILES_PROPERTY)
            .map_err(|e| e.into_string())?
            .ok_or_else(|| format!("{FILES_PROPERTY} is not available"))?;
        let count = db
            .property_int_value_cf(handle, BLOB_COUNT_PROPERTY)
            .map_err(|e| e.into_string())?
            .ok_or_else(|| format!("{BLOB_COUNT_PROPERTY} is not available"))?;
        let numbers = blob_numbers_in_listing(&listing);
        if numbers.len() as u64 != count {
            return Err(format!(
                "column family {name}: {FILES_PROPERTY} names {} blob files, {BLOB_COUNT_PROPERTY} counts {count}",
                numbers.len()
            ));
        }
        live.extend(numbers);
    }
    Ok(live)
}

/// The blob file numbers in a `rocksdb.sstables` listing: its lines `blob_file_number: N total_blob_count: …`.
fn blob_numbers_in_listing(listing: &str) -> BTreeSet<u64> {
    listing
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("blob_file_number: "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Whether the file at `path` is a blob file of RocksDB's (it starts with the magic number, or is empty or a
/// prefix of it) without a footer. `false` when it cannot be read.
fn is_unfinished_own(path: &Path) -> bool {
    let check = || -> std::io::Result<bool> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut start = Vec::with_capacity(4);
        (&mut file).take(4).read_to_end(&mut start)?;
        let magic = BLOB_MAGIC.to_le_bytes();
        if !magic.starts_with(&start) {
            return Ok(false);
        }
        if len < HEADER_LEN + FOOTER_LEN {
            return Ok(true);
        }
        let mut footer_magic = [0u8; 4];
        file.seek(SeekFrom::Start(len - FOOTER_LEN))?;
        file.read_exact(&mut footer_magic)?;
        Ok(footer_magic != magic)
    };
    check().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob_bytes(len: usize, footer: bool) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        bytes[..4].copy_from_slice(&BLOB_MAGIC.to_le_bytes());
        if footer {
            let at = len - FOOTER_LEN as usize;
            bytes[at..at + 4].copy_from_slice(&BLOB_MAGIC.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn only_rocksdb_names_are_candidates() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "000123.blob",
            "7.blob",
            "x.blob",
            ".blob",
            "0001a.blob",
            "000124.sst",
            "000125.blob.bak",
        ] {
            std::fs::write(dir.path().join(name), b"").expect("write");
        }
        let mut numbers: Vec<u64> = named(dir.path()).iter().map(|f| f.number).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, [7, 123]);
        assert!(named(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn only_unfinished_files_of_rocksdb_qualify() {
        let dir = tempfile::tempdir().expect("tempdir");
        let case = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            is_unfinished_own(&path)
        };
        assert!(case("1.blob", &blob_bytes(200, false)), "no footer");
        assert!(
            case("2.blob", &blob_bytes(40, false)),
            "shorter than header and footer"
        );
        assert!(case("3.blob", b""), "killed before its first byte");
        assert!(
            case("4.blob", &BLOB_MAGIC.to_le_bytes()[..2]),
            "a torn magic number"
        );
        assert!(!case("5.blob", &blob_bytes(200, true)), "finished");
        assert!(!case("6.blob", &[0u8; 200]), "foreign: no magic number");
        assert!(!case("7.blob", b"my notes"), "foreign: no magic number");
        assert!(!is_unfinished_own(&dir.path().join("8.blob")), "unreadable");
    }

    #[test]
    fn live_blob_numbers_are_read_from_the_listing() {
        let listing = "--- level 0 --- version# 1 ---\n 12:1100[5 .. 9]['k' seq:5, type:1 .. 'z' seq:9, type:1] blob_file:11\n\
             --- blob files --- version# 1 ---\n\
             blob_file_number: 11 total_blob_count: 3 total_blob_bytes: 9000 checksum_method:  checksum_value:  linked_ssts: { 12 } garbage_blob_count: 0 garbage_blob_bytes: 0\n\
             blob_file_number: 123 total_blob_count: 1 total_blob_bytes: 10 checksum_method:  checksum_value:  linked_ssts: { } garbage_blob_count: 0 garbage_blob_bytes: 0\n";
        assert_eq!(blob_numbers_in_listing(listing), BTreeSet::from([11, 123]));
        assert!(blob_numbers_in_listing("").is_empty());
    }
}
