//! The path a rule's `paths` decide on, which is also the path the proxy
//! sends: the request's path normalised as RFC 3986 section 6.2.2 does,
//! so that what a rule allowed is what the upstream reads. Escapes of
//! unreserved characters are decoded (`%2e` is `.`, `%7E` is `~`), the hex
//! of other escapes is written in upper case, and dot segments are removed
//! (section 5.2.4: `/v1/x/../y` is `/v1/y`, `/v1/..` is `/`).
//!
//! Paths that upstreams read in different ways whatever is sent are
//! refused instead, each with the reason: an encoded `/`, `\` or `;`
//! (`%2F`, `%5C`, `%3B`: a separator to some, a character to others), one
//! encoded twice (`%252E`: a dot to a server that decodes twice), a
//! backslash (a separator to some), a `;` (a path parameter to Tomcat and
//! its like, which drop it: `/v1/..;/admin`), an empty segment before a
//! dot segment (servers that merge slashes first read `/v1//../x` as `/x`,
//! RFC 3986 as `/v1/x`), a byte outside ASCII, a malformed escape, and a
//! target that is not a path (`*`).

/// Why a path is refused as ambiguous, as the result's note says it.
pub type Ambiguous = &'static str;

/// The normal form of `path` (no query), or why it has none.
pub fn normalise(path: &str) -> Result<String, Ambiguous> {
    if !path.starts_with('/') {
        return Err("not a path");
    }
    let decoded = decode_unreserved(path)?;
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    let mut after_empty = false;
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." | ".." if after_empty => return Err("an empty segment before a dot segment"),
            "." => {}
            ".." => {
                out.pop();
            }
            segment => {
                after_empty |= segment.is_empty() && i + 1 < segments.len();
                out.push(segment);
            }
        }
    }
    let mut normal = format!("/{}", out.join("/"));
    if matches!(segments.last(), Some(&"." | &"..")) && !out.is_empty() {
        normal.push('/');
    }
    Ok(normal)
}

/// Whether `path` (normalised) is under a rule's `prefix`: a prefix ending
/// in `/` holds every path that starts with it; another one, itself and
/// the paths under it (`/v1` holds `/v1` and `/v1/x`, not `/v1x`).
pub fn under(prefix: &str, path: &str) -> bool {
    if prefix.ends_with('/') {
        return path.starts_with(prefix);
    }
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_at(bytes: &[u8], at: usize) -> Option<u8> {
    let pair = bytes.get(at..at + 2)?;
    u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()
}

/// `path` with its unreserved escapes decoded and the others in upper
/// case; refused: what [`normalise`] says.
fn decode_unreserved(path: &str) -> Result<String, Ambiguous> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let value = hex_at(bytes, i + 1).ok_or("a malformed escape")?;
                if unreserved(value) {
                    out.push(char::from(value));
                } else if matches!(value, b'/' | b'\\' | b';') {
                    return Err("an encoded / \\ or ;");
                } else if value == b'%'
                    && hex_at(bytes, i + 3).is_some_and(|v| matches!(v, b'.' | b'/' | b'\\' | b';'))
                {
                    return Err("a double-encoded . / \\ or ;");
                } else {
                    out.push_str(&format!("%{value:02X}"));
                }
                i += 3;
            }
            b'\\' => return Err("a backslash"),
            b';' => return Err("a ; parameter"),
            b if !b.is_ascii() => return Err("a character that must be percent-encoded"),
            b => {
                out.push(char::from(b));
                i += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_and_unreserved_escapes_are_resolved() {
        for (path, normal) in [
            ("/", "/"),
            ("/v1/", "/v1/"),
            ("/v1/x", "/v1/x"),
            ("/v1/./x", "/v1/x"),
            ("/v1/x/..", "/v1/"),
            ("/v1/x/.", "/v1/x/"),
            ("/v1/../admin", "/admin"),
            ("/v1/%2e%2e/admin", "/admin"),
            ("/v1/%2E./admin", "/admin"),
            ("/v1/x/../../admin", "/admin"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("/a/b/c/./../../g", "/a/g"),
            ("/%76%31/%7e%41", "/v1/~A"),
            ("/v1/a%20b%7c", "/v1/a%20b%7C"),
            ("/v1/%c3%a9", "/v1/%C3%A9"),
            ("/v1//x", "/v1//x"),
            ("/v1/.../x", "/v1/.../x"),
            ("/v1/a..b", "/v1/a..b"),
        ] {
            assert_eq!(normalise(path).as_deref(), Ok(normal), "{path}");
        }
    }

    #[test]
    fn ambiguous_paths_are_refused_with_the_reason() {
        for (path, why) in [
            ("*", "not a path"),
            ("v1/x", "not a path"),
            ("/v1/..%2fadmin", "an encoded / \\ or ;"),
            ("/v1/..%2Fadmin", "an encoded / \\ or ;"),
            ("/v1/..%5cadmin", "an encoded / \\ or ;"),
            ("/v1/..%3Badmin", "an encoded / \\ or ;"),
            ("/v1/%252e%252e/admin", "a double-encoded . / \\ or ;"),
            ("/v1/%252F", "a double-encoded . / \\ or ;"),
            ("/v1/..\\admin", "a backslash"),
            ("/v1/..;/admin", "a ; parameter"),
            ("/v1/x;jsessionid=1", "a ; parameter"),
            ("/v1//../admin", "an empty segment before a dot segment"),
            ("//v1/./x", "an empty segment before a dot segment"),
            ("/v1//%2e%2e/admin", "an empty segment before a dot segment"),
            ("/v1/é", "a character that must be percent-encoded"),
            ("/v1/%zz", "a malformed escape"),
            ("/v1/%4", "a malformed escape"),
        ] {
            assert_eq!(normalise(path), Err(why), "{path}");
        }
        // Escapes of other characters, %25 among them, stay as they are.
        assert_eq!(normalise("/v1/100%25"), Ok("/v1/100%25".to_owned()));
    }

    #[test]
    fn a_prefix_holds_whole_segments() {
        assert!(under("/v1/", "/v1/x"));
        assert!(!under("/v1/", "/v1"));
        assert!(under("/v1", "/v1"));
        assert!(under("/v1", "/v1/x"));
        assert!(!under("/v1", "/v1x"));
        assert!(!under("/v1", "/v1-admin"));
        assert!(under("/", "/anything"));
    }
}
