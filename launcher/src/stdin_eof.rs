//! Notices the client going away: a reader that cancels a token when the
//! stream it wraps ends (EOF or error), so running jobs are killed at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
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
}
