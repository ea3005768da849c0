//! Command-line flags (lexopt). `NIX_SANDBOX_MANIFEST` (colon-separated) is
//! read before the `--manifest` flags, so flags override it by environment name.

use std::ffi::OsString;
use std::path::PathBuf;

pub const HELP: &str = "\
nix-sandbox-mcp: sandboxed code execution for LLM agents over MCP

Usage: nix-sandbox-mcp [--stdio | --http ADDR] [--manifest PATH]... [OPTIONS]

  --stdio                   serve MCP on stdin/stdout (the default)
  --http ADDR               serve MCP over streamable HTTP at http://ADDR/mcp
                            (HOST:PORT; port 0 picks one, logged on stderr);
                            each MCP session has sessions of its own
  --token-file PATH         the bearer token --http requires of every request
                            (NIX_SANDBOX_TOKEN_FILE when not given)
  --allow-origin ORIGIN     a browser Origin accepted besides loopback ones
                            (repeatable); other Origins get 403
  --manifest PATH           an environments manifest; repeatable, a later file
                            adds environments or replaces them by name
                            (NIX_SANDBOX_MANIFEST, colon-separated, comes first;
                            the server package adds NIX_SANDBOX_ENVS and
                            NIX_SANDBOX_DIR sandboxes last, so one named like a
                            bundled environment replaces it)
  --check                   run a trivial program in every environment, print
                            one line each (ok / FAIL: reason), exit 1 if any fails
  --max-code-bytes N        largest `code` accepted, in bytes (default 1048576)
  --max-sessions N          most sessions open at once, per MCP client
                            (NIX_SANDBOX_MAX_SESSIONS; default 16)
  --session-idle-timeout S  a session ends S seconds after its last call
                            (SESSION_IDLE_TIMEOUT; default 300)
  --session-max-lifetime S  a session ends S seconds after its first call
                            (SESSION_MAX_LIFETIME; default 3600)
  --allow-wrappers-outside-store
                            accept wrappers outside /nix/store: FOR TESTS ONLY,
                            it lets an unreviewed script stand in for a sandbox
  --help                    print this help
  --version                 print the version

NIX_SANDBOX_OUTPUT_DIR=DIR copies the files calls write to /workspace/outputs
to DIR/SESSION/ (DIR/@run-TIME-N/ for a run with files but no session), for
a person to open; off when unset or empty.
Logs go to stderr; RUST_LOG sets their level (default info).
";

pub const DEFAULT_MAX_CODE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Stdio,
    Http,
    Check,
    Help,
    Version,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub mode: Mode,
    pub manifests: Vec<PathBuf>,
    pub allow_outside_store: bool,
    pub max_code_bytes: usize,
    /// `--http ADDR`, `--token-file`, `--allow-origin` (mode [`Mode::Http`]).
    pub http_addr: Option<String>,
    pub token_file: Option<PathBuf>,
    pub allowed_origins: Vec<String>,
    /// `--max-sessions`, `--session-idle-timeout`, `--session-max-lifetime`
    /// (they override the environment; session.rs reads both).
    pub max_sessions: Option<u64>,
    pub session_idle_timeout: Option<u64>,
    pub session_max_lifetime: Option<u64>,
}

/// Parses `args` (without the program name); `env_manifests` is the value of
/// `NIX_SANDBOX_MANIFEST`, if set. The error is one line for stderr.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    env_manifests: Option<OsString>,
) -> Result<Options, String> {
    use lexopt::prelude::*;

    let mut opts = Options {
        mode: Mode::Stdio,
        manifests: Vec::new(),
        allow_outside_store: false,
        max_code_bytes: DEFAULT_MAX_CODE_BYTES,
        http_addr: None,
        token_file: None,
        allowed_origins: Vec::new(),
        max_sessions: None,
        session_idle_timeout: None,
        session_max_lifetime: None,
    };
    let mut stdio = false;
    if let Some(list) = env_manifests {
        opts.manifests
            .extend(std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()));
    }
    let mut parser = lexopt::Parser::from_args(args);
    let fail = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(fail)? {
        match arg {
            Long("stdio") => stdio = true,
            Long("http") => {
                opts.mode = Mode::Http;
                opts.http_addr = Some(string(parser.value().map_err(fail)?, "--http")?);
            }
            Long("token-file") => opts.token_file = Some(parser.value().map_err(fail)?.into()),
            Long("allow-origin") => opts
                .allowed_origins
                .push(string(parser.value().map_err(fail)?, "--allow-origin")?),
            Long("check") => opts.mode = Mode::Check,
            Long("help") | Short('h') => {
                return Ok(Options {
                    mode: Mode::Help,
                    ..opts
                });
            }
            Long("version") | Short('V') => {
                return Ok(Options {
                    mode: Mode::Version,
                    ..opts
                });
            }
            Long("manifest") => opts.manifests.push(parser.value().map_err(fail)?.into()),
            Long("allow-wrappers-outside-store") => opts.allow_outside_store = true,
            Long("max-code-bytes") => {
                let value = parser.value().map_err(fail)?;
                opts.max_code_bytes = value
                    .parse()
                    .map_err(|e| format!("invalid value for --max-code-bytes: {e}"))?;
            }
            Long(flag @ ("max-sessions" | "session-idle-timeout" | "session-max-lifetime")) => {
                let flag = flag.to_owned();
                let value = string(parser.value().map_err(fail)?, &format!("--{flag}"))?;
                let n = crate::session::positive(&value)
                    .map_err(|e| format!("invalid value for --{flag}: {e}"))?;
                match flag.as_str() {
                    "max-sessions" => opts.max_sessions = Some(n),
                    "session-idle-timeout" => opts.session_idle_timeout = Some(n),
                    _ => opts.session_max_lifetime = Some(n),
                }
            }
            other => return Err(fail(other.unexpected())),
        }
    }
    if opts.mode == Mode::Http && stdio {
        return Err("--stdio and --http exclude each other".into());
    }
    if opts.mode != Mode::Http && (opts.token_file.is_some() || !opts.allowed_origins.is_empty()) {
        return Err("--token-file and --allow-origin go with --http".into());
    }
    Ok(opts)
}

fn string(value: OsString, flag: &str) -> Result<String, String> {
    value
        .into_string()
        .map_err(|v| format!("invalid value for {flag}: {v:?} is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn defaults() {
        let o = parse(args(&[]), None).unwrap();
        assert_eq!(o.mode, Mode::Stdio);
        assert!(o.manifests.is_empty());
        assert!(!o.allow_outside_store);
        assert_eq!(o.max_code_bytes, 1_048_576);
    }

    #[test]
    fn env_manifests_come_before_flags() {
        let o = parse(
            args(&["--manifest", "/c.json", "--manifest=/d.json", "--check"]),
            Some("/a.json::/b.json".into()),
        )
        .unwrap();
        assert_eq!(o.mode, Mode::Check);
        let want: Vec<PathBuf> = ["/a.json", "/b.json", "/c.json", "/d.json"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(o.manifests, want);
    }

    #[test]
    fn bad_flags_are_one_line_errors() {
        for bad in [
            &["--nope"][..],
            &["--manifest"],
            &["--max-code-bytes", "x"],
            &["extra"],
        ] {
            let e = parse(args(bad), None).unwrap_err();
            assert!(!e.is_empty() && !e.contains('\n'), "{bad:?}: {e}");
        }
    }

    #[test]
    fn http_flags() {
        let o = parse(
            args(&[
                "--http",
                "127.0.0.1:0",
                "--token-file",
                "/run/t",
                "--allow-origin",
                "https://a.example",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(o.mode, Mode::Http);
        assert_eq!(o.http_addr.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(o.token_file, Some(PathBuf::from("/run/t")));
        assert_eq!(o.allowed_origins, ["https://a.example"]);
        for bad in [
            &["--http", "127.0.0.1:0", "--stdio"][..],
            &["--token-file", "/run/t"],
            &["--allow-origin", "https://a.example"],
            &["--http"],
        ] {
            let e = parse(args(bad), None).unwrap_err();
            assert!(!e.is_empty() && !e.contains('\n'), "{bad:?}: {e}");
        }
    }

    #[test]
    fn session_flags() {
        let o = parse(
            args(&[
                "--max-sessions",
                "3",
                "--session-idle-timeout=5",
                "--session-max-lifetime",
                "60",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(
            (
                o.max_sessions,
                o.session_idle_timeout,
                o.session_max_lifetime
            ),
            (Some(3), Some(5), Some(60))
        );
        for bad in [
            &["--max-sessions", "0"][..],
            &["--session-idle-timeout", "x"],
        ] {
            let e = parse(args(bad), None).unwrap_err();
            assert!(e.contains(bad[0]) && !e.contains('\n'), "{bad:?}: {e}");
        }
    }

    #[test]
    fn help_says_the_store_flag_is_for_tests() {
        assert!(HELP.contains("FOR TESTS ONLY"));
        assert_eq!(parse(args(&["--help"]), None).unwrap().mode, Mode::Help);
    }
}
