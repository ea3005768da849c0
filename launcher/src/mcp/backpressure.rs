//! Back-pressure on a stdio client: rmcp reads requests as fast as they
//! come and keeps every answer it could not write yet, so a client that
//! sends and never reads would grow the server without bound. [`Bounded`]
//! wraps rmcp's stdio transport and stops reading requests while
//!
//! - the answers written for the client and not taken by it yet hold more
//!   than `max_unread_bytes` (`--max-unread-bytes`), or
//! - [`MAX_PENDING`] requests are read and not answered yet,
//!
//! until the client reads (or requests end). What the server holds for a
//! client is then at most about `max_unread_bytes` of answers and
//! [`MAX_PENDING`] requests. Nothing is dropped: the requests wait in the
//! pipe, and the client's own writes block.
//!
//! [`Bounded`] writes the answers itself: each is serialised once, as
//! rmcp's codec does (the JSON, then a newline), and that one serialisation
//! gives its size for the count and is what is written. rmcp's transport
//! keeps reading the requests; the lines it writes itself (an Invalid
//! Request answer to a message of the wrong shape) go to the same writer,
//! whole and counted ([`Aside`]).

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::BytesMut;
use rmcp::RoleServer;
use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

/// Most requests read and not answered yet.
pub const MAX_PENDING: usize = 64;

/// Room for a small answer's line: most fit without growing it.
const LINE_CAPACITY: usize = 1024;

/// The client's stdout, written one whole line at a time, in turn; `None`
/// once the transport is closed.
type Out<W> = Arc<tokio::sync::Mutex<Option<Writer<W>>>>;

/// A writer and what it has still to write: a write cut off (its task
/// stopped while the pipe was full) leaves its rest here, written before
/// the next line, so no line is ever cut in two.
struct Writer<W> {
    write: W,
    rest: BytesMut,
}

/// rmcp's stdio transport, reading no more while the client lags behind.
pub struct Bounded<R: AsyncRead, W: AsyncWrite + Send + Unpin + 'static> {
    inner: AsyncRwTransport<RoleServer, R, Aside<W>>,
    out: Out<W>,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    max_unread_bytes: usize,
    /// Bytes of answers handed to the writer and not written yet.
    unwritten: AtomicUsize,
    /// Requests read and not answered.
    pending: Mutex<HashSet<RequestId>>,
    /// Told when an answer was written or a request left `pending`.
    freed: Notify,
}

impl State {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has_room(&self) -> bool {
        self.unwritten.load(Ordering::SeqCst) < self.max_unread_bytes
            && self.pending().len() < MAX_PENDING
    }

    fn answered(&self, id: &RequestId) {
        self.pending().remove(id);
        self.freed.notify_waiters();
    }
}

impl<R, W> Bounded<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub fn new(read: R, write: W, max_unread_bytes: usize) -> Self {
        let out: Out<W> = Arc::new(tokio::sync::Mutex::new(Some(Writer {
            write,
            rest: BytesMut::new(),
        })));
        let state = Arc::new(State {
            max_unread_bytes: max_unread_bytes.max(1),
            unwritten: AtomicUsize::new(0),
            pending: Mutex::default(),
            freed: Notify::new(),
        });
        let aside = Aside {
            out: Arc::clone(&out),
            state: Arc::clone(&state),
            line: Vec::new(),
            writing: None,
        };
        Self {
            inner: AsyncRwTransport::new_server(read, aside),
            out,
            state,
        }
    }

    /// Reads requests of up to `max_line_bytes` (rmcp's own bound, 16 MiB,
    /// is less than the largest call; a longer line is dropped and logged
    /// by rmcp, unanswered).
    pub fn with_max_line(mut self, max_line_bytes: usize) -> Self {
        self.inner = self.inner.with_max_line_length(max_line_bytes);
        self
    }
}

/// Writes `line` (whole lines) to `out` and flushes it; then `line` is no
/// longer counted as unwritten.
async fn write_out<W: AsyncWrite + Unpin>(
    out: &Out<W>,
    line: Vec<u8>,
    state: &State,
) -> std::io::Result<()> {
    let written = match out.lock().await.as_mut() {
        Some(writer) => {
            writer.rest.extend_from_slice(&line);
            match writer.write.write_all_buf(&mut writer.rest).await {
                Ok(()) => writer.write.flush().await,
                Err(e) => Err(e),
            }
        }
        None => Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "Transport is closed",
        )),
    };
    state.unwritten.fetch_sub(line.len(), Ordering::SeqCst);
    written
}

/// The writer rmcp's transport is given, for the lines it writes itself:
/// what it writes up to a flush (its lines are whole then) is counted as
/// unwritten and written to [`Out`] in turn by a task of its own, which the
/// flush waits for, as it waited for rmcp's own writer. The task does not
/// depend on rmcp's reading going on: the answers never wait for a line
/// whose flush rmcp's loop dropped.
struct Aside<W> {
    out: Out<W>,
    state: Arc<State>,
    line: Vec<u8>,
    writing: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl<W: AsyncWrite + Send + Unpin + 'static> AsyncWrite for Aside<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.line.extend_from_slice(bytes);
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.writing.is_none() && !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.state.unwritten.fetch_add(line.len(), Ordering::SeqCst);
            let (out, state) = (Arc::clone(&self.out), Arc::clone(&self.state));
            self.writing = Some(tokio::spawn(async move {
                let written = write_out(&out, line, &state).await;
                state.freed.notify_waiters();
                written
            }));
        }
        let Some(writing) = self.writing.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let written = std::task::ready!(Pin::new(writing).poll(cx));
        self.writing = None;
        Poll::Ready(written.unwrap_or_else(|e| Err(std::io::Error::other(e))))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl<R, W> Transport<RoleServer> for Bounded<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Serialised once, as rmcp's codec would: its exact size is counted
        // from now until it is written.
        let answers = match &item {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            _ => None,
        };
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        let encoded = serde_json::to_writer(&mut line, &item).map(|()| {
            line.push(b'\n');
            self.state.unwritten.fetch_add(line.len(), Ordering::SeqCst);
            line
        });
        drop(item);
        let (out, state) = (Arc::clone(&self.out), Arc::clone(&self.state));
        async move {
            let sent = match encoded {
                Ok(line) => write_out(&out, line, &state).await,
                Err(e) => Err(e.into()),
            };
            match answers {
                Some(id) => state.answered(&id),
                None => state.freed.notify_waiters(),
            }
            sent
        }
    }

    /// The next message, once the client has room for more answers.
    /// Cancel-safe, as rmcp's loop needs: waiting keeps nothing, and the
    /// inner read keeps a partial line for the next call.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut told = false;
        loop {
            let freed = self.state.freed.notified();
            if self.state.has_room() {
                break;
            }
            if !told {
                tracing::warn!(
                    unread_bytes = self.state.unwritten.load(Ordering::SeqCst),
                    pending = self.state.pending().len(),
                    "the client is not reading its answers: reading no more requests until it does"
                );
                told = true;
            }
            freed.await;
        }
        if told {
            tracing::info!("the client reads again: reading requests");
        }
        let message = self.inner.receive().await?;
        match &message {
            JsonRpcMessage::Request(request) => {
                self.state.pending().insert(request.id.clone());
            }
            // rmcp writes no answer for a cancelled request.
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.state.answered(id);
                }
            }
            _ => {}
        }
        Some(message)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.out.lock().await.take();
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::model::{CallToolResult, ContentBlock, ServerResult};
    use serde_json::Value;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

    use super::*;

    /// Long enough for anything that is going to happen here to happen.
    const SETTLE: Duration = Duration::from_millis(300);

    /// A `Bounded` over pipes to a client, `pipe` bytes each way: the
    /// transport, what the client writes to, what it reads from.
    fn connected(
        max_unread_bytes: usize,
        pipe: usize,
    ) -> (
        Bounded<DuplexStream, DuplexStream>,
        DuplexStream,
        DuplexStream,
    ) {
        let (requests, to_server) = tokio::io::duplex(pipe);
        let (from_server, answers) = tokio::io::duplex(pipe);
        (
            Bounded::new(to_server, from_server, max_unread_bytes),
            requests,
            answers,
        )
    }

    /// An answer to request `id` whose line is about `text.len()` bytes.
    fn answer(id: i64, text: &str) -> TxJsonRpcMessage<RoleServer> {
        let result = CallToolResult::success(vec![ContentBlock::text(text)]);
        JsonRpcMessage::response(ServerResult::CallToolResult(result), RequestId::Number(id))
    }

    fn request(id: i64) -> Vec<u8> {
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n").into_bytes()
    }

    /// The answers are counted as unwritten bytes from the moment they are
    /// handed over until the client takes them: one answer larger than the
    /// bound, stuck in a full pipe, stops the reading of requests (one
    /// pending request would not), and the client reading it lets the
    /// next request in. The line it reads is the answer, whole.
    #[tokio::test]
    async fn an_unread_answer_past_the_bound_stops_the_reading() {
        let (mut transport, mut requests, answers) = connected(4096, 1024);
        requests.write_all(&request(1)).await.unwrap();
        assert!(transport.receive().await.is_some());
        let text = "x".repeat(8192);
        let sending = tokio::spawn(transport.send(answer(1, &text)));
        requests.write_all(&request(2)).await.unwrap();
        let stuck = tokio::time::timeout(SETTLE, transport.receive()).await;
        assert!(stuck.is_err(), "a request was read past the unread answer");
        let mut answers = BufReader::new(answers).lines();
        let line = answers.next_line().await.unwrap().unwrap();
        let read: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(read["id"], 1);
        assert_eq!(read["result"]["content"][0]["text"], text.as_str());
        sending.await.unwrap().unwrap();
        let next = tokio::time::timeout(SETTLE, transport.receive()).await;
        assert!(matches!(next, Ok(Some(JsonRpcMessage::Request(_)))));
    }

    /// rmcp's own answers (Invalid Request, to a message of the wrong shape)
    /// reach the client whole, among the answers, and count as unwritten
    /// too: a client that sends such messages and reads nothing has its
    /// requests left in the pipe, not read without end.
    #[tokio::test]
    async fn rmcps_own_lines_are_written_whole_and_counted() {
        let (mut transport, mut requests, answers) = connected(2048, 512);
        // Two malformed messages, then a request: rmcp answers the first two
        // itself and hands the request over.
        let wrong = b"{\"jsonrpc\":\"2.0\",\"id\":9,\"neither\":1}\n";
        requests.write_all(wrong).await.unwrap();
        requests.write_all(wrong).await.unwrap();
        requests.write_all(&request(1)).await.unwrap();
        assert!(transport.receive().await.is_some());
        tokio::spawn(transport.send(answer(1, &"y".repeat(1500))));
        let mut answers = BufReader::new(answers).lines();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let line = tokio::time::timeout(SETTLE, answers.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let read: Value = serde_json::from_str(&line).unwrap();
            if read["id"].is_null() {
                assert_eq!(read["error"]["code"], -32600, "{line}");
            }
            ids.push(read["id"].clone());
        }
        ids.sort_by_key(|id| id.as_i64());
        assert_eq!(ids, [Value::Null, Value::Null, Value::from(1)]);
        // Now the client reads nothing: its malformed messages fill the
        // pipe back, and the transport stops reading them.
        let (mut transport, mut requests, _answers) = connected(2048, 512);
        let flood = tokio::spawn(async move {
            for _ in 0..10_000 {
                if requests.write_all(wrong).await.is_err() {
                    return false;
                }
            }
            true
        });
        let reading = tokio::time::timeout(SETTLE, transport.receive()).await;
        assert!(reading.is_err(), "a malformed message was handed over");
        assert!(
            !flood.is_finished(),
            "every malformed message of a client that reads nothing was read"
        );
        flood.abort();
    }
}
