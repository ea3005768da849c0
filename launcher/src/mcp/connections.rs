//! The HTTP connections the server holds: at most `--max-connections` at
//! once, so that clients opening connections they never use cannot take
//! every file descriptor.
//!
//! A connection counts as *authenticated* once it sent a request with the
//! bearer token. When the cap is reached, a new connection closes the
//! oldest one that is not authenticated (it has sent nothing useful yet, or
//! only requests without the token): connections held open by someone
//! without the token can never lock the real client out. When every
//! connection is authenticated, the server accepts no more until one ends
//! (new ones wait in the kernel's backlog). Connections that send nothing
//! are also closed by the request read timeout (http.rs).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The connections open now.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    open: Mutex<VecDeque<Entry>>,
    /// Told when a connection ends.
    ended: Notify,
    next_id: Mutex<u64>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    authenticated: Arc<AtomicBool>,
    close: CancellationToken,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Connection {
    id: u64,
    connections: Arc<Connections>,
    /// Set once a request on it carried the token.
    pub authenticated: Arc<AtomicBool>,
    /// Cancelled when a newer connection needs its place.
    pub close: CancellationToken,
}

impl Connections {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            open: Mutex::new(VecDeque::new()),
            ended: Notify::new(),
            next_id: Mutex::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until a new connection can have a place: there is room, or an
    /// unauthenticated connection to close for it.
    pub async fn room(&self) {
        loop {
            let ended = self.ended.notified();
            {
                let open = self.lock();
                let full = open.len() >= self.max;
                if !full || open.iter().any(|e| !e.authenticated.load(Ordering::SeqCst)) {
                    return;
                }
            }
            ended.await;
        }
    }

    /// Admits a new connection, closing the oldest unauthenticated one when
    /// the cap is reached; `None` when every place is held by an
    /// authenticated connection.
    pub fn admit(self: &Arc<Self>) -> Option<Connection> {
        let mut open = self.lock();
        if open.len() >= self.max {
            let oldest = open
                .iter()
                .position(|e| !e.authenticated.load(Ordering::SeqCst))?;
            if let Some(evicted) = open.remove(oldest) {
                tracing::debug!(
                    connection = evicted.id,
                    "closing a connection that sent no token: the connection cap is reached"
                );
                evicted.close.cancel();
            }
        }
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(|p| p.into_inner());
            *next += 1;
            *next
        };
        let entry = Entry {
            id,
            authenticated: Arc::new(AtomicBool::new(false)),
            close: CancellationToken::new(),
        };
        let connection = Connection {
            id,
            connections: Arc::clone(self),
            authenticated: Arc::clone(&entry.authenticated),
            close: entry.close.clone(),
        };
        open.push_back(entry);
        Some(connection)
    }

    /// How many connections are open.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        if let Some(i) = open.iter().position(|e| e.id == self.id) {
            open.remove(i);
        }
        drop(open);
        self.connections.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_oldest_connection_without_the_token_makes_room() {
        let connections = Connections::new(3);
        let first = connections.admit().unwrap();
        let real = connections.admit().unwrap();
        real.authenticated.store(true, Ordering::SeqCst);
        let third = connections.admit().unwrap();
        assert_eq!(connections.len(), 3);
        // Full: the fourth closes the oldest unauthenticated one (the first).
        let fourth = connections.admit().unwrap();
        assert!(first.close.is_cancelled());
        assert!(!real.close.is_cancelled() && !third.close.is_cancelled());
        drop(first);
        assert_eq!(connections.len(), 3);
        // Every place authenticated: no room until one ends.
        third.authenticated.store(true, Ordering::SeqCst);
        fourth.authenticated.store(true, Ordering::SeqCst);
        assert!(connections.admit().is_none());
        let waiting = {
            let connections = Arc::clone(&connections);
            tokio::spawn(async move { connections.room().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(real);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a place freed")
            .unwrap();
        assert!(connections.admit().is_some());
    }
}
