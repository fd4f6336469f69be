//! Access keys and their secrets (SigV4 is checked by s3s with the secret [`KeyAuth`] gives it, from the
//! [`KeyRing`], which can be replaced while the server runs), the access check (signed requests, or anonymous
//! reads and listings of the buckets that allow them), and the [`RequestRecord`] the access check fills in for
//! the access log.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{S3Result, s3_error};
use saltblob_core::PriorityClass;

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

/// The secrets of the configured access keys, for s3s's SigV4 check.
pub(crate) struct KeyAuth(pub(crate) KeyRing);

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0.keys().get(access_key).cloned().ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
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

/// The access check: a signed request (its signature was checked by s3s) may do anything; an anonymous one
/// only reads the buckets in `anonymous_read` and lists those in `anonymous_list`.
pub(crate) struct Access {
    pub(crate) anonymous_read: BTreeSet<String>,
    pub(crate) anonymous_list: BTreeSet<String>,
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
        let signed = access_key.is_some();
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
        if signed || anonymous_ok {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied, "Access Denied"))
        }
    }
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
