//! The MCP surface: one tool, `run` (tool.rs: its schema and the server's
//! instructions), and the session outputs as resources (resources.rs),
//! served over stdio (stdio.rs, sockets.rs) or streamable HTTP (http.rs).
//!
//! A call reads top-down from [`Server::call_tool`]: its arguments
//! (args.rs), its environment, the checks every call passes before anything
//! runs ([`Server::precheck`]), then one of
//!
//! - a run ([`crate::run`]) in a fresh jail, reported by
//!   [`report::run::ran`];
//! - a call in a session ([`Sessions::call`]), or with `files` and no
//!   `session` in a throwaway session jail ([`throwaway::call`]), reported by
//!   [`report::call::called`].
//!
//! Whatever stops a call before its code runs is a [`Refusal`]
//! (report/refusal.rs), which the layers' own errors convert into.

mod activity;
pub mod args;
mod backpressure;
mod connections;
pub mod http;
pub mod listen;
mod resources;
mod sockets;
pub mod stdio;
mod token;
mod tool;

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use tokio_util::sync::CancellationToken;

use crate::admission::{self, ClientKey, Runs, SessionSlots, Shares, Slot};
use crate::catalog::names;
use crate::catalog::{Catalog, Env, Interpreter};
use crate::live::Tail;
use crate::packages::{self, Composer};
use crate::probe::{self, Probes};
use crate::report;
use crate::report::refusal::Refusal;
use crate::run;
use crate::session::outputs::mirror::Mirror;
use crate::session::warm::{self, Took};
use crate::session::{self, SessionName, Sessions, throwaway};
use crate::wrapper::Spawner;
use args::RunArgs;
use proto::files::{MAX_FILES, MAX_PATH_BYTES};
use resources::Links;

/// The largest code a session takes: its exec frame, every byte of the
/// code and of the files' paths escaped as `\u00XX`, must fit in one frame
/// (the files' bytes go before it, in frames of their own).
const SESSION_MAX_CODE_BYTES: usize =
    (proto::frame::MAX_FRAME_BYTES - 64 * 1024 - 6 * MAX_FILES * MAX_PATH_BYTES) / 6;

/// The largest request message, an HTTP body or a stdio line: the largest
/// code and files' paths, every byte escaped as `\u00XX` in the JSON, the
/// largest files twice over (base64 makes 3 bytes 4; text is rarely
/// escaped), and room for the rest of the message.
pub fn max_message_bytes(max_code_bytes: usize, max_files_bytes: usize) -> usize {
    max_code_bytes
        .saturating_add(MAX_FILES * MAX_PATH_BYTES)
        .saturating_mul(6)
        .saturating_add(max_files_bytes.saturating_mul(2))
        .saturating_add(64 * 1024)
}

/// What the server needs to answer calls.
pub struct Config {
    pub catalog: Catalog,
    /// What starts jails; its shutdown token is cancelled when the client
    /// goes away: every running call is killed.
    pub spawner: Spawner,
    pub max_code_bytes: usize,
    /// The most bytes the `files` of one call hold (`--files-mb`).
    pub max_files_bytes: usize,
    /// Where the project is mounted in the jail, when `PROJECT_DIR` is set.
    pub project_mount: Option<String>,
    /// `PROJECT_DIR`: the flake the `project` environment is built from,
    /// when the catalog offers it.
    pub project_dir: Option<std::path::PathBuf>,
    /// The session table's limits.
    pub sessions: session::Settings,
    /// Where outputs are mirrored (`NIX_SANDBOX_OUTPUT_DIR`), if anywhere.
    pub mirror: Option<Mirror>,
    /// Environments with packages added (`packages`), composed and cached.
    pub composer: Composer,
    /// Runs at once, all clients together (`--max-runs`).
    pub max_runs: usize,
    /// What one client may hold while others want slots (HTTP); `None`
    /// for a server with one client (stdio).
    pub shares: Option<Shares>,
    /// The warm jails' bound (`--warm-jails`; 0: none) and idle expiry.
    pub warm: warm::Settings,
    /// The control socket's directory (control/wire.rs), if it has one.
    pub control_dir: Option<std::path::PathBuf>,
}

/// What every handler of the server shares, made once.
struct Shared {
    catalog: Catalog,
    probes: Arc<Probes>,
    spawner: Spawner,
    max_code_bytes: usize,
    max_files_bytes: usize,
    instructions: String,
    tool: Tool,
    settings: session::Settings,
    mirror: Option<Mirror>,
    composer: Composer,
    project_dir: Option<std::path::PathBuf>,
    /// The runs going on and the sessions open, all clients together.
    runs: Runs,
    session_slots: SessionSlots,
    /// Warm jails for runs and new sessions, all clients together.
    pool: warm::Pool,
    /// The sessions and resource links of requests without an MCP session
    /// (the stateless 2026-07-28 revision over HTTP): one table for all of
    /// them, in which the server names the sessions (session/names.rs).
    stateless: Client,
}

/// A client's session table and the resource links handed out to it.
struct Client {
    sessions: Sessions,
    links: Links,
}

/// The MCP server handler: what the server shares, and one client's state.
pub struct Server {
    shared: Arc<Shared>,
    /// This client's sessions (dropping the handler kills them) and links.
    client: Client,
}

/// Where a call runs, once its checks passed.
enum Target {
    /// A fresh jail of the run wrapper, gone with the call.
    Run,
    /// The named session.
    Session(SessionName),
    /// A session jail of its own, for a call with `files` and no session.
    Throwaway,
    /// A plain run an agent's jail may serve, its interpreter's only call
    /// (`once`): a warm jail when the pool has one ready; else, when the
    /// code names its outputs ([`names_outputs`]), a session jail started
    /// for it, so that they come back; else the run wrapper (as `Run`).
    Warm,
}

/// Whether a plain run's code names its outputs: `outputs` (the directory
/// `/workspace/outputs`), or matplotlib's `.show(` (which saves the open
/// figures there in an agent's jail). Such a run goes to an agent's jail
/// even when no warm one is ready, so that what it writes comes back.
fn names_outputs(code: &str) -> bool {
    code.contains("outputs") || code.contains(".show(")
}

impl Server {
    /// Builds the handler; [`Server::start_probes`] starts the sandbox
    /// probes (over stdio, once a client has completed the handshake, so
    /// that a client that closes at once, a health check, starts no jail).
    pub fn new(config: Config) -> Self {
        let Config {
            catalog,
            spawner,
            max_code_bytes,
            max_files_bytes,
            project_mount,
            project_dir,
            sessions: settings,
            mirror,
            composer,
            max_runs,
            shares,
            warm,
            control_dir: _,
        } = config;
        let probes = Probes::new(&catalog, spawner.clone());
        let session_slots = SessionSlots::new(settings.max_total, shares.map(|s| s.sessions));
        let runs = Runs::new(max_runs, shares.map(|s| s.runs));
        let pool = warm::Pool::new(warm, spawner.clone(), runs.clone());
        let stateless = Client {
            sessions: Sessions::server_named(
                settings,
                spawner.clone(),
                session_slots.clone(),
                pool.clone(),
            ),
            links: Links::default(),
        };
        Self::for_client(
            None,
            Arc::new(Shared {
                instructions: tool::instructions(&catalog, project_mount.as_deref(), &spawner.host),
                tool: tool::run_tool(&catalog, &settings),
                catalog,
                probes: Arc::new(probes),
                spawner,
                max_code_bytes,
                max_files_bytes,
                settings,
                mirror,
                composer,
                project_dir,
                runs,
                session_slots,
                pool,
                stateless,
            }),
        )
    }

    /// A handler for another MCP client (one per MCP session over HTTP):
    /// it shares the catalog, the probes and the settings, and has state of
    /// its own (the session table), so clients never see each other's state.
    /// rmcp's HTTP service also builds one to read a tool's schema: building
    /// must stay cheap and start nothing.
    /// Over HTTP, each client's sessions are mirrored under a directory of
    /// its own (`client-ID/SESSION`): two clients' sessions of one name
    /// stay apart.
    pub fn for_another_client(&self) -> Self {
        let client = format!("client-{}", session::random_suffix());
        Self::for_client(Some(client), Arc::clone(&self.shared))
    }

    /// A handler with a session table of its own; `mirror_client`: its
    /// directory in the outputs mirror, if not the mirror's top.
    fn for_client(mirror_client: Option<String>, shared: Arc<Shared>) -> Self {
        let sessions = Sessions::new(
            shared.settings,
            shared.spawner.clone(),
            shared.session_slots.clone(),
            shared.pool.clone(),
            mirror_client,
        );
        Self {
            shared,
            client: Client {
                sessions,
                links: Links::default(),
            },
        }
    }

    /// What makes a person's sessions (`sandbox create`, control/): a
    /// handler of its own whose table holds them (client `cli`).
    pub fn person(&self) -> Arc<dyn crate::control::Create> {
        Arc::new(Person(Self::for_client(None, Arc::clone(&self.shared))))
    }

    /// Starts the control socket in `dir` (control/mod.rs), answering with
    /// this server's sessions and making a person's ones, until `shutdown`.
    pub fn start_control(
        &self,
        shutdown: &tokio_util::sync::CancellationToken,
        dir: Option<&std::path::Path>,
    ) {
        crate::control::start(self.admission().1, Some(self.person()), shutdown, dir);
    }

    /// Starts the background sandbox probes (once; calls wait for theirs).
    pub fn start_probes(&self) {
        self.shared.probes.start(&self.shared.catalog);
    }

    /// The session table and links a request uses, and who the client is
    /// (admission.rs): this handler's, the one client over stdio or an MCP
    /// session over HTTP; or over HTTP without an MCP session (the
    /// 2026-07-28 revision: rmcp builds a handler for that one request) the
    /// server's shared ones, all such requests one client together.
    fn client(&self, context: &RequestContext<RoleServer>) -> (&Client, ClientKey) {
        let Some(parts) = context.extensions.get::<::http::request::Parts>() else {
            return (&self.client, ClientKey::stdio());
        };
        match parts.headers.get("mcp-session-id").map(|v| v.to_str()) {
            None => (&self.shared.stateless, ClientKey::stateless()),
            Some(id) => (&self.client, ClientKey::mcp_session(id.unwrap_or_default())),
        }
    }

    /// The pools every client shares, for the HTTP front's MCP sessions
    /// (which may end one that holds nothing).
    pub fn admission(&self) -> (Runs, SessionSlots) {
        (self.shared.runs.clone(), self.shared.session_slots.clone())
    }

    /// Runs one `run` call: in a fresh sandbox, the named session, or a
    /// throwaway session jail; `resource_links`: the client takes
    /// `resource_link` content.
    async fn dispatch(
        &self,
        args: RunArgs,
        (client, key): (&Client, ClientKey),
        resource_links: bool,
        ct: CancellationToken,
        progress: Progress,
    ) -> Result<CallToolResult, Refusal> {
        let shared = &*self.shared;
        let (open, running) = open_env(&args, client);
        let env = match (open, &args.packages) {
            (Some(env), None) => env,
            (open, packages) => {
                let name = open.as_ref().map(|env| env.name.as_str());
                let mut base = self.resolve_env(name.or(args.env.as_deref()))?;
                if base.dev_shell.is_some() {
                    base = self.project_env(base, &progress).await?;
                }
                let env = match packages {
                    None => base,
                    Some(asked) => {
                        let bound = args.session.as_deref().zip(open.as_deref());
                        self.with_packages(base, asked, bound, &progress).await?
                    }
                };
                match &args.profile {
                    Some(profile) => Arc::new(profile.apply(&env)),
                    None => env,
                }
            }
        };
        let (env, cut) = self.timed(env, args.timeout_s);
        let (code, files) = (&args.code, &args.files);
        // A call to a running session's jail with the packages it was made
        // with starts no jail: its wrapper is not looked at.
        let starts_jail = !(running && args.packages.is_none());
        // The output as it comes of a call run by an agent, for progress.
        let tail = progress.wanted().then(Tail::new);
        let throwaway = throwaway::Context {
            spawner: &shared.spawner,
            pool: &shared.pool,
            mirror: shared.mirror.as_ref(),
            cancel: &ct,
            tail: tail.as_ref(),
        };
        let result = match self.precheck(&env, &args, starts_jail).await? {
            Target::Run => {
                let _slot = self.admit_run(&ct, &key, &env).await?;
                self.plain_run(&env, code, &ct, &progress).await?
            }
            Target::Warm => {
                let _slot = self.admit_run(&ct, &key, &env).await?;
                self.warm_run(&env, code, &throwaway, &progress, resource_links)
                    .await?
            }
            Target::Session(name) => {
                let mirror = shared.mirror.as_ref();
                let called = (client.sessions).call(
                    &key,
                    &name,
                    &env,
                    code,
                    files,
                    mirror,
                    &ct,
                    args.publish,
                    args.from.as_ref(),
                    args.end,
                    tail.as_ref(),
                );
                let outcome = progress.while_running(&env, tail.as_ref(), called).await?;
                let fresh = outcome.ended_before.is_some() || outcome.reset.is_some();
                (client.links).note(&outcome.session, fresh, &outcome.outputs.items);
                report::call::called(&env, &outcome, resource_links)
            }
            Target::Throwaway => {
                let _slot = self.admit_run(&ct, &key, &env).await?;
                let called = throwaway::call(&env, code, files, &throwaway);
                let outcome = progress.while_running(&env, tail.as_ref(), called).await?;
                report::call::called(&env, &outcome, resource_links)
            }
        };
        Ok(match cut {
            Some(asked) => report::with_timeout_cut(result, asked, env.limits.timeout_s),
            None => result,
        })
    }

    /// A plain run an agent's jail may serve: in a warm jail when one is
    /// ready, its interpreter's only call run as the run wrapper runs a
    /// script and reported as a run (with the outputs the jail's agent
    /// read); else, for code that names its outputs, the same in a session
    /// jail started for it (a fifth slower than the run wrapper, and the
    /// outputs come back); else in the run wrapper, as with the pool off,
    /// so that a cold or exhausted pool is no slower. The pool refills once
    /// the run is over.
    async fn warm_run(
        &self,
        env: &Arc<Env>,
        code: &str,
        cx: &throwaway::Context<'_>,
        progress: &Progress,
        resource_links: bool,
    ) -> Result<CallToolResult, Refusal> {
        let pool = &self.shared.pool;
        let jail = match pool.take(env) {
            Took::Warm(jail) => Some((*jail, true)),
            Took::Cold if names_outputs(code) => Some((throwaway::start(env, cx)?, false)),
            Took::Cold => None,
        };
        match jail {
            Some((jail, warm)) => {
                let ran = throwaway::once(jail, env, code, cx);
                let once = progress.while_running(env, cx.tail, ran).await?;
                Ok(report::run::ran_by_agent(env, once, resource_links, warm))
            }
            None => {
                if !probe::wrapper_ready(&env.run[0]) {
                    return Err(Refusal::wrapper_missing(&env.name, &env.run[0]));
                }
                let result = self.plain_run(env, code, cx.cancel, progress).await;
                pool.refill_after_run(env);
                result
            }
        }
    }

    /// `code` in a fresh jail of `env`'s run wrapper, reported as a run.
    async fn plain_run(
        &self,
        env: &Env,
        code: &str,
        ct: &CancellationToken,
        progress: &Progress,
    ) -> Result<CallToolResult, Refusal> {
        let tail = progress.wanted().then(Tail::new);
        let cx = run::Context {
            spawner: &self.shared.spawner,
            cancel: ct,
            tail: tail.as_ref(),
        };
        let ran = run::in_env(env, code, &cx);
        let outcome = progress.while_running(env, tail.as_ref(), ran).await?;
        Ok(report::run::ran(env, &outcome))
    }

    /// `env` with the timeout this call has: the one it asked for, cut to
    /// the environment's ceiling, else the environment's own `timeout_s`
    /// (the catalog's: an open session's environment may carry the timeout
    /// of the call that made it). Also the seconds asked when they were
    /// cut.
    fn timed(&self, env: Arc<Env>, asked: Option<u64>) -> (Arc<Env>, Option<u64>) {
        // A person's profile lowers the declared limits of its sessions.
        let declared = match (self.shared.catalog.envs.get(&env.name), &env.profile) {
            (Some(e), Some(profile)) => profile.lower(&e.limits),
            (Some(e), None) => e.limits.clone(),
            (None, _) => env.limits.clone(),
        };
        let ceiling = declared.ceiling();
        let (timeout, cut) = match asked.and_then(NonZeroU64::new) {
            Some(asked) if asked > ceiling => (ceiling, Some(asked.get())),
            Some(asked) => (asked, None),
            None => (declared.timeout_s, None),
        };
        if timeout == env.limits.timeout_s {
            return (env, cut);
        }
        let mut timed = Env::clone(&env);
        timed.limits.timeout_s = timeout;
        (Arc::new(timed), cut)
    }

    /// The checks every call passes before anything runs, runs and session
    /// calls alike, in the order their refusals are told: where it runs
    /// (a valid session name, a port to publish that the environment
    /// allows, from a session, an environment with a session agent when one
    /// is needed), the code (not empty, not too large, no NUL for the
    /// agent's frames), the wrapper (there and executable, when the call
    /// may start a jail: `starts_jail`), the sandbox (its probe passed).
    async fn precheck(
        &self,
        env: &Env,
        args: &RunArgs,
        starts_jail: bool,
    ) -> Result<Target, Refusal> {
        if args.session.is_none() && (args.from.is_some() || args.end) {
            return Err(Refusal::invalid_arguments(
                "`from` and `end` need a `session`: name the session to start or end",
            ));
        }
        let target = match &args.session {
            Some(name) => Target::Session(
                SessionName::new(name).ok_or_else(|| Refusal::bad_session_name(name))?,
            ),
            None if !args.files.is_empty() => Target::Throwaway,
            // With warm jails, a plain run the agent can take goes to a
            // warm jail when one is ready, so that its outputs come back;
            // one that names its outputs goes to an agent's jail either
            // way. Every driver runs it as the run wrapper would (`once`),
            // so that it reads the same.
            None if (self.shared.pool.enabled() || names_outputs(&args.code))
                && self.agent_takes(env, &args.code) =>
            {
                Target::Warm
            }
            None => Target::Run,
        };
        if let Some(port) = args.publish
            && (args.session.is_none() || !env.publish.iter().any(|p| p.get() == port))
        {
            let in_session = args.session.is_some();
            return Err(Refusal::port_not_allowed(
                &env.name,
                port,
                &env.publish,
                in_session,
            ));
        }
        let by_agent = !matches!(target, Target::Run);
        if by_agent && env.session.is_empty() {
            return Err(match target {
                Target::Session(_) => Refusal::sessions_unsupported(&env.name),
                _ => Refusal::files_unsupported(&env.name),
            });
        }
        let files_bytes: usize = args.files.iter().map(|f| f.content.len()).sum();
        let workspace_bytes = env.limits.workspace_mb.get().saturating_mul(1 << 20);
        if files_bytes as u64 > workspace_bytes {
            return Err(Refusal::files_too_large(&format!(
                "the files hold {files_bytes} bytes, more than /workspace holds in `{}` \
                 (workspace_mb {})",
                env.name, env.limits.workspace_mb
            )));
        }
        let code = &args.code;
        if code.is_empty() {
            return Err(Refusal::empty_code());
        }
        let max_code_bytes = match by_agent {
            true => self.shared.max_code_bytes.min(SESSION_MAX_CODE_BYTES),
            false => self.shared.max_code_bytes,
        };
        if code.len() > max_code_bytes {
            return Err(Refusal::code_too_large(code.len(), max_code_bytes));
        }
        if by_agent && code.contains('\0') {
            return Err(Refusal::invalid_arguments(
                "`code` contains a NUL byte, which a session cannot run",
            ));
        }
        // A run an agent's jail may serve falls back on the run wrapper:
        // both must be there, the run wrapper named first, as without one.
        let wrappers = match target {
            Target::Run => vec![&env.run[0]],
            Target::Warm => vec![&env.run[0], &env.session[0]],
            Target::Session(_) | Target::Throwaway => vec![&env.session[0]],
        };
        let missing = wrappers.into_iter().find(|w| !probe::wrapper_ready(w));
        if let (true, Some(wrapper)) = (starts_jail, missing) {
            return Err(Refusal::wrapper_missing(&env.name, wrapper));
        }
        self.shared
            .probes
            .ensure(env)
            .await
            .map_err(|reason| Refusal::sandbox_unavailable(&env.name, &reason))?;
        Ok(target)
    }

    /// Whether `env`'s session agent can run `code` without a session:
    /// it has one, its wrapper is there, and the code fits its frame.
    fn agent_takes(&self, env: &Env, code: &str) -> bool {
        let most = self.shared.max_code_bytes.min(SESSION_MAX_CODE_BYTES);
        env.session
            .first()
            .is_some_and(|wrapper| probe::wrapper_ready(wrapper))
            && code.len() <= most
            && !code.contains('\0')
    }

    /// `base` with the packages `asked` added, checked first against the
    /// names' syntax and the environment's policy (nothing is evaluated
    /// before), and, for an open session (`bound`: its name and
    /// environment), against the packages it was made with.
    async fn with_packages(
        &self,
        base: Arc<Env>,
        asked: &[String],
        bound: Option<(&str, &Env)>,
        progress: &Progress,
    ) -> Result<Arc<Env>, Refusal> {
        let Some(policy) = &base.packages_on_demand else {
            return Err(Refusal::packages_off(&base.name));
        };
        let set = names::check(asked, &policy.allow)
            .map_err(|e| Refusal::bad_packages(&e, &policy.allow))?;
        if let Some((session, env)) = bound
            && env.added != set
        {
            return Err(Refusal::session_packages_mismatch(
                session, &env.added, &set,
            ));
        }
        if set.is_empty() {
            return Ok(base);
        }
        let message = format!("adding {} to {}", set.join(", "), base.name);
        let composed = self
            .shared
            .composer
            .compose(&base, policy, &set, || progress.send(0.0, &message))
            .await;
        let composed = composed.map_err(|e| Refusal::compose_failed(&base.name, &e))?;
        progress.send(1.0, &format!("{message}: done"));
        Ok(composed)
    }

    /// The `project` environment (`placeholder`, the catalog's) built from
    /// the project's dev shell, or found built (packages/devshell.rs).
    async fn project_env(
        &self,
        placeholder: Arc<Env>,
        progress: &Progress,
    ) -> Result<Arc<Env>, Refusal> {
        let shared = &*self.shared;
        let Some(dir) = &shared.project_dir else {
            return Err(Refusal::dev_shell_failed(
                std::path::Path::new("PROJECT_DIR"),
                &packages::ComposeError::Failed("PROJECT_DIR is not set".into()),
            ));
        };
        let message = format!(
            "building `{}` from {}'s dev shell",
            placeholder.name,
            dir.display()
        );
        let built = (shared.composer)
            .dev_shell(&placeholder, dir, || progress.send(0.0, &message))
            .await
            .map_err(|e| Refusal::dev_shell_failed(dir, &e))?;
        progress.send(1.0, &format!("{message}: done"));
        Ok(built)
    }

    /// A slot for one more run of `client` in `env` among all clients'
    /// (admission.rs): waits in line, unless the call is cancelled or the
    /// server stops.
    async fn admit_run(
        &self,
        ct: &CancellationToken,
        client: &ClientKey,
        env: &Env,
    ) -> Result<Slot, Refusal> {
        let shared = &*self.shared;
        // Held until the run's timeout and a reset's grace at the latest.
        let hold = std::time::Duration::from_secs(env.limits.timeout_s.get())
            + session::lease::WAIT_AFTER_CANCEL;
        let admitted = shared.runs.admit(client, admission::QUEUE_WAIT, hold);
        // A free slot first: a call cancelled meanwhile still starts and is
        // stopped at once, as a call that did not wait is.
        tokio::select! {
            biased;
            admitted = admitted => Ok(admitted?),
            () = ct.cancelled() => Err(Refusal::cancelled_in_line()),
            () = shared.spawner.shutdown.cancelled() => Err(Refusal::cancelled_in_line()),
        }
    }

    /// The environment named `requested`, or the default one.
    fn resolve_env(&self, requested: Option<&str>) -> Result<Arc<Env>, Refusal> {
        let catalog = &self.shared.catalog;
        let unknown =
            |name: &str| Refusal::unknown_env(name, &catalog.names(), &catalog.error_lines());
        let name = match requested {
            Some(name) => name,
            None => catalog.default_env().ok_or_else(|| unknown("python"))?,
        };
        catalog.envs.get(name).cloned().ok_or_else(|| unknown(name))
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "nix-sandbox-mcp",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(self.shared.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            self.shared.tool.clone(),
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let (client, _) = self.client(&context);
        Ok(resources::list(&client.sessions, &client.links))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let (client, _) = self.client(&context);
        resources::read(&client.sessions, request.uri)
            .await
            .map(Into::into)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != "run" {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`; this server has one tool, `run`",
                    request.name
                ),
                None,
            ));
        }
        let called = match RunArgs::parse(request.arguments, self.shared.max_files_bytes) {
            Ok(args) => {
                let client = self.client(&context);
                let resource_links = takes_resource_links(&context);
                let progress = Progress(
                    (context.meta.get_progress_token()).map(|token| (context.peer.clone(), token)),
                    AtomicU64::new(0),
                );
                self.dispatch(args, client, resource_links, context.ct.clone(), progress)
                    .await
            }
            Err(refusal) => Err(refusal),
        };
        Ok(called
            .unwrap_or_else(|refusal| report::refused(&refusal))
            .into())
    }
}

/// A person's sessions: made as a model's first `run` to a session makes
/// one (the same environment lookup, packages policy, limits and
/// admission), with no code.
struct Person(Server);

impl crate::control::Create for Person {
    fn create(
        &self,
        env: String,
        name: String,
        packages: Option<Vec<String>>,
        profile: Option<String>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let server = &self.0;
            let profile = match profile {
                None => None,
                Some(profile) => Some(server.profile(&profile)?),
            };
            if let Some(profile) = profile.as_ref().filter(|p| !p.packages)
                && packages.is_some()
            {
                return Err(format!(
                    "profile `{}` takes no packages: drop --with, or choose a profile that \
                     takes them (`nix-sandbox-mcp sandbox profiles` lists them)",
                    profile.name
                ));
            }
            let found = (server.resolve_env(Some(&env)))
                .map_err(|refusal| first_line(&report::refused(&refusal)))?;
            // The least code that starts the session's interpreter.
            let code = match found.interpreter {
                Interpreter::Python => "pass",
                Interpreter::Bash => ":",
                Interpreter::Node => "undefined",
                Interpreter::Program => {
                    return Err(format!(
                        "environment `{env}` builds one source file a call, so it has no empty \
                         session to make: a model's first `run` with `session` makes one"
                    ));
                }
            };
            let mut arguments = rmcp::model::JsonObject::new();
            arguments.insert("env".into(), env.into());
            arguments.insert("session".into(), name.into());
            arguments.insert("code".into(), code.into());
            if let Some(packages) = packages {
                arguments.insert("packages".into(), packages.into());
            }
            let mut args = RunArgs::parse(Some(arguments), server.shared.max_files_bytes)
                .map_err(|refusal| first_line(&report::refused(&refusal)))?;
            args.profile = profile;
            let client = (&server.client, ClientKey::person());
            let progress = Progress(None, AtomicU64::new(0));
            let ct = CancellationToken::new();
            let result = (server.dispatch(args, client, false, ct, progress).await)
                .unwrap_or_else(|refusal| report::refused(&refusal));
            match result.is_error {
                Some(true) => Err(first_line(&result)),
                _ => Ok(()),
            }
        })
    }

    fn profiles(&self) -> Vec<crate::control::wire::ProfileShown> {
        let profiles = self.0.shared.catalog.profiles.values();
        profiles.map(|p| p.as_ref().into()).collect()
    }
}

impl Server {
    /// Profile `name`, or the one-line refusal naming the server's.
    fn profile(&self, name: &str) -> Result<Arc<crate::catalog::Profile>, String> {
        let profiles = &self.shared.catalog.profiles;
        profiles.get(name).cloned().ok_or_else(|| {
            let known = match profiles.is_empty() {
                true => "it has none".to_owned(),
                false => format!(
                    "its profiles: {}",
                    profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            };
            format!(
                "no profile `{name}` on server {} ({known}); `nix-sandbox-mcp sandbox profiles` \
                 lists them",
                std::process::id()
            )
        })
    }
}

/// A result's first line of text, for a person's one-line refusal.
fn first_line(result: &CallToolResult) -> String {
    let text = (result.content.iter())
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default();
    text.lines().next().unwrap_or("refused").to_owned()
}

/// Where a call's progress goes: the client, when it sent a progressToken;
/// and the last progress value sent (the protocol wants each larger).
struct Progress(Option<(Peer<RoleServer>, ProgressToken)>, AtomicU64);

/// How often a running call tells a client that asked for progress how it
/// goes: often enough that a client resetting its timeout on progress
/// never gives up on a live run, seldom enough to cost nothing.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl Progress {
    /// Whether the client asked for progress.
    fn wanted(&self) -> bool {
        self.0.is_some()
    }

    /// Awaits `work` (a run or a session call in `env`), telling the
    /// client, when it asked, every [`PROGRESS_EVERY`]: the seconds
    /// passed (of the call's timeout, the total) and the
    /// newest lines of `tail` (a run's output), or that it is running.
    async fn while_running<T>(
        &self,
        env: &Env,
        tail: Option<&Tail>,
        work: impl Future<Output = T>,
    ) -> T {
        if !self.wanted() {
            return work.await;
        }
        let started = tokio::time::Instant::now();
        // After a package set's steps, the run's seconds count on from them.
        let base = f64::from_bits(self.1.load(Ordering::Relaxed));
        let total = base + env.limits.timeout_s.get() as f64;
        let mut ticks = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return done,
                _ = ticks.tick() => {
                    let secs = started.elapsed().as_secs();
                    let lines = tail.map(Tail::lines).filter(|l| !l.is_empty());
                    let message = lines.unwrap_or_else(|| format!("running, {secs} s"));
                    self.send_of(base + secs as f64, total, &message);
                }
            }
        }
    }

    /// One progress notification of a step (a package set's build).
    fn send(&self, progress: f64, message: &str) {
        self.send_of(progress, 1.0, message);
    }

    /// One progress notification (sent in the background: the call does
    /// not wait for the client to read it).
    fn send_of(&self, progress: f64, total: f64, message: &str) {
        if let Some((peer, token)) = &self.0 {
            self.1.store(progress.to_bits(), Ordering::Relaxed);
            let param = ProgressNotificationParam::new(token.clone(), progress)
                .with_total(total)
                .with_message(message);
            let peer = peer.clone();
            tokio::spawn(async move {
                if let Err(e) = peer.notify_progress(param).await {
                    tracing::debug!(error = %e, "cannot send a progress notification");
                }
            });
        }
    }
}

/// Whether the client's protocol revision has `resource_link` content
/// (2025-06-18 on). Older clients reject a result that holds one (`mcp`
/// 1.9.4 on 2025-03-26 fails the whole call); they get the link named in
/// the text only. Unknown revisions are taken as new.
fn takes_resource_links(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_none_or(|v| v.as_str() >= ProtocolVersion::V_2025_06_18.as_str())
}

/// The environment of the session a call names, when it is open, and
/// whether its jail is running: a call that names an open session and no
/// other environment runs in the session's own (not the default one,
/// which would be refused as a mismatch), with the packages the session
/// was made with. A new session started `from` another runs in that one's.
fn open_env(args: &RunArgs, client: &Client) -> (Option<Arc<Env>>, bool) {
    let open = match &args.session {
        Some(name) => client.sessions.env_of(name).or_else(|| {
            let from = args.from.as_ref()?;
            let (env, _) = client.sessions.env_of(from.session.as_str())?;
            Some((env, false))
        }),
        None => None,
    };
    let open = open.filter(|(env, _)| args.env.as_deref().is_none_or(|name| name == env.name));
    match open {
        Some((env, running)) => (Some(env), running),
        None => (None, false),
    }
}
