//! Python arguments as saltblob's types: keys, sizes, durations, versions, classes, metadata, and the keyword
//! options of `open` and of a put. Every check happens here, before any I/O: a wrong type is a `TypeError`, a
//! wrong value an `InvalidArgument` (a `ValueError`), each naming the argument.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString};
use saltblob::encryption::CustomerKey;
use saltblob::{Codec, PriorityClass, PutCondition, PutOptions, StoreConfig, VersionId};

use crate::errors::{invalid, wrong_type};

/// A key: `bytes` (or `bytearray`), or `str`, which stands for its UTF-8 bytes. Its length is checked by the store
/// (1 to 1024 bytes), also before any I/O.
pub(crate) fn key(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        Ok(Bytes::copy_from_slice(b.as_bytes()))
    } else if let Ok(s) = obj.cast::<PyString>() {
        Ok(Bytes::copy_from_slice(s.to_cow()?.as_bytes()))
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        Ok(Bytes::from(b.to_vec()))
    } else {
        Err(wrong_type(arg, "bytes or str", obj))
    }
}

/// A key prefix (as [`key`], and may be empty); `None` is the empty prefix.
pub(crate) fn prefix(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Bytes> {
    match obj {
        None => Ok(Bytes::new()),
        Some(obj) if obj.is_none() => Ok(Bytes::new()),
        Some(obj) => key(obj, "prefix"),
    }
}

/// A byte count: an `int` at least 0, or a string such as `"64KiB"` or `"1MiB"`.
pub(crate) fn size(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u64> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(wrong_type(
            arg,
            "an int or a size string such as \"64KiB\"",
            obj,
        ));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_cow()?;
        return saltblob::parse_size(&text).map_err(|e| invalid(arg, format!("\"{text}\": {e}")));
    }
    match obj.extract::<i128>() {
        Ok(n) => u64::try_from(n).map_err(|_| invalid(arg, format!("{n}; it must be at least 0"))),
        Err(_) => Err(wrong_type(
            arg,
            "an int or a size string such as \"64KiB\"",
            obj,
        )),
    }
}

/// A byte count that must fit a `u32` (chunk sizes, salt counts).
pub(crate) fn size_u32(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<u32> {
    let n = size(obj, arg)?;
    u32::try_from(n).map_err(|_| invalid(arg, format!("{n}; it must be at most {}", u32::MAX)))
}

/// A byte count that must fit a `usize`.
fn size_usize(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<usize> {
    let n = size(obj, arg)?;
    usize::try_from(n).map_err(|_| invalid(arg, format!("{n} is too large")))
}

/// A duration: seconds as an `int` or `float` (at least 0), or a `datetime.timedelta`.
pub(crate) fn duration(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Duration> {
    let expected = "seconds (int or float) or a datetime.timedelta";
    if obj.is_instance_of::<pyo3::types::PyBool>() || obj.is_instance_of::<PyString>() {
        return Err(wrong_type(arg, expected, obj));
    }
    let seconds: f64 = if obj.hasattr("total_seconds")? {
        obj.call_method0("total_seconds")?.extract()?
    } else {
        obj.extract().map_err(|_| wrong_type(arg, expected, obj))?
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        invalid(
            arg,
            format!("{seconds} seconds; it must be a finite number at least 0"),
        )
    })
}

/// A version id as `head` and `put` return it (`Manifest.version`).
pub(crate) fn version(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<VersionId> {
    let text: String = obj
        .extract()
        .map_err(|_| wrong_type(arg, "a version string", obj))?;
    VersionId::from_str(&text).map_err(|e| invalid(arg, format!("\"{text}\": {e}")))
}

/// A priority class by name (`"interactive"`, `"bulk"`, or one the store URL's `classes=` defines).
pub(crate) fn priority(obj: &Bound<'_, PyAny>) -> PyResult<PriorityClass> {
    let name: String = obj
        .extract()
        .map_err(|_| wrong_type("priority", "a class name (str)", obj))?;
    PriorityClass::new(&name).map_err(|e| invalid("priority", e))
}

/// A customer key (S3's SSE-C): 32 bytes, as `bytes` or `bytearray`. The store copies it into memory it zeroes
/// when done; the caller's object is the caller's to drop.
pub(crate) fn customer_key(obj: &Bound<'_, PyAny>) -> PyResult<CustomerKey> {
    let arg = "customer_key";
    let key = if let Ok(b) = obj.cast::<PyBytes>() {
        CustomerKey::from_slice(b.as_bytes())
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        CustomerKey::from_slice(&zeroize::Zeroizing::new(b.to_vec()))
    } else {
        return Err(wrong_type(arg, "bytes (32 of them)", obj));
    };
    key.map_err(|_| {
        invalid(
            arg,
            format!(
                "{} bytes; a customer key is 256 bits (32 bytes, e.g. os.urandom(32))",
                obj.len().unwrap_or(0)
            ),
        )
    })
}

/// User metadata: a mapping of `str` to `str`.
fn metadata(obj: &Bound<'_, PyAny>) -> PyResult<BTreeMap<String, String>> {
    let expected = "a dict of str to str";
    let dict = obj
        .cast::<PyDict>()
        .map_err(|_| wrong_type("metadata", expected, obj))?;
    let mut out = BTreeMap::new();
    for (k, v) in dict.iter() {
        let k: String = k
            .extract()
            .map_err(|_| wrong_type("metadata key", "str", &k))?;
        let v: String = v
            .extract()
            .map_err(|_| wrong_type(&format!("metadata[{k:?}]"), "str", &v))?;
        out.insert(k, v);
    }
    Ok(out)
}

/// A bool option (only `True` or `False`).
fn flag(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<bool> {
    obj.extract::<bool>()
        .map_err(|_| wrong_type(arg, "True or False", obj))
}

/// The keyword options of a put (`put`, `put_async`, `open_writer`, `open_writer_async`), in `what`'s name.
pub(crate) fn put_options(what: &str, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<PutOptions> {
    let mut opts = PutOptions::new();
    let Some(kwargs) = kwargs else {
        return Ok(opts);
    };
    let mut if_absent = false;
    let mut if_version = None;
    for (name, value) in kwargs.iter() {
        let name: String = name.extract()?;
        if value.is_none() {
            continue;
        }
        match name.as_str() {
            "content_type" => {
                opts.content_type = Some(
                    value
                        .extract()
                        .map_err(|_| wrong_type("content_type", "str", &value))?,
                );
            }
            "metadata" => opts.metadata = metadata(&value)?,
            "if_absent" => if_absent = flag(&value, "if_absent")?,
            "if_version" => if_version = Some(version(&value, "if_version")?),
            "chunk_size" => opts.chunk_size = Some(size_u32(&value, "chunk_size")?),
            "max_salt" => opts.max_salt = Some(size_u32(&value, "max_salt")?),
            "codec" => {
                let text: String = value
                    .extract()
                    .map_err(|_| wrong_type("codec", "\"none\", \"zstd\" or \"lz4\"", &value))?;
                opts.codec = Some(Codec::from_str(&text).map_err(|e| invalid("codec", e))?);
            }
            "priority" => opts.priority = Some(priority(&value)?),
            "size_hint" => opts.size_hint = Some(size(&value, "size_hint")?),
            // Zero or out of range is refused by the put, before any I/O, naming `ttl`.
            "ttl" => opts.ttl = Some(duration(&value, "ttl")?),
            "encryption_key" => {
                opts.encryption_key = Some(
                    value
                        .extract()
                        .map_err(|_| wrong_type("encryption_key", "str", &value))?,
                );
            }
            // Both this and `encryption_key` are refused by the put, before any I/O.
            "customer_key" => opts.customer_key = Some(customer_key(&value)?),
            other => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{what}() got an unexpected keyword argument '{other}'; put options are content_type, metadata, \
                     if_absent, if_version, chunk_size, max_salt, codec, priority, size_hint, ttl, encryption_key \
                     and customer_key"
                )));
            }
        }
    }
    opts.condition = match (if_absent, if_version) {
        (true, Some(_)) => {
            return Err(invalid("if_absent/if_version", "give at most one of them"));
        }
        (true, None) => PutCondition::IfAbsent,
        (false, Some(v)) => PutCondition::IfVersion(v),
        (false, None) => PutCondition::None,
    };
    Ok(opts)
}

/// The keyword options of `open`: the store configuration beyond what the URL says.
pub(crate) fn store_config(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<StoreConfig> {
    let mut config = StoreConfig::default();
    let Some(kwargs) = kwargs else {
        return Ok(config);
    };
    for (name, value) in kwargs.iter() {
        let name: String = name.extract()?;
        if value.is_none() {
            continue;
        }
        match name.as_str() {
            "grace" => config.grace = duration(&value, "grace")?,
            "intent_lease" => config.intent_lease = duration(&value, "intent_lease")?,
            "inflight_bytes" => config.inflight_bytes = size_usize(&value, "inflight_bytes")?,
            "batch_bytes" => config.batch_bytes = size_usize(&value, "batch_bytes")?,
            "read_ahead_budget" => {
                config.read_ahead_budget = size_usize(&value, "read_ahead_budget")?
            }
            "max_blob_size" => config.max_blob_size = Some(size(&value, "max_blob_size")?),
            "inline_limit" => config.policy.inline_limit = size(&value, "inline_limit")?,
            "fanout_threshold" => {
                config.policy.fanout_threshold = size(&value, "fanout_threshold")?
            }
            "max_salt" => config.policy.max_salt = size_u32(&value, "max_salt")?,
            "codec" => {
                let text: String = value
                    .extract()
                    .map_err(|_| wrong_type("codec", "\"none\", \"zstd\" or \"lz4\"", &value))?;
                config.policy.codec = Codec::from_str(&text).map_err(|e| invalid("codec", e))?;
            }
            other => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "open() got an unexpected keyword argument '{other}'; store options are grace, intent_lease, \
                     inflight_bytes, batch_bytes, read_ahead_budget, max_blob_size, inline_limit, fanout_threshold, \
                     max_salt and codec (the rest is in the URL)"
                )));
            }
        }
    }
    Ok(config)
}
