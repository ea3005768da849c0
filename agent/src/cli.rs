//! The agent's command line: which interpreter, the program that runs it, and
//! the driver file the program runs.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: agent --interpreter python|bash|node|program --program PATH --driver PATH
             [--workspace DIR]

The entry of a session jail. Starts PROGRAM DRIVER (for example python3
python.py) as a child and runs the launcher's requests in it, one at a time,
keeping the interpreter's state between them. Frames (one JSON object a line)
come on stdin and go out on stdout; the log goes to stderr (RUST_LOG sets its
level, default info). Closing stdin kills the interpreter and ends the agent.

  --interpreter NAME  python, bash, node or program (what the driver expects;
                      program: bash running a compiled language's builds)
  --program PATH      the interpreter's executable
  --driver PATH       the driver file the interpreter runs
  --workspace DIR     where files passed in are written and outputs/ is
                      looked at (default /workspace)
  -h, --help          this text
  -V, --version       the version
";

/// Which interpreter the driver is for (named in logs and errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpreter {
    Python,
    Bash,
    Node,
    Program,
}

impl Interpreter {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "python" => Some(Interpreter::Python),
            "bash" => Some(Interpreter::Bash),
            "node" => Some(Interpreter::Node),
            "program" => Some(Interpreter::Program),
            _ => None,
        }
    }
}

impl fmt::Display for Interpreter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Interpreter::Python => "python",
            Interpreter::Bash => "bash",
            Interpreter::Node => "node",
            Interpreter::Program => "program",
        })
    }
}

/// What the agent runs.
#[derive(Debug, Clone)]
pub struct Config {
    pub interpreter: Interpreter,
    pub program: PathBuf,
    pub driver: PathBuf,
    /// Files in and `outputs/`.
    pub workspace: PathBuf,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Run(Config),
    Help,
    Version,
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, lexopt::Error> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let (mut interpreter, mut program, mut driver) = (None, None, None);
    let mut workspace = PathBuf::from("/workspace");
    while let Some(arg) = parser.next()? {
        match arg {
            Long("interpreter") => {
                let name = parser.value()?.string()?;
                interpreter = Some(Interpreter::parse(&name).ok_or_else(|| {
                    lexopt::Error::from(format!(
                        "unknown interpreter {name:?}: expected python, bash, node or program"
                    ))
                })?);
            }
            Long("program") => program = Some(PathBuf::from(parser.value()?)),
            Long("driver") => driver = Some(PathBuf::from(parser.value()?)),
            Long("workspace") => workspace = PathBuf::from(parser.value()?),
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            _ => return Err(arg.unexpected()),
        }
    }
    let missing = |flag: &str| lexopt::Error::from(format!("missing {flag}"));
    Ok(Command::Run(Config {
        interpreter: interpreter.ok_or_else(|| missing("--interpreter"))?,
        program: program.ok_or_else(|| missing("--program"))?,
        driver: driver.ok_or_else(|| missing("--driver"))?,
        workspace,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn all_three_flags_make_a_config() {
        let cmd = parse(args(&[
            "--interpreter",
            "node",
            "--program=/usr/bin/node",
            "--driver",
            "/d/node.js",
        ]))
        .unwrap();
        let Command::Run(config) = cmd else {
            panic!("expected a config, got {cmd:?}")
        };
        assert_eq!(config.interpreter, Interpreter::Node);
        assert_eq!(config.program, PathBuf::from("/usr/bin/node"));
        assert_eq!(config.driver, PathBuf::from("/d/node.js"));
        assert_eq!(config.workspace, PathBuf::from("/workspace"));
        let Command::Run(config) = parse(args(&[
            "--interpreter=bash",
            "--program=/bin/bash",
            "--driver=/d/bash.sh",
            "--workspace=/tmp/w",
        ]))
        .unwrap() else {
            panic!("expected a config")
        };
        assert_eq!(config.workspace, PathBuf::from("/tmp/w"));
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        let err = parse(args(&["--interpreter", "ruby"])).unwrap_err();
        assert!(
            err.to_string().contains("unknown interpreter \"ruby\""),
            "{err}"
        );
        let err = parse(args(&["--interpreter", "bash", "--program", "/bin/bash"])).unwrap_err();
        assert!(err.to_string().contains("missing --driver"), "{err}");
        assert!(parse(args(&["--frobnicate"])).is_err());
    }

    #[test]
    fn help_and_version_win() {
        assert!(matches!(parse(args(&["--help"])).unwrap(), Command::Help));
        assert!(matches!(parse(args(&["-V"])).unwrap(), Command::Version));
    }
}
