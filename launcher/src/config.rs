//! The configuration: every flag and environment variable of the server,
//! declared once with its default ([`SETTINGS`]), and read into [`Options`]
//! (flags with lexopt). `--help` and the table of docs/configuration.md are
//! rendered from the declarations; tests hold that page and the Nix
//! module's defaults to them (config_tests.rs).
//!
//! A flag overrides its variable. An empty variable counts as unset.
//!
//! The file is longer than the launcher's others on purpose: the
//! declarations are one table, which the parser, `--help` and the tests
//! read whole; split from them, a flag's name and its meaning would be in
//! two places again.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::egress;
use crate::session;

/// One setting: its flag and environment variable (either or both), its
/// default, and one line of help.
#[derive(Debug)]
pub struct Setting {
    /// What the parser does with it.
    key: Key,
    /// The flag, without `--`.
    pub flag: Option<&'static str>,
    /// The flag's short form, if it has one.
    short: Option<char>,
    /// The name of the flag's value in `--help` (`PATH`), for a flag that
    /// takes one.
    value: Option<&'static str>,
    /// The environment variable, and how it goes with the flag.
    pub var: Option<(&'static str, VarRole)>,
    pub default: Option<Default>,
    help: &'static str,
}

/// How a variable goes with its setting's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarRole {
    /// Read when the flag is not given (or there is no flag).
    Fallback,
    /// A colon-separated list read before the flags, which add to it.
    ListFirst,
    /// Read by the server package (the script Nix wraps around this
    /// binary), which turns it into more `--manifest` flags.
    ServerPackage,
}

/// A default value, as `--help` and docs/configuration.md show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    Number(u64),
    Text(&'static str),
}

/// The settings the parser acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Stdio,
    Http,
    TokenFile,
    AllowOrigin,
    Manifest,
    Check,
    MaxCodeBytes,
    MaxSessions,
    MaxSessionsTotal,
    MaxRuns,
    MaxCompositions,
    PackagesCacheMax,
    ClientRunsShare,
    ClientSessionsShare,
    MaxMcpSessions,
    McpSessionIdleTimeout,
    MaxConnections,
    RequestReadTimeout,
    MaxUnreadBytes,
    OutputMaxMb,
    OutputCallMb,
    SessionIdleTimeout,
    SessionMaxLifetime,
    AllowOutsideStore,
    Help,
    Version,
    /// Read where it is used, not parsed here.
    Other,
}

impl Setting {
    /// The default number, at compile time (declarations without one do
    /// not compile where a number is asked of them).
    pub const fn number(&self) -> u64 {
        match self.default {
            Some(Default::Number(n)) => n,
            _ => panic!("this setting has no default number"),
        }
    }

    /// The variable's name.
    pub const fn var_name(&self) -> &'static str {
        match self.var {
            Some((name, _)) => name,
            None => panic!("this setting has no variable"),
        }
    }

    /// The default text.
    pub const fn text(&self) -> &'static str {
        match self.default {
            Some(Default::Text(text)) => text,
            _ => panic!("this setting has no default text"),
        }
    }
}

const fn setting(key: Key, flag: &'static str, help: &'static str) -> Setting {
    Setting {
        key,
        flag: Some(flag),
        short: None,
        value: None,
        var: None,
        default: None,
        help,
    }
}

const fn variable(name: &'static str, role: VarRole, help: &'static str) -> Setting {
    Setting {
        key: Key::Other,
        flag: None,
        short: None,
        value: None,
        var: Some((name, role)),
        default: None,
        help,
    }
}

pub const STDIO: Setting = setting(
    Key::Stdio,
    "stdio",
    "serve MCP on stdin/stdout (the default)",
);
pub const HTTP: Setting = Setting {
    value: Some("ADDR"),
    ..setting(
        Key::Http,
        "http",
        "serve MCP over streamable HTTP at http://ADDR/mcp (HOST:PORT; port 0 picks one, \
         logged on stderr); each MCP session has sessions of its own; a loopback ADDR (or \
         localhost, 0.0.0.0) is held on both 127.0.0.1 and ::1 at the same port, and the \
         server does not start when the other one is taken",
    )
};
pub const TOKEN_FILE: Setting = Setting {
    value: Some("PATH"),
    var: Some(("NIX_SANDBOX_TOKEN_FILE", VarRole::Fallback)),
    ..setting(
        Key::TokenFile,
        "token-file",
        "the bearer token --http requires of every request",
    )
};
pub const ALLOW_ORIGIN: Setting = Setting {
    value: Some("ORIGIN"),
    ..setting(
        Key::AllowOrigin,
        "allow-origin",
        "a browser Origin accepted besides loopback ones (repeatable); other Origins get 403",
    )
};
pub const MANIFEST: Setting = Setting {
    value: Some("PATH"),
    var: Some(("NIX_SANDBOX_MANIFEST", VarRole::ListFirst)),
    ..setting(
        Key::Manifest,
        "manifest",
        "an environments manifest (the server package passes its own); repeatable, a later \
         file adds environments or replaces them by name",
    )
};
pub const CHECK: Setting = setting(
    Key::Check,
    "check",
    "self-test: can this host build the jails, and which limits hold; runs a trivial program \
     in every environment, prints one line each (ok / FAIL: reason), exits 1 if any fails",
);
pub const MAX_CODE_BYTES: Setting = Setting {
    value: Some("N"),
    default: Some(Default::Number(1 << 20)),
    ..setting(
        Key::MaxCodeBytes,
        "max-code-bytes",
        "largest `code` accepted, in bytes",
    )
};
pub const MAX_SESSIONS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_SESSIONS", VarRole::Fallback)),
    default: Some(Default::Number(32)),
    ..setting(
        Key::MaxSessions,
        "max-sessions",
        "most sessions open at once, per MCP client",
    )
};
pub const MAX_SESSIONS_TOTAL: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_SESSIONS_TOTAL", VarRole::Fallback)),
    default: Some(Default::Number(32)),
    ..setting(
        Key::MaxSessionsTotal,
        "max-sessions-total",
        "most sessions open at once, all clients together (and so per client); past them a \
         new session gets server_busy",
    )
};
pub const MAX_RUNS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_RUNS", VarRole::Fallback)),
    default: Some(Default::Number(8)),
    ..setting(
        Key::MaxRuns,
        "max-runs",
        "most runs without a session (each a jail; runs given files too) at once, all \
         clients together; one more waits up to 10 s for a slot, then gets server_busy saying when the first \
         running one ends at the latest",
    )
};
pub const MAX_COMPOSITIONS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_COMPOSITIONS", VarRole::Fallback)),
    default: Some(Default::Number(1)),
    ..setting(
        Key::MaxCompositions,
        "max-compositions",
        "most compositions of `packages` (Nix evaluations and builds) at once, all clients \
         together; one more waits up to its policy's timeout, then is refused",
    )
};
pub const PACKAGES_CACHE_MAX: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_PACKAGES_CACHE_MAX", VarRole::Fallback)),
    default: Some(Default::Number(32)),
    ..setting(
        Key::PackagesCacheMax,
        "packages-cache-max",
        "most composed package sets kept on disk (each a GC root); past them the least \
         recently used are dropped with their roots",
    )
};
pub const CLIENT_RUNS_SHARE: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_CLIENT_RUNS_SHARE", VarRole::Fallback)),
    default: Some(Default::Number(4)),
    ..setting(
        Key::ClientRunsShare,
        "client-runs-share",
        "over HTTP, runs one client (an MCP session; requests without one together) may \
         hold while others want slots; beyond it, it takes a free one only while no client \
         within its share waits and another stays free",
    )
};
pub const CLIENT_SESSIONS_SHARE: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_CLIENT_SESSIONS_SHARE", VarRole::Fallback)),
    default: Some(Default::Number(16)),
    ..setting(
        Key::ClientSessionsShare,
        "client-sessions-share",
        "over HTTP, sessions one client may hold while others want slots; beyond it, it \
         opens one only while another stays free, and its least recently used idle one is \
         ended for a client within its share that finds none free",
    )
};
pub const MAX_MCP_SESSIONS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_MCP_SESSIONS", VarRole::Fallback)),
    default: Some(Default::Number(64)),
    ..setting(
        Key::MaxMcpSessions,
        "max-mcp-sessions",
        "most MCP sessions at once over HTTP; past them `initialize` ends the least recently \
         used idle one that holds no run or session, or else gets 503",
    )
};
pub const MCP_SESSION_IDLE_TIMEOUT: Setting = Setting {
    value: Some("S"),
    var: Some(("NIX_SANDBOX_MCP_SESSION_IDLE_TIMEOUT", VarRole::Fallback)),
    default: Some(Default::Number(300)),
    ..setting(
        Key::McpSessionIdleTimeout,
        "mcp-session-idle-timeout",
        "an MCP session over HTTP ends S seconds after its last request (at least \
         SESSION_IDLE_TIMEOUT, and the longest timeout_s plus a few seconds' grace)",
    )
};
pub const MAX_CONNECTIONS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_CONNECTIONS", VarRole::Fallback)),
    default: Some(Default::Number(128)),
    ..setting(
        Key::MaxConnections,
        "max-connections",
        "most HTTP connections at once; past them a new one closes the oldest that has \
         not sent the token",
    )
};
pub const REQUEST_READ_TIMEOUT: Setting = Setting {
    value: Some("S"),
    var: Some(("NIX_SANDBOX_REQUEST_READ_TIMEOUT", VarRole::Fallback)),
    default: Some(Default::Number(10)),
    ..setting(
        Key::RequestReadTimeout,
        "request-read-timeout",
        "seconds an HTTP request's headers may take to arrive, and as many its body (an \
         idle keep-alive connection is closed after them too)",
    )
};
pub const MAX_UNREAD_BYTES: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_UNREAD_BYTES", VarRole::Fallback)),
    default: Some(Default::Number(16 << 20)),
    ..setting(
        Key::MaxUnreadBytes,
        "max-unread-bytes",
        "bytes of answers a stdio client has not read; past them, or 64 requests \
         unanswered, no more requests are read until it reads",
    )
};
pub const OUTPUT_MAX_MB: Setting = Setting {
    value: Some("MB"),
    var: Some(("NIX_SANDBOX_OUTPUT_MAX_MB", VarRole::Fallback)),
    default: Some(Default::Number(1024)),
    ..setting(
        Key::OutputMaxMb,
        "output-max-mb",
        "most MiB in NIX_SANDBOX_OUTPUT_DIR, what was there counted; past them outputs \
         are not mirrored, and results say so",
    )
};
pub const OUTPUT_CALL_MB: Setting = Setting {
    value: Some("MB"),
    var: Some(("NIX_SANDBOX_OUTPUT_CALL_MB", VarRole::Fallback)),
    default: Some(Default::Number(64)),
    ..setting(
        Key::OutputCallMb,
        "output-call-mb",
        "most MiB one call mirrors to NIX_SANDBOX_OUTPUT_DIR",
    )
};
pub const SESSION_IDLE_TIMEOUT: Setting = Setting {
    value: Some("S"),
    var: Some(("SESSION_IDLE_TIMEOUT", VarRole::Fallback)),
    default: Some(Default::Number(300)),
    ..setting(
        Key::SessionIdleTimeout,
        "session-idle-timeout",
        "a session ends S seconds after its last call",
    )
};
pub const SESSION_MAX_LIFETIME: Setting = Setting {
    value: Some("S"),
    var: Some(("SESSION_MAX_LIFETIME", VarRole::Fallback)),
    default: Some(Default::Number(3600)),
    ..setting(
        Key::SessionMaxLifetime,
        "session-max-lifetime",
        "a session ends S seconds after its first call",
    )
};
pub const ALLOW_OUTSIDE_STORE: Setting = setting(
    Key::AllowOutsideStore,
    "allow-wrappers-outside-store",
    "accept wrappers outside /nix/store: FOR TESTS ONLY, it lets an unreviewed script \
     stand in for a sandbox",
);
pub const HELP: Setting = Setting {
    short: Some('h'),
    ..setting(Key::Help, "help", "print this help")
};
pub const VERSION: Setting = Setting {
    short: Some('V'),
    ..setting(Key::Version, "version", "print the version")
};
pub const PROJECT_DIR: Setting = variable(
    "PROJECT_DIR",
    VarRole::Fallback,
    "a host directory shown read-only in every jail (one that is not an existing directory \
     stops the server)",
);
pub const PROJECT_MOUNT: Setting = Setting {
    default: Some(Default::Text("/project")),
    ..variable(
        "PROJECT_MOUNT",
        VarRole::Fallback,
        "where the jail sees PROJECT_DIR: an absolute path on, in or above none of the \
         jail's own (/nix, /workspace, /tmp, /home/sandbox, /proc, /dev, /etc, /bin, /usr/bin)",
    )
};
pub const PROJECT_WRITABLE: Setting = Setting {
    default: Some(Default::Text("0")),
    ..variable(
        "NIX_SANDBOX_PROJECT_WRITABLE",
        VarRole::Fallback,
        "1: each session sees PROJECT_DIR writable through a copy-on-write layer of its own \
         (the host's tree is never written; the changes are the resource \
         sandbox://SESSION/project.diff); 0: read-only",
    )
};
pub const OUTPUT_DIR: Setting = Setting {
    value: Some("DIR"),
    ..variable(
        "NIX_SANDBOX_OUTPUT_DIR",
        VarRole::Fallback,
        "copies the files calls write to /workspace/outputs to DIR/SESSION/ \
         (DIR/@run-TIME-N/ for a run with files but no session; DIR/client-ID/SESSION/ over \
         HTTP), for a person to open; off when unset",
    )
};
pub const ENVS: Setting = variable(
    "NIX_SANDBOX_ENVS",
    VarRole::ServerPackage,
    "comma-separated flake refs of sandboxes, built at start-up; their manifests come after \
     the --manifest ones, so one named like a bundled environment replaces it",
);
pub const SANDBOX_DIR: Setting = Setting {
    default: Some(Default::Text("~/.config/nix-sandbox-mcp/sandboxes")),
    ..variable(
        "NIX_SANDBOX_DIR",
        VarRole::ServerPackage,
        "a directory of pre-built sandboxes (`nix build` outputs of lib.mkSandbox), served \
         like NIX_SANDBOX_ENVS",
    )
};
pub const EGRESS_HOSTS: Setting = Setting {
    value: Some("PATH"),
    ..variable(
        "NIX_SANDBOX_EGRESS_HOSTS",
        VarRole::Fallback,
        "a hosts file (ADDRESS NAME... lines) the egress proxy of environments with a network \
         policy resolves names from before the host's resolver (tests, pinned names)",
    )
};
pub const EGRESS_CA_ROOTS: Setting = Setting {
    value: Some("PATH"),
    ..variable(
        "NIX_SANDBOX_EGRESS_CA_ROOTS",
        VarRole::Fallback,
        "extra trust roots (PEM) for hosts reached through the egress proxy: the proxy \
         verifies them, and the jails' CA bundle carries them",
    )
};
pub const RUST_LOG: Setting = Setting {
    default: Some(Default::Text("info")),
    ..variable(
        "RUST_LOG",
        VarRole::Fallback,
        "the log level; logs go to stderr, stdout is the protocol",
    )
};

/// Every setting, in the order `--help` shows them.
pub const SETTINGS: [&Setting; 35] = [
    &STDIO,
    &HTTP,
    &TOKEN_FILE,
    &ALLOW_ORIGIN,
    &MANIFEST,
    &CHECK,
    &MAX_CODE_BYTES,
    &MAX_SESSIONS,
    &MAX_SESSIONS_TOTAL,
    &SESSION_IDLE_TIMEOUT,
    &SESSION_MAX_LIFETIME,
    &MAX_RUNS,
    &MAX_COMPOSITIONS,
    &PACKAGES_CACHE_MAX,
    &CLIENT_RUNS_SHARE,
    &CLIENT_SESSIONS_SHARE,
    &MAX_UNREAD_BYTES,
    &MAX_MCP_SESSIONS,
    &MCP_SESSION_IDLE_TIMEOUT,
    &MAX_CONNECTIONS,
    &REQUEST_READ_TIMEOUT,
    &OUTPUT_MAX_MB,
    &OUTPUT_CALL_MB,
    &ALLOW_OUTSIDE_STORE,
    &HELP,
    &VERSION,
    &PROJECT_DIR,
    &PROJECT_MOUNT,
    &PROJECT_WRITABLE,
    &OUTPUT_DIR,
    &ENVS,
    &SANDBOX_DIR,
    &EGRESS_HOSTS,
    &EGRESS_CA_ROOTS,
    &RUST_LOG,
];

/// What the server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Stdio,
    Http,
    Check,
    Help,
    Version,
}

/// The configuration, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub mode: Mode,
    /// `NIX_SANDBOX_MANIFEST`'s, then `--manifest`'s.
    pub manifests: Vec<PathBuf>,
    pub allow_outside_store: bool,
    pub max_code_bytes: usize,
    /// `--http ADDR`, `--token-file`, `--allow-origin` (mode [`Mode::Http`]).
    pub http_addr: Option<String>,
    pub token_file: Option<PathBuf>,
    pub allowed_origins: Vec<String>,
    /// The session table's limits.
    pub sessions: session::Settings,
    /// `PROJECT_DIR`, and where the jail sees it (`PROJECT_MOUNT`).
    pub project_dir: Option<OsString>,
    pub project_mount: Option<String>,
    /// `NIX_SANDBOX_PROJECT_WRITABLE`: a copy-on-write layer per session.
    pub project_writable: bool,
    /// `NIX_SANDBOX_OUTPUT_DIR`.
    pub output_dir: Option<PathBuf>,
    /// `NIX_SANDBOX_EGRESS_HOSTS`, `NIX_SANDBOX_EGRESS_CA_ROOTS`.
    pub egress: egress::Settings,
    /// What the server holds at once, all clients together.
    pub bounds: Bounds,
}

/// The server-wide bounds: how much of each thing the server holds at
/// once, whatever the clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Runs without a session (and runs given files) at once.
    pub max_runs: usize,
    /// Compositions of `packages` at once, and composed sets kept on disk.
    pub max_compositions: usize,
    pub packages_cache_max: usize,
    /// Over HTTP, the runs and sessions one client may hold while others
    /// want slots (admission.rs).
    pub client_runs_share: usize,
    pub client_sessions_share: usize,
    /// Bytes of answers written for a stdio client and not read yet.
    pub max_unread_bytes: usize,
    /// MCP sessions over HTTP, and how long an idle one lives.
    pub max_mcp_sessions: usize,
    pub mcp_idle_timeout: Duration,
    /// HTTP connections, and the time a request's headers (then its body)
    /// may take.
    pub max_connections: usize,
    pub read_timeout: Duration,
    /// Bytes in the outputs mirror in all, and mirrored per call.
    pub output_max_bytes: u64,
    pub output_call_bytes: u64,
}

/// The defaults declared above.
impl std::default::Default for Bounds {
    fn default() -> Self {
        let count = |s: &Setting| usize::try_from(s.number()).unwrap_or(usize::MAX);
        Self {
            max_runs: count(&MAX_RUNS),
            max_compositions: count(&MAX_COMPOSITIONS),
            packages_cache_max: count(&PACKAGES_CACHE_MAX),
            client_runs_share: count(&CLIENT_RUNS_SHARE),
            client_sessions_share: count(&CLIENT_SESSIONS_SHARE),
            max_unread_bytes: count(&MAX_UNREAD_BYTES),
            max_mcp_sessions: count(&MAX_MCP_SESSIONS),
            mcp_idle_timeout: Duration::from_secs(MCP_SESSION_IDLE_TIMEOUT.number()),
            max_connections: count(&MAX_CONNECTIONS),
            read_timeout: Duration::from_secs(REQUEST_READ_TIMEOUT.number()),
            output_max_bytes: OUTPUT_MAX_MB.number().saturating_mul(1 << 20),
            output_call_bytes: OUTPUT_CALL_MB.number().saturating_mul(1 << 20),
        }
    }
}

/// Reads `args` (without the program name) and the environment
/// (`lookup`). The error is one line for stderr. `--help` and `--version`
/// are answered whatever the environment holds.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<Options, String> {
    use lexopt::prelude::*;

    let var = |setting: &Setting| lookup(setting.var_name()).filter(|v| !v.is_empty());
    let mut opts = Options {
        mode: Mode::Stdio,
        manifests: Vec::new(),
        allow_outside_store: false,
        max_code_bytes: usize::try_from(MAX_CODE_BYTES.number()).unwrap_or(usize::MAX),
        http_addr: None,
        token_file: None,
        allowed_origins: Vec::new(),
        sessions: session::Settings::default(),
        project_dir: None,
        project_mount: None,
        project_writable: false,
        output_dir: None,
        egress: egress::Settings::default(),
        bounds: Bounds::default(),
    };
    if let Some(list) = var(&MANIFEST) {
        opts.manifests
            .extend(std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()));
    }
    let mut stdio = false;
    // Numbers given as flags, by the setting they are for.
    let mut numbers: Vec<(Key, u64)> = Vec::new();
    let mut parser = lexopt::Parser::from_args(args);
    let fail = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(fail)? {
        let setting = match &arg {
            Long(name) => SETTINGS.iter().find(|s| s.flag == Some(*name)),
            Short(c) => SETTINGS.iter().find(|s| s.short == Some(*c)),
            Value(_) => None,
        };
        let Some(setting) = setting else {
            return Err(fail(arg.unexpected()));
        };
        let flag = format!("--{}", setting.flag.unwrap_or_default());
        let value = match setting.value {
            Some(_) => Some(parser.value().map_err(fail)?),
            None => None,
        };
        let text = || string(value.clone().unwrap_or_default(), &flag);
        match setting.key {
            Key::Stdio => stdio = true,
            Key::Http => {
                opts.mode = Mode::Http;
                opts.http_addr = Some(text()?);
            }
            Key::TokenFile => opts.token_file = value.map(PathBuf::from),
            Key::AllowOrigin => opts.allowed_origins.push(text()?),
            Key::Manifest => opts.manifests.extend(value.map(PathBuf::from)),
            Key::Check => opts.mode = Mode::Check,
            Key::MaxCodeBytes => {
                opts.max_code_bytes = value
                    .unwrap_or_default()
                    .parse()
                    .map_err(|e| format!("invalid value for {flag}: {e}"))?;
            }
            Key::MaxSessions
            | Key::MaxSessionsTotal
            | Key::MaxRuns
            | Key::MaxCompositions
            | Key::PackagesCacheMax
            | Key::ClientRunsShare
            | Key::ClientSessionsShare
            | Key::MaxMcpSessions
            | Key::McpSessionIdleTimeout
            | Key::MaxConnections
            | Key::RequestReadTimeout
            | Key::MaxUnreadBytes
            | Key::OutputMaxMb
            | Key::OutputCallMb
            | Key::SessionIdleTimeout
            | Key::SessionMaxLifetime => {
                numbers.push((setting.key, positive_flag(&flag, &text()?)?));
            }
            Key::AllowOutsideStore => opts.allow_outside_store = true,
            Key::Help => {
                return Ok(Options {
                    mode: Mode::Help,
                    ..opts
                });
            }
            Key::Version => {
                return Ok(Options {
                    mode: Mode::Version,
                    ..opts
                });
            }
            // Only variables have no key, and they have no flag.
            Key::Other => return Err(format!("{flag} is not a flag")),
        }
    }
    if opts.mode == Mode::Http && stdio {
        return Err("--stdio and --http exclude each other".into());
    }
    if opts.mode != Mode::Http && (opts.token_file.is_some() || !opts.allowed_origins.is_empty()) {
        return Err("--token-file and --allow-origin go with --http".into());
    }
    if opts.mode == Mode::Http && opts.token_file.is_none() {
        opts.token_file = var(&TOKEN_FILE).map(PathBuf::from);
    }
    // Each variable is checked even when its flag overrides it: a bad value
    // is a mistake worth telling either way.
    let number = |setting: &Setting| -> Result<u64, String> {
        let flag = numbers
            .iter()
            .rev()
            .find(|(key, _)| *key == setting.key)
            .map(|&(_, n)| n);
        let text = lookup(setting.var_name()).and_then(|v| v.into_string().ok());
        let from_var = match text.filter(|t| !t.trim().is_empty()) {
            None => None,
            Some(text) => {
                Some(positive(&text).map_err(|e| format!("{}={text:?}: {e}", setting.var_name()))?)
            }
        };
        Ok(flag.or(from_var).unwrap_or(setting.number()))
    };
    let count =
        |setting: &Setting| number(setting).map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let secs = |setting: &Setting| number(setting).map(Duration::from_secs);
    let mib = |setting: &Setting| number(setting).map(|n| n.saturating_mul(1 << 20));
    let max_total = count(&MAX_SESSIONS_TOTAL)?;
    opts.sessions = session::Settings {
        // A client's own cap is never more than all clients' together.
        max_sessions: count(&MAX_SESSIONS)?.min(max_total),
        max_total,
        idle_timeout: secs(&SESSION_IDLE_TIMEOUT)?,
        max_lifetime: secs(&SESSION_MAX_LIFETIME)?,
    };
    opts.bounds = Bounds {
        max_runs: count(&MAX_RUNS)?,
        max_compositions: count(&MAX_COMPOSITIONS)?,
        packages_cache_max: count(&PACKAGES_CACHE_MAX)?,
        client_runs_share: count(&CLIENT_RUNS_SHARE)?,
        client_sessions_share: count(&CLIENT_SESSIONS_SHARE)?,
        max_unread_bytes: count(&MAX_UNREAD_BYTES)?,
        max_mcp_sessions: count(&MAX_MCP_SESSIONS)?,
        mcp_idle_timeout: secs(&MCP_SESSION_IDLE_TIMEOUT)?,
        max_connections: count(&MAX_CONNECTIONS)?,
        read_timeout: secs(&REQUEST_READ_TIMEOUT)?,
        output_max_bytes: mib(&OUTPUT_MAX_MB)?,
        output_call_bytes: mib(&OUTPUT_CALL_MB)?,
    };
    opts.project_dir = var(&PROJECT_DIR);
    if opts.project_dir.is_some() {
        let mount = var(&PROJECT_MOUNT).and_then(|m| m.into_string().ok());
        opts.project_mount = Some(mount.unwrap_or_else(|| PROJECT_MOUNT.text().into()));
    }
    opts.project_writable = match var(&PROJECT_WRITABLE).as_deref().and_then(|v| v.to_str()) {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => {
            return Err(format!(
                "invalid value for {}: {other:?}; expected 1 (writable through a layer per \
                 session) or 0 (read-only)",
                PROJECT_WRITABLE.var_name()
            ));
        }
    };
    opts.output_dir = var(&OUTPUT_DIR).map(PathBuf::from);
    opts.egress = egress::Settings {
        hosts_file: var(&EGRESS_HOSTS).map(PathBuf::from),
        extra_roots: var(&EGRESS_CA_ROOTS).map(PathBuf::from),
    };
    Ok(opts)
}

/// A positive integer (seconds or a count).
fn positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err("expected a positive integer".into()),
        Ok(n) => Ok(n),
    }
}

fn positive_flag(flag: &str, text: &str) -> Result<u64, String> {
    positive(text).map_err(|e| format!("invalid value for {flag}: {e}"))
}

fn string(value: OsString, flag: &str) -> Result<String, String> {
    value
        .into_string()
        .map_err(|v| format!("invalid value for {flag}: {v:?} is not UTF-8"))
}

/// The width of `--help`'s lines.
const HELP_WIDTH: usize = 80;
/// Where a setting's help starts on its line.
const HELP_COLUMN: usize = 28;

/// `--help`, rendered from [`SETTINGS`].
pub fn help() -> String {
    let mut text = String::from(
        "nix-sandbox-mcp: sandboxed code execution for LLM agents over MCP\n\n\
         Usage: nix-sandbox-mcp [--stdio | --http ADDR] [--manifest PATH]... [OPTIONS]\n\n\
         Options (a flag overrides its variable; an empty variable is unset):\n",
    );
    for setting in SETTINGS.iter().filter(|s| s.flag.is_some()) {
        let mut name = String::new();
        if let Some(short) = setting.short {
            name.push_str(&format!("-{short}, "));
        }
        name.push_str(&format!("--{}", setting.flag.unwrap_or_default()));
        if let Some(value) = setting.value {
            name.push_str(&format!(" {value}"));
        }
        let mut notes = Vec::new();
        if let Some((var, role)) = setting.var {
            notes.push(match role {
                VarRole::ListFirst => format!("{var}, colon-separated, comes first"),
                _ => var.to_owned(),
            });
        }
        entry(&mut text, &name, setting, notes);
    }
    text.push_str("\nEnvironment:\n");
    for setting in SETTINGS.iter().filter(|s| s.flag.is_none()) {
        let mut name = setting.var_name().to_owned();
        if let Some(value) = setting.value {
            name.push_str(&format!("={value}"));
        }
        let mut notes = Vec::new();
        if let Some((_, VarRole::ServerPackage)) = setting.var {
            notes.push("read by the server package".to_owned());
        }
        entry(&mut text, &name, setting, notes);
    }
    text
}

/// One setting's lines of `--help`: its name, then its help wrapped in a
/// column, with `notes` and its default in parentheses.
fn entry(text: &mut String, name: &str, setting: &Setting, mut notes: Vec<String>) {
    // A no-break space keeps "default N" on one line; a space once wrapped.
    match setting.default {
        Some(Default::Number(n)) => notes.push(format!("default\u{a0}{n}")),
        Some(Default::Text(t)) => notes.push(format!("default\u{a0}{t}")),
        None => {}
    }
    let mut help = setting.help.to_owned();
    if !notes.is_empty() {
        help.push_str(&format!(" ({})", notes.join("; ")));
    }
    let indent = " ".repeat(HELP_COLUMN);
    let head = format!("  {name}");
    let mut line = if head.len() + 2 <= HELP_COLUMN {
        format!("{head:<HELP_COLUMN$}")
    } else {
        text.push_str(&head);
        text.push('\n');
        indent.clone()
    };
    let mut empty = true;
    for word in help.split(' ') {
        if !empty && line.len() + 1 + word.len() > HELP_WIDTH {
            text.push_str(&line);
            text.push('\n');
            line = indent.clone();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    text.push_str(&line);
    text.push('\n');
    *text = text.replace('\u{a0}', " ");
}

/// The line before docs/configuration.md's table, which says how to
/// regenerate it, and the line after it.
#[cfg(test)]
pub const DOC_BEGIN: &str = "<!-- Generated from launcher/src/config.rs; regenerate with \
                             `UPDATE_DOCS=1 cargo test -p launcher config_doc`. -->";
#[cfg(test)]
pub const DOC_END: &str = "<!-- End of the generated table. -->";

/// docs/configuration.md's table, rendered from [`SETTINGS`] as `--help` is:
/// one row a setting, with its flag, its variable, its default and its
/// help. Only a test uses it, to keep the page equal to the declarations.
#[cfg(test)]
pub fn markdown() -> String {
    let mut text =
        String::from("| flag | variable | default | meaning |\n| --- | --- | --- | --- |\n");
    for setting in SETTINGS {
        let flag = setting.flag.map_or(String::new(), |flag| {
            let short = setting.short.map_or(String::new(), |c| format!("`-{c}`, "));
            let value = setting.value.map_or(String::new(), |v| format!(" {v}"));
            format!("{short}`--{flag}{value}`")
        });
        let var = setting
            .var
            .map_or(String::new(), |(name, role)| match role {
                VarRole::Fallback => format!("`{name}`"),
                VarRole::ListFirst => format!("`{name}` (colon-separated, read before the flags)"),
                VarRole::ServerPackage => format!("`{name}` (read by the server package)"),
            });
        let default = match setting.default {
            Some(Default::Number(n)) => n.to_string(),
            Some(Default::Text(t)) => format!("`{t}`"),
            None => String::new(),
        };
        let help = setting.help.replace('|', "\\|");
        text.push_str(&format!("| {flag} | {var} | {default} | {help} |\n"));
    }
    text
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
