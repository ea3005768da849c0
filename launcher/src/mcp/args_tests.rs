//! Tests of the arguments of `run`: what is read, and the one sentence each
//! fault gets, in the order faults are told.

use super::*;
use serde_json::json;

/// The bound on files' bytes the tests give.
const MAX_BYTES: usize = 1 << 20;

/// The `files` of a call (`None`: the argument is absent).
fn parse(files: Option<&Value>) -> Result<Vec<Upload>, Refusal> {
    let mut arguments = json!({"code": "1"});
    if let Some(files) = files {
        arguments["files"] = files.clone();
    }
    RunArgs::parse(arguments.as_object().cloned(), MAX_BYTES).map(|args| args.files)
}

fn code_of(value: Value) -> String {
    parse(Some(&value)).unwrap_err().code.as_str().to_owned()
}

#[test]
fn files_are_read_in_order() {
    let files = parse(Some(&json!([
        {"path": "data.csv", "content": "a,b\n"},
        {"path": "in/x.txt", "content": ""},
    ])))
    .unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(
        (files[1].path.as_str(), files[1].content.as_slice()),
        ("in/x.txt", b"".as_slice())
    );
    assert!(!files[0].replace);
    assert!(parse(None).unwrap().is_empty());
    assert!(parse(Some(&Value::Null)).unwrap().is_empty());
}

#[test]
fn bad_paths_are_refused_by_name() {
    for path in ["../x", "/etc/passwd", "a//b", "", "a/./b", "x/.."] {
        let e = parse(Some(&json!([{"path": path, "content": "x"}]))).unwrap_err();
        assert_eq!(e.code.as_str(), "bad_file_path", "{path}");
        assert!(e.message.contains("nothing was run"), "{e}");
    }
    let twice = json!([{"path": "a", "content": ""}, {"path": "a", "content": ""}]);
    assert!(
        parse(Some(&twice))
            .unwrap_err()
            .message
            .contains("given twice")
    );
}

#[test]
fn caps_and_shapes_are_checked() {
    let many: Vec<Value> = (0..=MAX_FILES)
        .map(|i| json!({"path": format!("f{i}"), "content": ""}))
        .collect();
    assert_eq!(code_of(Value::Array(many)), "files_too_large");
    let big = "x".repeat(MAX_BYTES / 2 + 1);
    let e = parse(Some(
        &json!([{"path": "a", "content": big}, {"path": "b", "content": big}]),
    ))
    .unwrap_err();
    assert_eq!(e.code.as_str(), "files_too_large");
    assert!(
        e.message
            .contains("more than this server's bound of 1 MiB (NIX_SANDBOX_FILES_MB)"),
        "{e}"
    );
    // Base64 is bounded by what it decodes to, before it is decoded.
    let ok = proto::frame::encode_data(&vec![7u8; MAX_BYTES]);
    assert_eq!(
        parse(Some(&json!([{"path": "a", "base64": ok}]))).unwrap()[0]
            .content
            .len(),
        MAX_BYTES
    );
    let over = proto::frame::encode_data(&vec![7u8; MAX_BYTES + 1]);
    assert_eq!(
        code_of(json!([{"path": "a", "base64": over}])),
        "files_too_large"
    );
    for bad in [
        json!("a.csv"),
        json!([["a", "b"]]),
        json!([{"path": "a"}]),
        json!([{"path": "a", "content": 3}]),
        json!([{"path": "a", "content": "", "mode": 7}]),
        json!([{"path": "a", "content": "", "base64": ""}]),
        json!([{"path": "a", "base64": "not base64!"}]),
        json!([{"path": "a", "content": "", "replace": "yes"}]),
    ] {
        assert_eq!(code_of(bad.clone()), "invalid_arguments", "{bad}");
    }
}

/// Binary files come as base64, and `replace` is read per file; each
/// fault is one sentence naming the file and the fix.
#[test]
fn base64_and_replace_are_read_per_file() {
    let every: Vec<u8> = (0..=255).collect();
    let files = parse(Some(&json!([
        {"path": "b.bin", "base64": proto::frame::encode_data(&every), "replace": true},
        {"path": "t.txt", "content": "é", "replace": null},
    ])))
    .unwrap();
    assert_eq!(files[0].content, every);
    assert!(files[0].replace);
    assert_eq!(files[1].content, "é".as_bytes());
    assert!(!files[1].replace);
    let sentence = |files: Value| parse(Some(&files)).unwrap_err().message;
    assert!(
        sentence(json!([{"path": "x.bin", "base64": "abc$"}])).starts_with(
            "file `x.bin`: `base64` is not valid base64 (Invalid symbol 36, offset 3.); give \
             the standard alphabet with padding, or the text as `content`; `run` takes"
        )
    );
    assert!(
        sentence(json!([{"path": "x", "content": "a", "base64": "YQ=="}]))
            .contains("file `x` has both `content` and `base64`; give one"),
    );
    assert!(sentence(json!([{"path": "x"}])).contains("file `x` has neither"));
    assert!(
        sentence(json!([{"path": "x", "content": "", "bytes": ""}]))
            .contains("unknown file field `bytes`")
    );
}

#[test]
fn files_are_an_argument() {
    let args = RunArgs::parse(
        json!({"code": "1", "files": [{"path": "a.csv", "content": "x"}]})
            .as_object()
            .cloned(),
        MAX_BYTES,
    )
    .unwrap();
    assert_eq!(args.files.len(), 1);
    let e = RunArgs::parse(
        json!({"code": "1", "files": [{"path": "../a", "content": "x"}]})
            .as_object()
            .cloned(),
        MAX_BYTES,
    )
    .unwrap_err();
    assert_eq!(e.code.as_str(), "bad_file_path");
}

#[test]
fn arguments_are_checked() {
    let parse = |v: Value| RunArgs::parse(v.as_object().cloned(), MAX_BYTES);
    assert_eq!(
        parse(json!({"code": "1", "env": "node"})).unwrap(),
        RunArgs {
            code: "1".into(),
            env: Some("node".into()),
            session: None,
            files: Vec::new(),
            packages: None,
            publish: None,
            timeout_s: None,
            from: None,
            end: false,
            profile: None,
        }
    );
    assert_eq!(parse(json!({"code": "1", "env": null})).unwrap().env, None);
    assert_eq!(
        parse(json!({"code": "1", "session": "s"})).unwrap().session,
        Some("s".into())
    );
    for bad in [
        json!({}),
        json!({"code": 1}),
        json!({"code": "1", "env": 2}),
        json!({"code": "1", "session": 3}),
        json!({"code": "1", "x": 1}),
    ] {
        let e = parse(bad.clone()).unwrap_err();
        assert_eq!(e.code.as_str(), "invalid_arguments", "{bad}");
    }
    assert_eq!(
        RunArgs::parse(None, MAX_BYTES).unwrap_err().code.as_str(),
        "invalid_arguments"
    );
}

/// Each fault in its own words, and with several, the first in the order
/// unknown arguments, `code`, `env`, `session`, `files` (then within a
/// file: unknown fields, then `path` and `content`).
#[test]
fn faults_are_told_in_their_words_and_in_order() {
    let problem = |v: Value| {
        let e = RunArgs::parse(v.as_object().cloned(), MAX_BYTES).unwrap_err();
        let problem = e.message.split(';').next().unwrap().to_owned();
        (e.code.as_str(), problem)
    };
    let invalid = |p: &str| ("invalid_arguments", p.to_owned());
    for (arguments, want) in [
        (json!({"x": 1}), invalid("unknown argument `x`")),
        (json!({"code": 1, "x": 1}), invalid("unknown argument `x`")),
        (json!({"env": 2}), invalid("`code` is missing")),
        (json!({"code": null}), invalid("`code` must be a string")),
        (
            json!({"code": 1, "env": 2}),
            invalid("`code` must be a string"),
        ),
        (
            json!({"code": "1", "env": 2, "session": 3}),
            invalid("`env` must be a string"),
        ),
        (
            json!({"code": "1", "session": 3, "files": 4}),
            invalid("`session` must be a string"),
        ),
        (
            json!({"code": "1", "files": {}}),
            invalid("`files` must be a list"),
        ),
        (
            json!({"code": "1", "files": [3]}),
            invalid(
                "each file must be an object {\"path\", \"content\"} or {\"path\", \"base64\"}",
            ),
        ),
        (
            json!({"code": "1", "files": [{"path": 1, "content": 2, "mode": 7}]}),
            invalid(
                "unknown file field `mode` (a file has `path`, `content` or `base64`, and \
                 `replace`)",
            ),
        ),
        (
            json!({"code": "1", "files": [{"content": "x"}]}),
            invalid("each file needs `path` and `content` or `base64`, all strings"),
        ),
    ] {
        assert_eq!(problem(arguments.clone()), want, "{arguments}");
    }
    // The number of files is told before what is wrong with one of them.
    let many: Vec<Value> = (0..=MAX_FILES).map(|_| json!(3)).collect();
    assert_eq!(
        problem(json!({"code": "1", "files": many})).0,
        "files_too_large"
    );
}

#[test]
fn packages_are_a_list_of_strings() {
    let given = json!({"code": "1", "packages": ["jq", "ripgrep"]});
    let args = RunArgs::parse(given.as_object().cloned(), MAX_BYTES).unwrap();
    assert_eq!(
        args.packages,
        Some(vec!["jq".to_owned(), "ripgrep".to_owned()])
    );
    for bad in [json!("jq"), json!(["jq", 1]), json!({"jq": true})] {
        let given = json!({"code": "1", "packages": bad});
        let refusal = RunArgs::parse(given.as_object().cloned(), MAX_BYTES).unwrap_err();
        assert!(
            refusal
                .message
                .starts_with("`packages` must be a list of strings"),
            "{refusal}"
        );
    }
}

/// `timeout_s` is a whole number of seconds from 1 up (`60.0` counts as
/// 60); anything else is refused in one sentence that says what it takes.
#[test]
fn timeout_is_a_whole_number_of_seconds() {
    let timeout = |v: Value| {
        let given = json!({"code": "1", "timeout_s": v});
        RunArgs::parse(given.as_object().cloned(), MAX_BYTES).map(|args| args.timeout_s)
    };
    assert_eq!(timeout(json!(120)).unwrap(), Some(120));
    assert_eq!(timeout(json!(60.0)).unwrap(), Some(60));
    assert_eq!(timeout(json!(1)).unwrap(), Some(1));
    assert_eq!(timeout(Value::Null).unwrap(), None);
    for bad in [
        json!(0),
        json!(-5),
        json!(1.5),
        json!("60"),
        json!([60]),
        json!(true),
    ] {
        let refusal = timeout(bad.clone()).unwrap_err();
        assert_eq!(refusal.code.as_str(), "invalid_arguments", "{bad}");
        assert!(
            refusal.message.starts_with(&format!(
                "`timeout_s` must be a whole number of seconds, at least 1 (got {bad})"
            )),
            "{refusal}"
        );
    }
}
