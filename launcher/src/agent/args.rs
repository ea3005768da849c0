//! The `agent` subcommand's command line: what the agent's wrapper
//! (lib/mkAgentSandbox.nix) gives before `--`, and what the person gives
//! after it (docs/agents.md):
//!
//!   nix-sandbox-mcp agent --name NAME --manifest M --env ENV --jail W -- [OPTION]... [AGENT ARGS]...
//!
//! The person's options come first; the first argument that is not one of
//! them, or what follows a second `--`, goes to the agent as it is.

use std::ffi::OsString;
use std::path::PathBuf;

/// What the person asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Start the agent (interactive on a terminal).
    Run,
    /// Print the kept changes as a diff.
    Diff,
    /// Write the kept changes into the project, then forget them.
    Apply,
    /// Forget the kept changes.
    Discard,
    /// Print the project's state directory.
    State,
    Help,
}

/// The whole command line.
#[derive(Debug, PartialEq, Eq)]
pub struct Args {
    pub name: String,
    pub manifest: PathBuf,
    pub env: String,
    pub jail: PathBuf,
    pub verb: Verb,
    pub project: Option<PathBuf>,
    pub writable: bool,
    pub agent_args: Vec<OsString>,
}

/// The person's options, for `--help`.
pub const HELP: &str = "\
usage: agent-NAME [OPTION]... [AGENT ARGUMENTS]...
Runs the agent in a jail on the project (the current directory unless
--project), its changes kept in a copy-on-write layer until applied.
  --project DIR  the project (default: the current directory)
  --writable     the project read-write instead: the agent's changes land at once
  --diff         print the kept changes as a unified diff, and exit
  --apply        write the kept changes into the project, then forget them
  --discard      forget the kept changes
  --state        print where this project's layer and agent home are kept
  --help         this text
Anything else, and everything after `--`, goes to the agent.
";

/// Reads the wrapper's flags, then the person's.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut args = args.into_iter();
    let (mut name, mut manifest, mut env, mut jail) = (None, None, None, None);
    loop {
        let Some(flag) = args.next() else {
            return Err("no `--` before the person's arguments".into());
        };
        let flag = flag.to_string_lossy().into_owned();
        if flag == "--" {
            break;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--name" => name = Some(text(value, &flag)?),
            "--manifest" => manifest = Some(PathBuf::from(value)),
            "--env" => env = Some(text(value, &flag)?),
            "--jail" => jail = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let missing = |what: &str| format!("the agent's wrapper gave no {what}");
    let mut parsed = Args {
        name: name.ok_or_else(|| missing("--name"))?,
        manifest: manifest.ok_or_else(|| missing("--manifest"))?,
        env: env.ok_or_else(|| missing("--env"))?,
        jail: jail.ok_or_else(|| missing("--jail"))?,
        verb: Verb::Run,
        project: None,
        writable: false,
        agent_args: Vec::new(),
    };
    person(&mut parsed, args)?;
    Ok(parsed)
}

/// The person's options, then the agent's arguments.
fn person(parsed: &mut Args, mut args: impl Iterator<Item = OsString>) -> Result<(), String> {
    let mut verb = None;
    while let Some(arg) = args.next() {
        let said = match arg.to_str() {
            Some("--") => break,
            Some("--project") => {
                let dir = args.next().ok_or("--project needs a directory")?;
                parsed.project = Some(PathBuf::from(dir));
                None
            }
            Some("--writable") => {
                parsed.writable = true;
                None
            }
            Some("--diff") => Some(Verb::Diff),
            Some("--apply") => Some(Verb::Apply),
            Some("--discard") => Some(Verb::Discard),
            Some("--state") => Some(Verb::State),
            Some("--help") => Some(Verb::Help),
            _ => {
                parsed.agent_args.push(arg);
                break;
            }
        };
        if let Some(said) = said {
            if verb.is_some_and(|v| v != said) {
                return Err(
                    "--diff, --apply, --discard, --state and --help exclude each other".into(),
                );
            }
            verb = Some(said);
        }
    }
    parsed.agent_args.extend(args);
    parsed.verb = verb.unwrap_or(Verb::Run);
    if parsed.verb != Verb::Run && !parsed.agent_args.is_empty() {
        return Err(format!(
            "{} takes no agent arguments (got {})",
            flag_of(parsed.verb),
            parsed.agent_args[0].to_string_lossy()
        ));
    }
    if parsed.writable && parsed.verb != Verb::Run {
        return Err(format!(
            "--writable goes with a run, not {}",
            flag_of(parsed.verb)
        ));
    }
    Ok(())
}

fn flag_of(verb: Verb) -> &'static str {
    match verb {
        Verb::Run => "a run",
        Verb::Diff => "--diff",
        Verb::Apply => "--apply",
        Verb::Discard => "--discard",
        Verb::State => "--state",
        Verb::Help => "--help",
    }
}

fn text(value: OsString, flag: &str) -> Result<String, String> {
    value
        .into_string()
        .map_err(|v| format!("{flag} {}: not UTF-8", v.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_person(person: &[&str]) -> Result<Args, String> {
        let mut argv = vec![
            "--name",
            "codex",
            "--manifest",
            "/m",
            "--env",
            "agent-codex",
            "--jail",
            "/j",
            "--",
        ];
        argv.extend(person);
        parse(argv.into_iter().map(OsString::from))
    }

    #[test]
    fn options_come_first_and_the_rest_is_the_agents() {
        let a = parse_person(&["--project", "/p", "exec", "--diff", "fix it"]).unwrap();
        assert_eq!(a.verb, Verb::Run);
        assert_eq!(a.project, Some(PathBuf::from("/p")));
        assert_eq!(a.agent_args, ["exec", "--diff", "fix it"]);
        let a = parse_person(&["--writable", "--", "--help"]).unwrap();
        assert!(a.writable);
        assert_eq!(a.agent_args, ["--help"]);
        assert_eq!(parse_person(&["--diff"]).unwrap().verb, Verb::Diff);
        assert_eq!(parse_person(&[]).unwrap().verb, Verb::Run);
    }

    #[test]
    fn bad_input_is_one_line_naming_it() {
        assert!(
            parse_person(&["--diff", "--apply"])
                .unwrap_err()
                .contains("exclude")
        );
        assert!(
            parse_person(&["--apply", "--", "x"])
                .unwrap_err()
                .contains("no agent arguments")
        );
        assert!(
            parse_person(&["--writable", "--diff"])
                .unwrap_err()
                .contains("--writable")
        );
        assert!(
            parse_person(&["--project"])
                .unwrap_err()
                .contains("--project")
        );
        let e = parse(["--name", "x", "--"].map(OsString::from)).unwrap_err();
        assert!(e.contains("--manifest"), "{e}");
    }
}
