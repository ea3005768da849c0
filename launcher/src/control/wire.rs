//! The control socket's protocol (docs/cli.md): one JSON object a line
//! each way, a [`Request`] answered by one [`Response`], any number on one
//! connection. Both carry `v`, [`VERSION`]; a server answers a request of
//! another version with an error naming both. Where the sockets are:
//! [`socket_dir`].

use std::ffi::OsString;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The protocol's version.
pub const VERSION: u32 = 1;

/// The longest request line a server reads.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// What the CLI asks of a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub v: u32,
    #[serde(flatten)]
    pub op: Op,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Every open session of the server.
    List,
    /// Session `id`'s details.
    Status { id: String },
    /// End session `id` (a call running in it is cancelled first).
    Destroy { id: String },
    /// Run `argv` in session `id`'s jail: answered by `event` lines, the
    /// last an `exit`, or by one error. The connection's last request:
    /// closing it stops the command.
    Exec { id: String, argv: Vec<String> },
    /// An interactive shell in session `id`'s jail on a pseudo-terminal of
    /// `rows` by `cols` (`TERM` set to `term` when given): answered as
    /// `exec` is, the terminal's output as `stdout` events; the person's
    /// next lines on the connection are [`KeysLine`]s.
    Enter {
        id: String,
        rows: u16,
        cols: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        term: Option<String>,
    },
    /// Make session `id` of environment `env` (with `packages` added,
    /// under `profile`), as a model's first call to it would; answered
    /// with that session.
    Create {
        id: String,
        env: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        packages: Option<Vec<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// The profiles `create` takes: answered with `profiles`.
    Profiles,
}

/// What a person sends after `enter`, a line each: what they typed, or
/// their window's new size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysLine {
    pub v: u32,
    #[serde(flatten)]
    pub keys: KeysOp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum KeysOp {
    /// Bytes typed, base64.
    Input {
        data: String,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
}

/// The shell `enter` runs: the environment's bash, else its sh (said on
/// the terminal), `TERM` set to its first argument when that is not empty.
pub const ENTER_SHELL: &str = "[ -n \"$1\" ] && export TERM=\"$1\"; \
if command -v bash >/dev/null 2>&1; then exec bash -i; fi; \
echo 'nix-sandbox-mcp: this environment has no bash; sh instead' >&2; exec sh -i";

/// A part of an `exec`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Bytes the command wrote, base64.
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    /// The command ended: `code` its status (the exit code, or 128 + the
    /// signal that killed it), `signal` that signal, `timed_out` when the
    /// server killed it at the session's timeout.
    Exit {
        code: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
    },
}

/// A server's answer: `ok` with `sessions` (all for `list`, the one for
/// `status` and `destroy`), or `error`, one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The server's process id.
    pub pid: u32,
    #[serde(default)]
    pub sessions: Vec<Session>,
    /// Part of an `exec`'s answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// An `exec` whose program could not be started (the shell's 127).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_found: bool,
    /// The answer to `profiles`, sorted by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<ProfileShown>>,
}

/// One profile `create` takes (docs/profiles.md): its settings as the
/// manifest carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileShown {
    pub name: String,
    pub description: String,
    /// `false`: no network; `null`: the environment's own.
    pub network: Option<bool>,
    /// `false`: no packages may be added.
    pub packages: bool,
    /// `"read-only"`, `"none"`, or `null`: as the server mounts it.
    pub project: Option<crate::catalog::profiles::Project>,
    /// The limits it lowers, by name.
    pub limits: std::collections::BTreeMap<String, u64>,
}

impl ProfileShown {
    /// Its settings in one line: `network off, no packages, project
    /// read-only, memory_mb 512, cpu_s 60`; `as the environment` when it
    /// changes nothing.
    pub fn summary(&self) -> String {
        use crate::catalog::profiles::Project;
        let mut parts = Vec::new();
        if self.network == Some(false) {
            parts.push("network off".to_owned());
        }
        if !self.packages {
            parts.push("no packages".to_owned());
        }
        match self.project {
            Some(Project::ReadOnly) => parts.push("project read-only".to_owned()),
            Some(Project::None) => parts.push("no project".to_owned()),
            None => {}
        }
        parts.extend(self.limits.iter().map(|(k, v)| format!("{k} {v}")));
        if parts.is_empty() {
            "as the environment".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

impl From<&crate::catalog::Profile> for ProfileShown {
    fn from(p: &crate::catalog::Profile) -> Self {
        Self {
            name: p.name.clone(),
            description: p.description.clone(),
            network: p.network,
            packages: p.packages,
            project: p.project,
            limits: p.limits.clone(),
        }
    }
}

/// One open session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Its name, as the model gave it (or the server made it).
    pub id: String,
    pub env: String,
    /// Whose: `stdio`, `stateless` or `mcp:ID` (an MCP session over HTTP).
    pub client: String,
    /// Seconds since it began, and since its last call.
    pub age_s: u64,
    pub idle_s: u64,
    /// A call runs in it now.
    pub busy: bool,
    /// Calls so far, checkpoints kept and bytes its layer holds: `null`
    /// while a call holds it (or, for the bytes, when it keeps no layer).
    pub calls: Option<u64>,
    pub checkpoints: Option<usize>,
    pub workspace_bytes: Option<u64>,
    /// Its layer's size, the environment's `workspace_mb`.
    pub workspace_max_bytes: u64,
    /// The profile a person made it under (`create --profile`).
    #[serde(default)]
    pub profile: Option<String>,
}

impl Response {
    pub fn ok(pid: u32, sessions: Vec<Session>) -> Self {
        Self {
            v: VERSION,
            ok: true,
            error: None,
            pid,
            sessions,
            event: None,
            not_found: false,
            profiles: None,
        }
    }

    pub fn event(pid: u32, event: Event) -> Self {
        Self {
            event: Some(event),
            ..Self::ok(pid, Vec::new())
        }
    }

    pub fn error(pid: u32, error: String) -> Self {
        Self {
            v: VERSION,
            ok: false,
            error: Some(error),
            pid,
            sessions: Vec::new(),
            event: None,
            not_found: false,
            profiles: None,
        }
    }
}

/// The directory of a server's control socket: `nix-sandbox-mcp` in
/// `XDG_RUNTIME_DIR`, else, for root, `/run/nix-sandbox-mcp/control`; none
/// for another user without `XDG_RUNTIME_DIR`.
pub fn socket_dir(euid: u32, lookup: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    match lookup("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(runtime) => Some(PathBuf::from(runtime).join("nix-sandbox-mcp")),
        None if euid == 0 => Some(PathBuf::from("/run/nix-sandbox-mcp/control")),
        None => None,
    }
}

/// A server's socket in `dir`, named by its pid.
pub fn socket_name(pid: u32) -> String {
    format!("{pid}.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_small_versioned_object() {
        let r = Request {
            v: VERSION,
            op: Op::Status { id: "a".into() },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(line, r#"{"v":1,"op":"status","id":"a"}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
        let list: Request = serde_json::from_str(r#"{"v":1,"op":"list"}"#).unwrap();
        assert_eq!(list.op, Op::List);
        assert!(serde_json::from_str::<Request>(r#"{"v":1,"op":"reboot"}"#).is_err());
    }

    #[test]
    fn the_directory_is_the_runtime_one_or_roots() {
        let none = |_: &str| None;
        let runtime = |_: &str| Some(OsString::from("/run/user/1000"));
        assert_eq!(
            socket_dir(1000, runtime),
            Some(PathBuf::from("/run/user/1000/nix-sandbox-mcp"))
        );
        assert_eq!(
            socket_dir(0, none),
            Some(PathBuf::from("/run/nix-sandbox-mcp/control"))
        );
        assert_eq!(socket_dir(1000, none), None);
    }
}
