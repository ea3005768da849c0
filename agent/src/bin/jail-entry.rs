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
//! then `exec`) for about half that shell's start-up cost, and it sets
//! nothing else: PROGRAM gets the environment bubblewrap gave, without
//! the `SHLVL` and `_` a shell adds. Bad arguments stop it with status 2, a PROGRAM
//! that cannot run with 127, each with one line on stderr.

use std::ffi::OsString;
use std::process::ExitCode;

use nix::sys::resource::Resource;

#[path = "common/command.rs"]
mod command;

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
    let (flags, program, args) = command::split(&argv)?;
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
        args,
    })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1).collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("jail-entry: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = command::lower_rlimit(Resource::RLIMIT_NPROC, args.nproc) {
        eprintln!("jail-entry: {e}; the jail does not start");
        return ExitCode::from(2);
    }
    let mut program = std::process::Command::new(&args.program);
    program.args(&args.args);
    command::exec("jail-entry", program)
}

#[cfg(test)]
mod tests {
    use super::*;
    use command::os_args as args;

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
