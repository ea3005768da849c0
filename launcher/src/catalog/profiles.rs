//! Profiles (docs/profiles.md): named environment settings, written in Nix
//! (lib/profile.nix, presets/profiles.nix) and carried by the manifest's
//! top-level `profiles` (docs/contracts.md, contract 1), that a person
//! applies to a session they make (`nix-sandbox-mcp sandbox create
//! --profile NAME ENV`). A profile only tightens: no network where the
//! environment has some, no added packages, the project read-only or
//! absent, smaller limits. [`Profile::apply`] makes the environment a
//! profiled session runs; session/jail.rs tells its wrapper what the
//! launcher cannot hold itself ([`Profile::wrapper_vars`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Env;
use super::limits::Limits;
use crate::egress::policy::Network;

/// What a profile does to the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Project {
    /// Read-only, even on a server whose project is writable.
    #[serde(rename = "read-only")]
    ReadOnly,
    /// No project in the jail.
    #[serde(rename = "none")]
    None,
}

/// One profile, as the manifest carries it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The key under `profiles`; filled in after parsing.
    #[serde(skip)]
    pub name: String,
    pub description: String,
    /// `None`: the environment's own; `Some(false)`: loopback only.
    #[serde(default)]
    pub network: Option<bool>,
    /// `false`: no packages may be added to the session.
    #[serde(default = "yes")]
    pub packages: bool,
    /// `None`: as the server mounts it.
    #[serde(default)]
    pub project: Option<Project>,
    /// Limits lowered: the session takes the smaller of each and the
    /// environment's.
    #[serde(default)]
    pub limits: BTreeMap<String, u64>,
}

fn yes() -> bool {
    true
}

/// The limits a profile may lower: those the launcher holds per session,
/// and those the wrapper lowers at its start from `NIX_SANDBOX_LIMITS`
/// ([`Profile::wrapper_vars`]). `pids` and `tmp_mb` are built into the
/// wrapper.
pub const LOWERED: [&str; 8] = [
    "timeout_s",
    "max_timeout_s",
    "output_bytes",
    "memory_mb",
    "cpu_s",
    "file_mb",
    "nofile",
    "workspace_mb",
];

/// The variable the wrapper lowers its limits from.
pub const LIMITS_VAR: &str = "NIX_SANDBOX_LIMITS";
/// The variable that takes a jail's network away.
pub const NETWORK_OFF_VAR: &str = "NIX_SANDBOX_NETWORK_OFF";

/// Parses profile `name`; the problems, each a field under
/// `profiles.NAME` and what is wrong with it.
pub fn parse(name: &str, value: Value) -> Result<Profile, Vec<(String, String)>> {
    let at = |field: &str| match field {
        "" | "." => format!("profiles.{name}"),
        field => format!("profiles.{name}.{field}"),
    };
    let mut profile: Profile = serde_path_to_error::deserialize(value)
        .map_err(|e| vec![(at(&e.path().to_string()), e.inner().to_string())])?;
    let mut problems = Vec::new();
    if !super::valid_env_name(name) {
        problems.push((
            at(""),
            format!(
                "invalid profile name (it must match {})",
                super::ENV_NAME_PATTERN
            ),
        ));
    }
    if profile.network == Some(true) {
        problems.push((
            at("network"),
            "a profile cannot open the network: false or null".into(),
        ));
    }
    for (key, value) in &profile.limits {
        if !LOWERED.contains(&key.as_str()) {
            problems.push((
                at(&format!("limits.{key}")),
                format!(
                    "a limit a profile cannot lower (it may lower {})",
                    LOWERED.join(", ")
                ),
            ));
        } else if *value == 0 {
            problems.push((at(&format!("limits.{key}")), "must be positive".into()));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    profile.name = name.to_owned();
    Ok(profile)
}

impl Profile {
    /// The environment a session of `env` under this profile runs in:
    /// `env` with each limit lowered, no network, and the project as the
    /// profile says; it carries the profile for its jail's wrapper.
    pub fn apply(self: &Arc<Self>, env: &Env) -> Env {
        let mut out = env.clone();
        out.limits = self.lower(&env.limits);
        if self.network == Some(false) {
            out.network = Network::Open(false);
        }
        if self.project.is_some() {
            out.project_layer = false;
        }
        out.profile = Some(Arc::clone(self));
        out
    }

    /// `limits` with each of this profile's lowered to it.
    pub fn lower(&self, limits: &Limits) -> Limits {
        let mut out = limits.clone();
        let fields: [(&str, &mut NonZeroU64); 8] = [
            ("timeout_s", &mut out.timeout_s),
            ("max_timeout_s", &mut out.max_timeout_s),
            ("output_bytes", &mut out.output_bytes),
            ("memory_mb", &mut out.memory_mb),
            ("cpu_s", &mut out.cpu_s),
            ("file_mb", &mut out.file_mb),
            ("nofile", &mut out.nofile),
            ("workspace_mb", &mut out.workspace_mb),
        ];
        for (key, field) in fields {
            if let Some(value) = self.limits.get(key).and_then(|v| NonZeroU64::new(*v)) {
                *field = (*field).min(value);
            }
        }
        // A call may not ask for less than the default it gets.
        out.timeout_s = out.timeout_s.min(out.max_timeout_s);
        out
    }

    /// What the wrapper of a jail of `env` (made by [`Profile::apply`])
    /// is told: the limits it lowers itself (lib/jail/sessionLimits.nix;
    /// the launcher holds the others, and a run's cgroup takes `memory_mb`
    /// from the session's limits), and that it has no network.
    pub fn wrapper_vars(&self, env: &Env) -> Vec<(&'static str, OsString)> {
        let l = &env.limits;
        let limits = format!(
            "cpu_s={} file_mb={} nofile={} memory_mb={}",
            l.cpu_s, l.file_mb, l.nofile, l.memory_mb
        );
        let mut vars = vec![(LIMITS_VAR, limits.into())];
        if self.network == Some(false) {
            vars.push((NETWORK_OFF_VAR, "1".into()));
        }
        vars
    }

    /// Whether the project is left out of its jails.
    pub fn hides_project(&self) -> bool {
        self.project == Some(Project::None)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(value: Value) -> Vec<(String, String)> {
        parse("p", value).unwrap_err()
    }

    #[test]
    fn a_profile_reads_with_its_defaults() {
        let p = parse("strict", json!({"description": "d"})).unwrap();
        assert_eq!(p.name, "strict");
        assert_eq!((p.network, p.packages, p.project), (None, true, None));
        assert!(p.limits.is_empty());
        let summary = |p: &Profile| crate::control::wire::ProfileShown::from(p).summary();
        assert_eq!(summary(&p), "as the environment");
        let p = parse(
            "offline",
            json!({"description": "d", "network": false, "packages": false,
                   "project": "read-only", "limits": {"cpu_s": 5}}),
        )
        .unwrap();
        assert_eq!(p.project, Some(Project::ReadOnly));
        assert_eq!(
            summary(&p),
            "network off, no packages, project read-only, cpu_s 5"
        );
    }

    #[test]
    fn a_profile_that_would_open_or_cannot_hold_is_refused_by_field() {
        let at = |v: Value| problems(v)[0].0.clone();
        assert_eq!(
            at(json!({"description": "d", "network": true})),
            "profiles.p.network"
        );
        assert_eq!(
            at(json!({"description": "d", "limits": {"pids": 4}})),
            "profiles.p.limits.pids"
        );
        assert!(
            problems(json!({"description": "d", "limits": {"pids": 4}}))[0]
                .1
                .contains("cannot lower")
        );
        assert_eq!(
            at(json!({"description": "d", "limits": {"cpu_s": 0}})),
            "profiles.p.limits.cpu_s"
        );
        assert_eq!(
            at(json!({"description": "d", "project": "rw"})),
            "profiles.p.project"
        );
        assert!(
            problems(json!({"description": "d", "nework": false}))[0]
                .1
                .contains("unknown field `nework`")
        );
        assert!(
            problems(json!({"network": false}))[0]
                .1
                .contains("missing field `description`")
        );
        assert!(parse("../x", json!({"description": "d"})).is_err());
    }

    #[test]
    fn limits_are_only_lowered_and_the_wrapper_is_told_them() {
        let env = crate::testing::env("python").build();
        let p = Arc::new(
            parse(
                "p",
                json!({"description": "d", "network": false, "project": "none",
                       "limits": {"nofile": 1_u64 << 40, "cpu_s": 2, "max_timeout_s": 1}}),
            )
            .unwrap(),
        );
        let lowered = p.apply(&env);
        assert_eq!(lowered.limits.nofile, env.limits.nofile);
        assert_eq!(lowered.limits.cpu_s.get(), 2.min(env.limits.cpu_s.get()));
        assert_eq!(lowered.limits.max_timeout_s.get(), 1);
        assert_eq!(lowered.limits.timeout_s.get(), 1);
        assert!(matches!(lowered.network, Network::Open(false)));
        assert!(!lowered.project_layer);
        assert!(p.hides_project());
        let vars = p.wrapper_vars(&lowered);
        assert_eq!(vars[0].0, LIMITS_VAR);
        let told = vars[0].1.to_string_lossy().into_owned();
        assert!(told.starts_with("cpu_s=2 file_mb="), "{told}");
        assert!(
            told.contains(&format!("nofile={}", env.limits.nofile)),
            "{told}"
        );
        assert_eq!(vars[1], (NETWORK_OFF_VAR, "1".into()));
    }
}
