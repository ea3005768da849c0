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
//! Before Linux 5.14 the kernel counts `RLIMIT_NPROC` against every
//! process of the jail's uid on the host, whatever its namespace: in a
//! jail whose uid is shared (a user's server, a service's dynamic user),
//! the server's threads and the other jails' processes would count, and
//! the jail's forks fail. There it leaves the limit as it is: a run's
//! cgroup (`pids.max`) bounds its processes where the server has one, and
//! `--check` says when nothing does.
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

/// Whether this kernel counts `RLIMIT_NPROC` per user namespace and uid
/// (Linux 5.14 and later). A release it cannot read counts as one that
/// does: the limit is then set.
fn counts_per_namespace() -> bool {
    nix::sys::utsname::uname().map_or(true, |name| {
        release_at_least(&name.release().to_string_lossy(), (5, 14))
    })
}

/// Whether a kernel release (`5.10.0-32-amd64`, `6.1.0`) is at least
/// `major.minor`; true when it does not start with two numbers.
fn release_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b) >= (major, minor),
        _ => true,
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
    if counts_per_namespace()
        && let Err(e) = command::lower_rlimit(Resource::RLIMIT_NPROC, args.nproc)
    {
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
    fn kernel_releases_compared() {
        for (release, at_least) in [
            ("5.14.0-427.el9.x86_64", true),
            ("6.1.0-50-amd64", true),
            ("5.15.0-91-generic", true),
            ("5.13.19", false),
            ("5.10.0-32-amd64", false),
            ("4.18.0-553.el8_10.x86_64", false),
            ("not-a-release", true),
        ] {
            assert_eq!(release_at_least(release, (5, 14)), at_least, "{release}");
        }
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
