//! Access keys and their secrets (SigV4 is checked by s3s with the secret [`KeyAuth`] gives it, from the
//! [`KeyRing`], which can be replaced while the server runs), the access check (signed requests, or anonymous
//! reads and listings of the buckets that allow them), and the [`RequestRecord`] the access check fills in for
//! the access log.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::CopySource;
use s3s::path::S3Path;
use s3s::{S3Result, s3_error};
use saltblob_core::{BlobStore, Error, PriorityClass};

use crate::acl::{self, Canned, Requester};
use crate::error::from_store;
use crate::grants::{self, Caller, Directory, KeyRecord, Need, Right};
use crate::keys::{bucket_key, object_key};

/// An access key: its id and its secret (never shown by `Debug`).
#[derive(Clone)]
pub struct AccessKey {
    /// The access key id.
    pub id: String,
    secret: String,
}

impl AccessKey {
    /// An access key.
    pub fn new(id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            secret: secret.into(),
        }
    }
}

impl fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessKey")
            .field("id", &self.id)
            .field("secret", &"***")
            .finish()
    }
}

/// Parses a credentials file: one `ACCESS_KEY_ID SECRET` pair per line (separated by spaces or tabs); blank
/// lines and lines starting with `#` are ignored.
///
/// # Errors
/// A message naming the line (by number, never showing a secret) when a line does not hold exactly two
/// fields, or when an id appears twice.
pub fn parse_credentials(text: &str) -> Result<Vec<AccessKey>, String> {
    let mut keys = Vec::new();
    let mut seen = BTreeSet::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, secret] = fields[..] else {
            return Err(format!(
                "line {}: expected ACCESS_KEY_ID SECRET (two fields), found {} field(s)",
                number + 1,
                fields.len()
            ));
        };
        if !seen.insert(id.to_owned()) {
            return Err(format!(
                "line {}: access key id {id} appears twice",
                number + 1
            ));
        }
        keys.push(AccessKey::new(id, secret));
    }
    Ok(keys)
}

/// The access keys a server accepts. Clones share one set: after [`KeyRing::replace`] the next request is
/// checked against the new keys (a removed key, and every URL it presigned, stops working at once; `saltblob
/// serve` replaces them from its `--credentials` file on SIGHUP).
#[derive(Clone, Default)]
pub struct KeyRing(Arc<RwLock<Arc<HashMap<String, SecretKey>>>>);

impl KeyRing {
    /// A ring holding `keys`.
    pub fn new(keys: &[AccessKey]) -> Self {
        let ring = Self::default();
        ring.replace(keys);
        ring
    }

    /// Replaces the keys with `keys`.
    pub fn replace(&self, keys: &[AccessKey]) {
        let map: HashMap<String, SecretKey> = keys
            .iter()
            .map(|k| (k.id.clone(), SecretKey::from(k.secret.as_str())))
            .collect();
        let mut current = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Arc::new(map);
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.keys().len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn keys(&self) -> Arc<HashMap<String, SecretKey>> {
        Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<String> = self.keys().keys().cloned().collect();
        ids.sort();
        f.debug_struct("KeyRing").field("ids", &ids).finish()
    }
}

impl KeyRing {
    /// Whether `id` is one of its keys.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.keys().contains_key(id)
    }
}

/// The secrets for s3s's SigV4 check: of the server's own (root) keys first, then of the keys kept in the store.
pub(crate) struct KeyAuth {
    pub(crate) root: KeyRing,
    pub(crate) stored: Arc<Directory>,
}

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if let Some(secret) = self.root.keys().get(access_key) {
            return Ok(secret.clone());
        }
        match self.stored.key(access_key).await.map_err(from_store)? {
            Some(record) => Ok(SecretKey::from(record.secret.as_str())),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
        }
    }
}

/// What the access log says about one request, filled in as the request is understood.
#[derive(Debug, Default)]
pub(crate) struct RequestRecord(Mutex<RecordFields>);

/// The fields of a [`RequestRecord`].
#[derive(Clone, Debug, Default)]
pub(crate) struct RecordFields {
    /// The S3 operation (e.g. `GetObject`); empty until s3s has resolved it.
    pub op: String,
    /// The bucket, if the request names one.
    pub bucket: Option<String>,
    /// The object key, if the request names one.
    pub key: Option<String>,
    /// The access key id that signed the request; `None` for anonymous requests.
    pub access_key: Option<String>,
    /// The store's priority class the request's blob I/O ran in; `None` when the request read or wrote no blob.
    pub class: Option<PriorityClass>,
}

impl RequestRecord {
    /// The fields as they are now.
    pub(crate) fn fields(&self) -> RecordFields {
        self.0.lock().map(|f| f.clone()).unwrap_or_default()
    }

    fn update(&self, change: impl FnOnce(&mut RecordFields)) {
        if let Ok(mut fields) = self.0.lock() {
            change(&mut fields);
        }
    }

    /// Records the operation, for a request s3s does not run.
    pub(crate) fn set_op(&self, op: &str) {
        self.update(|f| op.clone_into(&mut f.op));
    }

    /// Records the class the request's blob I/O ran in.
    pub(crate) fn set_class(&self, class: PriorityClass) {
        self.update(|f| f.class = Some(class));
    }
}

/// Records `class` in the request record among `extensions`, if there is one.
pub(crate) fn record_class(extensions: &http::Extensions, class: PriorityClass) {
    if let Some(record) = extensions.get::<Arc<RequestRecord>>() {
        record.set_class(class);
    }
}

/// Operations an anonymous request may run on a bucket listed in `--anonymous-read`.
const ANONYMOUS_READ_OPS: [&str; 3] = ["GetObject", "HeadObject", "HeadBucket"];
/// Operations an anonymous request may run on a bucket listed in `--anonymous-list`.
const ANONYMOUS_LIST_OPS: [&str; 3] = ["ListObjects", "ListObjectsV2", "HeadBucket"];

/// The access check: a request signed by a root key (its signature was checked by s3s) may do anything; one
/// signed by a key kept in the store may do what its grants allow (`grants/`); an anonymous one only reads the
/// buckets in `anonymous_read` and lists those in `anonymous_list`. Besides, the canned ACLs of buckets and
/// objects let anyone, or any signed key, do what they open (`acl.rs`).
pub(crate) struct Access {
    pub(crate) anonymous_read: BTreeSet<String>,
    pub(crate) anonymous_list: BTreeSet<String>,
    pub(crate) root: KeyRing,
    pub(crate) stored: Arc<Directory>,
    pub(crate) store: BlobStore,
}

impl Access {
    /// Whether key `record` may run `op` on `bucket` (`None`: the request names none): its grant there, on the
    /// bucket as it is now (`owner` when the request `opens` what it writes with an ACL), and for a copy its
    /// grant on the source's bucket (`copy_source`: the header).
    async fn allows(
        &self,
        record: &KeyRecord,
        op: &str,
        bucket: Option<&str>,
        copy_source: Option<&str>,
        opens: bool,
    ) -> S3Result<bool> {
        let right = match (grants::need_of(op), bucket) {
            (Need::Listing, None) => return Ok(true),
            (Need::Create, Some(_)) => return Ok(record.may_create_buckets),
            (Need::On(_), Some(_)) if opens => Right::Owner,
            (Need::On(right), Some(_)) => right,
            _ => return Ok(false),
        };
        if !self.holds(record, bucket, right).await? {
            return Ok(false);
        }
        if !grants::copies(op) {
            return Ok(true);
        }
        let source = copy_source.and_then(|h| CopySource::parse(h).ok());
        match source {
            Some(CopySource::Bucket { bucket, .. }) => {
                self.holds(record, Some(&bucket), Right::Read).await
            }
            _ => Ok(false),
        }
    }

    /// Whether `record` holds at least `right` on `bucket` as it is now (a bucket that does not exist: no).
    async fn holds(
        &self,
        record: &KeyRecord,
        bucket: Option<&str>,
        right: Right,
    ) -> S3Result<bool> {
        let Some(bucket) = bucket.filter(|b| record.grants.contains_key(*b)) else {
            return Ok(false);
        };
        let version = match self.store.head(bucket_key(bucket)).await {
            Ok(m) => m.version,
            Err(Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(from_store(e)),
        };
        Ok(record.right_on(bucket, version).is_some_and(|r| r >= right))
    }

    /// Whether the canned ACLs let `who` run `op` without a grant (`acl.rs`): the object's ACL for a read of
    /// object `key` (the bucket's when there is no such object), else the ACL of `bucket` as it is now. Nothing
    /// is let in on a bucket that does not exist.
    async fn acl_allows(
        &self,
        who: Requester,
        op: &str,
        bucket: Option<&str>,
        key: Option<&str>,
    ) -> S3Result<bool> {
        let Some(bucket) = bucket else {
            return Ok(false);
        };
        if acl::OBJECT_READ_OPS.contains(&op) {
            let Some(Ok(store_key)) = key.map(|k| object_key(bucket, k)) else {
                return Ok(false);
            };
            // A missing object: those who may list the bucket may learn so (404), as on AWS.
            let acl = match self.acl_of(&store_key).await? {
                Some(acl) => Some(acl),
                None => self.acl_of(&bucket_key(bucket)).await?,
            };
            return Ok(acl.is_some_and(|a| a.lets_read(who)));
        }
        let lets = if acl::BUCKET_READ_OPS.contains(&op) {
            Canned::lets_read
        } else if acl::BUCKET_WRITE_OPS.contains(&op) {
            Canned::lets_write
        } else {
            return Ok(false);
        };
        Ok(self
            .acl_of(&bucket_key(bucket))
            .await?
            .is_some_and(|a| lets(a, who)))
    }

    /// The canned ACL of the bucket record or object stored under `store_key`; `None` when it does not exist.
    async fn acl_of(&self, store_key: &str) -> S3Result<Option<Canned>> {
        match self.store.head(store_key).await {
            Ok(m) => Ok(Some(Canned::of(&m))),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(from_store(e)),
        }
    }
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let op = cx.s3_op().name().to_owned();
        let (bucket, key) = match cx.s3_path() {
            S3Path::Root => (None, None),
            S3Path::Bucket { bucket } => (Some(bucket.to_string()), None),
            S3Path::Object { bucket, key } => (Some(bucket.to_string()), Some(key.to_string())),
        };
        let access_key = cx.credentials().map(|c| c.access_key.clone());
        let allowed = |buckets: &BTreeSet<String>, ops: &[&str]| {
            bucket.as_ref().is_some_and(|b| buckets.contains(b)) && ops.contains(&op.as_str())
        };
        let anonymous_ok = allowed(&self.anonymous_read, &ANONYMOUS_READ_OPS)
            || allowed(&self.anonymous_list, &ANONYMOUS_LIST_OPS);
        if let Some(record) = cx.extensions_mut().get::<Arc<RequestRecord>>() {
            record.update(|f| {
                f.op = op;
                f.bucket = bucket;
                f.key = key;
                f.access_key = access_key;
            });
        }
        let denied = || Err(s3_error!(AccessDenied, "Access Denied"));
        // A write that opens what it writes with a canned ACL (`acl.rs`) needs `owner`; no ACL lets one in.
        let opens = matches!(
            cx.s3_op().name(),
            "PutObject" | "CopyObject" | "CreateMultipartUpload"
        ) && cx
            .headers()
            .get("x-amz-acl")
            .and_then(|v| v.to_str().ok())
            .and_then(Canned::parse)
            .is_some_and(Canned::opens);
        let Some(id) = cx.credentials().map(|c| c.access_key.clone()) else {
            if anonymous_ok {
                return Ok(());
            }
            let (op, bucket, key) = names(cx);
            return if !opens && self.acl_allows(Requester::Anyone, op, bucket, key).await? {
                Ok(())
            } else {
                denied()
            };
        };
        if self.root.holds(&id) {
            return Ok(());
        }
        // Signed by a key kept in the store (s3s checked the signature with its secret).
        let Some(record) = self.stored.key(&id).await.map_err(from_store)? else {
            return denied();
        };
        let copy_source = cx
            .headers()
            .get("x-amz-copy-source")
            .and_then(|v| v.to_str().ok());
        let (op, bucket, key) = names(cx);
        // What anyone may do on a bucket, a stored key may too, grant or not (as on AWS); and what the ACLs let
        // any signed key do.
        let allowed = anonymous_ok
            || self.allows(&record, op, bucket, copy_source, opens).await?
            || !opens && self.acl_allows(Requester::Signed, op, bucket, key).await?;
        if !allowed {
            tracing::debug!(access_key = %id, op, bucket, "denied: no grant");
            return denied();
        }
        cx.extensions_mut().insert(Caller(record));
        Ok(())
    }
}

/// The operation, bucket and object key of the request `cx` checks.
fn names<'a>(cx: &'a S3AccessContext<'_>) -> (&'a str, Option<&'a str>, Option<&'a str>) {
    let (bucket, key) = match cx.s3_path() {
        S3Path::Root => (None, None),
        S3Path::Bucket { bucket } => (Some(&**bucket), None),
        S3Path::Object { bucket, key } => (Some(&**bucket), Some(&**key)),
    };
    (cx.s3_op().name(), bucket, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_files_are_parsed_and_bad_lines_named() {
        let keys =
            parse_credentials("# admins\n\nAKID1 s3cret1\n  AKID2\ts3cret2  \n").expect("valid");
        let ids: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
        assert_eq!(ids, ["AKID1", "AKID2"]);
        assert_eq!(keys[1].secret, "s3cret2");
        assert!(!format!("{keys:?}").contains("s3cret"));
        let err = parse_credentials("AKID1 s3cret1\nAKID2 s3cret2 extra\n").expect_err("3 fields");
        assert!(
            err.starts_with("line 2:") && !err.contains("s3cret"),
            "{err}"
        );
        let err = parse_credentials("A x\nA y\n").expect_err("twice");
        assert!(err.contains("appears twice"), "{err}");
    }
}
