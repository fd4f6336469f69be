//! Bodies. A put's body is read as an [`AsyncRead`] ([`VerifyingReader`]) that hashes it as it streams and,
//! at its end, checks Content-MD5 and the `x-amz-checksum-*` values sent (in headers or in the `aws-chunked`
//! trailer): on a mismatch it fails with an I/O error instead of ending, so the store drops the put before its
//! commit and nothing is stored. Past its first MiB, a body is hashed on a thread of its own ([`Lane`]), beside
//! the store's write of the same bytes: MD5, which the ETag needs, runs at about 760 MB/s on one core ([`Md5`]),
//! slower than the store writes. A blob stream becomes a response body through [`BlobBody`]. An HTTP body is
//! watched as its frames pass (the request body's bytes and stalls, the response body's bytes and end) through
//! [`Watched`].

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::channel::mpsc;
use futures::stream::{BoxStream, Stream, StreamExt};
use http_body::{Body as HttpBody, Frame, SizeHint};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::stream::{ByteStream, RemainingLength};
use s3s::{S3Error, S3ErrorCode, S3Result, StdError, TrailingHeaders, s3_error};
use saltblob_core::BlobStream;
use tokio::io::{AsyncRead, ReadBuf};

use crate::md5::Md5;

/// A checksum algorithm of S3's `x-amz-checksum-*` family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl Algorithm {
    /// Every algorithm.
    pub(crate) const ALL: [Algorithm; 5] = [
        Algorithm::Crc32,
        Algorithm::Crc32c,
        Algorithm::Crc64Nvme,
        Algorithm::Sha1,
        Algorithm::Sha256,
    ];

    /// Its name in lowercase, as in `x-amz-checksum-<name>`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "crc32",
            Algorithm::Crc32c => "crc32c",
            Algorithm::Crc64Nvme => "crc64nvme",
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
        }
    }

    /// The algorithm S3 names `name` (any case; with or without the `x-amz-checksum-` prefix).
    pub(crate) fn parse(name: &str) -> Option<Self> {
        let name = name.trim().to_ascii_lowercase();
        let name = name.strip_prefix("x-amz-checksum-").unwrap_or(&name);
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    fn enable(self, hasher: &mut ChecksumHasher) {
        match self {
            Algorithm::Crc32 => hasher.crc32 = Some(Crc32::new()),
            Algorithm::Crc32c => hasher.crc32c = Some(Crc32c::new()),
            Algorithm::Crc64Nvme => hasher.crc64nvme = Some(Crc64Nvme::new()),
            Algorithm::Sha1 => hasher.sha1 = Some(Sha1::new()),
            Algorithm::Sha256 => hasher.sha256 = Some(Sha256::new()),
        }
    }

    fn take(self, sums: &mut s3s::dto::Checksum) -> Option<String> {
        match self {
            Algorithm::Crc32 => sums.checksum_crc32.take(),
            Algorithm::Crc32c => sums.checksum_crc32c.take(),
            Algorithm::Crc64Nvme => sums.checksum_crc64nvme.take(),
            Algorithm::Sha1 => sums.checksum_sha1.take(),
            Algorithm::Sha256 => sums.checksum_sha256.take(),
        }
    }
}

/// What a put's body must match, and which checksums to compute for it.
#[derive(Debug, Default)]
pub(crate) struct Expected {
    /// Content-MD5, decoded.
    pub md5: Option<[u8; 16]>,
    /// Checksums sent in headers (base64, as S3 writes them).
    pub checksums: Vec<(Algorithm, String)>,
    /// A checksum whose value comes in the `aws-chunked` trailer, with the handle s3s fills at the body's end.
    pub trailer: Option<(Algorithm, TrailingHeaders)>,
    /// Checksums to compute and store without a value to check (`x-amz-checksum-algorithm` alone; a copy's).
    pub computed: Vec<Algorithm>,
    /// The most bytes the body may hold (S3's 5 GiB for a single put); `None`: no limit.
    pub max_bytes: Option<u64>,
}

impl Expected {
    /// Decodes a Content-MD5 header.
    ///
    /// # Errors
    /// `InvalidDigest` when it is not the base64 of 16 bytes.
    pub(crate) fn with_content_md5(mut self, value: Option<&str>) -> S3Result<Self> {
        if let Some(value) = value {
            let bytes = base64_simd::STANDARD
                .decode_to_vec(value.trim())
                .ok()
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .ok_or_else(|| {
                    s3_error!(InvalidDigest, "The Content-MD5 you specified is not valid.")
                })?;
            self.md5 = Some(bytes);
        }
        Ok(self)
    }

    fn algorithms(&self) -> impl Iterator<Item = Algorithm> + '_ {
        self.checksums
            .iter()
            .map(|(a, _)| *a)
            .chain(self.trailer.as_ref().map(|(a, _)| *a))
            .chain(self.computed.iter().copied())
    }
}

/// What a body that verified was: its MD5 and the checksums computed (base64).
#[derive(Clone, Debug, Default)]
pub(crate) struct Verified {
    pub md5: [u8; 16],
    pub checksums: Vec<(Algorithm, String)>,
}

/// The S3 error that failed a body, shared with the put that reads it, so that the put reports it rather than
/// the store's I/O error.
pub(crate) type SharedOutcome = Arc<Mutex<Option<S3Error>>>;

/// What a [`VerifyingReader`] calls with what its body verified.
type OnVerified = Box<dyn FnOnce(&Verified) + Send>;

/// Bytes of a body hashed on the task that reads it before its hashing moves to a [`Lane`] thread: a small
/// body is hashed where it is read, without a thread's hand-over.
const INLINE_HASH_BYTES: u64 = 1 << 20;
/// Bytes handed to a lane's thread at once.
const LANE_BATCH_BYTES: usize = 1 << 20;
/// Batches queued for a lane's thread, at most: with [`LANE_BATCH_BYTES`], the most a body's hashing holds
/// behind its write (about 9 MiB) before the body is read further.
const LANE_QUEUE: usize = 8;

/// What a body is hashed with: its MD5 (the ETag) and the checksums it needs.
struct Hashes {
    md5: Md5,
    sums: ChecksumHasher,
}

impl Hashes {
    fn update(&mut self, bytes: &[u8]) {
        self.md5.update(bytes);
        self.sums.update(bytes);
    }
}

/// Where a body's bytes are hashed: on the task reading it, then, past [`INLINE_HASH_BYTES`], on a blocking
/// thread of its own that takes batches of [`LANE_BATCH_BYTES`] through a channel of [`LANE_QUEUE`] (the body is
/// read further only when there is room in it). The bytes are shared with the store's write, never copied.
enum Lane {
    /// Hashed where the body is read (boxed: the checksums' states are over a KiB).
    Inline(Box<Hashes>),
    /// Hashed on a thread.
    Thread {
        /// Where full batches go; `None` once closed at the body's end.
        batches: Option<mpsc::Sender<Vec<Bytes>>>,
        /// The batch being filled, and its bytes.
        batch: Vec<Bytes>,
        batch_bytes: usize,
        /// The thread, which gives the hashes back once the channel closes.
        hashed: tokio::task::JoinHandle<Box<Hashes>>,
    },
    /// The hashes were taken (the body ended).
    Taken,
}

impl Lane {
    /// Hashes `bytes`, the body's bytes up to `read` in all: where the lane is, moving it to a thread once the
    /// body passes [`INLINE_HASH_BYTES`] (in a Tokio runtime only).
    fn feed(&mut self, bytes: &Bytes, read: u64) {
        match self {
            Lane::Inline(hashes) => {
                hashes.update(bytes);
                if read >= INLINE_HASH_BYTES && tokio::runtime::Handle::try_current().is_ok() {
                    self.move_to_thread();
                }
            }
            Lane::Thread {
                batch, batch_bytes, ..
            } => {
                *batch_bytes += bytes.len();
                batch.push(bytes.clone());
            }
            Lane::Taken => {}
        }
    }

    /// Moves the hashing of an inline lane to a blocking thread.
    fn move_to_thread(&mut self) {
        let Lane::Inline(mut hashes) = std::mem::replace(self, Lane::Taken) else {
            return;
        };
        let (batches, mut queued) = mpsc::channel::<Vec<Bytes>>(LANE_QUEUE);
        let hashed = tokio::task::spawn_blocking(move || {
            while let Some(batch) = futures::executor::block_on(queued.next()) {
                for bytes in &batch {
                    hashes.update(bytes);
                }
            }
            hashes
        });
        *self = Lane::Thread {
            batches: Some(batches),
            batch: Vec::new(),
            batch_bytes: 0,
            hashed,
        };
    }

    /// Hands the batch being filled to the thread once it holds `at_least` bytes (and any bytes at all), waiting
    /// for room in the channel; ready at once when there is nothing to hand over.
    fn poll_hand_over(
        &mut self,
        cx: &mut Context<'_>,
        at_least: usize,
    ) -> Poll<Result<(), String>> {
        let Lane::Thread {
            batches: Some(batches),
            batch,
            batch_bytes,
            ..
        } = self
        else {
            return Poll::Ready(Ok(()));
        };
        if batch.is_empty() || *batch_bytes < at_least {
            return Poll::Ready(Ok(()));
        }
        let lost = |_| "the body's hashing thread stopped".to_owned();
        ready!(batches.poll_ready(cx)).map_err(lost)?;
        batches.start_send(std::mem::take(batch)).map_err(lost)?;
        *batch_bytes = 0;
        Poll::Ready(Ok(()))
    }

    /// The hashes of the whole body, once every byte fed has been hashed.
    fn poll_hashes(&mut self, cx: &mut Context<'_>) -> Poll<Result<Hashes, String>> {
        ready!(self.poll_hand_over(cx, 0))?;
        match std::mem::replace(self, Lane::Taken) {
            Lane::Inline(hashes) => Poll::Ready(Ok(*hashes)),
            // Dropping the sender closes the channel: the thread's loop ends once it has hashed every batch.
            Lane::Thread { mut hashed, .. } => match Pin::new(&mut hashed).poll(cx) {
                Poll::Ready(hashes) => Poll::Ready(
                    hashes
                        .map(|h| *h)
                        .map_err(|e| format!("the body's hashing thread failed: {e}")),
                ),
                Poll::Pending => {
                    *self = Lane::Thread {
                        batches: None,
                        batch: Vec::new(),
                        batch_bytes: 0,
                        hashed,
                    };
                    Poll::Pending
                }
            },
            Lane::Taken => Poll::Ready(Err("the body's hashes were already taken".to_owned())),
        }
    }
}

/// A body stream as an [`AsyncRead`] that hashes it and checks [`Expected`] at its end (see the module doc).
pub(crate) struct VerifyingReader {
    stream: BoxStream<'static, S3Result<Bytes>>,
    pending: Bytes,
    lane: Lane,
    /// Set once the stream has ended: the lane's hashes are then awaited.
    stream_ended: bool,
    expected: Expected,
    outcome: SharedOutcome,
    /// Called with what the body verified, before the reader reports its end.
    on_verified: Option<OnVerified>,
    /// Set once the stream has ended or failed: the result every later read repeats.
    ended: Option<Result<(), String>>,
    /// Bytes read so far.
    read: u64,
}

impl VerifyingReader {
    /// A reader of `stream`; `outcome` says, once it has ended, how.
    pub(crate) fn new(
        stream: BoxStream<'static, S3Result<Bytes>>,
        expected: Expected,
        outcome: SharedOutcome,
    ) -> Self {
        let mut sums = ChecksumHasher::default();
        for algorithm in expected.algorithms() {
            algorithm.enable(&mut sums);
        }
        Self {
            stream,
            pending: Bytes::new(),
            lane: Lane::Inline(Box::new(Hashes {
                md5: Md5::new(),
                sums,
            })),
            stream_ended: false,
            expected,
            outcome,
            on_verified: None,
            ended: None,
            read: 0,
        }
    }

    /// Calls `f` with what the body verified, before the end of the body is reported (so that what it records
    /// is in place before the store commits the put).
    pub(crate) fn on_verified(mut self, f: impl FnOnce(&Verified) + Send + 'static) -> Self {
        self.on_verified = Some(Box::new(f));
        self
    }

    fn fail(&mut self, error: S3Error) -> Result<(), String> {
        let text = format!("request body refused: {}", error.message().unwrap_or(""));
        if let Ok(mut outcome) = self.outcome.lock() {
            *outcome = Some(error);
        }
        Err(text)
    }

    /// The body has ended and was hashed (`hashes`): checks it against what was expected.
    fn finish(&mut self, hashes: Hashes) -> Result<(), String> {
        let md5 = hashes.md5.finalize();
        if self.expected.md5.is_some_and(|sent| sent != md5) {
            return self.fail(s3_error!(
                BadDigest,
                "The Content-MD5 you specified did not match what we received."
            ));
        }
        let mut sums = hashes.sums.finalize();
        let mut computed: Vec<(Algorithm, String)> = Vec::new();
        for algorithm in self.expected.algorithms() {
            if let Some(value) = algorithm.take(&mut sums) {
                computed.push((algorithm, value));
            }
        }
        let trailer = self.expected.trailer.as_ref().map(|(algorithm, handle)| {
            let header = format!("x-amz-checksum-{}", algorithm.name());
            let sent = handle
                .read(|h| {
                    h.get(&header)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                })
                .flatten();
            (*algorithm, sent)
        });
        let trailer = match trailer {
            Some((algorithm, Some(sent))) => Some((algorithm, sent)),
            Some((algorithm, None)) => {
                return self.fail(s3_error!(
                    InvalidRequest,
                    "x-amz-trailer announced x-amz-checksum-{} but the trailer did not hold it",
                    algorithm.name()
                ));
            }
            None => None,
        };
        for (algorithm, sent) in self.expected.checksums.iter().chain(trailer.iter()) {
            let got = computed
                .iter()
                .find(|(a, _)| a == algorithm)
                .map(|(_, v)| v);
            if got.map(String::as_str) != Some(sent.trim()) {
                return self.fail(s3_error!(
                    BadDigest,
                    "The {} you specified did not match the calculated checksum.",
                    algorithm.name().to_ascii_uppercase()
                ));
            }
        }
        let verified = Verified {
            md5,
            checksums: computed,
        };
        if let Some(f) = self.on_verified.take() {
            f(&verified);
        }
        Ok(())
    }
}

impl AsyncRead for VerifyingReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if let Some(ended) = &this.ended {
                return Poll::Ready(ended.clone().map_err(io::Error::other));
            }
            if this.stream_ended {
                let ended = match ready!(this.lane.poll_hashes(cx)) {
                    Ok(hashes) => this.finish(hashes),
                    Err(problem) => Err(problem),
                };
                this.ended = Some(ended);
                continue;
            }
            // Room in the lane before more of the body is read: its hashing bounds how far the write runs ahead.
            if let Err(problem) = ready!(this.lane.poll_hand_over(cx, LANE_BATCH_BYTES)) {
                this.ended = Some(Err(problem));
                continue;
            }
            let ended = match ready!(this.stream.poll_next_unpin(cx)) {
                Some(Ok(bytes))
                    if this
                        .expected
                        .max_bytes
                        .is_some_and(|max| this.read.saturating_add(bytes.len() as u64) > max) =>
                {
                    this.fail(entity_too_large())
                }
                Some(Ok(bytes)) => {
                    this.read += bytes.len() as u64;
                    this.lane.feed(&bytes, this.read);
                    this.pending = bytes;
                    continue;
                }
                Some(Err(error)) => this.fail(error),
                None => {
                    this.stream_ended = true;
                    continue;
                }
            };
            this.ended = Some(ended);
        }
    }
}

/// `EntityTooLarge` (400): a body over the largest object a request may put.
pub(crate) fn entity_too_large() -> S3Error {
    s3_error!(
        EntityTooLarge,
        "Your proposed upload exceeds the maximum allowed object size."
    )
}

/// The S3 error for a request body that could not be read: a bad `aws-chunked` signature or payload hash
/// (s3s's stream errors, told apart by their text as s3s does not export their types), or a client that went
/// away.
pub(crate) fn body_error(error: StdError) -> S3Error {
    let text = error.to_string();
    tracing::debug!(error = %text, "request body failed");
    let message = "The request body could not be read completely and correctly.";
    if text.contains("Sha256Mismatch") {
        // Not among s3s's codes: S3's own, with its status.
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            message,
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return e;
    }
    let code = if text.contains("SignatureMismatch") {
        S3ErrorCode::SignatureDoesNotMatch
    } else if text.contains("FormatError") || text.contains("TooLarge") {
        S3ErrorCode::InvalidRequest
    } else {
        S3ErrorCode::IncompleteBody
    };
    S3Error::with_message(code, message)
}

/// A blob stream as a response body of known length, for s3s (which wants a `Sync` stream: the stream sits
/// behind a mutex that is only ever reached through `&mut`, so never locked).
pub(crate) struct BlobBody {
    stream: Mutex<BlobStream>,
    remaining: u64,
}

impl BlobBody {
    pub(crate) fn new(stream: BlobStream) -> Self {
        let remaining = stream.range.end - stream.range.start;
        Self {
            stream: Mutex::new(stream),
            remaining,
        }
    }
}

impl Stream for BlobBody {
    type Item = Result<Bytes, StdError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let stream = this
            .stream
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let item = ready!(stream.poll_next_unpin(cx));
        Poll::Ready(item.map(|r| match r {
            Ok(bytes) => {
                this.remaining = this.remaining.saturating_sub(bytes.len() as u64);
                Ok(bytes)
            }
            Err(e) => {
                tracing::error!(error = %e, "reading a blob for a response failed");
                Err(Box::new(e) as StdError)
            }
        }))
    }
}

impl ByteStream for BlobBody {
    fn remaining_length(&self) -> RemainingLength {
        match usize::try_from(self.remaining) {
            Ok(n) => RemainingLength::new_exact(n),
            Err(_) => RemainingLength::unknown(),
        }
    }
}

/// What passed through a [`Watched`] body at one poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Passed {
    /// A frame, with this many bytes of data (0 for trailers).
    Frame(u64),
    /// The inner body failed.
    Failed,
    /// The inner body ended.
    End,
}

/// What watches the frames of a [`Watched`] body.
pub(crate) trait Watcher: Unpin {
    /// The inner body has no frame yet: `Some(error)` fails the body with it; by default it waits.
    fn waiting(&mut self, _cx: &mut Context<'_>) -> Option<StdError> {
        None
    }

    /// `passed` came through; `end_stream`: the inner body says it has ended since.
    fn passed(&mut self, passed: Passed, end_stream: bool);

    /// The body is dropped; `end_stream`: the inner body had ended.
    fn dropped(&mut self, _end_stream: bool) {}
}

/// An HTTP body passed on unchanged, each poll shown to its [`Watcher`].
pub(crate) struct Watched<B: HttpBody, W: Watcher> {
    inner: Pin<Box<B>>,
    watcher: W,
}

impl<B: HttpBody, W: Watcher> Watched<B, W> {
    pub(crate) fn new(inner: B, watcher: W) -> Self {
        Self {
            inner: Box::pin(inner),
            watcher,
        }
    }
}

impl<B, W> HttpBody for Watched<B, W>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<StdError>,
    W: Watcher,
{
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let this = self.get_mut();
        let frame = match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => frame.map(|f| f.map_err(Into::into)),
            Poll::Pending => {
                return match this.watcher.waiting(cx) {
                    Some(error) => Poll::Ready(Some(Err(error))),
                    None => Poll::Pending,
                };
            }
        };
        let passed = match &frame {
            Some(Ok(frame)) => Passed::Frame(frame.data_ref().map_or(0, |d| d.len() as u64)),
            Some(Err(_)) => Passed::Failed,
            None => Passed::End,
        };
        this.watcher.passed(passed, this.inner.is_end_stream());
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: HttpBody, W: Watcher> Drop for Watched<B, W> {
    fn drop(&mut self) {
        let end_stream = self.inner.is_end_stream();
        self.watcher.dropped(end_stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn reader(parts: &[&'static [u8]], expected: Expected) -> (VerifyingReader, SharedOutcome) {
        let parts: Vec<S3Result<Bytes>> = parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        let outcome = SharedOutcome::default();
        let r = VerifyingReader::new(
            futures::stream::iter(parts).boxed(),
            expected,
            outcome.clone(),
        );
        (r, outcome)
    }

    /// MD5 of "hello world", and its CRC32 (base64), as S3 writes them.
    const HELLO_MD5: &str = "XrY7u+Ae7tCTyyK7j1rNww==";
    const HELLO_CRC32: &str = "DUoRhQ==";

    #[tokio::test]
    async fn a_matching_body_verifies_and_a_mismatch_fails_at_the_end() {
        let expected = Expected {
            checksums: vec![(Algorithm::Crc32, HELLO_CRC32.to_owned())],
            ..Expected::default()
        }
        .with_content_md5(Some(HELLO_MD5))
        .expect("valid md5");
        let seen = Arc::new(Mutex::new(None));
        let (r, _) = reader(&[b"hello ", b"world"], expected);
        let seen_by_reader = seen.clone();
        let mut r = r.on_verified(move |v| *seen_by_reader.lock().expect("lock") = Some(v.clone()));
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.expect("verified");
        assert_eq!(out, b"hello world");
        let verified = seen.lock().expect("lock").clone().expect("verified");
        assert_eq!(
            base64_simd::STANDARD.encode_to_string(verified.md5),
            HELLO_MD5
        );
        assert_eq!(
            verified.checksums,
            [(Algorithm::Crc32, HELLO_CRC32.to_owned())]
        );

        for expected in [
            Expected::default()
                .with_content_md5(Some(HELLO_MD5))
                .expect("md5"),
            Expected {
                checksums: vec![(Algorithm::Crc32, HELLO_CRC32.to_owned())],
                ..Expected::default()
            },
        ] {
            let (mut r, outcome) = reader(&[b"hello ", b"world!"], expected);
            let mut out = Vec::new();
            assert!(r.read_to_end(&mut out).await.is_err());
            let failure = outcome.lock().expect("lock").take().expect("failure");
            assert_eq!(failure.code(), &S3ErrorCode::BadDigest);
        }
        let err = Expected::default()
            .with_content_md5(Some("bm90IDE2IGJ5dGVz"))
            .expect_err("not 16 bytes");
        assert_eq!(err.code(), &S3ErrorCode::InvalidDigest);
    }

    /// `body` as frames of 64 KiB.
    fn frames_of(body: &[u8]) -> Vec<S3Result<Bytes>> {
        body.chunks(64 << 10)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect()
    }

    /// `len` bytes of a pattern, and the same as frames of 64 KiB.
    fn patterned(len: usize) -> (Vec<u8>, Vec<S3Result<Bytes>>) {
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let frames = frames_of(&body);
        (body, frames)
    }

    /// A body past [`INLINE_HASH_BYTES`] is hashed on its lane's thread, every byte in order: the same MD5
    /// (against the pure-Rust implementation) and CRC32C as hashed at once; a mismatch found there still fails
    /// the body at its end, before the store sees its end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_body_is_hashed_on_a_thread_and_verified() {
        let (body, frames) = patterned(5 * LANE_BATCH_BYTES + 12_345);
        let mut md5 = s3s::crypto::Md5::new();
        md5.update(&body);
        let md5 = md5.finalize();
        let mut crc = ChecksumHasher::default();
        Algorithm::Crc32c.enable(&mut crc);
        crc.update(&body);
        let crc = crc.finalize().checksum_crc32c.expect("computed");
        let expected = || Expected {
            md5: Some(md5),
            checksums: vec![(Algorithm::Crc32c, crc.clone())],
            ..Expected::default()
        };

        let outcome = SharedOutcome::default();
        let seen = Arc::new(Mutex::new(None));
        let seen_by_reader = seen.clone();
        let mut r = VerifyingReader::new(
            futures::stream::iter(frames).boxed(),
            expected(),
            outcome.clone(),
        )
        .on_verified(move |v| *seen_by_reader.lock().expect("lock") = Some(v.clone()));
        let mut out = vec![0u8; 2 << 20];
        r.read_exact(&mut out).await.expect("first bytes");
        assert!(
            matches!(r.lane, Lane::Thread { .. }),
            "hashed on a thread by now"
        );
        r.read_to_end(&mut out).await.expect("verified");
        assert!(out == body, "the body passes unchanged");
        let verified = seen.lock().expect("lock").clone().expect("verified");
        assert_eq!(verified.md5, md5);
        assert_eq!(verified.checksums, [(Algorithm::Crc32c, crc.clone())]);

        let mut body = body;
        *body.last_mut().expect("not empty") ^= 1;
        let frames = frames_of(&body);
        let outcome = SharedOutcome::default();
        let mut r = VerifyingReader::new(
            futures::stream::iter(frames).boxed(),
            expected(),
            outcome.clone(),
        );
        let mut out = Vec::new();
        assert!(
            r.read_to_end(&mut out).await.is_err(),
            "a changed byte fails"
        );
        let failure = outcome.lock().expect("lock").take().expect("failure");
        assert_eq!(failure.code(), &S3ErrorCode::BadDigest);
    }

    /// A body dropped midway (its client gone) stops its lane's thread: closing the channel ends it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_body_stops_its_hashing_thread() {
        let (_, frames) = patterned(4 * LANE_BATCH_BYTES);
        let (mut r, _) = {
            let outcome = SharedOutcome::default();
            let r = VerifyingReader::new(
                futures::stream::iter(frames)
                    .chain(futures::stream::pending())
                    .boxed(),
                Expected::default(),
                outcome.clone(),
            );
            (r, outcome)
        };
        let mut out = vec![0u8; 3 << 20];
        r.read_exact(&mut out).await.expect("first bytes");
        let lane = std::mem::replace(&mut r.lane, Lane::Taken);
        drop(r);
        let Lane::Thread {
            batches, hashed, ..
        } = lane
        else {
            panic!("hashed on a thread by now");
        };
        drop(batches);
        tokio::time::timeout(std::time::Duration::from_secs(30), hashed)
            .await
            .expect("the thread ends once its channel closes")
            .expect("the thread did not panic");
    }

    /// A body of unknown length that runs past its limit fails with `EntityTooLarge` as soon as it does, before
    /// its end (the store then drops the put); one at the limit reads through.
    #[tokio::test]
    async fn a_body_over_its_limit_fails_as_it_passes_it() {
        let limited = |max| Expected {
            max_bytes: Some(max),
            ..Expected::default()
        };
        let (mut r, _) = reader(&[b"hello ", b"world"], limited(11));
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.expect("at the limit");
        assert_eq!(out, b"hello world");

        let (mut r, outcome) = reader(&[b"hello ", b"world", b"never read"], limited(10));
        let mut out = Vec::new();
        assert!(r.read_to_end(&mut out).await.is_err());
        assert_eq!(out, b"hello ", "nothing past the limit is handed on");
        let failure = outcome.lock().expect("lock").take().expect("failure");
        assert_eq!(failure.code(), &S3ErrorCode::EntityTooLarge);
    }
}
