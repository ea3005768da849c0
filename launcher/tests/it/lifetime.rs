//! No jail outlives the server, however the server ends: end of input,
//! SIGTERM, SIGINT or SIGKILL; within milliseconds of its start, while the
//! start-up probes' jails are being built, or with a jail stuck in
//! bubblewrap's setup, where bubblewrap has not set its parent-death signal
//! yet (fixtures/wrappers/stall-run); as the test's user and as user 65534.
//! A server that stops (anything but SIGKILL) has killed and reaped every
//! jail by the time it exits; after SIGKILL the kernel ends them.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::common::*;

/// How a server is made to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The client closes the server's stdin.
    Eof,
    Signal(Signal),
}

impl End {
    /// Every way but SIGKILL lets the server clean up before it exits.
    fn graceful(self) -> bool {
        !matches!(self, End::Signal(Signal::SIGKILL))
    }
}

/// Ends `raw` the way `end` says and waits for it to exit.
async fn stop(raw: &mut RawServer, end: End) -> ExitStatus {
    match end {
        End::Eof => raw.close_stdin(),
        End::Signal(signal) => signal_pid(raw.child.id().unwrap(), signal),
    }
    tokio::time::timeout(GUARD, raw.child.wait())
        .await
        .expect("the server exits")
        .unwrap()
}

/// Asserts how a server ended and that no process marked `mark` is left:
/// right away after a server that stopped (exit 0), soon after SIGKILL.
async fn assert_ended_clean(
    raw: &RawServer,
    status: ExitStatus,
    end: End,
    mark: &str,
    context: &str,
) {
    if end.graceful() {
        assert!(status.success(), "{context}: {status:?}: {}", raw.stderr());
        assert_no_process_now(mark, context);
    } else {
        assert_no_process_left(mark).await;
    }
}

/// Ten servers per user, each ended `end` 0 to 9 ms after `initialize`,
/// while the start-up probes' jails are being built.
async fn during_the_probes(end: End) {
    for user in User::all() {
        for delay_ms in 0..10 {
            let mark = marker("probes");
            let manifest = all_marked(&mark, false);
            let mut raw = RawServer::from_command(RawServer::command_as(user, &manifest, "info"));
            raw.initialize().await;
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let status = stop(&mut raw, end).await;
            let context = format!("as {user:?}, {end:?} {delay_ms} ms after initialize");
            assert_ended_clean(&raw, status, end, &mark, &context).await;
            // A probe whose jail the stopping server killed did not fail:
            // clients show a server's ERROR lines to their users.
            if end != End::Signal(Signal::SIGKILL) {
                let stderr = raw.stderr();
                assert!(
                    !stderr.lines().any(|l| l.contains(" ERROR ")),
                    "{context}: an ERROR line on a graceful stop: {stderr}"
                );
            }
        }
    }
}

#[tokio::test]
async fn end_of_input_during_the_probes_leaves_no_jail() {
    during_the_probes(End::Eof).await;
}

#[tokio::test]
async fn sigterm_during_the_probes_leaves_no_jail() {
    during_the_probes(End::Signal(Signal::SIGTERM)).await;
}

#[tokio::test]
async fn sigint_during_the_probes_leaves_no_jail() {
    during_the_probes(End::Signal(Signal::SIGINT)).await;
}

#[tokio::test]
async fn sigkill_during_the_probes_leaves_no_jail() {
    during_the_probes(End::Signal(Signal::SIGKILL)).await;
}

/// Per user: a server with a run going (a `sleep` marked `MARK-job`) and
/// the `stall` environment's probe jail inside bubblewrap's setup, where
/// it stays for good; then ended `end`. No process of either is left.
pub async fn with_a_jail_mid_setup(end: End) {
    for user in User::all() {
        let mark = marker("setup");
        let (job, stalled) = (format!("{mark}-job"), format!("{mark}-stall"));
        let manifest = all_marked(&mark, true);
        let mut raw = RawServer::from_command(RawServer::command_as(user, &manifest, "info"));
        raw.initialize().await;
        raw.call_run(1, "shell", &format!("exec -a {job} sleep 1000"))
            .await;
        assert!(
            eventually(|| !pids_with(&job).is_empty()).await,
            "as {user:?}: the run never started: {}",
            raw.stderr()
        );
        assert!(
            eventually(|| sandbox_children(&stalled).len() == 1).await,
            "as {user:?}: the stall jail never reached bubblewrap's setup: {}",
            raw.stderr()
        );
        let status = stop(&mut raw, end).await;
        let context = format!("as {user:?}, {end:?} with a jail in bubblewrap's setup");
        assert_ended_clean(&raw, status, end, &mark, &context).await;
    }
}

#[tokio::test]
async fn a_stopped_server_leaves_no_jail_even_mid_setup() {
    for end in [
        End::Eof,
        End::Signal(Signal::SIGTERM),
        End::Signal(Signal::SIGINT),
    ] {
        with_a_jail_mid_setup(end).await;
    }
}
