//! The settings table: every flag and environment variable of the server,
//! declared once with its default and one line of help ([`SETTINGS`]).
//! config.rs reads them (only main calls it); `--help` and the table of
//! docs/configuration.md are rendered from them; the layers below name a
//! setting from here when they tell the user which one to change, and take
//! its default from here, never its value: that reaches them as typed
//! settings built by config.rs.
//!
//! The file is longer than the launcher's others on purpose: the
//! declarations are one table, which the parser, `--help` and the tests
//! read whole; split from them, a flag's name and its meaning would be in
//! two places again.

/// One setting: its flag and environment variable (either or both), its
/// default, and one line of help.
#[derive(Debug)]
pub struct Setting {
    /// What the parser does with it.
    pub key: Key,
    /// The flag, without `--`.
    pub flag: Option<&'static str>,
    /// The flag's short form, if it has one.
    pub short: Option<char>,
    /// The name of the flag's value in `--help` (`PATH`), for a flag that
    /// takes one.
    pub value: Option<&'static str>,
    /// The environment variable, and how it goes with the flag.
    pub var: Option<(&'static str, VarRole)>,
    pub default: Option<Default>,
    pub help: &'static str,
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
pub enum Key {
    Stdio,
    Http,
    TokenFile,
    AllowOrigin,
    Manifest,
    Check,
    MaxCodeBytes,
    MaxSessions,
    MaxSessionsTotal,
    MaxCheckpoints,
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
    FilesMb,
    LayersMb,
    WarmJails,
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
pub const MAX_CHECKPOINTS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_MAX_CHECKPOINTS", VarRole::Fallback)),
    default: Some(Default::Number(0)),
    ..setting(
        Key::MaxCheckpoints,
        "max-checkpoints",
        "checkpoints kept per session: its files at the end of each of its last N calls that \
         changed them, which `from: NAME@CALL` starts a session from (each holds memory of \
         the session's workspace_mb); the oldest go first; 0 keeps none",
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
pub const WARM_JAILS: Setting = Setting {
    value: Some("N"),
    var: Some(("NIX_SANDBOX_WARM_JAILS", VarRole::Fallback)),
    default: Some(Default::Number(4)),
    ..setting(
        Key::WarmJails,
        "warm-jails",
        "most warm jails, all environments together: session jails started ahead, each \
         serving one run without a session (read as the run \
         wrapper's, and returning its outputs; one that finds none ready uses the run wrapper) \
         or one new session, then killed; an environment no call used for 120 s keeps none; \
         0 starts none",
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
         SESSION_IDLE_TIMEOUT, and the longest max_timeout_s plus a few seconds' grace)",
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
pub const FILES_MB: Setting = Setting {
    value: Some("MB"),
    var: Some(("NIX_SANDBOX_FILES_MB", VarRole::Fallback)),
    default: Some(Default::Number(50)),
    ..setting(
        Key::FilesMb,
        "files-mb",
        "most MiB the `files` of one call hold in all (within the environment's workspace_mb)",
    )
};
pub const LAYERS_MB: Setting = Setting {
    value: Some("MB"),
    var: Some(("NIX_SANDBOX_LAYERS_MB", VarRole::Fallback)),
    default: Some(Default::Text("MemTotal")),
    ..setting(
        Key::LayersMb,
        "layers-mb",
        "most MiB the session layers (each a tmpfs of its environment's workspace_mb: \
         /workspace, project changes, checkpoints) reserve in all; a session whose layer \
         does not fit is refused (layers_full)",
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
pub const PROJECT_DEVSHELL: Setting = Setting {
    default: Some(Default::Text("0")),
    ..variable(
        "NIX_SANDBOX_PROJECT_DEVSHELL",
        VarRole::Fallback,
        "1: when PROJECT_DIR holds flake.nix, the environment `project` is its \
         devShells.SYSTEM.default (its packages, variables and shellHook) in a jail, built on \
         first use and again when flake.nix or flake.lock changes; 0: off",
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
        "the log's level (`debug`), or `target=level` directives separated by commas \
         (`info,nix_sandbox_mcp::wrapper=debug`); a value not of that form is said in one \
         line and `info` holds; logs go to stderr, stdout is the protocol",
    )
};

/// Every setting, in the order `--help` shows them.
pub const SETTINGS: [&Setting; 40] = [
    &STDIO,
    &HTTP,
    &TOKEN_FILE,
    &ALLOW_ORIGIN,
    &MANIFEST,
    &CHECK,
    &MAX_CODE_BYTES,
    &MAX_SESSIONS,
    &MAX_SESSIONS_TOTAL,
    &MAX_CHECKPOINTS,
    &SESSION_IDLE_TIMEOUT,
    &SESSION_MAX_LIFETIME,
    &MAX_RUNS,
    &WARM_JAILS,
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
    &FILES_MB,
    &LAYERS_MB,
    &ALLOW_OUTSIDE_STORE,
    &HELP,
    &VERSION,
    &PROJECT_DIR,
    &PROJECT_MOUNT,
    &PROJECT_WRITABLE,
    &PROJECT_DEVSHELL,
    &OUTPUT_DIR,
    &ENVS,
    &SANDBOX_DIR,
    &EGRESS_HOSTS,
    &EGRESS_CA_ROOTS,
    &RUST_LOG,
];
