//! nix-sandbox-mcp: the MCP server. It reads the manifests Nix wrote and runs
//! code through the jailed wrappers they name; it builds no jail itself.
//!
//! This file only wires the parts together: the configuration (config.rs),
//! the environments (catalog/), the host's facts (wrapper/host.rs), the
//! configuration checked against them (preflight.rs), the jails' pid
//! namespace (lifetime.rs), the project's layers (project_check.rs), then
//! `--check` (probe.rs) or MCP over stdio or HTTP (mcp/).
//!
//! stdout is the MCP channel: only the protocol goes there (the `--help`,
//! `--version` and `--check` modes, which serve no MCP, print there too).
//! Logs go to stderr.
//!
//! The layers, top to bottom: a module uses only modules on lines below its
//! own, never one on its line or above (tests/layers.rs holds this, and
//! CONTRIBUTING.md's copy of it). A folder is one module: inside it, its
//! files use each other freely.
//!
//! ```text
//! main.rs                    wiring: reads the configuration, builds the parts
//! agent/ sandbox/            a person's coding agent in a jail; the `sandbox` command line
//! mcp/                       the MCP surface: the `run` tool over stdio and HTTP
//! report/                    what the model reads: results, limits hit, refusals
//! project_check.rs           a writable project decided at start; its --check line
//! probe.rs                   --check and the start-up sandbox probes
//! preflight.rs               the configuration checked against the host
//! config.rs                  flags and variables read into typed settings
//! session/ run.rs packages/ control/  a session call; one run; packages; the control socket
//! wrapper/                   starting a wrapper: its uid, cgroups, group, end
//! catalog/ admission.rs      the environments served; slots and fair shares
//! egress/ lifetime.rs        the network proxy; the jails' pid namespace
//! settings.rs fdlimit.rs tty.rs the settings table; the open files limit; a terminal's size and signals;
//! live.rs project/           a run's newest output; a session's project layer, its diff
//! ```

mod admission;
mod agent;
mod catalog;
#[cfg(test)]
mod catalog_fuzz;
mod config;
mod control;
mod egress;
mod fdlimit;
mod lifetime;
mod live;
mod mcp;
mod packages;
mod preflight;
mod probe;
mod project;
mod project_check;
mod report;
mod run;
mod sandbox;
mod session;
mod settings;
#[cfg(test)]
mod testing;
mod tty;
mod wrapper;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::config::Mode;
use crate::egress::Egress;
use crate::lifetime::Jails;
use crate::session::outputs::mirror::{Caps, Mirror};
use crate::wrapper::host::{Host, Teardown};
use crate::wrapper::{Spawner, WrapperEnv};

/// How long the exit waits for reaper threads after the runs were killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    if let Some(code) = subcommand() {
        return code;
    }
    let opts = match config::parse(std::env::args_os().skip(1), |var| std::env::var_os(var)) {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("nix-sandbox-mcp: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    match opts.mode {
        Mode::Help => return print(&config::help()),
        Mode::Version => return print(&format!("nix-sandbox-mcp {}\n", env!("CARGO_PKG_VERSION"))),
        Mode::Stdio | Mode::Http | Mode::Check => {}
    }
    init_logging();
    let catalog = load_catalog(&opts);
    // The self-test's host facts: cgroups (made ready here), the jails' user.
    let host = match Host::detect() {
        Ok(host) => Arc::new(host),
        Err(reason) => {
            eprintln!("nix-sandbox-mcp: {reason}");
            return ExitCode::from(2);
        }
    };
    for line in host.report() {
        tracing::info!("self-test: {line}");
    }
    let _teardown = Teardown(Arc::clone(&host));
    let problems = match preflight_or_stop(&opts, &host) {
        Ok(problems) => problems,
        Err(code) => return code,
    };
    // Once the server will serve: a refused start says only why.
    raise_open_files();
    // Before the user namespace below, in which other users' files would
    // show as the overflow uid.
    let packages_cache = packages_cache(&opts, &catalog);
    // Before the runtime: a process makes a user namespace only while it
    // has one thread.
    let (mut jails, budgets) = contain(&host);
    // After the jails' pid namespace: its init, a fork of this process,
    // holds no copy of the secrets the proxy reads.
    let runtime = host.jail_users.as_ref().map(|users| users.runtime_dir());
    let egress = Egress::start(catalog.policies(), &opts.egress, runtime, |var| {
        std::env::var_os(var)
    });
    // A project asked writable: a layer per session, or why not (logged).
    let project = project_check::start(
        opts.project_writable,
        opts.project_dir.as_deref(),
        host.jail_users.is_some(),
        opts.bounds.layers_bytes,
    );
    // What starts every jail, from here down.
    let spawner = Spawner {
        env: Arc::new(WrapperEnv::from_lookup(|name| std::env::var_os(name))),
        host: Arc::clone(&host),
        egress: Arc::new(egress),
        shutdown: CancellationToken::new(),
        project: project.layers.clone(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let code = if opts.mode == Mode::Check {
        let facts = Facts {
            jails: &jails,
            budgets: budgets.as_deref(),
            catalog: &catalog,
            problems: &problems,
            spawner: &spawner,
            project: &project,
            warm_jails: opts.bounds.warm_jails,
        };
        check(&runtime, &facts, opts.project_mount.as_deref())
    } else {
        serve(&runtime, opts, catalog, spawner, packages_cache)
    };
    finish(&mut jails, runtime);
    code
}

/// A subcommand's run (`agent`, `sandbox`), if the first argument names one.
fn subcommand() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1).peekable();
    let lookup = |var: &str| std::env::var_os(var);
    if args.peek().is_some_and(|a| a == "agent") {
        return Some(agent::main(args.skip(1), lookup, init_logging));
    }
    if args.peek().is_some_and(|a| a == "sandbox") {
        return Some(sandbox::main(args.skip(1), lookup));
    }
    None
}

/// The manifests' environments, and the project's dev shell as `project`
/// when asked and offered; each one refused, and each field this server
/// does not know, logged.
fn load_catalog(opts: &config::Options) -> Catalog {
    let mut catalog = Catalog::load(&opts.manifests, opts.allow_outside_store);
    let project_dir = opts.project_dir.as_deref().map(std::path::Path::new);
    match catalog.offer_project(opts.project_devshell, project_dir) {
        Ok(Some(line)) => tracing::info!("self-test: {line}"),
        Ok(None) => {}
        Err(line) => tracing::warn!("self-test: {line}"),
    }
    for error in &catalog.errors {
        tracing::error!(%error, "manifest refused; its environments are not served");
    }
    for note in &catalog.notes {
        tracing::warn!(%note, "manifest field unknown to this server; the environment is served");
    }
    catalog
}

/// The packages cache, its directory checked when an environment takes
/// packages on demand or is a dev shell (built through the same cache).
fn packages_cache(opts: &config::Options, catalog: &Catalog) -> packages::cache::Cache {
    let cache = packages::cache::Cache::new(
        |name| std::env::var_os(name),
        opts.bounds.packages_cache_max,
    );
    if catalog
        .envs
        .values()
        .any(|env| env.packages_on_demand.is_some() || env.dev_shell.is_some())
    {
        cache.prepare();
    }
    cache
}

/// The preflight's problems: each one that would fail every call stops
/// the server here (`Err`), in one line each on stderr (an MCP client
/// shows the server's stderr); the others are logged and the server goes
/// on. `--check` reports them all itself.
fn preflight_or_stop(
    opts: &config::Options,
    host: &Host,
) -> Result<Vec<preflight::Problem>, ExitCode> {
    let problems = preflight::check(opts, host);
    if opts.mode != Mode::Check {
        for problem in problems.iter().filter(|p| !p.fatal) {
            tracing::error!("{problem}");
        }
        if problems.iter().any(|p| p.fatal) {
            for problem in problems.iter().filter(|p| p.fatal) {
                eprintln!("nix-sandbox-mcp: {problem}");
            }
            return Err(ExitCode::from(2));
        }
    }
    Ok(problems)
}

/// Raises the soft limit of open files to the hard one, and says so.
fn raise_open_files() {
    match fdlimit::raise() {
        Ok(r) if r.now > r.was => tracing::info!(
            "open files: the soft limit {} raised to the hard limit {}",
            r.was,
            r.now
        ),
        Ok(r) => tracing::info!("open files: the soft limit is the hard one, {}", r.now),
        Err(e) => tracing::warn!(error = %e, "open files: the soft limit could not be raised"),
    }
}

/// The jails' pid namespace (lifetime.rs), its init placed in the jails'
/// cgroup when there is one, and the self-test's line on the kernel
/// budgets; each said.
fn contain(host: &Host) -> (Jails, Option<String>) {
    let jails = Jails::contain(
        host.root,
        host.userns_problem.as_deref(),
        host.jail_users.is_some(),
    );
    match &jails {
        Jails::Contained(..) => tracing::info!("self-test: {}", jails.report()),
        Jails::Loose(_) => tracing::warn!("self-test: {}", jails.report()),
    }
    let budgets = jails.budget_report(host.jail_users.is_some());
    if let Some(line) = &budgets {
        tracing::info!("self-test: {line}");
    }
    if let (Some(cgroups), Some(pid)) = (&host.cgroups, jails.init_pid())
        && let Err(e) = cgroups.place_init(pid)
    {
        tracing::warn!(error = %e, "the jails' init stays in the server's cgroup");
    }
    (jails, budgets)
}

/// What `--check` reports on.
struct Facts<'a> {
    jails: &'a Jails,
    budgets: Option<&'a str>,
    catalog: &'a Catalog,
    problems: &'a [preflight::Problem],
    spawner: &'a Spawner,
    project: &'a project_check::Project,
    /// `--warm-jails`.
    warm_jails: usize,
}

/// `--check`: the jails, the listener, the budgets, a probe of every
/// environment and the project's layer, on stdout; success when all hold.
fn check(runtime: &tokio::runtime::Runtime, facts: &Facts<'_>, mount: Option<&str>) -> ExitCode {
    let mut out = std::io::stdout().lock();
    tracing::info!("self-test: {}", warm_line(facts.warm_jails));
    // The listener's sockets are the runtime's.
    let (listener_ok, listener) = runtime.block_on(async { mcp::listen::check() });
    let checked = writeln!(out, "{}\n{listener}", facts.jails.report())
        .and_then(|()| facts.budgets.map_or(Ok(()), |line| writeln!(out, "{line}")))
        .and_then(|()| {
            let check = probe::run_check(facts.catalog, facts.problems, facts.spawner, &mut out);
            runtime.block_on(check).map(|ok| ok && listener_ok)
        })
        .and_then(
            |ok| match project_check::check_layers(facts.project, facts.catalog) {
                Some((held, line)) => writeln!(out, "{line}").map(|()| ok && held),
                None => Ok(ok),
            },
        )
        .and_then(|ok| match &facts.project.forks {
            Some(line) => writeln!(out, "{line}").map(|()| ok),
            None => Ok(ok),
        })
        .and_then(|ok| {
            let check = project_check::check(mount, facts.project, facts.catalog, facts.spawner);
            match runtime.block_on(check) {
                Some((held, line)) => writeln!(out, "{line}").map(|()| ok && held),
                None => Ok(ok),
            }
        });
    match checked {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            tracing::error!(error = %e, "cannot write the report");
            ExitCode::FAILURE
        }
    }
}

/// `--check`'s line on the warm jails.
fn warm_line(bound: usize) -> String {
    match bound {
        0 => "warm jails: off (NIX_SANDBOX_WARM_JAILS=0): every run starts its jail".into(),
        n => format!(
            "warm jails: at most {n} idle, all environments together (NIX_SANDBOX_WARM_JAILS, \
             --warm-jails); each serves one run or new session, then is killed; an environment \
             unused for {} s keeps none",
            session::warm::IDLE.as_secs()
        ),
    }
}

/// Ends every jail: they die with the namespace's init, and the wrappers'
/// reaper tasks (wrapper/reaper.rs) reap them and remove their cgroups
/// before the runtime stops; without the namespace, dropping the tasks
/// kills what is left of the calls (their guards). A reaper stuck on an
/// unkillable process must not hold the exit.
fn finish(jails: &mut Jails, runtime: tokio::runtime::Runtime) {
    jails.kill();
    if matches!(jails, Jails::Contained(..))
        && !runtime.block_on(wrapper::reaper::finish(SHUTDOWN_GRACE))
    {
        tracing::warn!("wrappers still not reaped at exit");
    }
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    if !jails.reap(SHUTDOWN_GRACE) {
        tracing::warn!("jails still ending at exit; the kernel ends them");
    }
}

/// MCP over stdio or HTTP until the client goes or a signal comes.
fn serve(
    runtime: &tokio::runtime::Runtime,
    opts: config::Options,
    catalog: Catalog,
    spawner: Spawner,
    packages_cache: packages::cache::Cache,
) -> ExitCode {
    tracing::info!(environments = ?catalog.names(), mode = ?opts.mode, "serving MCP");
    if let Some(dir) = &opts.project_dir {
        let how = if spawner
            .project
            .as_ref()
            .is_some_and(|l| l.lower().is_some())
        {
            "writable through a layer per session"
        } else {
            "read-only"
        };
        tracing::debug!(project_dir = ?dir, "project mounted {how}");
    }
    let config = mcp::Config {
        catalog,
        spawner,
        max_code_bytes: opts.max_code_bytes,
        max_files_bytes: opts.bounds.files_bytes,
        project_mount: opts.project_mount,
        project_dir: opts.project_dir.map(std::path::PathBuf::from),
        sessions: opts.sessions,
        mirror: opts.output_dir.map(|dir| {
            let caps = Caps {
                total: opts.bounds.output_max_bytes,
                per_call: opts.bounds.output_call_bytes,
            };
            Mirror::new(dir, caps)
        }),
        max_runs: opts.bounds.max_runs,
        // Over stdio the server has one client, whose share is everything.
        shares: opts.http_addr.as_ref().map(|_| admission::Shares {
            runs: opts.bounds.client_runs_share,
            sessions: opts.bounds.client_sessions_share,
        }),
        warm: session::warm::Settings {
            bound: opts.bounds.warm_jails,
            idle: session::warm::IDLE,
        },
        control_dir: control::wire::socket_dir(nix::unistd::geteuid().as_raw(), |var| {
            std::env::var_os(var)
        }),
        composer: packages::Composer::new(packages::Settings {
            cache: packages_cache,
            max_compositions: opts.bounds.max_compositions,
            allow_outside_store: opts.allow_outside_store,
        }),
    };
    let served = match opts.http_addr {
        Some(addr) => {
            let options = mcp::http::Options {
                addr,
                token_file: opts.token_file,
                allowed_origins: opts.allowed_origins,
                max_connections: opts.bounds.max_connections,
                read_timeout: opts.bounds.read_timeout,
                max_mcp_sessions: opts.bounds.max_mcp_sessions,
                mcp_idle_timeout: opts.bounds.mcp_idle_timeout,
            };
            runtime.block_on(mcp::http::serve(&options, config))
        }
        None => runtime.block_on(mcp::stdio::serve(config, opts.bounds.max_unread_bytes)),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the MCP service failed");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, at `RUST_LOG`'s level ([`proto::log::init`]).
fn init_logging() {
    proto::log::init(
        settings::RUST_LOG.var_name(),
        settings::RUST_LOG.text(),
        std::io::stderr().is_terminal(),
    );
}

fn print(text: &str) -> ExitCode {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
