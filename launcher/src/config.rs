//! The configuration: the flags and environment variables of the settings
//! table (settings.rs) read into [`Options`] (flags with lexopt), the typed
//! values the parts are built from; only main calls [`parse`]. `--help` and
//! the table of docs/configuration.md are rendered from the table; tests
//! hold that page and the Nix module's defaults to it (config_tests.rs).
//!
//! A flag overrides its variable. An empty variable counts as unset.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use crate::egress;
use crate::session;
use crate::settings::*;

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
    /// `NIX_SANDBOX_PROJECT_DEVSHELL`: the project's dev shell as `project`.
    pub project_devshell: bool,
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
    /// Bytes the `files` of one call hold at most, all together.
    pub files_bytes: usize,
    /// Bytes all session layers may reserve together; `None`: the default,
    /// MemTotal (project::pool::default_bytes), read at start.
    pub layers_bytes: Option<u64>,
    /// Warm jails idle or starting, all environments together; 0: none.
    pub warm_jails: usize,
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
            files_bytes: usize::try_from(FILES_MB.number().saturating_mul(1 << 20))
                .unwrap_or(usize::MAX),
            layers_bytes: None,
            warm_jails: count(&WARM_JAILS),
        }
    }
}

/// A `1` or `0` (or unset) variable's value; `on` and `off` say what each
/// means, for the error.
fn switch(setting: &Setting, value: Option<&OsStr>, on: &str, off: &str) -> Result<bool, String> {
    match value.map(OsStr::to_str) {
        None | Some(Some("0")) => Ok(false),
        Some(Some("1")) => Ok(true),
        Some(other) => Err(format!(
            "invalid value for {}: {:?}; expected 1 ({on}) or 0 ({off})",
            setting.var_name(),
            other.unwrap_or("(not UTF-8)")
        )),
    }
}

/// Reads `args` (without the program name) and the environment
/// (`lookup`). The error is one line for stderr. `--help` and `--version`
/// are answered whatever the environment holds.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<Options, String> {
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
        project_devshell: false,
        output_dir: None,
        egress: egress::Settings::default(),
        bounds: Bounds::default(),
    };
    if let Some(list) = var(&MANIFEST) {
        opts.manifests
            .extend(std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()));
    }
    let Some(flags) = read_flags(args, &mut opts)? else {
        return Ok(opts);
    };
    if opts.mode == Mode::Http && flags.stdio {
        return Err("--stdio and --http exclude each other".into());
    }
    if opts.mode != Mode::Http && (opts.token_file.is_some() || !opts.allowed_origins.is_empty()) {
        return Err("--token-file and --allow-origin go with --http".into());
    }
    if opts.mode == Mode::Http && opts.token_file.is_none() {
        opts.token_file = var(&TOKEN_FILE).map(PathBuf::from);
    }
    let numbers = Numbers {
        flags: &flags.numbers,
        lookup: &lookup,
    };
    opts.sessions = numbers.sessions()?;
    opts.bounds = numbers.bounds()?;
    opts.project_dir = var(&PROJECT_DIR);
    if opts.project_dir.is_some() {
        let mount = var(&PROJECT_MOUNT).and_then(|m| m.into_string().ok());
        opts.project_mount = Some(mount.unwrap_or_else(|| PROJECT_MOUNT.text().into()));
    }
    opts.project_writable = switch(
        &PROJECT_WRITABLE,
        var(&PROJECT_WRITABLE).as_deref(),
        "writable through a layer per session",
        "read-only",
    )?;
    opts.project_devshell = switch(
        &PROJECT_DEVSHELL,
        var(&PROJECT_DEVSHELL).as_deref(),
        "the project's dev shell as the environment `project`",
        "off",
    )?;
    opts.output_dir = var(&OUTPUT_DIR).map(PathBuf::from);
    opts.egress = egress::Settings {
        hosts_file: var(&EGRESS_HOSTS).map(PathBuf::from),
        extra_roots: var(&EGRESS_CA_ROOTS).map(PathBuf::from),
    };
    Ok(opts)
}

/// What the flags said that is not in [`Options`] yet.
struct Flags {
    stdio: bool,
    /// Numbers given as flags, by the setting they are for.
    numbers: Vec<(Key, u64)>,
}

/// Reads the flags into `opts`; `None` when one asked for `--help` or
/// `--version` (the mode, then), which end the reading.
fn read_flags(
    args: impl IntoIterator<Item = OsString>,
    opts: &mut Options,
) -> Result<Option<Flags>, String> {
    use lexopt::prelude::*;

    let mut flags = Flags {
        stdio: false,
        numbers: Vec::new(),
    };
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
            Key::Stdio => flags.stdio = true,
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
            | Key::MaxCheckpoints
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
            | Key::FilesMb
            | Key::LayersMb
            | Key::WarmJails
            | Key::SessionIdleTimeout
            | Key::SessionMaxLifetime => {
                flags
                    .numbers
                    .push((setting.key, count_flag(setting.key, &flag, &text()?)?));
            }
            Key::AllowOutsideStore => opts.allow_outside_store = true,
            Key::Help => {
                opts.mode = Mode::Help;
                return Ok(None);
            }
            Key::Version => {
                opts.mode = Mode::Version;
                return Ok(None);
            }
            // Only variables have no key, and they have no flag.
            Key::Other => return Err(format!("{flag} is not a flag")),
        }
    }
    Ok(Some(flags))
}

/// The numeric settings: each from its flag, else its variable, else its
/// default. Each variable is checked even when its flag overrides it: a
/// bad value is a mistake worth telling either way.
struct Numbers<'a, F> {
    flags: &'a [(Key, u64)],
    lookup: &'a F,
}

impl<F: Fn(&str) -> Option<OsString>> Numbers<'_, F> {
    fn number(&self, setting: &Setting) -> Result<u64, String> {
        Ok(self.given(setting)?.unwrap_or(setting.number()))
    }

    /// The setting's flag, else its variable; `None` when neither is
    /// given.
    fn given(&self, setting: &Setting) -> Result<Option<u64>, String> {
        let flag = self
            .flags
            .iter()
            .rev()
            .find(|(key, _)| *key == setting.key)
            .map(|&(_, n)| n);
        let text = (self.lookup)(setting.var_name()).and_then(|v| v.into_string().ok());
        let from_var = match text.filter(|t| !t.trim().is_empty()) {
            None => None,
            Some(text) => Some(
                count(setting.key, &text)
                    .map_err(|e| format!("{}={text:?}: {e}", setting.var_name()))?,
            ),
        };
        Ok(flag.or(from_var))
    }

    fn count(&self, setting: &Setting) -> Result<usize, String> {
        self.number(setting)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn secs(&self, setting: &Setting) -> Result<Duration, String> {
        self.number(setting).map(Duration::from_secs)
    }

    fn mib(&self, setting: &Setting) -> Result<u64, String> {
        self.number(setting).map(|n| n.saturating_mul(1 << 20))
    }

    fn sessions(&self) -> Result<session::Settings, String> {
        let max_total = self.count(&MAX_SESSIONS_TOTAL)?;
        Ok(session::Settings {
            // A client's own cap is never more than all clients' together.
            max_sessions: self.count(&MAX_SESSIONS)?.min(max_total),
            max_total,
            idle_timeout: self.secs(&SESSION_IDLE_TIMEOUT)?,
            max_lifetime: self.secs(&SESSION_MAX_LIFETIME)?,
            max_checkpoints: self.count(&MAX_CHECKPOINTS)?,
        })
    }

    fn bounds(&self) -> Result<Bounds, String> {
        Ok(Bounds {
            max_runs: self.count(&MAX_RUNS)?,
            max_compositions: self.count(&MAX_COMPOSITIONS)?,
            packages_cache_max: self.count(&PACKAGES_CACHE_MAX)?,
            client_runs_share: self.count(&CLIENT_RUNS_SHARE)?,
            client_sessions_share: self.count(&CLIENT_SESSIONS_SHARE)?,
            max_unread_bytes: self.count(&MAX_UNREAD_BYTES)?,
            max_mcp_sessions: self.count(&MAX_MCP_SESSIONS)?,
            mcp_idle_timeout: self.secs(&MCP_SESSION_IDLE_TIMEOUT)?,
            max_connections: self.count(&MAX_CONNECTIONS)?,
            read_timeout: self.secs(&REQUEST_READ_TIMEOUT)?,
            output_max_bytes: self.mib(&OUTPUT_MAX_MB)?,
            output_call_bytes: self.mib(&OUTPUT_CALL_MB)?,
            files_bytes: usize::try_from(self.mib(&FILES_MB)?).unwrap_or(usize::MAX),
            layers_bytes: self.given(&LAYERS_MB)?.map(|n| n.saturating_mul(1 << 20)),
            warm_jails: self.count(&WARM_JAILS)?,
        })
    }
}

/// A positive integer (seconds or a count).
fn positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err("expected a positive integer".into()),
        Ok(n) => Ok(n),
    }
}

/// A number setting's value: positive, or 0 as well where 0 turns the
/// thing off (`--max-checkpoints`).
fn count(key: Key, text: &str) -> Result<u64, String> {
    match key {
        Key::MaxCheckpoints => text
            .trim()
            .parse()
            .map_err(|_| "expected a whole number (0 keeps none)".into()),
        Key::WarmJails => text
            .trim()
            .parse()
            .map_err(|_| "expected a whole number (0 starts none)".into()),
        _ => positive(text),
    }
}

fn count_flag(key: Key, flag: &str, text: &str) -> Result<u64, String> {
    count(key, text).map_err(|e| format!("invalid value for {flag}: {e}"))
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
         Usage: nix-sandbox-mcp [--stdio | --http ADDR] [--manifest PATH]... [OPTIONS]\n       \
         nix-sandbox-mcp agent ...  (a coding agent in a jail: docs/agents.md)\n       \
         nix-sandbox-mcp sandbox ...  (your servers' sessions: docs/cli.md)\n\n\
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
pub const DOC_BEGIN: &str = "<!-- Generated from launcher/src/settings.rs; regenerate with \
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
