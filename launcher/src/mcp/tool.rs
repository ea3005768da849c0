//! What a client sees before any call: the `run` tool's schema and the
//! server's instructions. Both are paid in every conversation's tokens, so
//! they stay small: at most 250 o200k tokens with the three bundled
//! environments, and about 15 more for each other one (bench/run counts
//! them). The environments, what each holds and its network are in the
//! schema's `env` description (not an enum: a name not served is refused
//! with the served ones), which every client shows the model (some drop
//! the instructions); the instructions hold the limits.
//! Optional arguments carry `"nullable": true` (an annotation JSON Schema
//! validators ignore): smolagents' MCP adapter (mcpadapt) takes each
//! property as a tool input, and its agent refuses a call that lacks an
//! input not marked nullable (`Argument env is required`); a default does
//! not count there.

use rmcp::model::Tool;
use serde_json::{Value, json};

use crate::catalog::limits::{LIMITS, TIMEOUT_S, Unit};
use crate::catalog::{Catalog, Env};
use crate::egress::policy::Network;
use crate::session;
use crate::wrapper::host::Host;

/// The characters of an environment's description the schema shows at
/// most (about 12 tokens): its first sentence, cut at a word past this.
const MAX_DESCRIPTION_CHARS: usize = 48;

/// The `run` tool: `code`, `env` (a string whose description names each
/// environment with what it holds, the default first), `timeout_s`; when
/// an environment has sessions, `session` (with how long one lives) and
/// `files`, and `from` and `end` where checkpoints are kept; `packages`
/// and `publish` where an environment allows them.
pub fn run_tool(catalog: &Catalog, sessions: &session::Settings) -> Tool {
    let mut env = json!({"type": "string", "nullable": true});
    match catalog.default_env() {
        Some(default) => env["description"] = json!(env_lines(catalog, default)),
        None => env["description"] = json!("No environment is available."),
    }
    let mut schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "env": env,
            "timeout_s": {"type": "integer", "nullable": true},
        },
        "required": ["code"],
        "additionalProperties": false,
    });
    let with_sessions = catalog.envs.values().any(|e| !e.session.is_empty());
    let description = if with_sessions {
        schema["properties"]["session"] = json!({
            "type": "string",
            "nullable": true,
            "description": format!(
                "Name; keeps state and /workspace across calls (ends {} s idle, {} s max).",
                sessions.idle_timeout.as_secs(),
                sessions.max_lifetime.as_secs()
            ),
        });
        // Fork and rollback cost 40 tokens in every conversation: offered
        // only where the server owner keeps checkpoints (sessions.md).
        if sessions.max_checkpoints > 0 {
            schema["properties"]["from"] = json!({
                "type": "string",
                "nullable": true,
                "description": "Start as a copy of session NAME or NAME@CALL (files only).",
            });
            // `end: true` closes the session after the call: no words needed.
            schema["properties"]["end"] = json!({"type": "boolean", "nullable": true});
        }
        schema["properties"]["files"] = json!({
            "type": "array",
            "nullable": true,
            "description": "[{path, content|base64, replace?}] into /workspace.",
            "items": {"type": "object"},
        });
        "Run code in a fresh sandbox, or a `session`'s. Session and `files` runs return \
         /workspace/outputs (images shown)."
    } else {
        "Run a program in a fresh sandbox and return its output."
    };
    if catalog
        .envs
        .values()
        .any(|e| e.packages_on_demand.is_some())
    {
        // Described in the instructions' line (packages_line), once.
        schema["properties"]["packages"] = json!({
            "type": "array",
            "nullable": true,
            "items": {"type": "string"},
        });
    }
    if catalog.envs.values().any(|e| !e.publish.is_empty()) {
        // Which ports, in the environment's line of `env` (env_lines).
        schema["properties"]["publish"] = json!({
            "type": "integer",
            "nullable": true,
            "description": "Session port to publish to the host; the result names its address.",
        });
    }
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new("run", description, schema)
}

/// `env`'s description: each environment with what it holds (its
/// description's first sentence) and its network, the default first.
fn env_lines(catalog: &Catalog, default: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    for env in catalog.envs.values() {
        let mut line = match env.name == default {
            true => format!(
                "{} (default): {}",
                env.name,
                first_sentence(&env.description)
            ),
            false => format!("{}: {}", env.name, first_sentence(&env.description)),
        };
        if let Some(network) = network_note(&env.network) {
            line.push_str(&format!(" ({network})"));
        }
        if !env.publish.is_empty() {
            let ports: Vec<String> = env.publish.iter().map(ToString::to_string).collect();
            line.push_str(&format!(" (publish {})", ports.join(", ")));
        }
        match env.name == default {
            true => lines.insert(0, line),
            false => lines.push(line),
        }
    }
    lines.join("; ")
}

/// A description's first sentence, at most about [`MAX_DESCRIPTION_CHARS`].
fn first_sentence(description: &str) -> String {
    let first = description
        .split_once(". ")
        .map_or(description, |(first, _)| first)
        .trim()
        .trim_end_matches('.');
    if first.chars().count() <= MAX_DESCRIPTION_CHARS {
        return first.to_owned();
    }
    let cut: String = first.chars().take(MAX_DESCRIPTION_CHARS).collect();
    let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(head, _)| head);
    format!("{}…", cut.trim_end_matches([',', ';', ':']))
}

/// `network`, or `network: HOST` (the first allowed host, and how many
/// others: `network: pypi.org +1`, a note that does not grow with the
/// policy; a request to another host is refused with the allowed ones);
/// nothing when offline.
fn network_note(network: &Network) -> Option<String> {
    match network {
        Network::Open(true) => Some("network".into()),
        Network::Open(false) => None,
        Network::Policy(policy) => Some(match &policy.hosts()[..] {
            [] => "network: no host allowed".into(),
            [only] => format!("network: {only}"),
            [first, more @ ..] => format!("network: {first} +{}", more.len()),
        }),
    }
}

/// That the network is in `env`'s description, the project mount,
/// packages on demand, the limits every run holds ([`limits_line`]).
pub fn instructions(catalog: &Catalog, project_mount: Option<&str>, host: &Host) -> String {
    let mut text = String::from("No network unless `env` says.\n");
    if catalog.envs.is_empty() {
        text.push_str("No environment is usable: run answers why.\n");
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
    if let Some(line) = packages_line(catalog) {
        text.push_str(&line);
        text.push('\n');
    }
    if let Some(line) = limits_line(host, catalog) {
        text.push_str(&line);
        text.push('\n');
    }
    text.truncate(text.trim_end().len());
    text
}

/// The instructions' one line on packages on demand, when an environment
/// takes them: which, and what they may be.
fn packages_line(catalog: &Catalog) -> Option<String> {
    let envs: Vec<&Env> = catalog
        .envs
        .values()
        .filter(|e| e.packages_on_demand.is_some())
        .map(|e| e.as_ref())
        .collect();
    let first = envs.first()?.packages_on_demand.as_ref()?;
    let same = envs
        .iter()
        .all(|e| e.packages_on_demand.as_ref().map(|p| &p.allow) == Some(&first.allow));
    let allowed = match same {
        true => first.allow.describe(),
        false => "per environment".into(),
    };
    let names: Vec<&str> = envs.iter().map(|e| e.name.as_str()).collect();
    let whom = match names.len() == catalog.envs.len() {
        true => String::new(),
        false => format!(" in {}", names.join(", ")),
    };
    Some(format!(
        "`packages: [\"jq\"]` adds nixpkgs packages{whom} (allowed: {allowed}); a session keeps its \
         first."
    ))
}

/// The instructions' one line: the limits every environment enforces
/// that the limits table shows (values that differ are given per
/// environment). Each holds on every host the probes pass: the jails never
/// run as root, so RLIMIT_NPROC binds them even without a cgroup.
fn limits_line(host: &Host, catalog: &Catalog) -> Option<String> {
    let envs: Vec<&Env> = catalog.envs.values().map(|e| e.as_ref()).collect();
    if envs.is_empty() {
        return None;
    }
    let parts: Vec<String> = (LIMITS.iter())
        .filter_map(|limit| {
            let shown = limit.shown?;
            let word = match limit.cgroup {
                Some(controller) if !host.by_cgroup(controller) => shown.without_cgroup,
                _ => shown.word,
            };
            let value = span(&envs, |e| limit.of(&e.limits), |v| brief(limit.unit, v));
            if limit.key == TIMEOUT_S.key
                && envs.iter().any(|e| e.limits.ceiling() > e.limits.timeout_s)
            {
                let ceiling = span(
                    &envs,
                    |e| e.limits.ceiling().get(),
                    |v| brief(limit.unit, v),
                );
                return Some(format!("{word} {value} (up to {ceiling} on request)"));
            }
            Some(format!("{word} {value}"))
        })
        .collect();
    Some(format!("Limits per run: {}.", parts.join(", ")))
}

/// `30 s`, `1 GiB`, `32`.
fn brief(unit: Unit, v: u64) -> String {
    match unit {
        Unit::Seconds => format!("{v} s"),
        Unit::Mib => mib(v),
        Unit::Count => v.to_string(),
        Unit::Bytes => format!("{v} B"),
    }
}

/// "1 GiB" or "512 MiB".
fn mib(v: u64) -> String {
    if v.is_multiple_of(1024) {
        format!("{} GiB", v / 1024)
    } else {
        format!("{v} MiB")
    }
}

/// The one value every environment has, or the range of them
/// (`1-2 GiB`): a line that does not grow with the environments (a run
/// that hits a limit is told its own value).
fn span(envs: &[&Env], value: impl Fn(&Env) -> u64, show: impl Fn(u64) -> String) -> String {
    let values = envs.iter().map(|e| value(e));
    let (Some(least), Some(most)) = (values.clone().min(), values.max()) else {
        return String::new();
    };
    if least == most {
        return show(least);
    }
    let (low, high) = (show(least), show(most));
    match low.split_once(' ') {
        Some((number, unit)) if high.ends_with(&format!(" {unit}")) => format!("{number}-{high}"),
        _ => format!("{low}-{high}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn catalog(envs: &[(&str, bool)]) -> Catalog {
        testing::catalog(envs.iter().map(|&(name, network)| {
            testing::env(name)
                .with("description", json!(format!("{name} env")))
                .with("network", json!(network))
                .build()
        }))
    }

    /// What each environment holds is in the schema (some clients drop
    /// the instructions), the default first, its network said.
    #[test]
    fn the_schema_says_what_each_env_holds_and_names_the_default() {
        let settings = session::Settings::default();
        let c = testing::catalog([
            testing::env("shell")
                .with("description", json!("Bash with coreutils, jq"))
                .build(),
            testing::env("python")
                .with("description", json!("Python, standard library only"))
                .build(),
            testing::env("packaging")
                .with("description", json!("Python with pip. Builds wheels."))
                .with(
                    "network",
                    json!({"allow": [{"host": "pypi.org"}, {"host": "*.example.com", "port": 8443}]}),
                )
                .build(),
        ]);
        let tool = run_tool(&c, &settings);
        let env = &tool.input_schema["properties"]["env"];
        // Not enumerated: the names are in the description, and a name
        // not served is refused with the served ones.
        assert!(env.get("enum").is_none(), "{env}");
        assert_eq!(
            env["description"],
            "python (default): Python, standard library only; packaging: Python with pip \
             (network: pypi.org +1); shell: Bash with coreutils, jq"
        );
        // No environment has sessions: no `session` argument is offered.
        assert!(tool.input_schema["properties"].get("session").is_none());
    }

    /// `publish` is offered only when an environment publishes ports, and
    /// that environment's line says which.
    #[test]
    fn publish_is_offered_only_where_an_environment_publishes() {
        let settings = session::Settings::default();
        let plain = catalog(&[("python", false)]);
        let tool = run_tool(&plain, &settings);
        assert!(tool.input_schema["properties"].get("publish").is_none());
        let c = testing::catalog([
            testing::env("python").build(),
            testing::env("web")
                .with("description", json!("Python web"))
                .with("publish", json!([8000, 8080]))
                .build(),
        ]);
        let tool = run_tool(&c, &settings);
        let publish = &tool.input_schema["properties"]["publish"];
        assert_eq!(
            (&publish["type"], &publish["nullable"]),
            (&json!("integer"), &json!(true))
        );
        let env = tool.input_schema["properties"]["env"]["description"]
            .as_str()
            .unwrap();
        assert!(
            env.ends_with("web: Python web (publish 8000, 8080)"),
            "{env}"
        );
    }

    /// Only `code` is required; every other argument is nullable, so
    /// that smolagents' adapter keeps it optional.
    #[test]
    fn optional_arguments_are_nullable() {
        let policy = json!({
            "compose": ["/nix/store/x-compose/bin/nix-sandbox-mcp-compose"],
            "allow": ["jq"],
            "timeout_s": 300,
        });
        let c = testing::catalog([testing::env("python")
            .with("session", json!(["/x/session"]))
            .with("packages_on_demand", policy)
            .build()]);
        // With checkpoints kept, every argument is offered.
        let sessions = session::Settings {
            max_checkpoints: 3,
            ..session::Settings::default()
        };
        let tool = run_tool(&c, &sessions);
        assert_eq!(tool.input_schema["required"], json!(["code"]));
        let properties = tool.input_schema["properties"].as_object().unwrap();
        for (name, property) in properties {
            if name != "code" {
                assert_eq!(property.get("nullable"), Some(&json!(true)), "{name}");
            }
        }
        assert_eq!(properties.len(), 8, "{properties:?}");
    }

    #[test]
    fn fork_arguments_are_offered_only_where_checkpoints_are_kept() {
        let c = testing::catalog([testing::env("python")
            .with("session", json!(["/x/session"]))
            .build()]);
        let names = |settings: &session::Settings| -> Vec<String> {
            let tool = run_tool(&c, settings);
            tool.input_schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        let off = names(&session::Settings::default());
        assert!(
            !off.contains(&"from".to_owned()) && !off.contains(&"end".to_owned()),
            "{off:?}"
        );
        let on = names(&session::Settings {
            max_checkpoints: 1,
            ..session::Settings::default()
        });
        assert!(
            on.contains(&"from".to_owned()) && on.contains(&"end".to_owned()),
            "{on:?}"
        );
    }

    #[test]
    fn a_long_description_shows_its_first_sentence_within_the_bound() {
        assert_eq!(first_sentence("Node.js"), "Node.js");
        assert_eq!(
            first_sentence("Python with pip. Builds wheels."),
            "Python with pip"
        );
        let long = "Rust 1.63: the code is one file with fn main (edition 2021, std only), built \
                    unoptimised and run";
        let cut = first_sentence(long);
        assert!(
            cut.ends_with('…') && cut.chars().count() <= MAX_DESCRIPTION_CHARS + 1,
            "{cut}"
        );
        assert_eq!(cut, "Rust 1.63: the code is one file with fn main…");
    }

    #[test]
    fn instructions_name_the_envs_their_network_and_the_project() {
        let c = catalog(&[("shell", true), ("python", false)]);
        let text = instructions(&c, Some("/project"), &Host::plain());
        let lines: Vec<&str> = text.lines().collect();
        // The environments, their network among them, are the schema's.
        assert_eq!(lines[0], "No network unless `env` says.");
        assert_eq!(
            lines[1],
            "The project is read-only at /project. Read inputs there, not through `files`."
        );
        assert_eq!(
            lines[2],
            "Limits per run: time 30 s (up to 600 s on request), memory per process 1 GiB, \
             processes 32, CPU 60 s, files 256 MiB, /tmp 256 MiB, /workspace 512 MiB."
        );
        assert!(!text.contains("Custom"), "{text}");
        let mut replaced = c.clone();
        replaced.replaced = vec!["node".into(), "python".into()];
        let text = instructions(&replaced, None, &Host::plain());
        assert_eq!(
            text.lines().nth(1),
            Some("Custom, in place of the server's own: node, python.")
        );
        assert!(!instructions(&c, None, &Host::plain()).contains("project"));
    }

    /// Values that differ are a range, which does not grow with the
    /// environments; the timeout's ceiling follows it when higher.
    #[test]
    fn the_instructions_line_gives_ranges_and_the_ceiling() {
        let catalog = testing::catalog(
            [
                ("python", 1024, 600),
                ("shell", 1024, 600),
                ("node", 2048, 900),
            ]
            .map(|(name, mb, ceiling)| {
                testing::env(name)
                    .with("limits.memory_mb", json!(mb))
                    .with("limits.max_timeout_s", json!(ceiling))
                    .build()
            }),
        );
        let line = limits_line(&Host::plain(), &catalog).unwrap();
        assert_eq!(
            line,
            "Limits per run: time 30 s (up to 600-900 s on request), memory per process 1-2 GiB, \
             processes 32, CPU 60 s, files 256 MiB, /tmp 256 MiB, /workspace 512 MiB."
        );
        assert_eq!(limits_line(&Host::plain(), &Catalog::default()), None);
        // No ceiling above the timeout: nothing to ask for.
        let fixed = testing::catalog([testing::env("python")
            .with("limits.timeout_s", json!(60))
            .with("limits.max_timeout_s", json!(60))
            .build()]);
        let line = limits_line(&Host::plain(), &fixed).unwrap();
        assert!(
            line.starts_with("Limits per run: time 60 s, memory"),
            "{line}"
        );
        let mixed = testing::catalog([
            testing::env("a").with("limits.tmp_mb", json!(512)).build(),
            testing::env("b").with("limits.tmp_mb", json!(2048)).build(),
        ]);
        let line = limits_line(&Host::plain(), &mixed).unwrap();
        assert!(line.contains("/tmp 512 MiB-2 GiB"), "{line}");
    }

    #[test]
    fn packages_are_offered_only_where_the_policy_allows_them() {
        let settings = session::Settings::default();
        let plain = catalog(&[("python", false), ("shell", false)]);
        let tool = run_tool(&plain, &settings);
        assert!(tool.input_schema["properties"].get("packages").is_none());
        let text = instructions(&plain, None, &Host::plain());
        assert!(!text.contains("packages`"), "{text}");

        let policy = json!({
            "compose": ["/nix/store/x-compose/bin/nix-sandbox-mcp-compose"],
            "allow": ["jq", "python3Packages."],
            "timeout_s": 300,
        });
        let c = testing::catalog([
            testing::env("python")
                .with("packages_on_demand", policy)
                .build(),
            testing::env("shell").build(),
        ]);
        let tool = run_tool(&c, &settings);
        assert_eq!(
            tool.input_schema["properties"]["packages"]["items"],
            json!({"type": "string"})
        );
        let text = instructions(&c, None, &Host::plain());
        assert!(
            text.contains(
                "`packages: [\"jq\"]` adds nixpkgs packages in python (allowed: jq, \
                 python3Packages.*); a session keeps its first."
            ),
            "{text}"
        );
    }
}
