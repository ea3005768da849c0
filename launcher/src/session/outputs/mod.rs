//! Outputs: what becomes of the files a call wrote under
//! `/workspace/outputs`, which the session's agent lists in its exec reply
//! (report/outputs.rs says them to the model).
//!
//! - Images (PNG, JPEG, GIF, WebP, told by their bytes) are shown to the
//!   model as MCP image content, at most [`MAX_SHOWN`] per call, each at
//!   most [`MAX_IMAGE_BYTES`], [`MAX_SHOWN_BYTES`] in all; SVG comes as text
//!   (at most [`MAX_SVG_BYTES`], counted with the images). Downscaling is not
//!   done: a larger image is listed with the reason it is not shown.
//! - Every other file (and every image not shown) is listed with its size and
//!   MIME type; in a session it is a resource link
//!   (`sandbox://SESSION/outputs/PATH`) that `resources/read` serves while
//!   the session lives.
//! - With the mirror on (mirror.rs), every file listed is also copied to the
//!   host, within the mirror's caps; what is not copied says why.
//!
//! The bytes come from the agent (`read` frames), never from the jail's
//! files directly (docs/contracts.md, contract 3). Reading is bounded in time,
//! and each answer to what was asked (session/verify.rs); an agent that
//! fails to answer, or answers with more or elsewhere, gets the caller's
//! jail killed.

use std::path::PathBuf;
use std::time::Duration;

use proto::files::{self, image_type};
use proto::frame::{ErrorCode, MAX_READ_BYTES, Output, Reply, Request};
use tokio::time::Instant;

pub mod mirror;

use super::jail::{Broken, Jail};
use super::verify;
use mirror::{Mirror, MirrorFile, Skipped};

/// Most images (SVG included) shown per call.
pub const MAX_SHOWN: usize = 4;
/// Largest image shown.
pub const MAX_IMAGE_BYTES: u64 = 1 << 20;
/// Most image bytes shown per call.
pub const MAX_SHOWN_BYTES: u64 = 3 << 20;
/// Largest SVG shown as text.
pub const MAX_SVG_BYTES: u64 = 16 << 10;
/// Largest output `resources/read` returns.
pub const MAX_RESOURCE_BYTES: u64 = 8 << 20;
/// How long reading the outputs of one call may take (mirroring included).
const READ_TIME: Duration = Duration::from_secs(30);

/// What is shown of one output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// Base64 data of an image of this MIME type.
    Image { mime: &'static str, data: String },
    /// The text of an SVG.
    Svg(String),
}

/// One output of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub output: Output,
    pub shown: Option<Shown>,
    /// Why an image is not shown, or that it was gone before it was read.
    pub note: Option<String>,
    /// The resource link, in a session, for what is not shown.
    pub uri: Option<String>,
    /// Why it is not in the outputs mirror, when the mirror is on.
    pub unmirrored: Option<mirror::Skipped>,
}

/// The outputs of one call.
#[derive(Debug, Default)]
pub struct Collected {
    pub items: Vec<Item>,
    /// Outputs the agent did not list.
    pub more: u64,
    /// Where they were mirrored to (when one was).
    pub mirrored: Option<PathBuf>,
    /// The mirror is on: what is not listed is not mirrored either.
    pub mirror_on: bool,
    /// The agent could not be read from: the jail must be killed.
    pub broken: Option<String>,
}

/// Where a call's outputs go besides the result.
pub struct Destination<'a> {
    /// The session's name: outputs not shown become resource links.
    pub session: Option<&'a str>,
    /// The mirror and the directory name in it.
    pub mirror: Option<(&'a Mirror, String)>,
}

/// The URI of output `path` of `session`.
pub fn uri(session: &str, path: &str) -> String {
    format!("sandbox://{session}/outputs/{}", percent_encode(path))
}

/// The session and output path a URI names, if it is one of ours.
pub fn parse_uri(uri: &str) -> Option<(&str, String)> {
    let rest = uri.strip_prefix("sandbox://")?;
    let (session, path) = rest.split_once("/outputs/")?;
    let path = percent_decode(path)?;
    files::check_path(&path).ok()?;
    Some((session, path))
}

/// Collects what the listed `outputs` of a call become.
pub async fn collect(
    jail: &mut Jail,
    outputs: &[Output],
    more: u64,
    to: &Destination<'_>,
) -> Collected {
    let mut collector = Collector {
        jail,
        to,
        deadline: Instant::now() + READ_TIME,
        call_left: to.mirror.as_ref().map_or(0, |(m, _)| m.caps.per_call),
        shown: 0,
        shown_bytes: 0,
        collected: Collected {
            more,
            mirror_on: to.mirror.is_some(),
            ..Collected::default()
        },
    };
    for output in outputs {
        let item = match files::check_path(&output.path) {
            Ok(_) => collector.one(output).await,
            Err(why) => unreadable(output, &why, to),
        };
        collector.collected.items.push(item);
    }
    collector.collected
}

/// A path the agent cannot read back (too long once escaped, or from an
/// agent that broke the rules): listed all the same, unread.
fn unreadable(output: &Output, why: &files::BadPath, to: &Destination<'_>) -> Item {
    tracing::warn!(path = %files::visible(&output.path), "an output path that cannot be read");
    Item {
        output: output.clone(),
        shown: None,
        note: Some(format!("not read: {why}")),
        uri: None,
        unmirrored: to
            .mirror
            .as_ref()
            .map(|_| Skipped::Failed("its path cannot be read".into())),
    }
}

/// Whether an output is shown to the model.
struct View {
    svg: bool,
    /// It is an image or an SVG, within the call's caps.
    show: bool,
    /// The most bytes of it shown.
    limit: u64,
    /// Why an image is not shown.
    refusal: Option<String>,
}

/// One call's outputs as they are collected, and what they have used of
/// the call's caps.
struct Collector<'a, 'd> {
    jail: &'a mut Jail,
    to: &'a Destination<'d>,
    deadline: Instant,
    /// What the call may still mirror, in bytes.
    call_left: u64,
    /// Images shown so far, and their bytes.
    shown: usize,
    shown_bytes: u64,
    collected: Collected,
}

impl<'d> Collector<'_, 'd> {
    /// What `output` becomes: shown, copied to the mirror, listed.
    async fn one(&mut self, output: &Output) -> Item {
        let view = self.view(output);
        let mut item = Item {
            output: output.clone(),
            shown: None,
            note: view.refusal.clone(),
            uri: None,
            unmirrored: None,
        };
        let broken = self.collected.broken.is_some();
        let copy = if broken {
            None
        } else {
            self.begin_copy(output, &mut item)
        };
        if (view.show || copy.is_some()) && !broken {
            self.read(output, &view, copy, &mut item).await;
        } else if self.to.mirror.is_some() && item.unmirrored.is_none() {
            // The agent broke before this one was read.
            item.unmirrored = Some(Skipped::Failed("reading it failed".into()));
        }
        if item.shown.is_none() {
            item.uri = self.to.session.map(|s| uri(s, &output.path));
        }
        item
    }

    /// Whether `output` is shown, within the call's caps, or why not.
    fn view(&self, output: &Output) -> View {
        let svg = output.mime == "image/svg+xml";
        let image = output.mime.starts_with("image/") && !svg;
        let limit = if svg { MAX_SVG_BYTES } else { MAX_IMAGE_BYTES };
        let refusal = if !(image || svg) {
            None
        } else if output.size > limit {
            Some(format!("not shown: over {} per image", size_text(limit)))
        } else if self.shown >= MAX_SHOWN {
            Some(format!("not shown: over {MAX_SHOWN} images per call"))
        } else if self.shown_bytes + output.size > MAX_SHOWN_BYTES {
            Some(format!(
                "not shown: over {} of images per call",
                size_text(MAX_SHOWN_BYTES)
            ))
        } else {
            None
        };
        View {
            svg,
            show: (image || svg) && refusal.is_none(),
            limit,
            refusal,
        }
    }

    /// The mirror's copy of `output`, begun when the call's share and the
    /// directory have room for it; else `item` says why not.
    fn begin_copy(&self, output: &Output, item: &mut Item) -> Option<MirrorFile<'d>> {
        let (mirror, dir) = self.to.mirror.as_ref()?;
        let mirror: &'d Mirror = mirror;
        if output.size > self.call_left {
            item.unmirrored = Some(Skipped::CallFull {
                per_call: mirror.caps.per_call,
            });
            return None;
        }
        match mirror.create(dir, &output.path, output.size) {
            Ok(file) => Some(file),
            Err(skipped) => {
                item.unmirrored = Some(skipped);
                None
            }
        }
    }

    /// Reads `output` from the agent, for the model (`view`) and into the
    /// mirror's `copy`; `item` says what came of it.
    async fn read(
        &mut self,
        output: &Output,
        view: &View,
        mut copy: Option<MirrorFile<'d>>,
        item: &mut Item,
    ) {
        let max = if copy.is_some() {
            self.call_left
        } else {
            view.limit
        };
        let mut bytes = Vec::new();
        let mut failed = None;
        let read = read_each(self.jail, &output.path, max, self.deadline, |chunk| {
            if view.show && bytes.len() as u64 <= view.limit {
                bytes.extend_from_slice(chunk);
            }
            if let Some(file) = &mut copy
                && let Err(e) = file.write(chunk)
            {
                tracing::warn!(path = %output.path, "mirroring an output failed: {e}");
                failed = Some(Skipped::Failed(e.to_string()));
                copy = None;
            }
        })
        .await;
        item.unmirrored = item.unmirrored.take().or(failed);
        match read {
            Ok(total) => {
                if view.show {
                    self.show(&bytes, view, item);
                }
                if let Some(file) = copy {
                    self.finish_copy(file, total, item);
                }
            }
            Err(ReadFailed::Gone(why)) => {
                item.note = Some(format!("gone before it could be read ({why})"));
                item.unmirrored = None;
            }
            Err(ReadFailed::Broken(why)) => {
                tracing::warn!(path = %output.path, "reading outputs failed: {why}");
                item.unmirrored = Some(Skipped::Failed("reading it failed".into()));
                self.collected.broken = Some(why);
            }
        }
    }

    /// Shows the image or SVG `bytes` in `item`, counted in the call's caps.
    fn show(&mut self, bytes: &[u8], view: &View, item: &mut Item) {
        item.shown = shown_form(bytes, view.svg, view.limit);
        match &item.shown {
            Some(_) => {
                self.shown += 1;
                self.shown_bytes += bytes.len() as u64;
            }
            None => item.note = Some("not shown: not a whole image".into()),
        }
    }

    /// Completes the mirror's copy of `total` bytes, counted in the call's
    /// share; else `item` says why it is not mirrored.
    fn finish_copy(&mut self, file: MirrorFile<'_>, total: u64, item: &mut Item) {
        let Some((mirror, dir)) = &self.to.mirror else {
            return;
        };
        match file.finish() {
            Ok(()) => {
                self.call_left = self.call_left.saturating_sub(total);
                self.collected.mirrored = Some(mirror.path_of(dir));
            }
            Err(skipped) => item.unmirrored = Some(skipped),
        }
    }
}

/// The shown form of an output's bytes: an image whose bytes say so, or an
/// SVG in UTF-8; `None` otherwise (or over `limit`: it grew).
fn shown_form(bytes: &[u8], svg: bool, limit: u64) -> Option<Shown> {
    if bytes.len() as u64 > limit {
        return None;
    }
    if svg {
        return String::from_utf8(bytes.to_vec()).ok().map(Shown::Svg);
    }
    image_type(bytes).map(|mime| Shown::Image {
        mime,
        data: proto::frame::encode_data(bytes),
    })
}

/// Why an output could not be read.
#[derive(Debug)]
pub enum ReadFailed {
    /// No such regular file (any more).
    Gone(String),
    /// The agent did not answer as it should: its jail must be killed.
    Broken(String),
}

/// Reads output `path` from the agent, at most `max` bytes (more is cut),
/// handing each piece to `each`; how many bytes were read.
pub async fn read_each(
    jail: &mut Jail,
    path: &str,
    max: u64,
    deadline: Instant,
    mut each: impl FnMut(&[u8]),
) -> Result<u64, ReadFailed> {
    let mut offset = 0u64;
    loop {
        let want = max.saturating_sub(offset).min(MAX_READ_BYTES);
        let id = jail.fresh_id();
        let request = Request::Read {
            id,
            path: path.to_owned(),
            offset,
            max_bytes: want,
        };
        let exchange = async {
            jail.request(&request)
                .await
                .map_err(|e| ReadFailed::Broken(e.to_string()))?;
            let broken = |b: Broken| ReadFailed::Broken(b.to_string());
            match jail.next_reply().await {
                Ok(Reply::File(file)) if file.id == id => verify::file(&file, path, offset, want)
                    .map(|chunk| (file, chunk))
                    .map_err(|v| broken(Broken::Invalid(v))),
                Ok(Reply::Error {
                    id: Some(err),
                    code: ErrorCode::NotFound,
                    message,
                }) if err == id => match verify::message(&message) {
                    Ok(()) => Err(ReadFailed::Gone(message)),
                    Err(v) => Err(broken(Broken::Invalid(v))),
                },
                Ok(other) => Err(broken(Broken::Unexpected(verify::describe(&other)))),
                Err(e) => Err(broken(e)),
            }
        };
        let (file, chunk) = tokio::time::timeout_at(deadline, exchange)
            .await
            .map_err(|_| ReadFailed::Broken("the agent did not answer a read in time".into()))??;
        each(&chunk);
        offset += chunk.len() as u64;
        if file.eof || chunk.is_empty() || offset >= max {
            return Ok(offset);
        }
    }
}

/// Reads all of output `path` (at most `max` bytes, more is cut).
pub async fn read_all(jail: &mut Jail, path: &str, max: u64) -> Result<Vec<u8>, ReadFailed> {
    let mut bytes = Vec::new();
    let deadline = Instant::now() + READ_TIME;
    read_each(jail, path, max, deadline, |chunk| {
        bytes.extend_from_slice(chunk)
    })
    .await?;
    Ok(bytes)
}

/// `n` bytes for a person: `512 B`, `1.5 KiB`, `3 MiB`.
pub fn size_text(n: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    let scaled = |unit: u64, name: &str| {
        if n.is_multiple_of(unit) {
            format!("{} {name}", n / unit)
        } else {
            format!("{:.1} {name}", n as f64 / unit as f64)
        }
    };
    if n >= MIB {
        scaled(MIB, "MiB")
    } else if n >= KIB {
        scaled(KIB, "KiB")
    } else {
        format!("{n} B")
    }
}

/// Percent-encodes what is not unreserved (RFC 3986) or `/`.
fn percent_encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        let u = uri("s1", "plots/my chart%.csv");
        assert_eq!(u, "sandbox://s1/outputs/plots/my%20chart%25.csv");
        assert_eq!(
            parse_uri(&u),
            Some(("s1", "plots/my chart%.csv".to_owned()))
        );
        assert_eq!(parse_uri("sandbox://s1/outputs/..%2Fx"), None);
        assert_eq!(parse_uri("sandbox://s1/outputs/%2Fetc"), None);
        assert_eq!(parse_uri("file:///etc/passwd"), None);
        assert_eq!(parse_uri("sandbox://s1/other/x"), None);
        assert_eq!(parse_uri("sandbox://s1/outputs/%zz"), None);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size_text(512), "512 B");
        assert_eq!(size_text(1536), "1.5 KiB");
        assert_eq!(size_text(3 << 20), "3 MiB");
    }

    #[test]
    fn only_whole_images_are_shown() {
        let png = b"\x89PNG\r\n\x1a\nrest";
        assert_eq!(
            shown_form(png, false, 100),
            Some(Shown::Image {
                mime: "image/png",
                data: proto::frame::encode_data(png)
            })
        );
        assert_eq!(shown_form(png, false, 4), None, "over the limit");
        assert_eq!(shown_form(b"not an image", false, 100), None);
        assert_eq!(
            shown_form(b"<svg/>", true, 100),
            Some(Shown::Svg("<svg/>".into()))
        );
        assert_eq!(shown_form(b"\xff\xfe", true, 100), None);
    }
}
