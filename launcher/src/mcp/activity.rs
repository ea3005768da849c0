//! HTTP: what each MCP session is doing, as the front sees its requests,
//! and which one to end when `initialize` finds `--max-mcp-sessions` open.
//!
//! One token holder opening MCP sessions until the cap locked every new
//! client out (503) for the idle timeout. Now a new one ends the MCP
//! session that is idle (no request of it being answered), holds nothing
//! (no run going, no sandbox session open: nothing is lost with it), and
//! was used least recently. Its client's next request gets 404, on which
//! MCP clients start a new session. Only when every MCP session holds
//! something or has a request being answered does `initialize` get 503.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::SessionId;

/// Every MCP session's last request and the requests it has open.
#[derive(Debug, Default)]
pub struct Activity {
    sessions: Mutex<HashMap<SessionId, Use>>,
}

#[derive(Debug, Clone, Copy)]
struct Use {
    last: Instant,
    in_flight: usize,
}

/// A request being answered in an MCP session; dropped when its answer
/// was sent or abandoned.
#[derive(Debug)]
pub struct InFlight {
    activity: Arc<Activity>,
    session: SessionId,
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Use>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request of MCP session `id` arrived (or the session was made).
    pub fn touch(&self, id: &SessionId) {
        let now = Instant::now();
        let mut sessions = self.lock();
        let entry = sessions.entry(id.clone()).or_insert(Use {
            last: now,
            in_flight: 0,
        });
        entry.last = now;
    }

    /// A request of MCP session `id` is being answered until the guard is
    /// dropped.
    pub fn begin(self: &Arc<Self>, id: &SessionId) -> InFlight {
        self.touch(id);
        if let Some(entry) = self.lock().get_mut(id) {
            entry.in_flight += 1;
        }
        InFlight {
            activity: Arc::clone(self),
            session: id.clone(),
        }
    }

    /// Of the MCP sessions `open`, the idle one used least recently that
    /// `holds` nothing; forgets sessions no longer open.
    pub fn least_recently_used_idle(
        &self,
        open: &[SessionId],
        holds: impl Fn(&SessionId) -> bool,
    ) -> Option<SessionId> {
        let mut sessions = self.lock();
        sessions.retain(|id, _| open.contains(id));
        (sessions.iter())
            .filter(|(id, u)| u.in_flight == 0 && !holds(id))
            .min_by_key(|(_, u)| u.last)
            .map(|(id, _)| id.clone())
    }

    /// How long until the first idle MCP session ends by `idle_timeout`
    /// unless it gets a request.
    pub fn first_idle_end(&self, idle_timeout: Duration) -> Option<Duration> {
        let now = Instant::now();
        (self.lock().values())
            .filter(|u| u.in_flight == 0)
            .map(|u| (u.last + idle_timeout).saturating_duration_since(now))
            .min()
    }

    /// Forgets MCP session `id` (ended).
    pub fn forget(&self, id: &SessionId) {
        self.lock().remove(id);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut sessions = self.activity.lock();
        if let Some(entry) = sessions.get_mut(&self.session) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            entry.last = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_idle_session_holding_nothing_is_chosen() {
        let activity = Arc::new(Activity::default());
        let id = |s: &str| SessionId::from(s.to_owned());
        let (old, busy, holding, new) = (id("old"), id("busy"), id("holding"), id("new"));
        for s in [&busy, &holding, &old, &new] {
            activity.touch(s);
            std::thread::sleep(Duration::from_millis(2));
        }
        let call = activity.begin(&busy);
        let open = [old.clone(), busy.clone(), holding.clone(), new.clone()];
        let holds = |s: &SessionId| s == &holding;
        assert_eq!(
            activity.least_recently_used_idle(&open, holds),
            Some(old.clone())
        );
        // Used again, `old` is the newest; `busy` is busy until answered.
        activity.touch(&old);
        assert_eq!(
            activity.least_recently_used_idle(&open, holds),
            Some(new.clone())
        );
        drop(call);
        assert_eq!(
            activity.least_recently_used_idle(&open, holds),
            Some(new.clone())
        );
        // Ended sessions are forgotten; nothing idle and empty: none.
        let open = [holding.clone()];
        assert_eq!(activity.least_recently_used_idle(&open, holds), None);
        let first = activity.first_idle_end(Duration::from_secs(300)).unwrap();
        assert!(first > Duration::from_secs(290), "{first:?}");
    }
}
