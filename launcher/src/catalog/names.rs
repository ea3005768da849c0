//! The package names a call asks for (`packages`), checked before anything
//! is evaluated: each must be a nixpkgs attribute path (dot-separated parts
//! of `A-Z a-z 0-9 _ + -`, at most [`MAX_NAME_BYTES`], at most
//! [`MAX_PACKAGES`] of them) and allowed by the server's policy (`allow`
//! in the manifest, set in Nix: `"any"`, or a list of names and of
//! prefixes ending in `.`). A prefix names a scope and allows the
//! attributes directly in it, one part past the prefix: never a path
//! through an attribute of the scope (`python3Packages.pkgs.curl`), which
//! would lead anywhere in nixpkgs. What the one attribute is (a package of
//! the scope, not a set or the scope's stdenv) the compose helper checks
//! (lib/composeSandbox.nix). The names reach Nix only as data (a JSON
//! file), never as expression text; this check is what keeps shell or Nix
//! syntax from getting that far.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

/// The most packages one call may ask for.
pub const MAX_PACKAGES: usize = 16;
/// The longest name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 100;

/// Which names the server's policy allows.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub enum Allow {
    /// Every attribute of the server's nixpkgs.
    Any,
    /// These names, and the attributes directly under these prefixes
    /// (entries ending in `.`, like `python3Packages.`).
    Only(Vec<String>),
}

impl TryFrom<Value> for Allow {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, String> {
        let wrong = || "must be \"any\" or a list of attribute names and prefixes".to_owned();
        match value {
            Value::String(s) if s == "any" => Ok(Allow::Any),
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s),
                    _ => Err(wrong()),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Allow::Only),
            _ => Err(wrong()),
        }
    }
}

impl Allow {
    /// Whether the policy allows `name`.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            Allow::Any => true,
            Allow::Only(entries) => entries.iter().any(|entry| match entry.strip_suffix('.') {
                Some(_) => name
                    .strip_prefix(entry.as_str())
                    .is_some_and(|rest| !rest.contains('.') && is_attribute_path(rest)),
                None => entry == name,
            }),
        }
    }

    /// The prefix entry `name` goes deeper than (`python3Packages.` for
    /// `python3Packages.pkgs.curl`), if any: what a refusal explains.
    pub fn prefix_above(&self, name: &str) -> Option<&str> {
        match self {
            Allow::Any => None,
            Allow::Only(entries) => entries
                .iter()
                .find(|e| {
                    e.ends_with('.')
                        && name
                            .strip_prefix(e.as_str())
                            .is_some_and(|rest| rest.contains('.'))
                })
                .map(String::as_str),
        }
    }

    /// The policy as the model is told it: `any`, or `jq, python3Packages.*`.
    pub fn describe(&self) -> String {
        match self {
            Allow::Any => "any nixpkgs attribute".into(),
            Allow::Only(entries) => entries
                .iter()
                .map(|e| match e.ends_with('.') {
                    true => format!("{e}*"),
                    false => e.clone(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Why a call's `packages` are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// More than [`MAX_PACKAGES`].
    TooMany(usize),
    /// Not an attribute path, or too long (the name as given).
    Syntax(String),
    /// Not allowed by the policy.
    NotAllowed(String),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::TooMany(n) => write!(f, "{n} packages, more than {MAX_PACKAGES}"),
            NameError::Syntax(name) => write!(f, "{name:?} is not an attribute name"),
            NameError::NotAllowed(name) => write!(f, "{name} is not allowed"),
        }
    }
}

/// Whether `name` is an attribute path: `^[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*$`,
/// at most [`MAX_NAME_BYTES`].
pub fn is_attribute_path(name: &str) -> bool {
    let part_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-');
    name.len() <= MAX_NAME_BYTES
        && name
            .split('.')
            .all(|part| !part.is_empty() && part.chars().all(part_char))
}

/// Checks `names` against the syntax and `allow`, in the order given (the
/// first fault is told); returns them sorted, each once: the set a
/// composition is made and cached for.
pub fn check(names: &[String], allow: &Allow) -> Result<Vec<String>, NameError> {
    if names.len() > MAX_PACKAGES {
        return Err(NameError::TooMany(names.len()));
    }
    if let Some(bad) = names.iter().find(|n| !is_attribute_path(n)) {
        return Err(NameError::Syntax(bad.clone()));
    }
    if let Some(refused) = names.iter().find(|n| !allow.allows(n)) {
        return Err(NameError::NotAllowed(refused.clone()));
    }
    let mut set = names.to_vec();
    set.sort();
    set.dedup();
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn attribute_paths_pass() {
        for name in [
            "jq",
            "python3Packages.pandas",
            "gtk+3",
            "nodePackages_latest.x-y",
            "7zz",
        ] {
            assert!(is_attribute_path(name), "{name}");
        }
    }

    #[test]
    fn shell_and_nix_syntax_is_refused() {
        for name in [
            "jq; rm -rf /",
            "${builtins.readFile}",
            "../x",
            "a..b",
            ".jq",
            "jq.",
            "",
            "a b",
            "a/b",
            "a\"b",
            "(import <nixpkgs> {})",
            "jq\n",
            "pkgs.\u{0430}",
            "a'b",
        ] {
            assert!(!is_attribute_path(name), "{name:?}");
        }
    }

    #[test]
    fn long_names_are_refused() {
        assert!(is_attribute_path(&"a".repeat(MAX_NAME_BYTES)));
        assert!(!is_attribute_path(&"a".repeat(MAX_NAME_BYTES + 1)));
    }

    #[test]
    fn the_set_is_sorted_and_each_name_once() {
        let got = check(&owned(&["ripgrep", "jq", "ripgrep"]), &Allow::Any).unwrap();
        assert_eq!(got, owned(&["jq", "ripgrep"]));
    }

    #[test]
    fn too_many_names_are_refused() {
        let many: Vec<String> = (0..=MAX_PACKAGES).map(|i| format!("p{i}")).collect();
        assert_eq!(
            check(&many, &Allow::Any),
            Err(NameError::TooMany(MAX_PACKAGES + 1))
        );
    }

    #[test]
    fn syntax_is_checked_before_the_policy() {
        let allow = Allow::Only(owned(&["jq"]));
        assert_eq!(
            check(&owned(&["jq; rm -rf /"]), &allow),
            Err(NameError::Syntax("jq; rm -rf /".into()))
        );
    }

    #[test]
    fn the_allowlist_takes_names_and_prefixes() {
        let allow = Allow::Only(owned(&["jq", "python3Packages."]));
        assert!(allow.allows("jq"));
        assert!(allow.allows("python3Packages.pandas"));
        assert!(!allow.allows("jqq"));
        assert!(!allow.allows("python3Packages"));
        assert!(!allow.allows("python3"));
        assert!(!allow.allows("python3Packages2.x"));
        assert_eq!(
            check(&owned(&["jq", "ripgrep"]), &allow),
            Err(NameError::NotAllowed("ripgrep".into()))
        );
        assert_eq!(allow.describe(), "jq, python3Packages.*");
        assert_eq!(Allow::Any.describe(), "any nixpkgs attribute");
    }

    #[test]
    fn a_prefix_allows_one_attribute_past_it_and_no_path_through_one() {
        let allow = Allow::Only(owned(&["python3Packages.", "haskell.packages."]));
        assert!(allow.allows("python3Packages.numpy"));
        assert!(allow.allows("haskell.packages.ghc98"));
        for name in [
            "python3Packages.pkgs.curl",
            "python3Packages.pkgs.buildPackages.curl",
            "python3Packages.pkgs.pkgsCross.gnu64.curl",
            "python3Packages.pkgs.__splicedPackages.curl",
            "python3Packages.pythonPackages.python.pkgs.curl",
            "python3Packages.python.pkgs.numpy",
            "python3Packages.numpy.dist",
            "haskell.packages.ghc98.aeson",
        ] {
            assert!(!allow.allows(name), "{name}");
        }
        // "any" is any attribute path: the owner allowed all of nixpkgs.
        assert!(Allow::Any.allows("python3Packages.pkgs.curl"));
    }

    #[test]
    fn a_prefix_does_not_allow_a_name_that_only_starts_alike() {
        let allow = Allow::Only(owned(&["python3Packages."]));
        assert!(!allow.allows("python3Packages.."));
        assert!(!allow.allows("python3Packages."));
    }

    #[test]
    fn the_policy_reads_any_or_a_list() {
        let any: Allow = serde_json::from_str("\"any\"").unwrap();
        assert_eq!(any, Allow::Any);
        let list: Allow = serde_json::from_str("[\"jq\"]").unwrap();
        assert_eq!(list, Allow::Only(owned(&["jq"])));
        assert!(serde_json::from_str::<Allow>("\"all\"").is_err());
        assert!(serde_json::from_str::<Allow>("[1]").is_err());
    }
}
