//! Tag sets (`docs/s3.md`, "Tagging"): an object's, kept in its manifest under `s3:tagging` (set by PutObject,
//! CopyObject and CreateMultipartUpload's `x-amz-tagging`, changed in place by Put/DeleteObjectTagging), and a
//! bucket's (its own record: `bucket/tagging.rs`). Checked as AWS checks them, in the form `x-amz-tagging` carries
//! them: `key=value` pairs, percent-encoded, joined by `&`.

use s3s::dto::{Tag, TagSet};
use s3s::{S3Result, s3_error};
use saltblob_core::Manifest;

use crate::percent;

/// Metadata key of an object's tag set, in `x-amz-tagging`'s form.
pub(crate) const TAGGING_KEY: &str = "s3:tagging";
/// Most tags an object has (as AWS).
pub(crate) const MAX_OBJECT_TAGS: usize = 10;
/// Most tags a bucket has (as AWS).
pub(crate) const MAX_BUCKET_TAGS: usize = 50;
/// Longest tag key and value, in characters (as AWS).
const MAX_KEY_CHARS: usize = 128;
const MAX_VALUE_CHARS: usize = 256;

/// A checked tag set, in key order (a tag set has no order of its own; RGW, and S3's conformance suite, list
/// tags by key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tags(pub Vec<(String, String)>);

impl Tags {
    /// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, form-encoded), checked, at most `max`.
    ///
    /// # Errors
    /// `InvalidTag` as [`Tags::checked`].
    pub(crate) fn from_header(header: &str, max: usize) -> S3Result<Self> {
        let pairs = header
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (percent::decode(k, true), percent::decode(v, true))
            })
            .collect();
        Self::checked(pairs, max)
    }

    /// The tags of a `Tagging` document, checked, at most `max`.
    ///
    /// # Errors
    /// `InvalidTag` as [`Tags::checked`].
    pub(crate) fn from_dto(set: TagSet, max: usize) -> S3Result<Self> {
        let pairs = set
            .into_iter()
            .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
            .collect();
        Self::checked(pairs, max)
    }

    /// `pairs` as a tag set.
    ///
    /// # Errors
    /// `InvalidTag` (400) for more than `max` tags, an empty key, a key of more than 128 characters or a value of
    /// more than 256, a key given twice, or a key starting with `aws:` (the system's).
    fn checked(pairs: Vec<(String, String)>, max: usize) -> S3Result<Self> {
        if pairs.len() > max {
            return Err(s3_error!(
                InvalidTag,
                "Object tags cannot be greater than {max}"
            ));
        }
        for (i, (k, v)) in pairs.iter().enumerate() {
            if k.is_empty() || k.chars().count() > MAX_KEY_CHARS {
                return Err(s3_error!(
                    InvalidTag,
                    "The TagKey you have provided is invalid: 1 to {MAX_KEY_CHARS} characters"
                ));
            }
            if v.chars().count() > MAX_VALUE_CHARS {
                return Err(s3_error!(
                    InvalidTag,
                    "The TagValue you have provided is invalid: at most {MAX_VALUE_CHARS} characters"
                ));
            }
            if k.starts_with("aws:") {
                return Err(s3_error!(
                    InvalidTag,
                    "System tags cannot be added/updated by requester"
                ));
            }
            if pairs[..i].iter().any(|(other, _)| other == k) {
                return Err(s3_error!(
                    InvalidTag,
                    "Cannot provide multiple Tags with the same key"
                ));
            }
        }
        let mut pairs = pairs;
        pairs.sort();
        Ok(Self(pairs))
    }

    /// The tags stored with `m` (none when it has none; a value this server never writes reads as none).
    pub(crate) fn of(m: &Manifest) -> Self {
        m.metadata
            .get(TAGGING_KEY)
            .and_then(|t| Self::from_header(t, usize::MAX).ok())
            .unwrap_or_default()
    }

    /// The tags in `x-amz-tagging`'s form, as stored.
    pub(crate) fn encode(&self) -> String {
        let pairs: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{}={}", percent::encode(k, b""), percent::encode(v, b"")))
            .collect();
        pairs.join("&")
    }

    /// As GetObjectTagging and GetBucketTagging return them.
    pub(crate) fn to_dto(&self) -> TagSet {
        self.0
            .iter()
            .map(|(k, v)| Tag {
                key: Some(k.clone()),
                value: Some(v.clone()),
            })
            .collect()
    }

    /// Sets (or, for an empty set, removes) the tags in an object's `metadata`.
    pub(crate) fn store_in(&self, metadata: &mut std::collections::BTreeMap<String, String>) {
        if self.0.is_empty() {
            metadata.remove(TAGGING_KEY);
        } else {
            metadata.insert(TAGGING_KEY.to_owned(), self.encode());
        }
    }
}

/// The `x-amz-tagging-count` of an object stored as `m`: its number of tags, if it has any (counted, not
/// decoded: every GET and HEAD asks).
pub(crate) fn tag_count_of(m: &Manifest) -> Option<i32> {
    let stored = m.metadata.get(TAGGING_KEY)?;
    let n = stored.split('&').filter(|pair| !pair.is_empty()).count();
    (n > 0).then(|| i32::try_from(n).unwrap_or(i32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: S3Result<Tags>) -> String {
        r.expect_err("refused").code().as_str().to_owned()
    }

    #[test]
    fn headers_and_documents_give_the_same_checked_tags() {
        let tags =
            Tags::from_header("foo=bar&Hello=World&sp+ace=a%26b%3Dc&empty", 10).expect("valid");
        assert_eq!(
            tags.0,
            [
                ("Hello", "World"),
                ("empty", ""),
                ("foo", "bar"),
                ("sp ace", "a&b=c")
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(
            Tags::from_header(&tags.encode(), 10).expect("round trip"),
            tags
        );
        assert_eq!(Tags::from_dto(tags.to_dto(), 10).expect("document"), tags);
        assert_eq!(Tags::from_header("", 10).expect("none"), Tags::default());
    }

    #[test]
    fn bad_tag_sets_are_invalid_tag() {
        let many: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        assert_eq!(code(Tags::from_header(&many.join("&"), 10)), "InvalidTag");
        Tags::from_header(&many[..10].join("&"), 10).expect("ten");
        let long_key = "k".repeat(129);
        assert_eq!(
            code(Tags::from_header(&format!("{long_key}=v"), 10)),
            "InvalidTag"
        );
        let long_value = "é".repeat(257);
        assert_eq!(
            code(Tags::from_header(&format!("k={long_value}"), 10)),
            "InvalidTag"
        );
        Tags::from_header(&format!("{}={}", "k".repeat(128), "é".repeat(256)), 10)
            .expect("at the limits");
        assert_eq!(code(Tags::from_header("a=1&a=2", 10)), "InvalidTag");
        assert_eq!(code(Tags::from_header("aws:x=1", 10)), "InvalidTag");
        assert_eq!(code(Tags::from_header("=v", 10)), "InvalidTag");
    }
}
