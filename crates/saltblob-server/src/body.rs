//! Bodies. A put's body is read as an [`AsyncRead`] ([`VerifyingReader`]) that hashes it as it streams and,
//! at its end, checks Content-MD5 and the `x-amz-checksum-*` values sent (in headers or in the `aws-chunked`
//! trailer): on a mismatch it fails with an I/O error instead of ending, so the store drops the put before its
//! commit and nothing is stored. A blob stream becomes a response body through [`BlobBody`]. An HTTP body is
//! watched as its frames pass (the request body's bytes and stalls, the response body's bytes and end) through
//! [`Watched`].

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use http_body::{Body as HttpBody, Frame, SizeHint};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Md5, Sha1, Sha256};
use s3s::stream::{ByteStream, RemainingLength};
use s3s::{S3Error, S3ErrorCode, S3Result, StdError, TrailingHeaders, s3_error};
use saltblob_core::BlobStream;
use tokio::io::{AsyncRead, ReadBuf};

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

/// A body stream as an [`AsyncRead`] that hashes it and checks [`Expected`] at its end (see the module doc).
pub(crate) struct VerifyingReader {
    stream: BoxStream<'static, S3Result<Bytes>>,
    pending: Bytes,
    md5: Option<Md5>,
    hasher: ChecksumHasher,
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
        let mut hasher = ChecksumHasher::default();
        for algorithm in expected.algorithms() {
            algorithm.enable(&mut hasher);
        }
        Self {
            stream,
            pending: Bytes::new(),
            md5: Some(Md5::new()),
            hasher,
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

    /// The body has ended: checks it against what was expected.
    fn finish(&mut self) -> Result<(), String> {
        let md5 = self.md5.take().map(Md5::finalize).unwrap_or_default();
        if self.expected.md5.is_some_and(|sent| sent != md5) {
            return self.fail(s3_error!(
                BadDigest,
                "The Content-MD5 you specified did not match what we received."
            ));
        }
        let mut sums = std::mem::take(&mut self.hasher).finalize();
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
                    if let Some(md5) = &mut this.md5 {
                        md5.update(&bytes);
                    }
                    this.hasher.update(&bytes);
                    this.pending = bytes;
                    continue;
                }
                Some(Err(error)) => this.fail(error),
                None => this.finish(),
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
