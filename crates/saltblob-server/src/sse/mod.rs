//! Server-side encryption, the S3 way (`docs/s3.md`, "Server-side encryption"), on the store's encryption at
//! rest: an object is sealed under a key-encryption key of the store's provider, which its manifest names.
//!
//! - SSE-S3 (`x-amz-server-side-encryption: AES256`) seals under the server's SSE-S3 key (`--sse-s3-key`,
//!   else the store URL's `encryption_key`); SSE-KMS (`aws:kms`) under the key named by
//!   `x-amz-server-side-encryption-aws-kms-key-id` (a keyring name for the `local` provider), else the server's
//!   default KMS key. A put the server cannot seal as asked is refused, never stored in plaintext: no key
//!   provider or no server key `501 NotImplemented`; an unknown key `400 KMS.NotFoundException`.
//! - A bucket's default encryption (Put/Get/DeleteBucketEncryption, `bucket/encryption.rs`) is its record
//!   `s3/e/<bucket>` ([`rules::BucketDefault::encode`]), applied to puts without SSE headers (PutObject,
//!   CopyObject, CreateMultipartUpload). A put with neither is sealed under the store's default key, if it has
//!   one.
//! - The choice is recorded in the object's metadata ([`rules::ALGORITHM_KEY`]); reads answer it from the
//!   manifest ([`rules::Echo::of`]), and never claim encryption for a plaintext object.
//! - SSE-C (`-customer-*`, a key sent with each request) is `customer.rs`; `x-amz-server-side-encryption-context`
//!   is refused by `guard.rs` (`501`).
//!
//! Each request's encryption is chosen here, once, from its headers (where S3 sends it): a put's ([`Sse`], by
//! [`SseConfig::put`], [`SseConfig::upload`] or [`SseConfig::part`]) says how its body is sealed
//! ([`Sse::seal`]) and what its response says ([`Sse::echo`]); a read's is the SSE-C key it gives
//! ([`SseConfig::reader`]). What a response says is written into its headers ([`Echo::respond`]).

pub(crate) mod customer;
pub(crate) mod rules;

use std::collections::BTreeMap;
use std::sync::Arc;

use http::HeaderMap;
use s3s::S3Result;
use saltblob_core::{BlobStore, Error, Manifest, PutOptions};

use self::customer::Customer;
pub(crate) use self::rules::Echo;
use self::rules::{Algorithm, BucketDefault, Choice, Request, SseConfig};
use crate::cache::Cache;
use crate::error::{from_store, key_not_found};
use crate::keys::encryption_key;
use crate::record_reader::read_optional;

/// The content type of default encryption records.
const CONTENT_TYPE: &str = "application/x-saltblob-encryption";

/// The default encryption record of `bucket` as stored, whatever bucket record it was written for; `None` when
/// there is none.
///
/// # Errors
/// `InternalError` for a record that does not decode (logged: puts without SSE headers are refused until it is
/// put again, rather than stored in plaintext); the store's.
pub(crate) async fn read_default(
    store: &BlobStore,
    bucket: &str,
) -> S3Result<Option<BucketDefault>> {
    let key = encryption_key(bucket);
    let Some(bytes) = read_optional(store, &key).await.map_err(from_store)? else {
        return Ok(None);
    };
    // Fails closed: a put that may have been meant to be sealed is refused rather than stored in plaintext.
    BucketDefault::decode(&bytes).map(Some).map_err(|why| {
        tracing::error!(
            bucket,
            key,
            why,
            "corrupt default encryption record: puts without SSE headers are refused until it is put again"
        );
        s3s::s3_error!(
            InternalError,
            "The bucket's default encryption record is damaged ({why}): put it again with PutBucketEncryption, \
             or delete it with DeleteBucketEncryption"
        )
    })
}

/// Writes `default` as `bucket`'s default encryption record.
///
/// # Errors
/// The store's.
pub(crate) async fn put_default(
    store: &BlobStore,
    bucket: &str,
    default: &BucketDefault,
) -> saltblob_core::Result<()> {
    let opts = PutOptions::new().with_content_type(CONTENT_TYPE);
    store
        .put(encryption_key(bucket), default.encode(), &opts)
        .await?;
    Ok(())
}

/// Deletes `bucket`'s default encryption record (whether or not it has one).
///
/// # Errors
/// The store's.
pub(crate) async fn delete_default(store: &BlobStore, bucket: &str) -> saltblob_core::Result<()> {
    store.delete(encryption_key(bucket)).await?;
    Ok(())
}

/// What a put's headers ask for: SSE-S3 or SSE-KMS, and an SSE-C key.
pub(crate) struct Asked {
    request: Request,
    customer: Option<Customer>,
}

impl Asked {
    /// Whether the put names an encryption of its own (an algorithm, or an SSE-C key).
    pub(crate) fn any(&self) -> bool {
        self.request.algorithm.is_some() || self.customer.is_some()
    }
}

/// The encryption of one put (an object, or a part of a multipart upload): the server key it seals under, or
/// the customer key, or neither (the store's own key then seals it, if the store has one); and what its
/// response says about it.
#[derive(Clone, Debug)]
pub(crate) struct Sse {
    choice: Option<Choice>,
    customer: Option<Customer>,
    /// What the put's response says.
    pub echo: Echo,
}

impl Sse {
    /// Seals a put as chosen, recording the choice in the put's metadata (an SSE-C put keeps none of it).
    pub(crate) fn seal(&self, opts: &mut PutOptions) {
        if let Some(choice) = &self.choice {
            choice.insert_into(&mut opts.metadata);
            opts.encryption_key = Some(choice.key.clone());
        }
        if let Some(c) = &self.customer {
            opts.metadata.retain(|k, _| !rules::is_sse_key(k));
            opts.customer_key = Some(c.key.clone());
        }
    }

    /// The SSE-C key the put seals under, if any.
    pub(crate) fn customer_key(&self) -> Option<&saltblob_core::encryption::CustomerKey> {
        self.customer.as_ref().map(|c| &c.key)
    }

    /// The server key the put seals under, if the request or its bucket's default named one.
    pub(crate) fn server_key(&self) -> Option<&str> {
        self.choice.as_ref().map(|c| c.key.as_str())
    }

    /// Records in a multipart upload record's `metadata` how its parts are sealed (see [`SseConfig::part`]).
    ///
    /// # Errors
    /// A store error (an SSE-C upload's record names the key by its fingerprint in `store`).
    pub(crate) async fn record_in_upload(
        &self,
        store: &BlobStore,
        metadata: &mut BTreeMap<String, String>,
    ) -> S3Result<()> {
        if let Some(choice) = &self.choice {
            choice.insert_into_upload(metadata);
        }
        if let Some(c) = &self.customer {
            let fingerprint = store
                .customer_fingerprint(&c.key)
                .await
                .map_err(from_store)?;
            customer::insert_into_upload(fingerprint, metadata);
        }
        Ok(())
    }
}

impl SseConfig {
    /// The encryption settings of a server on `store` with SSE-S3 key `s3_key` (default: the store's key), default
    /// SSE-KMS key `kms_key` (default: the SSE-S3 key), taking SSE-C keys when `customer_keys`.
    pub(crate) fn new(
        store: &BlobStore,
        s3_key: Option<String>,
        kms_key: Option<String>,
        customer_keys: bool,
    ) -> Self {
        let store_encryption = store.config().encryption.as_ref();
        let store_key = store_encryption.and_then(|e| e.key.clone());
        let s3_key = s3_key.or_else(|| store_key.clone());
        Self {
            provider: store_encryption.is_some(),
            kms_key: kms_key.or_else(|| s3_key.clone()),
            s3_key,
            customer_keys,
            store_key,
            defaults: Cache::default(),
        }
    }

    /// What a put's `headers` ask for.
    ///
    /// # Errors
    /// Those of [`Customer::of`].
    pub(crate) fn asked(&self, headers: &HeaderMap) -> S3Result<Asked> {
        Ok(Asked {
            customer: Customer::of_headers(self, headers, false)?,
            request: Request::of_headers(headers),
        })
    }

    /// The encryption of a put into `bucket` (whose record is `record`) that asked for `asked`: the SSE-C key it
    /// gives (whatever the bucket's default, as AWS), else the algorithm it names, else its bucket's default,
    /// else none (the store's own key then applies).
    ///
    /// # Errors
    /// `InvalidArgument` for SSE-C with another server-side encryption; those of [`Choice::of`]; the store's.
    pub(crate) async fn choose(
        &self,
        store: &BlobStore,
        bucket: &str,
        record: &Manifest,
        asked: Asked,
    ) -> S3Result<Sse> {
        let Asked { request, customer } = asked;
        customer::not_with_sse(customer.as_ref(), request.algorithm.as_deref())?;
        let choice = if customer.is_some() {
            None
        } else if request.algorithm.is_some() || request.kms_key_id.is_some() {
            Choice::of(&request, self)?
        } else {
            match self.bucket_default(store, bucket, record).await? {
                Some(d) => Choice::of(&d.request(), self)?,
                None => None,
            }
        };
        Ok(self.sse(choice, customer))
    }

    /// [`SseConfig::choose`] with what a put's `headers` ask for (PutObject).
    ///
    /// # Errors
    /// Those of [`SseConfig::asked`] and [`SseConfig::choose`].
    pub(crate) async fn put(
        &self,
        store: &BlobStore,
        bucket: &str,
        record: &Manifest,
        headers: &HeaderMap,
    ) -> S3Result<Sse> {
        self.choose(store, bucket, record, self.asked(headers)?)
            .await
    }

    /// [`SseConfig::put`] for CreateMultipartUpload: the server key chosen is checked now, not at the first part.
    ///
    /// # Errors
    /// Those of [`SseConfig::put`] and [`SseConfig::check_key`].
    pub(crate) async fn upload(
        &self,
        store: &BlobStore,
        bucket: &str,
        record: &Manifest,
        headers: &HeaderMap,
    ) -> S3Result<Sse> {
        let sse = self.put(store, bucket, record, headers).await?;
        if let Some(key) = sse.server_key() {
            self.check_key(store, key).await?;
        }
        Ok(sse)
    }

    /// The encryption of a part of the upload whose record holds `upload` (UploadPart, UploadPartCopy): as the
    /// upload chose (each segment under its own version, whatever a copy's source was sealed with), with the
    /// SSE-C key the part's `headers` give, which must be the upload's.
    ///
    /// # Errors
    /// Those of [`Customer::of`] and [`customer::check_part`].
    pub(crate) async fn part(
        &self,
        store: &BlobStore,
        upload: &BTreeMap<String, String>,
        headers: &HeaderMap,
    ) -> S3Result<Sse> {
        let customer = Customer::of_headers(self, headers, false)?;
        customer::check_part(store, upload, customer.as_ref()).await?;
        Ok(self.sse(Choice::of_upload(upload), customer))
    }

    /// What CompleteMultipartUpload's response says about the object of the upload whose record holds `upload`
    /// (`None`: it could not be read): nothing for SSE-C (its response has no SSE-C headers, and claims no other
    /// encryption), else as the upload chose.
    pub(crate) fn completed(&self, upload: Option<&BTreeMap<String, String>>) -> Echo {
        match upload {
            Some(upload) if !customer::is_upload(upload) => {
                self.echo_of(Choice::of_upload(upload).as_ref())
            }
            _ => Echo::default(),
        }
    }

    /// The SSE-C key a read gives in its `headers` (GetObject, HeadObject; `source`: a copy's source), with which
    /// it reads ([`customer::get_options`], [`customer::check_read`]).
    ///
    /// # Errors
    /// Those of [`Customer::of`].
    pub(crate) fn reader(&self, headers: &HeaderMap, source: bool) -> S3Result<Option<Customer>> {
        Customer::of_headers(self, headers, source)
    }

    /// What a read of `m` with SSE-C key `customer` says about its encryption.
    pub(crate) fn read_echo(&self, m: &Manifest, customer: Option<&Customer>) -> Echo {
        Echo {
            customer_md5: customer.map(|c| c.md5.clone()),
            ..Echo::of(m, self.s3_key.as_deref())
        }
    }

    /// The server key a bucket default `default` seals under (PutBucketEncryption checks it).
    ///
    /// # Errors
    /// Those of [`Choice::of`].
    pub(crate) fn default_key(&self, default: &BucketDefault) -> S3Result<Option<String>> {
        Ok(Choice::of(&default.request(), self)?.map(|c| c.key))
    }

    /// Checks that the store's provider can seal under `key` now.
    ///
    /// # Errors
    /// `KMS.NotFoundException` (400) naming the key when it cannot; `ServiceUnavailable` when the provider did
    /// not answer.
    pub(crate) async fn check_key(&self, store: &BlobStore, key: &str) -> S3Result<()> {
        match store.check_encryption_key(key).await {
            Ok(()) => Ok(()),
            Err(Error::InvalidArgument { .. }) => Err(key_not_found(key)),
            Err(e) => Err(crate::error::from_sealed_put(e, key)),
        }
    }

    /// The default encryption of `bucket`, whose record is `record` (possibly from the cache).
    async fn bucket_default(
        &self,
        store: &BlobStore,
        bucket: &str,
        record: &Manifest,
    ) -> S3Result<Option<Arc<BucketDefault>>> {
        let read = self
            .defaults
            .read(bucket, read_default(store, bucket))
            .await?;
        Ok(read.filter(|d| d.bucket_version == record.version))
    }

    /// The [`Sse`] of `choice` or `customer`.
    fn sse(&self, choice: Option<Choice>, customer: Option<Customer>) -> Sse {
        let echo = match &customer {
            Some(c) => Echo {
                customer_md5: Some(c.md5.clone()),
                ..Echo::default()
            },
            None => self.echo_of(choice.as_ref()),
        };
        Sse {
            choice,
            customer,
            echo,
        }
    }

    /// What a put that chose `choice` says about its encryption: the choice's, or when it made none (the store's
    /// default key seals it, if the store has one) `AES256` for the SSE-S3 key and `aws:kms` for another.
    fn echo_of(&self, choice: Option<&Choice>) -> Echo {
        if let Some(choice) = choice {
            return choice.echo();
        }
        match &self.store_key {
            None => Echo::default(),
            Some(key) => Choice {
                algorithm: if Some(key.as_str()) == self.s3_key.as_deref() {
                    Algorithm::S3
                } else {
                    Algorithm::Kms
                },
                key: key.clone(),
                bucket_key: false,
            }
            .echo(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
        h.get(name).and_then(|v| v.to_str().ok())
    }

    /// A put's encryption is read from its headers (as s3s parsed them), seals the put and records the choice;
    /// its response says it in its headers, and an SSE-C response says only the customer key's MD5.
    #[test]
    fn a_put_is_chosen_from_its_headers_and_its_response_says_it_in_headers() {
        let config = SseConfig {
            provider: true,
            s3_key: Some("s3key".into()),
            kms_key: Some("kmskey".into()),
            ..SseConfig::default()
        };
        assert!(!config.asked(&HeaderMap::new()).expect("none").any());
        let asked = config
            .asked(&headers(&[
                ("x-amz-server-side-encryption", "aws:kms"),
                ("x-amz-server-side-encryption-aws-kms-key-id", "tenant"),
                ("x-amz-server-side-encryption-bucket-key-enabled", "True"),
            ]))
            .expect("asked");
        assert!(asked.any());
        let choice = Choice::of(&asked.request, &config).expect("valid");
        let sse = config.sse(choice, None);
        let mut opts = PutOptions::new();
        sse.seal(&mut opts);
        assert_eq!(opts.encryption_key.as_deref(), Some("tenant"));
        assert_eq!(
            opts.metadata.get(rules::ALGORITHM_KEY).map(String::as_str),
            Some("aws:kms")
        );
        let said = sse.echo.respond(()).headers;
        assert_eq!(
            header(&said, "x-amz-server-side-encryption"),
            Some("aws:kms")
        );
        assert_eq!(
            header(&said, "x-amz-server-side-encryption-aws-kms-key-id"),
            Some("tenant")
        );
        assert_eq!(
            header(&said, "x-amz-server-side-encryption-bucket-key-enabled"),
            Some("true")
        );
        assert_eq!(said.len(), 3, "{said:?}");
        let customer = Echo {
            customer_md5: Some("bWQ1".into()),
            ..Echo::default()
        }
        .respond(())
        .headers;
        assert_eq!(
            header(&customer, "x-amz-server-side-encryption-customer-algorithm"),
            Some("AES256")
        );
        assert_eq!(
            header(&customer, "x-amz-server-side-encryption-customer-key-md5"),
            Some("bWQ1")
        );
        assert_eq!(customer.len(), 2, "{customer:?}");
    }
}
