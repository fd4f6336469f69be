//! The listings of multipart uploads: ListParts (an upload's parts, from its part records), and
//! ListMultipartUploads, as S3 defines it: the uploads in progress, by object key and then by initiation, after
//! `key-marker` (and, for that key, after `upload-id-marker`), under `prefix`, with keys that share a prefix up
//! to `delimiter` rolled up into CommonPrefixes, at most `max-uploads` (1000) entries of either kind. Read from
//! the listing index (`upload.rs`) in that very order, one page at a time, jumping past each common prefix:
//! the work per request is bounded by `max-uploads`, whatever the bucket holds.

use bytes::Bytes;
use futures::TryStreamExt;
use s3s::dto::{
    CommonPrefix, ListMultipartUploadsInput, ListMultipartUploadsOutput, ListPartsInput,
    ListPartsOutput, MultipartUpload, StorageClass, Timestamp,
};
use s3s::{S3Request, S3Response, S3Result};
use saltblob_core::{BlobStore, ListEntry};

use super::checksum::UploadChecksum;
use super::max_listed;
use super::parts::{self, StoredPart};
use super::upload::{self, Upload, check_upload_id, no_such_upload};
use crate::error::from_store;
use crate::keys::upload_index_prefix;
use crate::list::url_encode;
use crate::service::SaltS3;

/// Index entries that do not decode, skipped, that one request reads at most before it answers (truncated).
const MAX_SKIPPED: usize = 1000;

/// The key after which the listing starts: past `key_marker`'s uploads after `upload_id_marker` (or all of
/// them), or past every key under `key_marker` when it is a common prefix of this listing.
fn start_after(
    index: &[u8],
    prefix: &str,
    delimiter: Option<&str>,
    key_marker: &str,
    upload_id_marker: Option<&str>,
) -> Bytes {
    let mut k = index.to_vec();
    k.extend_from_slice(key_marker.as_bytes());
    let rolled_up = delimiter.is_some_and(|d| {
        key_marker
            .strip_prefix(prefix)
            .and_then(|rest| rest.find(d).map(|at| at + d.len() == rest.len()))
            .unwrap_or(false)
    });
    if rolled_up {
        // No key holds the byte 0xFF (keys are UTF-8): past everything under the prefix.
        k.push(0xff);
        return k.into();
    }
    k.push(0);
    match upload_id_marker
        .filter(|m| check_upload_id(m).is_ok())
        .and_then(|m| u128::from_str_radix(m, 16).ok())
    {
        Some(id) => k.extend_from_slice(&id.to_be_bytes()),
        None => k.extend_from_slice(&[0xff; 16]),
    }
    k.into()
}

/// One entry of the listing.
enum Entry {
    Upload(Box<MultipartUpload>),
    Prefix(String),
}

/// ListMultipartUploads: see the module doc.
pub(crate) async fn handle_list_multipart_uploads(
    s3: &SaltS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let max = max_listed(input.max_uploads);
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
    let index = upload_index_prefix(&input.bucket).into_bytes();
    let scan = [&index[..], prefix.as_bytes()].concat();
    let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
    let after = key_marker.as_deref().map(|m| {
        start_after(
            &index,
            &prefix,
            delimiter.as_deref(),
            m,
            input.upload_id_marker.as_deref(),
        )
    });
    let (entries, truncated) = read_entries(
        &s3.store,
        &index,
        &scan,
        after,
        &prefix,
        delimiter.as_deref(),
        max,
    )
    .await?;

    let encode = input
        .encoding_type
        .as_ref()
        .is_some_and(|e| e.as_str() == s3s::dto::EncodingType::URL);
    let show = |s: String| if encode { url_encode(&s) } else { s };
    let (next_key_marker, next_upload_id_marker) = match entries.last() {
        Some(Entry::Upload(u)) if truncated => (u.key.clone(), u.upload_id.clone()),
        Some(Entry::Prefix(p)) if truncated => (Some(p.clone()), None),
        _ => (None, None),
    };
    let mut uploads = Vec::new();
    let mut prefixes = Vec::new();
    for entry in entries {
        match entry {
            Entry::Upload(mut u) => {
                u.key = u.key.map(show);
                uploads.push(*u);
            }
            Entry::Prefix(p) => prefixes.push(CommonPrefix {
                prefix: Some(show(p)),
            }),
        }
    }
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix.map(show),
        delimiter: input.delimiter.map(show),
        max_uploads: i32::try_from(max).ok(),
        key_marker: input.key_marker.map(show),
        upload_id_marker: input.upload_id_marker,
        next_key_marker: next_key_marker.map(show),
        next_upload_id_marker,
        is_truncated: Some(truncated),
        uploads: Some(uploads),
        common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
        encoding_type: input.encoding_type,
        ..ListMultipartUploadsOutput::default()
    }))
}

/// ListParts: the parts after the part number marker, at most MaxParts (and 1000), with the upload's checksum
/// algorithm and type.
pub(crate) async fn handle_list_parts(
    s3: &SaltS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let upload = Upload::read(&s3.store, &input.bucket, &input.key, &input.upload_id).await?;
    if !upload.state.in_progress() {
        return Err(no_such_upload());
    }
    let max = max_listed(input.max_parts);
    let after = input.part_number_marker.filter(|m| *m > 0);
    let mut parts =
        parts::parts(&s3.store, &input.bucket, &input.upload_id, after, max + 1).await?;
    let truncated = parts.len() > max;
    parts.truncate(max);
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: i32::try_from(max).ok(),
        part_number_marker: after,
        next_part_number_marker: parts.last().map(|p| p.number).filter(|_| truncated),
        is_truncated: Some(truncated),
        parts: Some(parts.iter().map(StoredPart::to_part).collect()),
        checksum_algorithm: upload.checksum.map(UploadChecksum::algorithm_dto),
        checksum_type: upload.checksum.map(UploadChecksum::kind_dto),
        ..ListPartsOutput::default()
    }))
}

/// Up to `max` entries of the index of one bucket (`index`, the bucket's index prefix), under `scan` (the
/// index prefix and the listing's prefix), after `after`; and whether more follow.
async fn read_entries(
    store: &BlobStore,
    index: &[u8],
    scan: &[u8],
    mut after: Option<Bytes>,
    prefix: &str,
    delimiter: Option<&str>,
    max: usize,
) -> S3Result<(Vec<Entry>, bool)> {
    let mut entries = Vec::new();
    let mut skipped = 0;
    'jumps: loop {
        let mut stream = store.list_stream_after(scan, after.take());
        while let Some(ListEntry { key, manifest }) = stream.try_next().await.map_err(from_store)? {
            let decoded = key
                .get(index.len()..)
                .and_then(upload::parse_index_key)
                .zip(manifest.ok());
            let Some(((object, id), manifest)) = decoded else {
                skipped += 1;
                if skipped >= MAX_SKIPPED {
                    return Ok((entries, true));
                }
                continue;
            };
            if entries.len() == max {
                return Ok((entries, true));
            }
            let rolled = delimiter.and_then(|d| {
                let rest = object.strip_prefix(prefix)?;
                rest.find(d)
                    .map(|at| object[..prefix.len() + at + d.len()].to_owned())
            });
            if let Some(common) = rolled {
                let mut past = index.to_vec();
                past.extend_from_slice(common.as_bytes());
                past.push(0xff);
                entries.push(Entry::Prefix(common));
                after = Some(past.into());
                continue 'jumps;
            }
            let checksum = UploadChecksum::decode(&manifest.metadata).ok().flatten();
            let initiated = upload::initiated_millis(&id);
            entries.push(Entry::Upload(Box::new(MultipartUpload {
                key: Some(object.to_owned()),
                upload_id: Some(id),
                initiated: Some(Timestamp::from(
                    std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(initiated),
                )),
                checksum_algorithm: checksum.map(UploadChecksum::algorithm_dto),
                checksum_type: checksum.map(UploadChecksum::kind_dto),
                storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                ..MultipartUpload::default()
            })));
        }
        return Ok((entries, false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_start_after_the_marked_uploads_or_the_marked_prefix() {
        let index = b"s3/u/b/k/";
        let id = format!("{:032x}", 7u128);
        let plain = start_after(index, "", None, "a/b", None);
        assert_eq!(&plain[..], [&index[..], b"a/b\0", &[0xff; 16]].concat());
        let with_id = start_after(index, "", None, "a/b", Some(&id));
        assert_eq!(
            &with_id[..],
            [&index[..], b"a/b\0", &7u128.to_be_bytes()].concat()
        );
        // A key marker that is a common prefix of the listing skips all that it rolled up.
        let rolled = start_after(index, "", Some("/"), "a/", None);
        assert_eq!(&rolled[..], [&index[..], b"a/\xff"].concat());
        // Not one: a marker ending with the delimiter whose first delimiter (after the prefix) is earlier.
        let deeper = start_after(index, "", Some("/"), "a/b/", None);
        assert_eq!(&deeper[..], [&index[..], b"a/b/\0", &[0xff; 16]].concat());
        // Nor one outside the prefix.
        let outside = start_after(index, "x/", Some("/"), "a/", None);
        assert!(outside.ends_with(&[0xff; 16]));
    }
}
