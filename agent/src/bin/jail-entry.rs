//! `jail-entry`: the first program a jail runs, inside bubblewrap. It sets
//! the jail's `RLIMIT_NPROC` and execs PROGRAM (the interpreter of a run,
//! the agent of a session) in its place.
//!
//!   jail-entry --nproc N -- PROGRAM [ARGS...]
//!
//! The limit is set here, inside the jail's user namespace, because there
//! the kernel counts the jail's own processes and threads only (per user
//! namespace and uid); set before bubblewrap, it would count every process
//! of the caller's uid on the host. Soft and hard limits both become N. A
//! hard limit already lower stays (raising it is refused: nothing in the
//! jail holds a capability), and the soft limit is set to it.
//!
//! It does what a shell at the jail's entry did (`ulimit -H -S -u N`,
//! then `exec`) at a tenth of its start-up cost, and it sets nothing else:
//! PROGRAM gets the environment bubblewrap gave, with no `SHLVL`, `PWD`
//! or `_` a shell adds. Bad arguments stop it with status 2, a PROGRAM
//! that cannot run with 127, each with one line on stderr.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use nix::sys::resource::{Resource, getrlimit, setrlimit};

const USAGE: &str = "usage: jail-entry --nproc N -- PROGRAM [ARGS...]";

/// The limit and the command to run under it.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    nproc: u64,
    program: OsString,
    args: Vec<OsString>,
}

fn parse(argv: Vec<OsString>) -> Result<Args, String> {
    use lexopt::prelude::*;
    let split = argv
        .iter()
        .position(|a| a == "--")
        .ok_or("no `--` before the program")?;
    let (flags, rest) = argv.split_at(split);
    let mut command = rest[1..].iter().cloned();
    let program = command.next().ok_or("no program after `--`")?;
    let mut nproc = None;
    let mut parser = lexopt::Parser::from_args(flags.iter().cloned());
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Long("nproc") => {
                let value: String = parser
                    .value()
                    .map_err(|e| e.to_string())?
                    .string()
                    .map_err(|e| e.to_string())?;
                nproc = Some(
                    value
                        .parse::<u64>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("--nproc {value} is not a number above 0"))?,
                );
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    Ok(Args {
        nproc: nproc.ok_or("no --nproc")?,
        program,
        args: command.collect(),
    })
}

/// Sets soft and hard `RLIMIT_NPROC` to `value`, or both to the hard limit
/// when that is already lower; reads them back.
fn limit_processes(value: u64) -> Result<(), String> {
    let resource = Resource::RLIMIT_NPROC;
    let (_, hard) = getrlimit(resource).map_err(|e| format!("cannot read RLIMIT_NPROC: {e}"))?;
    let limit = value.min(hard);
    setrlimit(resource, limit, limit).map_err(|e| format!("cannot set RLIMIT_NPROC: {e}"))?;
    match getrlimit(resource) {
        Ok((soft, hard)) if soft <= value && hard <= value => Ok(()),
        Ok((soft, hard)) => Err(format!("RLIMIT_NPROC is {soft}/{hard}, not {value}")),
        Err(e) => Err(format!("cannot read RLIMIT_NPROC: {e}")),
    }
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1).collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("jail-entry: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = limit_processes(args.nproc) {
        eprintln!("jail-entry: {e}; the jail does not start");
        return ExitCode::from(2);
    }
    let e = std::process::Command::new(&args.program)
        .args(&args.args)
        .exec();
    eprintln!(
        "jail-entry: cannot run {}: {e}",
        args.program.to_string_lossy()
    );
    ExitCode::from(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_limit_then_the_program_and_its_own_flags() {
        let parsed = parse(args(&[
            "--nproc", "32", "--", "/bin/py", "--nproc", "-", "--",
        ]))
        .unwrap();
        assert_eq!(
            parsed,
            Args {
                nproc: 32,
                program: "/bin/py".into(),
                args: args(&["--nproc", "-", "--"]),
            }
        );
        assert_eq!(parse(args(&["--nproc=7", "--", "x"])).unwrap().nproc, 7);
    }

    #[test]
    fn bad_arguments_are_refused() {
        for bad in [
            &["/bin/true"][..],
            &["--nproc", "32"],
            &["--nproc", "32", "--"],
            &["--", "x"],
            &["--nproc", "0", "--", "x"],
            &["--nproc", "-1", "--", "x"],
            &["--nproc", "many", "--", "x"],
            &["--nofile", "3", "--", "x"],
            &["extra", "--nproc", "3", "--", "x"],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?}");
        }
    }
}
