//! Network by policy: an environment whose manifest's `network` is an
//! allowlist (policy.rs) keeps its jail's own network namespace, with only
//! loopback, and reaches out only through this proxy, which runs in the
//! launcher.
//!
//! - Every jail of such an environment gets a gate of its own ([`Gate`]): a
//!   Unix socket in a directory the server made and owns (no one else may
//!   write there: [`make_dir`]), connectable by that jail's uid only,
//!   which the wrapper binds into the jail (`NIX_SANDBOX_EGRESS_SOCKET`), where a
//!   small bridge (the agent crate's `egress-bridge`, untrusted like
//!   everything in the jail) serves it at 127.0.0.1:3128, the jail's
//!   `HTTP_PROXY`. So each refusal is known to belong to one run or one
//!   session, whose result says it (`network: refused HOST:PORT (WHY)`).
//! - The proxy (proxy.rs) decides every CONNECT by host and port, every
//!   plain HTTP request by host, port, method and path, checks that a
//!   tunnel's TLS server name is the CONNECT host (tls.rs), resolves names
//!   itself (resolve.rs) and refuses addresses that are not the internet
//!   (special.rs) unless a rule names the address. It logs each decision. A gate holds a bounded
//!   number of connections, and closes those that send no request.
//! - Credentials: a rule may attach secrets the server reads at start-up
//!   (a file or a variable of its own, never the store). The jail holds a
//!   placeholder; for those hosts the proxy terminates the TLS with a CA of
//!   this server's (made at start-up, its key only in the server's memory)
//!   that only these jails trust (`NIX_SANDBOX_EGRESS_CA`, a bundle with
//!   the environment's own roots), puts the secret in place of the
//!   placeholder in the headers the credential names, and connects on to
//!   the real host with normal verification. Plain HTTP to such a host is
//!   refused: a secret never goes out in cleartext.

pub mod policy;
mod proxy;
pub mod resolve;
mod special;
mod target;
mod tls;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

use nix::unistd::{Gid, Uid};

use policy::Policy;
use resolve::Resolver;

/// The variable that gives the wrapper its gate's socket.
pub const SOCKET_VAR: &str = "NIX_SANDBOX_EGRESS_SOCKET";
/// The variable that gives the wrapper the jail's CA bundle.
pub const BUNDLE_VAR: &str = "NIX_SANDBOX_EGRESS_CA";
/// The CA bundle the jail of an environment with `network = true` sees,
/// the host's: the default start of a policy jail's bundle.
const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Refusals a result lists; more are counted in one line.
const MAX_REFUSALS_LISTED: usize = 8;

/// Why an environment's jail cannot have its gate.
#[derive(Debug)]
pub enum Error {
    /// The environment's egress could not be set up at start (a secret
    /// that could not be read, a CA bundle that could not be written).
    Unavailable(String),
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(why) => f.write_str(why),
            Error::Io(e) => write!(f, "cannot open the network gate: {e}"),
        }
    }
}

/// What the server's settings give the proxy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settings {
    /// A hosts file the resolver reads first (`NIX_SANDBOX_EGRESS_HOSTS`).
    pub hosts_file: Option<PathBuf>,
    /// Extra trust roots (PEM) for hosts reached through the proxy
    /// (`NIX_SANDBOX_EGRESS_CA_ROOTS`).
    pub extra_roots: Option<PathBuf>,
}

/// One environment's egress, ready at start.
struct EnvEgress {
    policy: Arc<Policy>,
    /// Secrets by credential name.
    secrets: Arc<HashMap<String, String>>,
    /// The jail's CA bundle.
    bundle: PathBuf,
}

/// The server's proxy: its directory of gates, its CA, its resolver, and
/// what each environment with a policy needs.
pub struct Egress {
    dir: Option<PathBuf>,
    resolver: Resolver,
    tls: Option<tls::Tls>,
    envs: HashMap<String, Result<EnvEgress, String>>,
    next: AtomicU64,
    /// What each gate may hold.
    bounds: proxy::Bounds,
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Egress")
            .field("dir", &self.dir)
            .field("envs", &self.envs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Egress {
    /// No environment has a policy (tests, or a catalog without one).
    pub fn none() -> Self {
        Self {
            dir: None,
            resolver: Resolver::system(),
            tls: None,
            envs: HashMap::new(),
            next: AtomicU64::new(0),
            bounds: proxy::Bounds::default(),
        }
    }

    /// The same, each gate holding at most `connections` connections and
    /// waiting `header_timeout` for a request head (tests).
    #[cfg(test)]
    fn bounded(mut self, connections: usize, header_timeout: std::time::Duration) -> Self {
        self.bounds = proxy::Bounds {
            connections,
            header_timeout,
        };
        self
    }

    /// Sets up the proxy for every environment with a policy (`policies`:
    /// each environment's name and policy), reading their secrets. A problem of one environment is logged and
    /// refuses its calls; a problem of the whole proxy (its directory, its
    /// CA, the hosts file) refuses every such environment. A root
    /// launcher's jails run as uids of their own: its gates live under
    /// `runtime` (its jails' runtime directory, root's), each socket given
    /// to its jail's uid alone ([`Egress::gate`]). `lookup` is the
    /// server's environment: the secrets' variables, `XDG_RUNTIME_DIR`.
    pub fn start<'a>(
        policies: impl IntoIterator<Item = (&'a String, &'a Policy)>,
        settings: &Settings,
        runtime: Option<&Path>,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Self {
        let policies: Vec<(&String, &Policy)> = policies.into_iter().collect();
        let mut egress = Self::none();
        if policies.is_empty() {
            return egress;
        }
        let whole = (|| -> Result<(PathBuf, Resolver, tls::Tls), String> {
            let resolver = match &settings.hosts_file {
                Some(path) => Resolver::with_hosts_file(path).map_err(|e| {
                    format!(
                        "NIX_SANDBOX_EGRESS_HOSTS={}: {e} (fix the file or unset the variable)",
                        path.display()
                    )
                })?,
                None => Resolver::system(),
            };
            let tls = tls::Tls::new(settings.extra_roots.as_deref())?;
            let dir = make_dir(runtime, &lookup)
                .map_err(|e| format!("cannot make the gates' directory: {e}"))?;
            Ok((dir, resolver, tls))
        })();
        let (dir, resolver, tls) = match whole {
            Ok(parts) => parts,
            Err(why) => {
                tracing::error!(%why, "network policies cannot be served");
                for (name, _) in policies {
                    egress.envs.insert(name.clone(), Err(why.clone()));
                }
                return egress;
            }
        };
        for (name, policy) in policies {
            let env = prepare(name, policy, &dir, &tls, &lookup);
            match &env {
                Ok(_) => tracing::info!(env = %name, hosts = ?policy.hosts(), "network by policy"),
                Err(why) => tracing::error!(env = %name, %why, "network policy cannot be served"),
            }
            egress.envs.insert(name.clone(), env);
        }
        egress.dir = Some(dir);
        egress.resolver = resolver;
        egress.tls = Some(tls);
        egress
    }

    /// A gate for one jail of the environment named `env`, which has a
    /// policy: its socket is the launcher's, or, when the jail runs as
    /// `owner` (a root launcher's jail: its uid and gid), that uid's alone
    /// (mode 0600).
    pub fn gate(self: &Arc<Self>, env: &str, owner: Option<(Uid, Gid)>) -> Result<Gate, Error> {
        let ready = match self.envs.get(env) {
            Some(Ok(ready)) => ready,
            Some(Err(why)) => return Err(Error::Unavailable(why.clone())),
            None => {
                return Err(Error::Unavailable(
                    "the network policy was not set up at start".into(),
                ));
            }
        };
        let dir = self
            .dir
            .as_ref()
            .ok_or_else(|| Error::Unavailable("no gates' directory".into()))?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let socket = dir.join(format!("{n}.sock"));
        // Bound as root with root's umask, it is not writable, so not
        // connectable, by any other uid until it is given to the jail's.
        let listener = UnixListener::bind(&socket).map_err(Error::Io)?;
        if let Some((uid, gid)) = owner {
            let given = nix::unistd::chown(&socket, Some(uid), Some(gid))
                .map_err(io::Error::from)
                .and_then(|()| {
                    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
                });
            if let Err(e) = given {
                let _ = std::fs::remove_file(&socket);
                return Err(Error::Io(e));
            }
        }
        let shared = Arc::new(proxy::Shared {
            env: env.to_owned(),
            policy: Arc::clone(&ready.policy),
            secrets: Arc::clone(&ready.secrets),
            egress: Arc::clone(self),
            refusals: Mutex::new(Refusals::default()),
            bounds: self.bounds,
        });
        let stop = CancellationToken::new();
        tokio::spawn(proxy::accept(listener, Arc::clone(&shared), stop.clone()));
        Ok(Gate {
            socket,
            bundle: ready.bundle.clone(),
            shared,
            stop,
        })
    }

    fn resolver(&self) -> &Resolver {
        &self.resolver
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The gates' directory, which the server makes, owns and checks. A root
/// server's is `egress` in its jails' runtime directory (root's, under
/// /run/nix-sandbox-mcp, which only root may write), mode 0711: every
/// jail's uid may reach its own socket there, none may list, add, replace
/// or remove anything. A user server's is a fresh directory in its
/// runtime directory (`XDG_RUNTIME_DIR`), else the temporary one, mode
/// 0700: its jails run as its own uid.
fn make_dir(
    runtime: Option<&Path>,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    if let Some(runtime) = runtime {
        let dir = runtime.join("egress");
        std::fs::DirBuilder::new().mode(0o711).create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        let meta = std::fs::symlink_metadata(&dir)?;
        if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o7777 != 0o711 {
            return Err(io::Error::other(format!(
                "{} is not root's with mode 0711",
                dir.display()
            )));
        }
        return Ok(dir);
    }
    let base = lookup("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let mut last = None;
    for attempt in 0..8u64 {
        let tag = RandomState::new().hash_one((std::process::id(), attempt));
        let dir = base.join(format!("nix-sandbox-mcp-egress.{:x}", tag & 0xffff_ffff));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no directory name left")))
}

/// One environment's secrets and bundle.
fn prepare(
    name: &str,
    policy: &Policy,
    dir: &Path,
    tls: &tls::Tls,
    lookup: &impl Fn(&str) -> Option<OsString>,
) -> Result<EnvEgress, String> {
    let mut secrets = HashMap::new();
    for (var, credential) in &policy.credentials {
        let secret = match (&credential.from_file, &credential.from_env) {
            (Some(file), _) => std::fs::read_to_string(file)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|e| format!("credential {var}: cannot read {file}: {e}"))?,
            (None, Some(variable)) => lookup(variable)
                .and_then(|v| v.into_string().ok())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    format!("credential {var}: the server's variable {variable} is unset or empty")
                })?,
            (None, None) => return Err(format!("credential {var}: no source")),
        };
        if secret.is_empty() || secret.contains(['\r', '\n']) {
            return Err(format!(
                "credential {var}: the secret is empty or spans lines"
            ));
        }
        secrets.insert(var.clone(), secret);
    }
    let mut bundle = String::new();
    let own = policy.ca_bundle.as_deref().unwrap_or(HOST_BUNDLE);
    match std::fs::read_to_string(own) {
        Ok(text) => bundle.push_str(&text),
        Err(e) if policy.ca_bundle.is_some() => {
            return Err(format!("ca_bundle {own}: {e}"));
        }
        Err(_) => {}
    }
    push_pem(&mut bundle, tls.extra_roots_pem());
    if policy.credentials.is_empty()
        && !policy
            .allow
            .iter()
            .any(|r| !r.paths.is_empty() || !r.methods.is_empty())
    {
        // No TLS is terminated: the jail need not trust the proxy's CA.
    } else {
        push_pem(&mut bundle, tls.ca_pem());
    }
    let path = dir.join(format!("{name}.ca.pem"));
    std::fs::write(&path, bundle)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| format!("cannot write the jail's CA bundle {}: {e}", path.display()))?;
    Ok(EnvEgress {
        policy: Arc::new(policy.clone()),
        secrets: Arc::new(secrets),
        bundle: path,
    })
}

fn push_pem(bundle: &mut String, pem: &str) {
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(pem);
}

/// The refusals of one jail since they were last taken, in order, once
/// each, and how many more there were.
#[derive(Debug, Default)]
pub struct Refusals {
    lines: Vec<String>,
    more: usize,
}

impl Refusals {
    fn push(&mut self, line: String) {
        if self.lines.contains(&line) {
            return;
        }
        if self.lines.len() < MAX_REFUSALS_LISTED {
            self.lines.push(line);
        } else {
            self.more += 1;
        }
    }

    /// The result's note lines.
    fn notes(self) -> Vec<String> {
        let mut notes = self.lines;
        if self.more > 0 {
            notes.push(format!("network: {} more refused", self.more));
        }
        notes
    }
}

/// One jail's way out: its socket and CA bundle, for the wrapper, and the
/// refusals since they were last taken. Dropping it closes the socket and
/// every connection through it.
pub struct Gate {
    socket: PathBuf,
    bundle: PathBuf,
    shared: Arc<proxy::Shared>,
    stop: CancellationToken,
}

impl Gate {
    /// The wrapper's variables (contract 2).
    pub fn vars(&self) -> [(&'static str, OsString); 2] {
        [
            (SOCKET_VAR, self.socket.clone().into_os_string()),
            (BUNDLE_VAR, self.bundle.clone().into_os_string()),
        ]
    }

    /// The refusals since the last call, as note lines of a result.
    pub fn take_refusals(&self) -> Vec<String> {
        let mut refusals = self
            .shared
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *refusals).notes()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod proxy_tests;
