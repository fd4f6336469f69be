//! Put/Get/DeleteBucketTagging: a bucket's tag set, in its tagging record `s3/t/<bucket>` (`keys.rs`), which names
//! the bucket record's version it was written for (a deleted bucket's tags never show on a new one).
//!
//! Record format 1 (little-endian):
//!
//! ```text
//! magic "SBTG" | format u8 (1) | bucket record version u128
//! | the tags as x-amz-tagging carries them (UTF-8, to the end)
//! ```
//!
//! A record that breaks this is logged as corrupt and read as no tags.

use s3s::dto::{
    DeleteBucketTaggingInput, DeleteBucketTaggingOutput, GetBucketTaggingInput,
    GetBucketTaggingOutput, PutBucketTaggingInput, PutBucketTaggingOutput,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::{PutOptions, VersionId};

use crate::error::from_store;
use crate::keys::tagging_key;
use crate::record_reader::Reader;
use crate::record_reader::read_setting;
use crate::service::SaltS3;
use crate::tagging::{MAX_BUCKET_TAGS, Tags};

/// The first bytes of a bucket tagging record.
const MAGIC: &[u8; 4] = b"SBTG";
/// The record format written and read.
const FORMAT: u8 = 1;
/// The content type of bucket tagging records.
const CONTENT_TYPE: &str = "application/x-saltblob-bucket-tagging";

/// PutBucketTagging: replaces the bucket's tags, once checked (at most 50).
pub(crate) async fn handle_put(
    s3: &SaltS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let input = req.input;
    let record = s3.require_bucket(&input.bucket).await?;
    let tags = Tags::from_dto(input.tagging.tag_set, MAX_BUCKET_TAGS)?;
    let opts = PutOptions::new().with_content_type(CONTENT_TYPE);
    s3.store
        .put(
            tagging_key(&input.bucket),
            encode(record.version, &tags),
            &opts,
        )
        .await
        .map_err(from_store)?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

/// GetBucketTagging: the bucket's tags; `NoSuchTagSet` when it has none.
pub(crate) async fn handle_get(
    s3: &SaltS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let bucket = req.input.bucket;
    let record = s3.require_bucket(&bucket).await?;
    let key = tagging_key(&bucket);
    let stored = read_setting(
        &s3.store,
        &bucket,
        &key,
        "bucket tagging",
        "read as no tags",
        decode,
    )
    .await
    .map_err(from_store)?;
    let tags = stored.and_then(|(version, tags)| (version == record.version).then_some(tags));
    match tags {
        Some(tags) => Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tags.to_dto(),
        })),
        None => Err(s3_error!(NoSuchTagSet, "The TagSet does not exist")),
    }
}

/// DeleteBucketTagging: removes the bucket's tags (204 whether or not it had any).
pub(crate) async fn handle_delete(
    s3: &SaltS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let bucket = req.input.bucket;
    s3.require_bucket(&bucket).await?;
    s3.store
        .delete(tagging_key(&bucket))
        .await
        .map_err(from_store)?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

/// Removes `bucket`'s tagging record after the bucket itself was deleted. A failure is only logged: a record
/// left behind names the deleted bucket record's version and never shows on a new bucket.
pub(super) async fn forget_bucket(s3: &SaltS3, bucket: &str) {
    if let Err(e) = s3.store.delete(tagging_key(bucket)).await {
        tracing::warn!(bucket, error = %e, "the deleted bucket's tagging record stays (it never shows)");
    }
}

/// The record of `tags` for the bucket record `version`.
fn encode(version: VersionId, tags: &Tags) -> Vec<u8> {
    let text = tags.encode();
    let mut out = Vec::with_capacity(21 + text.len());
    out.extend_from_slice(MAGIC);
    out.push(FORMAT);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// The bucket record version and tags of record `bytes`.
fn decode(bytes: &[u8]) -> Result<(VersionId, Tags), String> {
    let mut r = Reader::new(bytes);
    r.head(MAGIC, &[FORMAT])?;
    let version = VersionId(u128::from_le_bytes(r.array()?));
    let text = r.text(bytes.len() - r.at)?;
    let tags = Tags::from_header(&text, MAX_BUCKET_TAGS).map_err(|e| {
        format!(
            "tags that are not valid at offset 21: {}",
            e.message().unwrap_or("?")
        )
    })?;
    Ok((version, tags))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_reported() {
        let tags = Tags::from_header("team=web&cost+center=a%2Fb", 50).expect("valid");
        let bytes = encode(VersionId(9), &tags);
        assert_eq!(&bytes[..5], b"SBTG\x01");
        assert_eq!(&bytes[21..], b"cost%20center=a%2Fb&team=web");
        assert_eq!(decode(&bytes), Ok((VersionId(9), tags)));
        let mut format = bytes.clone();
        format[4] = 2;
        assert_eq!(
            decode(&format).expect_err("format"),
            "format 2; this server reads format 1"
        );
        assert!(
            decode(&bytes[..10])
                .expect_err("short")
                .contains("ends at 10 bytes")
        );
        let mut bad = bytes[..21].to_vec();
        bad.extend_from_slice(b"aws:x=1");
        assert!(decode(&bad).expect_err("bad tags").contains("offset 21"));
    }
}
