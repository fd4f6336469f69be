//! Which key an object is sealed under, how the choice is recorded in its manifest, and what responses say
//! about it; a bucket's default encryption record. Nothing here reads or writes the store (`sse/mod.rs` does).

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use s3s::dto::{
    ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
    ServerSideEncryptionRule,
};
use s3s::header::{
    X_AMZ_SERVER_SIDE_ENCRYPTION, X_AMZ_SERVER_SIDE_ENCRYPTION_AWS_KMS_KEY_ID,
    X_AMZ_SERVER_SIDE_ENCRYPTION_BUCKET_KEY_ENABLED,
    X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_ALGORITHM, X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY_MD5,
};
use s3s::{S3Response, S3Result, s3_error};
use saltblob_core::{Manifest, VersionId};

use crate::cache::Cache;

/// Metadata key of the algorithm a client asked for (`AES256` or `aws:kms`), on an object sealed for it.
pub(crate) const ALGORITHM_KEY: &str = "s3:sse";
/// Metadata key of `x-amz-server-side-encryption-bucket-key-enabled: true`, echoed on reads.
pub(crate) const BUCKET_KEY_KEY: &str = "s3:sse-bucket-key-enabled";
/// Metadata key, on a multipart upload's record (stripped from the object's metadata with the other
/// `s3:upload-` keys), of the key its parts are sealed under.
pub(crate) const UPLOAD_KEY_KEY: &str = "s3:upload-sse-key";
/// The one algorithm SSE-C (`customer.rs`) takes.
pub(crate) const CUSTOMER_ALGORITHM: &str = "AES256";
/// Longest key id a request or a bucket default may name (an AWS KMS key ARN is under 2048).
const MAX_KEY_ID: usize = 2048;

/// The server's encryption settings (`saltblob serve --sse-s3-key`, `--sse-kms-key`).
#[derive(Debug, Default)]
pub(crate) struct SseConfig {
    /// Whether the store has a key provider: without one every SSE request is refused.
    pub provider: bool,
    /// The key SSE-S3 (`AES256`) seals under; `None`: SSE-S3 is refused.
    pub s3_key: Option<String>,
    /// The key `aws:kms` without a key id seals under; `None`: such a request is refused.
    pub kms_key: Option<String>,
    /// Whether SSE-C keys may be sent to this server: it has TLS, or `--sse-c-over-http`.
    pub customer_keys: bool,
    /// The store's own key (a put that names none is sealed under it), if it has one.
    pub store_key: Option<String>,
    /// The buckets' default encryption read lately.
    pub defaults: Cache<BucketDefault>,
}

/// The S3 name of an encryption.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// SSE-S3, `AES256`: the server's key.
    S3,
    /// SSE-KMS, `aws:kms`: a key of the store's provider named by the client.
    Kms,
}

impl Algorithm {
    /// The algorithm `value` names.
    ///
    /// # Errors
    /// `NotImplemented` for `aws:kms:dsse` (one layer of encryption only); `InvalidArgument` for anything else.
    pub(crate) fn parse(value: &str) -> S3Result<Self> {
        match value {
            ServerSideEncryption::AES256 => Ok(Self::S3),
            ServerSideEncryption::AWS_KMS => Ok(Self::Kms),
            ServerSideEncryption::AWS_KMS_DSSE => Err(s3_error!(
                NotImplemented,
                "aws:kms:dsse (dual-layer encryption) is not implemented; use AES256 or aws:kms"
            )),
            _ => Err(s3_error!(
                InvalidArgument,
                "The encryption method specified is not supported"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::S3 => ServerSideEncryption::AES256,
            Self::Kms => ServerSideEncryption::AWS_KMS,
        }
    }

    fn dto(self) -> ServerSideEncryption {
        ServerSideEncryption::from_static(self.name())
    }
}

/// What a put asked for: its `x-amz-server-side-encryption*` headers (or a bucket default's rule).
#[derive(Clone, Debug, Default)]
pub(crate) struct Request {
    pub algorithm: Option<String>,
    pub kms_key_id: Option<String>,
    pub bucket_key: Option<bool>,
}

impl Request {
    /// What a request's `headers` ask for (`x-amz-server-side-encryption`, `-aws-kms-key-id`,
    /// `-bucket-key-enabled`). s3s has parsed these headers before: an empty one is absent, and the handler
    /// never sees one that is not text, nor a bucket key flag other than `true`, `True`, `false`, `False`.
    pub(crate) fn of_headers(headers: &HeaderMap) -> Self {
        Self {
            algorithm: header(headers, &X_AMZ_SERVER_SIDE_ENCRYPTION).map(str::to_owned),
            kms_key_id: header(headers, &X_AMZ_SERVER_SIDE_ENCRYPTION_AWS_KMS_KEY_ID)
                .map(str::to_owned),
            bucket_key: header(headers, &X_AMZ_SERVER_SIDE_ENCRYPTION_BUCKET_KEY_ENABLED)
                .map(|v| v.eq_ignore_ascii_case("true")),
        }
    }
}

/// The text of header `name` of `headers`; `None` when it is absent, empty or not text.
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers
        .get(name)
        .filter(|v| !v.is_empty())
        .and_then(|v| v.to_str().ok())
}

/// The encryption of one put: the algorithm asked for and the key-encryption key it seals under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Choice {
    pub algorithm: Algorithm,
    /// The store provider's name of the key (a keyring name; a KMS key id).
    pub key: String,
    /// Echoed as `x-amz-server-side-encryption-bucket-key-enabled` (keys are cached per key anyway).
    pub bucket_key: bool,
}

impl Choice {
    /// The choice `request` makes on a server with `config`; `None` when it names no encryption.
    ///
    /// # Errors
    /// `InvalidArgument` for a key id without `aws:kms` or an unknown algorithm; `NotImplemented` when the
    /// store has no key provider, or the server no key for the algorithm.
    pub(crate) fn of(request: &Request, config: &SseConfig) -> S3Result<Option<Self>> {
        let Some(name) = request.algorithm.as_deref() else {
            if request.kms_key_id.is_some() {
                return Err(s3_error!(
                    InvalidArgument,
                    "Server Side Encryption with AWS KMS managed key requires HTTP header x-amz-server-side-encryption : aws:kms"
                ));
            }
            return Ok(None);
        };
        let algorithm = Algorithm::parse(name)?;
        if !config.provider {
            return Err(s3_error!(
                NotImplemented,
                "Server-side encryption needs a store with a key provider (a store URL with encryption=local&keyring=FILE); this server's store has none"
            ));
        }
        let key = match (algorithm, &request.kms_key_id) {
            (Algorithm::S3, Some(_)) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "Server Side Encryption with AWS KMS managed key requires HTTP header x-amz-server-side-encryption : aws:kms"
                ));
            }
            (Algorithm::S3, None) => config.s3_key.clone().ok_or_else(|| {
                s3_error!(
                    NotImplemented,
                    "SSE-S3 (AES256) needs a server key: start saltblob serve with --sse-s3-key NAME or a store URL with encryption_key=NAME"
                )
            })?,
            (Algorithm::Kms, Some(id)) => {
                if id.is_empty() || id.len() > MAX_KEY_ID {
                    return Err(s3_error!(
                        InvalidArgument,
                        "The KMS key id must be 1 to {MAX_KEY_ID} bytes"
                    ));
                }
                id.clone()
            }
            (Algorithm::Kms, None) => config.kms_key.clone().ok_or_else(|| {
                s3_error!(
                    NotImplemented,
                    "aws:kms without a key id needs a default KMS key: start saltblob serve with --sse-kms-key NAME (or --sse-s3-key)"
                )
            })?,
        };
        Ok(Some(Self {
            algorithm,
            key,
            bucket_key: request.bucket_key.unwrap_or(false),
        }))
    }

    /// Records the choice in an object's `metadata` (the key itself is in the manifest's encryption block).
    pub(crate) fn insert_into(&self, metadata: &mut BTreeMap<String, String>) {
        metadata.retain(|k, _| !is_sse_key(k));
        metadata.insert(ALGORITHM_KEY.to_owned(), self.algorithm.name().to_owned());
        if self.bucket_key {
            metadata.insert(BUCKET_KEY_KEY.to_owned(), "true".to_owned());
        }
    }

    /// Records the choice in a multipart upload record's `metadata`: the object's keys, and the key its parts
    /// are sealed under ([`UPLOAD_KEY_KEY`]).
    pub(crate) fn insert_into_upload(&self, metadata: &mut BTreeMap<String, String>) {
        self.insert_into(metadata);
        metadata.insert(UPLOAD_KEY_KEY.to_owned(), self.key.clone());
    }

    /// The choice a multipart upload record's `metadata` holds (see [`Choice::insert_into_upload`]).
    pub(crate) fn of_upload(metadata: &BTreeMap<String, String>) -> Option<Self> {
        let key = metadata.get(UPLOAD_KEY_KEY)?.clone();
        let algorithm = match metadata.get(ALGORITHM_KEY).map(String::as_str) {
            Some(ServerSideEncryption::AES256) => Algorithm::S3,
            _ => Algorithm::Kms,
        };
        Some(Self {
            algorithm,
            key,
            bucket_key: metadata.get(BUCKET_KEY_KEY).is_some_and(|v| v == "true"),
        })
    }

    /// What responses say about an object sealed for this choice.
    pub(crate) fn echo(&self) -> Echo {
        Echo {
            algorithm: Some(self.algorithm.dto()),
            kms_key_id: (self.algorithm == Algorithm::Kms).then(|| self.key.clone()),
            bucket_key: self.bucket_key.then_some(true),
            customer_md5: None,
        }
    }
}

/// Whether metadata key `k` is one of this module's (dropped when a copy's destination chooses anew).
pub(crate) fn is_sse_key(k: &str) -> bool {
    k == ALGORITHM_KEY || k == BUCKET_KEY_KEY
}

/// What a response says about its object's encryption: `x-amz-server-side-encryption`, `-aws-kms-key-id` and
/// `-bucket-key-enabled`, or for SSE-C `-customer-algorithm` and `-customer-key-MD5`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Echo {
    pub algorithm: Option<ServerSideEncryption>,
    pub kms_key_id: Option<String>,
    pub bucket_key: Option<bool>,
    /// The MD5 of the SSE-C key given (the algorithm is SSE-C's one, [`CUSTOMER_ALGORITHM`]).
    pub customer_md5: Option<String>,
}

impl Echo {
    /// What a read of `m` says, on a server whose SSE-S3 key is `s3_key`: nothing for a plaintext object (it
    /// claims no encryption it does not have); for a sealed one the algorithm it was put with (recorded under
    /// [`ALGORITHM_KEY`]), else `AES256` when sealed under the SSE-S3 key (a store's default key) and `aws:kms`
    /// with the key's name otherwise (sealed by another client of the store).
    pub(crate) fn of(m: &Manifest, s3_key: Option<&str>) -> Self {
        // SSE-C objects answer with the request's key MD5 instead (`customer.rs`).
        let Some(sealing) = m
            .sealed_by()
            .filter(|s| s.kek.provider != saltblob_core::encryption::CUSTOMER)
        else {
            return Self::default();
        };
        let name = sealing.kek.name.as_str();
        let algorithm = match m.metadata.get(ALGORITHM_KEY).map(String::as_str) {
            Some(ServerSideEncryption::AWS_KMS) => Algorithm::Kms,
            Some(ServerSideEncryption::AES256) => Algorithm::S3,
            _ if Some(name) == s3_key => Algorithm::S3,
            _ => Algorithm::Kms,
        };
        Self {
            algorithm: Some(algorithm.dto()),
            kms_key_id: (algorithm == Algorithm::Kms).then(|| name.to_owned()),
            bucket_key: m
                .metadata
                .get(BUCKET_KEY_KEY)
                .is_some_and(|v| v == "true")
                .then_some(true),
            customer_md5: None,
        }
    }

    /// `output` as a response whose headers say this (s3s sends a response's own headers with those of its
    /// output, whose encryption fields are left unset).
    pub(crate) fn respond<T>(&self, output: T) -> S3Response<T> {
        let mut response = S3Response::new(output);
        let headers = &mut response.headers;
        let customer = self.customer_md5.as_ref().map(|_| CUSTOMER_ALGORITHM);
        for (name, value) in [
            (
                &X_AMZ_SERVER_SIDE_ENCRYPTION,
                self.algorithm.as_ref().map(ServerSideEncryption::as_str),
            ),
            (
                &X_AMZ_SERVER_SIDE_ENCRYPTION_AWS_KMS_KEY_ID,
                self.kms_key_id.as_deref(),
            ),
            (
                &X_AMZ_SERVER_SIDE_ENCRYPTION_BUCKET_KEY_ENABLED,
                self.bucket_key.map(|b| if b { "true" } else { "false" }),
            ),
            (&X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_ALGORITHM, customer),
            (
                &X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY_MD5,
                self.customer_md5.as_deref(),
            ),
        ] {
            if let Some(value) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
                headers.insert(name.clone(), value);
            }
        }
        response
    }
}

/// A bucket's default encryption (PutBucketEncryption), applied to puts that name none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BucketDefault {
    /// The bucket record's version it was written for: a deleted bucket's default never applies to a new one.
    pub bucket_version: VersionId,
    pub algorithm: Algorithm,
    /// For `aws:kms`: the key; `None` the server's default KMS key.
    pub kms_key_id: Option<String>,
    pub bucket_key: bool,
}

/// Record magic, then format version 1.
const MAGIC: &[u8; 4] = b"SBSE";
const FORMAT: u8 = 1;

impl BucketDefault {
    /// The default `config` sets, for the bucket whose record is `bucket_version`.
    ///
    /// # Errors
    /// `MalformedXML` without exactly one rule with `ApplyServerSideEncryptionByDefault`; the errors of
    /// [`Algorithm::parse`]; `InvalidArgument` for a `KMSMasterKeyID` with `AES256`.
    pub(crate) fn from_config(
        config: ServerSideEncryptionConfiguration,
        bucket_version: VersionId,
    ) -> S3Result<Self> {
        let [rule] = <[ServerSideEncryptionRule; 1]>::try_from(config.rules).map_err(|_| {
            s3_error!(
                MalformedXML,
                "A ServerSideEncryptionConfiguration has exactly one Rule"
            )
        })?;
        let Some(by_default) = rule.apply_server_side_encryption_by_default else {
            return Err(s3_error!(
                MalformedXML,
                "The Rule has no ApplyServerSideEncryptionByDefault"
            ));
        };
        let algorithm = Algorithm::parse(by_default.sse_algorithm.as_str())?;
        let kms_key_id = by_default.kms_master_key_id.filter(|k| !k.is_empty());
        if algorithm == Algorithm::S3 && kms_key_id.is_some() {
            return Err(s3_error!(
                InvalidArgument,
                "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms"
            ));
        }
        if kms_key_id.as_ref().is_some_and(|k| k.len() > MAX_KEY_ID) {
            return Err(s3_error!(
                InvalidArgument,
                "The KMS key id must be at most {MAX_KEY_ID} bytes"
            ));
        }
        Ok(Self {
            bucket_version,
            algorithm,
            kms_key_id,
            bucket_key: rule.bucket_key_enabled.unwrap_or(false),
        })
    }

    /// As GetBucketEncryption returns it.
    pub(crate) fn to_config(&self) -> ServerSideEncryptionConfiguration {
        ServerSideEncryptionConfiguration {
            rules: vec![ServerSideEncryptionRule {
                apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
                    kms_master_key_id: self.kms_key_id.clone(),
                    sse_algorithm: self.algorithm.dto(),
                }),
                bucket_key_enabled: Some(self.bucket_key),
            }],
        }
    }

    /// The request a put without SSE headers makes under this default.
    pub(crate) fn request(&self) -> Request {
        Request {
            algorithm: Some(self.algorithm.name().to_owned()),
            kms_key_id: self.kms_key_id.clone(),
            bucket_key: Some(self.bucket_key),
        }
    }

    /// The record (little-endian): magic `SBSE` | format u8 = 1 | bucket record version u128 | algorithm u8
    /// (1 `AES256`, 2 `aws:kms`) | bucket key u8 (0, 1) | key id length u16 (0: none) | key id (UTF-8).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let id = self.kms_key_id.as_deref().unwrap_or("").as_bytes();
        let mut out = Vec::with_capacity(25 + id.len());
        out.extend_from_slice(MAGIC);
        out.push(FORMAT);
        out.extend_from_slice(&self.bucket_version.to_le_bytes());
        out.push(match self.algorithm {
            Algorithm::S3 => 1,
            Algorithm::Kms => 2,
        });
        out.push(u8::from(self.bucket_key));
        // At most MAX_KEY_ID bytes (checked by from_config).
        out.extend_from_slice(&u16::try_from(id.len()).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(id);
        out
    }

    /// The record `bytes` encode.
    ///
    /// # Errors
    /// What broke, for a record that does not decode.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let (magic, rest) = bytes.split_at_checked(4).ok_or("shorter than its magic")?;
        if magic != MAGIC {
            return Err(format!("magic {magic:02x?}, not SBSE"));
        }
        let (&format, rest) = rest.split_first().ok_or("no format byte")?;
        if format != FORMAT {
            return Err(format!("format {format}, only {FORMAT} is known"));
        }
        let (version, rest) = rest.split_at_checked(16).ok_or("no bucket version")?;
        let version: [u8; 16] = version.try_into().map_err(|_| "no bucket version")?;
        let [algorithm, bucket_key, len0, len1, id @ ..] = rest else {
            return Err("truncated after the bucket version".to_owned());
        };
        let algorithm = match algorithm {
            1 => Algorithm::S3,
            2 => Algorithm::Kms,
            t => return Err(format!("algorithm tag {t}")),
        };
        let bucket_key = match bucket_key {
            0 => false,
            1 => true,
            b => return Err(format!("bucket key flag {b}")),
        };
        let len = usize::from(u16::from_le_bytes([*len0, *len1]));
        if id.len() != len {
            return Err(format!("a key id of {} bytes, {len} announced", id.len()));
        }
        let id = std::str::from_utf8(id).map_err(|_| "a key id that is not UTF-8")?;
        Ok(Self {
            bucket_version: VersionId(u128::from_le_bytes(version)),
            algorithm,
            kms_key_id: (!id.is_empty()).then(|| id.to_owned()),
            bucket_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use s3s::S3ErrorCode;

    use super::*;

    fn config() -> SseConfig {
        SseConfig {
            provider: true,
            s3_key: Some("s3key".into()),
            kms_key: Some("kmskey".into()),
            ..SseConfig::default()
        }
    }

    fn request(algorithm: Option<&str>, key: Option<&str>) -> Request {
        Request {
            algorithm: algorithm.map(str::to_owned),
            kms_key_id: key.map(str::to_owned),
            bucket_key: None,
        }
    }

    #[test]
    fn requests_choose_the_server_key_or_the_named_one() {
        let c = config();
        let chosen = |a, k| Choice::of(&request(a, k), &c).map(|c| c.map(|c| (c.algorithm, c.key)));
        assert_eq!(chosen(None, None).expect("none"), None);
        assert_eq!(
            chosen(Some("AES256"), None).expect("s3"),
            Some((Algorithm::S3, "s3key".into()))
        );
        assert_eq!(
            chosen(Some("aws:kms"), None).expect("kms default"),
            Some((Algorithm::Kms, "kmskey".into()))
        );
        assert_eq!(
            chosen(Some("aws:kms"), Some("tenant")).expect("kms"),
            Some((Algorithm::Kms, "tenant".into()))
        );
        let code = |a, k| {
            chosen(a, k)
                .expect_err("refused")
                .code()
                .as_str()
                .to_owned()
        };
        assert_eq!(code(None, Some("tenant")), "InvalidArgument");
        assert_eq!(code(Some("AES256"), Some("tenant")), "InvalidArgument");
        assert_eq!(code(Some("aes256"), None), "InvalidArgument");
        assert_eq!(code(Some("aws:kms:dsse"), None), "NotImplemented");
        let none = SseConfig::default();
        let refused = Choice::of(&request(Some("AES256"), None), &none).expect_err("no provider");
        assert_eq!(refused.code(), &S3ErrorCode::NotImplemented);
        let keyless = SseConfig {
            provider: true,
            ..SseConfig::default()
        };
        let refused = Choice::of(&request(Some("AES256"), None), &keyless).expect_err("no key");
        assert_eq!(refused.code(), &S3ErrorCode::NotImplemented);
    }

    #[test]
    fn bucket_default_records_round_trip_and_damage_is_reported() {
        for (algorithm, id, bucket_key) in [
            (Algorithm::S3, None, false),
            (Algorithm::Kms, Some("tenant-a".to_owned()), true),
            (Algorithm::Kms, None, false),
        ] {
            let d = BucketDefault {
                bucket_version: VersionId(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
                algorithm,
                kms_key_id: id,
                bucket_key,
            };
            let bytes = d.encode();
            assert_eq!(BucketDefault::decode(&bytes), Ok(d.clone()));
            for cut in 0..bytes.len() {
                assert!(
                    BucketDefault::decode(&bytes[..cut]).is_err(),
                    "cut at {cut}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(b'x');
            assert!(BucketDefault::decode(&longer).is_err());
            let mut bad = bytes;
            bad[21] = 9;
            assert!(BucketDefault::decode(&bad).is_err());
        }
    }

    #[test]
    fn a_default_takes_one_rule_and_a_key_only_with_kms() {
        let rule = |algorithm: &str, key: Option<&str>| ServerSideEncryptionRule {
            apply_server_side_encryption_by_default: Some(ServerSideEncryptionByDefault {
                kms_master_key_id: key.map(str::to_owned),
                sse_algorithm: ServerSideEncryption::from(algorithm.to_owned()),
            }),
            bucket_key_enabled: None,
        };
        let of = |rules| {
            BucketDefault::from_config(ServerSideEncryptionConfiguration { rules }, VersionId(1))
        };
        let d = of(vec![rule("aws:kms", Some("k"))]).expect("kms");
        assert_eq!(d.kms_key_id.as_deref(), Some("k"));
        assert_eq!(
            BucketDefault::from_config(d.to_config(), VersionId(1)).expect("again"),
            d
        );
        let code = |rules| of(rules).expect_err("refused").code().as_str().to_owned();
        assert_eq!(code(vec![]), "MalformedXML");
        assert_eq!(
            code(vec![rule("AES256", None), rule("AES256", None)]),
            "MalformedXML"
        );
        assert_eq!(code(vec![rule("AES256", Some("k"))]), "InvalidArgument");
        assert_eq!(code(vec![rule("DES", None)]), "InvalidArgument");
    }
}
