//! GetObjectAttributes: what HeadObject tells of an object, chosen by `x-amz-object-attributes` (`ETag`,
//! `Checksum`, `ObjectParts`, `StorageClass`, `ObjectSize`), with the parts of a multipart object paged by
//! `x-amz-max-parts` and `x-amz-part-number-marker`. The version read is the one `versionId` names, else the current
//! one; an object sealed with a customer key needs that key, as a GET does.

use std::collections::BTreeSet;

use s3s::dto::{
    GetObjectAttributesInput, GetObjectAttributesOutput, GetObjectAttributesParts,
    ObjectAttributes, ObjectPart, StorageClass,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::ManifestBody;
use saltblob_core::manifest::SEALED_METADATA_KEY;

use crate::attrs::{Attributes, etag_of, last_modified_of, with_opened};
use crate::keys::object_key;
use crate::service::SaltS3;
use crate::sse::customer;
use crate::versioning::shown_version_id;

/// Most parts one response lists, and the default of `max-parts`, as S3.
const MAX_PARTS: i32 = 1000;

/// Marks a GetObjectAttributes response (in its extensions): its XML `ETag` is unquoted, as S3 sends it in
/// this response only (s3s quotes every ETag it serializes; `around.rs` takes the quotes off).
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnquotedETag;

/// GetObjectAttributes: the attributes asked for, of the object's version named (`versionId`) or current one,
/// and its version id in a bucket that has or had versioning.
///
/// # Errors
/// `InvalidArgument` for an attribute S3 does not name, or `x-amz-max-parts`/`-part-number-marker` out of range; as
/// HeadObject for a missing object or bucket and an SSE-C key missing, wrong or not applicable.
pub(crate) async fn handle_get_object_attributes(
    s3: &SaltS3,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let input = req.input;
    let wanted = wanted(&input.object_attributes)?;
    let max_parts = input.max_parts.unwrap_or(MAX_PARTS);
    let marker = input.part_number_marker.unwrap_or(0);
    if !(0..=MAX_PARTS).contains(&max_parts) || !(0..=10_000).contains(&marker) {
        return Err(s3_error!(
            InvalidArgument,
            "max-parts must be between 0 and {MAX_PARTS} and part-number-marker between 0 and 10000"
        ));
    }
    let given = s3.sse.reader(&req.headers, false)?;
    let key = object_key(&input.bucket, &input.key)?;
    let (manifest, state) = s3
        .object_version(&input.bucket, &input.key, input.version_id.as_deref())
        .await?;
    customer::check_read(&s3.store, &manifest, given.as_ref()).await?;

    let checksum = if wanted.contains(ObjectAttributes::CHECKSUM) {
        let opened;
        let shown = if manifest.metadata.contains_key(SEALED_METADATA_KEY) {
            let sealed = s3
                .store
                .sealed_metadata(&key, &manifest, given.as_ref().map(|c| &c.key))
                .await
                .map_err(|e| customer::read_failed(e, given.as_ref()))?;
            opened = with_opened(&manifest, sealed);
            &opened
        } else {
            &manifest
        };
        let attrs = Attributes::of(shown, true);
        attrs.checksum_type.map(|t| s3s::dto::Checksum {
            checksum_type: Some(t),
            ..attrs.checksums
        })
    } else {
        None
    };
    let object_parts = match &manifest.body {
        ManifestBody::Segmented(segments) if wanted.contains(ObjectAttributes::OBJECT_PARTS) => {
            let sizes: Vec<u64> = segments.iter().map(|s| s.size).collect();
            Some(parts_page(&sizes, marker, max_parts))
        }
        _ => None,
    };
    let output = GetObjectAttributesOutput {
        e_tag: wanted
            .contains(ObjectAttributes::ETAG)
            .then(|| etag_of(&manifest)),
        checksum,
        object_parts,
        object_size: wanted
            .contains(ObjectAttributes::OBJECT_SIZE)
            .then(|| i64::try_from(manifest.size).ok())
            .flatten(),
        storage_class: wanted
            .contains(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        last_modified: Some(last_modified_of(&manifest)),
        version_id: shown_version_id(state.keeps(), &manifest),
        ..GetObjectAttributesOutput::default()
    };
    let mut response = s3.sse.read_echo(&manifest, given.as_ref()).respond(output);
    response.extensions.insert(UnquotedETag);
    Ok(response)
}

/// The attribute names asked for.
///
/// # Errors
/// `InvalidArgument` for a name S3 does not have (the header is required: s3s refuses a request without it).
fn wanted(asked: &[ObjectAttributes]) -> S3Result<BTreeSet<&str>> {
    const KNOWN: [&str; 5] = [
        ObjectAttributes::ETAG,
        ObjectAttributes::CHECKSUM,
        ObjectAttributes::OBJECT_PARTS,
        ObjectAttributes::STORAGE_CLASS,
        ObjectAttributes::OBJECT_SIZE,
    ];
    asked
        .iter()
        .flat_map(|a| a.as_str().split(','))
        .map(str::trim)
        .map(|name| {
            KNOWN
                .into_iter()
                .find(|k| *k == name)
                .ok_or_else(|| s3_error!(InvalidArgument, "Invalid attribute name specified."))
        })
        .collect()
}

/// The page of the parts of sizes `sizes` (part N is the Nth) after part `marker`, at most `max_parts` of them.
fn parts_page(sizes: &[u64], marker: i32, max_parts: i32) -> GetObjectAttributesParts {
    let skip = usize::try_from(marker).unwrap_or(0);
    let take = usize::try_from(max_parts).unwrap_or(0);
    let parts: Vec<ObjectPart> = sizes
        .iter()
        .enumerate()
        .skip(skip)
        .take(take)
        .map(|(i, size)| ObjectPart {
            part_number: i32::try_from(i + 1).ok(),
            size: i64::try_from(*size).ok(),
            ..ObjectPart::default()
        })
        .collect();
    let last = parts.last().and_then(|p| p.part_number);
    let truncated = skip.saturating_add(parts.len()) < sizes.len();
    GetObjectAttributesParts {
        total_parts_count: i32::try_from(sizes.len()).ok(),
        part_number_marker: Some(marker),
        next_part_number_marker: last.filter(|_| truncated),
        max_parts: Some(max_parts),
        is_truncated: Some(truncated),
        parts: Some(parts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_paged_after_the_marker() {
        let sizes = [5, 5, 5, 5, 5, 2];
        let page = parts_page(&sizes, 3, 1);
        let numbers: Vec<_> = page.parts.iter().flatten().map(|p| p.part_number).collect();
        assert_eq!(numbers, [Some(4)]);
        assert_eq!(page.is_truncated, Some(true));
        assert_eq!(page.next_part_number_marker, Some(4));
        assert_eq!(page.total_parts_count, Some(6));

        let rest = parts_page(&sizes, 4, 10);
        let sizes_listed: Vec<_> = rest.parts.iter().flatten().map(|p| p.size).collect();
        assert_eq!(sizes_listed, [Some(5), Some(2)]);
        assert_eq!(rest.is_truncated, Some(false));
        assert_eq!(rest.next_part_number_marker, None);

        let past = parts_page(&sizes, 9, 10);
        assert!(past.parts.iter().flatten().next().is_none());
        assert_eq!(past.is_truncated, Some(false));
    }

    #[test]
    fn attribute_names_are_checked() {
        let asked = [
            ObjectAttributes::from_static(ObjectAttributes::ETAG),
            ObjectAttributes::from("ObjectSize,StorageClass".to_owned()),
        ];
        let names = wanted(&asked).expect("known names");
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["ETag", "ObjectSize", "StorageClass"]
        );
        let bad = [ObjectAttributes::from("Size".to_owned())];
        assert!(wanted(&bad).is_err());
    }
}
