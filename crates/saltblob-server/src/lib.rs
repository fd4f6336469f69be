//! # saltblob-server
//!
//! An S3-compatible server on a [`BlobStore`], so that S3 tools and SDKs (awscli, boto3, rclone, …) use saltblob
//! unchanged: `saltblob serve --listen 127.0.0.1:9000 --store URL`. The S3 protocol (request parsing, XML, SigV4
//! header and presigned-URL authentication, `aws-chunked` bodies) is the `s3s` crate's; connections are hyper's.
//! Buckets and objects live in the store's one key space (`docs/s3.md` states the mapping).
//!
//! ```no_run
//! # async fn example(store: saltblob_core::BlobStore) -> std::io::Result<()> {
//! use saltblob_server::{AccessKey, ServerConfig};
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9000").await?;
//! let config = ServerConfig::new(vec![AccessKey::new("AKID", "SECRET")]);
//! // Serves until the future completes (the CLI's waits for SIGINT or SIGTERM).
//! let shutdown = std::future::pending::<()>();
//! saltblob_server::run(listener, config, store, shutdown).await
//! # }
//! ```
//!
//! # Layout
//! Each module uses only those listed before it (a request's path runs up this list from `serve.rs`).
//! - `keys.rs`: buckets and object keys in the store's key space; `rereads.rs`: the policies of the re-read loops;
//!   `record_reader.rs`: a cursor over a stored record being decoded; `percent.rs`: percent-encoding.
//! - `grants/`: access keys kept in the store (sealed), their grants per bucket, what each operation needs.
//! - `acl.rs`: canned ACLs (a bucket's in its record, an object's in its manifest): what they open to whom.
//! - `error.rs`: saltblob's errors as S3 errors.
//! - `refusal.rs`: a request refused before s3s sees it, and its error document.
//! - `guard.rs`: the requests saltblob refuses (SigV2, presigned bounds, features it does not have, …), checked
//!   before s3s sees a request.
//! - `auth.rs`: access keys (a [`KeyRing`] of root keys that can be replaced while serving, and those kept in
//!   the store), their secrets for SigV4, each request's grant, anonymous reads and listings per bucket, the request record (with the priority class the access log and
//!   the latency histogram name).
//! - `process.rs`: the process metrics (memory, CPU time, file descriptors, start time), read from `/proc/self`.
//! - `metrics.rs`: the Prometheus metrics.
//! - `chunked.rs`: `aws-chunked` request bodies framed before s3s decodes them (unsigned chunks streamed,
//!   signed ones capped).
//! - `conn.rs`: connection limits: the first-request and idle deadlines, the write stall timeout.
//! - `md5.rs`: MD5 (ETags, Content-MD5) through aws-lc's assembly: the crate's only `unsafe` code.
//! - `body.rs`: request bodies read as an `AsyncRead` that verifies Content-MD5 and `x-amz-checksum-*` at its
//!   end, hashed on a thread of their own past their first MiB; blob streams as response bodies; HTTP bodies
//!   watched as their frames pass.
//! - `tagging.rs`: tag sets (an object's in its manifest, a bucket's in its record), checked as AWS checks them.
//! - `attrs.rs`: an object's S3 attributes in its manifest (ETag, Last-Modified, checksums, user metadata,
//!   stored headers), the conditional headers checked against them, a copy's source.
//! - `cache.rs`: a bucket setting read lately, kept for a moment.
//! - `versioning.rs`: bucket versioning on the store's kept versions: a bucket's state, version ids, delete
//!   markers, a request's `versionId`, deletes of a version.
//! - `cors/`: bucket CORS rules: their record, the answer to a browser's preflight and the headers of the
//!   answers to its requests.
//! - `lifecycle/`: bucket lifecycle rules: their record, when they expire an object, the expiry pass.
//! - `sse/`: server-side encryption: each request's choice, made once from its headers (the key a put seals
//!   under: its headers, the bucket's default, the server's keys; SSE-C), what responses say about it, the
//!   buckets' default encryption records.
//! - `put_body.rs`: the one path a body takes into the store (PutObject, CopyObject, UploadPart,
//!   UploadPartCopy): the checks an S3 input asks for, the verified reader that records the ETag and checksums
//!   before the commit, the write sealed as the request's encryption says, and its one outcome.
//! - `upload_cap.rs`: the cap on multipart uploads in progress per bucket.
//! - `config.rs`: [`ServerConfig`], how the server runs (its defaults, its builders), and [`load_tls`].
//! - `service.rs`: `SaltS3`, the service's state (holding what the modules above keep), and the store checks
//!   handlers share (the bucket check with its lifecycle, a conditional put's condition, the class a request
//!   is labelled with).
//! - `settings.rs`: the bucket and object settings saltblob does not keep, answered as AWS does.
//! - `list.rs`: ListObjects v1 and v2, ListObjectVersions.
//! - `object/`: object operations: put, get, head, delete, copy.
//! - `multipart/`: multipart upload; its records and their typed state, the part, complete and abort protocol,
//!   the sweep.
//! - `bucket/`: bucket operations, and the bucket settings saltblob keeps (lifecycle rules, default
//!   encryption, CORS rules, tags, versioning).
//! - `s3.rs`: dispatch: the `s3s::S3` implementation, each operation a call to its handler.
//! - `access_log.rs`: each request's access-log line and metrics, written when its response ends.
//! - `handler.rs`: the request handler: answers CORS preflights (`cors/`), refuses (`guard.rs`), sheds requests
//!   beyond the cap, counts and frames request bodies (`aws-chunked`), calls the S3 service, gives each response
//!   its request id.
//! - `probes.rs`: the metrics listener's answers: `/metrics`, `/healthz`, `/readyz` (the store answers, the
//!   server is not shutting down).
//! - `background.rs`: the tasks beside the accept loop: periodic upkeep (upload sweep, lifecycle pass, gc),
//!   the metrics listener.
//! - `serve.rs`: [`run`]: the accept loop under the connection cap, TLS, graceful shutdown.

mod access_log;
mod acl;
mod attrs;
mod auth;
mod background;
mod body;
mod bucket;
mod cache;
mod chunked;
mod config;
mod conn;
mod cors;
mod error;
mod grants;
mod guard;
mod handler;
mod keys;
mod lifecycle;
mod list;
mod md5;
mod metrics;
mod multipart;
mod object;
mod percent;
mod probes;
mod process;
mod put_body;
mod record_reader;
mod refusal;
mod rereads;
mod s3;
mod serve;
mod service;
mod settings;
mod sse;
mod tagging;
mod upload_cap;
mod versioning;

pub use saltblob_core::BlobStore;

pub use crate::auth::{AccessKey, KeyRing, parse_credentials};
pub use crate::background::lifecycle_expirer;
pub use crate::bucket::{check_bucket_name, create_bucket};
pub use crate::chunked::{MAX_SIGNED_CHUNK, REFRAME_MAX};
pub use crate::config::{ServerConfig, default_max_connections, load_tls};
pub use crate::grants::{
    CACHED_FOR as GRANTS_CACHED_FOR, GrantInfo, KeyInfo, NewKey, Right, allow, create_key,
    delete_key, deny, list_keys,
};
pub use crate::keys::{
    BUCKET_PREFIX, CORS_PREFIX, ENCRYPTION_PREFIX, LIFECYCLE_PREFIX, MULTIPART_PREFIX,
    OBJECT_PREFIX, TAGGING_PREFIX,
};
pub use crate::lifecycle::{Expired, Expirer, expire_objects};
pub use crate::multipart::{FINISHED_KEPT, PART_LEASE, UPLOAD_IDLE_EXPIRY};
pub use crate::serve::run;
pub use crate::upload_cap::DEFAULT_MAX_UPLOADS_PER_BUCKET;
