//! Tests of the cgroup reader: hierarchies found by controller, counters
//! and limits parsed, a run's statistics read from its files.

use super::*;

const MOUNTINFO: &str = "\
35 25 0:30 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
40 35 0:35 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
41 35 0:36 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
42 35 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct";

const OWN: &str = "\
8:pids:/user.slice
4:memory:/process_api/abc
2:cpu,cpuacct:/
0::/user.slice/app.scope";

#[test]
fn hierarchies_are_found_by_controller() {
    let v1: Vec<_> = mounts_of(MOUNTINFO, "cgroup").collect();
    assert_eq!(v1.len(), 3);
    assert_eq!(
        mounts_of(MOUNTINFO, "cgroup2").next(),
        Some(("/sys/fs/cgroup/unified", "rw,nsdelegate"))
    );
    assert_eq!(
        own_path(OWN, |c| c.is_empty()),
        Some("/user.slice/app.scope")
    );
    assert_eq!(
        own_path(OWN, |c| c.split(',').any(|x| x == "memory")),
        Some("/process_api/abc")
    );
    assert_eq!(
        own_path(OWN, |c| c.split(',').any(|x| x == "cpuacct")),
        Some("/")
    );
    assert_eq!(
        join("/sys/fs/cgroup/memory", "/process_api/abc"),
        PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
    );
    assert_eq!(
        join("/sys/fs/cgroup/pids", "/"),
        PathBuf::from("/sys/fs/cgroup/pids")
    );
}

#[test]
fn counters_and_limits_parse() {
    assert_eq!(parse_limit("max\n"), None);
    assert_eq!(parse_limit("9223372036854771712\n"), None);
    assert_eq!(parse_limit("1073741824\n"), Some(1 << 30));
    let events = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n";
    assert_eq!(keyed(events, "oom_kill"), 2);
    assert_eq!(keyed(events, "max"), 4);
    assert_eq!(
        keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "oom_kill"),
        1
    );
    assert_eq!(keyed("", "max"), 0);
}

/// A fake v2 run directory: the counters the kernel would write.
#[test]
fn v2_stats_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    for (file, text) in [
        ("memory.max", "1073741824\n"),
        ("memory.peak", "52428800\n"),
        ("memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
        ("pids.max", "256\n"),
        ("pids.events", "max 7\n"),
        ("cpu.stat", "usage_usec 1500000\nuser_usec 1000000\n"),
    ] {
        std::fs::write(run.join(file), text).unwrap();
    }
    let cg = RunCgroup {
        version: Version::V2,
        dirs: vec![run.clone()],
    };
    assert_eq!(
        cg.stats(),
        Stats {
            memory_limit: Some(1 << 30),
            pids_limit: Some(256),
            memory_peak: Some(50 << 20),
            oom_kills: 1,
            pids_refused: 7,
            cpu: Some(Duration::from_millis(1500)),
        }
    );
    assert_eq!(cg.env_value(), run.as_os_str());
}

#[test]
fn a_v1_host_that_moves_wrappers_without_favordynmods_is_told_what_each_run_costs() {
    assert!(!favors_dynmods(MOUNTINFO));
    let with = MOUNTINFO.replace("rw,memory", "rw,favordynmods,memory");
    assert!(favors_dynmods(&with));
    let v2 = MOUNTINFO.replace("rw,nsdelegate", "rw,nsdelegate,favordynmods");
    assert!(favors_dynmods(&v2));
    let slow = Cgroups {
        version: Version::V1,
        parents: vec!["/sys/fs/cgroup/pids/x".into()],
        memory: false,
        pids: true,
        next: AtomicU64::new(0),
        favordynmods: false,
        how: String::new(),
        hop: Err("EACCES".into()),
    };
    assert!(
        slow.describe().contains("favordynmods"),
        "{}",
        slow.describe()
    );
    let fast = Cgroups {
        favordynmods: true,
        ..slow
    };
    assert!(
        !fast.describe().contains("favordynmods"),
        "{}",
        fast.describe()
    );
    // Born in their cgroups: no move, nothing to save.
    let hopping = Cgroups {
        favordynmods: false,
        hop: Ok(Home::open(&[]).unwrap()),
        ..fast
    };
    let line = hopping.describe();
    assert!(!line.contains("favordynmods"), "{line}");
    assert!(line.contains("no process is moved"), "{line}");
}

/// A session's CPU time as it goes: v2's cpu.stat, v1's cpuacct.usage;
/// none once the cgroup is gone.
#[test]
fn the_cpu_meter_reads_the_cgroups_counter() {
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("v2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(
        v2.join("cpu.stat"),
        "usage_usec 2500000\nuser_usec 2000000\n",
    )
    .unwrap();
    let cg = RunCgroup {
        version: Version::V2,
        dirs: vec![v2.clone()],
    };
    let meter = cg.cpu_meter().unwrap();
    assert_eq!(meter.read(), Some(Duration::from_millis(2500)));
    std::fs::remove_dir_all(&v2).unwrap();
    assert_eq!(meter.read(), None);
    let (pids, cpuacct) = (dir.path().join("pids"), dir.path().join("cpuacct"));
    std::fs::create_dir(&pids).unwrap();
    std::fs::create_dir(&cpuacct).unwrap();
    std::fs::write(cpuacct.join("cpuacct.usage"), "3000000000\n").unwrap();
    let cg = RunCgroup {
        version: Version::V1,
        dirs: vec![pids.clone(), cpuacct],
    };
    assert_eq!(cg.cpu_meter().unwrap().read(), Some(Duration::from_secs(3)));
    let cg = RunCgroup {
        version: Version::V1,
        dirs: vec![pids],
    };
    assert!(cg.cpu_meter().is_none());
}

/// A run's cgroup holds what the limits table says each controller holds,
/// in the unit the kernel counts.
#[test]
fn a_runs_cgroup_holds_the_limits_the_table_gives_its_controllers() {
    let env = crate::testing::env("python")
        .with("limits.memory_mb", serde_json::json!(300))
        .with("limits.pids", serde_json::json!(24))
        .build();
    let run = RunLimits::from(&env.limits);
    let mut held = 0;
    for limit in crate::catalog::limits::LIMITS {
        if let Some(controller) = limit.cgroup {
            assert_eq!(run.of(controller), limit.base(&env.limits), "{}", limit.key);
            held += 1;
        }
    }
    assert_eq!(held, 2, "a controller the cgroup code does not write");
}
