//! What the unit tests share, written once: their environment, as a
//! manifest holds it ([`env_json`], the limits' defaults) and as the
//! launcher holds it ([`env`], a builder over the same JSON); HTTP headers.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::catalog::limits::LIMITS;
use crate::catalog::{Catalog, Env};

/// One environment as a manifest declares it: Python, every limit at its
/// default (the limits table's, as docs/contracts.md's example has them),
/// no network, no packages, no sessions.
pub fn env_json() -> Value {
    let limits: serde_json::Map<String, Value> = (LIMITS.iter())
        .map(|limit| (limit.key.to_owned(), json!(limit.default)))
        .collect();
    json!({
        "description": "d", "interpreter": "python",
        "run": ["/nix/store/x-a/bin/a"], "session": [],
        "limits": limits,
        "network": false, "packages": [],
        "store_path": "/nix/store/x-a", "nixpkgs_rev": null
    })
}

/// A version 1 manifest of `envs`, by name.
pub fn manifest_json<'a>(envs: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    let envs: serde_json::Map<String, Value> =
        envs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    json!({"version": 1, "environments": envs})
}

/// [`env_json`] named `name`, to change before it is built.
pub fn env(name: &str) -> EnvBuilder {
    EnvBuilder {
        name: name.to_owned(),
        json: env_json(),
    }
}

/// A catalog of `envs`, as if read from one manifest.
pub fn catalog(envs: impl IntoIterator<Item = Env>) -> Catalog {
    let mut catalog = Catalog::default();
    for env in envs {
        catalog.envs.insert(env.name.clone(), Arc::new(env));
    }
    catalog
}

pub struct EnvBuilder {
    name: String,
    json: Value,
}

impl EnvBuilder {
    /// Sets the manifest field `field` (`network`, `limits.memory_mb`);
    /// a top-level field the test environment lacks is added.
    pub fn with(mut self, field: &str, value: Value) -> Self {
        let pointer = format!("/{}", field.replace('.', "/"));
        match self.json.pointer_mut(&pointer) {
            Some(slot) => *slot = value,
            None if !field.contains('.') => self.json[field] = value,
            None => panic!("the test environment has no field {field}"),
        }
        self
    }

    /// The environment, read as the catalog reads it.
    pub fn build(self) -> Env {
        let mut env: Env = serde_json::from_value(self.json).expect("a valid test environment");
        env.name = self.name;
        env
    }
}

/// HTTP headers of `pairs`.
pub fn headers(pairs: &[(&'static str, &str)]) -> ::http::HeaderMap {
    let mut map = ::http::HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, value.parse().unwrap());
    }
    map
}
