//! SSE-C: server-side encryption with a key the client sends with each request
//! (`x-amz-server-side-encryption-customer-algorithm`, `-key`, `-key-MD5`; for a copy's source the same under
//! `x-amz-copy-source-`). The key wraps the object version's data key and is never stored
//! ([`saltblob_core::encryption::CustomerKey`]); the manifest records only its fingerprint. Error codes as AWS:
//! a missing or malformed header `400 InvalidArgument`, another algorithm than `AES256`
//! `400 InvalidEncryptionAlgorithmError`, a read of an SSE-C object without its key (or with a key of an object
//! that is not SSE-C) `400 InvalidRequest`, a read with another key `403 AccessDenied`, a server without TLS
//! `400 InvalidRequest` (unless `--sse-c-over-http`).

use std::collections::BTreeMap;

use http::HeaderMap;
use s3s::header::{
    X_AMZ_COPY_SOURCE_SERVER_SIDE_ENCRYPTION_CUSTOMER_ALGORITHM,
    X_AMZ_COPY_SOURCE_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY,
    X_AMZ_COPY_SOURCE_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY_MD5,
    X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_ALGORITHM, X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY,
    X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY_MD5,
};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use saltblob_core::encryption::{CUSTOMER, CUSTOMER_KEY_NOT_APPLICABLE, CustomerKey};
use saltblob_core::{BlobStore, Error, GetOptions, Manifest};

use super::rules::{CUSTOMER_ALGORITHM, SseConfig, header};
use crate::error::from_store;

/// Metadata key, on a multipart upload's record (an `s3:upload-` key: stripped from the object's metadata), of
/// the fingerprint of the customer key its parts must be put with.
pub(crate) const UPLOAD_CUSTOMER_KEY: &str = "s3:upload-sse-c";

/// A request's customer key, checked, and the MD5 it gave (echoed in responses).
#[derive(Clone, Debug)]
pub(crate) struct Customer {
    pub key: CustomerKey,
    pub md5: String,
}

impl Customer {
    /// The customer key of headers `algorithm`, `key` (base64) and `md5` (base64 of the key's MD5); `None` when
    /// none of them is given.
    ///
    /// # Errors
    /// As the module says, for a missing, malformed or mismatched header, or a server that takes no SSE-C.
    pub(crate) fn of(
        config: &SseConfig,
        algorithm: Option<&str>,
        key: Option<&str>,
        md5: Option<&str>,
    ) -> S3Result<Option<Self>> {
        if algorithm.is_none() && key.is_none() && md5.is_none() {
            return Ok(None);
        }
        if !config.customer_keys {
            return Err(s3_error!(
                InvalidRequest,
                "Requests specifying Server Side Encryption with Customer provided keys must be made over a secure connection."
            ));
        }
        let Some(algorithm) = algorithm else {
            return Err(s3_error!(
                InvalidArgument,
                "Requests specifying Server Side Encryption with Customer provided keys must provide a valid encryption algorithm."
            ));
        };
        if algorithm != CUSTOMER_ALGORITHM {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InvalidEncryptionAlgorithmError".into()),
                "The encryption request you specified is not valid. The valid value is AES256.",
            );
            e.set_status_code(http::StatusCode::BAD_REQUEST);
            return Err(e);
        }
        let Some(key) = key else {
            return Err(s3_error!(
                InvalidArgument,
                "Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key."
            ));
        };
        let Some(md5) = md5 else {
            return Err(s3_error!(
                InvalidArgument,
                "Requests specifying Server Side Encryption with Customer provided keys must provide the client calculated MD5 of the secret key."
            ));
        };
        let invalid_key = || {
            s3_error!(
                InvalidArgument,
                "The secret key was invalid for the specified algorithm."
            )
        };
        let bytes = zeroize::Zeroizing::new(
            base64_simd::STANDARD
                .decode_to_vec(key)
                .map_err(|_| invalid_key())?,
        );
        let key = CustomerKey::from_slice(&bytes).map_err(|_| invalid_key())?;
        let digest = <s3s::crypto::Md5 as s3s::crypto::Checksum>::checksum(&bytes);
        let expected = base64_simd::STANDARD.encode_to_string(digest);
        if md5 != expected {
            return Err(s3_error!(
                InvalidArgument,
                "The calculated MD5 hash of the key did not match the hash that was provided."
            ));
        }
        Ok(Some(Self { key, md5: expected }))
    }

    /// The customer key of a request's `headers` (`x-amz-server-side-encryption-customer-*`; for `source`, a
    /// copy's source: `x-amz-copy-source-server-side-encryption-customer-*`), as [`Customer::of`] checks it.
    /// s3s has parsed these headers before: an empty one is absent, and the handler never sees one that is not
    /// text.
    ///
    /// # Errors
    /// Those of [`Customer::of`].
    pub(crate) fn of_headers(
        config: &SseConfig,
        headers: &HeaderMap,
        source: bool,
    ) -> S3Result<Option<Self>> {
        let names = if source {
            [
                &X_AMZ_COPY_SOURCE_SERVER_SIDE_ENCRYPTION_CUSTOMER_ALGORITHM,
                &X_AMZ_COPY_SOURCE_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY,
                &X_AMZ_COPY_SOURCE_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY_MD5,
            ]
        } else {
            [
                &X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_ALGORITHM,
                &X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY,
                &X_AMZ_SERVER_SIDE_ENCRYPTION_CUSTOMER_KEY_MD5,
            ]
        };
        let [algorithm, key, md5] = names.map(|name| header(headers, name));
        Self::of(config, algorithm, key, md5)
    }
}

/// Records in a multipart upload record's `metadata` that its parts must be put with the customer key of
/// `fingerprint` (its fingerprint in the store, [`BlobStore::customer_fingerprint`]).
pub(crate) fn insert_into_upload(fingerprint: String, metadata: &mut BTreeMap<String, String>) {
    metadata.retain(|k, _| !super::rules::is_sse_key(k));
    metadata.insert(UPLOAD_CUSTOMER_KEY.to_owned(), fingerprint);
}

/// Whether the upload whose record holds `metadata` is SSE-C.
pub(crate) fn is_upload(metadata: &BTreeMap<String, String>) -> bool {
    metadata.contains_key(UPLOAD_CUSTOMER_KEY)
}

/// Checks the SSE-C key `given` of a part of the upload whose record holds `metadata`: an SSE-C upload's parts
/// are each put with its key, any other upload's with none.
///
/// # Errors
/// `400 InvalidRequest` for a missing, another or an inapplicable key, as AWS.
pub(crate) async fn check_part(
    store: &BlobStore,
    metadata: &BTreeMap<String, String>,
    given: Option<&Customer>,
) -> S3Result<()> {
    match (metadata.get(UPLOAD_CUSTOMER_KEY), given) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(s3_error!(
            InvalidRequest,
            "The multipart upload initiate requested encryption. Subsequent part requests must include the appropriate encryption parameters."
        )),
        (None, Some(_)) => Err(s3_error!(
            InvalidRequest,
            "The multipart upload initiate did not request encryption with customer provided keys: parts take none."
        )),
        (Some(id), Some(c)) => {
            // Records written before fingerprints were per store name the key by its global fingerprint.
            let fingerprint = store
                .customer_fingerprint(&c.key)
                .await
                .map_err(from_store)?;
            if *id == fingerprint || *id == c.key.id() {
                Ok(())
            } else {
                Err(s3_error!(
                    InvalidRequest,
                    "The provided encryption parameters did not match the ones used originally."
                ))
            }
        }
    }
}

/// `GetOptions` that read with `customer`'s key, if any.
pub(crate) fn get_options(customer: Option<&Customer>) -> GetOptions {
    GetOptions {
        customer_key: customer.map(|c| c.key.clone()),
        ..GetOptions::new()
    }
}

/// Refuses a request that asks for SSE-C and another server-side encryption at once (`400 InvalidArgument`).
pub(crate) fn not_with_sse(customer: Option<&Customer>, algorithm: Option<&str>) -> S3Result<()> {
    if customer.is_some() && algorithm.is_some() {
        return Err(s3_error!(
            InvalidArgument,
            "Server Side Encryption with Customer provided key is incompatible with the encryption method specified"
        ));
    }
    Ok(())
}

/// Checks that a read with `given` (the request's customer key, if any) may read version `m`: an SSE-C object
/// needs its own key, any other object takes none.
///
/// # Errors
/// `400 InvalidRequest` for a missing or inapplicable key; `403 AccessDenied` for another key.
pub(crate) async fn check_read(
    store: &BlobStore,
    m: &Manifest,
    given: Option<&Customer>,
) -> S3Result<()> {
    match (m.sealed_by_customer(), given) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(key_missing()),
        (None, Some(_)) => Err(not_applicable()),
        (Some(s), Some(c)) => match store.customer_key_names(&c.key, &s.kek).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(wrong_key()),
            Err(e) => Err(from_store(e)),
        },
    }
}

/// The S3 error of a read with `given` that failed with `e`: a customer key the store refused, or one given for an
/// object not sealed under one, is the client's (as [`check_read`]); else as [`from_store`].
pub(crate) fn read_failed(e: Error, given: Option<&Customer>) -> S3Error {
    match (&e, given) {
        (Error::KeyUnavailable { provider, .. }, None) if *provider == CUSTOMER => key_missing(),
        (Error::KeyUnavailable { provider, .. }, Some(_)) if *provider == CUSTOMER => wrong_key(),
        (Error::InvalidArgument { what, .. }, Some(_)) if *what == CUSTOMER_KEY_NOT_APPLICABLE => {
            not_applicable()
        }
        _ => from_store(e),
    }
}

fn not_applicable() -> S3Error {
    s3_error!(
        InvalidRequest,
        "The encryption parameters are not applicable to this object."
    )
}

fn key_missing() -> S3Error {
    s3_error!(
        InvalidRequest,
        "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object."
    )
}

fn wrong_key() -> S3Error {
    s3_error!(
        AccessDenied,
        "The SSE-C key provided does not match the key the object was stored with."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(customer_keys: bool) -> SseConfig {
        SseConfig {
            customer_keys,
            ..SseConfig::default()
        }
    }

    fn headers(key: &[u8]) -> (String, String) {
        let md5 = <s3s::crypto::Md5 as s3s::crypto::Checksum>::checksum(key);
        (
            base64_simd::STANDARD.encode_to_string(key),
            base64_simd::STANDARD.encode_to_string(md5),
        )
    }

    fn code(r: S3Result<Option<Customer>>) -> (String, u16) {
        let e = r.expect_err("refused");
        (
            e.code().as_str().to_owned(),
            e.status_code().map_or(0, |s| s.as_u16()),
        )
    }

    #[test]
    fn headers_are_checked_as_aws_does() {
        let (key, md5) = headers(&[7; 32]);
        let on = config(true);
        let ok = Customer::of(&on, Some("AES256"), Some(&key), Some(&md5))
            .expect("valid")
            .expect("given");
        assert_eq!(ok.key, CustomerKey::new([7; 32]));
        assert_eq!(ok.md5, md5);
        assert!(Customer::of(&on, None, None, None).expect("none").is_none());
        let invalid = ("InvalidArgument".to_owned(), 400);
        assert_eq!(
            code(Customer::of(&on, None, Some(&key), Some(&md5))),
            invalid
        );
        assert_eq!(
            code(Customer::of(&on, Some("AES256"), None, Some(&md5))),
            invalid
        );
        assert_eq!(
            code(Customer::of(&on, Some("AES256"), Some(&key), None)),
            invalid
        );
        assert_eq!(
            code(Customer::of(&on, Some("aws:kms"), Some(&key), Some(&md5))),
            ("InvalidEncryptionAlgorithmError".to_owned(), 400)
        );
        let (short, short_md5) = headers(&[7; 16]);
        assert_eq!(
            code(Customer::of(
                &on,
                Some("AES256"),
                Some(&short),
                Some(&short_md5)
            )),
            invalid
        );
        assert_eq!(
            code(Customer::of(
                &on,
                Some("AES256"),
                Some("not base64!"),
                Some(&md5)
            )),
            invalid
        );
        let (_, other_md5) = headers(&[8; 32]);
        assert_eq!(
            code(Customer::of(
                &on,
                Some("AES256"),
                Some(&key),
                Some(&other_md5)
            )),
            invalid
        );
        assert_eq!(
            code(Customer::of(
                &config(false),
                Some("AES256"),
                Some(&key),
                Some(&md5)
            )),
            ("InvalidRequest".to_owned(), 400),
            "no TLS, no --sse-c-over-http"
        );
        assert!(not_with_sse(Some(&ok), Some("AES256")).is_err());
        assert!(
            not_with_sse(Some(&ok), None).is_ok() && not_with_sse(None, Some("AES256")).is_ok()
        );
    }
}
