//! The checksum of a multipart upload, as S3 defines it: an algorithm (`x-amz-checksum-algorithm`) and a type
//! (`x-amz-checksum-type`) chosen at CreateMultipartUpload, enforced on every part, and the object's checksum
//! computed at CompleteMultipartUpload from the parts' checksums:
//!
//! - **COMPOSITE** (CRC32, CRC32C, SHA1, SHA256; the default but for CRC64NVME): the algorithm over the
//!   concatenation of the parts' binary checksums, in base64, then `-<part count>`. Every part must carry the
//!   checksum, and the complete request must list it for every part.
//! - **FULL_OBJECT** (CRC32, CRC32C, CRC64NVME; the default for CRC64NVME): the CRC of the whole object, combined
//!   from the parts' CRCs and sizes without reading a byte. A part that comes without the checksum has it
//!   computed as it streams.
//!
//! The upload record keeps the choice under `s3:upload-checksum-algorithm` and `s3:upload-checksum-type`; the
//! object keeps its checksum as any object does (`s3:checksum-<algorithm>`, `attrs.rs`) and its type under
//! [`CHECKSUM_TYPE_KEY`].

use std::collections::BTreeMap;

use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::{ChecksumAlgorithm, ChecksumType};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use crate::attrs::CHECKSUM_TYPE_KEY;
use crate::body::Algorithm;

/// Metadata key of an upload record's checksum algorithm.
const ALGORITHM_KEY: &str = "s3:upload-checksum-algorithm";
/// Metadata key of an upload record's checksum type.
const TYPE_KEY: &str = "s3:upload-checksum-type";

/// How the parts' checksums make the object's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A checksum of the parts' checksums, `<base64>-<part count>`.
    Composite,
    /// The checksum of the whole object.
    FullObject,
}

impl Kind {
    /// Its name, as in `x-amz-checksum-type`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Composite => ChecksumType::COMPOSITE,
            Kind::FullObject => ChecksumType::FULL_OBJECT,
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [Kind::Composite, Kind::FullObject]
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether `algorithm` can make a checksum of this kind (S3 combines only CRCs into a full-object checksum,
    /// and has no composite CRC64NVME).
    fn allows(self, algorithm: Algorithm) -> bool {
        match self {
            Kind::Composite => algorithm != Algorithm::Crc64Nvme,
            Kind::FullObject => matches!(
                algorithm,
                Algorithm::Crc32 | Algorithm::Crc32c | Algorithm::Crc64Nvme
            ),
        }
    }
}

/// The checksum an upload was created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UploadChecksum {
    pub algorithm: Algorithm,
    pub kind: Kind,
}

fn invalid_request(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidRequest, message)
}

/// `InvalidRequest` for a checksum of `actual` (none: `null`) where the upload wants `expected`, in S3's words.
fn algorithm_mismatch(expected: Algorithm, actual: Option<Algorithm>) -> S3Error {
    invalid_request(format!(
        "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
        expected.name(),
        actual.map_or("null", Algorithm::name)
    ))
}

impl UploadChecksum {
    /// The checksum CreateMultipartUpload asks for, if any.
    ///
    /// # Errors
    /// `InvalidRequest`: an unknown algorithm or type, a type without an algorithm, or a type the algorithm
    /// cannot make (FULL_OBJECT with SHA1 or SHA256, COMPOSITE with CRC64NVME).
    pub(crate) fn from_create(
        algorithm: Option<&ChecksumAlgorithm>,
        kind: Option<&ChecksumType>,
    ) -> S3Result<Option<Self>> {
        let Some(algorithm) = algorithm else {
            if kind.is_some() {
                return Err(invalid_request(
                    "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
                        .to_owned(),
                ));
            }
            return Ok(None);
        };
        let algorithm = Algorithm::parse(algorithm.as_str()).ok_or_else(|| {
            invalid_request(
                "Checksum algorithm provided is unsupported. Please try again with any of the valid types: [CRC32, CRC32C, CRC64NVME, SHA1, SHA256]"
                    .to_owned(),
            )
        })?;
        let kind = match kind {
            Some(k) => Kind::parse(k.as_str()).ok_or_else(|| {
                invalid_request(format!(
                    "Value for x-amz-checksum-type header is invalid: {:?} (COMPOSITE or FULL_OBJECT)",
                    k.as_str()
                ))
            })?,
            None if algorithm == Algorithm::Crc64Nvme => Kind::FullObject,
            None => Kind::Composite,
        };
        if !kind.allows(algorithm) {
            return Err(invalid_request(format!(
                "The {} checksum type cannot be used with the {} checksum algorithm.",
                kind.name(),
                algorithm.name()
            )));
        }
        Ok(Some(Self { algorithm, kind }))
    }

    /// Writes the choice into an upload record's `metadata`.
    pub(crate) fn encode(self, metadata: &mut BTreeMap<String, String>) {
        metadata.insert(ALGORITHM_KEY.to_owned(), self.algorithm.name().to_owned());
        metadata.insert(TYPE_KEY.to_owned(), self.kind.name().to_owned());
    }

    /// The choice an upload record's `metadata` holds, if any.
    ///
    /// # Errors
    /// `InternalError` for values this server does not write.
    pub(crate) fn decode(metadata: &BTreeMap<String, String>) -> S3Result<Option<Self>> {
        let Some(algorithm) = metadata.get(ALGORITHM_KEY) else {
            return Ok(None);
        };
        let algorithm = Algorithm::parse(algorithm);
        let kind = metadata.get(TYPE_KEY).and_then(|k| Kind::parse(k));
        match (algorithm, kind) {
            (Some(algorithm), Some(kind)) => Ok(Some(Self { algorithm, kind })),
            _ => Err(s3_error!(
                InternalError,
                "an upload record's checksum does not decode"
            )),
        }
    }

    /// The algorithm as S3 names it in responses (`CRC32`, …).
    pub(crate) fn algorithm_dto(self) -> ChecksumAlgorithm {
        ChecksumAlgorithm::from(self.algorithm.name().to_ascii_uppercase())
    }

    /// The type as S3 names it in responses.
    pub(crate) fn kind_dto(self) -> ChecksumType {
        ChecksumType::from_static(self.kind.name())
    }

    /// Checks the checksums an UploadPart (or UploadPartCopy) names (headers, trailer,
    /// `x-amz-checksum-algorithm`): each must be the upload's algorithm; a composite upload's part must name it.
    ///
    /// # Errors
    /// `InvalidRequest` (`Checksum Type mismatch occurred, …`).
    pub(crate) fn check_part(self, named: &[Algorithm]) -> S3Result<()> {
        if let Some(other) = named.iter().find(|a| **a != self.algorithm) {
            return Err(algorithm_mismatch(self.algorithm, Some(*other)));
        }
        if named.is_empty() && self.kind == Kind::Composite {
            return Err(algorithm_mismatch(self.algorithm, None));
        }
        Ok(())
    }

    /// Checks what a CompleteMultipartUpload says of the object's checksum: its `x-amz-checksum-type` must be
    /// the upload's, and a checksum it sends must be of the upload's algorithm.
    ///
    /// # Errors
    /// `InvalidRequest`.
    pub(crate) fn check_complete(
        self,
        kind: Option<&ChecksumType>,
        sent: Option<Algorithm>,
    ) -> S3Result<()> {
        if let Some(kind) = kind
            && Kind::parse(kind.as_str()) != Some(self.kind)
        {
            return Err(invalid_request(format!(
                "The upload was created using the {} checksum mode. The complete request must use the same checksum mode.",
                self.kind.name()
            )));
        }
        match sent {
            Some(a) if a != self.algorithm => Err(algorithm_mismatch(self.algorithm, Some(a))),
            _ => Ok(()),
        }
    }

    /// `InvalidRequest` for part `number` listed in a CompleteMultipartUpload of a composite upload without
    /// its checksum.
    pub(crate) fn missing_in_complete(self, number: i32) -> S3Error {
        invalid_request(format!(
            "The upload was created using a {} checksum. The complete request must include the checksum for each part. It was missing for part {number} in the request.",
            self.algorithm.name()
        ))
    }

    /// The object's checksum (base64; composite ones end in `-<part count>`) from its parts' checksums
    /// (base64) and sizes, in order.
    ///
    /// # Errors
    /// `InternalError` when a stored part checksum does not decode.
    pub(crate) fn of_parts<'a>(
        self,
        parts: impl ExactSizeIterator<Item = (&'a str, u64)>,
    ) -> S3Result<String> {
        let count = parts.len();
        let mut raw = Vec::new();
        let mut combined: Option<u64> = None;
        for (value, size) in parts {
            let bytes = decode(value).ok_or_else(|| {
                s3_error!(InternalError, "a stored part checksum does not decode")
            })?;
            match self.kind {
                Kind::Composite => raw.extend_from_slice(&bytes),
                Kind::FullObject => {
                    let crc = crc_value(&bytes).ok_or_else(|| {
                        s3_error!(InternalError, "a stored part CRC has the wrong length")
                    })?;
                    combined = Some(match combined {
                        None => crc,
                        Some(first) => combine(self.algorithm, first, crc, size),
                    });
                }
            }
        }
        Ok(match self.kind {
            Kind::Composite => format!("{}-{count}", encode(&digest(self.algorithm, &raw))),
            Kind::FullObject => {
                let crc = combined
                    .unwrap_or_else(|| crc_value(&digest(self.algorithm, &[])).unwrap_or(0));
                let bytes = crc.to_be_bytes();
                match self.algorithm {
                    Algorithm::Crc64Nvme => encode(&bytes),
                    _ => encode(bytes.get(4..).unwrap_or_default()),
                }
            }
        })
    }

    /// Whether `sent` (a CompleteMultipartUpload's `x-amz-checksum-<algorithm>`) is the object's checksum
    /// `computed`: a composite one may be sent with or without its `-<part count>`.
    pub(crate) fn matches(self, sent: &str, computed: &str) -> bool {
        let sent = sent.trim();
        match self.kind {
            Kind::FullObject => sent == computed,
            Kind::Composite => {
                let base = computed.rsplit_once('-').map_or(computed, |(b, _)| b);
                sent == computed || sent == base
            }
        }
    }
}

/// The metadata an object composed with checksum `value` of `checksum` carries.
pub(crate) fn object_metadata(
    checksum: UploadChecksum,
    value: &str,
    metadata: &mut BTreeMap<String, String>,
) {
    metadata.insert(
        format!(
            "{}{}",
            crate::attrs::CHECKSUM_KEY,
            checksum.algorithm.name()
        ),
        value.to_owned(),
    );
    metadata.insert(
        CHECKSUM_TYPE_KEY.to_owned(),
        checksum.kind.name().to_owned(),
    );
}

fn encode(bytes: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(bytes)
}

fn decode(value: &str) -> Option<Vec<u8>> {
    base64_simd::STANDARD.decode_to_vec(value.trim()).ok()
}

/// A CRC's value from its big-endian bytes (4 or 8 of them).
fn crc_value(bytes: &[u8]) -> Option<u64> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .ok()
            .map(|b| u64::from(u32::from_be_bytes(b))),
        8 => <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes),
        _ => None,
    }
}

/// `algorithm` over `data`, as S3 writes it (big-endian CRCs).
fn digest(algorithm: Algorithm, data: &[u8]) -> Vec<u8> {
    match algorithm {
        Algorithm::Crc32 => Crc32::checksum(data).to_vec(),
        Algorithm::Crc32c => Crc32c::checksum(data).to_vec(),
        Algorithm::Crc64Nvme => Crc64Nvme::checksum(data).to_vec(),
        Algorithm::Sha1 => Sha1::checksum(data).to_vec(),
        Algorithm::Sha256 => Sha256::checksum(data).to_vec(),
    }
}

/// The CRC of `a ‖ b` from the CRC of `a`, the CRC of `b` and the length of `b` (CRC algorithms only; any other
/// gives `first`, which [`Kind::allows`] never lets happen).
fn combine(algorithm: Algorithm, first: u64, second: u64, second_len: u64) -> u64 {
    use crc_fast::CrcAlgorithm;
    let algorithm = match algorithm {
        Algorithm::Crc32 => CrcAlgorithm::Crc32IsoHdlc,
        Algorithm::Crc32c => CrcAlgorithm::Crc32Iscsi,
        Algorithm::Crc64Nvme => CrcAlgorithm::Crc64Nvme,
        Algorithm::Sha1 | Algorithm::Sha256 => return first,
    };
    crc_fast::checksum_combine(algorithm, first, second, second_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
            .collect()
    }

    /// A full-object checksum combined from parts equals the checksum of the whole object, for every CRC and
    /// any split (empty parts included); a composite one is the checksum of the binary part checksums.
    #[test]
    fn object_checksums_are_computed_from_the_parts() {
        let parts = [data(1000, 1), data(0, 2), data(70_000, 3), data(1, 4)];
        let whole: Vec<u8> = parts.concat();
        for algorithm in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let c = UploadChecksum {
                algorithm,
                kind: Kind::FullObject,
            };
            let values: Vec<String> = parts
                .iter()
                .map(|p| encode(&digest(algorithm, p)))
                .collect();
            let got = c
                .of_parts(
                    values
                        .iter()
                        .map(String::as_str)
                        .zip(parts.iter().map(|p| p.len() as u64)),
                )
                .expect("combine");
            assert_eq!(got, encode(&digest(algorithm, &whole)), "{algorithm:?}");
            assert!(c.matches(&got, &got) && !c.matches("AAAAAA==", &got));
        }
        for algorithm in [
            Algorithm::Crc32,
            Algorithm::Crc32c,
            Algorithm::Sha1,
            Algorithm::Sha256,
        ] {
            let c = UploadChecksum {
                algorithm,
                kind: Kind::Composite,
            };
            let raw: Vec<Vec<u8>> = parts.iter().map(|p| digest(algorithm, p)).collect();
            let values: Vec<String> = raw.iter().map(|r| encode(r)).collect();
            let got = c
                .of_parts(values.iter().map(String::as_str).zip([0u64; 4]))
                .expect("composite");
            let expected = format!("{}-4", encode(&digest(algorithm, &raw.concat())));
            assert_eq!(got, expected, "{algorithm:?}");
            let base = expected.trim_end_matches("-4");
            assert!(c.matches(&expected, &got) && c.matches(base, &got));
        }
        // A known value: the CRC32 of "123456789" is cbf43926.
        assert_eq!(
            encode(&digest(Algorithm::Crc32, b"123456789")),
            encode(&[0xcb, 0xf4, 0x39, 0x26])
        );
    }

    #[test]
    fn creation_choices_follow_s3s_rules() {
        let alg = |s: &'static str| ChecksumAlgorithm::from_static(s);
        let kind = |s: &'static str| ChecksumType::from_static(s);
        let ok = |a: Option<ChecksumAlgorithm>, k: Option<ChecksumType>| {
            UploadChecksum::from_create(a.as_ref(), k.as_ref()).expect("valid")
        };
        assert_eq!(ok(None, None), None);
        assert_eq!(
            ok(Some(alg("CRC64NVME")), None).map(|c| c.kind),
            Some(Kind::FullObject)
        );
        assert_eq!(
            ok(Some(alg("SHA256")), None).map(|c| c.kind),
            Some(Kind::Composite)
        );
        assert_eq!(
            ok(Some(alg("crc32c")), Some(kind("FULL_OBJECT"))),
            Some(UploadChecksum {
                algorithm: Algorithm::Crc32c,
                kind: Kind::FullObject
            })
        );
        for (a, k) in [
            (None, Some(kind("COMPOSITE"))),
            (Some(alg("SHA1")), Some(kind("FULL_OBJECT"))),
            (Some(alg("CRC64NVME")), Some(kind("COMPOSITE"))),
            (Some(alg("MD5")), None),
            (Some(alg("CRC32")), Some(kind("PARTIAL"))),
        ] {
            let err = UploadChecksum::from_create(a.as_ref(), k.as_ref()).expect_err("refused");
            assert_eq!(err.code(), &S3ErrorCode::InvalidRequest, "{a:?} {k:?}");
        }
        let c = ok(Some(alg("CRC32")), None).expect("some");
        let mut metadata = BTreeMap::new();
        c.encode(&mut metadata);
        assert_eq!(UploadChecksum::decode(&metadata).expect("decodes"), Some(c));
        assert!(c.check_part(&[Algorithm::Crc32]).is_ok());
        assert!(c.check_part(&[]).is_err() && c.check_part(&[Algorithm::Sha256]).is_err());
        let full = UploadChecksum {
            kind: Kind::FullObject,
            ..c
        };
        assert!(full.check_part(&[]).is_ok());
        assert!(c.check_complete(Some(&kind("FULL_OBJECT")), None).is_err());
        assert!(
            c.check_complete(Some(&kind("COMPOSITE")), Some(Algorithm::Crc32))
                .is_ok()
        );
        assert!(c.check_complete(None, Some(Algorithm::Crc32c)).is_err());
    }
}
