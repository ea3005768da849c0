//! Notices the client going away: a reader that cancels a token when the
//! stream it wraps ends (EOF or error), so running jobs are killed at once;
//! and a writer that says nothing more once it has.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// Wraps the MCP input; cancels `token` at its end.
pub struct EofCancels<R> {
    inner: R,
    token: CancellationToken,
}

impl<R> EofCancels<R> {
    pub fn new(inner: R, token: CancellationToken) -> Self {
        Self { inner, token }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EofCancels<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let asked = buf.remaining() > 0;
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &poll {
            Poll::Ready(Ok(())) if asked && buf.filled().len() == before => {
                tracing::info!("stdin closed: the client is gone, killing running jobs");
                self.token.cancel();
            }
            Poll::Ready(Err(e)) => {
                tracing::warn!(error = %e, "stdin failed: killing running jobs");
                self.token.cancel();
            }
            _ => {}
        }
        poll
    }
}

/// Wraps the MCP output; once `token` is cancelled (the client closed its
/// side, or the server is stopping) it discards what is written. A client
/// that closed stdin waits for the server to exit and reads nothing more:
/// the Python SDK 1.x (under LangChain's adapters, pydantic-ai 1) even
/// fails on a message that comes after it closed, such as the answer to a
/// call the closing killed.
pub struct SilentAfter<W> {
    inner: W,
    token: CancellationToken,
}

impl<W> SilentAfter<W> {
    pub fn new(inner: W, token: CancellationToken) -> Self {
        Self { inner, token }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SilentAfter<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.token.is_cancelled() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_token_is_cancelled_at_eof_only() {
        let token = CancellationToken::new();
        let mut r = EofCancels::new(&b"abc"[..], token.clone());
        let mut buf = [0u8; 2];
        assert_eq!(r.read(&mut buf).await.unwrap(), 2);
        assert_eq!(r.read(&mut buf).await.unwrap(), 1);
        assert!(!token.is_cancelled());
        assert_eq!(r.read(&mut buf).await.unwrap(), 0);
        assert!(token.is_cancelled());
    }

    #[tokio::test]
    async fn nothing_is_written_after_the_token_is_cancelled() {
        use tokio::io::AsyncWriteExt;
        let token = CancellationToken::new();
        let mut w = SilentAfter::new(Vec::new(), token.clone());
        w.write_all(b"a").await.unwrap();
        token.cancel();
        w.write_all(b"b").await.unwrap();
        assert_eq!(w.inner, b"a");
    }
}
