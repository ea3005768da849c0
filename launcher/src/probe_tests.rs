//! Tests of the sandbox probe: its output parsed, and a jail held to the
//! limits its environment declares on each kind of host.

use super::*;

const OUTPUT: &str = "\
=== /proc/self/limits
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              60                   61                   seconds
Max file size             268435456            268435456            bytes
Max data size             1073741824           1073741824           bytes
Max stack size            8388608              8388608              bytes
Max processes             32                   32                   processes
Max open files            1024                 1024                 files
Max address space         unlimited            unlimited            bytes
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
=== /proc/self/mountinfo
67 66 0:42 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
78 66 0:46 / /home/sandbox rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=262144k,mode=755
79 66 0:47 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=262144k,mode=755
81 66 0:48 / /workspace rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=524288k,mode=755
83 68 0:49 / /dev/shm rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=262144k,mode=755
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
    assert_eq!(seen.rlimits.len(), 10);
    assert_eq!(seen.hard_rlimits["Max cpu time"], Some(61));
    assert_eq!(seen.hostname, "sandbox");
    assert_eq!(
        seen.users[1],
        ("sandbox".to_owned(), "/home/sandbox".to_owned())
    );
    assert_eq!(seen.writable.len(), 4);
}

/// `/tmp` and `/workspace` are held to their declared sizes (a tmpfs
/// without one fails); the other writable mounts are reported.
#[test]
fn the_declared_mount_sizes_are_held_and_the_others_reported() {
    let seen = Seen::parse(OUTPUT);
    assert_eq!(verify(&env(false), &Host::plain(), &seen, None), Ok(()));
    assert!(
        protections(&env(false), &seen).ends_with(
            "writable mounts bounded, 1280 MiB in all (/home/sandbox 256 MiB, /tmp 256 MiB, \
             /workspace 512 MiB, /dev/shm 256 MiB), the rest read-only"
        ),
        "{}",
        protections(&env(false), &seen)
    );
    let big = Seen::parse(&OUTPUT.replace("size=524288k", "size=1048576k"));
    let e = verify(&env(false), &Host::plain(), &big, None).unwrap_err();
    assert!(
        e.contains("/workspace is 1073741824 bytes, over 536870912"),
        "{e}"
    );
    let no_size = Seen::parse(&OUTPUT.replace(
        "tmpfs rw,size=262144k,mode=755\n79",
        "tmpfs rw,mode=755\n79",
    ));
    assert_eq!(verify(&env(false), &Host::plain(), &no_size, None), Ok(()));
    let said = protections(&env(false), &no_size);
    assert!(
        said.contains("writable mounts UNBOUNDED: /home/sandbox (a tmpfs without a size)"),
        "{said}"
    );
    let open_tmp = Seen::parse(&OUTPUT.replace(
        "tmpfs rw,size=262144k,mode=755\n81",
        "tmpfs rw,mode=755\n81",
    ));
    let e = verify(&env(false), &Host::plain(), &open_tmp, None).unwrap_err();
    assert!(e.contains("/tmp (tmpfs) has no size, not 268435456"), "{e}");
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
    // pids + 1 holds: the rlimit's count includes bubblewrap's own
    // process. pids + 2 does not.
    for (nproc, holds) in [(33, true), (34, false)] {
        let seen = Seen::parse(&OUTPUT.replace(
            "Max processes             32                   32 ",
            &format!("Max processes             {nproc}                   {nproc} "),
        ));
        let verdict = verify(&env(false), &Host::plain(), &seen, None);
        assert_eq!(verdict.is_ok(), holds, "{nproc}: {verdict:?}");
    }
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
        "Max data size             1073741824           1073741824 ",
        "Max data size             unlimited            unlimited ",
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
    for i in [
        Interpreter::Python,
        Interpreter::Bash,
        Interpreter::Node,
        Interpreter::Program,
    ] {
        let code = probe_code(i);
        assert!(PROBE_FILES.iter().all(|f| code.contains(f)), "{code}");
        assert!(code.contains(MOUNTINFO), "{code}");
    }
}

/// Without a cgroup, memory is each process's data (RLIMIT_DATA) and its
/// main stack, both hard limits (the code can raise a soft one); a sandbox
/// built before them is held by its address space.
#[test]
fn memory_without_a_cgroup_is_data_and_stack_or_address_space() {
    let with = |pairs: &[(&str, &str)]| {
        let mut out = OUTPUT.to_owned();
        for (from, to) in pairs {
            assert!(out.contains(from), "{from}");
            out = out.replace(from, to);
        }
        Seen::parse(&out)
    };
    let data = "Max data size             1073741824           1073741824 ";
    let stack = "Max stack size            8388608              8388608 ";
    let space = "Max address space         unlimited            unlimited ";
    let no_data = "Max data size             unlimited            unlimited ";
    let soft_data = "Max data size             1073741824           unlimited ";
    let free_stack = "Max stack size            8388608              unlimited ";
    let held_space = "Max address space         1073741824           1073741824 ";
    let e = verify(&env(false), &Host::plain(), &with(&[(data, no_data)]), None).unwrap_err();
    assert!(e.contains("hard: Max data size is unlimited"), "{e}");
    let e = verify(
        &env(false),
        &Host::plain(),
        &with(&[(data, soft_data)]),
        None,
    )
    .unwrap_err();
    assert!(e.contains("Max data size"), "{e}");
    let e = verify(
        &env(false),
        &Host::plain(),
        &with(&[(stack, free_stack)]),
        None,
    )
    .unwrap_err();
    assert!(e.contains("hard: Max stack size is unlimited"), "{e}");
    let older = with(&[(data, no_data), (space, held_space)]);
    assert_eq!(verify(&env(false), &Host::plain(), &older, None), Ok(()));
}
