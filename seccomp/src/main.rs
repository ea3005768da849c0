//! nix-sandbox-seccomp: writes the seccomp filter of a jail, a cBPF program
//! for bubblewrap's `--add-seccomp-fd` (jail.nix's `add-seccomp`). The policy
//! (which calls fail) comes from the flags, which Nix writes (lib/seccomp*.nix);
//! this program only knows call numbers and how to encode the filter.

mod bpf;
mod filter;
mod syscalls;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use filter::{AllowOnly, Policy, PolicyError, When, parse_errno};

const HELP: &str = "\
nix-sandbox-seccomp: write a seccomp cBPF filter (x86_64 and aarch64)

Usage: nix-sandbox-seccomp [RULE]... [--output FILE] [--dump]

Rules (each call named once; everything not named is allowed):
  --deny CALL[=ERRNO]        CALL fails with ERRNO (default EPERM)
  --deny-namespaces CALL     clone or unshare fails with EPERM when asked
                             for a new namespace (any CLONE_NEW* flag)
  --allow-only CALL=V[,V]...[:ERRNO]
                             CALL fails with ERRNO (default EPERM) unless its
                             first argument is one of the values (decimal or
                             0x hex)
  --allow-only-arg CALL=V:N=W[,W]...[:ERRNO]
                             when CALL's first argument is V (which its
                             --allow-only allows), its argument N (1-5) must
                             be one of the W, else CALL fails with ERRNO
                             (default EPERM)
Other architectures (i386 calls, for one) kill the process; x86_64's x32
calls fail with ENOSYS.

  --output FILE   write the program there instead of stdout
  --dump          write the program as assembly text instead
  --help          print this help
";

struct Options {
    policy: Policy,
    output: Option<OsString>,
    dump: bool,
}

fn main() -> ExitCode {
    let opts = match parse(std::env::args_os().skip(1)) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("nix-sandbox-seccomp: {e} (see --help)");
            return ExitCode::from(2);
        }
    };
    let program = match opts.policy.compile() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nix-sandbox-seccomp: {e}");
            return ExitCode::from(2);
        }
    };
    let bytes = if opts.dump {
        program
            .iter()
            .enumerate()
            .map(|(i, insn)| format!("{i:4}: {}\n", insn.disassemble()))
            .collect::<String>()
            .into_bytes()
    } else {
        bpf::to_bytes(&program)
    };
    let written = match &opts.output {
        Some(path) => std::fs::write(path, &bytes).map_err(|e| (path.clone(), e)),
        None => std::io::stdout()
            .lock()
            .write_all(&bytes)
            .map_err(|e| ("stdout".into(), e)),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err((path, e)) => {
            eprintln!("nix-sandbox-seccomp: cannot write {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}

/// The options, or `None` for `--help`.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Options>, String> {
    use lexopt::prelude::*;

    let mut opts = Options {
        policy: Policy::default(),
        output: None,
        dump: false,
    };
    let mut parser = lexopt::Parser::from_args(args);
    let fail = |e: lexopt::Error| e.to_string();
    let text = |v: OsString| v.into_string().map_err(|v| format!("not UTF-8: {v:?}"));
    let policy_error = |e: PolicyError| e.0;
    while let Some(arg) = parser.next().map_err(fail)? {
        match arg {
            Long("deny") => {
                let rule = text(parser.value().map_err(fail)?)?;
                let (name, errno) = match rule.split_once('=') {
                    Some((name, errno)) => (name, parse_errno(errno).map_err(policy_error)?),
                    None => (rule.as_str(), 1),
                };
                opts.policy.deny.push((name.to_owned(), errno));
            }
            Long("deny-namespaces") => {
                let name = text(parser.value().map_err(fail)?)?;
                opts.policy.deny_namespaces.push(name);
            }
            Long("allow-only") => {
                let rule = text(parser.value().map_err(fail)?)?;
                opts.policy.allow_only.push(allow_only(&rule)?);
            }
            Long("allow-only-arg") => {
                let rule = text(parser.value().map_err(fail)?)?;
                let (call, when) = allow_only_arg(&rule)?;
                opts.policy
                    .allow_only
                    .iter_mut()
                    .find(|r| r.call == call)
                    .ok_or_else(|| {
                        format!("--allow-only-arg {rule}: no --allow-only {call}=... before it")
                    })?
                    .when
                    .push(when);
            }
            Long("output") => opts.output = Some(parser.value().map_err(fail)?),
            Long("dump") => opts.dump = true,
            Long("help") | Short('h') => return Ok(None),
            other => return Err(fail(other.unexpected())),
        }
    }
    Ok(Some(opts))
}

/// `CALL=V[,V]...[:ERRNO]`.
fn allow_only(rule: &str) -> Result<AllowOnly, String> {
    let (call, rest) = rule
        .split_once('=')
        .ok_or_else(|| format!("--allow-only {rule}: expected CALL=V[,V]...[:ERRNO]"))?;
    let (values, errno) = values_and_errno(rest)?;
    Ok(AllowOnly {
        call: call.to_owned(),
        values,
        errno,
        when: Vec::new(),
    })
}

/// `CALL=V:N=W[,W]...[:ERRNO]`: the call's name and the check.
fn allow_only_arg(rule: &str) -> Result<(&str, When), String> {
    let bad = || format!("--allow-only-arg {rule}: expected CALL=V:N=W[,W]...[:ERRNO]");
    let (call, rest) = rule.split_once('=').ok_or_else(bad)?;
    let (value, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (arg, rest) = rest.split_once('=').ok_or_else(bad)?;
    let (values, errno) = values_and_errno(rest)?;
    let when = When {
        value: parse_value(value)?,
        arg: arg.parse().map_err(|_| bad())?,
        values,
        errno,
    };
    Ok((call, when))
}

/// `V[,V]...[:ERRNO]`, the errno EPERM when not given.
fn values_and_errno(text: &str) -> Result<(Vec<u32>, u16), String> {
    let (values, errno) = match text.split_once(':') {
        Some((values, errno)) => (values, parse_errno(errno).map_err(|e| e.0)?),
        None => (text, 1),
    };
    let values = values
        .split(',')
        .map(parse_value)
        .collect::<Result<Vec<u32>, String>>()?;
    Ok((values, errno))
}

/// A 32-bit value, decimal or `0x` hexadecimal.
fn parse_value(text: &str) -> Result<u32, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| format!("bad value `{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_make_the_policy() {
        let opts = parse(args(&[
            "--deny",
            "keyctl",
            "--deny=clone3=ENOSYS",
            "--deny-namespaces",
            "clone",
            "--allow-only",
            "personality=0,0x8,4294967295",
            "--allow-only=socket=1,2,16:EAFNOSUPPORT",
            "--allow-only-arg=socket=16:2=0:EPROTONOSUPPORT",
            "--dump",
        ]))
        .unwrap()
        .unwrap();
        assert!(opts.dump);
        assert_eq!(
            opts.policy,
            Policy {
                deny: vec![("keyctl".into(), 1), ("clone3".into(), 38)],
                deny_namespaces: vec!["clone".into()],
                allow_only: vec![
                    AllowOnly {
                        call: "personality".into(),
                        values: vec![0, 8, 0xffff_ffff],
                        errno: 1,
                        when: Vec::new(),
                    },
                    AllowOnly {
                        call: "socket".into(),
                        values: vec![1, 2, 16],
                        errno: 97,
                        when: vec![When {
                            value: 16,
                            arg: 2,
                            values: vec![0],
                            errno: 93,
                        }],
                    },
                ],
            }
        );
    }

    #[test]
    fn bad_flags_are_errors() {
        for bad in [
            &["--deny", "keyctl=EWHAT"][..],
            &["--allow-only", "personality"],
            &["--allow-only", "personality=x"],
            &["--allow-only", "socket=1:EWHAT"],
            &["--allow-only-arg", "socket=16:2=0"],
            &[
                "--allow-only=socket=16",
                "--allow-only-arg",
                "socket=16:x=0",
            ],
            &["--allow-only=socket=16", "--allow-only-arg", "socket=16"],
            &["--nope"],
            &["--deny"],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?}");
        }
        assert!(parse(args(&["--help"])).unwrap().is_none());
    }
}
