//! What the store returns besides bytes: [`Manifest`] (a version: `put`, `head`), [`Description`] (`describe`),
//! [`ListEntry`] (`list`), and the reports of `gc` and `fsck` as dicts.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use saltblob::{FsckReport, GcReport, Layout, ManifestBody};

/// One committed version of a blob: what `put` wrote, what `head` reads.
#[pyclass(module = "saltblob", frozen, get_all)]
#[derive(Clone, Debug)]
pub(crate) struct Manifest {
    /// The version id (time-ordered; give it to `if_version=`).
    version: String,
    /// Size in bytes.
    size: u64,
    /// When the put started, in Unix microseconds.
    created_micros: u64,
    /// When the version expires, in Unix microseconds; `None` for never.
    expires_micros: Option<u64>,
    /// BLAKE3-256 of the blob, as hex.
    digest: String,
    /// `inline`, `single-partition`, `salted` or `segmented`.
    layout: &'static str,
    /// Bytes per chunk; 0 for an inline blob.
    chunk_size: u32,
    /// Number of chunks; 0 for an inline blob.
    chunk_count: u64,
    /// Number of partitions the chunks are spread over; 0 for an inline blob.
    salt_count: u32,
    /// Compression tried on each chunk (`none`, `zstd`, `lz4`).
    codec: &'static str,
    /// Bytes the chunks take as stored; 0 for an inline blob.
    stored_bytes: u64,
    /// The MIME type given to the put, if any.
    content_type: Option<String>,
    /// The user metadata given to the put.
    metadata: BTreeMap<String, String>,
    /// The key the version is sealed under (`name` or `name version N`, as the provider names it; for a customer
    /// key, its fingerprint, as `saltblob.customer_key_id` gives it); `None` for plaintext.
    encryption_key: Option<String>,
    /// Who holds that key: `local` (the store's keyring), `aws-kms`, or `customer` (the caller gives it with each
    /// read, `customer_key=`); `None` for plaintext.
    encryption_provider: Option<&'static str>,
}

impl From<&saltblob::Manifest> for Manifest {
    fn from(m: &saltblob::Manifest) -> Self {
        let (chunk_size, chunk_count, salt_count) = match m.layout() {
            Layout::Inline => (0, 0, 0),
            Layout::Chunked(l) => (l.chunk_size, l.chunk_count, l.salt_count),
        };
        let codec = match &m.body {
            ManifestBody::Chunked { codec, .. } => codec.name(),
            _ => saltblob::Codec::None.name(),
        };
        Self {
            version: m.version.to_string(),
            size: m.size,
            created_micros: m.created_micros,
            expires_micros: m.expires_micros,
            digest: m.digest_hex(),
            layout: m.layout_kind(),
            chunk_size,
            chunk_count,
            salt_count,
            codec,
            stored_bytes: m.stored_bytes(),
            content_type: m.content_type.clone(),
            metadata: m.metadata.clone(),
            // A customer or KMS key's version names the form of its fingerprint or encryption context, not a
            // version of the key: the name alone.
            encryption_key: m.sealed_by().map(|s| match s.kek.provider {
                saltblob::encryption::CUSTOMER | saltblob::encryption::AWS_KMS => {
                    s.kek.name.clone()
                }
                _ => s.kek.to_string().replace('"', ""),
            }),
            encryption_provider: m.sealed_by().map(|s| s.kek.provider),
        }
    }
}

#[pymethods]
impl Manifest {
    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Manifest(version='{}', size={}, layout='{}', chunk_size={}, chunk_count={}, salt_count={}, digest='{}')",
            self.version,
            self.size,
            self.layout,
            self.chunk_size,
            self.chunk_count,
            self.salt_count,
            self.digest
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Manifest>()
            .is_ok_and(|o| o.get().version == self.version && o.get().digest == self.digest)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.version.hash(&mut h);
        h.finish()
    }
}

/// How one key is laid out (`describe`).
#[pyclass(module = "saltblob", frozen, get_all)]
pub(crate) struct Description {
    /// The key.
    key: Py<PyBytes>,
    /// The current version.
    manifest: Manifest,
    /// `inline`, `single-partition`, `salted` or `segmented`.
    layout: &'static str,
    /// Bytes under each salt (partition), in salt order; empty for an inline blob.
    bytes_per_salt: Vec<u64>,
}

impl Description {
    pub(crate) fn new(py: Python<'_>, d: &saltblob::Description) -> Self {
        Self {
            key: PyBytes::new(py, &d.key).unbind(),
            manifest: Manifest::from(&d.manifest),
            layout: d.layout_kind,
            bytes_per_salt: d.bytes_per_salt.clone(),
        }
    }
}

#[pymethods]
impl Description {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Description(key={}, layout='{}', salts={}, manifest={})",
            self.key
                .bind(py)
                .repr()
                .map_or_else(|_| "?".to_owned(), |r| r.to_string()),
            self.layout,
            self.bytes_per_salt.len(),
            self.manifest.__repr__()
        )
    }
}

/// One blob of a listing: its key and manifest, or, when its stored manifest is damaged, the error (a `Corrupt`
/// exception) and no manifest. The listing goes on past a damaged key.
#[pyclass(module = "saltblob", frozen, get_all)]
pub(crate) struct ListEntry {
    /// The key.
    key: Py<PyBytes>,
    /// Its current version; `None` when its manifest is damaged.
    manifest: Option<Manifest>,
    /// The `Corrupt` exception of a damaged manifest; `None` otherwise.
    error: Option<Py<PyAny>>,
}

impl ListEntry {
    pub(crate) fn new(py: Python<'_>, entry: saltblob::ListEntry) -> Self {
        let (manifest, error) = match entry.manifest {
            Ok(m) => (Some(Manifest::from(&m)), None),
            Err(e) => (
                None,
                Some(crate::errors::py_err(e).into_value(py).into_any()),
            ),
        };
        Self {
            key: PyBytes::new(py, &entry.key).unbind(),
            manifest,
            error,
        }
    }
}

#[pymethods]
impl ListEntry {
    fn __repr__(&self, py: Python<'_>) -> String {
        let key = self
            .key
            .bind(py)
            .repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string());
        match &self.manifest {
            Some(m) => format!("ListEntry(key={key}, manifest={})", m.__repr__()),
            None => format!("ListEntry(key={key}, damaged)"),
        }
    }
}

/// `gc`'s report as a dict (the `GcReport` TypedDict of the stubs).
pub(crate) fn gc_report(py: Python<'_>, r: &GcReport) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("dry_run", r.dry_run)?;
    d.set_item("puts_in_flight", r.puts_in_flight)?;
    d.set_item("stale_intents", r.stale_intents)?;
    d.set_item("abandoned_puts", r.abandoned_puts)?;
    d.set_item("abandoned_chunks", r.abandoned_chunks)?;
    d.set_item("expired", r.expired)?;
    d.set_item("reclaimed_versions", r.reclaim.versions)?;
    d.set_item("reclaimed_chunks", r.reclaim.chunks)?;
    d.set_item("reclaimed_bytes", r.reclaim.bytes)?;
    d.set_item("awaiting_grace", r.reclaim.next_due_micros.is_some())?;
    match &r.space {
        Some(s) => {
            d.set_item("space_bytes_before", s.bytes_before)?;
            d.set_item("space_bytes_after", s.bytes_after)?;
        }
        None => {
            d.set_item("space_bytes_before", py.None())?;
            d.set_item("space_bytes_after", py.None())?;
        }
    }
    Ok(d.unbind())
}

/// `fsck`'s report as a dict (the `FsckReport` TypedDict of the stubs).
pub(crate) fn fsck_report(py: Python<'_>, r: &FsckReport) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("blobs", r.blobs)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("chunks", r.chunks)?;
    let damaged = PyList::empty(py);
    for x in &r.damaged {
        let item = PyDict::new(py);
        item.set_item("key", PyBytes::new(py, &x.key))?;
        item.set_item("version", x.version.map(|v| v.to_string()))?;
        item.set_item("problem", &x.problem)?;
        damaged.append(item)?;
    }
    d.set_item("damaged", damaged)?;
    let orphans = PyList::empty(py);
    for o in &r.orphans {
        let item = PyDict::new(py);
        item.set_item("key", PyBytes::new(py, &o.key))?;
        item.set_item("version", o.version.to_string())?;
        item.set_item("chunks", o.chunks)?;
        item.set_item(
            "reason",
            match o.reason {
                saltblob::OrphanReason::Abandoned => "abandoned",
                saltblob::OrphanReason::Unreferenced => "unreferenced",
            },
        )?;
        item.set_item("removed", o.removed)?;
        orphans.append(item)?;
    }
    d.set_item("orphans", orphans)?;
    d.set_item("puts_in_flight", r.puts_in_flight)?;
    d.set_item("awaiting_reclaim", r.awaiting_reclaim)?;
    let unverified = PyList::empty(py);
    for u in &r.unverified {
        let item = PyDict::new(py);
        item.set_item("key", PyBytes::new(py, &u.key))?;
        item.set_item("version", u.version.to_string())?;
        item.set_item("reason", &u.reason)?;
        unverified.append(item)?;
    }
    d.set_item("unverified", unverified)?;
    let index = match &r.index {
        None => None,
        Some(i) => {
            let item = PyDict::new(py);
            item.set_item("name", &i.name)?;
            item.set_item("manifests", i.manifests)?;
            item.set_item("entries", i.entries)?;
            let missing = PyList::empty(py);
            for k in &i.missing {
                missing.append(PyBytes::new(py, k))?;
            }
            item.set_item("missing", missing)?;
            item.set_item("restored", i.restored)?;
            item.set_item("stale", i.stale)?;
            item.set_item("stale_removed", i.stale_removed)?;
            Some(item)
        }
    };
    d.set_item("index", index)?;
    Ok(d.unbind())
}
