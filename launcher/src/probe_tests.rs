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
Max pending signals       1024                 1024                 signals
Max msgqueue size         262144               262144               bytes
=== /proc/self/status
Name:\tpython3
Seccomp:\t2
Seccomp_filters:\t1
=== /proc/net/dev
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes
lo:       0       0    0    0    0     0          0         0        0
=== /proc/sys/kernel/hostname
sandbox
=== /etc/passwd
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
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
    assert_eq!(seen.rlimits.len(), 8);
    assert_eq!(seen.hostname, "sandbox");
    assert_eq!(
        seen.users[1],
        ("sandbox".to_owned(), "/home/sandbox".to_owned())
    );
}

/// The rlimits of an environment's kernel budgets are held like its
/// limits; a sandbox that declares none is served, and `--check` says so.
#[test]
fn kernel_budgets_are_held_and_reported() {
    let seen = Seen::parse(OUTPUT);
    let budgets = |memlock: u64| {
        crate::testing::env("python")
            .with(
                "kernel_budgets",
                serde_json::json!({"sigpending": 1024, "msgqueue": 262144, "memlock": memlock, "max_inotify_instances": 16}),
            )
            .build()
    };
    let e = verify(&budgets(65536), &Host::plain(), &seen, None).unwrap_err();
    assert!(
        e.contains("Max locked memory is unlimited, not 65536"),
        "{e}"
    );
    let locked = Seen::parse(&OUTPUT.replace(
        "Max locked memory         unlimited ",
        "Max locked memory         65536 ",
    ));
    assert_eq!(
        verify(&budgets(65536), &Host::plain(), &locked, None),
        Ok(())
    );
    let said = protections(&budgets(65536), &locked);
    assert!(
        said.contains("kernel budgets held") && said.contains("hostname \"sandbox\""),
        "{said}"
    );
    assert!(said.contains("/etc/passwd the jail's own"), "{said}");
    let old = protections(&env(false), &seen);
    assert!(old.contains("kernel budgets none"), "{old}");
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
    let online = Seen::parse(&OUTPUT.replace(
        "=== /proc/sys/kernel/hostname",
        "  eth0: 1 2 3\n=== /proc/sys/kernel/hostname",
    ));
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
    cg.cgroups = Some(crate::wrapper::cgroup::Cgroups::fake(true, true));
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
