//! S3 requests recorded as a `saltblob-check` history: [`Actor`] sends PutObject, GetObject (whole and ranged),
//! DeleteObject and the multipart calls to the server, each on a connection of its own, and records every
//! operation on an object's value as an invocation before the request and a completion after its answer (see
//! the parent module for how each answer maps to an outcome).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use saltblob_check::history::now_micros;
use saltblob_check::value::{header_len, to_hex};
use saltblob_check::{
    Event, GetResult, HistorySink, Identified, MemorySink, OpId, OpKind, OpResult, Outcome,
    ValueId, generate, verify,
};
use tokio::sync::{RwLock, mpsc};

use crate::client::{Call, Client, Reply, try_send_raw};
use crate::multipart::md5_hex;

/// The bucket of the test.
pub(super) const BUCKET: &str = "hist";
/// The size of every part but the last (S3's smallest).
pub(super) const PART: usize = 5 << 20;
/// How long a request may take before the test fails (a request that hangs is a bug).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What the server answered, or how the exchange failed (connection refused or cut, body cut short).
pub(super) type Answer = std::result::Result<Reply, String>;

/// Sends `request` to `addr` on a new HTTP/1.1 connection; transport failures are returned, not panics.
/// Dropping the future (its task aborted) closes the connection: the client goes away.
pub(super) async fn send(
    addr: SocketAddr,
    request: http::Request<BoxBody<Bytes, Infallible>>,
) -> Answer {
    tokio::time::timeout(REQUEST_TIMEOUT, try_send_raw(addr, request))
        .await
        .unwrap_or_else(|_| panic!("a request hung for {REQUEST_TIMEOUT:?}"))
}

/// A value written to a key by a PutObject, or by an upload's parts (a *generation*: the parts of one value).
#[derive(Clone, Debug)]
pub(super) struct Value {
    pub key: String,
    pub id: ValueId,
    pub bytes: Bytes,
    /// The ETag a GET answers with: the MD5 of a PutObject's value, the multipart ETag of an upload's.
    pub etag: String,
    /// The parts' ETags (hex MD5), for a generation.
    pub part_etags: Vec<String>,
}

impl Value {
    /// Part `number` (1-based) of a generation: [`PART`] bytes each, the last one the rest.
    pub fn part(&self, number: usize) -> Bytes {
        let start = (number - 1) * PART;
        let end = (start + PART).min(self.bytes.len());
        self.bytes.slice(start..end)
    }

    pub fn parts(&self) -> usize {
        self.bytes.len().div_ceil(PART)
    }

    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// Counts of what the server answered, by request kind and answer (status and S3 error code): printed at the
/// end, and checked so that the test cannot pass without having driven the races it is about.
#[derive(Debug, Default)]
pub(super) struct Tally(Mutex<HashMap<String, u64>>);

impl Tally {
    pub fn add(&self, what: &str, answer: &Answer) {
        let label = match answer {
            Ok(r) if r.code().is_empty() => format!("{what} {}", r.status),
            Ok(r) => format!("{what} {} {}", r.status, r.code()),
            Err(_) => format!("{what} cut"),
        };
        self.bump(&label);
    }

    pub fn bump(&self, label: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(label.to_owned())
            .or_insert(0) += 1;
    }

    pub fn get(&self, label: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(label)
            .copied()
            .unwrap_or(0)
    }

    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        lines.sort();
        lines
    }
}

/// What every actor shares: the server's address and credentials, the history, the values written (by key and
/// ETag, to identify what a ranged read returns), the tally, and the lock that keeps gc with grace 0 away from
/// reads in flight.
pub(super) struct Shared {
    pub client: Client,
    pub sink: MemorySink,
    pub values: Mutex<HashMap<(String, String), Vec<Value>>>,
    pub tally: Tally,
    /// Reads hold it shared, gc with grace 0 exclusively: a reader never has the version it reads reclaimed
    /// under it (what the grace period is for), so any read that fails read damaged data.
    pub readers: RwLock<()>,
    next_actor: AtomicU64,
}

impl Shared {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            sink: MemorySink::new(),
            values: Mutex::new(HashMap::new()),
            tally: Tally::default(),
            readers: RwLock::new(()),
            next_actor: AtomicU64::new(1),
        })
    }

    fn register(&self, value: &Value) {
        self.values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((value.key.clone(), value.etag.clone()))
            .or_default()
            .push(value.clone());
    }

    fn candidates(&self, key: &str, etag: &str) -> Vec<Value> {
        self.values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(key.to_owned(), etag.to_owned()))
            .cloned()
            .unwrap_or_default()
    }
}

/// The path of `key` in the test's bucket.
pub(super) fn path(key: &str) -> String {
    format!("/{BUCKET}/{key}")
}

/// A multipart upload as its client knows it.
#[derive(Debug)]
pub(super) struct Upload {
    pub key: String,
    pub id: String,
    /// When the first CompleteMultipartUpload of the upload was invoked: every complete of it is recorded as
    /// invoked then, since a complete answering 200 may report the commit of an earlier one.
    pub first_complete: Option<u64>,
}

impl Upload {
    /// The store key of the upload's record (`s3/u/<bucket>/u/<id>`).
    pub fn record_key(&self) -> String {
        format!("s3/u/{BUCKET}/u/{}", self.id)
    }
}

/// An operation on an object recorded in the history: its id and kind, recorded as invoked.
pub(super) struct Recorded {
    op: OpId,
    sink: MemorySink,
}

impl Recorded {
    /// Records its completion now.
    pub fn complete(self, outcome: Outcome) {
        self.sink.record(&Event::Complete {
            op: self.op,
            at: now_micros(),
            outcome,
        });
    }

    /// Records its completion with `outcome`, if any; `None` leaves it indeterminate.
    pub fn end(self, outcome: Option<Outcome>) {
        if let Some(outcome) = outcome {
            self.complete(outcome);
        }
    }
}

/// One client of the test: its own id (the `writer` of the values it writes) and operation counter.
pub(super) struct Actor {
    pub shared: Arc<Shared>,
    id: u64,
    seq: u64,
}

fn failed(error: String, corrupt: bool) -> Outcome {
    Outcome::Failed { error, corrupt }
}

/// Whether an answer leaves the outcome of a write unknown: a 5xx (the server could not tell, or a store
/// write failed in a way that may still land), or no answer at all.
fn unknown(answer: &Answer) -> bool {
    match answer {
        Err(_) => true,
        Ok(r) => {
            r.status >= 500
                || matches!(
                    r.code().as_str(),
                    "InternalError" | "ServiceUnavailable" | "SlowDown"
                )
        }
    }
}

/// The outcome of a PutObject or DeleteObject: `ok` for the success status, indeterminate ([`unknown`]),
/// else failed (a refusal).
fn write_outcome(answer: &Answer, ok_status: u16, ok: OpResult) -> Option<Outcome> {
    match answer {
        _ if unknown(answer) => None,
        Ok(r) if r.status == ok_status => Some(Outcome::Ok(ok)),
        Ok(r) => Some(failed(format!("{} {}", r.status, r.code()), false)),
        Err(_) => None,
    }
}

/// The outcome of a CompleteMultipartUpload that listed `value`'s parts: ok for a 200 whose body is the
/// result (then its ETag must be `value`'s), indeterminate ([`unknown`]: also a 200 whose body carries such
/// an error, as a complete kept alive past 5 s answers), failed for any other error (a refusal).
pub(super) fn complete_outcome(answer: &Answer, value: &Value) -> Option<Outcome> {
    match answer {
        Ok(r) if r.status == 200 && r.text().contains("<CompleteMultipartUploadResult") => {
            let etag = r
                .xml("ETag")
                .pop()
                .unwrap_or_default()
                .replace("&quot;", "");
            assert_eq!(
                etag.trim_matches('"'),
                value.etag,
                "a complete answers the ETag of the parts it listed: {}",
                r.text()
            );
            Some(Outcome::Ok(OpResult::Put))
        }
        _ if unknown(answer) => None,
        Ok(r) => Some(failed(format!("{} {}", r.status, r.code()), false)),
        Err(_) => None,
    }
}

/// What a whole GET read: NotFound for `NoSuchKey`; a value (checked against the ETag it came with) for a 200;
/// a failure otherwise, corrupt unless it is a retryable 503 or a refusal (4xx): the server answers 500, or
/// cuts the body, only for a store error that is not retryable, and the store under this test never fails a
/// read on purpose.
fn read_outcome(shared: &Shared, key: &str, answer: &Answer) -> Outcome {
    match answer {
        Ok(r) if r.status == 404 && r.code() == "NoSuchKey" => {
            Outcome::Ok(OpResult::Get(GetResult::NotFound))
        }
        Ok(r) if r.status == 200 => Outcome::Ok(OpResult::Get(identify(shared, key, r))),
        Ok(r) => failed(
            format!("{} {}", r.status, r.code()),
            r.status >= 500 && r.status != 503,
        ),
        Err(e) => failed(e.clone(), true),
    }
}

/// Identifies a whole value read under `key`, and checks that its ETag is the one of the value it is.
fn identify(shared: &Shared, key: &str, r: &Reply) -> GetResult {
    let len = r.body.len() as u64;
    match verify(key.as_bytes(), &r.body) {
        Identified::Whole(id) => {
            let etag = r.header("etag").trim_matches('"').to_owned();
            let named = shared.candidates(key, &etag);
            if named.iter().any(|v| v.id == id) {
                GetResult::Value {
                    id: Some(id),
                    len,
                    small_bytes_hex: None,
                }
            } else {
                GetResult::Torn {
                    reason: format!("value {id} came with ETag {etag}, which is not its own"),
                    len,
                }
            }
        }
        Identified::Small(len) => GetResult::Value {
            id: None,
            len,
            small_bytes_hex: Some(to_hex(&r.body)),
        },
        Identified::Torn { reason } => GetResult::Torn { reason, len },
    }
}

/// What a ranged GET read: the value whose ETag it came with and whose bytes it matches at that range (recorded
/// as a read of that whole value), else torn; `None` for a range past the end (416: it says nothing of which
/// value is there).
fn range_outcome(shared: &Shared, key: &str, answer: &Answer) -> Option<Outcome> {
    let r = match answer {
        Ok(r) if r.status == 206 => r,
        Ok(r) if r.status == 416 => return None,
        // A range on an empty object is ignored: the whole (empty) value.
        _ => return Some(read_outcome(shared, key, answer)),
    };
    let range = r.header("content-range");
    let parsed = range
        .strip_prefix("bytes ")
        .and_then(|s| s.split_once('/'))
        .and_then(|(span, total)| {
            let (a, b) = span.split_once('-')?;
            Some((
                a.parse::<usize>().ok()?,
                b.parse::<usize>().ok()?,
                total.parse::<usize>().ok()?,
            ))
        });
    let Some((start, last, total)) = parsed else {
        return Some(failed(format!("206 with Content-Range {range:?}"), false));
    };
    let etag = r.header("etag").trim_matches('"').to_owned();
    let matched = shared
        .candidates(key, &etag)
        .into_iter()
        .find(|v| v.bytes.len() == total && v.bytes.get(start..=last).is_some_and(|b| b == r.body));
    let result = match matched {
        Some(v) if header_len(key.as_bytes()).is_some_and(|h| total >= h) => GetResult::Value {
            id: Some(v.id),
            len: v.len(),
            small_bytes_hex: None,
        },
        Some(v) => GetResult::Value {
            id: None,
            len: v.len(),
            small_bytes_hex: Some(to_hex(&v.bytes)),
        },
        None => GetResult::Torn {
            reason: format!(
                "bytes {start}-{last} of {total} with ETag {etag} match no value written under the key with that ETag"
            ),
            len: total as u64,
        },
    };
    Some(Outcome::Ok(OpResult::Get(result)))
}

impl Actor {
    pub fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: Arc::clone(shared),
            id: shared.next_actor.fetch_add(1, Ordering::Relaxed),
            seq: 0,
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Records the invocation of an operation (at `at`, default now).
    fn invoke(&mut self, kind: OpKind, at: Option<u64>) -> Recorded {
        let op = OpId {
            client: self.id,
            seq: self.next_seq(),
        };
        self.shared.sink.record(&Event::Invoke {
            op,
            at: at.unwrap_or_else(now_micros),
            kind,
        });
        Recorded {
            op,
            sink: self.shared.sink.clone(),
        }
    }

    async fn send(&self, call: Call<'_>) -> Answer {
        send(self.shared.client.addr, call.into_request()).await
    }

    fn value_id(&mut self) -> ValueId {
        ValueId {
            writer: self.id,
            seq: self.next_seq(),
        }
    }

    /// A new value of `len` bytes for `key`, written by a PutObject.
    fn object_value(&mut self, key: &str, len: usize) -> Value {
        let id = self.value_id();
        let bytes = generate(key.as_bytes(), id, len);
        let value = Value {
            key: key.to_owned(),
            id,
            etag: md5_hex(&bytes),
            bytes,
            part_etags: Vec::new(),
        };
        self.shared.register(&value);
        value
    }

    /// A new value of `len` bytes for `key`, to be uploaded in parts (a generation).
    pub fn generation(&mut self, key: &str, len: usize) -> Value {
        let id = self.value_id();
        let bytes = generate(key.as_bytes(), id, len);
        let mut value = Value {
            key: key.to_owned(),
            id,
            bytes,
            etag: String::new(),
            part_etags: Vec::new(),
        };
        value.part_etags = (1..=value.parts())
            .map(|n| md5_hex(&value.part(n)))
            .collect();
        let mut raw = Vec::new();
        for e in &value.part_etags {
            raw.extend((0..16).map(|i| u8::from_str_radix(&e[2 * i..2 * i + 2], 16).expect("hex")));
        }
        value.etag = format!("{}-{}", md5_hex(&raw), value.part_etags.len());
        self.shared.register(&value);
        value
    }

    /// PutObject of a fresh value of `len` bytes.
    pub async fn put_object(&mut self, key: &str, len: usize) {
        let value = self.object_value(key, len);
        let op = self.invoke(
            OpKind::Put {
                key: key.to_owned(),
                id: value.id,
                len: value.len(),
            },
            None,
        );
        let call = self
            .shared
            .client
            .call("PUT", &path(key))
            .body(value.bytes.clone());
        let answer = self.send(call).await;
        self.shared.tally.add("put", &answer);
        op.end(write_outcome(&answer, 200, OpResult::Put));
    }

    /// DeleteObject.
    pub async fn delete(&mut self, key: &str) {
        let op = self.invoke(
            OpKind::Delete {
                key: key.to_owned(),
            },
            None,
        );
        let answer = self
            .send(self.shared.client.call("DELETE", &path(key)))
            .await;
        self.shared.tally.add("delete", &answer);
        // S3 does not say whether there was an object (informational only for the checker).
        op.end(write_outcome(
            &answer,
            204,
            OpResult::Delete { found: false },
        ));
    }

    /// GetObject of the whole object.
    pub async fn get(&mut self, key: &str) {
        self.read(key, None).await;
    }

    /// GetObject of a `Range` (e.g. `bytes=0-99`). A range past the end (416) is recorded as a failed read: it
    /// says nothing of which value is there.
    pub async fn get_range(&mut self, key: &str, range: &str) {
        self.read(key, Some(range)).await;
    }

    /// GetObject, of `range` if any, recorded while gc with grace 0 is kept out.
    async fn read(&mut self, key: &str, range: Option<&str>) {
        let shared = Arc::clone(&self.shared);
        let _reading = shared.readers.read().await;
        let op = self.invoke(
            OpKind::Get {
                key: key.to_owned(),
            },
            None,
        );
        let call = shared.client.call("GET", &path(key));
        let Some(range) = range else {
            let answer = self.send(call).await;
            shared.tally.add("get", &answer);
            op.complete(read_outcome(&shared, key, &answer));
            return;
        };
        let answer = self.send(call.header("range", range)).await;
        shared.tally.add("get range", &answer);
        op.complete(
            range_outcome(&shared, key, &answer)
                .unwrap_or_else(|| failed("416 InvalidRange".into(), false)),
        );
    }

    /// CreateMultipartUpload.
    pub async fn create(&mut self, key: &str) -> Upload {
        let call = self
            .shared
            .client
            .call("POST", &path(key))
            .query("uploads", "");
        let answer = self.send(call).await;
        self.shared.tally.add("create", &answer);
        let reply = answer.unwrap_or_else(|e| panic!("create: {e}"));
        assert_eq!(reply.status, 200, "create: {}", reply.text());
        Upload {
            key: key.to_owned(),
            id: reply.xml("UploadId").pop().expect("upload id"),
            first_complete: None,
        }
    }

    /// UploadPart of part `number` of `value` (whose ETags the server must answer).
    pub async fn upload_part(&self, upload: &Upload, number: usize, value: &Value) -> Answer {
        let call = self
            .shared
            .client
            .call("PUT", &path(&upload.key))
            .query("partNumber", &number.to_string())
            .query("uploadId", &upload.id)
            .body(value.part(number));
        let answer = self.send(call).await;
        self.shared.tally.add("upload part", &answer);
        answer
    }

    /// UploadPart of part `number` of `value`, which must succeed with the part's ETag.
    pub async fn upload_part_ok(&self, upload: &Upload, number: usize, value: &Value) {
        let reply = self
            .upload_part(upload, number, value)
            .await
            .unwrap_or_else(|e| panic!("part {number}: {e}"));
        assert_eq!(reply.status, 200, "part {number}: {}", reply.text());
        assert_eq!(
            reply.header("etag").trim_matches('"'),
            value.part_etags[number - 1]
        );
    }

    /// Uploads every part of `value`; each must succeed.
    pub async fn upload_parts(&self, upload: &Upload, value: &Value) {
        for n in 1..=value.parts() {
            self.upload_part_ok(upload, n, value).await;
        }
    }

    /// UploadPart of part `number` of `value` with its body sent as the test feeds `rx`.
    pub fn upload_part_streamed(
        &self,
        upload: &Upload,
        number: usize,
        value: &Value,
        rx: mpsc::Receiver<Bytes>,
    ) -> tokio::task::JoinHandle<Answer> {
        let shared = Arc::clone(&self.shared);
        let (key, id, len) = (
            upload.key.clone(),
            upload.id.clone(),
            value.part(number).len(),
        );
        tokio::spawn(async move {
            let call = shared
                .client
                .call("PUT", &path(&key))
                .query("partNumber", &number.to_string())
                .query("uploadId", &id)
                .stream(rx, len as u64);
            let answer = send(shared.client.addr, call.into_request()).await;
            shared.tally.add("upload part", &answer);
            answer
        })
    }

    /// Records a CompleteMultipartUpload of `upload` listing `value`'s parts as a put of `value`, invoked at
    /// the upload's first complete.
    fn invoke_complete(&mut self, upload: &mut Upload, value: &Value) -> Recorded {
        let first = *upload.first_complete.get_or_insert_with(now_micros);
        self.invoke(
            OpKind::Put {
                key: upload.key.clone(),
                id: value.id,
                len: value.len(),
            },
            Some(first),
        )
    }

    fn complete_call(
        shared: &Shared,
        upload_key: &str,
        id: &str,
        value: &Value,
    ) -> http::Request<BoxBody<Bytes, Infallible>> {
        let parts: String = value
            .part_etags
            .iter()
            .enumerate()
            .map(|(i, e)| {
                format!(
                    "<Part><PartNumber>{}</PartNumber><ETag>\"{e}\"</ETag></Part>",
                    i + 1
                )
            })
            .collect();
        shared
            .client
            .call("POST", &path(upload_key))
            .query("uploadId", id)
            .body(format!(
                "<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>"
            ))
            .into_request()
    }

    /// CompleteMultipartUpload of `upload` listing `value`'s parts, recorded (and counted in the tally).
    pub async fn complete(&mut self, upload: &mut Upload, value: &Value) {
        self.spawn_complete(upload, value)
            .await
            .expect("complete task");
    }

    /// [`Actor::complete`] in a task of its own. Aborting the task drops the connection (the client goes
    /// away) and leaves the complete indeterminate.
    pub fn spawn_complete(
        &mut self,
        upload: &mut Upload,
        value: &Value,
    ) -> tokio::task::JoinHandle<()> {
        let op = self.invoke_complete(upload, value);
        let shared = Arc::clone(&self.shared);
        let request = Self::complete_call(&shared, &upload.key, &upload.id, value);
        let value = value.clone();
        tokio::spawn(async move {
            let answer = send(shared.client.addr, request).await;
            shared.tally.add("complete", &answer);
            let outcome = complete_outcome(&answer, &value);
            shared.tally.bump(match &outcome {
                Some(Outcome::Ok(_)) => "complete ok",
                Some(_) => "complete failed",
                None => "complete indeterminate",
            });
            op.end(outcome);
        })
    }

    /// AbortMultipartUpload (not an operation on a value: the checker sees its effect through the reads; the
    /// answer is counted in the tally).
    pub async fn abort(&self, upload: &Upload) {
        let call = self
            .shared
            .client
            .call("DELETE", &path(&upload.key))
            .query("uploadId", &upload.id);
        let answer = self.send(call).await;
        self.shared.tally.add("abort", &answer);
    }
}
