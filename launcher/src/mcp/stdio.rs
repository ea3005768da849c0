//! MCP over stdio: stdout is the protocol (logs go to stderr), and stdin's
//! end, or SIGTERM or SIGINT, is the client going away. A client that does
//! not read its answers gets no more requests read (backpressure.rs).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::backpressure::Bounded;
use super::http::stop_signal;
use super::sockets;
use super::{Config, Server};

/// Serves until the client closes stdin, or SIGTERM or SIGINT (clients
/// such as Gemini CLI stop their servers with SIGTERM, not by closing
/// stdin). Either kills every running call at once (the shutdown token; the
/// calls' guards kill what is left when the runtime drops their tasks),
/// nothing more is written, and the server exits 0. A client that closes
/// before `initialize` (a health check, a probe) is no error either, and it
/// started no jail: the sandbox probes start with the first handshake.
pub async fn serve(config: Config, max_unread_bytes: usize) -> Result<(), String> {
    let shutdown = config.spawner.shutdown.clone();
    let control_dir = config.control_dir.clone();
    let (stdin, stdout) = streams();
    let stdin = EofCancels::new(stdin, shutdown.clone());
    let stdout = SilentAfter::new(stdout, shutdown.clone());
    let max_line = super::max_message_bytes(config.max_code_bytes, config.max_files_bytes);
    let transport = Bounded::new(stdin, stdout, max_unread_bytes).with_max_line(max_line);
    // Signals only: end of input cancels `shutdown` too, and then rmcp
    // still writes the answers of the calls that ended.
    let stop = stop_signal(CancellationToken::new());
    tokio::pin!(stop);
    let server = Server::new(config);
    server.start_control(&shutdown, control_dir.as_deref());
    let served = tokio::select! {
        served = server.serve(transport) => served,
        () = &mut stop => {
            tracing::info!("stopped before initialize; server stopping");
            return Ok(());
        }
    };
    let service = match served {
        Ok(service) => service,
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("client closed the connection before initialize; server stopping");
            return Ok(());
        }
        Err(e) => return Err(format!("MCP initialisation failed: {e}")),
    };
    service.service().start_probes();
    let quit = tokio::select! {
        quit = service.waiting() => quit,
        () = &mut stop => {
            shutdown.cancel();
            tracing::info!("server stopping");
            return Ok(());
        }
    };
    shutdown.cancel();
    let quit = quit.map_err(|e| format!("the MCP service task failed: {e}"))?;
    tracing::info!(reason = ?quit, "client gone, server stopping");
    Ok(())
}

/// Standard input and output, read and written on the runtime's reactor
/// when they are sockets (sockets.rs) or pipes (rmcp's `stdio_pipes`), on
/// tokio's blocking handles otherwise (a terminal, a file).
fn streams() -> (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
) {
    if let Some((input, output)) = sockets::stdio() {
        tracing::debug!("stdio: sockets, read and written on the reactor");
        return (Box::new(input), Box::new(output));
    }
    let (input, output) = rmcp::transport::io::stdio_pipes();
    (Box::new(input), Box::new(output))
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

/// The MCP output: once `token` is cancelled (the client closed its
/// side, or the server is stopping) it discards what is written. A client
/// that closed stdin waits for the server to exit and reads nothing more:
/// the Python SDK 1.x (under LangChain's adapters, pydantic-ai 1) even
/// fails on a message that comes after it closed, such as the answer to a
/// call the closing killed.
struct SilentAfter<W> {
    inner: W,
    token: CancellationToken,
}

impl<W> SilentAfter<W> {
    fn new(inner: W, token: CancellationToken) -> Self {
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
