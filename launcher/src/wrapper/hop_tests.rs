//! Tests of the hop against the host's cgroup v1 hierarchies (root on a
//! host that mounts them; elsewhere they say why they did not run): the
//! child is born in the run's cgroups even with `pids.max` 1, the thread
//! ends where it was, and a hop the kernel refuses half-way leaves the
//! thread home and the limit as it was.

use std::ffi::OsStr;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// The v1 controllers a launcher makes run cgroups in.
const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpuacct"];

/// Scratch cgroups: a run directory in each v1 hierarchy of
/// [`CONTROLLERS`] under the calling thread's own, removed on drop.
struct Scratch {
    /// (controller, the thread's own directory, the run's directory, the
    /// run's path as /proc/PID/cgroup shows it)
    dirs: Vec<(&'static str, PathBuf, PathBuf, String)>,
}

impl Scratch {
    /// Made with `pids` in the run's `pids.max`, or why it cannot be.
    fn new(pids: u64) -> Result<Self, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let own = std::fs::read_to_string("/proc/thread-self/cgroup").map_err(|e| e.to_string())?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let name = format!(
            "nsm-hop-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut scratch = Scratch { dirs: Vec::new() };
        for controller in CONTROLLERS {
            let path = own
                .lines()
                .find_map(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, list, path) = (f.next()?, f.next()?, f.next()?);
                    list.split(',').any(|c| c == controller).then_some(path)
                })
                .ok_or(format!("no v1 {controller} hierarchy"))?;
            let mount = mounts
                .lines()
                .filter_map(|l| l.split_once(" - "))
                .find(|(_, after)| {
                    let mut f = after.split(' ');
                    f.next() == Some("cgroup")
                        && f.nth(1)
                            .is_some_and(|o| o.split(',').any(|c| c == controller))
                })
                .and_then(|(before, _)| before.split(' ').nth(4))
                .ok_or(format!("the v1 {controller} hierarchy is not mounted"))?;
            let home = Path::new(mount).join(path.trim_start_matches('/'));
            let run = home.join(&name);
            std::fs::create_dir(&run).map_err(|e| format!("{}: {e}", run.display()))?;
            let shown = format!("{}/{name}", path.trim_end_matches('/'));
            scratch.dirs.push((controller, home, run, shown));
        }
        let (_, _, pids_dir, _) = &scratch.dirs[0];
        std::fs::write(pids_dir.join("pids.max"), pids.to_string()).map_err(|e| e.to_string())?;
        Ok(scratch)
    }

    fn homes(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(_, home, _, _)| home.clone())
            .collect()
    }

    fn runs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|(_, _, run, _)| run.clone()).collect()
    }

    fn pids_max(&self) -> String {
        std::fs::read_to_string(self.dirs[0].2.join("pids.max"))
            .unwrap()
            .trim()
            .to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for (_, _, run, _) in &self.dirs {
            let _ = std::fs::remove_dir(run);
        }
    }
}

/// Scratch cgroups, or `None` (with the reason on stderr) where this
/// test cannot make them: not root, or no v1 hierarchies (a v2 host).
fn scratch(pids: u64) -> Option<Scratch> {
    match Scratch::new(pids) {
        Ok(s) => Some(s),
        Err(why) => {
            let v1 = std::fs::read_to_string("/proc/self/cgroup")
                .is_ok_and(|own| own.lines().any(|l| l.contains(":pids:")));
            assert!(
                !(v1 && super::super::delegation::euid() == 0),
                "root on a v1 host has no scratch cgroup: {why}"
            );
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn thread_cgroups() -> String {
    std::fs::read_to_string("/proc/thread-self/cgroup").unwrap()
}

#[test]
fn a_child_is_born_in_the_run_cgroups_under_a_pids_limit_of_one() {
    let Some(s) = scratch(1) else { return };
    let before = thread_cgroups();
    let home = Home::open(&s.homes()).unwrap();
    let hop = Hop::open(&s.runs(), 1, &home).unwrap();
    let env = [("PATH", OsStr::new("/usr/bin:/bin"))];
    // One process, exec'd at once: it fits in pids.max 1 once the thread
    // that forked it left.
    let cat = Program::new("/bin/cat", &["/proc/self/cgroup".into()], env.into_iter()).unwrap();
    let started = match hop.spawn(&cat, &|| Ok(())) {
        Ok(started) => started,
        Err(Ok(Refused(e))) => panic!("the hop was refused: {e}"),
        Err(Err(e)) => panic!("not started: {e}"),
    };
    assert_eq!(thread_cgroups(), before, "the thread is not back home");
    let mut out = String::new();
    File::from(started.stdout).read_to_string(&mut out).unwrap();
    let status =
        nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(started.pid as i32), None).unwrap();
    assert!(
        matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
        "{status:?}"
    );
    for (controller, _, _, shown) in &s.dirs {
        assert!(
            out.lines()
                .any(|l| l.ends_with(&format!(":{controller}:{shown}"))),
            "the child is not in {controller}:{shown}: {out}"
        );
    }
    assert_eq!(
        s.pids_max(),
        "1",
        "the run's pids limit was not written back"
    );
}

#[test]
fn a_hop_refused_half_way_leaves_the_thread_home() {
    let Some(s) = scratch(5) else { return };
    let before = thread_cgroups();
    let home = Home::open(&s.homes()).unwrap();
    let hop = Hop::open(&s.runs(), 5, &home).unwrap();
    // The memory hierarchy's run cgroup goes away after its files were
    // opened: the kernel refuses the step into it, after the one into the
    // pids hierarchy was made.
    std::fs::remove_dir(&s.dirs[1].2).unwrap();
    let t = Program::new("/bin/true", &[], std::iter::empty()).unwrap();
    match hop.spawn(&t, &|| Ok(())) {
        Err(Ok(Refused(e))) => eprintln!("refused as it should be: {e}"),
        Err(Err(e)) => panic!("an error, not a refusal: {e}"),
        Ok(started) => panic!("started {} in a removed cgroup", started.pid),
    }
    assert_eq!(thread_cgroups(), before, "the thread is not back home");
    assert_eq!(
        s.pids_max(),
        "5",
        "the run's pids limit was not written back"
    );
    // Nothing is left in the pids run cgroup: it can be removed.
    std::fs::remove_dir(&s.dirs[0].2).unwrap();
}
