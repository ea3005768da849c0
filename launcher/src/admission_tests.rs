//! Admission's rules, on the pools alone: the limit, each client's share,
//! who is let in first, and the idle session ended for another client.

use super::*;

fn client(name: &str) -> ClientKey {
    ClientKey::mcp_session(name)
}

const WAIT: Duration = Duration::from_secs(5);
const SHORT: Duration = Duration::from_millis(50);
const HOLD: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_run_past_the_limit_waits_then_is_refused() {
    let runs = Runs::new(2, None);
    let a = client("a");
    let first = runs.admit(&a, WAIT, HOLD).await.unwrap();
    let _second = runs.admit(&a, WAIT, HOLD).await.unwrap();
    assert_eq!(runs.running(), 2);
    let e = runs.admit(&a, SHORT, HOLD).await.unwrap_err();
    assert_eq!((e.max, e.share, e.held), (2, 2, 2));
    // One client alone: the limit, not a share, refused it.
    assert!(!e.beyond_share());
    assert!(e.frees_within.is_some_and(|d| d <= HOLD && d > HOLD / 2));
    // One ends while the next waits: the next gets its slot.
    let waiting = {
        let (runs, a) = (runs.clone(), a.clone());
        tokio::spawn(async move { runs.admit(&a, WAIT, HOLD).await.is_ok() })
    };
    tokio::time::sleep(SHORT).await;
    drop(first);
    assert!(waiting.await.unwrap());
    assert_eq!(Runs::setting(), "--max-runs / NIX_SANDBOX_MAX_RUNS");
}

/// Beyond its share a client takes free slots while nobody else wants
/// them, but never the last one: the next client starts at once.
#[tokio::test]
async fn beyond_its_share_a_client_leaves_one_slot_free() {
    let runs = Runs::new(4, Some(2));
    let (a, b) = (client("a"), client("b"));
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(runs.admit(&a, SHORT, HOLD).await.unwrap());
    }
    let e = runs.admit(&a, SHORT, HOLD).await.unwrap_err();
    assert!(e.beyond_share(), "{e:?}");
    assert_eq!((e.max, e.share, e.held), (4, 2, 3));
    let _b = runs.admit(&b, SHORT, HOLD).await.unwrap();
    assert_eq!(runs.running(), 4);
    assert_eq!((runs.held_by(&a), runs.held_by(&b)), (3, 1));
}

/// When a slot frees, a client within its share is let in before one
/// beyond it that waited longer; and a client beyond its share takes
/// nothing while one within its share waits.
#[tokio::test]
async fn clients_within_their_share_are_let_in_first() {
    let runs = Runs::new(4, Some(2));
    let (a, b) = (client("a"), client("b"));
    let mut a_held = Vec::new();
    for _ in 0..3 {
        a_held.push(runs.admit(&a, SHORT, HOLD).await.unwrap());
    }
    let _b1 = runs.admit(&b, SHORT, HOLD).await.unwrap();
    let spawn = |who: &ClientKey| {
        let (runs, who) = (runs.clone(), who.clone());
        tokio::spawn(async move { runs.admit(&who, WAIT, HOLD).await })
    };
    let a_waits = spawn(&a);
    tokio::time::sleep(SHORT).await;
    let b_waits = spawn(&b);
    tokio::time::sleep(SHORT).await;
    a_held.pop();
    let b2 = tokio::time::timeout(WAIT, b_waits).await.unwrap().unwrap();
    assert!(b2.is_ok());
    assert!(
        !a_waits.is_finished(),
        "a, beyond its share, took the slot b waited for"
    );
    // a is back within its share when another of its runs ends.
    a_held.pop();
    let a3 = tokio::time::timeout(WAIT, a_waits).await.unwrap().unwrap();
    assert!(a3.is_ok());
    assert_eq!((runs.held_by(&a), runs.held_by(&b)), (2, 2));
}

/// A table of idle sessions for [`SessionSlots::make_room`].
struct FakeTable {
    idle: Mutex<Vec<(IdleSession, Slot)>>,
    ended: Mutex<Vec<(String, String)>>,
}

impl IdleSessions for FakeTable {
    fn idle(&self) -> Vec<IdleSession> {
        let idle = self.idle.lock().unwrap();
        idle.iter().map(|(s, _)| s.clone()).collect()
    }

    fn end_idle(&self, name: &str, why: String) -> bool {
        let mut idle = self.idle.lock().unwrap();
        let Some(i) = idle.iter().position(|(s, _)| s.name == name) else {
            return false;
        };
        idle.remove(i);
        self.ended.lock().unwrap().push((name.to_owned(), why));
        true
    }

    fn describe(&self) -> Vec<OpenSession> {
        Vec::new()
    }

    fn cancel_call(&self, _name: &str) -> bool {
        false
    }

    fn exec(
        &self,
        name: String,
        _argv: Vec<String>,
        _terminal: Option<super::Terminal>,
        _chunks: tokio::sync::mpsc::Sender<Chunk>,
        _stop: tokio_util::sync::CancellationToken,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<ExecEnd, ExecRefused>> + Send + '_>> {
        Box::pin(async move {
            Err(ExecRefused {
                message: format!("no open session `{name}`"),
                not_found: false,
            })
        })
    }
}

/// Sessions: beyond its share a client opens sessions but leaves one slot;
/// a client within its share that finds none free gets the least recently
/// used idle session of the client beyond its share ended for it.
#[test]
fn an_idle_session_beyond_a_share_makes_room_for_another_client() {
    let slots = SessionSlots::new(4, Some(1));
    let (a, b, c) = (client("a"), client("b"), client("c"));
    let table = Arc::new(FakeTable {
        idle: Mutex::default(),
        ended: Mutex::default(),
    });
    let dynamic: Arc<dyn IdleSessions> = table.clone();
    slots.register(Arc::downgrade(&dynamic));
    let now = Instant::now();
    for (i, name) in ["old", "mid", "new"].into_iter().enumerate() {
        let slot = slots.admit(&a).unwrap();
        let last_used = now + Duration::from_secs(i as u64);
        let session = IdleSession {
            name: name.into(),
            client: a.clone(),
            last_used,
            ends_at: last_used + Duration::from_secs(300),
        };
        table.idle.lock().unwrap().push((session, slot));
    }
    let e = slots.admit(&a).unwrap_err();
    assert!(e.beyond_share() && e.held == 3, "{e:?}");
    let _b = slots.admit(&b).unwrap();
    // Full: c, within its share, finds no slot; a's oldest idle one ends.
    assert!(slots.admit(&c).is_err());
    assert!(
        !slots.make_room(&a),
        "a is beyond its share: nothing ends for it"
    );
    assert!(slots.make_room(&c));
    let ended = table.ended.lock().unwrap().clone();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].0, "old");
    assert!(
        ended[0]
            .1
            .contains("client's 3 sessions, beyond its share of 1")
            && ended[0]
                .1
                .contains("--client-sessions-share / NIX_SANDBOX_CLIENT_SESSIONS_SHARE"),
        "{}",
        ended[0].1
    );
    let _c = slots.admit(&c).unwrap();
    assert_eq!(slots.held_by(&a), 2);
    // Nothing is free: a, still beyond its share, gets no more.
    assert!(slots.admit(&a).is_err());
    let first = slots.first_end(Some(&a)).unwrap();
    assert!(first > Duration::from_secs(299) && first <= Duration::from_secs(301));
}

#[test]
fn one_client_alone_has_every_session_slot() {
    let slots = SessionSlots::new(2, None);
    let a = client("a");
    let _one = slots.admit(&a).unwrap();
    let _two = slots.admit(&a).unwrap();
    let e = slots.admit(&a).unwrap_err();
    assert!(!e.beyond_share(), "{e:?}");
    assert!(!slots.make_room(&a));
}
