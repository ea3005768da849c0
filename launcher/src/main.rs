//! nix-sandbox-mcp: the MCP server. It reads the manifests Nix wrote and runs
//! code through the jailed wrappers they name; it builds no jail itself.
//!
//! stdout is the MCP channel: only the protocol goes there (the `--help`,
//! `--version` and `--check` modes, which serve no MCP, print there too).
//! Logs go to stderr.

mod catalog;
#[cfg(test)]
mod catalog_fuzz;
mod cli;
mod mcp;
mod outputs;
mod report;
mod run;
mod session;
#[cfg(test)]
mod testing;
mod wrapper;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::catalog::Catalog;
use crate::cli::Mode;
use crate::wrapper::WrapperEnv;
use crate::wrapper::host::{Host, Teardown};
use crate::wrapper::probe;

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
    let wrapper_env = WrapperEnv::from_process();
    // The self-test's host facts: cgroups (made ready here), root or not.
    let host = Arc::new(Host::detect());
    for line in host.report() {
        tracing::info!("self-test: {line}");
    }
    let _teardown = Teardown(Arc::clone(&host));
    if opts.mode == Mode::Check {
        let mut out = std::io::stdout().lock();
        return match runtime.block_on(probe::run_check(&catalog, &wrapper_env, &host, &mut out)) {
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
        wrapper_env,
        max_code_bytes: opts.max_code_bytes,
        project_mount: project_mount(),
        shutdown: CancellationToken::new(),
        host,
        sessions,
        mirror: outputs::mirror::Mirror::from_var(std::env::var_os(
            outputs::mirror::OUTPUT_DIR_VAR,
        )),
    };
    let served = match &opts.http_addr {
        Some(addr) => {
            let options = mcp::http::Options {
                addr: addr.clone(),
                token_file: opts.token_file.clone(),
                allowed_origins: opts.allowed_origins.clone(),
            };
            runtime.block_on(mcp::http::serve(&options, config))
        }
        None => runtime.block_on(mcp::stdio::serve(config)),
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
