//! ListObjectsV2, ListObjects (v1) and ListObjectVersions: one walk over the bucket's keys in key order, a page
//! at a time ([`saltblob_core::BlobStore::list_page`]), never the whole bucket in memory.
//!
//! Each request's work is bounded. With a delimiter, the keys under one common prefix are skipped by a single
//! jump past it, and the walk after a jump starts with a one-record page that doubles with each further page
//! of the same walk (up to [`MAX_PAGE`]): a listing of N common prefixes reads about N records, not a page per
//! prefix. Every record read counts toward [`MAX_EXAMINED`], the skipped ones too (keys that are not UTF-8,
//! damaged or expired manifests); a listing that reaches it answers truncated, with a continuation token (or
//! NextMarker) that resumes after the last record it read.
//!
//! A continuation token is the hex of the position to resume after (relative to the bucket): opaque to clients
//! and stateless on the server.

use bytes::Bytes;
use s3s::dto::{
    CommonPrefix, DeleteMarkerEntry, EncodingType, ListObjectVersionsInput,
    ListObjectVersionsOutput, ListObjectsInput, ListObjectsOutput, ListObjectsV2Input,
    ListObjectsV2Output, Object, ObjectStorageClass, ObjectVersion, ObjectVersionStorageClass,
};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use saltblob_core::manifest::hex;
use saltblob_core::{KeyVersion, Manifest};

use crate::acl::owner;
use crate::attrs::{etag_of, last_modified_of};
use crate::error::from_store;
use crate::keys::objects_prefix;
use crate::percent;
use crate::service::SaltS3;
use crate::versioning::{Named, is_delete_marker, version_id_of};

/// Most keys (and common prefixes) one response lists, as S3.
const MAX_KEYS: usize = 1000;
/// Most records one listing request reads from the store, those it skips included: the bound on its work.
pub(crate) const MAX_EXAMINED: usize = 10_000;
/// The largest page a walk reads at once.
const MAX_PAGE: usize = 512;

/// Where a listing stops: after a key, or past every key under a common prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Position {
    /// After this key (relative to the bucket; not UTF-8 when a store client wrote such a key).
    Key(Vec<u8>),
    /// Past every key that starts with this common prefix.
    Past(String),
}

impl Position {
    /// The position as the store's `start_after`, relative to the bucket.
    fn bytes(&self) -> Vec<u8> {
        match self {
            Position::Key(key) => key.clone(),
            Position::Past(prefix) => past(prefix),
        }
    }

    /// The position as a v1 marker (text): the key, or the common prefix (which the next request recognises
    /// as one, [`v1_marker_position`]); `None` for a key that is not UTF-8.
    fn marker(&self) -> Option<String> {
        match self {
            Position::Key(key) => String::from_utf8(key.clone()).ok(),
            Position::Past(prefix) => Some(prefix.clone()),
        }
    }
}

/// One response's worth of a listing.
#[derive(Default)]
struct Listing {
    objects: Vec<(String, Manifest)>,
    prefixes: Vec<String>,
    truncated: bool,
    /// Where the next response resumes, when truncated.
    next: Option<Position>,
}

/// What to list.
struct Query<'a> {
    bucket: &'a str,
    prefix: &'a str,
    delimiter: Option<&'a str>,
    /// List the keys after this position.
    after: Option<Position>,
    max_keys: usize,
    /// Whether a resume position must be text (ListObjects v1 and ListObjectVersions, whose markers are): such
    /// a listing does not stop at its budget on a key that is not UTF-8, but reads on to the next one that is.
    text_positions: bool,
    /// Whether keys whose current version is a delete marker are listed (ListObjectVersions), or left out.
    delete_markers: bool,
}

/// Where a listing resumes, and what it lists ([`Query`]'s fields of the same names).
struct Resume {
    after: Option<Position>,
    text_positions: bool,
    delete_markers: bool,
}

/// What ListObjects v1 and ListObjectVersions resume after: a text marker, and whether delete markers are listed.
struct Marker<'a> {
    key: Option<&'a str>,
    delete_markers: bool,
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

/// Where a v1 marker (or a ListObjectVersions key marker) resumes: past every key under it when it is a common
/// prefix of this listing (it starts with `prefix`, and the first `delimiter` after the prefix ends exactly at
/// its end), else right after it. NextMarker is such a common prefix when the last entry of a page was one; a
/// key that merely ends with the delimiter (a folder marker object, `dir/` listed under prefix `dir/`) is not.
fn v1_marker_position(marker: &str, prefix: &str, delimiter: Option<&str>) -> Position {
    let is_common_prefix = delimiter.is_some_and(|d| {
        marker
            .strip_prefix(prefix)
            .and_then(|rest| rest.find(d).map(|at| at + d.len() == rest.len()))
            .unwrap_or(false)
    });
    if is_common_prefix {
        Position::Past(marker.to_owned())
    } else {
        Position::Key(marker.as_bytes().to_vec())
    }
}

/// `s` percent-encoded as S3 does for `encoding-type=url`: every byte but unreserved characters and `/`.
pub(crate) fn url_encode(s: &str) -> String {
    percent::encode(s, b"/")
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

/// One response's worth of the listing `query` describes (see the module doc for how its work is bounded).
async fn list(s3: &SaltS3, query: Query<'_>) -> S3Result<Listing> {
    let mut listing = Listing::default();
    if query.max_keys == 0 {
        // Nothing asked for: nothing listed, and nothing left out.
        return Ok(listing);
    }
    let base = objects_prefix(query.bucket);
    let scan_prefix = format!("{base}{}", query.prefix);
    let absolute = |relative: &[u8]| Bytes::from([base.as_bytes(), relative].concat());
    let delimiter = query.delimiter.filter(|d| !d.is_empty());
    // Where the walk reads next (after it), and where a response cut short now would resume.
    let mut resume = query.after.clone();
    let mut page = if delimiter.is_some() { 1 } else { MAX_PAGE };
    let mut examined = 0;
    'walk: loop {
        let over_budget = examined >= MAX_EXAMINED;
        let stoppable = resume
            .as_ref()
            .is_some_and(|p| !query.text_positions || p.marker().is_some());
        if over_budget && stoppable {
            listing.truncated = true;
            listing.next = resume;
            break;
        }
        let left = query.max_keys - listing.objects.len() - listing.prefixes.len();
        // One entry more than the response can take tells whether it is truncated.
        let limit = if over_budget {
            1
        } else {
            page.min(left + 1).min(MAX_EXAMINED - examined)
        };
        let start = resume.as_ref().map(|p| absolute(&p.bytes()));
        let read = s3
            .store
            .list_page(scan_prefix.as_bytes(), start, limit)
            .await
            .map_err(from_store)?;
        examined += read.read;
        for entry in read.entries {
            let relative = entry.key.get(base.len()..).unwrap_or_default();
            let Ok(name) = std::str::from_utf8(relative) else {
                continue; // not written through S3: no S3 key names it
            };
            let rest = name.get(query.prefix.len()..).unwrap_or_default();
            let common = delimiter.and_then(|d| {
                rest.find(d)
                    .map(|at| &name[..query.prefix.len() + at + d.len()])
            });
            let manifest = match (common, entry.manifest) {
                (Some(_), _) => None,
                (None, Ok(m)) if !query.delete_markers && is_delete_marker(&m) => continue,
                (None, Ok(m)) => Some(m),
                (None, Err(e)) => {
                    tracing::warn!(error = %e, "listing skips an object whose manifest is damaged");
                    continue;
                }
            };
            if listing.objects.len() + listing.prefixes.len() == query.max_keys {
                listing.truncated = true;
                break 'walk;
            }
            match (common, manifest) {
                (Some(common), _) => {
                    listing.prefixes.push(common.to_owned());
                    listing.next = Some(Position::Past(common.to_owned()));
                    // Skip every key under the common prefix: a new walk after it, from a small page.
                    resume = listing.next.clone();
                    page = 1;
                    continue 'walk;
                }
                (None, Some(m)) => {
                    listing.objects.push((name.to_owned(), m));
                    listing.next = Some(Position::Key(relative.to_vec()));
                }
                (None, None) => {}
            }
        }
        match read.next {
            None => break,
            Some(last) => {
                let relative = last.get(base.len()..).unwrap_or_default().to_vec();
                resume = Some(Position::Key(relative));
                page = (page * 2).min(MAX_PAGE);
            }
        }
    }
    if !listing.truncated {
        listing.next = None;
    }
    Ok(listing)
}

/// One response of a listing, and what every listing response says besides its entries.
struct Page {
    listing: Listing,
    names: Names,
    /// The listing's prefix, as asked.
    prefix: String,
    max_keys: usize,
}

impl Page {
    /// One response's worth of the listing of `bucket` under `prefix` (with `delimiter`), at most `max_keys_asked`
    /// (by default and at most [`MAX_KEYS`]) entries, its names shown as `encoding` asks; `after` gives, from the
    /// prefix and delimiter, where it resumes and whether that must be a text position ([`Query`]).
    async fn read(
        s3: &SaltS3,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        max_keys_asked: Option<i32>,
        encoding: Option<&EncodingType>,
        resume: impl FnOnce(&str, Option<&str>) -> Resume,
    ) -> S3Result<Self> {
        let prefix = prefix.unwrap_or_default().to_owned();
        let max_keys = max_keys(max_keys_asked)?;
        let Resume {
            after,
            text_positions,
            delete_markers,
        } = resume(&prefix, delimiter);
        let listing = list(
            s3,
            Query {
                bucket,
                prefix: &prefix,
                delimiter,
                after,
                max_keys,
                text_positions,
                delete_markers,
            },
        )
        .await?;
        Ok(Self {
            listing,
            names: Names::new(encoding),
            prefix,
            max_keys,
        })
    }

    /// [`Page::read`] resumed after a text marker (ListObjects' `marker`, ListObjectVersions' `key-marker`; see
    /// [`v1_marker_position`]).
    async fn after_marker(
        s3: &SaltS3,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        marker: Marker<'_>,
        max_keys_asked: Option<i32>,
        encoding: Option<&EncodingType>,
    ) -> S3Result<Self> {
        let delimiter = delimiter.filter(|d| !d.is_empty());
        let after = |prefix: &str, delimiter: Option<&str>| Resume {
            after: marker
                .key
                .filter(|m| !m.is_empty())
                .map(|m| v1_marker_position(m, prefix, delimiter)),
            text_positions: true,
            delete_markers: marker.delete_markers,
        };
        Self::read(
            s3,
            bucket,
            prefix,
            delimiter,
            max_keys_asked,
            encoding,
            after,
        )
        .await
    }

    /// A name (or `None`) as the response shows it.
    fn show(&self, s: Option<String>) -> Option<String> {
        s.map(|s| self.names.show(s))
    }

    fn prefix(&self) -> Option<String> {
        self.show(Some(self.prefix.clone()))
    }

    /// The Prefix ListObjects v1 echoes: as sent, even with `encoding-type=url`, as AWS does (botocore decodes
    /// v1's Delimiter, Marker, NextMarker and names, not its Prefix); with `encoding-type=url`, encoded only
    /// when it holds a character XML 1.0 cannot carry.
    fn v1_prefix(&self) -> String {
        let xml_safe = self
            .prefix
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r'));
        if xml_safe {
            self.prefix.clone()
        } else {
            self.names.show(self.prefix.clone())
        }
    }

    fn max_keys(&self) -> Option<i32> {
        i32::try_from(self.max_keys).ok()
    }

    fn truncated(&self) -> Option<bool> {
        Some(self.listing.truncated)
    }

    /// Where the next response resumes, as a text marker (not shown yet).
    fn next_marker(&self) -> Option<String> {
        self.listing.next.as_ref().and_then(Position::marker)
    }

    /// A delimiter as the response shows it: an empty one is no delimiter, and is not echoed (as S3).
    fn delimiter(&self, delimiter: Option<String>) -> Option<String> {
        self.show(delimiter.filter(|d| !d.is_empty()))
    }

    /// The objects, as ListObjects and ListObjectsV2 show them (ListObjectVersions adds their version), with
    /// their owner when `with_owner` (always in v1; in v2 with `fetch-owner=true`).
    fn objects(&mut self, with_owner: bool) -> Vec<Object> {
        std::mem::take(&mut self.listing.objects)
            .into_iter()
            .map(|(key, m)| Object {
                key: Some(self.names.show(key)),
                size: i64::try_from(m.size).ok(),
                e_tag: Some(etag_of(&m)),
                last_modified: Some(last_modified_of(&m)),
                storage_class: Some(ObjectStorageClass::from_static(
                    ObjectStorageClass::STANDARD,
                )),
                owner: with_owner.then(owner),
                ..Object::default()
            })
            .collect()
    }

    fn prefixes(&mut self) -> Vec<CommonPrefix> {
        std::mem::take(&mut self.listing.prefixes)
            .into_iter()
            .map(|p| CommonPrefix {
                prefix: Some(self.names.show(p)),
            })
            .collect()
    }
}

/// ListObjectsV2: resumes after its continuation token, else after StartAfter.
pub(crate) async fn handle_list_objects_v2(
    s3: &SaltS3,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let after = match (&input.continuation_token, &input.start_after) {
        (Some(token), _) => Some(Position::Key(decode_token(token)?)),
        (None, Some(start)) => Some(Position::Key(start.as_bytes().to_vec())),
        (None, None) => None,
    };
    let mut page = Page::read(
        s3,
        &input.bucket,
        input.prefix.as_deref(),
        input.delimiter.as_deref(),
        input.max_keys,
        input.encoding_type.as_ref(),
        |_, _| Resume {
            after,
            text_positions: false,
            delete_markers: false,
        },
    )
    .await?;
    let objects = page.objects(input.fetch_owner == Some(true));
    let prefixes = page.prefixes();
    let key_count = objects.len() + prefixes.len();
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: page.prefix(),
        delimiter: page.delimiter(input.delimiter),
        max_keys: page.max_keys(),
        key_count: i32::try_from(key_count).ok(),
        is_truncated: page.truncated(),
        continuation_token: input.continuation_token,
        next_continuation_token: page.listing.next.as_ref().map(|p| hex(&p.bytes())),
        start_after: page.show(input.start_after),
        encoding_type: input.encoding_type,
        contents: Some(objects),
        common_prefixes: Some(prefixes),
        ..ListObjectsV2Output::default()
    }))
}

/// ListObjects (v1): resumes after its marker (past every key under it when it is a common prefix of this
/// listing); NextMarker when truncated.
pub(crate) async fn handle_list_objects(
    s3: &SaltS3,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let mut page = Page::after_marker(
        s3,
        &input.bucket,
        input.prefix.as_deref(),
        input.delimiter.as_deref(),
        Marker {
            key: input.marker.as_deref(),
            delete_markers: false,
        },
        input.max_keys,
        input.encoding_type.as_ref(),
    )
    .await?;
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(page.v1_prefix()),
        delimiter: page.delimiter(input.delimiter),
        // Echoed even when not sent (empty), as S3 does.
        marker: page.show(Some(input.marker.unwrap_or_default())),
        max_keys: page.max_keys(),
        is_truncated: page.truncated(),
        next_marker: page.show(page.next_marker()),
        encoding_type: input.encoding_type,
        contents: Some(page.objects(true)),
        common_prefixes: Some(page.prefixes()),
        ..ListObjectsOutput::default()
    }))
}

/// ListObjectVersions: every version of each key listed, newest first (`versions.rs` of the store: the current
/// one, then the kept ones), delete markers apart; after `version-id-marker`, the rest of `key-marker`'s versions
/// first. A page holds at most `max-keys` versions, delete markers and common prefixes, as S3's: one that stops
/// within a key's versions (or before the page's last key) resumes after its last version.
pub(crate) async fn handle_list_object_versions(
    s3: &SaltS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let input = req.input;
    s3.require_bucket(&input.bucket).await?;
    let version_marker = match (&input.key_marker, input.version_id_marker.as_deref()) {
        (_, None | Some("")) => None,
        (None, Some(_)) => {
            return Err(s3_error!(
                InvalidArgument,
                "A version-id marker cannot be specified without a key marker."
            ));
        }
        (Some(key), Some(v)) => Some((key.clone(), Named::parse(v).map(|_| v.to_owned())?)),
    };
    let mut page = Page::after_marker(
        s3,
        &input.bucket,
        input.prefix.as_deref(),
        input.delimiter.as_deref(),
        Marker {
            key: input.key_marker.as_deref(),
            delete_markers: true,
        },
        input.max_keys,
        input.encoding_type.as_ref(),
    )
    .await?;
    let base = objects_prefix(&input.bucket);
    let mut listed = Versions {
        budget: page.max_keys.saturating_sub(page.listing.prefixes.len()),
        ..Versions::default()
    };
    let mut cut: Option<String> = None;
    if let Some((key, after)) = &version_marker {
        let all = s3
            .store
            .versions(format!("{base}{key}"))
            .await
            .map_err(from_store)?;
        let rest = all
            .into_iter()
            .skip_while(|v| {
                !v.manifest
                    .as_ref()
                    .is_ok_and(|m| version_id_of(m) == *after)
            })
            .skip(1);
        if !listed.add(&page.names, key, rest) {
            cut = listed.last_key.clone();
        }
    }
    let keys = std::mem::take(&mut page.listing.objects);
    for (i, (key, _)) in keys.iter().enumerate() {
        if cut.is_some() {
            break;
        }
        if listed.full() {
            // Filled by the rest of the key marker's versions: resume after them.
            cut = listed.last_key.clone();
            break;
        }
        let all = s3
            .store
            .versions(format!("{base}{key}"))
            .await
            .map_err(from_store)?;
        let whole = listed.add(&page.names, key, all.into_iter());
        // The budget spent within this key's versions, or with keys of the page left: resume after the last
        // version listed (of this key, or of the one before when none of this key's fit).
        if !whole || (listed.full() && i + 1 < keys.len()) {
            cut = listed.last_key.clone();
        }
    }
    if let Some(key) = &cut {
        page.listing.prefixes.retain(|p| p < key);
        page.listing.truncated = true;
        page.listing.next = Some(Position::Key(key.clone().into_bytes()));
    }
    let next_key_marker = page.next_marker();
    let next_version_id_marker = listed.last.clone().filter(|_| next_key_marker.is_some());
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: page.prefix(),
        delimiter: page.delimiter(input.delimiter),
        key_marker: page.show(input.key_marker),
        version_id_marker: input.version_id_marker,
        max_keys: page.max_keys(),
        is_truncated: page.truncated(),
        next_key_marker: page.show(next_key_marker),
        next_version_id_marker,
        encoding_type: input.encoding_type,
        versions: Some(listed.versions),
        delete_markers: Some(listed.markers),
        common_prefixes: Some(page.prefixes()),
        ..ListObjectVersionsOutput::default()
    }))
}

/// The versions and delete markers a ListObjectVersions response shows, and the version id of the last one.
#[derive(Default)]
struct Versions {
    versions: Vec<ObjectVersion>,
    markers: Vec<DeleteMarkerEntry>,
    last: Option<String>,
    /// The key of the last one (as stored, not as shown).
    last_key: Option<String>,
    /// How many versions and markers the response may hold.
    budget: usize,
}

impl Versions {
    /// Whether the response holds all it may.
    fn full(&self) -> bool {
        self.versions.len() + self.markers.len() >= self.budget
    }

    /// Adds `versions` of `key` (its name shown as `names` say), newest first, while the budget lasts; a version
    /// whose record does not decode is left out (logged). Returns whether it added them all.
    fn add(
        &mut self,
        names: &Names,
        key: &str,
        versions: impl Iterator<Item = KeyVersion>,
    ) -> bool {
        let mut versions = versions.peekable();
        while let Some(v) = versions.next() {
            if self.full() {
                return false;
            }
            let m = match v.manifest {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "ListObjectVersions skips a version whose manifest is damaged");
                    continue;
                }
            };
            let version_id = version_id_of(&m);
            self.last = Some(version_id.clone());
            self.last_key = Some(key.to_owned());
            let key = Some(names.show(key.to_owned()));
            if is_delete_marker(&m) {
                self.markers.push(DeleteMarkerEntry {
                    key,
                    version_id: Some(version_id),
                    is_latest: Some(v.current),
                    last_modified: Some(last_modified_of(&m)),
                    owner: Some(owner()),
                });
            } else {
                self.versions.push(ObjectVersion {
                    key,
                    version_id: Some(version_id),
                    is_latest: Some(v.current),
                    size: i64::try_from(m.size).ok(),
                    e_tag: Some(etag_of(&m)),
                    last_modified: Some(last_modified_of(&m)),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    owner: Some(owner()),
                    ..ObjectVersion::default()
                });
            }
            if self.full() && versions.peek().is_some() {
                return false;
            }
        }
        true
    }
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

    #[test]
    fn a_v1_marker_jumps_only_when_it_is_a_common_prefix_of_the_listing() {
        let key = |k: &str| Position::Key(k.as_bytes().to_vec());
        let jump = |p: &str| Position::Past(p.to_owned());
        // A folder marker object listed under its own prefix: resume right after it.
        assert_eq!(v1_marker_position("dir/", "dir/", Some("/")), key("dir/"));
        // A common prefix of the listing: past every key under it.
        assert_eq!(v1_marker_position("dir/", "", Some("/")), jump("dir/"));
        assert_eq!(v1_marker_position("a/b/", "a/", Some("/")), jump("a/b/"));
        assert_eq!(v1_marker_position("a//", "a/", Some("/")), jump("a//"));
        // Not common prefixes: a second delimiter, another prefix, no delimiter.
        assert_eq!(v1_marker_position("a/b/c/", "a/", Some("/")), key("a/b/c/"));
        assert_eq!(v1_marker_position("b/", "a/", Some("/")), key("b/"));
        assert_eq!(v1_marker_position("dir/", "", None), key("dir/"));
    }
}
