//! What the model reads of the files a call wrote under
//! `/workspace/outputs` (outputs/ collects them): a few lines in the text,
//! then images, SVG texts and resource links as content blocks. Every
//! output is listed; names come from the jail, so what could break a line
//! or reorder the text is shown escaped (`proto::files::visible`; the agent
//! escapes names already, this holds against one that does not).

use rmcp::model::{ContentBlock, Resource};
use serde::Serialize;

use proto::files::visible;

use crate::session::outputs::{Collected, Shown, size_text};

/// The lines of the result's text about the outputs (none when there are
/// none); `throwaway`: the jail is gone, nothing is readable afterwards.
pub fn lines(c: &Collected, throwaway: bool) -> Vec<String> {
    if c.items.is_empty() && c.more == 0 {
        return Vec::new();
    }
    let mut lines = vec!["outputs (new or changed in /workspace/outputs):".to_owned()];
    let mut unkept = false;
    for item in &c.items {
        let o = &item.output;
        let mut line = format!(
            "- {} ({}, {})",
            visible(&o.path),
            visible(&o.mime),
            size_text(o.size)
        );
        let mut said = Vec::new();
        if item.shown.is_some() {
            said.push("shown".to_owned());
        }
        said.extend(item.note.clone());
        said.extend(item.unmirrored.as_ref().map(ToString::to_string));
        if let Some(uri) = &item.uri {
            said.push(format!("resource {uri}"));
        } else if item.shown.is_none() && throwaway {
            unkept = true;
        }
        if !said.is_empty() {
            line.push_str(": ");
            line.push_str(&said.join("; "));
        }
        lines.push(line);
    }
    if c.more > 0 {
        let mirrored = if c.mirror_on { ", not mirrored" } else { "" };
        lines.push(format!("- (+{} more not listed{mirrored})", c.more));
    }
    if unkept {
        lines.push(
            "(without `session` no file is kept after the run; name a session to read them)".into(),
        );
    }
    if let Some(dir) = &c.mirrored {
        lines.push(format!("outputs mirrored to {}", dir.display()));
    }
    if let Some(why) = &c.broken {
        lines.push(format!(
            "reading the outputs failed ({why}); the session restarts on its next call"
        ));
    }
    lines
}

/// The content blocks after the text: images, SVG texts, and resource links
/// when `resource_links` (the client's protocol revision has them).
pub fn blocks(c: &Collected, resource_links: bool) -> Vec<ContentBlock> {
    c.items
        .iter()
        .filter_map(|item| match (&item.shown, &item.uri) {
            (Some(Shown::Image { mime, data }), _) => {
                Some(ContentBlock::image(data.clone(), *mime))
            }
            (Some(Shown::Svg(text)), _) => Some(ContentBlock::text(format!(
                "--- outputs/{} ---\n{text}",
                visible(&item.output.path)
            ))),
            (None, Some(uri)) if resource_links => Some(ContentBlock::resource_link(
                Resource::new(uri.clone(), visible(&item.output.path).into_owned())
                    .with_mime_type(visible(&item.output.mime).into_owned())
                    .with_size(item.output.size),
            )),
            (None, _) => None,
        })
        .collect()
}

/// One output in a call's facts ([`super::call::CallFacts`]).
#[derive(Debug, Serialize)]
pub struct OutputFact<'a> {
    /// Its path under /workspace/outputs.
    pub path: &'a str,
    /// Its size in bytes, as the agent listed it.
    pub size: u64,
    /// Its MIME type, told by its bytes and name.
    pub mime: &'a str,
    /// It is in the result as image content or SVG text.
    pub shown: bool,
    /// Its resource link, in a session, when it is not shown.
    pub uri: Option<&'a str>,
}

/// The outputs in a call's facts.
pub fn facts(c: &Collected) -> Vec<OutputFact<'_>> {
    c.items
        .iter()
        .map(|item| OutputFact {
            path: &item.output.path,
            size: item.output.size,
            mime: &item.output.mime,
            shown: item.shown.is_some(),
            uri: item.uri.as_deref(),
        })
        .collect()
}
