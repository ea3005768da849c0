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

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

/// Most requests read and not answered yet.
pub const MAX_PENDING: usize = 64;

/// Counts the bytes written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// rmcp's stdio transport, reading no more while the client lags behind.
pub struct Bounded<R: AsyncRead, W: AsyncWrite> {
    inner: AsyncRwTransport<RoleServer, R, W>,
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
        Self {
            inner: AsyncRwTransport::new_server(read, write),
            state: Arc::new(State {
                max_unread_bytes: max_unread_bytes.max(1),
                unwritten: AtomicUsize::new(0),
                pending: Mutex::default(),
                freed: Notify::new(),
            }),
        }
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
        // Its size as the writer will write it: serialised once more into a
        // counter, which is exact and keeps no copy of a large answer.
        let mut counted = Counter(0);
        let size = serde_json::to_writer(&mut counted, &item).map_or(0, |()| counted.0 + 1);
        let answers = match &item {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            _ => None,
        };
        let state = Arc::clone(&self.state);
        state.unwritten.fetch_add(size, Ordering::SeqCst);
        let sending = self.inner.send(item);
        async move {
            let sent = sending.await;
            state.unwritten.fetch_sub(size, Ordering::SeqCst);
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

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
