//! `nix-sandbox-mcp agent`: a person's coding agent in a jail
//! (docs/agents.md), what each `agent-NAME` of lib/mkAgentSandbox.nix runs.
//! It reads the agent environment's manifest (catalog/), opens the egress
//! proxy's gate for its jail (egress/: the API key read here, from the
//! person's variable or file, and put into requests to the model API's
//! hosts only; the jail holds a placeholder), keeps the project's
//! copy-on-write layer and the agent's home on disk per project
//! (state.rs), starts the jail's wrapper on a pseudo-terminal or on the
//! launcher's stdio (terminal.rs) and, when the agent ends, says what it
//! changed. `--diff`, `--apply` and `--discard` read, write and forget
//! those changes (project/diff.rs, project/apply.rs). Nothing is logged
//! unless `RUST_LOG` asks: stderr is the person's terminal.

mod args;
mod state;
mod terminal;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::mpsc;

use rustix::fs::{Mode, OFlags};
use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::egress::{self, Egress};
use crate::project::{self, apply, diff};
use crate::settings;

use args::{Args, Verb};
use state::State;

/// The jail's variables of a person's agent jail (lib/jail/agent.nix,
/// lib/jail/workspace.nix).
const HOME_VAR: &str = "NIX_SANDBOX_AGENT_HOME";
const PROJECT_RW_VAR: &str = "NIX_SANDBOX_AGENT_PROJECT_RW";
const ON_DISK_VAR: &str = "NIX_SANDBOX_LAYER_ON_DISK";

/// How much `--diff` and the summary read: more than a session's, a
/// person reads it.
const BOUNDS: diff::Bounds = diff::Bounds {
    entries: 200_000,
    read_bytes: 256 << 20,
    file_bytes: 1 << 20,
    diff_bytes: 64 << 20,
};

/// The process's environment, as main reads it.
pub type Lookup = fn(&str) -> Option<OsString>;

/// Runs the subcommand with `args` (after `agent`) and the process's
/// environment `lookup`; `logging` starts the log on stderr, done only
/// when `RUST_LOG` asks.
pub fn main(args: impl IntoIterator<Item = OsString>, lookup: Lookup, logging: fn()) -> ExitCode {
    let args = match args::parse(args) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("nix-sandbox-mcp agent: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    let me = format!("agent-{}", args.name);
    if lookup("RUST_LOG").is_some() {
        logging();
    }
    match verb(&args, lookup) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{me}: {e}");
            ExitCode::from(2)
        }
    }
}

fn verb(args: &Args, lookup: Lookup) -> Result<ExitCode, String> {
    if args.verb == Verb::Help {
        print!("{}", args::HELP.replace("NAME", &args.name));
        return Ok(ExitCode::SUCCESS);
    }
    let project = match &args.project {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?,
    };
    let state = State::open(&args.name, &project, lookup)?;
    match args.verb {
        // This subcommand never serves MCP: its stdout is the person's.
        Verb::State => println!("{}", state.dir.display()),
        Verb::Diff => {
            let changes = changes(&state)?;
            print!("# project: {}\n{}", changes.summary(), changes.diff);
        }
        Verb::Apply => {
            let _lock = state.lock()?;
            if !state.upper().exists() {
                eprintln!("agent-{}: no changes kept: nothing to apply", args.name);
                return Ok(ExitCode::SUCCESS);
            }
            let applied = apply::apply(&open_dir(&state.upper())?, &open_dir(&state.project)?)
                .map_err(|e| {
                    format!(
                        "cannot apply the changes to {}: {e}",
                        state.project.display()
                    )
                })?;
            forget(&state)?;
            for path in &applied.skipped {
                eprintln!(
                    "agent-{}: left out {path}: a device, fifo or socket",
                    args.name
                );
            }
            eprintln!(
                "agent-{}: applied {} paths to {}; nothing is kept now",
                args.name,
                applied.paths,
                state.project.display()
            );
        }
        Verb::Discard => {
            let _lock = state.lock()?;
            forget(&state)?;
            eprintln!("agent-{}: the kept changes are discarded", args.name);
        }
        Verb::Run => return run(args, &state, lookup),
        Verb::Help => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// The kept changes against the live project (none before a first run).
fn changes(state: &State) -> Result<diff::Changes, String> {
    let upper = match open_dir(&state.upper()) {
        Ok(fd) => fd,
        Err(_) if !state.upper().exists() => return Ok(diff::Changes::default()),
        Err(e) => return Err(e),
    };
    Ok(diff::changes_over(
        vec![upper],
        &open_dir(&state.project)?,
        BOUNDS,
    ))
}

/// Empties the layer's upper and work directories.
fn forget(state: &State) -> Result<(), String> {
    for sub in ["upper", "work"] {
        let dir = state.layer().join(sub);
        if dir.exists() {
            apply::clear(&open_dir(&dir)?)
                .map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
        }
    }
    Ok(())
}

fn open_dir(dir: &Path) -> Result<OwnedFd, String> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::open(dir, flags, Mode::empty())
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))
}

/// Starts the agent and waits for it; its exit status is the command's.
fn run(args: &Args, state: &State, lookup: Lookup) -> Result<ExitCode, String> {
    let _lock = state.lock()?;
    let catalog = Catalog::load(std::slice::from_ref(&args.manifest), false);
    if !catalog.envs.contains_key(&args.env) {
        let why = catalog.error_lines().join("; ");
        return Err(format!(
            "the manifest {} has no environment {} ({why})",
            args.manifest.display(),
            args.env
        ));
    }
    // Before any thread: they all inherit the blocked signals.
    let signals = terminal::block_signals().map_err(|e| format!("cannot block signals: {e}"))?;
    let gate = Gate::open(catalog, &args.env, lookup)?;
    let mut command = Command::new(&args.jail);
    command
        .args(&args.agent_args)
        .env_clear()
        .envs(jail_vars(args, state, &gate.vars, lookup));
    let pty =
        terminal::Pty::open().map_err(|e| format!("cannot make the agent's terminal: {e}"))?;
    let status = terminal::run(command, pty, signals)
        .map_err(|e| format!("cannot start {}: {e}", args.jail.display()))?;
    for line in gate.close() {
        eprintln!("agent-{}: {line}", args.name);
    }
    if !args.writable {
        let summary = changes(state).map_or_else(|e| e, |c| c.summary());
        eprintln!(
            "agent-{}: project: {summary} (kept; review: agent-{0} --diff, then agent-{0} --apply or --discard)",
            args.name
        );
    }
    Ok(exit_code(status))
}

/// What the jail's wrapper is given: no variable of the person's but
/// these (the API key stays in this process).
fn jail_vars(
    args: &Args,
    state: &State,
    gate: &[(&'static str, OsString)],
    lookup: Lookup,
) -> Vec<(String, OsString)> {
    let mut vars: Vec<(String, OsString)> = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("PROJECT_DIR".into(), state.project.clone().into_os_string()),
        (HOME_VAR.into(), state.home().into_os_string()),
    ];
    for name in ["HOME", "TERM", settings::PROJECT_MOUNT.var_name()] {
        if let Some(value) = lookup(name).filter(|v| !v.is_empty()) {
            vars.push((name.into(), value));
        }
    }
    if args.writable {
        vars.push((PROJECT_RW_VAR.into(), "1".into()));
    } else {
        vars.push((project::LAYER_VAR.into(), state.layer().into_os_string()));
        vars.push((project::PROJECT_VAR.into(), "1".into()));
        vars.push((ON_DISK_VAR.into(), "1".into()));
    }
    vars.extend(gate.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    vars
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The jail's gate, served by a runtime thread of its own until closed.
struct Gate {
    vars: Vec<(&'static str, OsString)>,
    stop: CancellationToken,
    refusals: mpsc::Receiver<Vec<String>>,
}

impl Gate {
    /// Reads the environment's secrets and opens its gate; a secret that
    /// cannot be read is the error.
    fn open(catalog: Catalog, env: &str, lookup: Lookup) -> Result<Self, String> {
        let settings = egress::Settings {
            hosts_file: lookup(settings::EGRESS_HOSTS.var_name()).map(PathBuf::from),
            extra_roots: lookup(settings::EGRESS_CA_ROOTS.var_name()).map(PathBuf::from),
        };
        let (ready, opened) = mpsc::channel();
        let (done, refusals) = mpsc::channel();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let env = env.to_owned();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the proxy's runtime: {e}"))?;
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let egress = Arc::new(Egress::start(catalog.policies(), &settings, None, lookup));
                let gate = match egress.gate(&env, None) {
                    Ok(gate) => gate,
                    Err(e) => {
                        let _ = ready.send(Err(format!("the model API cannot be reached: {e}")));
                        return;
                    }
                };
                let vars = gate.vars().to_vec();
                let _ = ready.send(Ok(vars));
                stopped.cancelled().await;
                let _ = done.send(gate.take_refusals());
            });
        });
        let vars = opened
            .recv()
            .map_err(|_| "the proxy's thread ended".to_owned())??;
        Ok(Self {
            vars,
            stop,
            refusals,
        })
    }

    /// Closes the gate; the refusals' lines.
    fn close(self) -> Vec<String> {
        self.stop.cancel();
        self.refusals
            .recv_timeout(std::time::Duration::from_secs(2))
            .unwrap_or_default()
    }
}
