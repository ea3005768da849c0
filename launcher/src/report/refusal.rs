//! Refusals: what a `run` call gets when nothing ran, a machine-readable code
//! and a sentence the model can act on. Every sentence is written here; the
//! layers below say why in their own typed errors, which convert into a
//! [`Refusal`] (the `From` impls at the end).

use std::fmt;

use crate::admission;
use crate::catalog::PROJECT_ENV;
use crate::catalog::names::{Allow, MAX_NAME_BYTES, MAX_PACKAGES, NameError};
use crate::packages::ComposeError;
use crate::session;
use crate::wrapper::{NotStarted, StartError};

/// The machine-readable error codes of the `run` tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    UnknownEnv,
    EmptyCode,
    CodeTooLarge,
    WrapperMissing,
    SandboxUnavailable,
    InvalidArguments,
    BadSessionName,
    SessionEnvMismatch,
    SessionBusy,
    TooManySessions,
    ServerBusy,
    SessionsUnsupported,
    BadFilePath,
    FilesTooLarge,
    FileExists,
    BadPackageName,
    PackagesNotAllowed,
    UnknownPackage,
    PackageNotCached,
    PackagesTimedOut,
    NixUnreachable,
    PackagesFailed,
    SessionPackagesMismatch,
    DevShellFailed,
    PortNotAllowed,
    UnknownSession,
    UnknownCheckpoint,
    LayersFull,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnknownEnv => "unknown_env",
            ErrorCode::EmptyCode => "empty_code",
            ErrorCode::CodeTooLarge => "code_too_large",
            ErrorCode::WrapperMissing => "wrapper_missing",
            ErrorCode::SandboxUnavailable => "sandbox_unavailable",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::BadSessionName => "bad_session_name",
            ErrorCode::SessionEnvMismatch => "session_env_mismatch",
            ErrorCode::SessionBusy => "session_busy",
            ErrorCode::TooManySessions => "too_many_sessions",
            ErrorCode::ServerBusy => "server_busy",
            ErrorCode::SessionsUnsupported => "sessions_unsupported",
            ErrorCode::BadFilePath => "bad_file_path",
            ErrorCode::FilesTooLarge => "files_too_large",
            ErrorCode::FileExists => "file_exists",
            ErrorCode::BadPackageName => "bad_package_name",
            ErrorCode::PackagesNotAllowed => "packages_not_allowed",
            ErrorCode::PortNotAllowed => "port_not_allowed",
            ErrorCode::UnknownPackage => "unknown_package",
            ErrorCode::PackageNotCached => "package_not_cached",
            ErrorCode::PackagesTimedOut => "packages_timed_out",
            ErrorCode::NixUnreachable => "nix_unreachable",
            ErrorCode::PackagesFailed => "packages_failed",
            ErrorCode::SessionPackagesMismatch => "session_packages_mismatch",
            ErrorCode::DevShellFailed => "dev_shell_failed",
            ErrorCode::UnknownSession => "unknown_session",
            ErrorCode::UnknownCheckpoint => "unknown_checkpoint",
            ErrorCode::LayersFull => "layers_full",
        }
    }
}

/// A refused call: nothing was run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code.as_str(), self.message)
    }
}

impl Refusal {
    fn new(code: ErrorCode, message: String) -> Self {
        Self { code, message }
    }

    /// `known` is sorted; `manifest_errors` are the start-up problems
    /// (`file: field: problem`), which explain why an environment is missing.
    pub fn unknown_env(name: &str, known: &[&str], manifest_errors: &[String]) -> Self {
        let mut msg = if known.is_empty() {
            format!("unknown environment `{name}`: this server has no usable environment.")
        } else {
            format!(
                "unknown environment `{name}`; use one of: {}.",
                known.join(", ")
            )
        };
        if !manifest_errors.is_empty() {
            msg.push_str(" Manifest errors at start-up: ");
            msg.push_str(&manifest_errors.join("; "));
            msg.push('.');
        }
        Self::new(ErrorCode::UnknownEnv, msg)
    }

    pub fn empty_code() -> Self {
        Self::new(
            ErrorCode::EmptyCode,
            "`code` is empty; pass the program text to run.".into(),
        )
    }

    pub fn code_too_large(len: usize, max: usize) -> Self {
        Self::new(
            ErrorCode::CodeTooLarge,
            format!(
                "`code` is {len} bytes, over the limit of {max} bytes; nothing was run. \
                 Send a shorter program, or split the work into several runs."
            ),
        )
    }

    pub fn wrapper_missing(env: &str, path: &str) -> Self {
        Self::new(
            ErrorCode::WrapperMissing,
            format!(
                "the wrapper of environment `{env}` ({path}) is missing or not executable; \
                 nothing was run. The server's manifest is stale: tell the user to rebuild \
                 it and restart the server, or use another environment."
            ),
        )
    }

    pub fn sandbox_unavailable(env: &str, reason: &str) -> Self {
        Self::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "the sandbox of environment `{env}` cannot start on this host, so nothing \
                 was run: {reason}. Tell the user; `nix-sandbox-mcp --check` shows details."
            ),
        )
    }

    pub fn invalid_arguments(problem: &str) -> Self {
        Self::new(
            ErrorCode::InvalidArguments,
            format!(
                "{problem}; `run` takes `code` (string, required), `env` (string), \
                 `session` (string), `files` (a list of {{\"path\", \"content\" or \"base64\", \"replace\"}}), \
                 `packages` (a list of strings) and `timeout_s` (whole seconds)."
            ),
        )
    }

    /// `name` is shown cut to 80 characters, quoted as JSON would.
    pub fn bad_session_name(name: &str) -> Self {
        let shown: String = name.chars().take(80).collect();
        let more = if shown.len() < name.len() { "..." } else { "" };
        Self::new(
            ErrorCode::BadSessionName,
            format!(
                "invalid session name {shown:?}{more}: use 1 to 64 characters out of \
                 A-Z a-z 0-9 _ . -"
            ),
        )
    }

    pub fn session_env_mismatch(name: &str, bound: &str, requested: &str) -> Self {
        Self::new(
            ErrorCode::SessionEnvMismatch,
            format!(
                "session `{name}` belongs to environment `{bound}`; nothing was run. Call it \
                 with env `{bound}`, or pick another session name for `{requested}`."
            ),
        )
    }

    /// `within_s`: when the running call ends at the latest (its timeout
    /// and the interrupt's grace), if known.
    pub fn session_busy(name: &str, within_s: Option<u64>) -> Self {
        let ends = within_s.map_or(String::new(), |s| {
            format!(" It ends within {s} s at the latest (the environment's timeout).")
        });
        Self::new(
            ErrorCode::SessionBusy,
            format!(
                "session `{name}` is still running another call (one call at a time per \
                 session); nothing was run.{ends} Wait for that call's result, or use another \
                 session name."
            ),
        )
    }

    /// A session whose layer does not fit in the server's bound on all
    /// layers (`full` says what holds it).
    pub fn layers_full(full: &crate::project::pool::Full) -> Self {
        Self::new(
            ErrorCode::LayersFull,
            format!(
                "{full}; nothing was run. End a session you no longer need, or wait for one to \
                 end; the server's owner can raise the bound (--layers-mb)."
            ),
        )
    }

    /// `open` lists the open sessions' names.
    pub fn too_many_sessions(max: usize, open: &[String], idle_s: u64) -> Self {
        Self::new(
            ErrorCode::TooManySessions,
            format!(
                "{max} sessions are open, the most allowed; nothing was run. Reuse one of \
                 them ({}), call without `session`, or wait: a session ends after {idle_s} s \
                 without calls.",
                open.join(", ")
            ),
        )
    }

    /// No run slot for this client (`full`) for as long as a run waits in
    /// line (`waited_s`): the server's limit, or the client's share while
    /// other clients wanted slots.
    pub fn runs_full(full: &admission::Full, waited_s: u64) -> Self {
        let first = full.frees_within.map_or(String::new(), |d| {
            let s = d.as_secs_f64().ceil() as u64;
            format!(" The first of them ends within {s} s at the latest (its timeout).")
        });
        let message = if full.beyond_share() {
            format!(
                "this client is running {} programs at once, beyond its share of {} of the \
                 server's {} ({}) while other clients want them, and none of its own ended \
                 within {waited_s} s; nothing was run.{first} Wait for their results before \
                 starting more.",
                full.held,
                full.share,
                full.max,
                admission::Runs::share_setting()
            )
        } else {
            format!(
                "the server is running {} programs at once, its limit for all clients \
                 together ({}), and none ended within {waited_s} s; nothing was run.{first} \
                 Try again then, or tell the user to raise the limit.",
                full.max,
                admission::Runs::setting()
            )
        };
        Self::new(ErrorCode::ServerBusy, message)
    }

    /// The call was cancelled (or the server stopped) while it waited for a
    /// free slot.
    pub fn cancelled_in_line() -> Self {
        Self::new(
            ErrorCode::ServerBusy,
            "the call was cancelled while it waited for a free slot; nothing was run.".into(),
        )
    }

    /// `max` sessions are open, all clients together; the first idle one
    /// ends in `first_end_s` unless called.
    pub fn sessions_full(max: usize, idle_s: u64, first_end_s: Option<u64>) -> Self {
        Self::new(
            ErrorCode::ServerBusy,
            format!(
                "{max} sessions are open on this server, its limit for all clients together \
                 ({}); nothing was run. Call without `session`, or wait: a session ends \
                 after {idle_s} s without calls{}.",
                admission::SessionSlots::setting(),
                first_end(first_end_s)
            ),
        )
    }

    /// This client holds `held` sessions, at least its `share` of the
    /// server's `max`, and the last free slot is kept for another client.
    pub fn sessions_beyond_share(
        held: usize,
        share: usize,
        max: usize,
        idle_s: u64,
        first_end_s: Option<u64>,
    ) -> Self {
        Self::new(
            ErrorCode::ServerBusy,
            format!(
                "this client has {held} sessions open, beyond its share of {share} of the \
                 server's {max} ({}), and the server's last free session is kept for another \
                 client; nothing was run. Reuse one of its sessions, call without `session`, \
                 or wait: a session ends after {idle_s} s without calls{}.",
                admission::SessionSlots::share_setting(),
                first_end(first_end_s)
            ),
        )
    }

    /// `path` (shown cut to 80 characters) is not a /workspace path (`why`).
    pub fn bad_file_path(path: &str, why: &str) -> Self {
        let shown: String = path.chars().take(80).collect();
        let more = if shown.len() < path.len() { "..." } else { "" };
        Self::new(
            ErrorCode::BadFilePath,
            format!(
                "file path {shown:?}{more} is refused: {why}; nothing was run. Give paths \
                 relative to /workspace, like `data/input.csv`, without `..`."
            ),
        )
    }

    /// The session's agent could not write a file (its sentence names it).
    pub fn files_refused(why: &str) -> Self {
        Self::new(
            ErrorCode::BadFilePath,
            format!(
                "a file cannot be written into /workspace: {why}; nothing was run, and none \
                 of the call's files was written."
            ),
        )
    }

    /// A file passed in is there already (`what`, the agent's sentence,
    /// names it) and the call did not say `replace`.
    pub fn file_exists(what: &str) -> Self {
        Self::new(
            ErrorCode::FileExists,
            format!(
                "{what}; nothing was run, and none of the call's files was written. To \
                 overwrite it, pass that file with `\"replace\": true`."
            ),
        )
    }

    pub fn files_too_large(what: &str) -> Self {
        Self::new(
            ErrorCode::FilesTooLarge,
            format!(
                "{what}; nothing was run. Pass fewer or smaller files; read larger inputs \
                 from the project directory, when the server has one."
            ),
        )
    }

    /// `files` needs the session agent, which `env` lacks.
    pub fn files_unsupported(env: &str) -> Self {
        Self::new(
            ErrorCode::SessionsUnsupported,
            format!(
                "environment `{env}` has no session agent, which writes `files`; nothing was \
                 run. Write them from the code instead, or use another environment."
            ),
        )
    }

    pub fn sessions_unsupported(env: &str) -> Self {
        Self::new(
            ErrorCode::SessionsUnsupported,
            format!(
                "environment `{env}` has no sessions; nothing was run. Call it without \
                 `session` (each call then starts fresh)."
            ),
        )
    }
}

impl Refusal {
    /// `publish = port` that `env` does not allow (`allowed`), or without a
    /// session (`in_session` false).
    pub fn port_not_allowed(
        env: &str,
        port: u16,
        allowed: &[std::num::NonZeroU16],
        in_session: bool,
    ) -> Self {
        let list = allowed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let message = match (allowed.is_empty(), in_session) {
            (true, _) => format!(
                "environment `{env}` publishes no port; nothing was run. Call without `publish`."
            ),
            (false, false) => format!(
                "`publish` needs a `session` (the port closes with it); nothing was run. \
                 Name a session; `{env}` publishes {list}."
            ),
            (false, true) => format!(
                "port {port} is not one that `{env}` publishes ({list}); nothing was run. \
                 Listen on one of those."
            ),
        };
        Self::new(ErrorCode::PortNotAllowed, message)
    }

    /// `env` takes no packages on demand (the server's policy is off, or
    /// it is not one of the server's own environments).
    pub fn packages_off(env: &str) -> Self {
        Self::new(
            ErrorCode::PackagesNotAllowed,
            format!(
                "environment `{env}` takes no `packages` on this server; nothing was run. \
                 Call without `packages`, or use an environment that has the tool."
            ),
        )
    }

    /// A `packages` entry the checks refused before anything was evaluated.
    pub fn bad_packages(problem: &NameError, allow: &Allow) -> Self {
        match problem {
            NameError::TooMany(n) => Self::new(
                ErrorCode::BadPackageName,
                format!(
                    "{n} packages were asked for, more than {MAX_PACKAGES}; nothing was run. \
                     Ask for fewer."
                ),
            ),
            NameError::Syntax(name) => {
                let shown: String = name.chars().take(80).collect();
                Self::new(
                    ErrorCode::BadPackageName,
                    format!(
                        "{shown:?} is not a nixpkgs attribute name; nothing was run. Use names \
                         like `jq` or `python3Packages.pandas`: parts of A-Z a-z 0-9 _ + - \
                         joined by dots, at most {MAX_NAME_BYTES} characters."
                    ),
                )
            }
            NameError::NotAllowed(name) => {
                let deeper = match allow.prefix_above(name) {
                    Some(prefix) => format!(
                        " A prefix allows the packages directly in its scope, `{prefix}NAME`, \
                         not paths through its attributes."
                    ),
                    None => String::new(),
                };
                Self::new(
                    ErrorCode::PackagesNotAllowed,
                    format!(
                        "`{name}` is not allowed on this server (allowed: {}); nothing was run.{deeper} \
                         Ask for an allowed package, or tell the user to add it to \
                         packagesOnDemand.allow.",
                        allow.describe()
                    ),
                )
            }
        }
    }

    /// The `project` environment could not be built from the dev shell of
    /// the flake in `flake`: one line naming the flake and the error.
    pub fn dev_shell_failed(flake: &std::path::Path, e: &ComposeError) -> Self {
        let flake = flake.display().to_string();
        let why = match e {
            ComposeError::Busy(_) => return Self::compose_failed(PROJECT_ENV, e),
            ComposeError::TimedOut(s) => {
                format!("building it took longer than {s} s and was stopped")
            }
            ComposeError::Unknown(line)
            | ComposeError::NotCached(line)
            | ComposeError::OutsideScope(line)
            | ComposeError::Unreachable(line)
            | ComposeError::Failed(line) => {
                let line = line.strip_prefix(&format!("{flake}: ")).unwrap_or(line);
                line.to_owned()
            }
        };
        Self::new(
            ErrorCode::DevShellFailed,
            format!(
                "the environment `{PROJECT_ENV}` could not be built from the dev shell of the \
                 flake {flake}: {why}; nothing was run. The other environments work; tell the \
                 user (`nix develop {flake}` shows the same error)."
            ),
        )
    }

    pub fn compose_failed(env: &str, e: &ComposeError) -> Self {
        match e {
            ComposeError::Unknown(line) => Self::new(
                ErrorCode::UnknownPackage,
                format!(
                    "no package {line} in this server's nixpkgs; nothing was run. Check the \
                     attribute name (search.nixos.org lists them)."
                ),
            ),
            ComposeError::NotCached(drv) => Self::new(
                ErrorCode::PackageNotCached,
                format!(
                    "{drv} is not in the binary cache and this server does not build from \
                     source; nothing was run. Ask for another package, or tell the user to \
                     set packagesOnDemand.build."
                ),
            ),
            ComposeError::OutsideScope(line) => Self::new(
                ErrorCode::PackagesNotAllowed,
                format!(
                    "{line}: not allowed (an allowlist prefix allows only the packages of its \
                     own scope); nothing was run. Ask for a package of the scope, or tell the \
                     user to add the name itself to packagesOnDemand.allow."
                ),
            ),
            ComposeError::Busy(slots) => Self::new(
                ErrorCode::ServerBusy,
                format!(
                    "the server was getting other packages ({slots} at once, {}) for as long \
                     as this call may wait; nothing was run. Try again later, or call without \
                     `packages`.",
                    admission::setting_names(&crate::settings::MAX_COMPOSITIONS)
                ),
            ),
            ComposeError::TimedOut(s) => Self::new(
                ErrorCode::PackagesTimedOut,
                format!(
                    "getting the packages for `{env}` took longer than {s} s and was stopped; \
                     nothing was run. Ask for fewer or smaller packages."
                ),
            ),
            ComposeError::Unreachable(line) => Self::new(
                ErrorCode::NixUnreachable,
                format!(
                    "the server cannot reach the Nix store to get packages ({line}); nothing \
                     was run. Call without `packages`, and tell the user: the server's user \
                     needs the Nix daemon (or a store it owns)."
                ),
            ),
            ComposeError::Failed(line) => Self::new(
                ErrorCode::PackagesFailed,
                format!(
                    "the packages for `{env}` could not be added ({line}); nothing was run. \
                     Call without `packages`, or tell the user."
                ),
            ),
        }
    }

    /// Session `name` was made with `bound` (maybe none); the call asks
    /// for `requested`.
    pub fn session_packages_mismatch(name: &str, bound: &[String], requested: &[String]) -> Self {
        let list = |names: &[String]| match names.is_empty() {
            true => "none".to_owned(),
            false => names.join(", "),
        };
        Self::new(
            ErrorCode::SessionPackagesMismatch,
            format!(
                "session `{name}` was created with packages {}, and a session's packages are \
                 fixed; nothing was run. Call it without `packages` (it keeps its own), or use \
                 a new session name for packages {}.",
                list(bound),
                list(requested)
            ),
        )
    }
}

/// ` (the first in N s)`, when known.
fn first_end(first_end_s: Option<u64>) -> String {
    first_end_s.map_or(String::new(), |s| format!(" (the first in {s} s)"))
}

/// A run refused for want of a slot (admission.rs).
impl From<admission::Full> for Refusal {
    fn from(e: admission::Full) -> Self {
        Self::runs_full(&e, admission::QUEUE_WAIT.as_secs())
    }
}

/// A wrapper that did not start: without its cgroup the sandbox cannot hold
/// its limits; else the wrapper itself failed: gone from the store, or
/// there and refused by the host, whose reason is said.
impl From<NotStarted> for Refusal {
    fn from(e: NotStarted) -> Self {
        match e.cause {
            StartError::Cgroup(_) | StartError::Egress(_) | StartError::Project(_) => {
                Self::sandbox_unavailable(&e.env, &e.cause.to_string())
            }
            StartError::Layers(full) => Self::layers_full(&full),
            StartError::Spawn(_) if crate::probe::wrapper_ready(&e.wrapper) => {
                Self::sandbox_unavailable(
                    &e.env,
                    &format!("its wrapper {} could not start: {}", e.wrapper, e.cause),
                )
            }
            StartError::Spawn(_) => Self::wrapper_missing(&e.env, &e.wrapper),
        }
    }
}

impl From<session::Error> for Refusal {
    fn from(e: session::Error) -> Self {
        use session::Error;
        match e {
            Error::EnvMismatch {
                session,
                bound,
                requested,
            } => Self::session_env_mismatch(&session, &bound, &requested),
            Error::PackagesMismatch {
                session,
                bound,
                requested,
            } => Self::session_packages_mismatch(&session, &bound, &requested),
            Error::Busy { session, within_s } => Self::session_busy(&session, within_s),
            Error::TooMany { max, open, idle_s } => Self::too_many_sessions(max, &open, idle_s),
            Error::ServerFull {
                max,
                idle_s,
                first_end_s,
            } => Self::sessions_full(max, idle_s, first_end_s),
            Error::BeyondShare {
                held,
                share,
                max,
                idle_s,
                first_end_s,
            } => Self::sessions_beyond_share(held, share, max, idle_s, first_end_s),
            Error::Stopping { env } => Self::sandbox_unavailable(&env, "the server is stopping"),
            Error::NotStarted(e) => e.into(),
            Error::InterpreterUnavailable { env, message } => {
                Self::sandbox_unavailable(&env, &message)
            }
            Error::FilesRefused(why) => Self::files_refused(&why),
            Error::FileExists(what) => Self::file_exists(&what),
            Error::Fork(why) => Self::fork_refused(why),
        }
    }
}

impl Refusal {
    /// Why `from` cannot start the session.
    fn fork_refused(why: session::ForkRefused) -> Self {
        use session::ForkRefused;
        match why {
            ForkRefused::UnknownSession { session, open } => {
                let open = match open.is_empty() {
                    true => "none".to_owned(),
                    false => open.join(", "),
                };
                Self::new(
                    ErrorCode::UnknownSession,
                    format!(
                        "`from`: no open session is named `{session}` (open: {open}); nothing \
                         was run. Name an open session of yours, or drop `from`."
                    ),
                )
            }
            ForkRefused::UnknownCheckpoint {
                session,
                asked,
                kept,
            } => {
                let kept: Vec<String> = kept.iter().map(|n| format!("{session}@{n}")).collect();
                Self::new(
                    ErrorCode::UnknownCheckpoint,
                    format!(
                        "`from`: session `{session}` keeps no state of the end of its call \
                         {asked} (it keeps {}, the oldest going first; a call that changed no \
                         file has its previous one); nothing was run. Name one of those.",
                        kept.join(", ")
                    ),
                )
            }
            ForkRefused::NoCheckpoints { session, why } => Self::new(
                ErrorCode::UnknownCheckpoint,
                format!(
                    "`from`: session `{session}` has no checkpoint to start from: {why}; \
                     nothing was run. Drop `from`."
                ),
            ),
            ForkRefused::Open { session, from } => Self::new(
                ErrorCode::InvalidArguments,
                format!(
                    "`from`: session `{session}` is open, so it cannot start from `{from}`; \
                     nothing was run. Name a new session, or `end` this one first."
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_env_lists_known_envs_and_manifest_errors() {
        let e = Refusal::unknown_env(
            "rust",
            &["node", "python"],
            &["/m.json: environments.x.limits.timeout_s: must be positive".into()],
        );
        assert_eq!(e.code, ErrorCode::UnknownEnv);
        let text = e.to_string();
        assert!(text.starts_with("error[unknown_env]: unknown environment `rust`"));
        assert!(text.contains("node, python"));
        assert!(text.contains("/m.json: environments.x.limits.timeout_s"));
    }

    #[test]
    fn no_env_at_all_says_so() {
        let e = Refusal::unknown_env("python", &[], &[]);
        assert!(e.message.contains("no usable environment"));
    }
}
