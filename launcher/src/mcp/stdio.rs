//! MCP over stdio: stdout is the protocol (logs go to stderr), and stdin's
//! end is the client going away.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::{Config, Server};

/// Serves until the client closes stdin. EOF kills every running call at
/// once (the shutdown token), before rmcp drains the last responses. A
/// client that closes before `initialize` (a health check, a probe) is no
/// error: the server exits 0, and it started no jail (the sandbox probes
/// start with the first handshake).
pub async fn serve(config: Config) -> Result<(), String> {
    let shutdown = config.shutdown.clone();
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let stdin = EofCancels::new(stdin, shutdown.clone());
    let service = match Server::new(config).serve((stdin, stdout)).await {
        Ok(service) => service,
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("client closed the connection before initialize; server stopping");
            return Ok(());
        }
        Err(e) => return Err(format!("MCP initialisation failed: {e}")),
    };
    service.service().start_probes();
    let quit = service.waiting().await;
    shutdown.cancel();
    let quit = quit.map_err(|e| format!("the MCP service task failed: {e}"))?;
    tracing::info!(reason = ?quit, "client gone, server stopping");
    Ok(())
}

/// The MCP input: cancels `token` when the stream it wraps ends (EOF or
/// error), so that running calls are killed at once.
struct EofCancels<R> {
    inner: R,
    token: CancellationToken,
}

impl<R> EofCancels<R> {
    fn new(inner: R, token: CancellationToken) -> Self {
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
                tracing::info!("stdin closed: the client is gone, killing running calls");
                self.token.cancel();
            }
            Poll::Ready(Err(e)) => {
                tracing::warn!(error = %e, "stdin failed: killing running calls");
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
