//! The physical reference: what the storage under a store can do, measured without saltblob in the way —
//! the device behind an embedded store's directory ([`crate::direct`]), or single-row throughput through any
//! other store's backend ([`crate::rows`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use saltblob::{ChunkStore, Error, Result};
use serde::Serialize;

use crate::args::Settings;
use crate::direct::{self, DeviceProbe};
use crate::rows::{self, RowsProbe};

/// The reference measurement.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProbeReport {
    /// The block device behind an embedded store.
    Device(DeviceProbe),
    /// Single-row throughput of a cluster (or any non-local) store.
    Rows(RowsProbe),
}

impl ProbeReport {
    /// The reference write bandwidth in MiB/s: the best O_DIRECT write point, or the single-row write
    /// throughput.
    pub fn write_mib_s(&self) -> f64 {
        match self {
            ProbeReport::Device(d) => d.write_mib_s,
            ProbeReport::Rows(r) => r.write_mib_s,
        }
    }

    /// What `dd bs=1M oflag=direct` measures on the device (1 MiB appends at depth 1 to a file not pre-sized),
    /// MiB/s; `None` for the single-row reference.
    pub fn dd_write_mib_s(&self) -> Option<f64> {
        match self {
            ProbeReport::Device(d) => Some(d.append_1mib_depth1_mib_s),
            ProbeReport::Rows(_) => None,
        }
    }

    /// dd's pattern made durable (ending with `fdatasync`, as a put must), MiB/s; `None` for the single-row
    /// reference.
    pub fn durable_write_mib_s(&self) -> Option<f64> {
        match self {
            ProbeReport::Device(d) => Some(d.durable_1mib_depth1_mib_s),
            ProbeReport::Rows(_) => None,
        }
    }

    /// The reference read bandwidth in MiB/s.
    pub fn read_mib_s(&self) -> f64 {
        match self {
            ProbeReport::Device(d) => d.read_mib_s,
            ProbeReport::Rows(r) => r.read_mib_s,
        }
    }
}

/// The reference for the store at `url` whose backend is `backend`: the device probe for an embedded store,
/// the single-row probe otherwise.
pub(crate) async fn measure(
    url: &str,
    backend: &Arc<dyn ChunkStore>,
    settings: &Settings,
) -> Result<ProbeReport> {
    match local_dir(url) {
        Some(dir) => device_probe(&dir, settings).await,
        None => Ok(ProbeReport::Rows(
            rows::rows_probe(Arc::clone(backend), settings).await?,
        )),
    }
}

/// The directory of an embedded store URL, or its nearest existing ancestor (the probe creates nothing but
/// its test file); `None` for stores that are not local directories.
pub fn local_dir(url: &str) -> Option<PathBuf> {
    #[cfg(feature = "rocksdb")]
    if let Ok(config) = saltblob_rocksdb::RocksConfig::from_url(url) {
        let mut dir = config.path;
        loop {
            if dir.as_os_str().is_empty() {
                return Some(PathBuf::from("."));
            }
            if dir.is_dir() {
                return Some(dir);
            }
            if !dir.pop() {
                return Some(PathBuf::from("."));
            }
        }
    }
    let _ = url;
    None
}

/// The device probe of `dir`, run on a blocking thread.
pub(crate) async fn device_probe(dir: &Path, settings: &Settings) -> Result<ProbeReport> {
    let dir = dir.to_path_buf();
    let settings = settings.clone();
    let limit = settings.point_limit()?;
    tokio::task::spawn_blocking(move || direct::measure_device(&dir, &settings, limit))
        .await
        .map_err(|e| Error::backend("probe", format!("probe task failed: {e}"), false))?
        .map(ProbeReport::Device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ProbeOptions;
    use crate::direct::{DEPTHS, REQUEST_SIZES};

    #[tokio::test]
    async fn a_tiny_device_probe_measures_every_point_and_cleans_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = Settings {
            options: ProbeOptions {
                probe_size: 8 << 20,
                probe_seconds: 0.2,
            },
            concurrency: 2,
            value_bytes: 65536,
            quiet: true,
        };
        match device_probe(dir.path(), &settings).await {
            Ok(ProbeReport::Device(d)) => {
                assert_eq!(d.points.len(), 2 * REQUEST_SIZES.len() * DEPTHS.len());
                assert_eq!(d.knees.len(), 2 * REQUEST_SIZES.len());
                assert!(d.points.iter().all(|p| p.bytes > 0 && p.mib_s > 0.0));
                assert!(d.write_mib_s >= d.write_1mib_depth1_mib_s);
                assert!(d.append_1mib_depth1_mib_s > 0.0);
                assert!(d.durable_1mib_depth1_mib_s > 0.0 && d.durable_sync_ms >= 0.0);
            }
            Ok(other) => panic!("not a device probe: {other:?}"),
            // Some file systems (tmpfs on old kernels) refuse O_DIRECT; the probe must say so, not crash.
            Err(e) => assert!(e.to_string().contains("O_DIRECT"), "{e}"),
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("lists").collect();
        assert!(left.is_empty(), "probe left files behind: {left:?}");
    }
}
