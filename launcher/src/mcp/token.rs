//! The bearer token of MCP over HTTP: read from the token file
//! (`--token-file` or `NIX_SANDBOX_TOKEN_FILE`), required of every request,
//! compared in constant time, and what a client without it is told.

use std::path::{Path, PathBuf};

use ::http::header;

use super::http::Options;
use crate::settings;

/// Tokens shorter than this work, with a warning.
const SHORT_TOKEN: usize = 16;

/// Reads the bearer token: the file's content without surrounding
/// whitespace, which must not be empty.
pub fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    if token.len() < SHORT_TOKEN {
        tracing::warn!(
            file = %path.display(),
            "the bearer token is shorter than {SHORT_TOKEN} characters; anyone who can reach the port may guess it"
        );
    }
    Ok(token.to_owned())
}

/// The token file: `--token-file`, else `NIX_SANDBOX_TOKEN_FILE`.
pub fn token_file(options: &Options) -> Result<PathBuf, String> {
    options.token_file.clone().ok_or_else(|| {
        format!(
            "--http needs a bearer token: give --token-file PATH or set {}",
            settings::TOKEN_FILE.var_name()
        )
    })
}

/// What a client without the token is told, in a 401's body and on OAuth
/// discovery paths.
pub const NO_OAUTH: &str = "this server takes a static bearer token, not OAuth: send the header \
     `Authorization: Bearer TOKEN`, TOKEN being the content of the server's token file \
     (--token-file or NIX_SANDBOX_TOKEN_FILE); in an MCP client, set it as a header";

/// The `WWW-Authenticate` of a 401 (RFC 6750), the same in short.
pub const CHALLENGE: &str = "Bearer realm=\"nix-sandbox-mcp\", error=\"invalid_token\", \
     error_description=\"a static bearer token is expected (the server's token file); no OAuth\"";

/// True when `headers` carry `Authorization: Bearer TOKEN` with this token.
pub fn authorized(headers: &::http::HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    let scheme = b"bearer ";
    value.len() > scheme.len()
        && value[..scheme.len()].eq_ignore_ascii_case(scheme)
        && constant_time_eq(value[scheme.len()..].trim_ascii(), token.as_bytes())
}

/// Compares in time that depends on the lengths only, not on where the
/// first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::headers;

    #[test]
    fn only_the_right_bearer_token_passes() {
        let token = "s3cret-token-0123456789";
        assert!(authorized(
            &headers(&[("authorization", "Bearer s3cret-token-0123456789")]),
            token
        ));
        assert!(authorized(
            &headers(&[("authorization", "bearer s3cret-token-0123456789 ")]),
            token
        ));
        for bad in [
            "Bearer s3cret-token-012345678",
            "Bearer s3cret-token-01234567890",
            "Basic s3cret-token-0123456789",
            "Bearer ",
            "s3cret-token-0123456789",
        ] {
            assert!(
                !authorized(&headers(&[("authorization", bad)]), token),
                "{bad}"
            );
        }
        assert!(!authorized(&headers(&[]), token));
    }

    #[test]
    fn constant_time_eq_compares_whole_slices() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn the_token_file_is_trimmed_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  abc\n").unwrap();
        assert_eq!(read_token(&path).unwrap(), "abc");
        std::fs::write(&path, "\n \n").unwrap();
        assert!(read_token(&path).unwrap_err().contains("empty"));
        assert!(read_token(&dir.path().join("nope")).is_err());
    }
}
