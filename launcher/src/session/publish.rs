//! Published ports: a session jail's program listening on a port of its
//! own loopback, reached from the host (docs/sessions.md).
//!
//! The jail's network namespace is not the host's and the server cannot
//! enter it (setns needs CAP_SYS_ADMIN over it). Its wrapper's
//! `jail-budget` made that namespace and keeps a forwarder there, outside
//! the jail's pid and mount namespaces, holding the other end of a socket
//! pair the server passed down (`NIX_SANDBOX_PUBLISH_FD`). For each host
//! connection the server asks the forwarder for a port (two bytes), and
//! gets back one byte, 0 with a socket connected to 127.0.0.1:PORT in the
//! jail's namespace (SCM_RIGHTS), else the connect's errno. The server
//! then copies bytes both ways; the forwarder reads nothing of them.
//!
//! Each published port is a listener on 127.0.0.1 with an ephemeral port
//! and, when the server has a runtime directory (`XDG_RUNTIME_DIR`), a Unix
//! socket of mode 0600 in a directory of mode 0700 the server makes there
//! (the private way: only the server's user can connect), both owned by
//! the jail: it closes with its connections when the jail goes
//! (the session ends, resets or is evicted) or the server stops. At most
//! [`MAX_CONNECTIONS`] connections at once per port, each closed after
//! [`IDLE`] without a byte either way; a connection's buffers are
//! [`BUFFER`] bytes each way, so a jail flooding data is read only as fast
//! as the host client takes it.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Connections at once through one published port.
pub const MAX_CONNECTIONS: usize = 16;
/// A connection with no byte either way for this long is closed.
pub const IDLE: Duration = Duration::from_secs(300);
/// The bytes a connection buffers each way.
const BUFFER: usize = 16 * 1024;
/// How long the forwarder may take to answer (its connect is bounded at
/// 5 s).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's end of a session jail's forwarder, and the ports published
/// through it. Dropping it closes every listener and connection.
pub struct Publisher {
    forwarder: Arc<Mutex<UnixStream>>,
    published: Mutex<BTreeMap<u16, Address>>,
    /// Cancelled on drop, and when the server stops (a child of its
    /// shutdown token).
    cancel: CancellationToken,
    _guard: DropGuard,
    label: String,
    /// The server's runtime directory (`XDG_RUNTIME_DIR`), if it has one.
    runtime: Option<PathBuf>,
}

impl Publisher {
    /// A publisher over `forwarder` (the server's end of the socket pair)
    /// for the session `label`, ending with `shutdown`, its private sockets
    /// under `runtime`.
    pub fn new(
        forwarder: UnixStream,
        shutdown: &CancellationToken,
        label: &str,
        runtime: Option<PathBuf>,
    ) -> Self {
        let cancel = shutdown.child_token();
        Self {
            runtime,
            forwarder: Arc::new(Mutex::new(forwarder)),
            published: Mutex::new(BTreeMap::new()),
            _guard: cancel.clone().drop_guard(),
            cancel,
            label: label.to_owned(),
        }
    }

    /// The host addresses of jail port `port`: the ones it has, or new
    /// listeners on 127.0.0.1 and, with a runtime directory, a Unix socket.
    pub async fn publish(&self, port: u16) -> io::Result<Address> {
        if let Some(addr) = lock(&self.published).get(&port) {
            return Ok(addr.clone());
        }
        let tcp = TcpListener::bind(("127.0.0.1", 0)).await?;
        let unix = match self.runtime.as_deref().and_then(socket_dir) {
            Some(dir) => Some(bind_private(dir, port)?),
            None => None,
        };
        let addr = Address {
            tcp: tcp.local_addr()?,
            unix: unix.as_ref().map(|(_, path)| path.clone()),
        };
        let mut published = lock(&self.published);
        if let Some(addr) = published.get(&port) {
            if let Some(path) = &addr.unix {
                let _ = std::fs::remove_file(path);
            }
            return Ok(addr.clone());
        }
        published.insert(port, addr.clone());
        tracing::info!(session = %self.label, port, %addr, "port published");
        let listeners = std::iter::once(Listener::Tcp(tcp))
            .chain(unix.map(|(listener, _)| Listener::Unix(listener)));
        for listener in listeners {
            tokio::spawn(serve(
                listener,
                port,
                Arc::clone(&self.forwarder),
                self.cancel.clone(),
                self.label.clone(),
            ));
        }
        Ok(addr)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        for addr in lock(&self.published).values() {
            if let Some(path) = &addr.unix {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Where a published port is reached on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub tcp: SocketAddr,
    /// The Unix socket, when the server has a runtime directory.
    pub unix: Option<PathBuf>,
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.tcp)?;
        match &self.unix {
            Some(path) => write!(f, " (private: unix:{})", path.display()),
            None => Ok(()),
        }
    }
}

/// The directory of the server's published sockets: a fresh one of mode
/// 0700 in `runtime` (the server's `XDG_RUNTIME_DIR`, the same for every
/// session), made once; `None` when it cannot be made (said once).
fn socket_dir(runtime: &Path) -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let dir = runtime.join(format!("nix-sandbox-mcp-ports.{}", std::process::id()));
        let made = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        match made {
            Ok(()) => Some(dir),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "published ports get no Unix socket");
                None
            }
        }
    })
    .as_deref()
}

/// A Unix socket of mode 0600 in `dir` for jail port `port`, under a name
/// nobody can guess ahead.
fn bind_private(dir: &Path, port: u16) -> io::Result<(UnixListener, PathBuf)> {
    use std::hash::{BuildHasher, RandomState};
    use std::os::unix::fs::PermissionsExt;
    let tag = RandomState::new().hash_one((std::process::id(), port));
    let path = dir.join(format!("{tag:016x}-{port}.sock"));
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok((listener, path))
}

/// A host listener of a published port.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// A host connection.
enum Stream {
    Tcp(TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Listener {
    async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Accepts host connections on `listener` until `cancel`, each carried to
/// jail port `port` while fewer than [`MAX_CONNECTIONS`] are open.
async fn serve(
    listener: Listener,
    port: u16,
    forwarder: Arc<Mutex<UnixStream>>,
    cancel: CancellationToken,
    label: String,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let host = match accepted {
            Ok(host) => host,
            Err(e) => {
                // EMFILE and the like: the next accept may do.
                tracing::warn!(session = %label, port, error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(
                session = %label,
                port,
                "a connection to a published port closed: {MAX_CONNECTIONS} are open"
            );
            continue;
        };
        let (forwarder, cancel, label) = (Arc::clone(&forwarder), cancel.clone(), label.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let jail = tokio::task::spawn_blocking(move || connect(&forwarder, port)).await;
            let jail = match jail {
                Ok(Ok(jail)) => jail,
                Ok(Err(e)) => {
                    tracing::info!(session = %label, port, "a connection to a published port closed: {e}");
                    return;
                }
                Err(_) => return,
            };
            let carried = async move {
                match host {
                    Stream::Tcp(host) => carry(host, jail).await,
                    Stream::Unix(host) => carry(host, jail).await,
                }
            };
            tokio::select! {
                () = cancel.cancelled() => {}
                () = carried => {}
            }
        });
    }
}

/// A socket connected to 127.0.0.1:`port` in the jail's namespace, from
/// the forwarder. An answer that did not come in time or broke the
/// protocol closes the socket pair: a late answer would be taken for the
/// next request's, so every later connection is refused instead.
fn connect(forwarder: &Mutex<UnixStream>, port: u16) -> io::Result<TcpStream> {
    let sock = lock(forwarder);
    let answer = ask(&sock, port);
    if let Err(Broken(_)) = &answer {
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }
    answer.map_err(|Broken(e)| e)?
}

/// A failure that leaves the forwarder's socket out of step.
struct Broken(io::Error);

impl From<io::Error> for Broken {
    fn from(e: io::Error) -> Self {
        Self(e)
    }
}

impl From<nix::errno::Errno> for Broken {
    fn from(e: nix::errno::Errno) -> Self {
        Self(e.into())
    }
}

/// One request and its answer: the connected socket, or the reason the
/// jail refused it (the socket pair still in step).
fn ask(sock: &UnixStream, port: u16) -> Result<io::Result<TcpStream>, Broken> {
    use std::io::Write;
    sock.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    (&*sock).write_all(&port.to_be_bytes())?;
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut byte)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            // SAFETY: the kernel just installed these descriptors here.
            fds.extend(
                received
                    .into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let read = msg.bytes;
    match (read, byte[0], fds.len()) {
        (0, _, _) => Err(Broken(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the jail's forwarder is gone (its sandbox stopped)",
        ))),
        (1, 0, 1) => {
            let stream = std::net::TcpStream::from(fds.remove(0));
            stream.set_nonblocking(true)?;
            Ok(TcpStream::from_std(stream))
        }
        (1, errno, 0) if errno != 0 => {
            let e = io::Error::from_raw_os_error(i32::from(errno));
            Ok(Err(io::Error::new(
                e.kind(),
                format!("the jail's port {port} refused it ({e}; does something listen there?)"),
            )))
        }
        _ => Err(Broken(io::Error::other(
            "the jail's forwarder answered out of protocol",
        ))),
    }
}

/// Copies bytes both ways between `host` and `jail` through a buffer of
/// [`BUFFER`] each way, until both sides have closed or [`IDLE`] passes
/// without a byte.
async fn carry(host: impl AsyncRead + AsyncWrite, jail: TcpStream) {
    let (mut host_r, mut host_w) = tokio::io::split(host);
    let (mut jail_r, mut jail_w) = jail.into_split();
    let (mut up, mut down) = (vec![0u8; BUFFER], vec![0u8; BUFFER]);
    let (mut host_open, mut jail_open) = (true, true);
    while host_open || jail_open {
        let step = tokio::time::timeout(IDLE, async {
            tokio::select! {
                read = host_r.read(&mut up), if host_open => match read {
                    Ok(0) | Err(_) => {
                        host_open = false;
                        jail_w.shutdown().await
                    }
                    Ok(n) => jail_w.write_all(&up[..n]).await,
                },
                read = jail_r.read(&mut down), if jail_open => match read {
                    Ok(0) | Err(_) => {
                        jail_open = false;
                        host_w.shutdown().await
                    }
                    Ok(n) => host_w.write_all(&down[..n]).await,
                },
            }
        })
        .await;
        match step {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
}
