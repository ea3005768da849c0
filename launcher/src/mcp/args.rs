//! The arguments of `run`, read with serde: `code` (required), `env`,
//! `session`, `files`, files written into `/workspace` before the code runs
//! (each `{path, content}` or `{path, base64}`, with `replace: true` to
//! overwrite a file there), and `packages`, nixpkgs attribute names added to
//! the environment (packages/mod.rs) (the session agent checks their paths again and
//! writes them without following symbolic links: `proto::files`), and
//! `timeout_s`, the seconds the call may take (cut to the environment's
//! ceiling in mcp/mod.rs). Any other argument is refused by name.
//!
//! Serde finds the faults; what the model is told about each is written
//! here, in the words of `invalid_arguments`, `bad_file_path` and
//! `files_too_large`. serde_json's own errors are sentences about JSON
//! (`invalid type: integer 42, expected a string`), so the arguments are
//! read through a deserializer of this module's whose error type records
//! the kind of fault ([`Fault`]); the field comes from the fault's path.
//! When arguments have several faults, the first told is the first in the
//! order: unknown arguments, `code`, `env`, `session`, `files`, `packages`,
//! `publish`, `timeout_s`.

use std::fmt;

use proto::files::{self, MAX_FILES, Upload};
use rmcp::model::JsonObject;
use serde::Deserialize;
use serde::de::{self, IntoDeserializer, Visitor};
use serde_json::Value;
use serde_path_to_error::Segment;

use crate::report::refusal::Refusal;
use crate::session::Origin;

/// The arguments of `run`, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct RunArgs {
    pub code: String,
    pub env: Option<String>,
    pub session: Option<String>,
    pub files: Vec<Upload>,
    /// nixpkgs attribute names to add to the environment (checked later,
    /// against the environment's policy: catalog/names.rs).
    pub packages: Option<Vec<String>>,
    /// A port of the session's jail to publish to the host (checked
    /// later, against the environment's `publish`).
    pub publish: Option<u16>,
    /// The seconds the call may take, when asked: a whole number, at
    /// least 1 (not yet cut to the environment's ceiling).
    pub timeout_s: Option<u64>,
    /// The checkpoint a new session starts from (`NAME` or `NAME@N`).
    pub from: Option<Origin>,
    /// End the session after this call.
    pub end: bool,
    /// The profile a person's new session is made under (`sandbox
    /// create --profile`); never from a model's arguments.
    pub profile: Option<std::sync::Arc<crate::catalog::Profile>>,
}

/// The arguments as given: what serde checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Given {
    code: String,
    #[serde(default)]
    env: Option<String>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    files: Option<Vec<Value>>,
    #[serde(default)]
    packages: Option<Vec<String>>,
    #[serde(default)]
    publish: Option<u16>,
    timeout_s: Option<Value>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    end: Option<bool>,
}

/// One file as given: its bytes as text (`content`) or as base64.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GivenFile {
    path: String,
    content: Option<String>,
    base64: Option<String>,
    replace: Option<bool>,
}

/// The fields of [`Given`], in the order their faults are told; only `code`
/// is required.
const ARGUMENTS: [(&str, bool); 9] = [
    ("code", true),
    ("env", false),
    ("session", false),
    ("files", false),
    ("packages", false),
    ("publish", false),
    ("timeout_s", false),
    ("from", false),
    ("end", false),
];

/// The fields of [`GivenFile`]: `path` is required, and one of `content`
/// and `base64`.
const FILE_FIELDS: [(&str, bool); 4] = [
    ("path", true),
    ("content", false),
    ("base64", false),
    ("replace", false),
];

impl RunArgs {
    /// Reads `arguments` (none counts as `{}`), taking them: their strings
    /// become the call's, not copies. The files together may hold at most
    /// `max_files_bytes`.
    pub fn parse(arguments: Option<JsonObject>, max_files_bytes: usize) -> Result<Self, Refusal> {
        let given: Given =
            read(arguments.unwrap_or_default(), &ARGUMENTS).map_err(|(fault, field)| {
                match (fault, field.as_deref()) {
                    (Fault::UnknownField(key), _) => invalid(&format!("unknown argument `{key}`")),
                    (Fault::MissingField(field), _) => invalid(&format!("`{field}` is missing")),
                    (_, Some("files")) => invalid("`files` must be a list"),
                    (_, Some("packages")) => invalid("`packages` must be a list of strings"),
                    (_, Some("publish")) => invalid("`publish` must be a port number (1 to 65535)"),
                    (_, Some("end")) => invalid("`end` must be true or false"),
                    (_, Some(field)) => invalid(&format!("`{field}` must be a string")),
                    (Fault::Other(problem), None) => invalid(&problem),
                    (Fault::WrongType, None) => invalid("the arguments must be an object"),
                }
            })?;
        Ok(Self {
            code: given.code,
            env: given.env,
            session: given.session,
            files: files(given.files.unwrap_or_default(), max_files_bytes)?,
            packages: given.packages,
            publish: given.publish,
            timeout_s: given.timeout_s.as_ref().map(seconds).transpose()?,
            from: given.from.as_deref().map(origin).transpose()?,
            end: given.end.unwrap_or(false),
            profile: None,
        })
    }
}

/// `from` as given: `NAME` or `NAME@N`.
fn origin(given: &str) -> Result<Origin, Refusal> {
    Origin::parse(given).ok_or_else(|| {
        invalid(&format!(
            "`from` must be a session name, or a name and a call number as `work@3` (got {given:?})"
        ))
    })
}

/// `timeout_s` as given: a whole number of seconds, at least 1. A number
/// written with a fraction of zero (`60.0`, as some models' clients send
/// integers) counts as the whole number.
fn seconds(given: &Value) -> Result<u64, Refusal> {
    let whole = match given {
        Value::Number(n) => n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f >= 0.0 && f < u64::MAX as f64).then_some(f as u64)
        }),
        _ => None,
    };
    match whole {
        Some(secs) if secs >= 1 => Ok(secs),
        _ => Err(invalid(&format!(
            "`timeout_s` must be a whole number of seconds, at least 1 (got {given})"
        ))),
    }
}

/// The files of the `files` argument, checked: at most [`MAX_FILES`] and
/// `max_bytes` in all (counted before base64 is decoded, so that no more
/// is decoded), each a relative path inside /workspace, given once, its
/// bytes given once, as text or as base64.
fn files(list: Vec<Value>, max_bytes: usize) -> Result<Vec<Upload>, Refusal> {
    if list.len() > MAX_FILES {
        return Err(Refusal::files_too_large(&format!(
            "{} files were passed, more than {MAX_FILES}",
            list.len()
        )));
    }
    let mut files: Vec<Upload> = Vec::with_capacity(list.len());
    let mut total = 0usize;
    for item in list {
        let Value::Object(fields) = item else {
            return Err(invalid(
                "each file must be an object {\"path\", \"content\"} or {\"path\", \"base64\"}",
            ));
        };
        let given: GivenFile = read(fields, &FILE_FIELDS).map_err(|(fault, field)| {
            match (fault, field.as_deref()) {
                (Fault::UnknownField(key), _) => invalid(&format!(
                    "unknown file field `{key}` (a file has `path`, `content` or `base64`, \
                     and `replace`)"
                )),
                (_, Some("replace")) => invalid("a file's `replace` must be true or false"),
                _ => invalid("each file needs `path` and `content` or `base64`, all strings"),
            }
        })?;
        let path = given.path;
        if let Err(why) = files::check_path(&path) {
            return Err(Refusal::bad_file_path(&path, &why.to_string()));
        }
        if files.iter().any(|f| f.path == path) {
            return Err(Refusal::bad_file_path(&path, "it is given twice"));
        }
        let shown = files::visible(&path);
        let content = match (given.content, given.base64) {
            (Some(text), None) => {
                total = total.saturating_add(text.len());
                bound(total, max_bytes)?;
                text.into_bytes()
            }
            (None, Some(encoded)) => {
                // At least this many bytes, whatever the padding.
                let least = (encoded.len() / 4 * 3).saturating_sub(2);
                bound(total.saturating_add(least), max_bytes)?;
                let bytes = proto::frame::decode_data(encoded.trim()).map_err(|e| {
                    let e = match e {
                        proto::frame::FrameError::Base64(e) => e,
                        e => e.to_string(),
                    };
                    invalid(&format!(
                        "file `{shown}`: `base64` is not valid base64 ({e}); give the standard \
                         alphabet with padding, or the text as `content`"
                    ))
                })?;
                total = total.saturating_add(bytes.len());
                bound(total, max_bytes)?;
                bytes
            }
            (Some(_), Some(_)) => {
                return Err(invalid(&format!(
                    "file `{shown}` has both `content` and `base64`; give one"
                )));
            }
            (None, None) => {
                return Err(invalid(&format!(
                    "file `{shown}` has neither `content` nor `base64`; give one"
                )));
            }
        };
        let replace = given.replace.unwrap_or(false);
        files.push(Upload {
            path,
            content,
            replace,
        });
    }
    bound(total, max_bytes)?;
    Ok(files)
}

/// Refuses files of `total` bytes over `max` in all.
fn bound(total: usize, max: usize) -> Result<(), Refusal> {
    match total > max {
        true => Err(Refusal::files_too_large(&format!(
            "the files hold {total} bytes or more, more than this server's bound of {} MiB \
             ({})",
            max >> 20,
            crate::settings::FILES_MB.var_name()
        ))),
        false => Ok(()),
    }
}

fn invalid(problem: &str) -> Refusal {
    Refusal::invalid_arguments(problem)
}

/// Deserializes `map` as `T` whose fields are `fields` (name, required),
/// visiting unknown keys first, then the fields in order, so that the first
/// fault found is the first in that order: a required field that is absent
/// fails in its turn. The error is the fault and the field it is in.
fn read<T: de::DeserializeOwned>(
    map: JsonObject,
    fields: &[(&'static str, bool)],
) -> Result<T, (Fault, Option<String>)> {
    let mut map = map;
    let mut entries: Vec<(String, Arg)> = Vec::with_capacity(map.len() + fields.len());
    let unknown: Vec<String> = map
        .keys()
        .filter(|k| !fields.iter().any(|(f, _)| f == k))
        .cloned()
        .collect();
    for key in unknown {
        let value = map.remove(&key).unwrap_or_default();
        entries.push((key, Arg::Given(value)));
    }
    for &(field, required) in fields {
        match map.remove(field) {
            Some(value) => entries.push((field.to_owned(), Arg::Given(value))),
            None if required => entries.push((field.to_owned(), Arg::Absent(field))),
            None => {}
        }
    }
    let deserializer = de::value::MapDeserializer::new(entries.into_iter());
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = match e.path().iter().next() {
            Some(Segment::Map { key }) => Some(key.clone()),
            _ => None,
        };
        (e.into_inner(), field)
    })
}

/// What is wrong with an argument, as serde tells it.
#[derive(Debug)]
enum Fault {
    UnknownField(String),
    MissingField(&'static str),
    /// A value of another JSON type than the field takes.
    WrongType,
    Other(String),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::UnknownField(key) => write!(f, "unknown field `{key}`"),
            Fault::MissingField(field) => write!(f, "missing field `{field}`"),
            Fault::WrongType => f.write_str("wrong type"),
            Fault::Other(problem) => f.write_str(problem),
        }
    }
}

impl std::error::Error for Fault {}

impl de::Error for Fault {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Fault::Other(msg.to_string())
    }

    fn invalid_type(_: de::Unexpected<'_>, _: &dyn de::Expected) -> Self {
        Fault::WrongType
    }

    fn invalid_value(_: de::Unexpected<'_>, _: &dyn de::Expected) -> Self {
        Fault::WrongType
    }

    fn invalid_length(_: usize, _: &dyn de::Expected) -> Self {
        Fault::WrongType
    }

    fn unknown_field(field: &str, _: &'static [&'static str]) -> Self {
        Fault::UnknownField(field.to_owned())
    }

    fn missing_field(field: &'static str) -> Self {
        Fault::MissingField(field)
    }
}

/// A JSON value as an argument (deserialized with [`Fault`]s), or a
/// required field that was not given.
enum Arg {
    Given(Value),
    Absent(&'static str),
}

impl<'de> IntoDeserializer<'de, Fault> for Arg {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for Arg {
    type Error = Fault;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fault> {
        let value = match self {
            Arg::Given(value) => value,
            Arg::Absent(field) => return Err(Fault::MissingField(field)),
        };
        match value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (_, Some(i), _) => visitor.visit_i64(i),
                (_, _, f) => visitor.visit_f64(f.unwrap_or(f64::NAN)),
            },
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => {
                let mut seq = de::value::SeqDeserializer::new(items.into_iter().map(Arg::Given));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(map) => {
                let entries = map.into_iter().map(|(k, v)| (k, Arg::Given(v)));
                let mut map = de::value::MapDeserializer::new(entries);
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fault> {
        match self {
            Arg::Given(Value::Null) => visitor.visit_none(),
            other => visitor.visit_some(other),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple tuple_struct
        map struct enum identifier ignored_any
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
