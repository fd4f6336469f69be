//! The `aws-kms` provider against a real KMS API: `moto` (from PyPI) serving KMS on loopback, started by
//! `scripts/kms-tests.sh`, which sets `TEST_KMS_ENDPOINT` and the credentials (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`) and passes `--include-ignored`. Each test makes keys of its own (CreateKey) through
//! the crate's own signed client, then uses them through stores opened by URL, as users do.

mod aws_kms;
