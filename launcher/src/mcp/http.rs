//! MCP over streamable HTTP (`--http ADDR`): rmcp's streamable HTTP service
//! behind a bearer token, served by hyper at `http://ADDR/mcp`.
//!
//! - A loopback or wildcard ADDR is held on both loopback families, so that
//!   no other process (a `network = true` jail among them) can listen on
//!   the port where clients that resolve `localhost` would reach it
//!   (listen.rs).
//! - Every request must carry `Authorization: Bearer TOKEN` (the token file
//!   of `--token-file` or `NIX_SANDBOX_TOKEN_FILE`, compared in constant
//!   time, token.rs); without it: 401, whose body and `WWW-Authenticate` say that a
//!   static bearer token is expected and that there is no OAuth (clients
//!   that see a bare 401 start an OAuth discovery and then report only
//!   "failed to connect"); OAuth discovery paths get a 404 that says the
//!   same. There is no way to serve HTTP without a token.
//! - `DELETE /mcp` ends an MCP session: 204, or 404 for a session the
//!   server does not have (ended, or never was).
//! - A request with an `Origin` header naming anything but a loopback origin
//!   or an `--allow-origin` one gets 403 (rmcp's check, against DNS
//!   rebinding); clients that send no `Origin` (not browsers) pass. On a
//!   loopback address the `Host` header must be a loopback name too.
//! - One handler per MCP session (`Mcp-Session-Id`), made by
//!   [`Server::for_another_client`]: a client's interpreter sessions
//!   live in its MCP session, invisible to every other client.
//! - A client that goes away in the middle of a call (its response stream
//!   dropped before the answer) cancels the call, as `notifications/cancelled`
//!   would: the run's jail is killed at once.
//! - SIGTERM or SIGINT stops the server; every running call is killed.
//!
//! Bounds, whoever the client is (config.rs declares their settings):
//! - at most `--max-connections` connections (connections.rs: past it, a
//!   new one closes the oldest that has not sent the token);
//! - a request's headers must arrive within `--request-read-timeout`
//!   (hyper's `header_read_timeout`, which also closes a keep-alive
//!   connection idle that long; responses say so in `Keep-Alive`), and its
//!   body within as long again, else the connection is closed (408 for the
//!   body);
//! - at most `--max-mcp-sessions` MCP sessions: past it `initialize` ends
//!   the least recently used MCP session that is idle and holds nothing,
//!   or else gets 503 (activity.rs); an MCP session ends
//!   `--mcp-session-idle-timeout` after its last request (rmcp's
//!   keep-alive), never before its sandbox sessions could have ended or a
//!   call could have run to its timeout.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::{Request, Response, StatusCode, header};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionId, SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::activity::{Activity, InFlight};
use super::connections::Connections;
use super::listen::{Listeners, parse_addr};
use super::token::{CHALLENGE, NO_OAUTH, authorized, read_token, token_file};
use super::{Config, Server};
use crate::admission::{ClientKey, Runs, SessionSlots};

/// How long a call may go on past its environment's timeout: the
/// interrupt's grace, a write's, and a reset's fresh jail.
const CALL_GRACE: Duration = crate::session::lease::WAIT_AFTER_CANCEL;

/// The one path the server answers on.
pub const ENDPOINT: &str = "/mcp";

/// Origins a browser on this machine has, allowed by default.
const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

type HttpResponse = Response<BoxBody<Bytes, Infallible>>;
type Rmcp = StreamableHttpService<Server, LocalSessionManager>;

/// What `--http` needs besides the MCP handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `HOST:PORT`; `localhost` stands for 127.0.0.1 (listen.rs: a
    /// loopback address is held on both loopback families).
    pub addr: String,
    /// `--token-file`, else `NIX_SANDBOX_TOKEN_FILE` (config.rs).
    pub token_file: Option<PathBuf>,
    /// Browser origins allowed besides the loopback ones.
    pub allowed_origins: Vec<String>,
    /// Connections at once, and how long a request's headers (then its
    /// body) may take.
    pub max_connections: usize,
    pub read_timeout: Duration,
    /// MCP sessions at once, and how long an idle one lives (at least).
    pub max_mcp_sessions: usize,
    pub mcp_idle_timeout: Duration,
}

/// Serves MCP on `options.addr` until a signal; each MCP session gets a
/// handler of its own. Every call still running is killed on the way out.
pub async fn serve(options: &Options, config: Config) -> Result<(), String> {
    let shutdown = config.spawner.shutdown.clone();
    let control_dir = config.control_dir.clone();
    let max_body_bytes = super::max_message_bytes(config.max_code_bytes, config.max_files_bytes);
    // An MCP session idle this long has nothing left: its sandbox sessions
    // ended, and no call of it can still be running (the longest a call
    // may ask for).
    let longest_call = config
        .catalog
        .envs
        .values()
        .map(|e| Duration::from_secs(e.limits.ceiling().get()))
        .max()
        .unwrap_or_default();
    let options = Options {
        mcp_idle_timeout: options
            .mcp_idle_timeout
            .max(config.sessions.idle_timeout)
            .max(longest_call + CALL_GRACE),
        ..options.clone()
    };
    let options = &options;
    let server = Server::new(config);
    server.start_probes();
    server.start_control(&shutdown, control_dir.as_deref());
    let served = serve_until_stopped(options, max_body_bytes, server, shutdown.clone()).await;
    shutdown.cancel();
    served
}

/// Serves `prototype`'s environments on `options.addr` until `shutdown`
/// is cancelled or a signal arrives. Errors when it cannot start.
async fn serve_until_stopped(
    options: &Options,
    max_body_bytes: usize,
    prototype: Server,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let addr = parse_addr(&options.addr)?;
    let token = read_token(&token_file(options)?)?;
    let listeners = Listeners::bind(addr)?;
    let bound = listeners
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    if !bound.ip().is_loopback() {
        tracing::warn!(%bound, "listening on a non-loopback address: reachable from the network, guarded by the token only");
    }
    let front = Front::new(
        options,
        max_body_bytes,
        bound,
        token,
        prototype,
        shutdown.clone(),
    );
    // Tests and scripts read this line to find the port.
    tracing::info!("listening on http://{bound}{ENDPOINT}");
    if let Some(other) = listeners.companion_addr() {
        tracing::info!(
            "also answering on http://{other}{ENDPOINT}: the port's other loopback family, held so that no other process can take it"
        );
    }
    let stop = stop_signal(shutdown.clone());
    tokio::pin!(stop);
    let connections = Connections::new(options.max_connections);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.read_timeout);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = connections.room() => {}
        }
        tokio::select! {
            () = &mut stop => break,
            accepted = listeners.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Each answer goes out as several writes (the headers,
                    // then each event of its stream): with Nagle's
                    // algorithm on, the kernel holds the second until the
                    // client acknowledges the first, which a client that
                    // delays its acknowledgements does 40 ms later, on
                    // every call.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(%peer, error = %e, "TCP_NODELAY not set");
                    }
                    let Some(connection) = connections.admit() else {
                        // Filled by authenticated connections since room():
                        // this one is closed, its client may retry.
                        tracing::warn!(%peer, max = options.max_connections, "connection refused: every place is held by a client with the token");
                        continue;
                    };
                    let front = front.clone();
                    let http = http.clone();
                    tokio::spawn(async move {
                        let authenticated = Arc::clone(&connection.authenticated);
                        let service = hyper::service::service_fn(move |request| {
                            let front = front.clone();
                            let authenticated = Arc::clone(&authenticated);
                            async move {
                                Ok::<_, Infallible>(front.answer(request, &authenticated).await)
                            }
                        });
                        let served = http.serve_connection(TokioIo::new(stream), service);
                        tokio::select! {
                            served = served => if let Err(e) = served {
                                tracing::debug!(%peer, error = %e, "connection ended");
                            },
                            () = connection.close.cancelled() => {
                                tracing::debug!(%peer, "connection closed to make room");
                            }
                        }
                        drop(connection);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
    shutdown.cancel();
    tracing::info!("server stopping");
    Ok(())
}

/// Completes when `shutdown` is cancelled, or on SIGTERM or SIGINT. The
/// handlers are installed when this is called, not when the future is
/// first polled: a client may answer `initialize` with SIGTERM at once, and
/// a signal that came before its handler would kill the server with its
/// jails unreaped. Call it within the runtime, before serving.
pub fn stop_signal(shutdown: CancellationToken) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::warn!("cannot watch SIGTERM and SIGINT");
            return shutdown.cancelled().await;
        };
        tokio::select! {
            () = shutdown.cancelled() => {}
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
    }
}

/// What every request passes through before rmcp: the path, the token, and
/// the body read whole (bounded) to learn the JSON-RPC request id.
#[derive(Clone)]
struct Front {
    token: Arc<str>,
    rmcp: Rmcp,
    sessions: Arc<LocalSessionManager>,
    max_body_bytes: usize,
    read_timeout: Duration,
    max_mcp_sessions: usize,
    /// Held while an `initialize` makes its MCP session, so that the cap
    /// holds when several come at once.
    initializing: Arc<tokio::sync::Mutex<()>>,
    /// What each MCP session is doing, and what every client holds: which
    /// MCP session a new one may end.
    activity: Arc<Activity>,
    admission: (Runs, SessionSlots),
}

impl Front {
    fn new(
        options: &Options,
        max_body_bytes: usize,
        bound: SocketAddr,
        token: String,
        prototype: Server,
        shutdown: CancellationToken,
    ) -> Self {
        let origins = LOOPBACK_ORIGINS
            .iter()
            .map(|o| o.to_string())
            .chain(options.allowed_origins.iter().cloned());
        // No SSE priming events (an event with an empty `data:` first, for
        // clients to resume a stream), here and in the session manager's
        // config below: this server keeps no event store, so there is
        // nothing to resume, and Gemini CLI's SDK parses every event's data
        // as JSON and drops the connection on the empty one.
        let mut config = StreamableHttpServerConfig::default()
            .with_sse_retry(None)
            .with_allowed_origins(origins)
            .enforce_origin_validation()
            .with_cancellation_token(shutdown)
            .with_max_request_body_bytes(max_body_bytes);
        if !bound.ip().is_loopback() {
            // Reached by its network name: any Host; the token guards it.
            config = config.disable_allowed_hosts();
        }
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.sse_retry = None;
        sessions.session_config.keep_alive = Some(options.mcp_idle_timeout);
        let sessions = Arc::new(sessions);
        let admission = prototype.admission();
        let rmcp = StreamableHttpService::new(
            move || Ok(prototype.for_another_client()),
            Arc::clone(&sessions),
            config,
        );
        Self {
            token: token.into(),
            rmcp,
            sessions,
            max_body_bytes,
            read_timeout: options.read_timeout,
            max_mcp_sessions: options.max_mcp_sessions,
            initializing: Arc::default(),
            activity: Arc::default(),
            admission,
        }
    }

    /// Answers one request; `authenticated` is the connection's mark, set
    /// when the request carries the token.
    async fn answer(
        &self,
        request: Request<Incoming>,
        authenticated: &std::sync::atomic::AtomicBool,
    ) -> HttpResponse {
        let mut response = self.answer_request(request, authenticated).await;
        // The keep-alive connection closes after the read timeout; clients
        // that read this (undici, among others) stop reusing it before.
        let idle = self.read_timeout.as_secs().saturating_sub(1).max(1);
        if let Ok(value) = header::HeaderValue::from_str(&format!("timeout={idle}")) {
            response
                .headers_mut()
                .insert(::http::HeaderName::from_static("keep-alive"), value);
        }
        response
    }

    async fn answer_request(
        &self,
        request: Request<Incoming>,
        authenticated: &std::sync::atomic::AtomicBool,
    ) -> HttpResponse {
        let path = request.uri().path();
        if path.starts_with("/.well-known/oauth") || path.starts_with("/.well-known/openid") {
            return plain(StatusCode::NOT_FOUND, &format!("Not Found: {NO_OAUTH}"));
        }
        if path != ENDPOINT {
            return plain(
                StatusCode::NOT_FOUND,
                &format!("Not Found: MCP is at {ENDPOINT}"),
            );
        }
        if !authorized(request.headers(), &self.token) {
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                &format!("Unauthorized: {NO_OAUTH}"),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static(CHALLENGE),
            );
            return response;
        }
        authenticated.store(true, Ordering::SeqCst);
        if let Some(Ok(id)) = request.headers().get("mcp-session-id").map(|v| v.to_str()) {
            self.activity.touch(&id.to_owned().into());
        }
        if request.method() == ::http::Method::DELETE {
            return self.end_session(request).await;
        }
        let (parts, body) = request.into_parts();
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        let call = call_in_session(&parts.headers, &body);
        let initializing = if is_initialize(&parts.headers, &body) {
            let held = self.initializing.clone().lock_owned().await;
            if let Err(first_end) = self.room_for_one_more().await {
                return self.sessions_full(first_end);
            }
            Some(held)
        } else {
            None
        };
        let response = self
            .rmcp
            .handle(Request::from_parts(parts, Full::new(body)))
            .await;
        if initializing.is_some()
            && let Some(Ok(id)) = response.headers().get("mcp-session-id").map(|v| v.to_str())
        {
            self.activity.touch(&id.to_owned().into());
        }
        match call {
            Some((session, request_id)) => {
                let busy = self.activity.begin(&session);
                let guard = CancelUnanswered {
                    sessions: Arc::clone(&self.sessions),
                    session,
                    request_id,
                    answered: false,
                };
                response.map(|body| {
                    WatchedBody {
                        body,
                        guard,
                        _busy: busy,
                    }
                    .boxed()
                })
            }
            None => response,
        }
    }
}

impl Front {
    /// A request's body, read whole within the read timeout and the size
    /// limit; else the answer that says which.
    async fn read_body(&self, body: Incoming) -> Result<Bytes, HttpResponse> {
        let read = tokio::time::timeout(
            self.read_timeout,
            Limited::new(body, self.max_body_bytes).collect(),
        );
        match read.await {
            Err(_) => Err(plain(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "Request Timeout: the body did not arrive within {} s",
                    self.read_timeout.as_secs()
                ),
            )),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) => {
                let too_large = e
                    .downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some();
                Err(if too_large {
                    plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &format!("Payload Too Large: at most {} bytes", self.max_body_bytes),
                    )
                } else {
                    plain(StatusCode::BAD_REQUEST, "Bad Request: unreadable body")
                })
            }
        }
    }

    /// Room for one more MCP session: there is, or the least recently
    /// used idle one that holds nothing was ended for it (activity.rs).
    /// Else how long until the first idle one ends, if one is idle.
    async fn room_for_one_more(&self) -> Result<(), Option<Duration>> {
        let open: Vec<SessionId> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        if open.len() < self.max_mcp_sessions {
            return Ok(());
        }
        let (runs, sandbox_sessions) = &self.admission;
        let holds = |id: &SessionId| {
            let client = ClientKey::mcp_session(id);
            runs.held_by(&client) > 0 || sandbox_sessions.held_by(&client) > 0
        };
        let Some(idle) = self.activity.least_recently_used_idle(&open, holds) else {
            tracing::warn!(
                open = open.len(),
                "initialize refused: every MCP session holds sandbox sessions, runs or a request"
            );
            return Err(self.activity.first_idle_end(self.idle_timeout()));
        };
        tracing::info!(session = %idle, open = open.len(), "MCP session ended for a new one: the least recently used of those idle and holding nothing");
        // Ended already (its idle timeout) is as good.
        let _ = self.sessions.close_session(&idle).await;
        self.activity.forget(&idle);
        Ok(())
    }

    fn idle_timeout(&self) -> Duration {
        self.sessions.session_config.keep_alive.unwrap_or_default()
    }

    /// 503 for an `initialize` past the MCP session cap, when none could
    /// be ended for it; the first idle one ends in `first_end`.
    fn sessions_full(&self, first_end: Option<Duration>) -> HttpResponse {
        let first = first_end.map(|d| d.as_secs_f64().ceil() as u64);
        let mut response = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "Service Unavailable: {} MCP sessions are open, the most this server allows \
                 (--{} / {}), and each holds sandbox sessions, runs or a request being \
                 answered, so none was ended for this one; an MCP session ends {} s after its \
                 last request{}, or at once with DELETE /mcp",
                self.max_mcp_sessions,
                crate::settings::MAX_MCP_SESSIONS.flag.unwrap_or_default(),
                crate::settings::MAX_MCP_SESSIONS.var_name(),
                self.idle_timeout().as_secs(),
                first.map_or(String::new(), |s| format!(" (the first idle one in {s} s)"))
            ),
        );
        let retry = first.unwrap_or(30).max(1).to_string();
        if let Ok(value) = header::HeaderValue::from_str(&retry) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }

    /// `DELETE /mcp`: 204 when the MCP session was ended, 404 when the
    /// server has no such session (rmcp answers 202 for both).
    async fn end_session(&self, request: Request<Incoming>) -> HttpResponse {
        let known = match request.headers().get("mcp-session-id").map(|v| v.to_str()) {
            Some(Ok(id)) => self
                .sessions
                .has_session(&id.to_owned().into())
                .await
                .unwrap_or(false),
            // No header (or not text): rmcp says what is wrong.
            _ => true,
        };
        if !known {
            return plain(
                StatusCode::NOT_FOUND,
                "Not Found: no such MCP session (it ended, or never was)",
            );
        }
        let (parts, _) = request.into_parts();
        let mut response = self
            .rmcp
            .handle(Request::from_parts(parts, Full::new(Bytes::new())))
            .await;
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Full::new(Bytes::new()).boxed();
        }
        response
    }
}

/// The MCP session and JSON-RPC id of a request sent in an MCP session
/// (one that can be cancelled); `None` for anything else.
fn call_in_session(headers: &::http::HeaderMap, body: &[u8]) -> Option<(SessionId, Value)> {
    let session = headers.get("mcp-session-id")?.to_str().ok()?;
    let message: Value = serde_json::from_slice(body).ok()?;
    message.get("method")?;
    let id = message.get("id")?.clone();
    Some((session.to_owned().into(), id))
}

/// Whether a request starts an MCP session: `initialize` without one.
fn is_initialize(headers: &::http::HeaderMap, body: &[u8]) -> bool {
    if headers.contains_key("mcp-session-id") {
        return false;
    }
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|message| message.get("method") == Some(&json!("initialize")))
}

fn plain(status: StatusCode, text: &str) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Cancels a request in its MCP session unless its answer was sent whole.
struct CancelUnanswered {
    sessions: Arc<LocalSessionManager>,
    session: SessionId,
    request_id: Value,
    answered: bool,
}

impl Drop for CancelUnanswered {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let cancelled = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.request_id, "reason": "the client went away"},
        });
        let Ok(message) = serde_json::from_value::<ClientJsonRpcMessage>(cancelled) else {
            return;
        };
        let (sessions, session) = (Arc::clone(&self.sessions), self.session.clone());
        tracing::info!(session = %session, request = %self.request_id, "client gone mid-call: cancelling it");
        // Dropped inside the runtime (hyper drops bodies in its tasks).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // An ended session has nothing left to cancel.
                let _ = sessions.accept_message(&session, message).await;
            });
        }
    }
}

/// A response body that tells its guard when it was read to the end; its
/// request counts as being answered until it is dropped.
struct WatchedBody {
    body: BoxBody<Bytes, Infallible>,
    guard: CancelUnanswered,
    _busy: InFlight,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.guard.answered = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
