//! What a client sees before any call: the `run` tool's schema and the
//! server's instructions. Both are paid in every conversation's tokens, so
//! they stay small (the target: at most 350 tokens with three
//! environments).

use rmcp::model::Tool;
use serde_json::{Value, json};

use crate::catalog::limits::{LIMITS, Unit};
use crate::catalog::{Catalog, Env};
use crate::egress::policy::Network;
use crate::session;
use crate::wrapper::host::Host;

/// Most packages listed per environment in the instructions.
const MAX_PACKAGES_LISTED: usize = 16;
/// How many of them (the first, the key ones: the interpreter comes first)
/// are listed with their versions; the others by name only, to keep the
/// instructions within their token budget.
const PACKAGES_WITH_VERSIONS: usize = 3;

/// The `run` tool: `code`, `env` (enumerated, with its default) and, when
/// an environment has sessions, `session` (with how long one lives).
pub fn run_tool(catalog: &Catalog, sessions: &session::Settings) -> Tool {
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
    if catalog
        .envs
        .values()
        .any(|e| e.packages_on_demand.is_some())
    {
        // Described in the instructions' line (packages_line), once.
        schema["properties"]["packages"] = json!({
            "type": "array",
            "items": {"type": "string"},
        });
    }
    let Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    Tool::new("run", description, schema)
}

/// One line per environment (sorted), the project mount, the limits every
/// run holds ([`limits_line`]), how to read results.
pub fn instructions(catalog: &Catalog, project_mount: Option<&str>, host: &Host) -> String {
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
                    module_name(if i < PACKAGES_WITH_VERSIONS {
                        p.as_str()
                    } else {
                        package_name(p)
                    })
                })
                .collect();
            text.push_str(&format!("; packages: {}", shown.join(", ")));
            let more = env.packages.len().saturating_sub(MAX_PACKAGES_LISTED);
            if more > 0 {
                text.push_str(&format!(" (+{more} more)"));
            }
        }
        match &env.network {
            Network::Open(true) => text.push_str("; network"),
            Network::Open(false) => {}
            Network::Policy(policy) => {
                text.push_str(&format!("; network only to {}", policy.hosts().join(", ")));
            }
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
    if let Some(line) = packages_line(catalog) {
        text.push_str(&line);
        text.push('\n');
    }
    if let Some(line) = limits_line(host, catalog) {
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str("Results: stdout, then `--- stderr ---` and stderr, then notes.");
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
            let value = common(&envs, |e| limit.of(&e.limits), |v| brief(limit.unit, v));
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

/// A Python module's name without nixpkgs' `pythonX.Y-` prefix, which says
/// nothing the environment's Python does not (`python3.12-numpy-2.2.1` is
/// shown `numpy-2.2.1`): a python3.withPackages environment lists many.
fn module_name(name: &str) -> &str {
    let Some(rest) = name.strip_prefix("python") else {
        return name;
    };
    let Some((version, module)) = rest.split_once('-') else {
        return name;
    };
    let is_version = version.split_once('.').is_some_and(|(major, minor)| {
        [major, minor]
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if is_version && module.starts_with(|c: char| c.is_ascii_alphabetic()) {
        module
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    /// The template's data-science environment as its manifest lists it
    /// (a python3.withPackages: the Python, then its modules).
    #[test]
    fn a_python_with_packages_shows_its_modules_by_their_own_names() {
        let c = testing::catalog([testing::env("data-science")
            .with(
                "description",
                json!("Python with numpy, pandas and matplotlib"),
            )
            .with(
                "packages",
                json!([
                    "python3-3.11.2",
                    "python3.11-numpy-1.24.2",
                    "python3.11-pandas-1.5.3",
                    "python3.11-matplotlib-3.6.3",
                    "python3.11-python-dateutil-2.8.2"
                ]),
            )
            .build()]);
        let text = instructions(&c, None, &Host::plain());
        assert_eq!(
            text.lines().nth(1),
            Some(
                "- data-science: Python with numpy, pandas and matplotlib; packages: \
                 python3-3.11.2, numpy-1.24.2, pandas-1.5.3, matplotlib, python-dateutil"
            )
        );
        assert_eq!(module_name("python3-3.11.2"), "python3-3.11.2");
        assert_eq!(module_name("pythonx-1"), "pythonx-1");
        assert_eq!(module_name("python3.11-2"), "python3.11-2");
    }

    /// One short line says which hosts an environment with a network
    /// policy reaches.
    #[test]
    fn a_network_policy_names_its_hosts() {
        let c = testing::catalog([testing::env("packaging")
            .with("description", json!("Python with pip"))
            .with(
                "network",
                json!({"allow": [{"host": "pypi.org"}, {"host": "*.example.com", "port": 8443}]}),
            )
            .build()]);
        let text = instructions(&c, None, &Host::plain());
        assert_eq!(
            text.lines().nth(1),
            Some("- packaging: Python with pip; network only to pypi.org, *.example.com:8443")
        );
    }

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
        let text = instructions(&c, Some("/project"), &Host::plain());
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
        let text = instructions(&replaced, None, &Host::plain());
        assert_eq!(
            text.lines().nth(3),
            Some("Custom, in place of the server's own: node, python.")
        );
        assert!(!instructions(&c, None, &Host::plain()).contains("project"));
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
    fn the_instructions_line_names_exceptions() {
        let catalog = testing::catalog([("python", 1024), ("shell", 1024), ("node", 2048)].map(
            |(name, mb)| {
                testing::env(name)
                    .with("limits.memory_mb", json!(mb))
                    .build()
            },
        ));
        let line = limits_line(&Host::plain(), &catalog).unwrap();
        assert_eq!(
            line,
            "Limits per run: time 30 s, memory per process 1 GiB (node 2 GiB), processes 32, \
             CPU 60 s, files 256 MiB, /tmp 256 MiB, /workspace 512 MiB."
        );
        assert_eq!(limits_line(&Host::plain(), &Catalog::default()), None);
    }

    #[test]
    fn packages_are_offered_only_where_the_policy_allows_them() {
        let settings = session::Settings::default();
        let plain = catalog(&[("python", false, 0), ("shell", false, 0)]);
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
