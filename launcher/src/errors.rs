//! Errors a `run` call can get before any code runs: a machine-readable code
//! and a sentence the model can act on.

use std::fmt;

/// The machine-readable error codes of the `run` tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    UnknownEnv,
    EmptyCode,
    CodeTooLarge,
    WrapperMissing,
    SandboxUnavailable,
    InvalidArguments,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnknownEnv => "unknown_env",
            ErrorCode::EmptyCode => "empty_code",
            ErrorCode::CodeTooLarge => "code_too_large",
            ErrorCode::WrapperMissing => "wrapper_missing",
            ErrorCode::SandboxUnavailable => "sandbox_unavailable",
            ErrorCode::InvalidArguments => "invalid_arguments",
        }
    }
}

/// A refused call: nothing was run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    pub code: ErrorCode,
    pub message: String,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code.as_str(), self.message)
    }
}

impl RunError {
    fn new(code: ErrorCode, message: String) -> Self {
        Self { code, message }
    }

    /// `known` is sorted; `manifest_errors` are the start-up problems
    /// (`file: field: problem`), which explain why an environment is missing.
    pub fn unknown_env(name: &str, known: &[&str], manifest_errors: &[String]) -> Self {
        let mut msg = if known.is_empty() {
            format!("unknown environment `{name}`: this server has no usable environment.")
        } else {
            format!(
                "unknown environment `{name}`; use one of: {}.",
                known.join(", ")
            )
        };
        if !manifest_errors.is_empty() {
            msg.push_str(" Manifest errors at start-up: ");
            msg.push_str(&manifest_errors.join("; "));
            msg.push('.');
        }
        Self::new(ErrorCode::UnknownEnv, msg)
    }

    pub fn empty_code() -> Self {
        Self::new(
            ErrorCode::EmptyCode,
            "`code` is empty; pass the program text to run.".into(),
        )
    }

    pub fn code_too_large(len: usize, max: usize) -> Self {
        Self::new(
            ErrorCode::CodeTooLarge,
            format!(
                "`code` is {len} bytes, over the limit of {max} bytes; nothing was run. \
                 Send a shorter program, or split the work into several runs."
            ),
        )
    }

    pub fn wrapper_missing(env: &str, path: &str) -> Self {
        Self::new(
            ErrorCode::WrapperMissing,
            format!(
                "the wrapper of environment `{env}` ({path}) is missing or not executable; \
                 nothing was run. The server's manifest is stale: tell the user to rebuild \
                 it and restart the server, or use another environment."
            ),
        )
    }

    pub fn sandbox_unavailable(env: &str, reason: &str) -> Self {
        Self::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "the sandbox of environment `{env}` cannot start on this host, so nothing \
                 was run: {reason}. Tell the user; `nix-sandbox-mcp --check` shows details."
            ),
        )
    }

    pub fn invalid_arguments(problem: &str) -> Self {
        Self::new(
            ErrorCode::InvalidArguments,
            format!("{problem}; `run` takes `code` (string, required) and `env` (string)."),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_env_lists_known_envs_and_manifest_errors() {
        let e = RunError::unknown_env(
            "rust",
            &["node", "python"],
            &["/m.json: environments.x.limits.timeout_s: must be positive".into()],
        );
        assert_eq!(e.code, ErrorCode::UnknownEnv);
        let text = e.to_string();
        assert!(text.starts_with("error[unknown_env]: unknown environment `rust`"));
        assert!(text.contains("node, python"));
        assert!(text.contains("/m.json: environments.x.limits.timeout_s"));
    }

    #[test]
    fn no_env_at_all_says_so() {
        let e = RunError::unknown_env("python", &[], &[]);
        assert!(e.message.contains("no usable environment"));
    }
}
