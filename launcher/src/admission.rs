//! What the server runs at once, all clients together, so that no client
//! (nor several) can start more jails than the machine holds:
//!
//! - runs ([`Runs`]): a plain run's jail, or the throwaway session jail of
//!   a run given files. At most `--max-runs` at once; one more waits in
//!   line up to [`QUEUE_WAIT`] for another to end, then is refused, naming
//!   the limit and its setting.
//! - session jails ([`SessionSlots`]): at most `--max-sessions-total` open
//!   sessions in every client's table together (each client also has its
//!   own `--max-sessions`). A new session past it is refused at once: a
//!   session lasts minutes, waiting for one to end would not help.
//!
//! A permit is held as long as what it admits: dropping it lets the next
//! one in.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config;

/// How long a run waits for a free slot before it is refused.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);

/// The runs going on, all clients together.
#[derive(Debug, Clone)]
pub struct Runs {
    slots: Arc<Semaphore>,
    max: usize,
}

/// A run past the limit that waited [`QUEUE_WAIT`] in vain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsFull {
    pub max: usize,
}

impl Runs {
    pub fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one run, waiting up to `wait` for one to be free.
    pub async fn admit(&self, wait: Duration) -> Result<OwnedSemaphorePermit, RunsFull> {
        let slots = Arc::clone(&self.slots);
        match tokio::time::timeout(wait, slots.acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            // Timed out, or closed (never: the semaphore is not closed).
            _ => {
                tracing::warn!(max = self.max, "a run waited for a free slot in vain");
                Err(RunsFull { max: self.max })
            }
        }
    }

    /// How many runs are going on.
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.max - self.slots.available_permits()
    }
}

impl RunsFull {
    /// The setting that raises the limit, for the refusal.
    pub fn setting() -> String {
        setting_names(&config::MAX_RUNS)
    }
}

/// The open sessions, all clients' tables together.
#[derive(Debug, Clone)]
pub struct SessionSlots {
    slots: Arc<Semaphore>,
    pub max: usize,
}

impl SessionSlots {
    pub fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one more session, if there is one.
    pub fn admit(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// The setting that raises the limit, for the refusal.
    pub fn setting() -> String {
        setting_names(&config::MAX_SESSIONS_TOTAL)
    }
}

/// A setting as a refusal names it: `--flag / VAR`.
pub fn setting_names(setting: &config::Setting) -> String {
    format!(
        "--{} / {}",
        setting.flag.unwrap_or_default(),
        setting.var_name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_past_the_limit_waits_then_is_refused() {
        let runs = Runs::new(2);
        let a = runs.admit(QUEUE_WAIT).await.unwrap();
        let _b = runs.admit(QUEUE_WAIT).await.unwrap();
        assert_eq!(runs.running(), 2);
        let e = runs.admit(Duration::from_millis(50)).await.unwrap_err();
        assert_eq!(e, RunsFull { max: 2 });
        // One ends while the next waits: the next gets its slot.
        let waiting = {
            let runs = runs.clone();
            tokio::spawn(async move { runs.admit(Duration::from_secs(5)).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(a);
        assert!(waiting.await.unwrap());
        assert_eq!(RunsFull::setting(), "--max-runs / NIX_SANDBOX_MAX_RUNS");
    }

    #[test]
    fn session_slots_are_shared_and_given_back() {
        let slots = SessionSlots::new(1);
        let other_client = slots.clone();
        let held = slots.admit().unwrap();
        assert!(other_client.admit().is_none());
        drop(held);
        assert!(other_client.admit().is_some());
    }
}
