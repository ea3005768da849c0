//! Resources: the outputs of a session that are not shown in a result are
//! resource links, `sandbox://SESSION/outputs/PATH` (session/outputs/), which
//! `resources/read` serves through the session's agent while the session
//! lives; `resources/list` lists the links handed out to the client.

use std::collections::BTreeMap;
use std::sync::Mutex;

use proto::frame::Output;
use rmcp::ErrorData as McpError;
use rmcp::model::{ListResourcesResult, ReadResourceResult, Resource, ResourceContents};

use crate::session::outputs::{self, Item, MAX_RESOURCE_BYTES};
use crate::session::{OutputUnreadable, Sessions};

/// The resource links handed out to one client, by session, for
/// `resources/list`.
#[derive(Debug, Default)]
pub struct Links(Mutex<BTreeMap<String, BTreeMap<String, Output>>>);

impl Links {
    /// Notes the links of a call in `session`; `fresh` forgets the links of
    /// the session's earlier jail (it was replaced or reset).
    pub fn note(&self, session: &str, fresh: bool, items: &[Item]) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let links = all.entry(session.to_owned()).or_default();
        if fresh {
            links.clear();
        }
        for item in items.iter().filter(|i| i.uri.is_some()) {
            links.insert(item.output.path.clone(), item.output.clone());
        }
    }

    /// Every link of the sessions `open` says are open (the others are
    /// forgotten).
    pub fn list(&self, open: impl Fn(&str) -> bool) -> Vec<(String, Output)> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|session, _| open(session));
        all.iter()
            .flat_map(|(session, links)| links.values().map(move |o| (session.clone(), o.clone())))
            .collect()
    }
}

/// `resources/list`: the links handed out to the client whose sessions are
/// `sessions`, of the sessions still open.
pub fn list(sessions: &Sessions, links: &Links) -> ListResourcesResult {
    let resources = links
        .list(|name| sessions.is_open(name))
        .into_iter()
        .map(|(session, output)| {
            Resource::new(outputs::uri(&session, &output.path), output.path.clone())
                .with_mime_type(output.mime)
                .with_size(output.size)
        })
        .collect();
    ListResourcesResult::with_all_items(resources)
}

/// `resources/read` of `uri`, one of `sessions`' outputs.
pub async fn read(sessions: &Sessions, uri: String) -> Result<ReadResourceResult, McpError> {
    if let Some(session) = crate::project::parse_diff_uri(&uri) {
        let text = match sessions.read_diff(session).await {
            Ok(text) => text,
            Err(e) => return Err(unreadable(&uri, session, e)),
        };
        return Ok(ReadResourceResult::new(vec![
            ResourceContents::TextResourceContents {
                uri,
                mime_type: Some("text/x-diff".into()),
                text,
                meta: None,
            },
        ]));
    }
    let Some((session, path)) = outputs::parse_uri(&uri) else {
        return Err(McpError::resource_not_found(
            format!(
                "unknown resource {uri:?}: this server's resources are session outputs, \
                 sandbox://SESSION/outputs/PATH, and project diffs, sandbox://SESSION/project.diff"
            ),
            None,
        ));
    };
    let bytes = match sessions
        .read_output(session, &path, MAX_RESOURCE_BYTES + 1)
        .await
    {
        Ok(bytes) => bytes,
        Err(e) => return Err(unreadable(&uri, session, e)),
    };
    if bytes.len() as u64 > MAX_RESOURCE_BYTES {
        return Err(McpError::invalid_params(
            format!(
                "{uri} is larger than {}; read a part of it with `run` in session `{session}`",
                outputs::size_text(MAX_RESOURCE_BYTES)
            ),
            None,
        ));
    }
    let mime = proto::files::mime_type(&path, &bytes).to_owned();
    let contents = match String::from_utf8(bytes) {
        Ok(text) if proto::files::is_text(&mime) || mime == "application/octet-stream" => {
            ResourceContents::TextResourceContents {
                uri,
                mime_type: Some(mime),
                text,
                meta: None,
            }
        }
        Ok(text) => ResourceContents::BlobResourceContents {
            uri,
            mime_type: Some(mime),
            blob: proto::frame::encode_data(text.as_bytes()),
            meta: None,
        },
        Err(e) => ResourceContents::BlobResourceContents {
            uri,
            mime_type: Some(mime),
            blob: proto::frame::encode_data(e.as_bytes()),
            meta: None,
        },
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// Why `resources/read` of `uri` (session `session`) failed, for the client.
fn unreadable(uri: &str, session: &str, e: OutputUnreadable) -> McpError {
    match e {
        OutputUnreadable::NotOpen => McpError::resource_not_found(
            format!(
                "{uri}: session `{session}` is not open (it ended, or never was); outputs \
                 are readable while their session lives"
            ),
            None,
        ),
        OutputUnreadable::Busy => McpError::invalid_params(
            format!("{uri}: session `{session}` is running a call; read it once the call answered"),
            None,
        ),
        OutputUnreadable::Gone(why) => McpError::resource_not_found(format!("{uri}: {why}"), None),
        OutputUnreadable::Broken(why) => McpError::internal_error(
            format!("{uri}: the session's sandbox failed ({why}); it restarts on its next call"),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::outputs::uri;

    #[test]
    fn links_of_closed_sessions_are_forgotten() {
        let links = Links::default();
        let item = |path: &str| Item {
            output: Output {
                path: path.into(),
                size: 1,
                mime: "text/csv".into(),
            },
            shown: None,
            note: None,
            uri: Some(uri("s", path)),
            unmirrored: None,
        };
        links.note("a", false, &[item("x.csv")]);
        links.note("b", false, &[item("y.csv")]);
        links.note("a", false, &[item("z.csv")]);
        assert_eq!(links.list(|_| true).len(), 3);
        links.note("a", true, &[]);
        assert_eq!(links.list(|s| s == "a").len(), 0);
        assert_eq!(links.list(|_| true).len(), 0, "b was forgotten");
    }
}
