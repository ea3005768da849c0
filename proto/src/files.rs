//! Files in and out of a session jail, shared by the launcher and
//! the agent: the path rules of `/workspace` files, the caps, and the MIME
//! type of an output file.
//!
//! - Files in (`run`'s `files` argument): at most [`MAX_FILES`] files of at
//!   most [`MAX_FILES_BYTES`] in all, each at a path [`check_path`] accepts,
//!   relative to `/workspace`. The launcher checks them before anything runs;
//!   the agent checks them again and writes them without following any
//!   symbolic link.
//! - Outputs: the regular files under `/workspace/outputs` ([`OUTPUTS_DIR`])
//!   that a call created or changed, named by their path relative to it.

use std::fmt;

/// Most files one call may pass in.
pub const MAX_FILES: usize = 20;
/// Most bytes of content one call may pass in, all files together.
pub const MAX_FILES_BYTES: usize = 1 << 20;
/// The outputs directory, relative to the workspace.
pub const OUTPUTS_DIR: &str = "outputs";
/// Longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Deepest path accepted, in components.
pub const MAX_PATH_DEPTH: usize = 16;
/// Longest path component (the kernel's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

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
