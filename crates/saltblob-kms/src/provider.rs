//! The `aws-kms` key provider: KMS makes each data key (`GenerateDataKey`), wraps it again for `saltblob rekey`
//! (`Encrypt`) and opens it (`Decrypt`), always under the encryption context `{"saltblob": "data-key/1"}`. Before
//! each of these it asks `DescribeKey` and refuses a key that is not `Enabled`, naming its state.

use async_trait::async_trait;
use saltblob_core::encryption::{
    AWS_KMS, AwsKmsParams, DataKey, KEY_LEN, KekRef, KeyProvider, Secret,
};
use saltblob_core::{Error, Result};
use serde_json::{Value, json};

use crate::client::{CallError, KmsClient};
use crate::sigv4::Credentials;

/// The encryption context of every data key: a ciphertext made for something else does not open as one.
const CONTEXT_KEY: &str = "saltblob";
const CONTEXT_VALUE: &str = "data-key/1";
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

    /// The key and wrapped key of a `GenerateDataKey` or `Encrypt` answer.
    fn wrapped(
        &self,
        key: &str,
        arn: String,
        answer: &Value,
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
                version: 0,
            },
        })
    }

    /// The data key of an answer's `Plaintext`.
    fn secret(&self, key: &str, answer: &Value) -> Result<Secret> {
        let plain = zeroize::Zeroizing::new(base64(answer, "Plaintext").unwrap_or_default());
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

fn context() -> Value {
    json!({ CONTEXT_KEY: CONTEXT_VALUE })
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

    async fn new_data_key(&self, kek: &str) -> Result<DataKey> {
        let arn = self.enabled(kek).await?;
        let request = json!({
            "KeyId": arn,
            "KeySpec": "AES_256",
            "EncryptionContext": context(),
        });
        let answer = self.call(kek, "GenerateDataKey", &request).await?;
        self.wrapped(kek, arn, &answer, None)
    }

    async fn wrap_data_key(&self, kek: &str, key: &Secret) -> Result<DataKey> {
        let arn = self.enabled(kek).await?;
        let request = json!({
            "KeyId": arn,
            "Plaintext": base64_simd::STANDARD.encode_to_string(&key[..]),
            "EncryptionContext": context(),
        });
        let answer = self.call(kek, "Encrypt", &request).await?;
        self.wrapped(kek, arn, &answer, Some(key.clone()))
    }

    async fn open_data_key(&self, kek: &KekRef, wrapped: &[u8]) -> Result<Secret> {
        let arn = self.enabled(&kek.name).await?;
        let request = json!({
            "KeyId": arn,
            "CiphertextBlob": base64_simd::STANDARD.encode_to_string(wrapped),
            "EncryptionContext": context(),
        });
        let answer = self.call(&kek.name, "Decrypt", &request).await?;
        if let Some(by) = answer.get("KeyId").and_then(Value::as_str)
            && by != arn
        {
            return Err(self.unavailable(
                &kek.name,
                format!("Decrypt says the data key was wrapped by {by:?}, not this key"),
                false,
            ));
        }
        self.secret(&kek.name, &answer)
    }
}
