//! # saltblob
//!
//! One key-value API for values of any size — a few bytes to many gigabytes — embedded on one machine
//! (RocksDB) or on a cluster, with the same semantics everywhere. This crate re-exports the API of
//! [`saltblob_core`] and opens a store from a URL:
//!
//! | URL | backend | feature |
//! |---|---|---|
//! | `rocksdb:///path/to/dir?sync=true` | embedded RocksDB with blob files | `rocksdb` (default) |
//! | `cql://host1,host2:9042/keyspace?rf=3&consistency=local_quorum` | ScyllaDB or Apache Cassandra | `cql` (default) |
//! | `memory://` | in process memory, gone at exit (tests, examples) | always |
//!
//! Any URL also takes the store's scheduler parameters (`scheduler`, `priority`, `classes`, `concurrency`,
//! `bulk_unit`, `bulk_duty`, `bulk_cpu`), chunk sizes (`chunk_size`, `large_chunk_size`) and encryption
//! (`encryption=local&keyring=FILE&encryption_key=NAME`, `key_cache`, `encrypt_compress`; see
//! [`split_store_params`]), e.g.
//! `rocksdb:///var/lib/saltblob?classes=batch:50`.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> saltblob::Result<()> {
//! use saltblob::{PutOptions, StoreConfig};
//! let store = saltblob::open("rocksdb:///tmp/saltblob-example", StoreConfig::default()).await?;
//! store.put("greeting", &b"hello"[..], &PutOptions::new()).await?;
//! assert_eq!(store.get("greeting").await?, &b"hello"[..]);
//! # Ok(()) }
//! ```

use std::sync::Arc;

pub use saltblob_core::*;
/// The cluster backend (feature `cql`).
#[cfg(feature = "cql")]
pub use saltblob_cql as cql;

/// The store used when none is named: the embedded store in `./saltblob-data`.
pub const DEFAULT_STORE_URL: &str = "rocksdb://saltblob-data";

/// The URL schemes this build can open.
pub fn supported_schemes() -> Vec<&'static str> {
    let mut schemes = vec!["memory"];
    #[cfg(feature = "rocksdb")]
    schemes.push(saltblob_rocksdb::SCHEME);
    #[cfg(feature = "cql")]
    schemes.push(saltblob_cql::SCHEME);
    schemes
}

/// The directory of an embedded store URL when that directory does not exist yet, so that read-only commands
/// can report "not found" instead of creating an empty store.
pub fn missing_local_store(url: &str) -> Option<std::path::PathBuf> {
    local_store_path(url).filter(|path| !path.exists())
}

/// The directory of an embedded store URL (`rocksdb://`); `None` for other stores and invalid URLs.
pub fn local_store_path(url: &str) -> Option<std::path::PathBuf> {
    #[cfg(feature = "rocksdb")]
    if let Ok((url, _)) = split_store_params(url, StoreConfig::default())
        && let Ok(config) = saltblob_rocksdb::RocksConfig::from_url(&url)
    {
        return Some(config.path);
    }
    let _ = url;
    None
}

/// Opens the backend a URL names. Errors show the URL with its password hidden ([`redact_url`]).
pub async fn open_backend(url: &str) -> Result<Arc<dyn ChunkStore>> {
    let invalid = |reason: String| Error::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let scheme = url.split_once("://").map(|(s, _)| s).ok_or_else(|| {
        invalid(format!(
            "a store URL looks like scheme://...; supported schemes: {}",
            supported_schemes().join(", ")
        ))
    })?;
    match scheme {
        "memory" => Ok(Arc::new(MemoryStore::new())),
        #[cfg(feature = "rocksdb")]
        saltblob_rocksdb::SCHEME => {
            let config = saltblob_rocksdb::RocksConfig::from_url(url).map_err(|e| match e {
                Error::InvalidUrl { reason, .. } => invalid(reason),
                other => other,
            })?;
            let store =
                tokio::task::spawn_blocking(move || saltblob_rocksdb::RocksStore::open(config))
                    .await
                    .map_err(|e| {
                        Error::backend("rocksdb", format!("open task failed: {e}"), false)
                    })??;
            Ok(Arc::new(store))
        }
        #[cfg(feature = "cql")]
        saltblob_cql::SCHEME => {
            let config = saltblob_cql::CqlConfig::from_url(url)?;
            Ok(Arc::new(saltblob_cql::CqlStore::connect(config).await?))
        }
        other => Err(invalid(format!(
            "unknown scheme \"{other}\"; supported schemes: {} (schemes are lowercase; e.g. rocksdb:///var/lib/saltblob)",
            supported_schemes().join(", ")
        ))),
    }
}

/// Opens the store a URL names, with `config` and the store-level parameters of the URL (the scheduler's, see
/// [`split_store_params`]).
pub async fn open(url: &str, config: StoreConfig) -> Result<BlobStore> {
    let (backend_url, config) = split_store_params(url, config)?;
    BlobStore::new(open_backend(&backend_url).await?, config)
}

/// Takes the store-level parameters out of a store URL's query and applies them to `config`; returns the URL
/// the backend is opened with (the rest) and the configuration. The store-level parameters are
/// `idle_value_buffers=SIZE` ([`StoreConfig::idle_value_buffers`]), the scheduler's
/// ([`SchedulerConfig::apply_url_param`]): `scheduler=on|off`, `priority=CLASS` (the store's
/// default class), `classes=NAME:SHARES,…`, `concurrency=MIN-MAX`, `bulk_unit=SIZE`, `bulk_duty=SHARE` and
/// `bulk_cpu=pool|inline`; the layout policy's ([`LayoutPolicy::apply_url_param`]): `chunk_size=SIZE`,
/// `large_chunk_size=SIZE` and `max_partition=SIZE`; and encryption's
/// ([`encryption::EncryptionParams`]): `encryption=local` (with `keyring=FILE`) or `encryption=aws-kms` (with
/// `kms_endpoint=URL`, `kms_region=REGION`, `kms_ca=FILE`; crate `saltblob-kms`), `encryption_key=NAME`,
/// `key_cache=DURATION` and `encrypt_compress=BOOL`, which set [`StoreConfig::encryption`] (the keyring is read
/// here); e.g.
/// `rocksdb:///var/lib/saltblob?sync=true&classes=batch:50&priority=batch`.
///
/// # Errors
/// [`Error::InvalidUrl`] naming the parameter when a value is wrong (the URL shown with its password hidden).
pub fn split_store_params(url: &str, mut config: StoreConfig) -> Result<(String, StoreConfig)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), config));
    };
    let invalid = |e: Error| Error::InvalidUrl {
        url: redact_url(url),
        reason: match e {
            Error::InvalidArgument { what, reason } => format!("{what}: {reason}"),
            other => other.to_string(),
        },
    };
    let mut kept = Vec::new();
    let mut encryption = encryption::EncryptionParams::default();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        let applied = config
            .apply_url_param(name, value)
            .and_then(|taken| Ok(taken || encryption.apply_url_param(name, value)?))
            .map_err(invalid)?;
        if !applied {
            kept.push(param);
        }
    }
    let aws_kms = |params: &encryption::AwsKmsParams| {
        let provider: Arc<dyn encryption::KeyProvider> =
            Arc::new(saltblob_kms::AwsKmsProvider::from_params(params)?);
        Ok(provider)
    };
    if let Some(e) = encryption.build(aws_kms).map_err(invalid)? {
        config.encryption = Some(e);
    }
    config.scheduler.validate().map_err(|e| Error::InvalidUrl {
        url: redact_url(url),
        reason: e.to_string(),
    })?;
    let backend_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((backend_url, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_urls_are_explained() {
        for (url, needle) in [
            ("nope", "scheme://"),
            ("s3://bucket", "unknown scheme \"s3\""),
            ("rocksdb://", "path is empty"),
        ] {
            let err = open(url, StoreConfig::default())
                .await
                .expect_err(url)
                .to_string();
            assert!(err.contains(needle), "{url}: {err}");
        }
        assert!(open("memory://", StoreConfig::default()).await.is_ok());
    }

    #[tokio::test]
    async fn chunk_sizes_are_taken_from_the_url() {
        let (rest, config) = split_store_params(
            "rocksdb:///d?sync=true&chunk_size=128KiB&large_chunk_size=2MiB",
            StoreConfig::default(),
        )
        .expect("valid");
        assert_eq!(rest, "rocksdb:///d?sync=true");
        let p = &config.policy;
        assert_eq!(
            (p.chunk_size, p.large_chunk_size),
            (128 << 10, Some(2 << 20))
        );
        let store = open("memory://?large_chunk_size=1MiB", StoreConfig::default())
            .await
            .expect("open");
        assert_eq!(store.config().policy.large_chunk_size, Some(1 << 20));
        for (url, needle) in [
            ("memory://?large_chunk_size=lots", "large_chunk_size: "),
            ("memory://?chunk_size=8GiB", "chunk_size: "),
            (
                "memory://?large_chunk_size=1KiB",
                "large chunk size: 1024 bytes",
            ),
        ] {
            let err = open(url, StoreConfig::default())
                .await
                .expect_err(url)
                .to_string();
            assert!(err.contains(needle), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn idle_value_buffers_are_taken_from_the_url() {
        let (rest, config) = split_store_params(
            "rocksdb:///d?idle_value_buffers=0&sync=false",
            StoreConfig::default(),
        )
        .expect("valid");
        assert_eq!(rest, "rocksdb:///d?sync=false");
        assert_eq!(config.idle_value_buffers, 0);
        let (_, config) =
            split_store_params("memory://?idle_value_buffers=1GiB", StoreConfig::default())
                .expect("valid");
        assert_eq!(config.idle_value_buffers, 1 << 30);
        let err = open(
            "memory://?idle_value_buffers=plenty",
            StoreConfig::default(),
        )
        .await
        .expect_err("a bad size")
        .to_string();
        assert!(err.contains("idle_value_buffers: "), "{err}");
    }

    #[tokio::test]
    async fn scheduler_parameters_are_taken_from_the_url() {
        let (rest, config) = split_store_params(
            "rocksdb:///d?sync=true&classes=batch:50&priority=batch&concurrency=2-16",
            StoreConfig::default(),
        )
        .expect("valid");
        assert_eq!(rest, "rocksdb:///d?sync=true");
        let s = &config.scheduler;
        assert_eq!(s.default_class.as_ref().map(|c| c.name()), Some("batch"));
        assert_eq!((s.shares["batch"], s.min_limit, s.max_limit), (50, 2, 16));
        let (rest, config) =
            split_store_params("memory://?scheduler=off", StoreConfig::default()).expect("valid");
        assert_eq!(
            (rest.as_str(), config.scheduler.enabled),
            ("memory://", false)
        );
        let store = open("memory://?priority=bulk", StoreConfig::default())
            .await
            .expect("open");
        assert_eq!(
            store.config().scheduler.default_class,
            Some(PriorityClass::bulk())
        );
        for (url, needle) in [
            (
                "memory://?priority=nope",
                "priority: unknown class \"nope\"",
            ),
            ("memory://?classes=bulk:0", "class \"bulk\" has 0 shares"),
            ("memory://?concurrency=9-3", "concurrency"),
            ("cql://u:s3cret@h/ks?scheduler=maybe", "scheduler: "),
        ] {
            let err = open(url, StoreConfig::default())
                .await
                .expect_err(url)
                .to_string();
            assert!(
                err.contains(needle) && !err.contains("s3cret"),
                "{url}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn no_error_shows_a_password() {
        for url in [
            "CQL://u:s3cret@h/ks",
            "u:s3cret@h",
            "rocksdb://u:s3cret@x?nope=1",
            "cql://u:s3cret@h/ks?nope=1",
            "cql://u:s3/cret@h:0/ks",
        ] {
            let err = open(url, StoreConfig::default())
                .await
                .expect_err(url)
                .to_string();
            assert!(
                !err.contains("s3cret") && !err.contains("s3/cret") && err.contains("***@"),
                "{url}: {err}"
            );
        }
    }
}
