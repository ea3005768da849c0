//! An environment's network policy, as its manifest's `network` declares it
//! (lib/environment.nix writes it): `false` (a network namespace with only
//! loopback), `true` (the host's network), or an allowlist the egress proxy
//! enforces. Nothing is allowed that no rule names.
//!
//! A rule names a host (exact, or `*.suffix` for every name under it), a
//! port (443 or 80 when it names none), and optionally path prefixes and
//! methods, which the proxy can only see in plain HTTP and in TLS it
//! terminates: a rule with paths, methods or credentials makes the proxy
//! terminate TLS to that host (proxy.rs). For a host whose rules name
//! paths, a request's path is decided, and sent, in its normal form
//! (target.rs), or refused when upstreams could read it otherwise. A host
//! whose rules attach a credential is reached only over TLS the proxy
//! terminated: plain HTTP to it is refused. A field of the policy this
//! server does not know refuses the environment: it may be a restriction
//! this server would not enforce.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::target;

/// The manifest's `network`.
#[derive(Debug, Clone, PartialEq)]
pub enum Network {
    /// `false`: loopback only; `true`: the host's network.
    Open(bool),
    /// Only what the rules allow, through the egress proxy.
    Policy(Policy),
}

impl Network {
    pub fn policy(&self) -> Option<&Policy> {
        match self {
            Network::Policy(policy) => Some(policy),
            Network::Open(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::Bool(open) => Ok(Network::Open(open)),
            value @ Value::Object(_) => serde_json::from_value(value)
                .map(Network::Policy)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "expected true, false or a policy object {{ allow, credentials }}, got {other}"
            ))),
        }
    }
}

/// The allowlist and the credentials its rules attach.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Policy {
    pub allow: Vec<Rule>,
    /// By the name of the jail's variable that holds the placeholder.
    #[serde(default)]
    pub credentials: BTreeMap<String, Credential>,
    /// The environment's own CA bundle, which the jail's bundle starts with
    /// (null: the host's, as `network = true` would show).
    #[serde(default)]
    pub ca_bundle: Option<String>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

/// One rule of the allowlist.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Rule {
    pub host: String,
    #[serde(default)]
    pub port: Option<u16>,
    /// Path prefixes (`/simple/`); empty: every path.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Methods (`GET`); empty: every method.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Names of `credentials` whose secrets requests to this host carry.
    #[serde(default)]
    pub credentials: Vec<String>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

/// A secret the proxy puts in place of a placeholder, in the headers named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Credential {
    /// The value the jail's variable holds instead of the secret.
    pub placeholder: String,
    /// The secret's source, read at server start: a file, or a variable
    /// of the server's environment (never a store path).
    #[serde(default)]
    pub from_file: Option<String>,
    #[serde(default)]
    pub from_env: Option<String>,
    /// Request headers in which the placeholder is replaced.
    pub headers: Vec<String>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

/// Why a request was refused, as the result's note says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotAllowed,
    Method(String),
    /// The path sent, and its normal form, which the rules decided on.
    Path {
        sent: String,
        normal: String,
    },
    /// A path upstreams could read otherwise than the rules would.
    Ambiguous {
        sent: String,
        why: target::Ambiguous,
    },
    /// Plain HTTP to a host whose rules attach a credential.
    Cleartext,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAllowed => f.write_str("not in allowlist"),
            Refusal::Method(m) => write!(f, "method {m} not allowed"),
            Refusal::Path { sent, normal } if sent == normal => {
                write!(f, "path {sent} not allowed")
            }
            Refusal::Path { sent, normal } => write!(f, "path {sent} not allowed: it is {normal}"),
            Refusal::Ambiguous { sent, why } => write!(f, "ambiguous path {sent}: {why}"),
            Refusal::Cleartext => f.write_str("a credential goes only over HTTPS: use https://"),
        }
    }
}

/// How a request reached the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Plain HTTP, readable on the way.
    Cleartext,
    /// Inside TLS the proxy terminated, sent on over verified TLS.
    Tls,
}

/// An allowed request: what the proxy sends, and what it puts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed<'a> {
    /// The path to send: the one the rules decided on (its normal form
    /// when they name paths, else the path as it came).
    pub path: String,
    /// The names of the credentials the allowing rules attach.
    pub credentials: Vec<&'a str>,
}

/// What the proxy does with a CONNECT the rules allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel {
    /// Pass the TLS through, once its server name is the CONNECT host.
    Pass,
    /// Terminate the TLS: some rule needs to see the requests (paths,
    /// methods, credentials).
    Terminate,
}

/// A host name in the form rules compare: lowercase, no trailing dot, an
/// IPv6 literal without brackets.
pub fn normal_host(host: &str) -> String {
    let host = host.trim_end_matches('.');
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

impl Rule {
    /// Whether this rule names `host` (normalised) at `port`.
    fn names(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => port == 443 || port == 80,
        };
        port_ok && host_matches(&self.host, host)
    }

    fn sees_requests(&self) -> bool {
        !self.paths.is_empty() || !self.methods.is_empty() || !self.credentials.is_empty()
    }

    /// Whether the rule allows `method` on `path` (normalised when the
    /// rule names paths), as `sent`.
    fn allows(&self, method: &str, path: &str, sent: &str) -> Result<(), Refusal> {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == method) {
            return Err(Refusal::Method(method.to_owned()));
        }
        if !self.paths.is_empty() && !self.paths.iter().any(|p| target::under(p, path)) {
            return Err(Refusal::Path {
                sent: sent.to_owned(),
                normal: path.to_owned(),
            });
        }
        Ok(())
    }

    /// Whether this rule names an address literal: the one case where a
    /// private, loopback or link-local address may be reached.
    pub fn names_address(&self, addr: IpAddr) -> bool {
        normal_host(&self.host).parse::<IpAddr>().ok() == Some(addr)
    }
}

/// `pattern` (a rule's host) against `host` (normalised): equal, or
/// `*.suffix` and `host` a name strictly under `suffix`.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = normal_host(pattern);
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

impl Policy {
    fn rules_for<'a>(&'a self, host: &str, port: u16) -> Vec<&'a Rule> {
        self.allow.iter().filter(|r| r.names(host, port)).collect()
    }

    /// A CONNECT to `host:port`.
    pub fn connect(&self, host: &str, port: u16) -> Result<Tunnel, Refusal> {
        let host = normal_host(host);
        let rules = self.rules_for(&host, port);
        if rules.is_empty() {
            return Err(Refusal::NotAllowed);
        }
        if rules.iter().any(|r| r.sees_requests()) {
            Ok(Tunnel::Terminate)
        } else {
            Ok(Tunnel::Pass)
        }
    }

    /// A request (plain HTTP, or inside terminated TLS) for `path` (no
    /// query): allowed when some rule naming the host allows its method
    /// and path, and, for a host whose rules attach a credential, only
    /// inside TLS.
    pub fn request(
        &self,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
        transport: Transport,
    ) -> Result<Allowed<'_>, Refusal> {
        let host = normal_host(host);
        let rules = self.rules_for(&host, port);
        if rules.is_empty() {
            return Err(Refusal::NotAllowed);
        }
        if transport == Transport::Cleartext && rules.iter().any(|r| !r.credentials.is_empty()) {
            return Err(Refusal::Cleartext);
        }
        let decided = if rules.iter().any(|r| !r.paths.is_empty()) {
            target::normalise(path).map_err(|why| Refusal::Ambiguous {
                sent: path.to_owned(),
                why,
            })?
        } else {
            path.to_owned()
        };
        let mut refusal = Refusal::NotAllowed;
        let mut credentials = Vec::new();
        let mut allowed = false;
        for rule in rules {
            match rule.allows(method, &decided, path) {
                Ok(()) => {
                    allowed = true;
                    credentials.extend(rule.credentials.iter().map(String::as_str));
                }
                Err(why) => refusal = why,
            }
        }
        if !allowed {
            return Err(refusal);
        }
        credentials.sort_unstable();
        credentials.dedup();
        Ok(Allowed {
            path: decided,
            credentials,
        })
    }

    /// Whether some rule naming `host:port` names `addr` itself.
    pub fn names_address(&self, host: &str, port: u16, addr: IpAddr) -> bool {
        let host = normal_host(host);
        self.rules_for(&host, port)
            .iter()
            .any(|r| r.names_address(addr))
    }

    /// The hosts the model is told it can reach, in rule order, once each.
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = Vec::new();
        for rule in &self.allow {
            let host = match rule.port {
                Some(port) => format!("{}:{port}", rule.host),
                None => rule.host.clone(),
            };
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        hosts
    }

    /// What is wrong with the policy, as (field under `network`, problem).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems: Vec<(String, String)> = (self.unknown.keys())
            .map(|field| (field.clone(), UNKNOWN_FIELD.to_owned()))
            .collect();
        for (i, rule) in self.allow.iter().enumerate() {
            problems.extend(rule.problems(&format!("allow[{i}]"), &self.credentials));
        }
        for (name, credential) in &self.credentials {
            problems.extend(credential.problems(&format!("credentials.{name}")));
        }
        problems
    }
}

/// What a field of a network policy that this server does not know means.
const UNKNOWN_FIELD: &str = "a network policy field this server does not know, so it cannot \
                             enforce it: the environment is not served; upgrade the server";

impl Rule {
    /// What is wrong with the rule at `at` (`allow[0]`), as (field,
    /// problem); `credentials`: the policy's, which it may name.
    fn problems(
        &self,
        at: &str,
        credentials: &BTreeMap<String, Credential>,
    ) -> Vec<(String, String)> {
        let at = |field: &str| format!("{at}.{field}");
        let mut problems: Vec<(String, String)> = (self.unknown.keys())
            .map(|field| (at(field), UNKNOWN_FIELD.to_owned()))
            .collect();
        if !valid_host_pattern(&self.host) {
            problems.push((
                at("host"),
                format!(
                    "{:?} is not a host name, `*.suffix` or an address literal",
                    self.host
                ),
            ));
        }
        if self.port == Some(0) {
            problems.push((at("port"), "must be 1 to 65535".into()));
        }
        for path in &self.paths {
            match target::normalise(path) {
                Ok(normal) if normal == *path => {}
                Ok(normal) => problems.push((
                    at("paths"),
                    format!("{path:?} is not in normal form: write {normal:?}"),
                )),
                Err("not a path") => {
                    problems.push((at("paths"), format!("{path:?} does not start with /")));
                }
                Err(why) => problems.push((
                    at("paths"),
                    format!("{path:?} can never match: a path with {why} is refused"),
                )),
            }
        }
        for method in &self.methods {
            if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
                problems.push((at("methods"), format!("{method:?} is not a method (GET)")));
            }
        }
        for name in &self.credentials {
            if !credentials.contains_key(name) {
                problems.push((at("credentials"), format!("no credential named {name}")));
            }
        }
        problems
    }
}

impl Credential {
    /// What is wrong with the credential at `at` (`credentials.NAME`), as
    /// (field, problem).
    fn problems(&self, at: &str) -> Vec<(String, String)> {
        let at = |field: &str| format!("{at}.{field}");
        let mut problems: Vec<(String, String)> = (self.unknown.keys())
            .map(|field| (at(field), UNKNOWN_FIELD.to_owned()))
            .collect();
        match (&self.from_file, &self.from_env) {
            (Some(_), None) | (None, Some(_)) => {}
            _ => problems.push((
                at("from_file"),
                "exactly one of from_file and from_env names the secret's source".into(),
            )),
        }
        if let Some(file) = &self.from_file
            && file.starts_with("/nix/store")
        {
            problems.push((
                at("from_file"),
                "a secret in the Nix store is readable by every user: keep it outside".into(),
            ));
        }
        if self.placeholder.len() < 8 {
            problems.push((at("placeholder"), "must be at least 8 characters".into()));
        }
        if self.headers.is_empty() {
            problems.push((at("headers"), "names no header to put the secret in".into()));
        }
        for header in &self.headers {
            if http::HeaderName::try_from(header.as_str()).is_err() {
                problems.push((at("headers"), format!("{header:?} is not a header name")));
            }
        }
        problems
    }
}

/// A rule's host: a DNS name, `*.` and a DNS name, or an address literal.
fn valid_host_pattern(host: &str) -> bool {
    let name = normal_host(host);
    if name.parse::<IpAddr>().is_ok() {
        return true;
    }
    let name = name.strip_prefix("*.").unwrap_or(&name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
