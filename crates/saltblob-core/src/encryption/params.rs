//! The encryption parameters of a store URL (`encryption=local&keyring=FILE&encryption_key=NAME`, or
//! `encryption=aws-kms&encryption_key=KEY_ID&kms_endpoint=URL`), gathered one by one and then built into an
//! [`EncryptionConfig`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{AWS_KMS, EncryptionConfig, KeyProvider, LOCAL, LocalProvider};
use crate::base::error::{Error, Result};

/// Encryption parameters of a store URL: `encryption=local` (the provider), `keyring=FILE` (the local provider's
/// keyring), `encryption_key=NAME` (the key new versions are sealed under; without it puts stay plaintext unless
/// they name one; not `key=`, which a `cql://` URL gives to TLS), `key_cache=DURATION` (`600s`, `10m`, `1h`; default 10 minutes; `0` keeps nothing),
/// `key_failure_cache=DURATION` (how long a provider that did not answer is not asked again; default 2 s) and
/// `encrypt_compress=true|false` (default false); for `encryption=aws-kms`, [`AwsKmsParams`]' `kms_endpoint=URL`,
/// `kms_region=REGION`, `kms_ca=FILE` and `kms_timeout=DURATION`.
#[derive(Debug, Default)]
pub struct EncryptionParams {
    provider: Option<String>,
    keyring: Option<PathBuf>,
    key: Option<String>,
    key_cache: Option<Duration>,
    failure_cache: Option<Duration>,
    compress: Option<bool>,
    kms: AwsKmsParams,
}

/// Where the `aws-kms` provider finds its KMS, as a store URL gives it; the provider (crate `saltblob-kms`) is
/// made from these by whoever opens the store (`saltblob::open`), since this crate has no HTTP client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AwsKmsParams {
    /// `kms_endpoint=URL`: `http://` or `https://` host and port. Default: `https://kms.REGION.amazonaws.com`.
    pub endpoint: Option<String>,
    /// `kms_region=REGION`, the region requests are signed for. Default: `AWS_REGION`, else
    /// `AWS_DEFAULT_REGION`, else `us-east-1` when an endpoint is given.
    pub region: Option<String>,
    /// `kms_ca=FILE`: PEM certificates trusted for an `https://` endpoint. Default: the system's bundle.
    pub ca: Option<PathBuf>,
    /// `kms_timeout=DURATION`: how long one KMS call may take, its retries included, before it fails (retryably).
    /// Default: the client's (800 ms, ample for a KMS in the same region; raise it for a distant one).
    pub timeout: Option<Duration>,
}

impl EncryptionParams {
    /// Takes URL parameter `name=value` if it is one of the encryption parameters; false when it is not.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameter when its value is empty or malformed.
    pub fn apply_url_param(&mut self, name: &str, value: &str) -> Result<bool> {
        let nonempty = |what: &'static str| {
            if value.is_empty() {
                Err(Error::invalid(what, "empty; give a value"))
            } else {
                Ok(value.to_owned())
            }
        };
        match name {
            "encryption" => self.provider = Some(nonempty("encryption")?),
            "keyring" => self.keyring = Some(PathBuf::from(nonempty("keyring")?)),
            "encryption_key" => self.key = Some(nonempty("encryption_key")?),
            "kms_endpoint" => self.kms.endpoint = Some(nonempty("kms_endpoint")?),
            "kms_region" => self.kms.region = Some(nonempty("kms_region")?),
            "kms_ca" => self.kms.ca = Some(PathBuf::from(nonempty("kms_ca")?)),
            "key_cache" => self.key_cache = Some(parse_duration("key_cache", value)?),
            "key_failure_cache" => {
                self.failure_cache = Some(parse_duration("key_failure_cache", value)?);
            }
            "kms_timeout" => self.kms.timeout = Some(parse_duration("kms_timeout", value)?),
            "encrypt_compress" => {
                self.compress = Some(match value {
                    "true" | "on" | "1" => true,
                    "false" | "off" | "0" => false,
                    other => {
                        return Err(Error::invalid(
                            "encrypt_compress",
                            format!("{other:?}; true or false"),
                        ));
                    }
                });
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The configuration the parameters give (the local provider's keyring is read here; the `aws-kms` provider
    /// is made by `aws_kms` from its parameters); `None` when none was given.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the parameter: one given without `encryption=`, an unknown provider,
    /// `encryption=local` without `keyring=` or with a `kms_` parameter, `encryption=aws-kms` with `keyring=`;
    /// the keyring file's own errors ([`super::Keyring::open`]); `aws_kms`'s.
    pub fn build(
        self,
        aws_kms: impl FnOnce(&AwsKmsParams) -> Result<Arc<dyn KeyProvider>>,
    ) -> Result<Option<EncryptionConfig>> {
        let Some(provider) = self.provider else {
            if let Some(given) = [
                self.keyring.as_ref().map(|_| "keyring"),
                self.key.as_ref().map(|_| "encryption_key"),
                self.key_cache.as_ref().map(|_| "key_cache"),
                self.failure_cache.as_ref().map(|_| "key_failure_cache"),
                self.kms.timeout.as_ref().map(|_| "kms_timeout"),
                self.compress.as_ref().map(|_| "encrypt_compress"),
                self.kms.endpoint.as_ref().map(|_| "kms_endpoint"),
                self.kms.region.as_ref().map(|_| "kms_region"),
                self.kms.ca.as_ref().map(|_| "kms_ca"),
            ]
            .into_iter()
            .flatten()
            .next()
            {
                return Err(Error::invalid(
                    given,
                    "given without encryption=PROVIDER (encryption=local&keyring=FILE, or \
                     encryption=aws-kms&encryption_key=KEY_ID)",
                ));
            }
            return Ok(None);
        };
        let provider: Arc<dyn KeyProvider> = match provider.as_str() {
            LOCAL => {
                if self.kms != AwsKmsParams::default() {
                    return Err(Error::invalid(
                        "encryption",
                        "kms_endpoint, kms_region, kms_ca and kms_timeout are for encryption=aws-kms, not local",
                    ));
                }
                let keyring = self.keyring.ok_or_else(|| {
                    Error::invalid(
                        "encryption",
                        "local needs keyring=FILE (make one with saltblob keyring new FILE)",
                    )
                })?;
                Arc::new(LocalProvider::open(keyring)?)
            }
            AWS_KMS => {
                if self.keyring.is_some() {
                    return Err(Error::invalid(
                        "keyring",
                        "a keyring is for encryption=local; aws-kms keys live in the KMS",
                    ));
                }
                aws_kms(&self.kms)?
            }
            other => {
                return Err(Error::invalid(
                    "encryption",
                    format!("unknown key provider {other:?}; known: {LOCAL}, {AWS_KMS}"),
                ));
            }
        };
        let mut config = EncryptionConfig::new(provider);
        config.key = self.key;
        if let Some(keep_for) = self.key_cache {
            config.key_cache = keep_for;
        }
        if let Some(remember_for) = self.failure_cache {
            config.failure_cache = remember_for;
        }
        config.compress = self.compress.unwrap_or(false);
        Ok(Some(config))
    }
}

/// The duration of URL parameter `what` ([`crate::base::units::parse_duration`]; a number alone is seconds).
fn parse_duration(what: &'static str, value: &str) -> Result<Duration> {
    crate::base::units::parse_duration(value).map_err(|reason| Error::invalid(what, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &[(&str, &str)]) -> Result<Option<EncryptionConfig>> {
        let mut p = EncryptionParams::default();
        for (name, value) in query {
            assert!(p.apply_url_param(name, value)?, "{name} is taken");
        }
        p.build(|_| Err(Error::invalid("encryption", "no aws-kms in this test")))
    }

    fn err(query: &[(&str, &str)]) -> String {
        params(query)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn bad_parameters_name_what_to_fix() {
        assert!(params(&[]).unwrap().is_none());
        assert!(
            err(&[("encryption_key", "k")]).contains("encryption_key: given without encryption=")
        );
        assert!(err(&[("encryption", "local")]).contains("needs keyring=FILE"));
        assert!(err(&[("encryption", "vault")]).contains("unknown key provider \"vault\""));
        assert!(err(&[("kms_endpoint", "http://h")]).contains("kms_endpoint: given without"));
        assert!(
            err(&[("encryption", "aws-kms"), ("keyring", "/k")])
                .contains("keyring: a keyring is for")
        );
        assert!(err(&[("encryption", "aws-kms")]).contains("no aws-kms in this test"));
        assert!(err(&[("encryption", "")]).contains("encryption: empty"));
        assert!(err(&[("key_cache", "10 parsecs")]).contains("key_cache"));
        assert!(err(&[("key_cache", "10x")]).contains("unknown unit"));
        assert!(err(&[("encrypt_compress", "maybe")]).contains("true or false"));
        assert!(
            err(&[
                ("encryption", "local"),
                ("keyring", "/k"),
                ("kms_region", "eu-west-1")
            ])
            .contains("are for encryption=aws-kms")
        );
        let missing = err(&[("encryption", "local"), ("keyring", "/nonexistent/keyring")]);
        assert!(missing.contains("/nonexistent/keyring"), "{missing}");
        let mut p = EncryptionParams::default();
        assert!(!p.apply_url_param("sync", "true").unwrap(), "not ours");
        assert!(
            !p.apply_url_param("key", "client.key").unwrap(),
            "a cql:// URL's TLS key"
        );
    }

    #[test]
    fn aws_kms_is_made_from_its_parameters() {
        let mut p = EncryptionParams::default();
        for (name, value) in [
            ("encryption", "aws-kms"),
            ("encryption_key", "alias/tenant"),
            ("kms_endpoint", "http://127.0.0.1:4566"),
            ("kms_region", "eu-west-1"),
            ("kms_ca", "/etc/kms-ca.pem"),
            ("kms_timeout", "3s"),
            ("key_failure_cache", "500ms"),
        ] {
            assert!(p.apply_url_param(name, value).unwrap(), "{name}");
        }
        let keyring = tempfile::tempdir().unwrap();
        let path = keyring.path().join("keys");
        super::super::Keyring::create(&path).unwrap();
        let mut given = None;
        let config = p
            .build(|kms| {
                given = Some(kms.clone());
                Ok(Arc::new(LocalProvider::open(&path)?))
            })
            .unwrap()
            .unwrap();
        assert_eq!(config.key.as_deref(), Some("alias/tenant"));
        assert_eq!(config.failure_cache, Duration::from_millis(500));
        assert_eq!(
            given,
            Some(AwsKmsParams {
                endpoint: Some("http://127.0.0.1:4566".into()),
                region: Some("eu-west-1".into()),
                ca: Some("/etc/kms-ca.pem".into()),
                timeout: Some(Duration::from_secs(3)),
            })
        );
    }

    #[test]
    fn durations_take_units() {
        let d = |v| parse_duration("key_cache", v).unwrap();
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("600"), Duration::from_secs(600));
        assert_eq!(d("250ms"), Duration::from_millis(250));
        assert_eq!(d("10m"), Duration::from_secs(600));
        assert_eq!(d("2h"), Duration::from_secs(7200));
    }

    #[test]
    fn a_keyring_builds_a_local_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let mut ring = super::super::Keyring::create(&path).unwrap();
        ring.add("tenant", 1).unwrap();
        let path = path.to_string_lossy().into_owned();
        let config = params(&[
            ("encryption", "local"),
            ("keyring", &path),
            ("encryption_key", "tenant"),
            ("key_cache", "1m"),
            ("encrypt_compress", "true"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(config.key.as_deref(), Some("tenant"));
        assert_eq!(config.key_cache, Duration::from_secs(60));
        assert_eq!(config.failure_cache, super::super::DEFAULT_FAILURE_CACHE);
        assert!(config.compress);
        assert_eq!(config.provider.name(), LOCAL);
    }
}
