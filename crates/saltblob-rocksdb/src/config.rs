//! Configuration of the embedded backend, from code or from a `rocksdb://` URL.

use std::path::PathBuf;
use std::str::FromStr;

use saltblob_core::{Error, Result};

/// URL scheme of the embedded backend.
pub const SCHEME: &str = "rocksdb";

/// Compression RocksDB applies to blob files (chunk data). saltblob already compresses chunks when asked, so
/// the default is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlobCompression {
    /// No compression. The default.
    #[default]
    None,
    /// LZ4.
    Lz4,
    /// zstd.
    Zstd,
}

impl FromStr for BlobCompression {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Self::None),
            "lz4" => Ok(Self::Lz4),
            "zstd" => Ok(Self::Zstd),
            _ => Err(Error::invalid(
                "blob_compression",
                format!("\"{s}\"; use none, lz4 or zstd"),
            )),
        }
    }
}

/// Configuration of a [`crate::RocksStore`]. Chunk data lives in RocksDB blob files (key-value separation):
/// values of at least `min_blob_size` bytes are kept out of the LSM tree.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct RocksConfig {
    /// Directory of the database; created if missing.
    pub path: PathBuf,
    /// Whether each manifest commit (and delete) fsyncs the write-ahead log before it returns. With `false` a
    /// commit survives a crash of the process but may be lost with the machine (power loss, kernel panic).
    /// Defaults to `true`.
    pub sync: bool,
    /// Values of at least this many bytes go to blob files. Defaults to 4096.
    pub min_blob_size: u64,
    /// Target size of one blob file. Defaults to 256 MiB.
    pub blob_file_size: u64,
    /// Compression of blob files. Defaults to none.
    pub blob_compression: BlobCompression,
    /// Whether compaction relocates live blobs out of old blob files so that garbage is freed. Defaults to `true`.
    pub blob_gc: bool,
    /// Fraction of the oldest blob files that blob garbage collection considers. Defaults to 0.25.
    pub blob_gc_age_cutoff: f64,
    /// Garbage ratio of the oldest blob files above which compaction is forced to collect them. Defaults to 0.5.
    pub blob_gc_force_threshold: f64,
    /// Size of one memtable of the chunk column family (at most 3 exist at once, so this bounds the memory that
    /// buffered chunk data takes). Defaults to 16 MiB.
    pub write_buffer_size: usize,
    /// When garbage collection has freed chunks and more than this fraction of the remaining blob-file bytes is
    /// garbage, it compacts with blob garbage collection over every blob file, rewriting the live chunks so that
    /// disk usage comes back to the live data. Lower keeps the disk tighter, higher rewrites less. Defaults to
    /// 0.1.
    pub space_reclaim_threshold: f64,
}

impl RocksConfig {
    /// Defaults for a database in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            sync: true,
            min_blob_size: 4096,
            blob_file_size: 256 << 20,
            blob_compression: BlobCompression::None,
            blob_gc: true,
            blob_gc_age_cutoff: 0.25,
            blob_gc_force_threshold: 0.5,
            write_buffer_size: 16 << 20,
            space_reclaim_threshold: 0.1,
        }
    }

    /// Sets [`RocksConfig::sync`].
    pub fn with_sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// Parses `rocksdb:///absolute/path?key=value&...` (or `rocksdb://relative/path`). Keys: `sync`,
    /// `min_blob_size`, `blob_file_size`, `blob_compression`, `blob_gc`, `blob_gc_age_cutoff`,
    /// `blob_gc_force_threshold`, `write_buffer_size`, `space_reclaim_threshold`.
    pub fn from_url(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        let rest = url.strip_prefix("rocksdb://").ok_or_else(|| {
            bad(
                "an embedded store URL starts with rocksdb://, e.g. rocksdb:///var/lib/saltblob"
                    .into(),
            )
        })?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(bad(
                "the path is empty; e.g. rocksdb:///var/lib/saltblob".into()
            ));
        }
        let mut config = Self::new(path);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("\"{pair}\" is not key=value")))?;
            let num = |what: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{what}={v} is not a whole number of bytes")))
            };
            let ratio = |what: &str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=1.0).contains(f))
                    .ok_or_else(|| bad(format!("{what}={v} is not a number between 0 and 1")))
            };
            let flag = |what: &str| match v {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(bad(format!("{what}={v} is not true or false"))),
            };
            match k {
                "sync" => config.sync = flag(k)?,
                "min_blob_size" => config.min_blob_size = num(k)?,
                "blob_file_size" => config.blob_file_size = num(k)?.max(1),
                "blob_compression" => config.blob_compression = v.parse()?,
                "blob_gc" => config.blob_gc = flag(k)?,
                "blob_gc_age_cutoff" => config.blob_gc_age_cutoff = ratio(k)?,
                "blob_gc_force_threshold" => config.blob_gc_force_threshold = ratio(k)?,
                "space_reclaim_threshold" => config.space_reclaim_threshold = ratio(k)?,
                "write_buffer_size" => {
                    config.write_buffer_size =
                        usize::try_from(num(k)?.max(1 << 20)).unwrap_or(usize::MAX)
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option \"{k}\"; accepted: sync, min_blob_size, blob_file_size, blob_compression, \
                         blob_gc, blob_gc_age_cutoff, blob_gc_force_threshold, write_buffer_size, \
                         space_reclaim_threshold"
                    )));
                }
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults_and_options() {
        let c = RocksConfig::from_url("rocksdb:///tmp/x").expect("parses");
        assert_eq!(c, RocksConfig::new("/tmp/x"));
        let c = RocksConfig::from_url(
            "rocksdb://rel/dir?sync=false&blob_compression=zstd&min_blob_size=100",
        )
        .expect("parses");
        assert_eq!(c.path, PathBuf::from("rel/dir"));
        assert!(!c.sync);
        assert_eq!(
            (c.blob_compression, c.min_blob_size),
            (BlobCompression::Zstd, 100)
        );
        for bad in [
            "rocksdb://",
            "cql://x",
            "rocksdb:///x?sync=maybe",
            "rocksdb:///x?nope=1",
            "rocksdb:///x?blob_gc_age_cutoff=2",
        ] {
            let err = RocksConfig::from_url(bad).expect_err(bad).to_string();
            assert!(err.starts_with("invalid store URL"), "{bad}: {err}");
        }
    }
}
