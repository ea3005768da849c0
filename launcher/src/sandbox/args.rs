//! The `sandbox` subcommand's command line (docs/cli.md):
//!
//!   nix-sandbox-mcp sandbox list [--json]
//!   nix-sandbox-mcp sandbox status [--json] ID
//!   nix-sandbox-mcp sandbox destroy ID
//!   nix-sandbox-mcp sandbox exec [--json] ID -- CMD [ARG]...
//!   nix-sandbox-mcp sandbox enter ID
//!   nix-sandbox-mcp sandbox create [--name NAME] [--with PKG]... [--profile NAME] [--server PID] ENV
//!   nix-sandbox-mcp sandbox profiles [--json] [--server PID]
//!
//! Its verbs and flags are declared once, in [`VERBS`] and [`FLAGS`], which
//! the parser and `--help` both read.

use std::ffi::OsString;

/// What the person asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verb {
    List,
    Status(String),
    Destroy(String),
    /// Run `argv` (after `--`) in session `id`.
    Exec {
        id: String,
        argv: Vec<String>,
    },
    /// An interactive shell in session `id`'s sandbox.
    Enter(String),
    /// Make a session of environment `env`.
    Create {
        env: String,
        name: Option<String>,
        with: Vec<String>,
        profile: Option<String>,
        server: Option<u32>,
    },
    /// The profiles `create` takes.
    Profiles {
        server: Option<u32>,
    },
    Help,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub verb: Verb,
    /// NDJSON on stdout instead of text.
    pub json: bool,
}

/// The values of the flags that take one, in order.
#[derive(Debug, Default)]
struct Values {
    name: Option<String>,
    with: Vec<String>,
    profile: Option<String>,
    server: Option<u32>,
}

/// A verb: its name, its operand (if it takes one) and what it does.
struct VerbSpec {
    name: &'static str,
    operand: Option<&'static str>,
    help: &'static str,
}

const VERBS: &[VerbSpec] = &[
    VerbSpec {
        name: "list",
        operand: None,
        help: "the open sessions of every server of yours",
    },
    VerbSpec {
        name: "status",
        operand: Some("ID"),
        help: "one session in detail",
    },
    VerbSpec {
        name: "destroy",
        operand: Some("ID"),
        help: "end a session (a call running in it is cancelled first)",
    },
    VerbSpec {
        name: "exec",
        operand: Some("ID -- CMD [ARG]..."),
        help: "run a command in a session's sandbox, its output streamed",
    },
    VerbSpec {
        name: "enter",
        operand: Some("ID"),
        help: "an interactive shell in a session's sandbox (needs a terminal)",
    },
    VerbSpec {
        name: "create",
        operand: Some("ENV"),
        help: "make a session of environment ENV; prints its ID",
    },
    VerbSpec {
        name: "profiles",
        operand: None,
        help: "the profiles create takes (--profile), with their settings",
    },
];

/// A flag: its name (without `--`), the verbs it goes with, what it does.
struct FlagSpec {
    name: &'static str,
    /// What it takes, if it takes a value.
    value: Option<&'static str>,
    verbs: &'static [&'static str],
    help: &'static str,
}

const FLAGS: &[FlagSpec] = &[
    FlagSpec {
        name: "json",
        value: None,
        verbs: &["list", "status", "exec", "profiles"],
        help: "one JSON object a line (NDJSON) instead of text",
    },
    FlagSpec {
        name: "name",
        value: Some("NAME"),
        verbs: &["create"],
        help: "the session's name (else one is made: cli-XXXXXXXX)",
    },
    FlagSpec {
        name: "with",
        value: Some("PKG"),
        verbs: &["create"],
        help: "add nixpkgs package PKG (repeatable), under the server's packages policy",
    },
    FlagSpec {
        name: "profile",
        value: Some("NAME"),
        verbs: &["create"],
        help: "make it under profile NAME (only tightens: `profiles` lists them)",
    },
    FlagSpec {
        name: "server",
        value: Some("PID"),
        verbs: &["create", "profiles"],
        help: "the server to make it on, when several of yours run",
    },
    FlagSpec {
        name: "help",
        value: None,
        verbs: &[],
        help: "this text",
    },
];

/// `--help`'s text, from [`VERBS`] and [`FLAGS`].
pub fn help() -> String {
    let mut text = String::from(
        "usage: nix-sandbox-mcp sandbox VERB [FLAG]... [ID]\n\
         Sees and ends the sessions of your running nix-sandbox-mcp servers\n\
         (through their control sockets; docs/cli.md). ID is a session's name,\n\
         or SERVER-PID/NAME when two servers have one of that name.\n",
    );
    for v in VERBS {
        let head = format!("{} {}", v.name, v.operand.unwrap_or(""));
        text.push_str(&format!("  {:<28}{}\n", head.trim_end(), v.help));
    }
    for f in FLAGS {
        let with = match f.verbs {
            [] => String::new(),
            verbs => format!(" ({})", verbs.join(", ")),
        };
        let head = format!("{} {}", f.name, f.value.unwrap_or(""));
        text.push_str(&format!("  --{:<26}{}{with}\n", head.trim_end(), f.help));
    }
    text
}

/// The arguments before the first `--`, and those after it (`exec`'s
/// command), which must be UTF-8: they travel as JSON text.
type Split = (Vec<OsString>, Option<Vec<String>>);

fn split_command(args: impl IntoIterator<Item = OsString>) -> Result<Split, String> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let Some(at) = args.iter().position(|a| a == "--") else {
        return Ok((args, None));
    };
    let rest = args.split_off(at + 1);
    args.pop();
    let rest: Result<Vec<String>, _> = rest.into_iter().map(OsString::into_string).collect();
    let rest = rest.map_err(|a| {
        format!(
            "{}: not UTF-8 (a command's arguments travel as JSON text)",
            a.to_string_lossy()
        )
    })?;
    Ok((args, Some(rest)))
}

/// Reads the command line after `sandbox`: what comes after the first `--`
/// is `exec`'s command, taken as it is.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    use lexopt::prelude::*;
    let (args, command) = split_command(args)?;
    let mut parser = lexopt::Parser::from_args(args);
    let fail = |e: lexopt::Error| e.to_string();
    let mut verb: Option<&VerbSpec> = None;
    let mut operand: Option<String> = None;
    let mut flags: Vec<&FlagSpec> = Vec::new();
    let mut values = Values::default();
    while let Some(arg) = parser.next().map_err(fail)? {
        match arg {
            Long(name) => {
                let flag = FLAGS
                    .iter()
                    .find(|f| f.name == name)
                    .ok_or_else(|| format!("unknown flag --{name}"))?;
                flags.push(flag);
                if let Some(what) = flag.value {
                    let value = parser.value().map_err(fail)?.into_string().map_err(|v| {
                        format!("--{} {}: not UTF-8", flag.name, v.to_string_lossy())
                    })?;
                    values.take(flag.name, what, value)?;
                }
            }
            Short(c) => return Err(format!("unknown flag -{c}")),
            Value(value) => {
                let value = value
                    .into_string()
                    .map_err(|v| format!("{}: not UTF-8", v.to_string_lossy()))?;
                match verb {
                    None => {
                        verb = Some(VERBS.iter().find(|v| v.name == value).ok_or_else(|| {
                            format!(
                                "unknown verb `{value}`: one of {}",
                                VERBS.iter().map(|v| v.name).collect::<Vec<_>>().join(", ")
                            )
                        })?);
                    }
                    Some(v) if v.operand.is_some() && operand.is_none() => operand = Some(value),
                    Some(v) => {
                        return Err(format!(
                            "{} takes no more arguments (got `{value}`)",
                            v.name
                        ));
                    }
                }
            }
        }
    }
    if flags.iter().any(|f| f.name == "help") {
        return Ok(Args {
            verb: Verb::Help,
            json: false,
        });
    }
    let verb = verb.ok_or(
        "no verb: one of list, status ID, destroy ID, exec ID -- CMD, enter ID, create ENV, profiles",
    )?;
    for flag in &flags {
        if !flag.verbs.contains(&verb.name) {
            return Err(format!("--{} does not go with {}", flag.name, verb.name));
        }
    }
    Ok(Args {
        verb: verb_of(verb.name, operand, command, values)?,
        json: flags.iter().any(|f| f.name == "json"),
    })
}

impl Values {
    /// Keeps flag `name`'s `value` (of kind `what`).
    fn take(&mut self, name: &str, what: &str, value: String) -> Result<(), String> {
        match name {
            "name" if self.name.is_some() => return Err("--name is given twice".into()),
            "name" => self.name = Some(value),
            "with" => self.with.push(value),
            "profile" if self.profile.is_some() => return Err("--profile is given twice".into()),
            "profile" => self.profile = Some(value),
            _ => {
                let pid = value
                    .parse()
                    .map_err(|_| format!("--{name} {value}: not a {what} (a number)"))?;
                self.server = Some(pid);
            }
        }
        Ok(())
    }
}

/// Verb `name` with its operand, `exec`'s command and the flags' values.
fn verb_of(
    name: &str,
    operand: Option<String>,
    command: Option<Vec<String>>,
    values: Values,
) -> Result<Verb, String> {
    if command.is_some() && name != "exec" {
        return Err(format!("`--` goes with exec, not {name}"));
    }
    if name == "create" {
        return Ok(Verb::Create {
            env: operand.ok_or(
                "create needs an environment (`nix-sandbox-mcp sandbox create ENV`; your MCP client's `run` tool lists them)",
            )?,
            name: values.name,
            with: values.with,
            profile: values.profile,
            server: values.server,
        });
    }
    let id = operand.ok_or_else(|| {
        format!("{name} needs a session ID (`nix-sandbox-mcp sandbox list` shows them)")
    });
    Ok(match name {
        "profiles" => Verb::Profiles {
            server: values.server,
        },
        "list" => Verb::List,
        "status" => Verb::Status(id?),
        "destroy" => Verb::Destroy(id?),
        "enter" => Verb::Enter(id?),
        _ => {
            let id = id?;
            match command {
                Some(argv) if !argv.is_empty() => Verb::Exec { id, argv },
                _ => {
                    return Err(format!(
                        "exec needs a command after `--`: exec {id} -- CMD [ARG]..."
                    ));
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Args, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn create_takes_a_profile_and_profiles_lists_them() {
        assert_eq!(
            p(&["create", "--profile", "strict", "python"])
                .unwrap()
                .verb,
            Verb::Create {
                env: "python".into(),
                name: None,
                with: vec![],
                profile: Some("strict".into()),
                server: None,
            }
        );
        let args = p(&["profiles", "--json", "--server", "7"]).unwrap();
        assert_eq!(args.verb, Verb::Profiles { server: Some(7) });
        assert!(args.json);
        assert_eq!(
            p(&["create", "--profile", "a", "--profile", "b", "x"]).unwrap_err(),
            "--profile is given twice"
        );
        assert_eq!(
            p(&["list", "--profile", "a"]).unwrap_err(),
            "--profile does not go with list"
        );
        assert_eq!(
            p(&["profiles", "x"]).unwrap_err(),
            "profiles takes no more arguments (got `x`)"
        );
    }

    #[test]
    fn verbs_take_their_operand_and_flags() {
        assert_eq!(p(&["list"]).unwrap().verb, Verb::List);
        assert!(p(&["list", "--json"]).unwrap().json);
        assert_eq!(
            p(&["status", "a", "--json"]).unwrap().verb,
            Verb::Status("a".into())
        );
        assert_eq!(
            p(&["destroy", "42/a"]).unwrap().verb,
            Verb::Destroy("42/a".into())
        );
        assert_eq!(p(&["enter", "a"]).unwrap().verb, Verb::Enter("a".into()));
        assert_eq!(p(&["--help"]).unwrap().verb, Verb::Help);
        assert_eq!(
            p(&[
                "create", "shell", "--name", "w", "--with", "jq", "--with", "rg", "--server", "7"
            ])
            .unwrap()
            .verb,
            Verb::Create {
                env: "shell".into(),
                name: Some("w".into()),
                with: vec!["jq".into(), "rg".into()],
                profile: None,
                server: Some(7),
            }
        );
        // After `--`, everything is the command's, flags included.
        let exec = p(&["exec", "--json", "a", "--", "ls", "--json", "--", "-l"]).unwrap();
        assert!(exec.json);
        assert_eq!(
            exec.verb,
            Verb::Exec {
                id: "a".into(),
                argv: vec!["ls".into(), "--json".into(), "--".into(), "-l".into()]
            }
        );
        assert_eq!(p(&["list", "--help"]).unwrap().verb, Verb::Help);
    }

    #[test]
    fn bad_input_is_one_line_naming_it() {
        for (args, says) in [
            (&["frob"][..], "unknown verb `frob`"),
            (&[][..], "no verb"),
            (&["status"][..], "status needs a session ID"),
            (&["enter"][..], "enter needs a session ID"),
            (
                &["enter", "a", "--json"][..],
                "--json does not go with enter",
            ),
            (&["list", "x"][..], "list takes no more arguments"),
            (
                &["destroy", "a", "--json"][..],
                "--json does not go with destroy",
            ),
            (&["list", "--all"][..], "unknown flag --all"),
            (&["exec", "a"][..], "exec needs a command after `--`"),
            (&["create"][..], "create needs an environment"),
            (
                &["create", "shell", "--name"][..],
                "missing argument for option '--name'",
            ),
            (
                &["create", "shell", "--server", "x"][..],
                "--server x: not a PID",
            ),
            (
                &["list", "--with", "jq"][..],
                "--with does not go with list",
            ),
            (&["exec", "a", "--"][..], "exec needs a command after `--`"),
            (&["exec", "--", "ls"][..], "exec needs a session ID"),
            (
                &["status", "a", "--", "ls"][..],
                "`--` goes with exec, not status",
            ),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(says) && !e.contains('\n'), "{args:?}: {e}");
        }
    }

    #[test]
    fn help_names_every_verb_and_flag() {
        let h = help();
        for v in VERBS {
            assert!(h.contains(v.name), "{h}");
        }
        for f in FLAGS {
            assert!(h.contains(&format!("--{}", f.name)), "{h}");
        }
    }
}
