//! The `files` argument of `run` (issue 7): a few small text files written
//! into `/workspace` before the code runs. Checked here, before anything
//! runs; the session agent checks the paths again and writes the files
//! without following symbolic links (`proto::files`).

use proto::files::{self, MAX_FILES, MAX_FILES_BYTES};
use proto::frame::FileIn;
use serde_json::Value;

use crate::errors::RunError;

/// The files of `value` (the argument, `null` or absent meaning none).
pub fn parse(value: Option<&Value>) -> Result<Vec<FileIn>, RunError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(shape("`files` must be a list")),
    };
    if list.len() > MAX_FILES {
        return Err(RunError::files_too_large(&format!(
            "{} files were passed, more than {MAX_FILES}",
            list.len()
        )));
    }
    let mut files = Vec::with_capacity(list.len());
    let mut total = 0usize;
    for item in list {
        let Value::Object(fields) = item else {
            return Err(shape("each file must be an object {\"path\", \"content\"}"));
        };
        if let Some(key) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "path" | "content"))
        {
            return Err(shape(&format!("unknown file field `{key}`")));
        }
        let (Some(Value::String(path)), Some(Value::String(content))) =
            (fields.get("path"), fields.get("content"))
        else {
            return Err(shape("each file needs `path` and `content`, both strings"));
        };
        if let Err(why) = files::check_path(path) {
            return Err(RunError::bad_file_path(path, &why.to_string()));
        }
        if files.iter().any(|f: &FileIn| &f.path == path) {
            return Err(RunError::bad_file_path(path, "it is given twice"));
        }
        total += content.len();
        files.push(FileIn {
            path: path.clone(),
            content: content.clone(),
        });
    }
    if total > MAX_FILES_BYTES {
        return Err(RunError::files_too_large(&format!(
            "the files hold {total} bytes, more than {MAX_FILES_BYTES} in all"
        )));
    }
    Ok(files)
}

fn shape(problem: &str) -> RunError {
    RunError::invalid_arguments(problem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            (files[1].path.as_str(), files[1].content.as_str()),
            ("in/x.txt", "")
        );
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
        let big = "x".repeat(MAX_FILES_BYTES / 2 + 1);
        assert_eq!(
            code_of(json!([{"path": "a", "content": big}, {"path": "b", "content": big}])),
            "files_too_large"
        );
        for bad in [
            json!("a.csv"),
            json!([["a", "b"]]),
            json!([{"path": "a"}]),
            json!([{"path": "a", "content": 3}]),
            json!([{"path": "a", "content": "", "mode": 7}]),
        ] {
            assert_eq!(code_of(bad.clone()), "invalid_arguments", "{bad}");
        }
    }
}
