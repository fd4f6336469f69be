//! Store-wide configuration and per-request options, as consuming `#[must_use]` builders with documented defaults,
//! and [`parse_size`], the parser of sizes as people write them in flags and URLs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::base::clock::{Clock, SystemClock};
use crate::base::units::MIB;
use crate::base::version::VersionId;
use crate::encryption::EncryptionConfig;
use crate::format::codec::Codec;
use crate::format::layout::{ByteRange, LayoutPolicy};
use crate::schedule::{PriorityClass, SchedulerConfig};

/// Configuration of a [`crate::store::BlobStore`].
#[derive(Clone, Debug)]
#[must_use]
pub struct StoreConfig {
    /// How blobs are laid out. Defaults to [`LayoutPolicy::default`].
    pub policy: LayoutPolicy,
    /// Raw bytes of chunks a put or get keeps in flight at once, across all salts; bounds streaming memory to
    /// about this window plus one chunk (a chunk larger than the window is in flight alone). Defaults to 16 MiB.
    pub inflight_bytes: usize,
    /// Raw bytes of chunks sent to the backend in one call. Defaults to 1 MiB (capped by the backend).
    pub batch_bytes: usize,
    /// Raw bytes of chunks all reads of the store together fetch ahead of their consumers (each read at most
    /// its [`StoreConfig::inflight_bytes`] window). A read with nothing in flight always fetches its next
    /// batch, so that N readers who stop reading hold at most this plus N batches (about N MiB), not N windows.
    /// Defaults to 256 MiB.
    pub read_ahead_budget: usize,
    /// Bytes of buffers kept idle for the next whole-value read of a large value (`BlobStore::get` and
    /// `BlobStream::collect_bytes` of 4 MiB or more): such a value is collected into huge pages that return to
    /// the store when the caller drops it, so that the next large read does not fault in and zero fresh memory.
    /// 0 keeps none. Defaults to 128 MiB (two 60 MiB values); streaming reads use none.
    pub idle_value_buffers: usize,
    /// How long a replaced or deleted version's chunks stay readable, for readers that started before.
    /// Defaults to 5 minutes.
    pub grace: Duration,
    /// Largest blob accepted, in bytes. Defaults to no limit.
    pub max_blob_size: Option<u64>,
    /// How long a chunked put's intent record stays valid without renewal. A running put renews it every third
    /// of this; garbage collection reclaims the chunks of a put whose intent has expired, and a put that could
    /// not renew in time fails instead of committing. Clocks of clients sharing a store must agree to well
    /// within a third of it. Defaults to 60 seconds.
    pub intent_lease: Duration,
    /// The wall clock the store reads for every time it writes or compares (intent leases, grace periods,
    /// fsck's minimum age, blob expiry, version ids). Defaults to [`SystemClock`]; tests jump time forward
    /// with an offset clock instead of sleeping.
    pub clock: Arc<dyn Clock>,
    /// How backend requests are scheduled between priority classes. Defaults to [`SchedulerConfig::default`]:
    /// on, `interactive` 1000 shares, `bulk` 200.
    pub scheduler: SchedulerConfig,
    /// How versions are sealed (`docs/format.md`, "Encryption at rest"): the key provider that opens every sealed
    /// version read, and the key new versions are sealed under. Defaults to none: puts store plaintext, and a
    /// sealed version fails to read with [`crate::base::error::Error::KeyUnavailable`].
    pub encryption: Option<EncryptionConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            policy: LayoutPolicy::default(),
            inflight_bytes: 16 * MIB as usize,
            batch_bytes: MIB as usize,
            read_ahead_budget: 256 * MIB as usize,
            idle_value_buffers: 128 * MIB as usize,
            grace: Duration::from_secs(300),
            max_blob_size: None,
            intent_lease: Duration::from_secs(60),
            clock: Arc::new(SystemClock),
            scheduler: SchedulerConfig::default(),
            encryption: None,
        }
    }
}

impl StoreConfig {
    /// Sets [`StoreConfig::policy`].
    pub fn with_policy(mut self, policy: LayoutPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets [`StoreConfig::inflight_bytes`].
    pub fn with_inflight_bytes(mut self, bytes: usize) -> Self {
        self.inflight_bytes = bytes;
        self
    }

    /// Sets [`StoreConfig::batch_bytes`].
    pub fn with_batch_bytes(mut self, bytes: usize) -> Self {
        self.batch_bytes = bytes;
        self
    }

    /// Sets [`StoreConfig::read_ahead_budget`].
    pub fn with_read_ahead_budget(mut self, bytes: usize) -> Self {
        self.read_ahead_budget = bytes;
        self
    }

    /// Sets [`StoreConfig::idle_value_buffers`].
    pub fn with_idle_value_buffers(mut self, bytes: usize) -> Self {
        self.idle_value_buffers = bytes;
        self
    }

    /// Applies store URL parameter `name=value` when it is one of the store's own: `idle_value_buffers=SIZE`
    /// ([`StoreConfig::idle_value_buffers`]), the layout policy's ([`LayoutPolicy::apply_url_param`]) and the
    /// scheduler's ([`SchedulerConfig::apply_url_param`]). `Ok(false)` for any other name (a backend's).
    ///
    /// # Errors
    /// [`crate::base::error::Error::InvalidArgument`] naming the parameter when its value is wrong.
    pub fn apply_url_param(&mut self, name: &str, value: &str) -> crate::base::error::Result<bool> {
        if name == "idle_value_buffers" {
            let bytes = crate::base::units::parse_size(value)
                .map_err(|e| crate::base::error::Error::invalid("idle_value_buffers", e))?;
            self.idle_value_buffers = usize::try_from(bytes).map_err(|_| {
                crate::base::error::Error::invalid(
                    "idle_value_buffers",
                    format!("{value} is too large"),
                )
            })?;
            return Ok(true);
        }
        Ok(self.policy.apply_url_param(name, value)?
            || self.scheduler.apply_url_param(name, value)?)
    }

    /// Sets [`StoreConfig::grace`].
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets [`StoreConfig::intent_lease`].
    pub fn with_intent_lease(mut self, lease: Duration) -> Self {
        self.intent_lease = lease;
        self
    }

    /// Sets [`StoreConfig::clock`].
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`StoreConfig::scheduler`].
    pub fn with_scheduler(mut self, scheduler: SchedulerConfig) -> Self {
        self.scheduler = scheduler;
        self
    }

    /// Sets [`StoreConfig::encryption`].
    pub fn with_encryption(mut self, encryption: EncryptionConfig) -> Self {
        self.encryption = Some(encryption);
        self
    }

    /// Sets [`StoreConfig::max_blob_size`].
    pub fn with_max_blob_size(mut self, bytes: u64) -> Self {
        self.max_blob_size = Some(bytes);
        self
    }
}

/// When a put may commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PutCondition {
    /// Always (last commit wins). The default.
    #[default]
    None,
    /// Only if the key holds no blob; otherwise [`crate::base::error::Error::AlreadyExists`].
    IfAbsent,
    /// Only if the key's current version is this one; otherwise [`crate::base::error::Error::PreconditionFailed`].
    IfVersion(VersionId),
}

/// Options of one put. Unset layout fields fall back to the store's [`LayoutPolicy`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct PutOptions {
    /// Chunk size for this blob, whatever its size (it replaces both of the policy's chunk sizes). Defaults to
    /// the policy's, by the blob's size ([`LayoutPolicy::chunk_size_for`]).
    pub chunk_size: Option<u32>,
    /// Largest salt count for this blob. Defaults to the policy's.
    pub max_salt: Option<u32>,
    /// Compression tried on each chunk. Defaults to the policy's.
    pub codec: Option<Codec>,
    /// Commit condition. Defaults to none.
    pub condition: PutCondition,
    /// The stream's length, when known in advance: the layout is then exact from the first byte, and a stream
    /// of another length fails with [`crate::base::error::Error::SizeMismatch`]. Defaults to unknown.
    pub size_hint: Option<u64>,
    /// MIME type stored in the manifest. Defaults to none.
    pub content_type: Option<String>,
    /// User metadata stored in the manifest (at most 8 KiB). Defaults to empty.
    pub metadata: BTreeMap<String, String>,
    /// The class the put runs in. Defaults to the store's default class, else by layout: `interactive` for
    /// inline and single-partition blobs, `bulk` for salted ones and streams longer than the lookahead.
    pub priority: Option<PriorityClass>,
    /// Metadata learnt from the body while it streams (a digest, a trailing checksum): what is in it when the
    /// stream ends is stored over [`PutOptions::metadata`]. Defaults to none.
    pub late_metadata: Option<LateMetadata>,
    /// How long the blob lives, from the put's start: once past, it reads as [`crate::base::error::Error::NotFound`] at once,
    /// leaves listings, and gc reclaims it ([`crate::upkeep::gc::GcReport::expired`]); the manifest records the expiry.
    /// At least 1 µs, and the expiry must fit the format (Unix microseconds in 64 bits). Defaults to none: the
    /// blob never expires.
    pub ttl: Option<Duration>,
    /// The key-encryption key this version is sealed under, by its provider's name for it (a keyring name, a KMS
    /// key id), over the store's [`crate::encryption::EncryptionConfig::key`]. The store must have a key provider. Defaults
    /// to the store's key, if any.
    pub encryption_key: Option<String>,
    /// A key the caller holds (S3's SSE-C): the version is sealed under it, whatever the store's key, and every
    /// read of it must give it again ([`GetOptions::customer_key`]). The store needs no key provider for it, and
    /// never stores the key. Not with [`PutOptions::encryption_key`]. Defaults to none.
    pub customer_key: Option<crate::encryption::CustomerKey>,
    /// Keep the version this put replaces, readable by its id ([`crate::store::BlobStore::versions`],
    /// [`GetOptions::version`]), instead of reclaiming it after the grace period; it stays until
    /// [`crate::store::BlobStore::remove_version`] removes it (S3's bucket versioning). A put that replaces
    /// nothing, or a manifest that does not decode, keeps nothing. Defaults to `false`.
    pub keep_replaced: bool,
}

/// Metadata a streaming put learns only from its body, shared between the reader that computes it and the put
/// that stores it (see [`PutOptions::late_metadata`]). Cheap to clone: clones share one map.
#[derive(Clone, Debug, Default)]
pub struct LateMetadata(Arc<Mutex<BTreeMap<String, String>>>);

impl LateMetadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces one entry.
    pub fn insert(&self, key: impl Into<String>, value: impl Into<String>) {
        self.lock().insert(key.into(), value.into());
    }

    /// A copy of the entries.
    pub fn entries(&self) -> BTreeMap<String, String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        // A panic while holding the lock leaves a map that is still valid.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PutOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`PutOptions::chunk_size`].
    pub fn with_chunk_size(mut self, bytes: u32) -> Self {
        self.chunk_size = Some(bytes);
        self
    }

    /// Sets [`PutOptions::max_salt`].
    pub fn with_max_salt(mut self, salts: u32) -> Self {
        self.max_salt = Some(salts);
        self
    }

    /// Sets [`PutOptions::codec`].
    pub fn with_codec(mut self, codec: Codec) -> Self {
        self.codec = Some(codec);
        self
    }

    /// Sets [`PutOptions::condition`].
    pub fn with_condition(mut self, condition: PutCondition) -> Self {
        self.condition = condition;
        self
    }

    /// Sets [`PutOptions::keep_replaced`].
    pub fn with_keep_replaced(mut self, keep: bool) -> Self {
        self.keep_replaced = keep;
        self
    }

    /// Sets [`PutOptions::size_hint`].
    pub fn with_size_hint(mut self, bytes: u64) -> Self {
        self.size_hint = Some(bytes);
        self
    }

    /// Sets [`PutOptions::content_type`].
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// Sets [`PutOptions::priority`].
    pub fn with_priority(mut self, class: PriorityClass) -> Self {
        self.priority = Some(class);
        self
    }

    /// Sets [`PutOptions::late_metadata`].
    pub fn with_late_metadata(mut self, late: LateMetadata) -> Self {
        self.late_metadata = Some(late);
        self
    }

    /// Adds one entry to [`PutOptions::metadata`].
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets [`PutOptions::customer_key`].
    pub fn with_customer_key(mut self, key: crate::encryption::CustomerKey) -> Self {
        self.customer_key = Some(key);
        self
    }

    /// Sets [`PutOptions::encryption_key`].
    pub fn with_encryption_key(mut self, name: impl Into<String>) -> Self {
        self.encryption_key = Some(name.into());
        self
    }

    /// Sets [`PutOptions::ttl`].
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The expiry of a put started at `now_micros` with this [`PutOptions::ttl`], in Unix microseconds.
    ///
    /// # Errors
    /// [`crate::base::error::Error::InvalidArgument`] naming `ttl` when it is zero or ends beyond the format's range.
    pub fn expiry(&self, now_micros: u64) -> crate::base::error::Result<Option<u64>> {
        let Some(ttl) = self.ttl else {
            return Ok(None);
        };
        let ttl_micros = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        if ttl_micros == 0 {
            return Err(crate::base::error::Error::invalid(
                "ttl",
                "0; a blob lives at least 1 µs (leave the ttl out for a blob that never expires)",
            ));
        }
        now_micros
            .checked_add(ttl_micros)
            .filter(|t| *t < u64::MAX)
            .map(Some)
            .ok_or_else(|| {
                crate::base::error::Error::invalid(
                    "ttl",
                    format!(
                        "{ttl:?} ends beyond the format's range (expiry in Unix microseconds, 64 bits); leave the \
                         ttl out for a blob that never expires"
                    ),
                )
            })
    }
}

/// Options of one read ([`crate::store::BlobStore::get_with`], [`crate::store::BlobStore::get_stream_with`]).
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct GetOptions {
    /// Bytes to read. Defaults to the whole blob (whose digest is then verified).
    pub range: Option<ByteRange>,
    /// The class the read runs in. Defaults to the store's default class, else by layout: `interactive` for
    /// inline and single-partition blobs, `bulk` for salted ones.
    pub priority: Option<PriorityClass>,
    /// The key a version sealed under a customer key ([`PutOptions::customer_key`]) was put with: without it,
    /// or with another, such a read fails with [`crate::base::error::Error::KeyUnavailable`] (provider `customer`) before any
    /// chunk is fetched. Ignored by versions sealed otherwise, and by plaintext ones. Defaults to none.
    pub customer_key: Option<crate::encryption::CustomerKey>,
    /// The version to read: the current one or a kept one ([`PutOptions::keep_replaced`]); another fails with
    /// [`crate::base::error::Error::VersionNotFound`]. Defaults to the current version.
    pub version: Option<crate::base::version::VersionId>,
}

impl GetOptions {
    /// Default options: the whole blob, the class by layout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`GetOptions::range`].
    pub fn with_range(mut self, range: impl Into<ByteRange>) -> Self {
        self.range = Some(range.into());
        self
    }

    /// Sets [`GetOptions::priority`].
    pub fn with_priority(mut self, class: PriorityClass) -> Self {
        self.priority = Some(class);
        self
    }

    /// Sets [`GetOptions::customer_key`].
    pub fn with_customer_key(mut self, key: crate::encryption::CustomerKey) -> Self {
        self.customer_key = Some(key);
        self
    }

    /// Sets [`GetOptions::version`].
    pub fn with_version(mut self, version: crate::base::version::VersionId) -> Self {
        self.version = Some(version);
        self
    }
}
