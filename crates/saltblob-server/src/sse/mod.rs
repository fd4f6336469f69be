//! Server-side encryption, the S3 way (`docs/s3.md`, "Server-side encryption"), on the store's encryption at
//! rest: an object is sealed under a key-encryption key of the store's provider, which its manifest names.
//!
//! - SSE-S3 (`x-amz-server-side-encryption: AES256`) seals under the server's SSE-S3 key (`--sse-s3-key`,
//!   else the store URL's `encryption_key`); SSE-KMS (`aws:kms`) under the key named by
//!   `x-amz-server-side-encryption-aws-kms-key-id` (a keyring name for the `local` provider), else the server's
//!   default KMS key. A put the server cannot seal as asked is refused, never stored in plaintext: no key
//!   provider or no server key `501 NotImplemented`; an unknown key `400 KMS.NotFoundException`.
//! - A bucket's default encryption (Put/Get/DeleteBucketEncryption) is its record `s3/e/<bucket>`
//!   ([`rules::BucketDefault::encode`]), applied to puts without SSE headers (PutObject, CopyObject,
//!   CreateMultipartUpload). A put with neither is sealed under the store's default key, if it has one.
//! - The choice is recorded in the object's metadata ([`rules::ALGORITHM_KEY`]); reads answer it from the
//!   manifest ([`rules::Echo::of`]), and never claim encryption for a plaintext object.
//! - SSE-C (`-customer-*`, a key sent with each request) is `customer.rs`; `x-amz-server-side-encryption-context`
//!   is refused by `guard.rs` (`501`).

pub(crate) mod customer;
pub(crate) mod rules;

use std::sync::Arc;

use s3s::dto::{
    DeleteBucketEncryptionInput, DeleteBucketEncryptionOutput, GetBucketEncryptionInput,
    GetBucketEncryptionOutput, PutBucketEncryptionInput, PutBucketEncryptionOutput,
};
use s3s::{S3Error, S3Request, S3Response, S3Result};
use saltblob_core::{BlobStore, Error, Manifest, PutOptions};

use self::rules::{Algorithm, BucketDefault, Choice, Echo, Request, key_not_found};
use crate::body::SharedOutcome;
use crate::error::from_store;
use crate::keys::encryption_key;
use crate::put_body::finish_put;
use crate::service::SaltS3;

/// The content type of default encryption records.
const CONTENT_TYPE: &str = "application/x-saltblob-encryption";

/// The default encryption record of `bucket` as stored, whatever bucket record it was written for; `None` when
/// there is none or it does not decode (logged: puts then get no default).
async fn read_record(store: &BlobStore, bucket: &str) -> S3Result<Option<BucketDefault>> {
    let key = encryption_key(bucket);
    let bytes = match store.get(&key).await {
        Ok(bytes) => bytes,
        Err(Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(from_store(e)),
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

impl SaltS3 {
    /// The default encryption of `bucket`, whose record is `record` (possibly from the cache).
    async fn bucket_default(
        &self,
        bucket: &str,
        record: &Manifest,
    ) -> S3Result<Option<Arc<BucketDefault>>> {
        let read = match self.sse.defaults.fresh(bucket) {
            Some(cached) => cached,
            None => {
                let read = read_record(&self.store, bucket).await?.map(Arc::new);
                self.sse.defaults.keep(bucket, read.clone());
                read
            }
        };
        Ok(read.filter(|d| d.bucket_version == record.version))
    }

    /// The encryption of a put into `bucket` (whose record is `record`) that asked for `request`: the request's
    /// own, else the bucket's default; `None` when neither names one (the store's default key then applies).
    ///
    /// # Errors
    /// Those of [`Choice::of`]; the store's.
    pub(crate) async fn sse_choice(
        &self,
        bucket: &str,
        record: &Manifest,
        request: &Request,
    ) -> S3Result<Option<Choice>> {
        if request.algorithm.is_some() || request.kms_key_id.is_some() {
            return Choice::of(request, &self.sse);
        }
        match self.bucket_default(bucket, record).await? {
            Some(d) => Choice::of(&d.request(), &self.sse),
            None => Ok(None),
        }
    }

    /// The encryption of a put into `bucket` (whose record is `record`) that asked for `request` with SSE-C key
    /// `customer`: none from the server when it gives a customer key (it seals under that, whatever the bucket's
    /// default, as AWS), else as [`SaltS3::sse_choice`].
    ///
    /// # Errors
    /// `InvalidArgument` for SSE-C with another server-side encryption; those of [`SaltS3::sse_choice`].
    pub(crate) async fn put_choice(
        &self,
        bucket: &str,
        record: &Manifest,
        request: &Request,
        customer: Option<&customer::Customer>,
    ) -> S3Result<Option<Choice>> {
        customer::not_with_sse(customer, request.algorithm.as_deref())?;
        match customer {
            Some(_) => Ok(None),
            None => self.sse_choice(bucket, record, request).await,
        }
    }

    /// What a read of `m` says about its encryption.
    pub(crate) fn sse_echo(&self, m: &Manifest) -> Echo {
        Echo::of(m, self.sse.s3_key.as_deref())
    }

    /// What a put that chose `choice` says about its encryption: the choice's, or when it made none (the
    /// store's default key seals it, if the store has one) `AES256` for the SSE-S3 key and `aws:kms` for another.
    pub(crate) fn choice_echo(&self, choice: Option<&Choice>) -> Echo {
        if let Some(choice) = choice {
            return choice.echo();
        }
        let store_key = self
            .store
            .config()
            .encryption
            .as_ref()
            .and_then(|e| e.key.clone());
        match store_key {
            None => Echo::default(),
            Some(key) => Choice {
                algorithm: if Some(key.as_str()) == self.sse.s3_key.as_deref() {
                    Algorithm::S3
                } else {
                    Algorithm::Kms
                },
                key,
                bucket_key: false,
            }
            .echo(),
        }
    }

    /// Checks that the store's provider can seal under `key` now (a multipart upload's parts come later).
    ///
    /// # Errors
    /// `KMS.NotFoundException` (400) naming the key when it cannot; `ServiceUnavailable` when the provider did
    /// not answer.
    pub(crate) async fn check_key(&self, key: &str) -> S3Result<()> {
        match self.store.check_encryption_key(key).await {
            Ok(()) => Ok(()),
            Err(Error::InvalidArgument { .. }) => Err(key_not_found(key)),
            Err(e) => Err(put_failed(e, key)),
        }
    }
}

/// Seals a put under `choice`, recording it in the put's metadata.
pub(crate) fn apply(choice: Option<&Choice>, opts: &mut PutOptions) {
    if let Some(choice) = choice {
        choice.insert_into(&mut opts.metadata);
        opts.encryption_key = Some(choice.key.clone());
    }
}

/// The S3 error of a put sealed under `key` that failed with `e`: an unavailable key is the client's (it named
/// it, or the bucket's default did): `KMS.NotFoundException`; else as [`from_store`].
fn put_failed(e: Error, key: &str) -> S3Error {
    match &e {
        Error::KeyUnavailable {
            retryable: false, ..
        } => {
            tracing::debug!(error = %e, "a put names a key the provider cannot seal under");
            key_not_found(key)
        }
        _ => from_store(e),
    }
}

/// The outcome of a put (or a part) sealed as `choice` says, as [`finish_put`]; but a key the provider cannot
/// seal under is the client's `KMS.NotFoundException` (nothing was stored: the core refuses before it writes).
pub(crate) fn finish_sealed<T>(
    result: saltblob_core::Result<T>,
    outcome: &SharedOutcome,
    choice: Option<&Choice>,
) -> S3Result<T> {
    match (result, choice) {
        (Err(e @ Error::KeyUnavailable { .. }), Some(c)) => Err(put_failed(e, &c.key)),
        (result, _) => finish_put(result, outcome),
    }
}

/// PutBucketEncryption: replaces the bucket's default encryption, once checked (a KMS key the provider cannot
/// seal under is refused now rather than at every put).
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let default =
        BucketDefault::from_config(input.server_side_encryption_configuration, record.version)?;
    if let Some(choice) = Choice::of(&default.request(), &s3.sse)? {
        s3.check_key(&choice.key).await?;
    }
    let opts = PutOptions::new().with_content_type(CONTENT_TYPE);
    let stored = s3
        .store
        .put(encryption_key(&input.bucket), default.encode(), &opts)
        .await;
    s3.sse.defaults.forget(&input.bucket);
    stored.map_err(from_store)?;
    Ok(S3Response::new(PutBucketEncryptionOutput::default()))
}

/// GetBucketEncryption: the bucket's default; `ServerSideEncryptionConfigurationNotFoundError` (404) when it
/// has none.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let bucket = req.input.bucket;
    let record = s3.require_bucket(&bucket).await?;
    let current = read_record(&s3.store, &bucket)
        .await?
        .filter(|d| d.bucket_version == record.version);
    match current {
        Some(d) => Ok(S3Response::new(GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(d.to_config()),
        })),
        None => {
            crate::settings::not_set(
                s3,
                &bucket,
                "ServerSideEncryptionConfigurationNotFoundError",
                "The server side encryption configuration was not found",
            )
            .await
        }
    }
}

/// DeleteBucketEncryption: removes the bucket's default (204 whether or not it had one, as S3).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    let bucket = req.input.bucket;
    s3.require_bucket(&bucket).await?;
    let deleted = s3.store.delete(encryption_key(&bucket)).await;
    s3.sse.defaults.forget(&bucket);
    deleted.map_err(from_store)?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
}

/// Removes `bucket`'s default encryption record after the bucket itself was deleted. A failure is only logged:
/// a record left behind names the deleted bucket record's version and is never applied to a new bucket.
pub(crate) async fn forget_bucket(s3: &SaltS3, bucket: &str) {
    if let Err(e) = s3.store.delete(encryption_key(bucket)).await {
        tracing::warn!(bucket, error = %e, "the deleted bucket's default encryption record stays (it is never applied)");
    }
    s3.sse.defaults.forget(bucket);
}
