//! The `aws-kms` key provider of saltblob's encryption at rest (`docs/format.md`, "Encryption at rest"): data keys
//! made and opened by AWS KMS, or any service that speaks its JSON API, over SigV4-signed HTTP or HTTPS.
//!
//! A store URL selects it with `encryption=aws-kms&encryption_key=KEY_ID`, plus optionally
//! `kms_endpoint=URL` (default `https://kms.REGION.amazonaws.com`), `kms_region=REGION` (default `AWS_REGION`)
//! and `kms_ca=FILE` (default: the system's CA bundle); credentials come from `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`. The store's key cache (`key_cache=`, default 10 minutes) keeps
//! what KMS answered, so KMS is asked once per key and expiry, and a key disabled in KMS stops reads and writes
//! within that time.

mod client;
mod provider;
mod sigv4;

pub use client::{CALL_DEADLINE, CallError, KmsClient};
pub use provider::{AwsKmsProvider, CONTEXT_V2};
pub use sigv4::Credentials;
