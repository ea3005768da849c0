//! Tests of the sandbox probe: its output parsed, and a jail held to the
//! limits its environment declares on each kind of host.

use super::*;

const OUTPUT: &str = "\
=== /proc/self/limits
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              60                   61                   seconds
Max file size             268435456            268435456            bytes
Max processes             32                   32                   processes
Max open files            1024                 1024                 files
Max address space         1073741824           1073741824           bytes
Max locked memory         unlimited            unlimited            bytes
=== /proc/self/status
Name:\tpython3
Seccomp:\t2
Seccomp_filters:\t1
=== /proc/net/dev
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes
lo:       0       0    0    0    0     0          0         0        0
";

fn env(network: bool) -> Env {
    crate::testing::env("python")
        .with("network", serde_json::json!(network))
        .build()
}

#[test]
fn the_probe_output_parses() {
    let seen = Seen::parse(OUTPUT);
    assert!(seen.seccomp);
    assert_eq!(seen.interfaces, ["lo"]);
    assert_eq!(seen.rlimits["Max cpu time"], Some(60));
    assert_eq!(seen.rlimits["Max locked memory"], None);
    assert_eq!(seen.rlimits.len(), 6);
}

#[test]
fn limits_that_hold_pass_and_missing_ones_are_named() {
    let seen = Seen::parse(OUTPUT);
    assert_eq!(verify(&env(false), &Host::plain(), &seen, None), Ok(()));
    let weak = Seen::parse(&OUTPUT.replace(
        "Max cpu time              60 ",
        "Max cpu time              unlimited ",
    ));
    let e = verify(&env(false), &Host::plain(), &weak, None).unwrap_err();
    assert!(e.contains("Max cpu time is unlimited, not 60"), "{e}");
    let online = Seen::parse(&format!("{OUTPUT}  eth0: 1 2 3\n"));
    let e = verify(&env(false), &Host::plain(), &online, None).unwrap_err();
    assert!(e.contains("network is off"), "{e}");
    assert_eq!(verify(&env(true), &Host::plain(), &online, None), Ok(()));
}

#[test]
fn the_process_limit_is_checked_by_rlimit_or_cgroup() {
    let many = Seen::parse(&OUTPUT.replace(
        "Max processes             32 ",
        "Max processes             9999 ",
    ));
    assert!(
        verify(&env(false), &Host::plain(), &many, None)
            .unwrap_err()
            .contains("Max processes")
    );
    let mut cg = Host::plain();
    cg.cgroups = Some(super::super::cgroup::Cgroups::fake(true, true));
    let no_as = Seen::parse(&OUTPUT.replace(
        "Max address space         1073741824 ",
        "Max address space         unlimited ",
    ));
    let held = Stats {
        memory_limit: Some(1 << 30),
        pids_limit: Some(32),
        ..Stats::default()
    };
    assert_eq!(verify(&env(false), &cg, &no_as, Some(&held)), Ok(()));
    let unset = Stats::default();
    let e = verify(&env(false), &cg, &no_as, Some(&unset)).unwrap_err();
    assert!(
        e.contains("memory limit is None") && e.contains("pids.max is None"),
        "{e}"
    );
}

#[test]
fn probe_programs_name_every_file() {
    for i in [Interpreter::Python, Interpreter::Bash, Interpreter::Node] {
        let code = probe_code(i);
        assert!(PROBE_FILES.iter().all(|f| code.contains(f)), "{code}");
    }
}
