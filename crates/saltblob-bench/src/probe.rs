//! `saltblob probe`: the physical reference of a store, printed, and written as JSON when asked.
//!
//! What is measured (the measurements live in the private modules `reference`, `direct` and `rows`; their types
//! are re-exported here):
//! - **Embedded store** (a directory): the block device behind it ([`crate::device`]) and sequential O_DIRECT
//!   bandwidth on a pre-sized file in that directory, at 128 KiB, 1 MiB and 4 MiB requests and queue depths 1 to
//!   16, with the depth where bandwidth stops growing, and the extent I/O settings those knees suggest
//!   ([`ExtentSettings`]); then dd's pattern (1 MiB appends to a file not pre-sized).
//! - **Any other store** (a cluster): single-row writes and reads of chunk-size values through the backend
//!   ([`saltblob::ChunkStore::put_chunks`] of one chunk on a scratch key) at the bench concurrency, then deleted.

use saltblob::{Error, Result};

use crate::args::{ProbeArgs, Settings};
use crate::output::write_output;
use crate::reference::device_probe;
use crate::report;
use crate::rows::rows_probe;

pub use crate::direct::{
    DEPTHS, DeviceProbe, ExtentSettings, KNEE_GAIN, Knee, Point, REQUEST_SIZES, extent_settings,
    knees,
};
pub use crate::reference::{ProbeReport, local_dir};
pub use crate::rows::RowsProbe;

/// `saltblob probe`: measures the reference of the store at `url`, prints it, and writes JSON when asked.
/// The store-level (scheduler) parameters of the URL are accepted and play no part: the probe measures under
/// the store.
pub async fn probe(url: &str, args: &ProbeArgs, quiet: bool) -> Result<ProbeReport> {
    let (url, _) = saltblob::split_store_params(url, saltblob::StoreConfig::default())?;
    let url = url.as_str();
    let settings = Settings {
        options: args.probe.clone(),
        concurrency: args.concurrency,
        value_bytes: args
            .chunk_size
            .unwrap_or(u64::from(saltblob::LayoutPolicy::default().chunk_size)),
        quiet,
    };
    let report = match args.dir.clone().or_else(|| local_dir(url)) {
        Some(dir) => device_probe(&dir, &settings).await?,
        None => {
            let backend = saltblob::open_backend(url).await?;
            ProbeReport::Rows(rows_probe(backend, &settings).await?)
        }
    };
    print!("{}", report::probe_text(&report));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::invalid("json", e.to_string()))?;
        write_output(path, &text)?;
    }
    Ok(report)
}
