//! The `aws-kms` key provider: KMS makes each data key (`GenerateDataKey`), wraps it again for `saltblob rekey`
//! (`Encrypt`) and opens it (`Decrypt`), under an encryption context that names what the key is for
//! ([`context`]): `{"saltblob": "data-key/2", "saltblob:store": <store id>, "saltblob:kek": <key ARN>}` for
//! the data keys of a store (recorded as key version [`CONTEXT_V2`]), `{"saltblob": "data-key/1"}` for those
//! written before (version 0), which still open. A data key serves the versions a store seals under the key for
//! the data-key cache's time, so the context names the store and the key, not a version of a blob (each
//! version's secrets are derived from the data key and the version). Before each call it asks `DescribeKey` and
//! refuses a key that is not `Enabled`, naming its state. The plaintext data key in KMS's answer (and in an
//! `Encrypt` request) is zeroed once read.

use async_trait::async_trait;
use saltblob_core::encryption::{
    AWS_KMS, AwsKmsParams, DataKey, KEY_LEN, KekRef, KeyProvider, STORE_ID_LEN, Secret,
};
use saltblob_core::manifest::hex;
use saltblob_core::{Error, Result};
use serde_json::{Value, json};

use crate::client::{CallError, KmsClient};
use crate::sigv4::Credentials;

/// The encryption context of every data key: a ciphertext made for something else does not open as one.
const CONTEXT_KEY: &str = "saltblob";
/// The context of data keys made before contexts named their store (key version 0).
const CONTEXT_V1: &str = "data-key/1";
/// The context of a store's data keys, with [`CONTEXT_STORE`] and [`CONTEXT_KEK`].
const CONTEXT_V2_VALUE: &str = "data-key/2";
const CONTEXT_STORE: &str = "saltblob:store";
const CONTEXT_KEK: &str = "saltblob:kek";
/// The key version a manifest records for a data key wrapped under the context of its store ([`context`]).
pub const CONTEXT_V2: u32 = 1;
/// Longest key id a manifest records (its length is one byte).
const MAX_KEY_ID_LEN: usize = 255;
/// Longest wrapped key a manifest records (its length is two bytes); KMS ciphertexts are at most 6 KiB.
const MAX_WRAPPED_LEN: usize = u16::MAX as usize;

/// Key-encryption keys in AWS KMS (or a service that speaks its API): a data key is wrapped by a symmetric KMS key,
/// named by key id, ARN or alias; manifests record the key's ARN as KMS reports it, with version 0 (KMS rotates a
/// key's material itself, and its ciphertexts name the material).
#[derive(Debug, Clone)]
pub struct AwsKmsProvider {
    client: KmsClient,
}

impl AwsKmsProvider {
    /// The provider `params` describe, signing with the environment's credentials ([`Credentials::from_env`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: no credentials in the environment, or [`KmsClient::new`]'s.
    pub fn from_params(params: &AwsKmsParams) -> Result<Self> {
        let credentials = Credentials::from_env().ok_or_else(|| {
            Error::invalid(
                "encryption",
                "aws-kms signs its requests with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                 (and AWS_SESSION_TOKEN for temporary credentials): set them",
            )
        })?;
        Ok(Self::new(KmsClient::new(params, credentials)?))
    }

    /// The provider over `client`.
    pub fn new(client: KmsClient) -> Self {
        Self { client }
    }

    /// Its client.
    pub fn client(&self) -> &KmsClient {
        &self.client
    }

    fn unavailable(&self, key: &str, why: impl std::fmt::Display, retryable: bool) -> Error {
        Error::KeyUnavailable {
            provider: AWS_KMS,
            key: format!("{key:?}"),
            reason: format!("{why} (KMS at {})", self.client.endpoint()),
            retryable,
        }
    }

    fn failed(&self, key: &str, action: &str, e: &CallError) -> Error {
        let hint = match e {
            CallError::Kms { kind, .. } => match kind.as_str() {
                "NotFoundException" => "; check the key id, or create the key",
                "DisabledException" => "; enable the key (aws kms enable-key)",
                "KMSInvalidStateException" => "; the key is pending deletion or import: cancel it",
                "AccessDeniedException"
                | "UnrecognizedClientException"
                | "InvalidSignatureException" => {
                    "; check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) and the key policy"
                }
                "InvalidCiphertextException" | "IncorrectKeyException" => {
                    "; the wrapped data key is not this key's, or was changed"
                }
                _ => "",
            },
            CallError::Unreachable(_) => "; check kms_endpoint and the network",
        };
        self.unavailable(key, format!("{action}: {e}{hint}"), e.is_retryable())
    }

    /// Calls `action` for key `key`, its failure a [`Error::KeyUnavailable`] naming the key.
    async fn call(&self, key: &str, action: &str, request: &Value) -> Result<Value> {
        self.client
            .call(action, request)
            .await
            .map_err(|e| self.failed(key, action, &e))
    }

    /// The ARN of `key` once `DescribeKey` says it is enabled and a symmetric encryption key.
    async fn enabled(&self, key: &str) -> Result<String> {
        let answer = self
            .call(key, "DescribeKey", &json!({ "KeyId": key }))
            .await?;
        let meta = answer.get("KeyMetadata");
        let field = |name| meta.and_then(|m| m.get(name)).and_then(Value::as_str);
        match field("KeyState") {
            Some("Enabled") => {}
            Some(state) => {
                let what = match state {
                    "Disabled" => {
                        "disabled: enable it (aws kms enable-key) to read and write its blobs"
                            .into()
                    }
                    "PendingDeletion" => {
                        "pending deletion: cancel the deletion (aws kms cancel-key-deletion) \
                        and enable it, or its blobs are lost with it"
                            .into()
                    }
                    other => format!("in state {other}, not Enabled"),
                };
                return Err(self.unavailable(key, format!("the key is {what}"), false));
            }
            None => {
                return Err(self.unavailable(
                    key,
                    "DescribeKey answered without a KeyState",
                    false,
                ));
            }
        }
        if let Some(usage) = field("KeyUsage").filter(|u| *u != "ENCRYPT_DECRYPT") {
            return Err(self.unavailable(
                key,
                format!(
                    "a {usage} key cannot wrap data keys: give a symmetric ENCRYPT_DECRYPT key"
                ),
                false,
            ));
        }
        let arn = field("Arn").unwrap_or(key).to_owned();
        if arn.len() > MAX_KEY_ID_LEN {
            return Err(self.unavailable(
                key,
                format!("its ARN is over {MAX_KEY_ID_LEN} bytes, more than a manifest records"),
                false,
            ));
        }
        Ok(arn)
    }

    /// The key and wrapped key of a `GenerateDataKey` or `Encrypt` answer, made under the context of key version
    /// `version`.
    fn wrapped(
        &self,
        key: &str,
        (arn, version): (String, u32),
        answer: &mut Value,
        plaintext: Option<Secret>,
    ) -> Result<DataKey> {
        let wrapped = base64(answer, "CiphertextBlob").ok_or_else(|| {
            self.unavailable(key, "the KMS answered without a CiphertextBlob", false)
        })?;
        if wrapped.len() > MAX_WRAPPED_LEN {
            return Err(self.unavailable(key, "a CiphertextBlob over 64 KiB", false));
        }
        let key = match plaintext {
            Some(k) => k,
            None => self.secret(key, answer)?,
        };
        Ok(DataKey {
            key,
            wrapped,
            kek: KekRef {
                provider: AWS_KMS,
                name: arn,
                version,
            },
        })
    }

    /// The data key of an answer's `Plaintext`, which is taken out of the answer and zeroed.
    fn secret(&self, key: &str, answer: &mut Value) -> Result<Secret> {
        let text = take_secret(answer, "Plaintext");
        let plain = zeroize::Zeroizing::new(
            base64_simd::STANDARD
                .decode_to_vec(text.as_bytes())
                .unwrap_or_default(),
        );
        if plain.len() != KEY_LEN {
            return Err(self.unavailable(
                key,
                format!(
                    "the KMS answered a data key of {} bytes; {KEY_LEN} expected",
                    plain.len()
                ),
                false,
            ));
        }
        let mut secret = Secret::new([0; KEY_LEN]);
        secret.copy_from_slice(&plain);
        Ok(secret)
    }
}

/// The encryption context of a data key wrapped by `arn` under key version `version` for the store `store_id`:
/// [`CONTEXT_V2`] names the purpose and its version, the store and the key; version 0 is the constant context of
/// data keys made before. `None` for a version no build wrote.
fn context(version: u32, store_id: &[u8; STORE_ID_LEN], arn: &str) -> Option<Value> {
    match version {
        0 => Some(json!({ CONTEXT_KEY: CONTEXT_V1 })),
        CONTEXT_V2 => Some(json!({
            CONTEXT_KEY: CONTEXT_V2_VALUE,
            CONTEXT_STORE: hex(store_id),
            CONTEXT_KEK: arn,
        })),
        _ => None,
    }
}

/// String field `name` of `value`, taken out of it, to be zeroed when dropped (a plaintext data key).
fn take_secret(value: &mut Value, name: &str) -> zeroize::Zeroizing<String> {
    match value.get_mut(name).map(Value::take) {
        Some(Value::String(text)) => zeroize::Zeroizing::new(text),
        _ => zeroize::Zeroizing::new(String::new()),
    }
}

/// Field `name` of `answer`, base64-decoded.
fn base64(answer: &Value, name: &str) -> Option<Vec<u8>> {
    let text = answer.get(name)?.as_str()?;
    base64_simd::STANDARD.decode_to_vec(text).ok()
}

#[async_trait]
impl KeyProvider for AwsKmsProvider {
    fn name(&self) -> &'static str {
        AWS_KMS
    }

    /// A data key under the constant context of data keys made before contexts named their store (version 0);
    /// stores call [`KeyProvider::new_store_data_key`].
    async fn new_data_key(&self, kek: &str) -> Result<DataKey> {
        self.generate(kek, 0, &[0; STORE_ID_LEN]).await
    }

    async fn new_store_data_key(
        &self,
        kek: &str,
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<DataKey> {
        self.generate(kek, CONTEXT_V2, store_id).await
    }

    async fn wrap_data_key(&self, kek: &str, key: &Secret) -> Result<DataKey> {
        self.encrypt(kek, key, 0, &[0; STORE_ID_LEN]).await
    }

    async fn wrap_store_data_key(
        &self,
        kek: &str,
        key: &Secret,
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<DataKey> {
        self.encrypt(kek, key, CONTEXT_V2, store_id).await
    }

    async fn open_data_key(&self, kek: &KekRef, wrapped: &[u8]) -> Result<Secret> {
        self.decrypt(kek, wrapped, &[0; STORE_ID_LEN]).await
    }

    async fn open_store_data_key(
        &self,
        kek: &KekRef,
        wrapped: &[u8],
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<Secret> {
        self.decrypt(kek, wrapped, store_id).await
    }
}

impl AwsKmsProvider {
    /// The context of key version `version` for `store_id` and `arn`, or the error of a version no build wrote.
    fn context_of(
        &self,
        key: &str,
        version: u32,
        store_id: &[u8; STORE_ID_LEN],
        arn: &str,
    ) -> Result<Value> {
        context(version, store_id, arn).ok_or_else(|| {
            self.unavailable(
                key,
                format!(
                    "key version {version}: this build knows the encryption contexts of versions 0 and {CONTEXT_V2}"
                ),
                false,
            )
        })
    }

    /// `GenerateDataKey` under the context of `version` for `store_id`.
    async fn generate(
        &self,
        kek: &str,
        version: u32,
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<DataKey> {
        let arn = self.enabled(kek).await?;
        let request = json!({
            "KeyId": arn,
            "KeySpec": "AES_256",
            "EncryptionContext": self.context_of(kek, version, store_id, &arn)?,
        });
        let mut answer = self.call(kek, "GenerateDataKey", &request).await?;
        self.wrapped(kek, (arn, version), &mut answer, None)
    }

    /// `Encrypt` of `key` under the context of `version` for `store_id`.
    async fn encrypt(
        &self,
        kek: &str,
        key: &Secret,
        version: u32,
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<DataKey> {
        let arn = self.enabled(kek).await?;
        let mut request = json!({
            "KeyId": arn,
            "Plaintext": base64_simd::STANDARD.encode_to_string(&key[..]),
            "EncryptionContext": self.context_of(kek, version, store_id, &arn)?,
        });
        let answer = self.call(kek, "Encrypt", &request).await;
        drop(take_secret(&mut request, "Plaintext"));
        let mut answer = answer?;
        self.wrapped(kek, (arn, version), &mut answer, Some(key.clone()))
    }

    /// `Decrypt` of `wrapped` under the context `kek`'s version names, for `store_id`.
    async fn decrypt(
        &self,
        kek: &KekRef,
        wrapped: &[u8],
        store_id: &[u8; STORE_ID_LEN],
    ) -> Result<Secret> {
        let arn = self.enabled(&kek.name).await?;
        let request = json!({
            "KeyId": arn,
            "CiphertextBlob": base64_simd::STANDARD.encode_to_string(wrapped),
            "EncryptionContext": self.context_of(&kek.name, kek.version, store_id, &kek.name)?,
        });
        let mut answer = self.call(&kek.name, "Decrypt", &request).await?;
        if let Some(by) = answer.get("KeyId").and_then(Value::as_str)
            && by != arn
        {
            return Err(self.unavailable(
                &kek.name,
                format!("Decrypt says the data key was wrapped by {by:?}, not this key"),
                false,
            ));
        }
        self.secret(&kek.name, &mut answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's data keys are bound to the store, the key and the context's version; keys made before keep the
    /// constant context they were made under; an unknown version has none.
    #[test]
    fn the_context_names_the_store_and_the_key() {
        let arn = "arn:aws:kms:eu-west-1:111122223333:key/k";
        let store = [0xAB; STORE_ID_LEN];
        let v2 = context(CONTEXT_V2, &store, arn).unwrap();
        assert_eq!(v2[CONTEXT_KEY], "data-key/2");
        assert_eq!(v2[CONTEXT_STORE], "ab".repeat(STORE_ID_LEN));
        assert_eq!(v2[CONTEXT_KEK], arn);
        assert_ne!(v2, context(CONTEXT_V2, &[0xAC; STORE_ID_LEN], arn).unwrap());
        assert_ne!(v2, context(CONTEXT_V2, &store, "arn:other").unwrap());
        assert_eq!(
            context(0, &store, arn).unwrap(),
            json!({ "saltblob": "data-key/1" })
        );
        assert!(context(CONTEXT_V2 + 1, &store, arn).is_none());
    }

    #[test]
    fn a_plaintext_is_taken_out_of_the_answer() {
        let mut answer = json!({ "Plaintext": "c2VjcmV0", "KeyId": "k" });
        assert_eq!(take_secret(&mut answer, "Plaintext").as_str(), "c2VjcmV0");
        assert_eq!(answer["Plaintext"], Value::Null);
        assert_eq!(take_secret(&mut answer, "Plaintext").as_str(), "");
    }
}
