//! The proxy behind one gate: HTTP/1 from the jail's bridge (hyper), every
//! request decided by the environment's policy before anything leaves.
//!
//! - CONNECT: the host and port against the rules; the name resolved here
//!   and the host's own networks refused; then the tunnel's ClientHello
//!   must name the CONNECT host (no fronting another name through an
//!   allowed one). A tunnel whose rules must see requests (paths, methods,
//!   credentials) is terminated with the server's CA and each request in
//!   it decided like plain HTTP, then sent on over verified TLS.
//! - Plain HTTP (an absolute URI, or a Host header): host, port, method and
//!   path against the rules, then sent on. Redirects are the client's to
//!   follow, so a redirect to a denied host is a new request, refused.
//! - A request is sent on with the path the rules decided on (policy.rs,
//!   target.rs); a GET or HEAD with a body is refused, since an upstream
//!   that ignores the body would read it as a request of its own that no
//!   rule decided; a credential goes only inside TLS the proxy terminated.
//! - Every decision is logged; every refusal is kept for the run's result
//!   and answered with 403 (or the tunnel closed) and a line saying why.
//! - One jail cannot take the server's descriptors: a gate holds at most
//!   [`Bounds::connections`] connections at once (tunnels included; more
//!   wait in the socket's backlog, which costs the server none), and a
//!   connection that sends no complete request head within
//!   [`Bounds::header_timeout`], or sits that long idle between requests,
//!   is closed.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as _, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::policy::{Policy, Transport, Tunnel, normal_host};
use super::special::special;
use super::{Egress, Refusals};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// How long a connection to an allowed host may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the jail's side of a terminated tunnel may take to finish its
/// TLS handshake, once its ClientHello came.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one gate may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections open at once through one gate, tunnels included.
    pub connections: usize,
    /// How long a request head may take to arrive, and a connection may sit
    /// idle between requests.
    pub header_timeout: Duration,
}

impl Default for Bounds {
    /// 64 connections: more than any package manager opens at once to its
    /// hosts (pip keeps 10 per host, npm 15 at once, uv downloads 50), and
    /// at 2 descriptors each (the jail's side and the host's), 128 of the
    /// server's. 30 s for a head: hyper's default, what an idle keep-alive
    /// connection is closed after (clients open a new one), and far longer
    /// than a client in the jail takes to write a head.
    fn default() -> Self {
        Self {
            connections: 64,
            header_timeout: Duration::from_secs(30),
        }
    }
}

/// One connection's place in its gate: held by the connection, and by the
/// tunnel it becomes, until both end.
type Slot = Arc<OwnedSemaphorePermit>;

/// What every connection of one gate shares.
pub struct Shared {
    pub env: String,
    pub policy: Arc<Policy>,
    pub secrets: Arc<std::collections::HashMap<String, String>>,
    pub egress: Arc<Egress>,
    pub refusals: Mutex<Refusals>,
    pub bounds: Bounds,
}

impl Shared {
    /// Logs and keeps a refusal; returns its line.
    fn refuse(&self, host: &str, port: u16, why: &str) -> String {
        let line = format!("network: refused {} ({why})", authority(host, port));
        tracing::info!(env = %self.env, host, port, reason = why, "egress refused");
        self.refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line.clone());
        line
    }

    fn allow(&self, host: &str, port: u16, what: &str) {
        tracing::info!(env = %self.env, host, port, what, "egress allowed");
    }

    /// A TCP connection to `host:port`, resolved here, to an address of the
    /// internet (or one a rule names).
    async fn dial(&self, host: &str, port: u16) -> Result<TcpStream, String> {
        let addrs = self
            .egress
            .resolver()
            .resolve(host, port)
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?;
        let mut refused = None;
        let usable: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| match special(a.ip()) {
                Some(why) if !self.policy.names_address(host, port, a.ip()) => {
                    refused.get_or_insert((a.ip(), why));
                    false
                }
                _ => true,
            })
            .collect();
        if usable.is_empty() {
            return Err(match refused {
                Some((ip, why)) => format!("resolves to {ip}: {why}, a special-purpose range"),
                None => format!("{host} has no address"),
            });
        }
        let mut last = String::from("no address");
        for addr in usable {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => {
                    // Bytes go on as they come: the jail's client chose
                    // when to write, and Nagle's algorithm would hold a
                    // second small write until the first is acknowledged,
                    // up to the upstream's delayed ACK (40 ms).
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(%addr, error = %e, "TCP_NODELAY not set");
                    }
                    return Ok(tcp);
                }
                Ok(Err(e)) => last = format!("cannot connect to {addr}: {e}"),
                Err(_) => last = format!("cannot connect to {addr}: timed out"),
            }
        }
        Err(last)
    }
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Serves the gate's socket until `stop`, at most `shared.bounds.connections`
/// connections at once: past them none is accepted until one ends.
pub async fn accept(listener: UnixListener, shared: Arc<Shared>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(shared.bounds.connections));
    let mut told = false;
    loop {
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !std::mem::replace(&mut told, true) {
                    tracing::info!(
                        env = %shared.env,
                        connections = shared.bounds.connections,
                        "egress gate full: this jail's new connections wait until one ends"
                    );
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                }
            }
        };
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(env = %shared.env, error = %e, "egress gate accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (shared, stop, slot) = (Arc::clone(&shared), stop.clone(), Arc::new(slot));
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = serve(stream, shared, slot) => {}
            }
        });
    }
}

/// hyper's HTTP/1 server for the jail's side, its head timeout set.
fn http1(bounds: Bounds) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout);
    http
}

/// One connection from the jail's bridge.
async fn serve(stream: UnixStream, shared: Arc<Shared>, slot: Slot) {
    let bounds = shared.bounds;
    let service = service_fn(move |req| {
        let (shared, slot) = (Arc::clone(&shared), Arc::clone(&slot));
        async move { Ok::<_, Infallible>(handle(req, shared, slot).await) }
    });
    if let Err(e) = http1(bounds)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await
    {
        tracing::debug!(error = %e, "egress connection ended");
    }
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>, slot: Slot) -> Response<Body> {
    if req.method() == Method::CONNECT {
        connect(req, shared, slot).await
    } else {
        plain(req, shared).await
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body + "\n"))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn forbidden(line: String) -> Response<Body> {
    text(
        StatusCode::FORBIDDEN,
        format!("nix-sandbox-mcp egress proxy: {line}"),
    )
}

/// Host and port of a request target (`host:port`), or an error.
fn target(uri: &Uri, default_port: u16) -> Option<(String, u16)> {
    let authority = uri.authority()?;
    Some((
        normal_host(authority.host()),
        authority.port_u16().unwrap_or(default_port),
    ))
}

async fn connect(req: Request<Incoming>, shared: Arc<Shared>, slot: Slot) -> Response<Body> {
    let Some((host, port)) = target(req.uri(), 443) else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port".into());
    };
    let tunnel = match shared.policy.connect(&host, port) {
        Ok(tunnel) => tunnel,
        Err(why) => return forbidden(shared.refuse(&host, port, &why.to_string())),
    };
    // A tunnel passed through is dialled now, so that a refused address is
    // a 403 the client sees; a terminated one dials per request.
    let upstream = match tunnel {
        Tunnel::Pass => match shared.dial(&host, port).await {
            Ok(tcp) => Some(tcp),
            Err(why) => return forbidden(shared.refuse(&host, port, &why)),
        },
        Tunnel::Terminate => None,
    };
    tokio::spawn(async move {
        // The tunnel keeps the connection's place in its gate.
        let _slot = slot;
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                tracing::debug!(error = %e, "CONNECT upgrade failed");
                return;
            }
        };
        let mut client = TokioIo::new(upgraded);
        let (hello, name) = match super::tls::client_hello(&mut client).await {
            Ok(hello) => hello,
            Err(why) => {
                shared.refuse(&host, port, &why);
                return;
            }
        };
        if let Err(why) = same_name(&host, name.as_deref()) {
            shared.refuse(&host, port, &why);
            return;
        }
        match upstream {
            Some(mut tcp) => {
                shared.allow(&host, port, "tunnel");
                if tcp.write_all(&hello).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut tcp).await;
                }
            }
            None => terminate(client, hello, host, port, shared).await,
        }
    });
    Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    )
}

/// The tunnel's TLS server name must be its CONNECT host; a tunnel to an
/// address literal may name none.
fn same_name(host: &str, name: Option<&str>) -> Result<(), String> {
    match name {
        Some(name) if normal_host(name) == host => Ok(()),
        None if host.parse::<IpAddr>().is_ok() => Ok(()),
        Some(name) => Err(format!(
            "TLS server name {} is not the CONNECT host",
            normal_host(name)
        )),
        None => Err("the TLS hello names no server".into()),
    }
}

/// Terminates a tunnel's TLS and serves its requests one by one.
async fn terminate(
    client: TokioIo<hyper::upgrade::Upgraded>,
    hello: Vec<u8>,
    host: String,
    port: u16,
    shared: Arc<Shared>,
) {
    let Some(tls) = shared.egress.tls.as_ref() else {
        shared.refuse(&host, port, "the proxy has no CA");
        return;
    };
    let acceptor = match tls.acceptor(&host) {
        Ok(acceptor) => acceptor,
        Err(why) => {
            shared.refuse(&host, port, &why);
            return;
        }
    };
    let handshake = acceptor.accept(Replay::new(hello, client));
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::info!(env = %shared.env, host, port, error = %e, "the jail's TLS to the proxy failed");
            return;
        }
        Err(_) => {
            tracing::info!(env = %shared.env, host, port, "the jail's TLS to the proxy timed out");
            return;
        }
    };
    let bounds = shared.bounds;
    let service = service_fn(move |req| {
        let (shared, host) = (Arc::clone(&shared), host.clone());
        async move { Ok::<_, Infallible>(inside(req, &host, port, shared).await) }
    });
    if let Err(e) = http1(bounds)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "terminated tunnel ended");
    }
}

/// One request inside a terminated tunnel to `host:port`.
async fn inside(
    req: Request<Incoming>,
    host: &str,
    port: u16,
    shared: Arc<Shared>,
) -> Response<Body> {
    if let Some((named, named_port)) = target(req.uri(), 443)
        && (named != host || named_port != port)
    {
        let why = format!(
            "a request for {} inside its tunnel",
            authority(&named, named_port)
        );
        return forbidden(shared.refuse(host, port, &why));
    }
    let (origin, credentials) = match decide(&req, host, port, Transport::Tls, &shared) {
        Ok(decided) => decided,
        Err(line) => return forbidden(line),
    };
    let tcp = match shared.dial(host, port).await {
        Ok(tcp) => tcp,
        Err(why) => return forbidden(shared.refuse(host, port, &why)),
    };
    let Some(tls) = shared.egress.tls.as_ref() else {
        return forbidden(shared.refuse(host, port, "the proxy has no TLS client"));
    };
    let upstream = match tls.connect(host, tcp).await {
        Ok(upstream) => upstream,
        Err(e) => {
            let why = format!("TLS to {host} failed: {e}");
            return forbidden(shared.refuse(host, port, &why));
        }
    };
    let mut req = req;
    inject(&mut req, &credentials, &shared);
    shared.allow(
        host,
        port,
        &format!("{} {origin} (terminated)", req.method()),
    );
    send(req, &origin, host, port, upstream).await
}

/// Decides a request to `host:port` by the policy: the origin-form target
/// to send (the path decided on, the query as it came) and the names of
/// the credentials to put in, or the refusal's line (kept and logged).
fn decide(
    req: &Request<Incoming>,
    host: &str,
    port: u16,
    transport: Transport,
    shared: &Shared,
) -> Result<(String, Vec<String>), String> {
    let method = req.method();
    if matches!(*method, Method::GET | Method::HEAD) && !req.body().is_end_stream() {
        let why = format!("a {method} with a body: send data with POST");
        return Err(shared.refuse(host, port, &why));
    }
    let allowed = shared
        .policy
        .request(host, port, method.as_str(), req.uri().path(), transport)
        .map_err(|why| shared.refuse(host, port, &why.to_string()))?;
    let origin = match req.uri().query() {
        Some(query) => format!("{}?{query}", allowed.path),
        None => allowed.path,
    };
    let credentials = allowed.credentials.into_iter().map(str::to_owned).collect();
    Ok((origin, credentials))
}

/// Puts each credential's secret in place of its placeholder, in the
/// headers it names.
fn inject(req: &mut Request<Incoming>, credentials: &[String], shared: &Shared) {
    for name in credentials {
        let (Some(credential), Some(secret)) = (
            shared.policy.credentials.get(name),
            shared.secrets.get(name),
        ) else {
            continue;
        };
        for header in &credential.headers {
            let Ok(header) = HeaderName::try_from(header.as_str()) else {
                continue;
            };
            let values: Vec<HeaderValue> = req.headers().get_all(&header).iter().cloned().collect();
            if values.is_empty() {
                continue;
            }
            req.headers_mut().remove(&header);
            for value in values {
                let replaced = value
                    .to_str()
                    .ok()
                    .filter(|v| v.contains(&credential.placeholder))
                    .and_then(|v| {
                        HeaderValue::from_str(&v.replace(&credential.placeholder, secret)).ok()
                    });
                req.headers_mut().append(&header, replaced.unwrap_or(value));
            }
        }
    }
}

/// A plain HTTP request through the proxy.
async fn plain(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let from_uri = target(req.uri(), 80);
    let from_header = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<Uri>().ok())
        .and_then(|uri| target(&uri, 80));
    let Some((host, port)) = from_uri.or(from_header) else {
        return text(StatusCode::BAD_REQUEST, "a request needs a host".into());
    };
    if req.uri().scheme_str().is_some_and(|s| s != "http") {
        return forbidden(shared.refuse(
            &host,
            port,
            "only http:// is proxied; https goes through CONNECT",
        ));
    }
    let (origin, credentials) = match decide(&req, &host, port, Transport::Cleartext, &shared) {
        Ok(decided) => decided,
        Err(line) => return forbidden(line),
    };
    let tcp = match shared.dial(&host, port).await {
        Ok(tcp) => tcp,
        Err(why) => return forbidden(shared.refuse(&host, port, &why)),
    };
    let mut req = req;
    inject(&mut req, &credentials, &shared);
    shared.allow(&host, port, &format!("{} {origin}", req.method()));
    send(req, &origin, &host, port, tcp).await
}

/// Headers of one hop only, never passed on.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// Sends `req` to `host:port` over `io` with the target `origin` (the one
/// decided), and its response back.
async fn send<S>(
    req: Request<Incoming>,
    origin: &str,
    host: &str,
    port: u16,
    io: S,
) -> Response<Body>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut parts, body) = req.into_parts();
    parts.uri = match origin.parse() {
        Ok(uri) => uri,
        Err(_) => return text(StatusCode::BAD_REQUEST, "bad request target".into()),
    };
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    let host_header = if port == 80 || port == 443 {
        host.to_owned()
    } else {
        authority(host, port)
    };
    if let Ok(value) = HeaderValue::from_str(&host_header) {
        parts.headers.insert(header::HOST, value);
    }
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
            Ok(pair) => pair,
            Err(e) => return text(StatusCode::BAD_GATEWAY, format!("upstream: {}", chain(&e))),
        };
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            for name in HOP_BY_HOP {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, body.map_err(BoxError::from).boxed())
        }
        Err(e) => text(StatusCode::BAD_GATEWAY, format!("upstream: {}", chain(&e))),
    }
}

/// An error and its causes, `: `-separated (hyper's own says only its
/// kind, "connection error", its cause the reason).
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(e) = cause {
        line.push_str(&format!(": {e}"));
        cause = e.source();
    }
    line
}

/// A stream that gives back bytes already read (a ClientHello) before
/// reading on; writes go straight through.
struct Replay<S> {
    head: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Replay<S> {
    fn new(head: Vec<u8>, inner: S) -> Self {
        Self { head, at: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replay<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.at < self.head.len() {
            let n = buf.remaining().min(self.head.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replay<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
