//! `aws-chunked` request bodies, framed before s3s decodes them so that a client-declared chunk size never
//! decides how much memory a request holds. s3s 0.14 collects each chunk whole before yielding it (it must, for
//! a signed chunk, whose signature covers the whole chunk), and the size is the client's choice.
//!
//! [`Reframe`] reads the body's framing as it streams:
//! - an **unsigned** chunk (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, no `chunk-signature`) is re-framed into
//!   chunks of what has arrived, at most [`REFRAME_MAX`] each, so s3s never holds more than that of it;
//! - a **signed** chunk (a `chunk-signature`, the `STREAMING-AWS4-HMAC-SHA256-PAYLOAD*` payloads) passes
//!   unchanged for s3s to verify, but one declared larger than [`MAX_SIGNED_CHUNK`] fails the request at its
//!   header (`400 InvalidRequest`), before any of its bytes is buffered;
//! - the final (zero-length) chunk and the trailer after it pass unchanged; a body that ends before its final
//!   chunk fails (`400 IncompleteBody`; s3s would take it as complete), and so does a framing error in an
//!   unsigned body (`400 InvalidRequest`).
//!
//! A failure is recorded in the request's [`Fault`], whose error then replaces whatever the operation answered
//! (see `handler.rs`). The chunk headers that carry a `chunk-signature` are counted for the access log
//! (`chunk_signatures`), which so shows that a request's body came in signed chunks.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::refusal::Refusal;

/// Largest signed chunk accepted, in bytes (16 MiB). SDKs sign chunks of 64 KiB to 1 MiB.
pub const MAX_SIGNED_CHUNK: u64 = 16 << 20;
/// Largest chunk an unsigned chunk is re-framed into, in bytes (1 MiB).
pub const REFRAME_MAX: usize = 1 << 20;
/// Longest chunk header line, as s3s reads it.
const MAX_HEADER_LINE: usize = 1024;

/// A request's failure found while its body streamed (a chunk refused, a stalled client): set once, by the body
/// wrappers, read by the handler when the operation has answered.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fault(Arc<Mutex<Option<Refusal>>>);

impl Fault {
    /// Records `refusal` (the first one recorded wins).
    pub(crate) fn set(&self, refusal: Refusal) {
        if let Ok(mut slot) = self.0.lock()
            && slot.is_none()
        {
            *slot = Some(refusal);
        }
    }

    /// The failure recorded, if any.
    pub(crate) fn take(&self) -> Option<Refusal> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// The error a body wrapper ends the body with; its [`Fault`] holds the S3 error.
#[derive(Debug)]
pub(crate) struct BodyFailed(pub &'static str);

impl std::fmt::Display for BodyFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for BodyFailed {}

/// How a request's `aws-chunked` body is signed, from its `x-amz-content-sha256`; `None` when the body is not
/// `aws-chunked` (s3s decodes only these payloads).
pub(crate) fn mode(headers: &HeaderMap) -> Option<Mode> {
    let value = headers.get("x-amz-content-sha256")?.to_str().ok()?.trim();
    match value {
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => Some(Mode::Unsigned),
        v if v.starts_with("STREAMING-") => Some(Mode::Signed),
        _ => None,
    }
}

/// How a request's body is sent, from its `x-amz-content-sha256`, as the access log names it (`payload`): the
/// header's value when it is one of the fixed values of S3's protocol (`UNSIGNED-PAYLOAD` and the `STREAMING-*`
/// payloads), `sha256` for a hex SHA-256 of the body (a signed payload), `-` without the header and `other` for
/// anything else (never a client's text, which the log does not repeat).
pub(crate) fn payload_name(headers: &HeaderMap) -> &'static str {
    const FIXED: [&str; 6] = [
        "UNSIGNED-PAYLOAD",
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
    ];
    let Some(value) = headers.get("x-amz-content-sha256") else {
        return "-";
    };
    let value = value.as_bytes();
    if let Some(name) = FIXED.iter().find(|name| name.as_bytes() == value) {
        return name;
    }
    if value.len() == 64 && value.iter().all(u8::is_ascii_hexdigit) {
        "sha256"
    } else {
        "other"
    }
}

/// Whether an `aws-chunked` body's chunks carry signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Signed,
    Unsigned,
}

/// Where the framing is.
#[derive(Debug)]
enum State {
    /// Reading a chunk header line (kept until its `\n`).
    Header(BytesMut),
    /// Passing `remaining` bytes of a signed chunk (its data and the CRLF after it) unchanged.
    Passing(u64),
    /// Re-framing `remaining` bytes of an unsigned chunk's data.
    Reframing(u64),
    /// Expecting the CRLF after an unsigned chunk's data: how much of it has been seen.
    DataEnd(usize),
    /// After the final chunk: the trailer, passed unchanged.
    Trailer,
    /// Failed or ended.
    Done,
}

/// An `aws-chunked` body framed as the module says.
pub(crate) struct Reframe<B> {
    inner: Pin<Box<B>>,
    mode: Mode,
    state: State,
    out: VecDeque<Bytes>,
    fault: Fault,
    /// Chunk headers seen with a `chunk-signature` (the final chunk's included).
    signatures: Arc<AtomicU64>,
}

impl<B> Reframe<B> {
    /// Frames `inner`; every chunk header with a `chunk-signature` adds one to `signatures`.
    pub(crate) fn new(inner: B, mode: Mode, fault: Fault, signatures: Arc<AtomicU64>) -> Self {
        Self {
            inner: Box::pin(inner),
            mode,
            state: State::Header(BytesMut::new()),
            out: VecDeque::new(),
            fault,
            signatures,
        }
    }

    fn fail(&mut self, refusal: Refusal, why: &'static str) -> BodyFailed {
        self.fault.set(refusal);
        self.state = State::Done;
        self.out.clear();
        BodyFailed(why)
    }

    fn malformed(&mut self) -> BodyFailed {
        self.fail(
            Refusal::new(
                "InvalidRequest",
                StatusCode::BAD_REQUEST,
                "The aws-chunked request body is malformed.",
            ),
            "malformed aws-chunked body",
        )
    }

    /// Frames `data`, as it arrived, into `self.out`.
    fn feed(&mut self, mut data: Bytes) -> Result<(), BodyFailed> {
        while !data.is_empty() {
            match &mut self.state {
                State::Header(line) => {
                    let Some(end) = data.iter().position(|b| *b == b'\n') else {
                        line.extend_from_slice(&data);
                        if line.len() > MAX_HEADER_LINE {
                            return Err(self.malformed());
                        }
                        return Ok(());
                    };
                    line.extend_from_slice(&data.split_to(end + 1));
                    if line.len() > MAX_HEADER_LINE {
                        return Err(self.malformed());
                    }
                    let line = std::mem::take(line).freeze();
                    self.header(line)?;
                }
                State::Passing(remaining) => {
                    let n = usize::try_from(*remaining)
                        .unwrap_or(usize::MAX)
                        .min(data.len());
                    *remaining -= n as u64;
                    if *remaining == 0 {
                        self.state = State::Header(BytesMut::new());
                    }
                    self.out.push_back(data.split_to(n));
                }
                State::Reframing(remaining) => {
                    let n = usize::try_from(*remaining)
                        .unwrap_or(usize::MAX)
                        .min(data.len())
                        .min(REFRAME_MAX);
                    *remaining -= n as u64;
                    if *remaining == 0 {
                        self.state = State::DataEnd(0);
                    }
                    self.out
                        .push_back(Bytes::from(format!("{n:x}\r\n").into_bytes()));
                    self.out.push_back(data.split_to(n));
                    self.out.push_back(Bytes::from_static(b"\r\n"));
                }
                State::DataEnd(seen) => {
                    if data[0] != b"\r\n"[*seen] {
                        return Err(self.malformed());
                    }
                    let _ = data.split_to(1);
                    *seen += 1;
                    if *seen == 2 {
                        self.state = State::Header(BytesMut::new());
                    }
                }
                State::Trailer => {
                    self.out.push_back(std::mem::take(&mut data));
                }
                State::Done => return Ok(()),
            }
        }
        Ok(())
    }

    /// Acts on one chunk header `line` (with its `\n`).
    fn header(&mut self, line: Bytes) -> Result<(), BodyFailed> {
        let Some(text) = line.strip_suffix(b"\r\n") else {
            return Err(self.malformed());
        };
        let size_end = text.iter().position(|b| *b == b';').unwrap_or(text.len());
        let (size, extension) = text.split_at(size_end);
        // s3s reads at most 8 hex digits of a size; anything else is not a size it would read the same way.
        let size = match std::str::from_utf8(size) {
            Ok(s) if (1..=8).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
                u64::from_str_radix(s, 16).map_err(|_| self.malformed())?
            }
            _ => return Err(self.malformed()),
        };
        if extension.starts_with(b";chunk-signature=") {
            self.signatures.fetch_add(1, Ordering::Relaxed);
        }
        if size == 0 {
            self.out.push_back(line);
            self.state = State::Trailer;
        } else if self.mode == Mode::Signed || !extension.is_empty() {
            if size > MAX_SIGNED_CHUNK {
                return Err(self.fail(
                    Refusal::new(
                        "InvalidRequest",
                        StatusCode::BAD_REQUEST,
                        format!(
                            "An aws-chunked chunk of {size} bytes was declared; signed chunks larger than \
                             {MAX_SIGNED_CHUNK} bytes (16 MiB) are refused. Send smaller chunks."
                        ),
                    ),
                    "aws-chunked chunk too large",
                ));
            }
            self.out.push_back(line);
            self.state = State::Passing(size + 2);
        } else {
            self.state = State::Reframing(size);
        }
        Ok(())
    }

    /// The body ended: complete only after the final chunk.
    fn end(&mut self) -> Result<(), BodyFailed> {
        match self.state {
            State::Trailer | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(self.fail(
                Refusal::new(
                    "IncompleteBody",
                    StatusCode::BAD_REQUEST,
                    "The aws-chunked request body ended before its final (zero-length) chunk.",
                ),
                "aws-chunked body without its final chunk",
            )),
        }
    }
}

impl<B> HttpBody for Reframe<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            if let Some(piece) = self.out.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            if matches!(self.state, State::Done) {
                return Poll::Ready(None);
            }
            let frame = match self.inner.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => match self.end() {
                    Ok(()) => continue,
                    Err(e) => return Poll::Ready(Some(Err(Box::new(e)))),
                },
                Poll::Ready(Some(Err(e))) => {
                    self.state = State::Done;
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            // Trailers arrive inside the aws-chunked body, not as HTTP trailers: other frames are dropped.
            if let Ok(data) = frame.into_data()
                && let Err(e) = self.feed(data)
            {
                return Poll::Ready(Some(Err(Box::new(e))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done) && self.out.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    type Piece = Result<Frame<Bytes>, std::convert::Infallible>;

    /// The output of `Reframe` over `pieces` in `mode`: the bytes, or the fault's code.
    async fn run(mode: Mode, pieces: Vec<&'static [u8]>) -> Result<Vec<u8>, String> {
        run_counted(mode, pieces).await.0
    }

    /// `run`, and the chunk signatures `Reframe` counted.
    async fn run_counted(mode: Mode, pieces: Vec<&'static [u8]>) -> (Result<Vec<u8>, String>, u64) {
        let stream = futures::stream::iter(
            pieces
                .into_iter()
                .map(|p| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(p))))
                .collect::<Vec<Piece>>(),
        );
        let fault = Fault::default();
        let signatures = Arc::new(AtomicU64::new(0));
        let body = Reframe::new(
            StreamBody::new(stream),
            mode,
            fault.clone(),
            Arc::clone(&signatures),
        );
        let out = match body.collect().await {
            Ok(collected) => Ok(collected.to_bytes().to_vec()),
            Err(_) => Err(fault.take().map(|r| r.code.to_owned()).unwrap_or_default()),
        };
        (out, signatures.load(Ordering::Relaxed))
    }

    /// Every chunk header with a `chunk-signature` is counted, the final chunk's included; unsigned chunks are not.
    #[tokio::test]
    async fn chunk_signatures_are_counted() {
        let sig = "0".repeat(64);
        let signed: &'static [u8] = Box::leak(
            format!(
                "3;chunk-signature={sig}\r\nabc\r\n2;chunk-signature={sig}\r\nde\r\n0;chunk-signature={sig}\r\n\r\n"
            )
            .into_bytes()
            .into_boxed_slice(),
        );
        let (out, count) = run_counted(Mode::Signed, vec![signed]).await;
        assert!(out.is_ok(), "{out:?}");
        assert_eq!(count, 3);
        let (out, count) = run_counted(
            Mode::Unsigned,
            vec![b"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n"],
        )
        .await;
        assert!(out.is_ok(), "{out:?}");
        assert_eq!(count, 0);
    }

    /// The access log's `payload`: S3's fixed names as sent, a body hash as `sha256`, never a client's own text.
    #[test]
    fn payload_names() {
        let name = |value: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(v) = value {
                headers.insert(
                    "x-amz-content-sha256",
                    http::HeaderValue::from_str(v).expect("header"),
                );
            }
            payload_name(&headers)
        };
        assert_eq!(name(None), "-");
        assert_eq!(
            name(Some("STREAMING-AWS4-HMAC-SHA256-PAYLOAD")),
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
        );
        assert_eq!(
            name(Some("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")),
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
        );
        assert_eq!(name(Some("UNSIGNED-PAYLOAD")), "UNSIGNED-PAYLOAD");
        assert_eq!(name(Some(&"ab".repeat(32))), "sha256");
        assert_eq!(name(Some("STREAMING-made-up\"x")), "other");
        assert_eq!(name(Some(&"ab".repeat(31))), "other");
    }

    #[tokio::test]
    async fn unsigned_chunks_are_reframed_as_they_arrive_with_the_trailer_intact() {
        let out = run(
            Mode::Unsigned,
            vec![
                b"a\r\n01234",
                b"56789\r",
                b"\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n",
            ],
        )
        .await
        .expect("valid");
        assert_eq!(
            String::from_utf8(out).expect("ascii"),
            "5\r\n01234\r\n5\r\n56789\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn signed_chunks_pass_unchanged_and_large_ones_are_refused() {
        let sig = "0".repeat(64);
        let body = format!("3;chunk-signature={sig}\r\nabc\r\n0;chunk-signature={sig}\r\n\r\n");
        let leaked: &'static [u8] = Box::leak(body.clone().into_bytes().into_boxed_slice());
        let (a, b) = leaked.split_at(7);
        assert_eq!(
            run(Mode::Signed, vec![a, b]).await.expect("valid"),
            body.as_bytes()
        );
        let huge: &'static [u8] = Box::leak(
            format!("6000000;chunk-signature={sig}\r\nabc")
                .into_bytes()
                .into_boxed_slice(),
        );
        assert_eq!(
            run(Mode::Signed, vec![huge]).await,
            Err("InvalidRequest".to_owned())
        );
        let unsigned_but_signed: &'static [u8] = Box::leak(
            format!("1000001;chunk-signature={sig}\r\n")
                .into_bytes()
                .into_boxed_slice(),
        );
        assert_eq!(
            run(Mode::Unsigned, vec![unsigned_but_signed]).await,
            Err("InvalidRequest".to_owned())
        );
    }

    #[tokio::test]
    async fn bodies_without_a_final_chunk_or_with_bad_framing_fail() {
        let incomplete = Err("IncompleteBody".to_owned());
        assert_eq!(run(Mode::Unsigned, vec![b"3\r\nabc\r\n"]).await, incomplete);
        assert_eq!(run(Mode::Unsigned, vec![b"3\r\nab"]).await, incomplete);
        assert_eq!(run(Mode::Unsigned, vec![]).await, incomplete);
        let malformed = Err("InvalidRequest".to_owned());
        for bad in [
            &b"3\r\nabcXY0\r\n\r\n"[..],
            b"zz\r\n",
            b"000000003\r\nabc\r\n",
            b"3\nabc\r\n",
        ] {
            assert_eq!(run(Mode::Unsigned, vec![bad]).await, malformed, "{bad:?}");
        }
    }
}
