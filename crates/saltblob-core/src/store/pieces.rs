//! [`StreamReader`]: an [`AsyncRead`] over a stream of byte pieces, to feed a stream (a [`super::BlobStream`],
//! chunks read from another table) to the store's `put_stream`.

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::base::error::Result;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use tokio::io::{AsyncRead, ReadBuf};

/// An [`AsyncRead`] over a stream of byte pieces; a failed piece becomes an I/O error with its message.
pub struct StreamReader<'a> {
    pieces: BoxStream<'a, Result<Bytes>>,
    current: Bytes,
}

impl<'a> StreamReader<'a> {
    /// A reader of the pieces of `pieces`, in order.
    pub fn new(pieces: BoxStream<'a, Result<Bytes>>) -> Self {
        Self {
            pieces,
            current: Bytes::new(),
        }
    }
}

impl AsyncRead for StreamReader<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        while self.current.is_empty() {
            match self.pieces.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(piece))) => self.current = piece,
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(std::io::Error::other(e.to_string())));
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = self.current.len().min(buf.remaining());
        let piece = self.current.split_to(n);
        buf.put_slice(&piece);
        Poll::Ready(Ok(()))
    }
}
