//! Access keys kept in the store, each granted read, write or owner per bucket (`docs/s3.md`, *Access keys and
//! grants*). The server's own keys (its credentials file, the environment's) stay root keys: they may do
//! everything, and a store with no key record works as before.
//!
//! A key's record (`record.rs`) lives under `s3/k/<id>` (`keys.rs`), sealed under a key of the store's provider:
//! SigV4 needs the secret itself (it cannot be kept hashed), so the store never holds it in the clear, and a
//! record found unsealed is refused. Every gateway on the store reads the same records; each keeps a record it
//! read for [`CACHED_FOR`], so a grant given, a grant taken away or a key deleted takes effect everywhere within
//! that.
//!
//! A grant binds the bucket's record version: a bucket deleted and created again under the same name (by
//! anyone) is a new bucket, which no old grant reaches.
//!
//! What each right allows ([`need_of`]): `read` reads objects and lists them, and reads the bucket's settings;
//! `write` also writes and deletes objects and runs multipart uploads (a copy also needs `read` on its source's
//! bucket); `owner` also changes the bucket's settings and deletes it. A key may create buckets when made with
//! that flag, and is then the owner of each bucket it creates. ListBuckets lists the buckets a key has a grant
//! on. Any operation not named here needs `owner`.

mod record;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use saltblob_core::{BlobStore, Error, PutCondition, PutOptions, Result, VersionId};
use zeroize::Zeroizing;

use crate::keys::{ACCESS_KEY_PREFIX, access_key_record, bucket_key};

pub use record::Right;
pub(crate) use record::{Grant, KeyRecord};
use record::{MAX_GRANTS, MAX_NAME_LEN};

/// How long a server answers from a key record it read before, without reading it again.
pub const CACHED_FOR: Duration = Duration::from_secs(1);
/// Most key records a server keeps (the cache is emptied when full).
const CACHED_KEYS: usize = 4096;
/// How many times an update of a key record is tried against concurrent updates.
const UPDATE_ATTEMPTS: u32 = 8;
/// The content type of key records.
const CONTENT_TYPE: &str = "application/x-saltblob-access-key";

/// A key as `saltblob key list` shows it: never its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// The access key id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether it may create buckets.
    pub may_create_buckets: bool,
    /// When it was made (Unix µs).
    pub created_micros: u64,
    /// Its grants, by bucket name; `stale` grants name a bucket deleted since (or made again under the name),
    /// and allow nothing.
    pub grants: Vec<GrantInfo>,
}

/// One grant as `saltblob key list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantInfo {
    /// The bucket's name.
    pub bucket: String,
    /// The right.
    pub right: Right,
    /// Whether the bucket it was given on is gone (deleted, or made again under the name).
    pub stale: bool,
}

/// A key just made: the only time its secret is shown.
pub struct NewKey {
    /// The access key id.
    pub id: String,
    /// The secret access key.
    pub secret: Zeroizing<String>,
}

impl fmt::Debug for NewKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewKey")
            .field("id", &self.id)
            .field("secret", &"***")
            .finish()
    }
}

/// Characters of ids (RFC 4648 base32, as AWS's key ids) and of secrets.
const ID_CHARS: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const SECRET_CHARS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `len` characters of `alphabet` (32 or 64 of them: no bias), from the system's CSPRNG.
fn random_text(alphabet: &[u8], len: usize) -> Result<Zeroizing<String>> {
    let mut bytes = Zeroizing::new(vec![0u8; len]);
    saltblob_core::encryption::fill_random(&mut bytes)?;
    let mask = alphabet.len() - 1;
    Ok(Zeroizing::new(
        bytes
            .iter()
            .map(|b| char::from(alphabet[usize::from(*b) & mask]))
            .collect(),
    ))
}

/// Checks a key's name: 1 to [`MAX_NAME_LEN`] bytes of printable text.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "key name",
            format!("{name:?}: a name is 1 to {MAX_NAME_LEN} bytes of printable text"),
        ));
    }
    Ok(())
}

/// Checks an access key id as `saltblob key` takes it (the ids it makes: 20 characters `SBK…`).
fn check_id(id: &str) -> Result<()> {
    if id.len() != 20 || !id.starts_with("SBK") || !id.bytes().all(|b| ID_CHARS.contains(&b)) {
        return Err(Error::invalid(
            "access key id",
            format!("{id:?} is not an id `saltblob key create` makes (20 characters, SBK…)"),
        ));
    }
    Ok(())
}

/// Makes an access key named `name` (which may create buckets when `may_create_buckets`), with no grant; its
/// record is sealed under `seal_with`, else under the store's encryption key.
///
/// # Errors
/// `InvalidArgument` for a bad name, or when the store has no key to seal the secret under (open it with
/// `encryption=…&encryption_key=NAME`, docs/encryption.md); the store's errors.
pub async fn create_key(
    store: &BlobStore,
    name: &str,
    may_create_buckets: bool,
    seal_with: Option<&str>,
) -> Result<NewKey> {
    check_name(name)?;
    let encryption = store.config().encryption.as_ref();
    let seal = seal_with
        .map(str::to_owned)
        .or_else(|| encryption.and_then(|e| e.key.clone()));
    let (Some(seal), Some(_)) = (seal, encryption) else {
        return Err(Error::invalid(
            "access key",
            "its secret is kept sealed, and the store has no key to seal it under: open the store with \
             encryption=local&keyring=FILE&encryption_key=NAME (or aws-kms), see docs/encryption.md",
        ));
    };
    let id = format!("SBK{}", &*random_text(ID_CHARS, 17)?);
    let record = KeyRecord {
        id: id.clone(),
        name: name.to_owned(),
        secret: random_text(SECRET_CHARS, 40)?,
        may_create_buckets,
        created_micros: saltblob_core::version::now_micros(),
        grants: BTreeMap::new(),
    };
    let opts = PutOptions::new()
        .with_condition(PutCondition::IfAbsent)
        .with_content_type(CONTENT_TYPE)
        .with_encryption_key(seal);
    store
        .put(access_key_record(&id), record.encode().to_vec(), &opts)
        .await?;
    Ok(NewKey {
        id,
        secret: record.secret,
    })
}

/// A key's record as stored: its version, and the name of the key it is sealed under.
struct Stored {
    version: VersionId,
    sealed_under: String,
    record: KeyRecord,
}

/// Reads key `id`'s record; `None` if there is none.
///
/// # Errors
/// `Corrupt` for a record that does not decode or is not sealed; the store's errors (the provider's, when the
/// key it is sealed under is not available).
async fn read_key(store: &BlobStore, id: &str) -> Result<Option<Stored>> {
    let key = access_key_record(id);
    let manifest = match store.head(&key).await {
        Ok(m) => m,
        Err(Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(sealing) = manifest.sealing.as_ref() else {
        return Err(Error::corrupt(
            format!("access key record {key}"),
            "it is stored unsealed (a record `saltblob key` writes is always sealed)",
        ));
    };
    let bytes = match store.get(&key).await {
        Ok(b) => Zeroizing::new(b.to_vec()),
        Err(Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let record = KeyRecord::decode(id, &bytes)
        .map_err(|detail| Error::corrupt(format!("access key record {key}"), detail))?;
    Ok(Some(Stored {
        version: manifest.version,
        sealed_under: sealing.kek.name.clone(),
        record,
    }))
}

/// Applies `change` to key `id`'s record and stores it (sealed under the key it was), conditional on the version
/// read; tried again when another update came in between.
async fn update(
    store: &BlobStore,
    id: &str,
    mut change: impl FnMut(&mut KeyRecord) -> Result<()>,
) -> Result<()> {
    check_id(id)?;
    for _ in 0..UPDATE_ATTEMPTS {
        let Some(mut stored) = read_key(store, id).await? else {
            return Err(Error::NotFound {
                key: access_key_record(id).as_bytes().into(),
            });
        };
        change(&mut stored.record)?;
        let opts = PutOptions::new()
            .with_condition(PutCondition::IfVersion(stored.version))
            .with_content_type(CONTENT_TYPE)
            .with_encryption_key(stored.sealed_under);
        match store
            .put(
                access_key_record(id),
                stored.record.encode().to_vec(),
                &opts,
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(Error::PreconditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Err(Error::backend(
        "access keys",
        format!("key {id} changed {UPDATE_ATTEMPTS} times while it was being updated"),
        true,
    ))
}

/// Grants key `id` `right` on `bucket` (replacing the right it had there).
///
/// # Errors
/// `InvalidArgument` when the bucket does not exist; `NotFound` when the key does not; the store's errors.
pub async fn allow(store: &BlobStore, id: &str, bucket: &str, right: Right) -> Result<()> {
    if !s3s::path::check_bucket_name(bucket) {
        return Err(Error::invalid(
            "bucket",
            format!("{bucket:?} is not a bucket name S3 allows"),
        ));
    }
    let bucket_version = match store.head(bucket_key(bucket)).await {
        Ok(m) => m.version,
        Err(Error::NotFound { .. }) => {
            return Err(Error::invalid(
                "bucket",
                format!("there is no bucket {bucket:?}: a grant names a bucket that exists"),
            ));
        }
        Err(e) => return Err(e),
    };
    update(store, id, |record| {
        if !record.grants.contains_key(bucket) && record.grants.len() >= MAX_GRANTS {
            return Err(Error::invalid(
                "grant",
                format!("key {id} has {} grants, the most one key holds", MAX_GRANTS),
            ));
        }
        record.grants.insert(
            bucket.to_owned(),
            Grant {
                bucket_version,
                right,
            },
        );
        Ok(())
    })
    .await
}

/// Takes key `id`'s grant on `bucket` away; returns whether it had one.
///
/// # Errors
/// `NotFound` when the key does not exist; the store's errors.
pub async fn deny(store: &BlobStore, id: &str, bucket: &str) -> Result<bool> {
    let mut had = false;
    update(store, id, |record| {
        had = record.grants.remove(bucket).is_some();
        Ok(())
    })
    .await?;
    Ok(had)
}

/// Deletes key `id`: its requests fail from the next one each server checks after [`CACHED_FOR`].
///
/// # Errors
/// `NotFound` when the key does not exist; the store's errors.
pub async fn delete_key(store: &BlobStore, id: &str) -> Result<()> {
    check_id(id)?;
    match store.delete(access_key_record(id)).await? {
        Some(_) => Ok(()),
        None => Err(Error::NotFound {
            key: access_key_record(id).as_bytes().into(),
        }),
    }
}

/// Every key in the store, in id order, with its grants (never a secret).
///
/// # Errors
/// The store's errors; a damaged record, naming it.
pub async fn list_keys(store: &BlobStore) -> Result<Vec<KeyInfo>> {
    let mut ids = Vec::new();
    let mut entries = store.list_stream(ACCESS_KEY_PREFIX.as_bytes());
    while let Some(entry) = entries.try_next().await? {
        let id = entry.key.get(ACCESS_KEY_PREFIX.len()..).unwrap_or_default();
        ids.push(String::from_utf8_lossy(id).into_owned());
    }
    drop(entries);
    let mut keys = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(stored) = read_key(store, &id).await? else {
            continue;
        };
        let mut grants = Vec::with_capacity(stored.record.grants.len());
        for (bucket, grant) in &stored.record.grants {
            let current = match store.head(bucket_key(bucket)).await {
                Ok(m) => Some(m.version),
                Err(Error::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            grants.push(GrantInfo {
                bucket: bucket.clone(),
                right: grant.right,
                stale: current != Some(grant.bucket_version),
            });
        }
        keys.push(KeyInfo {
            id,
            name: stored.record.name.clone(),
            may_create_buckets: stored.record.may_create_buckets,
            created_micros: stored.record.created_micros,
            grants,
        });
    }
    Ok(keys)
}

/// The key records a server read lately, by id (`None`: there was none).
type Entries = HashMap<String, (Instant, Option<Arc<KeyRecord>>)>;

/// The access keys kept in the store, as a server sees them: each record read at most once per [`CACHED_FOR`].
pub(crate) struct Directory {
    store: BlobStore,
    entries: Mutex<Entries>,
}

impl Directory {
    /// The keys kept in `store`.
    pub(crate) fn new(store: BlobStore) -> Self {
        Self {
            store,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Key `id`'s record, if the store holds one.
    ///
    /// # Errors
    /// The store's errors; a damaged or unsealed record.
    pub(crate) async fn key(&self, id: &str) -> Result<Option<Arc<KeyRecord>>> {
        if let Ok(entries) = self.entries.lock()
            && let Some((at, record)) = entries.get(id)
            && at.elapsed() < CACHED_FOR
        {
            return Ok(record.clone());
        }
        // An id `saltblob key` cannot have made is not looked up.
        let record = match check_id(id) {
            Ok(()) => read_key(&self.store, id).await?.map(|s| Arc::new(s.record)),
            Err(_) => None,
        };
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= CACHED_KEYS {
                entries.clear();
            }
            entries.insert(id.to_owned(), (Instant::now(), record.clone()));
        }
        Ok(record)
    }

    /// Forgets what it read of key `id` (this server changed it).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(id);
        }
    }
}

/// A request signed by a key kept in the store (not a root key): put among the request's extensions by the
/// access check, for the operations that answer per key (ListBuckets, CreateBucket).
#[derive(Clone, Debug)]
pub(crate) struct Caller(pub(crate) Arc<KeyRecord>);

/// What an operation needs of a key kept in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing: the operation answers with what the key may see (ListBuckets).
    Listing,
    /// The flag to create buckets (CreateBucket).
    Create,
    /// This right on the request's bucket (and, for a copy, `read` on its source's).
    On(Right),
}

/// Operations that only read (objects, listings, bucket settings).
const READ_OPS: [&str; 23] = [
    "HeadBucket",
    "GetObjectAttributes",
    "GetBucketLocation",
    "GetBucketVersioning",
    "GetObject",
    "HeadObject",
    "ListObjects",
    "ListObjectsV2",
    "ListObjectVersions",
    "ListParts",
    "ListMultipartUploads",
    "GetObjectAcl",
    "GetObjectTagging",
    "GetBucketAcl",
    "GetBucketOwnershipControls",
    "GetBucketRequestPayment",
    "GetBucketPolicy",
    "GetBucketCors",
    "GetBucketTagging",
    "GetPublicAccessBlock",
    "GetObjectLockConfiguration",
    "GetBucketLifecycleConfiguration",
    "GetBucketEncryption",
];

/// Operations that write or delete objects.
const WRITE_OPS: [&str; 12] = [
    "PutObject",
    "DeleteObject",
    "DeleteObjects",
    "CopyObject",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "PutObjectAcl",
    "PutObjectTagging",
    "DeleteObjectTagging",
];

/// What operation `op` (s3s's name for it) needs of a key kept in the store: anything not named as a read or
/// a write needs `owner`.
pub(crate) fn need_of(op: &str) -> Need {
    match op {
        "ListBuckets" => Need::Listing,
        "CreateBucket" => Need::Create,
        op if READ_OPS.contains(&op) => Need::On(Right::Read),
        op if WRITE_OPS.contains(&op) => Need::On(Right::Write),
        _ => Need::On(Right::Owner),
    }
}

/// Whether `op` copies from a source (which then needs `read` on its bucket).
pub(crate) fn copies(op: &str) -> bool {
    matches!(op, "CopyObject" | "UploadPartCopy")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_parse_and_order() {
        assert_eq!("read".parse(), Ok(Right::Read));
        assert_eq!("owner".parse(), Ok(Right::Owner));
        assert!("admin".parse::<Right>().is_err());
        assert!(Right::Read < Right::Write && Right::Write < Right::Owner);
        assert_eq!(Right::Write.to_string(), "write");
    }

    #[test]
    fn operations_need_the_right_their_effect_calls_for() {
        assert_eq!(need_of("GetObject"), Need::On(Right::Read));
        assert_eq!(need_of("PutObject"), Need::On(Right::Write));
        assert_eq!(need_of("DeleteBucket"), Need::On(Right::Owner));
        assert_eq!(
            need_of("PutBucketLifecycleConfiguration"),
            Need::On(Right::Owner)
        );
        // An operation nobody classified (one added to s3s later) needs the most.
        assert_eq!(need_of("PutBucketPolicy"), Need::On(Right::Owner));
        assert_eq!(need_of("ListBuckets"), Need::Listing);
        assert_eq!(need_of("CreateBucket"), Need::Create);
        for op in READ_OPS {
            assert!(
                op.starts_with("Get") || op.starts_with("Head") || op.starts_with("List"),
                "{op}"
            );
        }
    }

    #[test]
    fn generated_ids_and_secrets_have_their_shape() {
        let id = format!("SBK{}", &*random_text(ID_CHARS, 17).expect("random"));
        check_id(&id).expect("a generated id");
        let secret = random_text(SECRET_CHARS, 40).expect("random");
        assert_eq!(secret.len(), 40);
        assert_ne!(*secret, *random_text(SECRET_CHARS, 40).expect("random"));
        assert!(check_id("AKIDEXAMPLE").is_err());
        assert!(check_name("").is_err() && check_name("a\nb").is_err());
        assert!(check_name(&"n".repeat(65)).is_err());
        check_name("reports team").expect("a name");
    }
}
