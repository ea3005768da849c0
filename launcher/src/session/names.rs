//! Session names: the model's, checked once ([`SessionName`]), and the ones
//! the server makes for requests without an MCP session ([`server_name`]).

use std::fmt;

use crate::catalog::{MAX_NAME, name_byte};

/// The length of the suffix the server adds to the names it gives.
pub const NAME_SUFFIX: usize = 12;

/// A valid session name: 1 to 64 of `[A-Za-z0-9_.-]`, the characters of
/// environment names (safe in a path, a URI and the log as they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionName(String);

impl SessionName {
    /// `name`, if it is a session name.
    pub fn new(name: &str) -> Option<Self> {
        let valid = (1..=MAX_NAME).contains(&name.len()) && name.bytes().all(name_byte);
        valid.then(|| Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A new session's name made by the server from `asked` (the model's name,
/// less a suffix of an earlier server name, cut to fit): `BASE.SUFFIX`,
/// with [`NAME_SUFFIX`] random letters and digits, unused in the table.
pub fn server_name(asked: &SessionName, taken: impl Fn(&str) -> bool) -> SessionName {
    let asked = asked.as_str();
    let base = match asked.rsplit_once('.') {
        Some((base, suffix))
            if suffix.len() == NAME_SUFFIX && suffix.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            base
        }
        _ => asked,
    };
    let base = &base[..base.len().min(MAX_NAME - 1 - NAME_SUFFIX)];
    loop {
        let name = format!("{base}.{}", random_suffix());
        if !taken(&name) {
            return SessionName(name);
        }
    }
}

/// [`NAME_SUFFIX`] letters and digits, unpredictable: SipHash outputs under
/// the process's random keys (std's `RandomState`, seeded by the OS).
pub fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bits = 0u128;
    for _ in 0..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0);
        bits = (bits << 64) | u128::from(hasher.finish());
    }
    (0..NAME_SUFFIX)
        .map(|_| {
            let c = ALPHABET[(bits % 62) as usize];
            bits /= 62;
            char::from(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid_name(name: &str) -> bool {
        SessionName::new(name).is_some()
    }

    fn name(name: &str) -> SessionName {
        SessionName::new(name).unwrap()
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "data-1", "x.y_z", &"n".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "a b", "é", "a/b", &"n".repeat(65), "x\n"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn server_names_are_fresh_valid_and_keep_the_models_name() {
        let a = server_name(&name("data"), |_| false).0;
        let b = server_name(&name("data"), |_| false).0;
        assert_ne!(a, b);
        for name in [&a, &b] {
            assert!(valid_name(name), "{name}");
            assert_eq!(name.len(), "data.".len() + NAME_SUFFIX, "{name}");
            assert!(name.starts_with("data."), "{name}");
        }
        // An earlier server name's suffix is replaced, not stacked.
        let again = server_name(&name(&a), |_| false).0;
        assert!(
            again.starts_with("data.") && again.len() == a.len() && again != a,
            "{again}"
        );
        // Long names are cut to fit the 64 characters of a session name.
        let long = server_name(&name(&"n".repeat(64)), |_| false).0;
        assert!(valid_name(&long) && long.len() == 64, "{long}");
        // A name in use is never given again.
        let tried = std::cell::Cell::new(0);
        let unused = server_name(&name("x"), |_| {
            tried.set(tried.get() + 1);
            tried.get() == 1
        });
        assert!(valid_name(unused.as_str()));
        assert_eq!(tried.get(), 2);
    }
}
