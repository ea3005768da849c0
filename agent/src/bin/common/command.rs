//! What jail-budget uses to run: a command line of flags, `--`,
//! then the program to exec; a limit lowered and read back; and the exec
//! itself, which returns only when the program cannot run.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// `argv` split at its first `--`: the flags before it, then the program
/// and its arguments after it.
pub fn split(argv: &[OsString]) -> Result<(&[OsString], OsString, Vec<OsString>), String> {
    let at = argv
        .iter()
        .position(|a| a == "--")
        .ok_or("no `--` before the program")?;
    let (flags, rest) = argv.split_at(at);
    let mut command = rest[1..].iter().cloned();
    let program = command.next().ok_or("no program after `--`")?;
    Ok((flags, program, command.collect()))
}

/// Sets both limits of `resource` to `value`, or to the hard limit when
/// that is already lower (raising it may be refused), and reads them back.
pub fn lower_rlimit(resource: Resource, value: u64) -> Result<(), String> {
    let (_, hard) = getrlimit(resource).map_err(|e| format!("cannot read {resource:?}: {e}"))?;
    let limit = value.min(hard);
    setrlimit(resource, limit, limit).map_err(|e| format!("cannot set {resource:?}: {e}"))?;
    match getrlimit(resource) {
        Ok((soft, hard)) if soft <= value && hard <= value => Ok(()),
        Ok((soft, hard)) => Err(format!("{resource:?} is {soft}/{hard}, not {value}")),
        Err(e) => Err(format!("cannot read {resource:?}: {e}")),
    }
}

/// Execs `command` in this process' place; when it cannot run, says so in
/// one line as `who` and returns status 127.
pub fn exec(who: &str, mut command: std::process::Command) -> ExitCode {
    let e = command.exec();
    eprintln!(
        "{who}: cannot run {}: {e}",
        command.get_program().to_string_lossy()
    );
    ExitCode::from(127)
}

/// Test helper: the `OsString`s of `list`.
#[cfg(test)]
pub fn os_args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}
