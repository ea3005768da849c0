//! jail-entry: the program it runs has RLIMIT_NPROC at the limit it was
//! given (or at a lower hard limit already there), the environment it was
//! given and nothing more; bad arguments and a program that cannot run
//! stop it with one line.

use std::process::{Command, Output};

const ENTRY: &str = env!("CARGO_BIN_EXE_jail-entry");

/// Prints the soft and the hard process limit, one a line.
const LIMITS: &str = "ulimit -S -u; ulimit -H -u";

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_program_runs_under_the_limit_soft_and_hard() {
    let out = run(Command::new(ENTRY).args(["--nproc", "7", "--", "/bin/bash", "-c", LIMITS]));
    assert_eq!(stdout(&out), "7\n7\n");
}

#[test]
fn a_lower_hard_limit_stays_and_the_soft_limit_follows_it() {
    // The shell lowers its own limits, then becomes jail-entry (no fork).
    let script = format!("ulimit -H -S -u 3 && exec {ENTRY} --nproc 32 -- /bin/bash -c '{LIMITS}'");
    let out = run(Command::new("/bin/bash").args(["-c", &script]));
    assert_eq!(stdout(&out), "3\n3\n");
}

#[test]
fn the_environment_is_passed_as_it_is() {
    let out = run(Command::new(ENTRY).env_clear().env("ONLY", "this").args([
        "--nproc",
        "4",
        "--",
        "/usr/bin/env",
    ]));
    assert_eq!(stdout(&out), "ONLY=this\n");
}

#[test]
fn a_program_that_cannot_run_is_one_line_and_127() {
    let out = run(Command::new(ENTRY).args(["--nproc", "4", "--", "/nonexistent/python3", "-"]));
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("jail-entry: cannot run /nonexistent/python3: ")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
}

#[test]
fn bad_arguments_stop_it_before_the_program() {
    let out = run(Command::new(ENTRY).args(["--nproc", "0", "--", "/bin/sh", "-c", "echo ran"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("jail-entry: --nproc 0 is not a number above 0\nusage: jail-entry"),
        "{stderr}"
    );
}
