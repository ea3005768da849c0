//! The MCP surface: one tool, `run`, and the server instructions.
//!
//! A call goes: arguments ([`RunArgs`]) -> environment -> code checks ->
//! wrapper check -> sandbox probe -> [`run::in_env`] -> [`report::run::ran`]; with
//! `session`, the session table ([`Sessions`]) runs it instead and
//! [`report::call::called`] reports it; with `files` and no
//! `session`, a throwaway session jail runs it (throwaway.rs).
//!
//! Resources (issue 7): the outputs of a session that are not shown in a
//! result are resource links, `sandbox://SESSION/outputs/PATH`, which
//! `resources/read` serves through the session's agent while the session
//! lives; `resources/list` lists the links handed out to this client.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, Env};
use crate::errors::RunError;
use crate::files_in;
use crate::outputs::mirror::Mirror;
use crate::outputs::{self, Links, MAX_RESOURCE_BYTES};
use crate::report;
use crate::run;
use crate::session::throwaway;
use crate::session::{self, OutputUnreadable, SessionName, Sessions};
use crate::wrapper::WrapperEnv;
use crate::wrapper::host::Host;
use crate::wrapper::probe::{self, Probes};
use proto::files::{MAX_FILES, MAX_FILES_BYTES, MAX_PATH_BYTES};
use proto::frame::FileIn;

/// The largest code a session takes: its exec frame, every byte of the
/// code and of the largest files escaped as `\u00XX`, must fit in one frame.
const SESSION_MAX_CODE_BYTES: usize = (proto::frame::MAX_FRAME_BYTES
    - 64 * 1024
    - 6 * (MAX_FILES_BYTES + MAX_FILES * MAX_PATH_BYTES))
    / 6;

/// Most packages listed per environment in the instructions.
const MAX_PACKAGES_LISTED: usize = 16;
/// How many of them (the first, the key ones: the interpreter comes first)
/// are listed with their versions; the others by name only, to keep the
/// instructions within their token budget (DESIGN.md section 9).
const PACKAGES_WITH_VERSIONS: usize = 3;

/// What the server needs to answer calls.
pub struct Config {
    pub catalog: Catalog,
    pub wrapper_env: WrapperEnv,
    pub max_code_bytes: usize,
    /// Where the project is mounted in the jail, when `PROJECT_DIR` is set.
    pub project_mount: Option<String>,
    /// Cancelled when the client goes away: every running job is killed.
    pub shutdown: CancellationToken,
    /// What the host gives the jails: cgroups, whether the caller is root.
    pub host: Arc<Host>,
    /// The session table's limits.
    pub sessions: session::Settings,
    /// Where outputs are mirrored (`NIX_SANDBOX_OUTPUT_DIR`), if anywhere.
    pub mirror: Option<Arc<Mirror>>,
}

/// The sessions and resource links of requests without an MCP session
/// (the stateless 2026-07-28 revision over HTTP): one table for all of
/// them, in which the server names the sessions (session.rs).
struct Stateless {
    sessions: Sessions,
    links: Links,
}

/// The session table and links a request uses, and what its client takes.
struct Client<'a> {
    sessions: &'a Sessions,
    links: &'a Links,
    /// The client's protocol revision has `resource_link` content.
    resource_links: bool,
}

/// The MCP server handler.
pub struct Server {
    catalog: Catalog,
    probes: Arc<Probes>,
    wrapper_env: WrapperEnv,
    max_code_bytes: usize,
    shutdown: CancellationToken,
    instructions: String,
    tool: Tool,
    host: Arc<Host>,
    /// This client's sessions; dropping the handler kills them.
    sessions: Sessions,
    mirror: Option<Arc<Mirror>>,
    /// The resource links handed out to this client.
    links: Links,
    /// Shared by every handler of the server.
    stateless: Arc<Stateless>,
}

impl Server {
    /// Builds the handler; [`Server::start_probes`] starts the sandbox
    /// probes (over stdio, once a client has completed the handshake, so
    /// that a client that closes at once, a health check, starts no jail).
    pub fn new(config: Config) -> Self {
        let probes = Arc::new(Probes::new(
            &config.catalog,
            config.wrapper_env.clone(),
            Arc::clone(&config.host),
        ));
        let stateless = Arc::new(Stateless {
            sessions: Sessions::server_named(
                config.sessions,
                config.wrapper_env.clone(),
                Arc::clone(&config.host),
                config.shutdown.clone(),
            ),
            links: Links::default(),
        });
        Self {
            instructions: instructions(
                &config.catalog,
                config.project_mount.as_deref(),
                &config.host,
            ),
            tool: run_tool(&config.catalog, &config.sessions),
            sessions: Sessions::new(
                config.sessions,
                config.wrapper_env.clone(),
                Arc::clone(&config.host),
                config.shutdown.clone(),
            ),
            catalog: config.catalog,
            probes,
            wrapper_env: config.wrapper_env,
            max_code_bytes: config.max_code_bytes,
            shutdown: config.shutdown,
            host: config.host,
            mirror: config.mirror,
            links: Links::default(),
            stateless,
        }
    }

    /// Starts the background sandbox probes (once; calls wait for theirs).
    pub fn start_probes(&self) {
        self.probes.start(&self.catalog);
    }

    /// What a call that came with `context` uses.
    fn client(&self, context: &RequestContext<RoleServer>) -> Client<'_> {
        let resource_links = takes_resource_links(context);
        if outside_mcp_session(context) {
            Client {
                sessions: &self.stateless.sessions,
                links: &self.stateless.links,
                resource_links,
            }
        } else {
            Client {
                sessions: &self.sessions,
                links: &self.links,
                resource_links,
            }
        }
    }

    /// A handler for another MCP client (one per MCP session over HTTP):
    /// it shares the catalog, the probes and the settings, and has state of
    /// its own (the session table), so clients never see each other's state.
    /// rmcp's HTTP service also builds one to read a tool's schema: building
    /// must stay cheap and start nothing.
    pub fn for_another_client(&self) -> Self {
        Self {
            catalog: self.catalog.clone(),
            probes: Arc::clone(&self.probes),
            wrapper_env: self.wrapper_env.clone(),
            max_code_bytes: self.max_code_bytes,
            shutdown: self.shutdown.clone(),
            instructions: self.instructions.clone(),
            tool: self.tool.clone(),
            sessions: Sessions::new(
                *self.sessions.settings(),
                self.wrapper_env.clone(),
                Arc::clone(&self.host),
                self.shutdown.clone(),
            ),
            host: Arc::clone(&self.host),
            mirror: self.mirror.clone(),
            links: Links::default(),
            stateless: Arc::clone(&self.stateless),
        }
    }

    /// Routes one `run` call: to the named session, or to a fresh sandbox.
    async fn dispatch(
        &self,
        args: RunArgs,
        client: &Client<'_>,
        ct: CancellationToken,
    ) -> CallToolResult {
        let env = match self.resolve_env(args.env.as_deref()) {
            Ok(env) => env,
            Err(e) => return report::refused(&e),
        };
        let ran = match &args.session {
            Some(name) => self.run_session(&env, name, &args, client, ct).await,
            None if !args.files.is_empty() => {
                self.run_throwaway(&env, &args.code, &args.files, client, ct)
                    .await
            }
            None => self.run_ephemeral(&env, &args.code, ct).await,
        };
        match ran {
            Ok(r) | Err(r) => r,
        }
    }

    async fn run_session(
        &self,
        env: &Arc<Env>,
        name: &str,
        args: &RunArgs,
        client: &Client<'_>,
        ct: CancellationToken,
    ) -> Result<CallToolResult, CallToolResult> {
        let (code, files) = (&args.code, &args.files);
        let refuse = |e: RunError| report::refused(&e);
        let Some(name) = SessionName::new(name) else {
            return Err(refuse(RunError::bad_session_name(name)));
        };
        if env.session.is_empty() {
            return Err(refuse(RunError::sessions_unsupported(&env.name)));
        }
        self.check_session_call(env, code).await.map_err(refuse)?;
        let mirror = self.mirror.as_deref();
        match client
            .sessions
            .call(&name, env, code, files, mirror, &ct)
            .await
        {
            Ok(outcome) => {
                let fresh = outcome.ended_before.is_some() || outcome.reset.is_some();
                client
                    .links
                    .note(&outcome.session, fresh, &outcome.outputs.items);
                Ok(report::call::called(env, &outcome, client.resource_links))
            }
            Err(e) => Err(refuse(e.into())),
        }
    }

    /// A run with `files` and no session: a session jail for this call only.
    async fn run_throwaway(
        &self,
        env: &Arc<Env>,
        code: &str,
        files: &[FileIn],
        client: &Client<'_>,
        ct: CancellationToken,
    ) -> Result<CallToolResult, CallToolResult> {
        let refuse = |e: RunError| report::refused(&e);
        if env.session.is_empty() {
            return Err(refuse(RunError::files_unsupported(&env.name)));
        }
        self.check_session_call(env, code).await.map_err(refuse)?;
        let cx = throwaway::Context {
            wrapper_env: &self.wrapper_env,
            host: &self.host,
            mirror: self.mirror.as_deref(),
            cancel: &ct,
            shutdown: &self.shutdown,
        };
        match throwaway::call(env, code, files, &cx).await {
            Ok(outcome) => Ok(report::call::called(env, &outcome, client.resource_links)),
            Err(e) => Err(refuse(e.into())),
        }
    }

    /// The checks of a call in a session jail, before anything runs.
    async fn check_session_call(&self, env: &Env, code: &str) -> Result<(), RunError> {
        if code.is_empty() {
            return Err(RunError::empty_code());
        }
        let max = self.max_code_bytes.min(SESSION_MAX_CODE_BYTES);
        if code.len() > max {
            return Err(RunError::code_too_large(code.len(), max));
        }
        if code.contains('\0') {
            return Err(RunError::invalid_arguments(
                "`code` contains a NUL byte, which a session cannot run",
            ));
        }
        if !probe::wrapper_ready(&env.session[0]) {
            return Err(RunError::wrapper_missing(&env.name, &env.session[0]));
        }
        self.probes
            .ensure(env)
            .await
            .map_err(|reason| RunError::sandbox_unavailable(&env.name, &reason))
    }

    fn resolve_env(&self, requested: Option<&str>) -> Result<Arc<Env>, RunError> {
        let unknown = |name: &str| {
            RunError::unknown_env(name, &self.catalog.names(), &self.catalog.error_lines())
        };
        let name = match requested {
            Some(name) => name,
            None => self
                .catalog
                .default_env()
                .ok_or_else(|| unknown("python"))?,
        };
        self.catalog
            .envs
            .get(name)
            .cloned()
            .ok_or_else(|| unknown(name))
    }

    async fn run_ephemeral(
        &self,
        env: &Env,
        code: &str,
        ct: CancellationToken,
    ) -> Result<CallToolResult, CallToolResult> {
        let refuse = |e: RunError| report::refused(&e);
        if code.is_empty() {
            return Err(refuse(RunError::empty_code()));
        }
        if code.len() > self.max_code_bytes {
            return Err(refuse(RunError::code_too_large(
                code.len(),
                self.max_code_bytes,
            )));
        }
        if !probe::wrapper_ready(&env.run[0]) {
            return Err(refuse(RunError::wrapper_missing(&env.name, &env.run[0])));
        }
        self.probes
            .ensure(env)
            .await
            .map_err(|reason| refuse(RunError::sandbox_unavailable(&env.name, &reason)))?;
        let cx = run::Context {
            host: self.probes.host(),
            env: &self.wrapper_env,
            cancel: &ct,
            shutdown: &self.shutdown,
        };
        match run::in_env(env, code, &cx).await {
            Ok(outcome) => Ok(report::run::ran(env, &outcome)),
            Err(e) => Err(refuse(e.into())),
        }
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
            .with_instructions(self.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let client = self.client(&context);
        let resources = client
            .links
            .list(|name| client.sessions.is_open(name))
            .into_iter()
            .map(|(session, output)| {
                Resource::new(outputs::uri(&session, &output.path), output.path.clone())
                    .with_mime_type(output.mime)
                    .with_size(output.size)
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let Some((session, path)) = outputs::parse_uri(&uri) else {
            return Err(McpError::resource_not_found(
                format!(
                    "unknown resource {uri:?}: this server's resources are session outputs, \
                     sandbox://SESSION/outputs/PATH"
                ),
                None,
            ));
        };
        let bytes = match self
            .client(&context)
            .sessions
            .read_output(session, &path, MAX_RESOURCE_BYTES + 1)
            .await
        {
            Ok(bytes) => bytes,
            Err(e) => return Err(unreadable(&uri, session, e)),
        };
        if bytes.len() as u64 > MAX_RESOURCE_BYTES {
            return Err(McpError::invalid_params(
                format!(
                    "{uri} is larger than {}; read a part of it with `run` in session `{session}`",
                    outputs::size_text(MAX_RESOURCE_BYTES)
                ),
                None,
            ));
        }
        let mime = proto::files::mime_type(&path, &bytes).to_owned();
        let contents = match String::from_utf8(bytes) {
            Ok(text) if proto::files::is_text(&mime) || mime == "application/octet-stream" => {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type: Some(mime),
                    text,
                    meta: None,
                }
            }
            Ok(text) => ResourceContents::BlobResourceContents {
                uri,
                mime_type: Some(mime),
                blob: proto::frame::encode_data(text.as_bytes()),
                meta: None,
            },
            Err(e) => ResourceContents::BlobResourceContents {
                uri,
                mime_type: Some(mime),
                blob: proto::frame::encode_data(e.as_bytes()),
                meta: None,
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
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
        let result = match RunArgs::parse(request.arguments.as_ref()) {
            Ok(args) => {
                let client = self.client(&context);
                self.dispatch(args, &client, context.ct.clone()).await
            }
            Err(e) => report::refused(&e),
        };
        Ok(result.into())
    }
}

/// True for a request over HTTP without an MCP session (the 2026-07-28
/// revision): rmcp builds its handler for this one request, so its
/// sessions live in the server's [`Stateless`] table.
fn outside_mcp_session(context: &RequestContext<RoleServer>) -> bool {
    context
        .extensions
        .get::<::http::request::Parts>()
        .is_some_and(|parts| !parts.headers.contains_key("mcp-session-id"))
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

/// Why `resources/read` of `uri` (session `session`) failed, for the client.
fn unreadable(uri: &str, session: &str, e: OutputUnreadable) -> McpError {
    match e {
        OutputUnreadable::NotOpen => McpError::resource_not_found(
            format!(
                "{uri}: session `{session}` is not open (it ended, or never was); outputs \
                 are readable while their session lives"
            ),
            None,
        ),
        OutputUnreadable::Busy => McpError::invalid_params(
            format!("{uri}: session `{session}` is running a call; read it once the call answered"),
            None,
        ),
        OutputUnreadable::Gone(why) => McpError::resource_not_found(format!("{uri}: {why}"), None),
        OutputUnreadable::Broken(why) => McpError::internal_error(
            format!("{uri}: the session's sandbox failed ({why}); it restarts on its next call"),
            None,
        ),
    }
}

/// The arguments of `run`.
#[derive(Debug, PartialEq, Eq)]
struct RunArgs {
    code: String,
    env: Option<String>,
    session: Option<String>,
    files: Vec<FileIn>,
}

impl RunArgs {
    fn parse(arguments: Option<&JsonObject>) -> Result<Self, RunError> {
        let empty = JsonObject::new();
        let arguments = arguments.unwrap_or(&empty);
        if let Some(key) = arguments
            .keys()
            .find(|k| !matches!(k.as_str(), "code" | "env" | "session" | "files"))
        {
            return Err(RunError::invalid_arguments(&format!(
                "unknown argument `{key}`"
            )));
        }
        let code = match arguments.get("code") {
            Some(Value::String(code)) => code.clone(),
            Some(_) => return Err(RunError::invalid_arguments("`code` must be a string")),
            None => return Err(RunError::invalid_arguments("`code` is missing")),
        };
        let env = match arguments.get("env") {
            Some(Value::String(env)) => Some(env.clone()),
            Some(Value::Null) | None => None,
            Some(_) => return Err(RunError::invalid_arguments("`env` must be a string")),
        };
        let session = match arguments.get("session") {
            Some(Value::String(name)) => Some(name.clone()),
            Some(Value::Null) | None => None,
            Some(_) => return Err(RunError::invalid_arguments("`session` must be a string")),
        };
        let files = files_in::parse(arguments.get("files"))?;
        Ok(Self {
            code,
            env,
            session,
            files,
        })
    }
}

/// The `run` tool: `code`, `env` (enumerated, with its default) and, when
/// an environment has sessions, `session` (with how long one lives).
fn run_tool(catalog: &Catalog, sessions: &session::Settings) -> Tool {
    let mut env = json!({"type": "string"});
    match catalog.default_env() {
        Some(default) => {
            env["enum"] = json!(catalog.names());
            env["description"] = json!(format!("Environment (default {default})."));
        }
        None => env["description"] = json!("No environment is available."),
    }
    let mut schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "env": env,
        },
        "required": ["code"],
        "additionalProperties": false,
    });
    let with_sessions = catalog.envs.values().any(|e| !e.session.is_empty());
    let description = if with_sessions {
        schema["properties"]["session"] = json!({
            "type": "string",
            "description": format!(
                "Keeps state and /workspace across calls (ends {} s idle, {} s max).",
                sessions.idle_timeout.as_secs(),
                sessions.max_lifetime.as_secs()
            ),
        });
        schema["properties"]["files"] = json!({
            "type": "array",
            "description": "Text files put in /workspace first.",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        });
        "Run code in a sandbox; without `session` each call starts fresh. Sessions and `files` \
         runs return what is saved in /workspace/outputs (images shown)."
    } else {
        "Run a program in a fresh sandbox (new each call) and return its output."
    };
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new("run", description, schema)
}

/// One line per environment (sorted), the project mount, the limits this
/// host enforces ([`limits_line`]), how to read results.
fn instructions(catalog: &Catalog, project_mount: Option<&str>, host: &Host) -> String {
    let mut text = String::from("Sandboxed code runner; no network unless noted. Environments:\n");
    if catalog.envs.is_empty() {
        text.push_str("(none usable: run answers why)\n");
    }
    for env in catalog.envs.values() {
        text.push_str(&format!("- {}: {}", env.name, env.description));
        if !env.packages.is_empty() {
            let shown: Vec<&str> = env
                .packages
                .iter()
                .take(MAX_PACKAGES_LISTED)
                .enumerate()
                .map(|(i, p)| {
                    if i < PACKAGES_WITH_VERSIONS {
                        p.as_str()
                    } else {
                        package_name(p)
                    }
                })
                .collect();
            text.push_str(&format!("; packages: {}", shown.join(", ")));
            let more = env.packages.len().saturating_sub(MAX_PACKAGES_LISTED);
            if more > 0 {
                text.push_str(&format!(" (+{more} more)"));
            }
        }
        if env.network {
            text.push_str("; network");
        }
        text.push('\n');
    }
    if !catalog.replaced.is_empty() {
        text.push_str(&format!(
            "Custom, in place of the server's own: {}.\n",
            catalog.replaced.join(", ")
        ));
    }
    if let Some(mount) = project_mount {
        text.push_str(&format!(
            "The project is read-only at {mount}. Read inputs there, not through `files`.\n"
        ));
    }
    if let Some(line) = limits_line(host, catalog) {
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str("Results: stdout, then `--- stderr ---` and stderr, then notes.");
    text
}

/// The instructions' one line: the limits every environment enforces on
/// this host (values that differ are given per environment).
fn limits_line(host: &Host, catalog: &Catalog) -> Option<String> {
    let envs: Vec<&Env> = catalog.envs.values().map(|e| e.as_ref()).collect();
    if envs.is_empty() {
        return None;
    }
    let secs = |v: u64| format!("{v} s");
    let count = |v: u64| v.to_string();
    let mut parts = vec![
        ("time", common(&envs, |e| e.limits.timeout_s.get(), secs)),
        ("memory", common(&envs, |e| e.limits.memory_mb.get(), mib)),
    ];
    if host.pids_enforced() {
        parts.push(("processes", common(&envs, |e| e.limits.pids.get(), count)));
    }
    parts.extend([
        ("CPU", common(&envs, |e| e.limits.cpu_s.get(), secs)),
        ("files", common(&envs, |e| e.limits.file_mb.get(), mib)),
        ("/tmp", common(&envs, |e| e.limits.tmp_mb.get(), mib)),
        (
            "/workspace",
            common(&envs, |e| e.limits.workspace_mb.get(), mib),
        ),
    ]);
    let parts: Vec<String> = parts
        .into_iter()
        .map(|(what, v)| format!("{what} {v}"))
        .collect();
    Some(format!("Limits per run: {}.", parts.join(", ")))
}

/// "1 GiB" or "512 MiB".
fn mib(v: u64) -> String {
    if v.is_multiple_of(1024) {
        format!("{} GiB", v / 1024)
    } else {
        format!("{v} MiB")
    }
}

/// The value most environments have, then the others by name:
/// `1 GiB (node 2 GiB)`.
fn common(envs: &[&Env], value: impl Fn(&Env) -> u64, show: impl Fn(u64) -> String) -> String {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for env in envs {
        let v = value(env);
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    let (usual, _) = counts
        .iter()
        .copied()
        .max_by_key(|&(v, n)| (n, std::cmp::Reverse(v)))
        .unwrap_or((0, 0));
    let others: Vec<String> = envs
        .iter()
        .filter(|e| value(e) != usual)
        .map(|e| format!("{} {}", e.name, show(value(e))))
        .collect();
    if others.is_empty() {
        show(usual)
    } else {
        format!("{} ({})", show(usual), others.join(", "))
    }
}

/// A package's name without its version, as nixpkgs' `lib.getName` has it:
/// what comes before the first `-` that is not followed by a letter.
fn package_name(name: &str) -> &str {
    name.char_indices()
        .find(|&(i, c)| {
            c == '-'
                && !name[i + 1..]
                    .chars()
                    .next()
                    .is_some_and(|next| next.is_ascii_alphabetic())
        })
        .map_or(name, |(i, _)| &name[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn catalog(envs: &[(&str, bool, usize)]) -> Catalog {
        testing::catalog(envs.iter().map(|&(name, network, packages)| {
            let packages: Vec<String> = (0..packages).map(|i| format!("pkg-{i}.1")).collect();
            testing::env(name)
                .with("description", json!(format!("{name} env")))
                .with("network", json!(network))
                .with("packages", json!(packages))
                .build()
        }))
    }

    #[test]
    fn instructions_are_sorted_and_capped() {
        let c = catalog(&[("shell", true, 2), ("python", false, 18)]);
        let text = instructions(&c, Some("/project"), &Host::plain(false));
        let lines: Vec<&str> = text.lines().collect();
        // Versions for the first three packages, names for the others.
        assert_eq!(
            lines[1],
            "- python: python env; packages: pkg-0.1, pkg-1.1, pkg-2.1, pkg, pkg, pkg, pkg, pkg, \
             pkg, pkg, pkg, pkg, pkg, pkg, pkg, pkg (+2 more)"
        );
        assert_eq!(
            lines[2],
            "- shell: shell env; packages: pkg-0.1, pkg-1.1; network"
        );
        assert_eq!(
            lines[3],
            "The project is read-only at /project. Read inputs there, not through `files`."
        );
        assert!(!text.contains("Custom"), "{text}");
        let mut replaced = c.clone();
        replaced.replaced = vec!["node".into(), "python".into()];
        let text = instructions(&replaced, None, &Host::plain(false));
        assert_eq!(
            text.lines().nth(3),
            Some("Custom, in place of the server's own: node, python.")
        );
        assert!(!instructions(&c, None, &Host::plain(false)).contains("project"));
    }

    #[test]
    fn the_schema_enumerates_envs_and_names_the_default() {
        let settings = session::Settings::default();
        let tool = run_tool(
            &catalog(&[("shell", false, 0), ("node", false, 0)]),
            &settings,
        );
        let env = &tool.input_schema["properties"]["env"];
        assert_eq!(env["enum"], json!(["node", "shell"]));
        assert_eq!(env["description"], "Environment (default node).");
        let tool = run_tool(
            &catalog(&[("shell", false, 0), ("python", false, 0)]),
            &settings,
        );
        assert_eq!(
            tool.input_schema["properties"]["env"]["description"],
            "Environment (default python)."
        );
        // No environment has sessions: no `session` argument is offered.
        assert!(tool.input_schema["properties"].get("session").is_none());
    }

    #[test]
    fn package_names_lose_their_versions() {
        assert_eq!(package_name("python3.12-numpy-2.2.1"), "python3.12-numpy");
        assert_eq!(package_name("nodejs-20.20.2"), "nodejs");
        assert_eq!(package_name("python3-3.11.2-env"), "python3");
        assert_eq!(package_name("jq"), "jq");
    }

    #[test]
    fn files_are_an_argument() {
        let args = RunArgs::parse(
            json!({"code": "1", "files": [{"path": "a.csv", "content": "x"}]}).as_object(),
        )
        .unwrap();
        assert_eq!(args.files.len(), 1);
        let e = RunArgs::parse(
            json!({"code": "1", "files": [{"path": "../a", "content": "x"}]}).as_object(),
        )
        .unwrap_err();
        assert_eq!(e.code.as_str(), "bad_file_path");
    }

    #[test]
    fn arguments_are_checked() {
        let parse = |v: Value| RunArgs::parse(v.as_object());
        assert_eq!(
            parse(json!({"code": "1", "env": "node"})).unwrap(),
            RunArgs {
                code: "1".into(),
                env: Some("node".into()),
                session: None,
                files: Vec::new(),
            }
        );
        assert_eq!(parse(json!({"code": "1", "env": null})).unwrap().env, None);
        assert_eq!(
            parse(json!({"code": "1", "session": "s"})).unwrap().session,
            Some("s".into())
        );
        for bad in [
            json!({}),
            json!({"code": 1}),
            json!({"code": "1", "env": 2}),
            json!({"code": "1", "session": 3}),
            json!({"code": "1", "x": 1}),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.code.as_str(), "invalid_arguments", "{bad}");
        }
        assert_eq!(
            RunArgs::parse(None).unwrap_err().code.as_str(),
            "invalid_arguments"
        );
    }

    #[test]
    fn the_instructions_line_names_exceptions_and_omits_unenforced_limits() {
        let catalog = testing::catalog([("python", 1024), ("shell", 1024), ("node", 2048)].map(
            |(name, mb)| {
                testing::env(name)
                    .with("limits.memory_mb", json!(mb))
                    .build()
            },
        ));
        let user = limits_line(&Host::plain(false), &catalog).unwrap();
        assert_eq!(
            user,
            "Limits per run: time 30 s, memory 1 GiB (node 2 GiB), processes 256, CPU 60 s, \
             files 256 MiB, /tmp 256 MiB, /workspace 512 MiB."
        );
        let root = limits_line(&Host::plain(true), &catalog).unwrap();
        assert!(!root.contains("processes"), "{root}");
        assert_eq!(limits_line(&Host::plain(false), &Catalog::default()), None);
    }
}
