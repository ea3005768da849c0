//! `nix-sandbox-mcp sandbox`: a person's view of the sessions of their
//! running servers (docs/cli.md), through each server's control socket
//! (control/). It trusts a socket only in a directory of its own uid that
//! nobody else may enter (the checks the server made it with). Output on
//! stdout; each failure is one line on stderr and a non-zero exit.

mod args;
mod enter;
mod exec;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::control::{self, wire};
use args::{Args, Verb};

/// How long one server has to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The process's environment, as main reads it.
pub type Lookup = fn(&str) -> Option<OsString>;

/// Runs the subcommand with `args` (after `sandbox`).
pub fn main(args: impl IntoIterator<Item = OsString>, lookup: Lookup) -> ExitCode {
    let args = match args::parse(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("nix-sandbox-mcp sandbox: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    if args.verb == Verb::Help {
        print!("{}", args::help());
        return ExitCode::SUCCESS;
    }
    match verb(&args, lookup) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nix-sandbox-mcp sandbox: {e}");
            ExitCode::FAILURE
        }
    }
}

fn verb(args: &Args, lookup: Lookup) -> Result<ExitCode, String> {
    if matches!(args.verb, Verb::Enter(_)) && !enter::stdin_is_terminal() {
        eprintln!("nix-sandbox-mcp sandbox: {}", enter::NOT_A_TERMINAL);
        return Ok(ExitCode::from(2));
    }
    let servers = servers(lookup)?;
    if let Verb::Enter(id) = &args.verb {
        let (server, name) = find(&servers, id)?;
        let term = (lookup("TERM").and_then(|t| t.into_string().ok())).filter(|t| !t.is_empty());
        return enter::run(server, name, term);
    }
    if let Verb::Exec { id, argv } = &args.verb {
        let (server, name) = find(&servers, id)?;
        return exec::run(server, name, argv.clone(), args.json);
    }
    if let Verb::Create {
        env,
        name,
        with,
        profile,
        server,
    } = &args.verb
    {
        let server = chosen(&servers, *server)?;
        return create(server, env, name.as_deref(), with, profile.as_deref());
    }
    let mut out = std::io::stdout().lock();
    let written = match &args.verb {
        Verb::List => {
            let mut rows = Vec::new();
            for server in &servers {
                let answer = server.ask(&wire::Op::List)?;
                rows.extend(answer.sessions.into_iter().map(|s| (server.pid, s)));
            }
            match args.json {
                true => rows
                    .iter()
                    .try_for_each(|(pid, s)| json_line(&mut out, *pid, s)),
                false => table(&mut out, &rows),
            }
        }
        Verb::Status(id) => {
            let (server, name) = find(&servers, id)?;
            let answer = server.ask(&wire::Op::Status { id: name })?;
            let session = answer
                .sessions
                .first()
                .ok_or("the server answered no session")?;
            match args.json {
                true => json_line(&mut out, server.pid, session),
                false => detail(&mut out, server.pid, session),
            }
        }
        Verb::Destroy(id) => {
            let (server, name) = find(&servers, id)?;
            server.ask(&wire::Op::Destroy { id: name.clone() })?;
            writeln!(out, "destroyed {name} (server {})", server.pid)
        }
        Verb::Profiles { server } => {
            let server = chosen(&servers, *server)?;
            let answer = server.ask(&wire::Op::Profiles)?;
            let profiles = answer.profiles.unwrap_or_default();
            match args.json {
                true => profiles.iter().try_for_each(|p| {
                    let value = serde_json::to_value(p).map_err(std::io::Error::other)?;
                    writeln!(out, "{value}")
                }),
                false => profile_table(&mut out, &profiles),
            }
        }
        Verb::Help | Verb::Exec { .. } | Verb::Enter(_) | Verb::Create { .. } => Ok(()),
    };
    written.map_err(|e| format!("cannot write the answer: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// `create`: makes a session of `env` on `server` and prints its ID.
fn create(
    server: &Server,
    env: &str,
    name: Option<&str>,
    with: &[String],
    profile: Option<&str>,
) -> Result<ExitCode, String> {
    let id = name.map_or_else(
        || format!("cli-{}", &crate::session::random_suffix()[..8]),
        str::to_owned,
    );
    let op = wire::Op::Create {
        id,
        env: env.to_owned(),
        packages: (!with.is_empty()).then(|| with.to_vec()),
        profile: profile.map(str::to_owned),
    };
    let answer = server.ask(&op)?;
    let session = answer
        .sessions
        .first()
        .ok_or("the server answered no session")?;
    println!("{}", session.id);
    Ok(ExitCode::SUCCESS)
}

/// A running server's control socket.
struct Server {
    pid: u32,
    path: PathBuf,
}

impl Server {
    /// A connection that sent `op`; reads time out after `timeout`.
    fn send(&self, op: &wire::Op, timeout: Option<Duration>) -> Result<UnixStream, String> {
        let failed = |e: std::io::Error| format!("server {} did not answer: {e}", self.pid);
        let mut stream = UnixStream::connect(&self.path).map_err(failed)?;
        stream.set_read_timeout(timeout).map_err(failed)?;
        let request = wire::Request {
            v: wire::VERSION,
            op: op.clone(),
        };
        let mut line = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        line.push(b'\n');
        stream.write_all(&line).map_err(failed)?;
        Ok(stream)
    }

    /// One request, its answer; a refusal is the server's one line.
    fn ask(&self, op: &wire::Op) -> Result<wire::Response, String> {
        let failed = |e: std::io::Error| format!("server {} did not answer: {e}", self.pid);
        let stream = self.send(op, Some(ANSWER_TIMEOUT))?;
        let mut answer = String::new();
        match BufReader::new(stream).read_line(&mut answer) {
            // Closed with the request unread: as unanswered.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => answer.clear(),
            read => {
                read.map_err(failed)?;
            }
        }
        if answer.is_empty() {
            return Err(format!(
                "server {} closed the connection unanswered: it refuses this uid (its log says why)",
                self.pid
            ));
        }
        let answer: wire::Response = serde_json::from_str(&answer)
            .map_err(|e| format!("server {} answered what this CLI cannot read ({e}): use the nix-sandbox-mcp that runs it", self.pid))?;
        match (answer.ok, &answer.error) {
            (true, _) => Ok(answer),
            (false, error) => Err(error.clone().unwrap_or_else(|| "refused".into())),
        }
    }
}

/// The servers whose sockets answer, by pid; an error when there is none.
fn servers(lookup: Lookup) -> Result<Vec<Server>, String> {
    let euid = nix::unistd::geteuid().as_raw();
    let Some(dir) = wire::socket_dir(euid, lookup) else {
        return Err(
            "XDG_RUNTIME_DIR is unset, so no server of yours has a control socket to find: set it as your servers have it (/run/user/$UID)".into(),
        );
    };
    let none = || {
        format!(
            "no nix-sandbox-mcp server of yours is running (no control socket in {}): its sessions appear here while your MCP client runs one",
            dir.display()
        )
    };
    match control::check_dir(&dir, euid) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(none()),
        Err(e) => {
            return Err(format!(
                "{e}; not trusting the sockets in it (remove it; your servers make it again)"
            ));
        }
    }
    let mut servers = sockets(&dir);
    servers.retain(|s| UnixStream::connect(&s.path).is_ok());
    if servers.is_empty() {
        return Err(none());
    }
    Ok(servers)
}

/// The `PID.sock` files in `dir`, by pid.
fn sockets(dir: &Path) -> Vec<Server> {
    let mut found: Vec<Server> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let pid = name.strip_suffix(".sock")?.parse().ok()?;
            Some(Server {
                pid,
                path: entry.path(),
            })
        })
        .collect();
    found.sort_by_key(|s| s.pid);
    found
}

/// The server `pid`, or the only one.
fn chosen(servers: &[Server], pid: Option<u32>) -> Result<&Server, String> {
    match (pid, servers) {
        (None, [one]) => Ok(one),
        (None, _) => Err(format!(
            "servers {} run: choose one with --server PID",
            pids(servers)
        )),
        (Some(pid), _) => servers.iter().find(|s| s.pid == pid).ok_or_else(|| {
            format!(
                "no server of yours has pid {pid} (yours: {})",
                pids(servers)
            )
        }),
    }
}

/// The server holding session `id` (`NAME`, or `PID/NAME` to choose the
/// server), and the name.
fn find<'a>(servers: &'a [Server], id: &str) -> Result<(&'a Server, String), String> {
    if let Some((pid, name)) = id.split_once('/')
        && let Ok(pid) = pid.parse::<u32>()
    {
        let server = servers.iter().find(|s| s.pid == pid).ok_or_else(|| {
            format!(
                "no server of yours has pid {pid} (yours: {}); `nix-sandbox-mcp sandbox list` shows the sessions",
                pids(servers)
            )
        })?;
        return Ok((server, name.to_owned()));
    }
    let mut holding = Vec::new();
    for server in servers {
        let answer = server.ask(&wire::Op::List)?;
        if answer.sessions.iter().any(|s| s.id == id) {
            holding.push(server);
        }
    }
    match holding.as_slice() {
        [one] => Ok((one, id.to_owned())),
        [] => Err(format!(
            "no open session `{id}` on your servers ({}); `nix-sandbox-mcp sandbox list` shows the open ones",
            pids(servers)
        )),
        many => Err(format!(
            "servers {} each have a session `{id}`: name one as PID/{id}",
            pids(many.iter().copied())
        )),
    }
}

fn pids<'a>(servers: impl IntoIterator<Item = &'a Server>) -> String {
    let pids: Vec<String> = servers
        .into_iter()
        .map(|s| format!("pid {}", s.pid))
        .collect();
    pids.join(", ")
}

/// One session as a JSON line, with its server's pid.
fn json_line(out: &mut impl Write, pid: u32, s: &wire::Session) -> std::io::Result<()> {
    let mut value = serde_json::to_value(s).map_err(std::io::Error::other)?;
    value["server"] = pid.into();
    writeln!(out, "{value}")
}

/// The sessions as a table, one a line under a header.
fn table(out: &mut impl Write, rows: &[(u32, wire::Session)]) -> std::io::Result<()> {
    let head = [
        "ID",
        "ENV",
        "SERVER",
        "CLIENT",
        "AGE",
        "IDLE",
        "CALLS",
        "CHECKPOINTS",
        "WORKSPACE",
        "STATE",
    ];
    let mut lines: Vec<Vec<String>> = vec![head.iter().map(|h| (*h).to_owned()).collect()];
    for (pid, s) in rows {
        lines.push(vec![
            s.id.clone(),
            s.env.clone(),
            pid.to_string(),
            s.client.clone(),
            duration(s.age_s),
            duration(s.idle_s),
            or_dash(s.calls),
            or_dash(s.checkpoints),
            workspace(s),
            state(s).into(),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

/// One session, a field a line.
fn detail(out: &mut impl Write, pid: u32, s: &wire::Session) -> std::io::Result<()> {
    writeln!(out, "id: {}", s.id)?;
    writeln!(out, "environment: {}", s.env)?;
    writeln!(out, "server: {pid}")?;
    writeln!(out, "client: {}", s.client)?;
    writeln!(out, "state: {}", state(s))?;
    writeln!(out, "age: {}", duration(s.age_s))?;
    writeln!(out, "idle: {}", duration(s.idle_s))?;
    writeln!(out, "calls: {}", or_dash(s.calls))?;
    writeln!(out, "checkpoints: {}", or_dash(s.checkpoints))?;
    writeln!(out, "workspace: {}", workspace(s))?;
    writeln!(out, "profile: {}", s.profile.as_deref().unwrap_or("-"))
}

/// The profiles, one a line under a header: what each does, then what it
/// is for.
fn profile_table(out: &mut impl Write, profiles: &[wire::ProfileShown]) -> std::io::Result<()> {
    let width = (profiles.iter().map(|p| p.name.chars().count()))
        .chain([7])
        .max()
        .unwrap_or(7);
    writeln!(out, "{:<width$}  SETTINGS", "PROFILE")?;
    for p in profiles {
        writeln!(out, "{:<width$}  {}", p.name, p.summary())?;
        writeln!(out, "{:<width$}  {}", "", p.description)?;
    }
    Ok(())
}

fn state(s: &wire::Session) -> &'static str {
    match s.busy {
        true => "in a call",
        false => "idle",
    }
}

fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// `1h2m`, `3m4s`, `5s`.
fn duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, s % 3600 / 60),
    }
}

/// `USED/SIZE` in MiB, or `-/SIZE` when unknown.
fn workspace(s: &wire::Session) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1 << 20));
    let used = s.workspace_bytes.map_or_else(|| "-".into(), mib);
    format!("{used}/{}", mib(s.workspace_max_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> wire::Session {
        wire::Session {
            id: id.into(),
            env: "python".into(),
            client: "stdio".into(),
            age_s: 125,
            idle_s: 5,
            busy: false,
            calls: Some(3),
            checkpoints: None,
            workspace_bytes: Some(3 << 19),
            workspace_max_bytes: 64 << 20,
            profile: None,
        }
    }

    #[test]
    fn the_table_has_a_header_and_a_line_a_session() {
        let mut out = Vec::new();
        table(&mut out, &[(42, session("data")), (43, session("b"))]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("ID    ENV     SERVER"), "{text}");
        assert!(
            lines[1].contains("data") && lines[1].contains("2m5s"),
            "{text}"
        );
        assert!(
            lines[1].contains("1.5 MiB/64.0 MiB") && lines[1].ends_with("idle"),
            "{text}"
        );
    }

    #[test]
    fn json_lines_carry_the_server() {
        let mut out = Vec::new();
        json_line(&mut out, 42, &session("data")).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (v["id"].as_str(), v["server"].as_u64()),
            (Some("data"), Some(42))
        );
        assert!(v["checkpoints"].is_null());
    }
}
