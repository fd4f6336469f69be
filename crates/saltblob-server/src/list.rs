//! ListObjectsV2 and ListObjects (v1): one walk over the bucket's keys in key order
//! ([`saltblob_core::BlobStore::list_stream_after`], which reads a page at a time), never the whole bucket in
//! memory. With a delimiter, the keys under one common prefix are skipped by a single jump past it: the walk is
//! dropped and a new one opened after the prefix.
//!
//! A continuation token is the hex of the position to resume after (relative to the bucket): opaque to clients
//! and stateless on the server.

use bytes::Bytes;
use futures::TryStreamExt;
use s3s::dto::{
    CommonPrefix, EncodingType, ListObjectsInput, ListObjectsOutput, ListObjectsV2Input,
    ListObjectsV2Output, Object, ObjectStorageClass,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::Manifest;
use saltblob_core::manifest::hex;

use crate::attrs::{etag_of, last_modified_of};
use crate::error::from_store;
use crate::keys::objects_prefix;
use crate::service::SaltS3;

/// Most keys (and common prefixes) one response lists, as S3.
const MAX_KEYS: usize = 1000;

/// One response's worth of a listing.
#[derive(Default)]
struct Listing {
    objects: Vec<(String, Manifest)>,
    prefixes: Vec<String>,
    truncated: bool,
    /// Where the next response resumes (after this position, relative to the bucket), when truncated.
    next: Option<Vec<u8>>,
}

/// What to list.
struct Query<'a> {
    bucket: &'a str,
    prefix: &'a str,
    delimiter: Option<&'a str>,
    /// List the keys after this position (relative to the bucket).
    after: Option<Vec<u8>>,
    max_keys: usize,
}

/// The position just past every key that starts with `prefix` (no UTF-8 key continues with a 0xFF byte).
fn past(prefix: &str) -> Vec<u8> {
    let mut position = prefix.as_bytes().to_vec();
    position.push(0xFF);
    position
}

fn max_keys(requested: Option<i32>) -> S3Result<usize> {
    match requested {
        None => Ok(MAX_KEYS),
        Some(n) => usize::try_from(n)
            .map(|n| n.min(MAX_KEYS))
            .map_err(|_| s3_error!(InvalidArgument, "max-keys must be 0 or more")),
    }
}

fn decode_token(token: &str) -> S3Result<Vec<u8>> {
    let invalid = || {
        s3_error!(
            InvalidArgument,
            "The continuation token provided is incorrect"
        )
    };
    if !token.len().is_multiple_of(2) {
        return Err(invalid());
    }
    (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(invalid)
        })
        .collect()
}

/// `s` percent-encoded as S3 does for `encoding-type=url`: every byte but unreserved characters and `/`.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The names in a listing, URL-encoded when the client asked for it.
struct Names(bool);

impl Names {
    fn new(encoding: Option<&EncodingType>) -> Self {
        Self(encoding.is_some_and(|e| e.as_str() == EncodingType::URL))
    }

    fn show(&self, s: String) -> String {
        if self.0 { url_encode(&s) } else { s }
    }
}

/// One response's worth of the listing `query` describes.
async fn list(s3: &SaltS3, query: Query<'_>) -> S3Result<Listing> {
    let base = objects_prefix(query.bucket);
    let scan_prefix = format!("{base}{}", query.prefix);
    let absolute = |relative: &[u8]| Bytes::from([base.as_bytes(), relative].concat());
    let mut after = query.after.as_deref().map(absolute);
    let delimiter = query.delimiter.filter(|d| !d.is_empty());
    let mut listing = Listing::default();
    let mut count = 0;
    'scan: loop {
        let mut entries = s3
            .store
            .list_stream_after(scan_prefix.as_bytes(), after.take());
        while let Some(entry) = entries.try_next().await.map_err(from_store)? {
            let relative = entry.key.get(base.len()..).unwrap_or_default();
            let Ok(name) = std::str::from_utf8(relative) else {
                continue; // not written through S3: no S3 key names it
            };
            let rest = name.get(query.prefix.len()..).unwrap_or_default();
            if let Some(d) = delimiter
                && let Some(at) = rest.find(d)
            {
                if count == query.max_keys {
                    listing.truncated = true;
                    break 'scan;
                }
                let common = &name[..query.prefix.len() + at + d.len()];
                listing.prefixes.push(common.to_owned());
                count += 1;
                listing.next = Some(past(common));
                // Skip every key under the common prefix: a new walk after it.
                after = Some(absolute(&past(common)));
                continue 'scan;
            }
            let manifest = match entry.manifest {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "listing skips an object whose manifest is damaged");
                    continue;
                }
            };
            if count == query.max_keys {
                listing.truncated = true;
                break 'scan;
            }
            listing.objects.push((name.to_owned(), manifest));
            count += 1;
            listing.next = Some(relative.to_vec());
        }
        break;
    }
    if !listing.truncated {
        listing.next = None;
    }
    Ok(listing)
}

fn objects(listing: &mut Listing, names: &Names) -> Vec<Object> {
    std::mem::take(&mut listing.objects)
        .into_iter()
        .map(|(key, m)| Object {
            key: Some(names.show(key)),
            size: i64::try_from(m.size).ok(),
            e_tag: Some(etag_of(&m)),
            last_modified: Some(last_modified_of(&m)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Object::default()
        })
        .collect()
}

fn prefixes(listing: &mut Listing, names: &Names) -> Vec<CommonPrefix> {
    std::mem::take(&mut listing.prefixes)
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(names.show(p)),
        })
        .collect()
}

/// ListObjectsV2: resumes after its continuation token, else after StartAfter.
pub(crate) async fn handle_list_objects_v2(
    s3: &SaltS3,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let after = match (&input.continuation_token, &input.start_after) {
        (Some(token), _) => Some(decode_token(token)?),
        (None, Some(start)) => Some(start.as_bytes().to_vec()),
        (None, None) => None,
    };
    let max_keys = max_keys(input.max_keys)?;
    let mut listing = list(
        s3,
        Query {
            bucket: &input.bucket,
            prefix: &prefix,
            delimiter: input.delimiter.as_deref(),
            after,
            max_keys,
        },
    )
    .await?;
    let names = Names::new(input.encoding_type.as_ref());
    let objects = objects(&mut listing, &names);
    let prefixes = prefixes(&mut listing, &names);
    let key_count = objects.len() + prefixes.len();
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(names.show(prefix)),
        delimiter: input.delimiter.map(|d| names.show(d)),
        max_keys: i32::try_from(max_keys).ok(),
        key_count: i32::try_from(key_count).ok(),
        is_truncated: Some(listing.truncated),
        continuation_token: input.continuation_token,
        next_continuation_token: listing.next.as_deref().map(hex),
        start_after: input.start_after.map(|s| names.show(s)),
        encoding_type: input.encoding_type,
        contents: Some(objects),
        common_prefixes: Some(prefixes),
        ..ListObjectsV2Output::default()
    }))
}

/// ListObjects (v1): resumes after its marker (past every key under it when it is a common prefix).
pub(crate) async fn handle_list_objects(
    s3: &SaltS3,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let delimiter = input.delimiter.as_deref().filter(|d| !d.is_empty());
    // A marker that is a common prefix (as NextMarker is) resumes past every key under it.
    let after = input.marker.as_deref().map(|m| match delimiter {
        Some(d) if m.ends_with(d) => past(m),
        _ => m.as_bytes().to_vec(),
    });
    let max_keys = max_keys(input.max_keys)?;
    let mut listing = list(
        s3,
        Query {
            bucket: &input.bucket,
            prefix: &prefix,
            delimiter,
            after,
            max_keys,
        },
    )
    .await?;
    let names = Names::new(input.encoding_type.as_ref());
    let next_marker = listing
        .truncated
        .then(|| {
            let last_key = listing.objects.last().map(|(k, _)| k.clone());
            let last_prefix = listing.prefixes.last().cloned();
            last_key.max(last_prefix)
        })
        .flatten()
        .map(|m| names.show(m));
    let objects = objects(&mut listing, &names);
    let prefixes = prefixes(&mut listing, &names);
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(names.show(prefix)),
        delimiter: input.delimiter.map(|d| names.show(d)),
        marker: input.marker.map(|m| names.show(m)),
        max_keys: i32::try_from(max_keys).ok(),
        is_truncated: Some(listing.truncated),
        next_marker,
        encoding_type: input.encoding_type,
        contents: Some(objects),
        common_prefixes: Some(prefixes),
        ..ListObjectsOutput::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let position = past("photos/");
        assert_eq!(decode_token(&hex(&position)).expect("valid"), position);
        for bad in ["abc", "zz", "0g"] {
            assert!(decode_token(bad).is_err(), "{bad}");
        }
        assert_eq!(url_encode("a b/c+d"), "a%20b/c%2Bd");
    }
}
