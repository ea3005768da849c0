//! Drives the built `agent` binary over its stdin/stdout, with the host's
//! interpreters and a copy of the repository's drivers, either directly or
//! inside a fixture bubblewrap jail.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use proto::files::Upload;
use proto::frame::{self, ErrorCode, ExecReply, Exit, FileIn, FileReply, Reply, Request, Stream};

/// A guard against hangs, not a measure: every wait in these tests ends by then.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// The output cap the tests ask for.
pub const OUTPUT_BYTES: usize = 4096;

/// Where the agent runs.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// A plain child process of the test.
    Host,
    /// In a bubblewrap jail like the session wrappers' (all namespaces
    /// unshared, the agent the jail's pid 1, the host's /usr read-only, a
    /// cleared environment).
    Jail,
}

#[derive(Debug, Clone, Copy)]
pub enum Lang {
    Python,
    Bash,
    Node,
    /// program.sh with a runner whose "language" is bash: it reads the
    /// source from stdin and runs it, as a compiled language's runner
    /// builds and runs it ([`PROGRAM_RUNNER`]).
    Program,
}

/// The program driver's runner in these tests: the source on stdin, then
/// run with its stdin at end of file, as lib/programRunner.nix does.
pub const PROGRAM_RUNNER: &str =
    "#!/bin/bash\nsource=$(cat)\nexec /bin/bash -c \"$source\" program </dev/null\n";

impl Lang {
    pub fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::Bash => "bash",
            Lang::Node => "node",
            Lang::Program => "program",
        }
    }

    pub fn program(self) -> &'static str {
        match self {
            Lang::Python => "/usr/bin/python3",
            Lang::Bash | Lang::Program => "/bin/bash",
            Lang::Node => "/usr/bin/node",
        }
    }

    fn driver(self) -> &'static str {
        match self {
            Lang::Python => "python.py",
            Lang::Bash => "bash.sh",
            Lang::Node => "node.js",
            Lang::Program => "program.sh",
        }
    }
}

/// The Python driver `source` compiled by `python` into `source`c by
/// drivers/python-compile.py, as lib/compilePythonDriver.nix compiles it
/// for an environment. The tests drive the form that jails run.
fn compiled(source: &Path, python: &str) -> std::path::PathBuf {
    let pyc = source.with_extension("pyc");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("drivers/python-compile.py");
    let status = Command::new(python)
        .arg(script)
        .arg(source)
        .arg(&pyc)
        .status()
        .expect("run python3 to compile the driver");
    assert!(status.success(), "compiling the driver: {status}");
    pyc
}

/// A running agent and what it said.
pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<Result<Reply, String>>,
    /// Replies that came while the test waited for another one.
    backlog: Vec<Reply>,
    log: Arc<Mutex<String>>,
    next_id: u64,
    /// Holds this agent's copy of the driver; its path is in the
    /// interpreter's command line, which is how leftovers are found.
    dir: tempfile::TempDir,
    /// A number unique to this agent, usable as `sleep`'s argument, so that
    /// processes the test's code starts can be found in /proc.
    pub token: String,
    done: bool,
}

impl Agent {
    pub fn start(mode: Mode, lang: Lang) -> Agent {
        Agent::start_program(mode, lang, lang.program())
    }

    /// An agent whose `--program` is `program`.
    pub fn start_program(mode: Mode, lang: Lang, program: &str) -> Agent {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let token = format!(
            "86400.{}{:04}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempfile::Builder::new()
            .prefix("agent-it-")
            .tempdir()
            .expect("temp dir");
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("drivers")
            .join(lang.driver());
        let mut driver = dir.path().join(lang.driver());
        std::fs::copy(&source, &driver).expect("copy the driver");
        if let Lang::Python = lang {
            driver = compiled(&driver, lang.program());
        }
        if let Lang::Program = lang {
            // As lib/sessionWrapper.nix writes the runner's path into it.
            use std::os::unix::fs::PermissionsExt;
            let runner = dir.path().join("runner");
            std::fs::write(&runner, PROGRAM_RUNNER).expect("write the runner");
            std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755))
                .expect("make the runner executable");
            let text = std::fs::read_to_string(&driver).expect("read the driver");
            let runner = runner.to_str().expect("a UTF-8 path");
            std::fs::write(&driver, text.replace("@runner@", runner)).expect("write the driver");
        }
        let agent = env!("CARGO_BIN_EXE_agent");
        // The workspace: a directory of the test's, or the jail's tmpfs.
        let workspace = dir.path().join("workspace");
        std::fs::create_dir(&workspace).expect("workspace dir");
        let mut command = match mode {
            Mode::Host => {
                let mut agent = Command::new(agent);
                // As in a jail, the agent starts in its workspace.
                agent
                    .arg("--workspace")
                    .arg(&workspace)
                    .current_dir(&workspace);
                agent
            }
            Mode::Jail => {
                let mut bwrap = Command::new("bwrap");
                bwrap
                    .args(["--unshare-all", "--die-with-parent", "--new-session"])
                    .arg("--as-pid-1")
                    .args(["--ro-bind", "/usr", "/usr"])
                    .args(["--symlink", "usr/lib", "/lib"])
                    .args(["--symlink", "usr/lib64", "/lib64"])
                    .args(["--symlink", "usr/bin", "/bin"])
                    .args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"])
                    .args(["--tmpfs", "/workspace"])
                    // What the host's numpy (BLAS) and matplotlib read in
                    // /etc, as checks/hostpkgs' bwrap shows them.
                    .args(["--ro-bind-try", "/etc/alternatives", "/etc/alternatives"])
                    .args(["--ro-bind-try", "/etc/matplotlibrc", "/etc/matplotlibrc"])
                    .args(["--ro-bind", agent, agent])
                    .arg("--ro-bind")
                    .arg(dir.path())
                    .arg(dir.path())
                    .args(["--chdir", "/workspace", "--clearenv"])
                    .args(["--setenv", "PATH", "/usr/bin:/bin"])
                    .args(["--setenv", "HOME", "/tmp"])
                    .args(["--setenv", "LANG", "C.UTF-8"])
                    .args(["--setenv", "RUST_LOG", "debug"])
                    .args(["--", agent]);
                bwrap
            }
        };
        command
            .args([
                "--interpreter",
                lang.name(),
                "--program",
                program,
                "--driver",
            ])
            .arg(&driver)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // Started as a shell starts a background job without job control:
        // SIGINT and SIGQUIT ignored, which exec keeps. The agent must not
        // pass that on to the interpreter (bash cannot trap a signal it was
        // started with ignored, and interrupts would never land).
        // SAFETY: only sigaction, async-signal-safe, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                for signal in [Signal::SIGINT, Signal::SIGQUIT] {
                    nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigIgn)?;
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("spawn the agent");
        let stdout = child.stdout.take().expect("stdout");
        let (send, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let reply = frame::decode::<Reply>(line.as_bytes())
                    .map_err(|e| format!("unreadable frame {line:?}: {e}"));
                if send.send(reply).is_err() {
                    break;
                }
            }
        });
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Agent {
            stdin: child.stdin.take(),
            child,
            replies,
            backlog: Vec::new(),
            log,
            next_id: 1,
            dir,
            token,
            done: false,
        }
    }

    /// The process the test started: the agent, or bwrap in a jail.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The agent's log so far (for failure messages).
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Writes raw bytes to the agent's stdin.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .expect("write to the agent");
    }

    pub fn send(&mut self, request: &Request) {
        let line = frame::encode(request).expect("encode");
        self.write_raw(&line);
    }

    /// Sends an exec; returns its id.
    pub fn send_exec(&mut self, code: &str) -> u64 {
        self.send_exec_capped(code, OUTPUT_BYTES)
    }

    /// Sends a `once` exec (the interpreter's only call, run as a script);
    /// returns its id.
    pub fn send_exec_once(&mut self, code: &str, output_bytes: usize) -> u64 {
        self.send_exec_as(code, output_bytes, true, false)
    }

    /// Sends an exec that asks for its output live (`once` or not);
    /// returns its id.
    pub fn send_exec_live(&mut self, code: &str, output_bytes: usize, once: bool) -> u64 {
        self.send_exec_as(code, output_bytes, once, true)
    }

    /// Sends an exec with no files, `once` and `live` as given; returns its
    /// id.
    fn send_exec_as(&mut self, code: &str, output_bytes: usize, once: bool, live: bool) -> u64 {
        let id = self.fresh_id();
        self.send(&Request::Exec {
            id,
            code: code.into(),
            output_bytes,
            files: Vec::new(),
            once,
            live,
        });
        id
    }

    pub fn send_exec_capped(&mut self, code: &str, output_bytes: usize) -> u64 {
        self.send_exec_with(code, output_bytes, Vec::new())
    }

    /// Sends an exec that passes `files` in (their bytes `put` first, in
    /// chunks); returns its id.
    pub fn send_exec_with(&mut self, code: &str, output_bytes: usize, files: Vec<Upload>) -> u64 {
        for (file, upload) in files.iter().enumerate() {
            for chunk in upload.content.chunks(frame::PUT_CHUNK_BYTES) {
                let id = self.fresh_id();
                let data = frame::encode_data(chunk);
                self.send(&Request::Put { id, file, data });
            }
        }
        let id = self.fresh_id();
        let files = files
            .into_iter()
            .map(|f| FileIn {
                path: f.path,
                replace: f.replace,
            })
            .collect();
        self.send(&Request::Exec {
            id,
            code: code.into(),
            output_bytes,
            files,
            once: false,
            live: false,
        });
        id
    }

    /// Sends a read of an output file; returns its id.
    pub fn send_read(&mut self, path: &str, offset: u64, max_bytes: u64) -> u64 {
        let id = self.fresh_id();
        self.send(&Request::Read {
            id,
            path: path.into(),
            offset,
            max_bytes,
        });
        id
    }

    /// Reads an output file (all of it, up to `max_bytes`).
    pub fn read(&mut self, path: &str, max_bytes: u64) -> FileReply {
        let id = self.send_read(path, 0, max_bytes);
        match self.reply(id) {
            Reply::File(file) => file,
            other => panic!(
                "expected a file reply, got {other:?}\nagent log:\n{}",
                self.log()
            ),
        }
    }

    /// Runs code and returns the exec reply.
    pub fn exec(&mut self, code: &str) -> ExecReply {
        let id = self.send_exec(code);
        self.exec_reply(id)
    }

    /// The next reply, whatever it answers.
    pub fn next_reply(&mut self) -> Reply {
        if !self.backlog.is_empty() {
            return self.backlog.remove(0);
        }
        match self.replies.recv_timeout(DEADLINE) {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => panic!("{e}\nagent log:\n{}", self.log()),
            Err(e) => panic!("no reply ({e})\nagent log:\n{}", self.log()),
        }
    }

    /// Spawns `argv`; its stdout and stderr bytes and its `spawned` reply
    /// (or the error answering it).
    pub fn spawn(&mut self, argv: &[&str]) -> SpawnEnd {
        let id = self.send_spawn(argv);
        self.spawn_end(id)
    }

    /// Sends a spawn; returns its id.
    pub fn send_spawn(&mut self, argv: &[&str]) -> u64 {
        let id = self.fresh_id();
        let argv = argv.iter().map(|a| (*a).to_owned()).collect();
        self.send(&Request::Spawn {
            id,
            argv,
            tty: None,
        });
        id
    }

    /// The output of spawn `id` up to its end.
    pub fn spawn_end(&mut self, id: u64) -> SpawnEnd {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        loop {
            match self.reply(id) {
                Reply::Output { stream, data, .. } => {
                    let bytes = frame::decode_data(&data).expect("base64");
                    assert!(bytes.len() <= frame::MAX_CHUNK_BYTES);
                    match stream {
                        Stream::Stdout => out.extend(bytes),
                        Stream::Stderr => err.extend(bytes),
                    }
                }
                Reply::Spawned { status, exit, .. } => return Ok((out, err, status, exit)),
                Reply::Error { code, message, .. } => return Err((code, message)),
                other => panic!(
                    "expected a spawn's reply, got {other:?}\nagent log:\n{}",
                    self.log()
                ),
            }
        }
    }

    /// Stops spawn `spawn`; whether it was running.
    pub fn stop(&mut self, spawn: u64) -> bool {
        let id = self.fresh_id();
        self.send(&Request::Stop { id, spawn });
        self.ack(id)
    }

    /// The reply to request `id`; others are kept for later.
    pub fn reply(&mut self, id: u64) -> Reply {
        if let Some(i) = self.backlog.iter().position(|r| r.id() == Some(id)) {
            return self.backlog.remove(i);
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let reply = match self.replies.recv_timeout(left) {
                Ok(Ok(reply)) => reply,
                Ok(Err(e)) => panic!("{e}\nagent log:\n{}", self.log()),
                Err(e) => panic!("no reply to {id} ({e})\nagent log:\n{}", self.log()),
            };
            if reply.id() == Some(id) {
                return reply;
            }
            self.backlog.push(reply);
        }
    }

    pub fn exec_reply(&mut self, id: u64) -> ExecReply {
        match self.reply(id) {
            Reply::Exec(reply) => reply,
            other => panic!(
                "expected an exec reply, got {other:?}\nagent log:\n{}",
                self.log()
            ),
        }
    }

    /// The error answering request `id`.
    pub fn error(&mut self, id: u64) -> (ErrorCode, String) {
        match self.reply(id) {
            Reply::Error { code, message, .. } => (code, message),
            other => panic!("expected an error reply, got {other:?}"),
        }
    }

    fn ack(&mut self, id: u64) -> bool {
        match self.reply(id) {
            Reply::Ack { busy, .. } => busy,
            other => panic!("expected an ack, got {other:?}\nagent log:\n{}", self.log()),
        }
    }

    /// Interrupts; returns whether an exec was running.
    pub fn interrupt(&mut self) -> bool {
        let id = self.fresh_id();
        self.send(&Request::Interrupt { id });
        self.ack(id)
    }

    /// Pings; returns whether an exec is running.
    pub fn ping(&mut self) -> bool {
        let id = self.fresh_id();
        self.send(&Request::Ping { id });
        self.ack(id)
    }

    /// Asks the agent to shut down; returns the ack's `busy`.
    pub fn shutdown(&mut self) -> bool {
        let id = self.fresh_id();
        self.send(&Request::Shutdown { id });
        self.ack(id)
    }

    /// Waits until a process whose command line holds `needle` runs.
    pub fn wait_for_process(&self, needle: &str) {
        let deadline = Instant::now() + DEADLINE;
        while processes_with(needle).is_empty() {
            assert!(
                Instant::now() < deadline,
                "no process with {needle:?} appeared\nagent log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes stdin: the agent must exit by itself, successfully, leaving
    /// nothing behind.
    pub fn close(mut self) {
        self.stdin = None;
        self.wait_gone();
    }

    /// Waits for the agent to exit by itself (after `shutdown` or `close`),
    /// successfully, leaving nothing behind.
    pub fn wait_gone(mut self) {
        let status = self.wait_exit();
        assert!(
            status.success(),
            "agent exited with {status}\nlog:\n{}",
            self.log()
        );
        self.assert_no_leftovers();
    }

    /// Kills the agent's process group (the jail's, when jailed) with
    /// SIGKILL, as the launcher resets a session: nothing may survive.
    pub fn kill_group(mut self) {
        self.kill();
        self.assert_no_leftovers();
    }

    fn kill(&mut self) {
        let pgid = i32::try_from(self.child.id()).expect("pid");
        if pgid > 1 {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        self.wait_exit();
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        self.done = true;
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the agent did not exit\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// No process of this agent (its interpreter, or anything started with
    /// the token) is left once the agent is gone.
    pub fn assert_no_leftovers(&self) {
        let dir = self.dir.path().to_string_lossy().into_owned();
        for needle in [dir.as_str(), self.token.as_str()] {
            self.assert_no_process(needle);
        }
    }

    /// Waits (bounded) until no process has `needle` in its command line.
    pub fn assert_no_process(&self, needle: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = processes_with(needle);
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "processes left behind: {left:?}\nagent log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // A test that failed half-way must not leave its agent running.
        if !self.done {
            self.kill();
        }
        if std::thread::panicking() {
            eprintln!("agent log:\n{}", self.log());
        }
    }
}

/// Command lines (pid: args) of the live processes that contain `needle`.
pub fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// The call succeeded, printed nothing on stderr and kept its interpreter.
#[track_caller]
pub fn assert_ok(reply: &ExecReply) {
    assert_eq!(reply.status, 0, "{reply:#?}");
    assert_eq!(reply.stderr, "", "{reply:#?}");
    assert_eq!(reply.exit, None, "{reply:#?}");
    assert!(!reply.restarted && !reply.interrupted, "{reply:#?}");
}

/// Runs `code` and checks it succeeded with exactly `stdout`.
#[track_caller]
pub fn assert_prints(agent: &mut Agent, code: &str, stdout: &str) {
    let reply = agent.exec(code);
    assert_ok(&reply);
    assert_eq!(reply.stdout, stdout, "{reply:#?}");
}

/// A spawn's stdout, stderr, status and exit, or the error answering it.
pub type SpawnEnd = Result<(Vec<u8>, Vec<u8>, i32, Exit), (ErrorCode, String)>;

/// Generates a `host` and a `jail` test for each scenario `fn name(Mode)`.
#[macro_export]
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {
        mod host {
            $(#[test]
            fn $name() {
                super::$name($crate::harness::Mode::Host)
            })*
        }
        mod jail {
            $(#[test]
            fn $name() {
                super::$name($crate::harness::Mode::Jail)
            })*
        }
    };
}
