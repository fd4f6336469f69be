//! What a CompleteMultipartUpload lists ([`Listed`]), checked as S3 checks it against the parts stored, and the
//! compose record of the object it makes: the segments in order, the multipart ETag, the object's checksum.

use std::collections::BTreeMap;

use s3s::dto::{ChecksumType, CompletedPart};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use saltblob_core::Segment;
use saltblob_core::manifest::segments_digest;

use super::checksum::{self, UploadChecksum};
use super::compose::{ComposeRecord, PARTS_ETAG_KEY};
use super::parts::StoredPart;
use super::upload::Upload;
use super::{MIN_PART_SIZE, multipart_etag};
use crate::attrs::{ETAG_KEY, checksum_of, sealed_etag};
use crate::body::Algorithm;

/// What a CompleteMultipartUpload lists: the parts, and what it says of the object.
pub(super) struct Listed {
    pub parts: Vec<CompletedPart>,
    /// The object checksum sent (`x-amz-checksum-<algorithm>`), if any.
    pub sent: Option<(Algorithm, String)>,
    /// `x-amz-checksum-type`, if sent.
    pub sent_type: Option<ChecksumType>,
    /// `x-amz-mp-object-size`, if sent.
    pub size: Option<i64>,
}

impl Listed {
    /// The compose record of the listed parts of `upload`, whose part records are `stored`.
    ///
    /// # Errors
    /// As [`choose_parts`] and [`plan`] check.
    pub(super) fn plan(&self, upload: &Upload, stored: &[StoredPart]) -> S3Result<ComposeRecord> {
        let (chosen, unsummed) = choose_parts(&self.parts, stored, upload.checksum)?;
        plan(self, upload, &chosen, unsummed)
    }
}

/// The compose record of `chosen` for `req`: the segments, the multipart ETag, and (for an upload with a
/// checksum) the object's checksum, after the checks of the request's own checksum and size. `unsummed`: the
/// first part listed without the checksum a composite upload needs; refused (`InvalidRequest`) after the
/// object's checksum, if sent, was found to match (a wrong one is `BadDigest` first, as S3 answers).
fn plan(
    req: &Listed,
    upload: &Upload,
    chosen: &[&StoredPart],
    unsummed: Option<i32>,
) -> S3Result<ComposeRecord> {
    let mut metadata = BTreeMap::new();
    let parts_etag = multipart_etag(chosen.iter().map(|p| p.md5_hex()));
    if chosen.iter().any(|p| p.segment.sealing.is_some()) {
        // A sealed object's ETag is opaque: that of the object's digest (`attrs.rs`, `etag_of`), known before
        // the compose. The parts' multipart ETag tells a repeated complete whether it lists the same parts.
        let segments: Vec<Segment> = chosen.iter().map(|p| p.segment.clone()).collect();
        metadata.insert(
            ETAG_KEY.to_owned(),
            sealed_etag(&segments_digest(&segments), Some(segments.len())),
        );
        metadata.insert(PARTS_ETAG_KEY.to_owned(), parts_etag);
    } else {
        metadata.insert(ETAG_KEY.to_owned(), parts_etag);
    }
    match upload.checksum {
        Some(c) => {
            c.check_complete(req.sent_type.as_ref(), req.sent.as_ref().map(|(a, _)| *a))?;
            let values: Vec<(String, u64)> = chosen
                .iter()
                .map(|p| {
                    checksum_of(&p.manifest, c.algorithm)
                        .map(|v| (v, p.segment.size))
                        .ok_or_else(|| invalid_part(p.number))
                })
                .collect::<S3Result<_>>()?;
            let value = c.of_parts(values.iter().map(|(v, size)| (v.as_str(), *size)))?;
            if let Some((_, sent)) = &req.sent
                && !c.matches(sent, &value)
            {
                return Err(s3_error!(
                    BadDigest,
                    "The {} you specified did not match the calculated checksum.",
                    c.algorithm.name()
                ));
            }
            if let Some(number) = unsummed {
                return Err(c.missing_in_complete(number));
            }
            checksum::object_metadata(c, &value, &mut metadata);
        }
        None if req.sent.is_some() || req.sent_type.is_some() => {
            return Err(s3_error!(
                InvalidRequest,
                "The upload was created without a checksum algorithm: the complete request cannot name one"
            ));
        }
        None => {}
    }
    let total: u64 = chosen.iter().map(|p| p.segment.size).sum();
    if let Some(size) = req.size
        && u64::try_from(size).ok() != Some(total)
    {
        return Err(s3_error!(
            InvalidRequest,
            "The provided 'x-amz-mp-object-size' header value {size} does not match what was computed: {total}"
        ));
    }
    Ok(ComposeRecord {
        segments: chosen
            .iter()
            .map(|p| p.segment.clone())
            .collect::<Vec<Segment>>(),
        metadata,
        opened: BTreeMap::new(),
    })
}

fn invalid_part(number: i32) -> S3Error {
    s3_error!(
        InvalidPart,
        "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag: part {number}"
    )
}

/// The stored parts a CompleteMultipartUpload lists, checked as S3 does: part numbers ascending
/// (`InvalidPartOrder`), each uploaded with the ETag given (`InvalidPart`), each checksum given equal to the
/// part's (`InvalidPart`), each but the last at least 5 MiB (`EntityTooSmall`). Also returns the first part
/// listed without the upload's checksum when it is composite ([`plan`] refuses it, `InvalidRequest`).
///
/// A part number listed several times in a row (a client that listed a part and then its upload again) names
/// the one part stored under it: the entry with its ETag is the one checked, as RGW takes it.
fn choose_parts<'a>(
    listed: &[CompletedPart],
    stored: &'a [StoredPart],
    checksum: Option<UploadChecksum>,
) -> S3Result<(Vec<&'a StoredPart>, Option<i32>)> {
    let names_stored = |part: &CompletedPart| {
        let number = part.part_number.unwrap_or(0);
        part.e_tag.as_ref().is_some_and(|etag| {
            stored
                .iter()
                .any(|p| p.number == number && etag.value().trim_matches('"') == p.md5_hex())
        })
    };
    let mut entries: Vec<&CompletedPart> = Vec::with_capacity(listed.len());
    for part in listed {
        match entries.last_mut() {
            Some(previous)
                if previous.part_number == part.part_number && !names_stored(previous) =>
            {
                *previous = part;
            }
            Some(previous) if previous.part_number == part.part_number => {}
            _ => entries.push(part),
        }
    }
    let mut chosen: Vec<&StoredPart> = Vec::with_capacity(entries.len());
    let mut unsummed = None;
    for part in entries {
        let number = part.part_number.unwrap_or(0);
        if chosen.last().is_some_and(|p| p.number >= number) {
            return Err(s3_error!(
                InvalidPartOrder,
                "The list of parts was not in ascending order. Parts must be ordered by part number."
            ));
        }
        let found = stored
            .iter()
            .find(|p| p.number == number)
            .ok_or_else(|| invalid_part(number))?;
        if part
            .e_tag
            .as_ref()
            .is_none_or(|etag| etag.value().trim_matches('"') != found.md5_hex())
        {
            return Err(invalid_part(number));
        }
        let sent = [
            (Algorithm::Crc32, &part.checksum_crc32),
            (Algorithm::Crc32c, &part.checksum_crc32c),
            (Algorithm::Crc64Nvme, &part.checksum_crc64nvme),
            (Algorithm::Sha1, &part.checksum_sha1),
            (Algorithm::Sha256, &part.checksum_sha256),
        ];
        if let Some(c) = checksum
            && c.kind == checksum::Kind::Composite
            && sent.iter().all(|(a, v)| *a != c.algorithm || v.is_none())
        {
            unsummed = unsummed.or(Some(number));
        }
        for (algorithm, value) in sent {
            if let (Some(sent), Some(stored)) = (value, checksum_of(&found.manifest, algorithm))
                && sent.trim() != stored
            {
                return Err(invalid_part(number));
            }
        }
        chosen.push(found);
    }
    if let Some(small) = chosen
        .iter()
        .rev()
        .skip(1)
        .find(|p| p.segment.size < MIN_PART_SIZE)
    {
        let mut e = S3Error::with_message(
            S3ErrorCode::EntityTooSmall,
            format!(
                "Your proposed upload is smaller than the minimum allowed object size: part {} holds {} bytes; every part but the last must hold at least {MIN_PART_SIZE}",
                small.number, small.segment.size
            ),
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(e);
    }
    Ok((chosen, unsummed))
}
