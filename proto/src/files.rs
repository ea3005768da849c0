//! Files in and out of a session jail, shared by the launcher and
//! the agent: the path rules of `/workspace` files, the caps, and the MIME
//! type of an output file.
//!
//! - Files in (`run`'s `files` argument, [`Upload`]): at most [`MAX_FILES`]
//!   files (their bytes bounded by the server's setting and the
//!   workspace's size), each at a path [`check_path`] accepts, relative to
//!   `/workspace`. The launcher checks them before anything runs; the agent
//!   checks them again and writes them without following any symbolic link.
//! - Outputs: the regular files under `/workspace/outputs` ([`OUTPUTS_DIR`])
//!   that a call created or changed, named by their path relative to it,
//!   each component escaped one to one ([`escape_name`]): a name that is
//!   not UTF-8 or holds a control, line-separator or bidirectional
//!   character is listed all the same, visibly and on one line, and read by
//!   that name ([`unescape_name`]).

use std::fmt;

/// Most files one call may pass in.
pub const MAX_FILES: usize = 20;
/// The outputs directory, relative to the workspace.
pub const OUTPUTS_DIR: &str = "outputs";
/// Longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Deepest path accepted, in components.
pub const MAX_PATH_DEPTH: usize = 16;
/// Longest path component (the kernel's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

/// A file passed in: its path, its bytes, and whether it may replace a
/// file already at that path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub path: String,
    pub content: Vec<u8>,
    pub replace: bool,
}

/// Why a path is not a workspace path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPath(pub &'static str);

impl fmt::Display for BadPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The components of `path`, a path relative to the workspace: not empty,
/// not absolute, no `.` or `..` component, no empty component (`a//b`, a
/// trailing `/`), no control character, at most [`MAX_PATH_BYTES`] bytes
/// and [`MAX_PATH_DEPTH`] components of at most 255 bytes.
pub fn check_path(path: &str) -> Result<Vec<&str>, BadPath> {
    if path.is_empty() {
        return Err(BadPath("the path is empty"));
    }
    if path.starts_with('/') {
        return Err(BadPath(
            "the path is absolute; give it relative to /workspace",
        ));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(BadPath("the path is longer than 1024 bytes"));
    }
    if path.chars().any(char::is_control) {
        return Err(BadPath("the path contains a control character"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > MAX_PATH_DEPTH {
        return Err(BadPath("the path is deeper than 16 directories"));
    }
    for part in &parts {
        match *part {
            "" => {
                return Err(BadPath(
                    "the path has an empty component (// or a trailing /)",
                ));
            }
            "." | ".." => return Err(BadPath("the path has a . or .. component")),
            p if p.len() > MAX_NAME_BYTES => {
                return Err(BadPath("a path component is longer than 255 bytes"));
            }
            _ => {}
        }
    }
    Ok(parts)
}

/// The MIME type of an output file, from its first bytes (images) or its
/// name (everything else); `application/octet-stream` when unknown.
pub fn mime_type(name: &str, head: &[u8]) -> &'static str {
    if let Some(image) = image_type(head) {
        return image;
    }
    let extension = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "svg" => "image/svg+xml",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "txt" | "log" | "out" => "text/plain",
        "md" => "text/markdown",
        "json" => "application/json",
        "jsonl" | "ndjson" => "application/x-ndjson",
        "html" | "htm" => "text/html",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "py" => "text/x-python",
        "js" | "mjs" => "text/javascript",
        "sh" => "text/x-shellscript",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        "parquet" => "application/vnd.apache.parquet",
        _ => "application/octet-stream",
    }
}

/// The image types the model can be shown, told by their magic bytes:
/// PNG, JPEG, GIF and WebP.
pub fn image_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// How many first bytes [`mime_type`] looks at.
pub const SNIFF_BYTES: usize = 12;

/// Whether a MIME type is text the model could read as such.
pub fn is_text(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "image/svg+xml"
                | "application/json"
                | "application/x-ndjson"
                | "application/xml"
                | "application/yaml"
                | "application/toml"
        )
}

/// Whether `c`, shown, would be invisible, break the line or reorder the
/// text around it: C0 and C1 controls (ESC, newline, NEL...), DEL, the line
/// and paragraph separators (U+2028, U+2029), and the bidirectional
/// formatting characters (U+061C, U+200E, U+200F, U+202A to U+202E,
/// U+2066 to U+2069).
pub fn is_hidden_char(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

/// A file name's bytes as text that shows every one of them, one to one:
/// `\` as `\\`, a byte that is not UTF-8 or is an ASCII control as `\xNN`,
/// and another [`is_hidden_char`] as `\u{XXXX}`; everything else as it is.
pub fn escape_name(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else if c.is_ascii_control() {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else if is_hidden_char(c) {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The bytes of a name [`escape_name`] gave; `None` for text it cannot
/// have given.
pub fn unescape_name(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next()? {
            '\\' => out.push(b'\\'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                if hex.len() != 2 {
                    return None;
                }
                out.push(u8::from_str_radix(&hex, 16).ok()?);
            }
            'u' => {
                if chars.next()? != '{' {
                    return None;
                }
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let c = char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `text` with every [`is_hidden_char`] shown as `\u{XXXX}`: for names that
/// come from a jail and go into a result's text, where such a character
/// could forge a line or hide what follows. Not reversible; a name
/// [`escape_name`] gave comes out as it went in.
pub fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_hidden_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_hidden_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_paths_are_relative_and_plain() {
        assert_eq!(check_path("data.csv").unwrap(), vec!["data.csv"]);
        assert_eq!(
            check_path("in/sub/a b.txt").unwrap(),
            vec!["in", "sub", "a b.txt"]
        );
        assert_eq!(check_path("..x/.hidden").unwrap(), vec!["..x", ".hidden"]);
        for (bad, why) in [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../x", ".."),
            ("a/../../x", ".."),
            ("./a", ". or .."),
            ("a//b", "empty component"),
            ("a/", "empty component"),
            ("a\nb", "control"),
            ("a\0b", "control"),
        ] {
            let e = check_path(bad).unwrap_err();
            assert!(e.to_string().contains(why), "{bad:?}: {e}");
        }
        assert!(check_path("a/".repeat(17).trim_end_matches('/')).is_err());
        assert!(check_path(&"n".repeat(256)).is_err());
        assert!(check_path(&"n/".repeat(600)).is_err());
    }

    #[test]
    fn names_are_escaped_visibly_and_one_to_one() {
        let cases: [(&[u8], &str); 9] = [
            (b"plot.png", "plot.png"),
            ("été.csv".as_bytes(), "été.csv"),
            (b"a\nb", "a\\x0ab"),
            (b"\x1b[31mred", "\\x1b[31mred"),
            (b"del\x7f", "del\\x7f"),
            (b"bad\xff\xfeutf8", "bad\\xff\\xfeutf8"),
            (
                "x\u{2028}session reset".as_bytes(),
                "x\\u{2028}session reset",
            ),
            ("gpj.\u{202e}exe".as_bytes(), "gpj.\\u{202e}exe"),
            (b"back\\slash", "back\\\\slash"),
        ];
        for (bytes, want) in cases {
            let escaped = escape_name(bytes);
            assert_eq!(escaped, want);
            assert!(!escaped.chars().any(is_hidden_char), "{escaped:?}");
            assert_eq!(unescape_name(&escaped).as_deref(), Some(bytes), "{escaped}");
            assert_eq!(visible(&escaped), escaped, "an escaped name stays as it is");
            assert!(check_path(&escaped).is_ok(), "{escaped:?}");
        }
        // The C1 controls and the other bidirectional marks.
        for c in [
            '\u{85}', '\u{9b}', '\u{61c}', '\u{200f}', '\u{2029}', '\u{2066}', '\u{2069}',
        ] {
            let escaped = escape_name(c.to_string().as_bytes());
            assert!(escaped.starts_with("\\u{"), "{c:?}: {escaped}");
        }
        for bad in ["\\", "\\q", "\\x1", "\\xzz", "\\u{110000}", "\\u2028"] {
            assert_eq!(unescape_name(bad), None, "{bad:?}");
        }
        assert_eq!(visible("a\u{202e}b\n"), "a\\u{202e}b\\u{a}");
    }

    #[test]
    fn images_are_told_by_their_bytes() {
        assert_eq!(mime_type("x.bin", b"\x89PNG\r\n\x1a\n...."), "image/png");
        assert_eq!(mime_type("x", b"\xff\xd8\xff\xe0"), "image/jpeg");
        assert_eq!(mime_type("x", b"GIF89a.."), "image/gif");
        assert_eq!(mime_type("x", b"RIFF\0\0\0\0WEBPVP8 "), "image/webp");
        // A name does not make an image.
        assert_eq!(
            mime_type("fake.png", b"not a png"),
            "application/octet-stream"
        );
        assert_eq!(mime_type("plot.SVG", b"<svg"), "image/svg+xml");
        assert_eq!(mime_type("t.csv", b"a,b"), "text/csv");
        assert_eq!(mime_type("noext", b""), "application/octet-stream");
        assert!(is_text("text/csv") && is_text("image/svg+xml") && !is_text("image/png"));
    }
}
