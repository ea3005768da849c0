//! The launcher's layers: reads the `crate::` and `super::` paths of every
//! production file of launcher/src and checks them against the diagram at the
//! top of main.rs (and its copy in CONTRIBUTING.md), so that no module uses one
//! on its own line or above, and no import circle crosses folders. A folder
//! is one module there: its files use each other freely.
//!
//! `LAYER_GRAPH=1 cargo test -p launcher --test layers -- --nocapture graph`
//! (scripts/layer-graph) prints the file and folder import graphs and their
//! circles (strongly connected components).
//!
//! What counts: a path `crate::a::b` or `super::b` in code, `use` line or not,
//! resolved to the deepest module file it names. What does not: comments
//! (doc links included), strings, `#[cfg(test)]` items, `*_tests.rs` files and
//! the modules main.rs declares under `#[cfg(test)]`: tests may look anywhere.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "a test: a failed unwrap is a failed test, and a scenario reads best whole"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `[]` is main.rs, `["wrapper", "host"]`
/// is wrapper/host.rs.
type ModPath = Vec<String>;

/// Code with comments removed and every string or char literal emptied, so
/// that braces and `crate::` inside them are not read as code.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let open_len = 2 + hashes + usize::from(rest.starts_with("br"));
            let body = &rest[open_len..];
            i += open_len + body.find(&close).map_or(body.len(), |e| e + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            i += char_literal_len(rest).unwrap_or(1);
            out.push_str("' '");
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"`...: the number of hashes, when `s` opens a raw string
/// (and is not the tail of an identifier such as `for`).
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s).strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// The length of a char literal at the start of `s` (`'{'`, `'\n'`,
/// `'\u{7f}'`), or None for a lifetime.
fn char_literal_len(s: &str) -> Option<usize> {
    let rest = &s[1..];
    if let Some(esc) = rest.strip_prefix('\\') {
        let end = esc.find('\'')?;
        return Some(3 + end);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..]
        .starts_with('\'')
        .then_some(2 + c.len_utf8())
}

/// `code` without the items under `#[cfg(test)]`, and the names of the
/// modules declared there (`mod testing;`).
fn without_tests(code: &str) -> (String, Vec<String>) {
    const ATTR: &str = "#[cfg(test)]";
    let mut out = String::new();
    let mut test_mods = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(ATTR) {
        out.push_str(&rest[..at]);
        let item = &rest[at + ATTR.len()..];
        let end = item_end(item);
        let words: Vec<&str> = item[..end]
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ';'))
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(pos) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(pos + 1).and_then(|w| w.strip_suffix(';'))
        {
            test_mods.push(name.to_owned());
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, test_mods)
}

/// Where the item at the start of `s` ends: after its first `;` outside
/// brackets, or after the `}` closing its first `{`; further attributes
/// (`#[path = ...]`) belong to it.
fn item_end(s: &str) -> usize {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            ';' if depth == 0 => return i + 1,
            _ => {}
        }
    }
    s.len()
}

/// Every path that starts with `crate::`, `super::` or the name of one of
/// `children` (the modules declared in `here`, the module the code is in) in
/// `code`, made absolute; a group (`crate::a::{b, c::d}`) gives one path a
/// member.
fn paths(code: &str, here: &ModPath, children: &[String]) -> Vec<ModPath> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let child_starts = children.iter().map(|c| format!("{c}::"));
    for start in ["crate::".to_owned(), "super::".to_owned()]
        .into_iter()
        .chain(child_starts)
    {
        let start = start.as_str();
        let mut from = 0;
        while let Some(off) = code[from..].find(start) {
            let at = from + off;
            from = at + start.len();
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
                continue; // the tail of an identifier, or a path's inner `super`
            }
            // A mod.rs is its folder's module: its `super` is the folder's parent.
            let mut base = here.clone();
            let mut tail = &code[at..];
            if start == "crate::" {
                base.clear();
                tail = &tail["crate::".len()..];
            } else if start == "super::" {
                while let Some(t) = tail.strip_prefix("super::") {
                    base.pop();
                    tail = t;
                }
            } else if code[..at].trim_end().ends_with("mod") {
                continue; // `mod name;` is no use of it
            }
            let mut tokens = Tokens::new(tail);
            for rel in tree(&mut tokens) {
                let mut abs = base.clone();
                abs.extend(rel.into_iter().filter(|s| s != "self"));
                found.push(abs);
            }
        }
    }
    found
}

/// The identifiers, `::`, braces and commas of a `use` tree; anything else
/// ends it.
struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    fn new(rest: &'a str) -> Self {
        Self { rest }
    }

    fn peek(&self) -> Option<&'a str> {
        let s = self.rest.trim_start();
        let first = s.chars().next()?;
        if s.starts_with("::") {
            Some(&s[..2])
        } else if matches!(first, '{' | '}' | ',' | '*') {
            Some(&s[..1])
        } else if first.is_alphanumeric() || first == '_' {
            let end = s
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len());
            Some(&s[..end])
        } else {
            None
        }
    }

    fn next(&mut self) -> Option<&'a str> {
        let token = self.peek()?;
        let s = self.rest.trim_start();
        self.rest = &s[token.len()..];
        Some(token)
    }
}

/// A use tree: `a::b::c`, `a::{b, c::d}`, `a::*`; the paths it names.
fn tree(t: &mut Tokens) -> Vec<ModPath> {
    let mut prefix = Vec::new();
    loop {
        match t.peek() {
            Some("{") => {
                t.next();
                let mut all = Vec::new();
                loop {
                    for p in tree(t) {
                        let mut full = prefix.clone();
                        full.extend(p);
                        all.push(full);
                    }
                    match t.next() {
                        Some(",") if t.peek() != Some("}") => continue,
                        Some(",") => {
                            t.next();
                            break;
                        }
                        _ => break,
                    }
                }
                return all;
            }
            Some("*") => {
                t.next();
                return vec![prefix];
            }
            Some(word) if word != "," && word != "}" && word != "::" => {
                t.next();
                prefix.push(word.to_owned());
                if t.peek() == Some("::") {
                    t.next();
                } else {
                    return vec![prefix];
                }
            }
            _ => return vec![prefix],
        }
    }
}

/// One production file of launcher/src.
struct File {
    rel: String,
    module: ModPath,
    code: String,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The production files: every .rs file but the `*_tests.rs` files and the
/// modules declared under `#[cfg(test)]`.
fn files() -> Vec<File> {
    let mut all = Vec::new();
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    let mut stack = vec![src_dir()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("launcher/src is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(src_dir())
                .expect("under src")
                .to_string_lossy()
                .into_owned();
            if !rel.ends_with(".rs") || rel.ends_with("_tests.rs") {
                continue;
            }
            let mut module: ModPath = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(str::to_owned)
                .collect();
            if module.last().is_some_and(|m| m == "mod") || rel == "main.rs" {
                module.pop();
            }
            let source = fs::read_to_string(&path).expect("a source file is readable");
            let (code, test_mods) = without_tests(&strip(&source));
            for name in test_mods {
                let mut m = module.clone();
                m.push(name);
                test_only.insert(m);
            }
            all.push(File { rel, module, code });
        }
    }
    all.retain(|f| !test_only.contains(&f.module));
    all.sort_by(|a, b| a.rel.cmp(&b.rel));
    all
}

/// The file-level graph: each file's set of the files its paths name (the
/// deepest module file of each path; itself left out).
fn file_graph(files: &[File]) -> BTreeMap<String, BTreeSet<String>> {
    let by_module: BTreeMap<&ModPath, &str> =
        files.iter().map(|f| (&f.module, f.rel.as_str())).collect();
    let mut graph = BTreeMap::new();
    for f in files {
        let children: Vec<String> = files
            .iter()
            .filter(|c| c.module.len() == f.module.len() + 1 && c.module.starts_with(&f.module))
            .filter_map(|c| c.module.last().cloned())
            .collect();
        let mut targets = BTreeSet::new();
        for path in paths(&f.code, &f.module, &children) {
            let target = (0..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n].to_vec()));
            if let Some(target) = target.filter(|t| **t != f.rel) {
                targets.insert((*target).to_owned());
            }
        }
        graph.insert(f.rel.clone(), targets);
    }
    graph
}

/// The top-level module (a file of src, or a folder) a file belongs to, as
/// the diagram names it: `main.rs`, `run.rs`, `wrapper/`.
fn top(rel: &str) -> String {
    match rel.split_once('/') {
        Some((folder, _)) => format!("{folder}/"),
        None => rel.to_owned(),
    }
}

/// The graph between top-level modules.
fn folder_graph(files: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in files {
        let entry = graph.entry(top(from)).or_default();
        entry.extend(targets.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    graph
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found.sort();
    s.found
}

fn print_graph(title: &str, graph: &BTreeMap<String, BTreeSet<String>>) {
    println!("{title}:");
    for (from, targets) in graph {
        let list: Vec<&str> = targets.iter().map(String::as_str).collect();
        println!("  {from} -> {}", list.join(" "));
    }
    let found = circles(graph);
    println!("{title}, circles: {}", found.len());
    for c in &found {
        println!("  {} files: {}", c.len(), c.join(" "));
    }
}

/// The diagram of the fenced `text` block that follows the line starting
/// with `intro` in `doc`: each line's leading names (`mcp/`, `run.rs`),
/// top line first. `prefix` is what each line starts with (`//! ` in a doc
/// comment).
fn diagram(doc: &str, intro: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut lines = doc
        .lines()
        .map(|l| l.strip_prefix(prefix.trim_end()).unwrap_or(l).trim_start());
    lines.by_ref().find(|l| l.starts_with(intro));
    lines.by_ref().find(|l| l.starts_with("```text"));
    lines
        .take_while(|l| !l.starts_with("```"))
        .map(|l| {
            let names = l
                .split_whitespace()
                .take_while(|w| w.ends_with('/') || w.ends_with(".rs"));
            names.map(str::to_owned).collect()
        })
        .collect()
}

/// What is wrong with `graph` (top-level modules) against `layers`: a
/// module missing from the diagram or named there twice or in vain, and
/// each use of a module on the user's own line or above it.
fn violations(layers: &[Vec<String>], graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut line_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (n, line) in layers.iter().enumerate() {
        for name in line {
            if line_of.insert(name, n).is_some() {
                wrong.push(format!("{name} is on two lines of the layers"));
            }
        }
    }
    for name in line_of.keys() {
        if !graph.contains_key(*name) {
            wrong.push(format!(
                "the layers name {name}, which launcher/src does not have"
            ));
        }
    }
    for (from, targets) in graph {
        let Some(&own) = line_of.get(from.as_str()) else {
            wrong.push(format!(
                "{from} is on no line of the layers: add it where it belongs"
            ));
            continue;
        };
        for to in targets {
            match line_of.get(to.as_str()) {
                Some(&theirs) if theirs > own => {}
                Some(&theirs) => wrong.push(format!(
                    "{from} uses {to}, which is {} in the layers: move what it uses down, or \
                     the user up",
                    if theirs == own {
                        "on its own line"
                    } else {
                        "above it"
                    }
                )),
                None => {}
            }
        }
    }
    wrong
}

/// The top-level modules' graph, with each edge named by the files behind it.
fn folder_edges(
    files: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<(String, String), Vec<String>> {
    let mut edges: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (from, targets) in files {
        for to in targets.iter().filter(|t| top(t) != top(from)) {
            edges
                .entry((top(from), top(to)))
                .or_default()
                .push(format!("{from} -> {to}"));
        }
    }
    edges
}

fn main_rs_layers() -> Vec<Vec<String>> {
    let main = fs::read_to_string(src_dir().join("main.rs")).expect("main.rs is readable");
    diagram(&main, "The layers, top to bottom", "//! ")
}

/// The launcher's modules use only the modules below their own line of
/// main.rs's layers: no use sideways or up, so no circle across folders.
#[test]
fn every_module_looks_only_down() {
    let layers = main_rs_layers();
    assert!(
        layers.len() > 3,
        "main.rs has no layers diagram: {layers:?}"
    );
    let files = file_graph(&files());
    let edges = folder_edges(&files);
    let wrong: Vec<String> = violations(&layers, &folder_graph(&files))
        .into_iter()
        .map(|line| {
            let behind = edges
                .iter()
                .find(|((f, t), _)| line.starts_with(&format!("{f} uses {t},")));
            match behind {
                Some((_, why)) => format!("{line} ({})", why.join(", ")),
                None => line,
            }
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "the launcher's layers are broken:\n{}",
        wrong.join("\n")
    );
    assert!(circles(&folder_graph(&files)).is_empty());
}

/// CONTRIBUTING.md's layout map shows main.rs's layers, line for line.
#[test]
fn contributing_shows_the_same_layers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../CONTRIBUTING.md");
    let contributing = fs::read_to_string(path).expect("CONTRIBUTING.md is readable");
    let main = fs::read_to_string(src_dir().join("main.rs")).expect("main.rs is readable");
    let block = |doc: &str, intro: &str, prefix: &str| -> Vec<String> {
        let mut lines = doc
            .lines()
            .map(|l| l.strip_prefix(prefix).unwrap_or(l).trim_end().to_owned());
        lines.by_ref().find(|l| l.trim_start().starts_with(intro));
        lines.by_ref().find(|l| l.starts_with("```text"));
        lines.take_while(|l| !l.starts_with("```")).collect()
    };
    let ours = block(&contributing, "### The launcher's layers", "");
    let theirs = block(&main, "The layers, top to bottom", "//! ");
    assert!(!theirs.is_empty(), "main.rs has no layers diagram");
    assert_eq!(
        ours, theirs,
        "CONTRIBUTING.md's layers are not main.rs's: copy them"
    );
}

/// The files that read the process's environment themselves, each for a
/// fact of the host rather than a setting: everything else is handed to
/// the layers by main.
const READS_THE_HOST: [(&str, &str); 2] = [
    ("probe.rs", "HOME: whose home a jail's passwd must not name"),
    ("wrapper/delegation.rs", "PATH: where systemd's busctl is"),
];

/// Only main reads the flags and the environment: config.rs parses what
/// main hands it, and the layers get typed values (but for the host facts
/// of [`READS_THE_HOST`]).
#[test]
fn only_main_reads_the_configuration() {
    let mut wrong = Vec::new();
    for f in files() {
        let reads_env = ["std::env::var(", "std::env::var_os(", "std::env::vars("]
            .iter()
            .any(|call| f.code.contains(call));
        let reads_args = f.code.contains("std::env::args");
        let parses = f.code.contains("config::parse(");
        if f.rel == "main.rs" {
            continue;
        }
        if reads_args || parses {
            wrong.push(format!("{} reads the flags: only main.rs does", f.rel));
        }
        if reads_env && !READS_THE_HOST.iter().any(|(file, _)| *file == f.rel) {
            wrong.push(format!(
                "{} reads the process's environment: take the value from main instead",
                f.rel
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_use_up_or_sideways_is_named() {
    let layers: Vec<Vec<String>> = vec![
        vec!["a/".into()],
        vec!["b.rs".into(), "c/".into()],
        vec!["d.rs".into()],
    ];
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a/".into(), ["b.rs".into(), "d.rs".into()].into());
    graph.insert("b.rs".into(), ["c/".into()].into());
    graph.insert("c/".into(), BTreeSet::new());
    graph.insert("d.rs".into(), ["a/".into()].into());
    graph.insert("e.rs".into(), BTreeSet::new());
    let wrong = violations(&layers, &graph);
    assert_eq!(wrong.len(), 3, "{wrong:?}");
    assert!(wrong[0].starts_with("b.rs uses c/, which is on its own line"));
    assert!(wrong[1].starts_with("d.rs uses a/, which is above it"));
    assert!(wrong[2].starts_with("e.rs is on no line"));
    graph.remove("d.rs");
    assert!(
        violations(&layers, &graph)
            .iter()
            .any(|w| w.contains("does not have"))
    );
}

#[test]
fn the_diagram_is_read_from_a_doc_comment() {
    let doc = "//! Intro.\n//! The layers, top to bottom: below.\n//!\n//! ```text\n//! main.rs          wiring\n//! a/ b.rs          two\n//! ```\n//! after/ not read";
    let got = diagram(doc, "The layers, top to bottom", "//! ");
    assert_eq!(
        got,
        [
            vec!["main.rs".to_owned()],
            vec!["a/".to_owned(), "b.rs".to_owned()]
        ]
    );
}

/// Prints the graphs when LAYER_GRAPH is set (scripts/layer-graph).
#[test]
fn graph() {
    if std::env::var_os("LAYER_GRAPH").is_none() {
        return;
    }
    let files = file_graph(&files());
    print_graph("files", &files);
    print_graph("folders", &folder_graph(&files));
}

#[test]
fn strip_leaves_code_only() {
    let src = "let a = \"crate::x { \"; // crate::y\n/* crate::z /* { */ */ let c = '{'; 'a: loop {}\nlet r = r#\"crate::w\"#; crate::v::f();";
    let code = strip(src);
    assert!(!code.contains("crate::x") && !code.contains("crate::y"));
    assert!(!code.contains("crate::z") && !code.contains("crate::w"));
    assert!(code.contains("crate::v::f()"));
    assert!(code.contains("'a: loop {}"));
    assert_eq!(code.matches('{').count(), code.matches('}').count());
}

#[test]
fn test_items_are_left_out() {
    let code = "use crate::a;\n#[cfg(test)]\n#[path = \"x_tests.rs\"]\nmod tests;\n#[cfg(test)]\nmod testing;\n#[cfg(test)]\nmod inline { use crate::b; fn f() { g(); } }\nuse crate::c;";
    let (kept, mods) = without_tests(code);
    assert!(kept.contains("crate::a") && kept.contains("crate::c"));
    assert!(!kept.contains("crate::b"));
    assert_eq!(mods, ["tests", "testing"]);
}

#[test]
fn paths_read_groups_and_super() {
    let here: ModPath = vec!["wrapper".into(), "probe".into()];
    let code = "use crate::{run::{self, Spec}, catalog::Env};\nuse super::super::egress::Gate;\nlet x = crate::lifetime::spawn(c);";
    let got: BTreeSet<String> = paths(code, &here, &[])
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "run",
        "run::Spec",
        "catalog::Env",
        "egress::Gate",
        "lifetime::spawn",
    ]
    .map(String::from)
    .into();
    assert_eq!(got, want);
    let in_mod_rs: ModPath = vec!["wrapper".into()];
    let got: Vec<ModPath> = paths("use super::cgroup::X;", &in_mod_rs, &[]);
    assert_eq!(got, [vec!["cgroup".to_owned(), "X".to_owned()]]);
    let children = ["host".to_owned()];
    let got: Vec<ModPath> = paths(
        "mod host;\nlet h = host::Host::detect(); x::host::y();",
        &in_mod_rs,
        &children,
    );
    assert_eq!(
        got,
        [vec![
            "wrapper".to_owned(),
            "host".into(),
            "Host".into(),
            "detect".into()
        ]]
    );
}

#[test]
fn circles_are_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".into()].into());
    g.insert("b".into(), ["c".into()].into());
    g.insert("c".into(), ["a".into(), "d".into()].into());
    g.insert("d".into(), BTreeSet::new());
    assert_eq!(circles(&g), [vec!["a".to_owned(), "b".into(), "c".into()]]);
}
