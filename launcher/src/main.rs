//! nix-sandbox-mcp: the MCP server. It reads the manifests Nix wrote and runs
//! code through the jailed wrappers they name; it builds no jail itself.
//!
//! stdout is the MCP channel: only the protocol goes there (the `--help`,
//! `--version` and `--check` modes, which serve no MCP, print there too).
//! Logs go to stderr.

mod cgroup;
mod check;
mod cli;
mod errors;
mod exec;
mod files_in;
mod http;
mod limits;
mod manifest;
#[cfg(test)]
mod manifest_fuzz;
mod mcp;
mod mirror;
mod outputs;
mod result;
mod session;
mod session_call;
mod session_jail;
mod session_result;
mod stdin_eof;
mod throwaway;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use tokio_util::sync::CancellationToken;

use crate::cli::Mode;
use crate::exec::JobEnv;
use crate::manifest::Catalog;

/// How long the exit waits for reaper threads after the jobs were killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let opts = match cli::parse(
        std::env::args_os().skip(1),
        std::env::var_os("NIX_SANDBOX_MANIFEST"),
    ) {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("nix-sandbox-mcp: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    match opts.mode {
        Mode::Help => return print(cli::HELP),
        Mode::Version => return print(&format!("nix-sandbox-mcp {}\n", env!("CARGO_PKG_VERSION"))),
        Mode::Stdio | Mode::Http | Mode::Check => {}
    }
    let sessions = match session::Settings::new(
        |var| std::env::var(var).ok(),
        opts.max_sessions,
        opts.session_idle_timeout,
        opts.session_max_lifetime,
    ) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("nix-sandbox-mcp: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    init_logging();
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
    let catalog = Catalog::load(&opts.manifests, opts.allow_outside_store);
    for error in &catalog.errors {
        tracing::error!(%error, "manifest refused; its environments are not served");
    }
    let job_env = JobEnv::from_process();
    // The self-test's host facts: cgroups (made ready here), root or not.
    let host = Arc::new(limits::Host::detect());
    for line in host.report() {
        tracing::info!("self-test: {line}");
    }
    let _teardown = Teardown(Arc::clone(&host));
    if opts.mode == Mode::Check {
        let mut out = std::io::stdout().lock();
        return match runtime.block_on(check::run_check(&catalog, &job_env, &host, &mut out)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                tracing::error!(error = %e, "cannot write the report");
                ExitCode::FAILURE
            }
        };
    }
    tracing::info!(environments = ?catalog.names(), mode = ?opts.mode, "serving MCP");
    let config = mcp::Config {
        catalog,
        job_env,
        max_code_bytes: opts.max_code_bytes,
        project_mount: project_mount(),
        shutdown: CancellationToken::new(),
        host,
        sessions,
        mirror: mirror::Mirror::from_var(std::env::var_os(mirror::OUTPUT_DIR_VAR)).map(Arc::new),
    };
    let served = match &opts.http_addr {
        Some(addr) => {
            let options = http::Options {
                addr: addr.clone(),
                token_file: opts.token_file.clone(),
                allowed_origins: opts.allowed_origins.clone(),
                max_body_bytes: max_body_bytes(opts.max_code_bytes),
            };
            runtime.block_on(serve_http(options, config))
        }
        None => runtime.block_on(serve_stdio(config)),
    };
    // Dropping the tasks kills every job still running (their guards); a
    // reaper thread stuck on an unkillable process must not hold the exit.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the MCP service failed");
            ExitCode::FAILURE
        }
    }
}

/// Serves until the client closes stdin, or SIGTERM or SIGINT (clients
/// such as Gemini CLI stop their servers with SIGTERM, not by closing
/// stdin). Either kills every running job at once (the shutdown token; the
/// jobs' guards kill what is left when the runtime drops their tasks),
/// nothing more is written, and the server exits 0. A client that closes before `initialize` (a health
/// check, a probe) is no error either, and it started no jail: the sandbox
/// probes start with the first handshake.
async fn serve_stdio(config: mcp::Config) -> Result<(), String> {
    let shutdown = config.shutdown.clone();
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let stdin = stdin_eof::EofCancels::new(stdin, shutdown.clone());
    let stdout = stdin_eof::SilentAfter::new(stdout, shutdown.clone());
    // Signals only: end of input cancels `shutdown` too, and then rmcp
    // still writes the answers of the calls that ended.
    let stop = http::stop_signal(CancellationToken::new());
    tokio::pin!(stop);
    let served = tokio::select! {
        served = mcp::Server::new(config).serve((stdin, stdout)) => served,
        () = &mut stop => {
            tracing::info!("stopped before initialize; server stopping");
            return Ok(());
        }
    };
    let service = match served {
        Ok(service) => service,
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("client closed the connection before initialize; server stopping");
            return Ok(());
        }
        Err(e) => return Err(format!("MCP initialisation failed: {e}")),
    };
    service.service().start_probes();
    let quit = tokio::select! {
        quit = service.waiting() => quit,
        () = &mut stop => {
            shutdown.cancel();
            tracing::info!("server stopping");
            return Ok(());
        }
    };
    shutdown.cancel();
    let quit = quit.map_err(|e| format!("the MCP service task failed: {e}"))?;
    tracing::info!(reason = ?quit, "client gone, server stopping");
    Ok(())
}

/// Serves MCP over HTTP until a signal; each MCP session gets a handler of
/// its own. Every job still running is killed on the way out.
async fn serve_http(options: http::Options, config: mcp::Config) -> Result<(), String> {
    let shutdown = config.shutdown.clone();
    let server = mcp::Server::new(config);
    server.start_probes();
    let served = http::serve(&options, server, shutdown.clone()).await;
    shutdown.cancel();
    served
}

/// The largest HTTP request body: the largest code and files, every byte
/// escaped as `\u00XX` in the JSON, and room for the rest of the message.
fn max_body_bytes(max_code_bytes: usize) -> usize {
    max_code_bytes
        .saturating_add(proto::files::MAX_FILES_BYTES)
        .saturating_mul(6)
        .saturating_add(64 * 1024)
}

/// Removes the launcher's cgroup directories on the way out.
struct Teardown(Arc<limits::Host>);

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(cgroups) = &self.0.cgroups {
            cgroups.teardown();
        }
    }
}

/// `PROJECT_MOUNT` (default `/project`) when `PROJECT_DIR` is set.
fn project_mount() -> Option<String> {
    let dir = std::env::var_os("PROJECT_DIR").filter(|v| !v.is_empty())?;
    let mount = std::env::var("PROJECT_MOUNT")
        .ok()
        .filter(|v| !v.is_empty());
    tracing::debug!(project_dir = ?dir, "project mounted read-only");
    Some(mount.unwrap_or_else(|| "/project".into()))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn print(text: &str) -> ExitCode {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
