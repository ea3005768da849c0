//! Where the cache is, what of it is trusted, and what it keeps.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::time::{Duration, SystemTime};

use super::*;

fn with(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<std::ffi::OsString> {
    let vars: Vec<(String, std::ffi::OsString)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_os_str().to_owned()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A directory where tests may make what they like (the tempdir is the
/// test's, under a sticky /tmp or a TMPDIR of the user's).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn the_cache_is_under_xdg_cache_home_then_home_and_made_private() {
    let t = scratch();
    let xdg = t.path().join("xdg");
    let home = t.path().join("home");
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", &xdg), ("HOME", &home)]), 8);
    let dir = cache.dir().unwrap();
    let real = fs::canonicalize(&xdg).unwrap();
    assert_eq!(dir, real.join("nix-sandbox-mcp/packages"));
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&real.join("nix-sandbox-mcp")), 0o700);
    let cache = Cache::new(with(&[("HOME", &home)]), 8);
    let dir = cache.dir().unwrap();
    assert!(dir.ends_with(".cache/nix-sandbox-mcp/packages"), "{dir:?}");
    assert!(dir.starts_with(fs::canonicalize(&home).unwrap()), "{dir:?}");
}

#[test]
fn without_either_the_cache_is_a_private_directory_removed_at_the_end() {
    let cache = Cache::new(with(&[]), 8);
    let dir = cache.dir().unwrap();
    let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(
        name.starts_with("nix-sandbox-mcp-packages-") && name.len() == 31,
        "{name}"
    );
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(cache.dir().unwrap(), dir, "made once");
    let other = Cache::new(with(&[]), 8);
    assert_ne!(other.dir().unwrap(), dir, "the name is not predictable");
    drop(cache);
    assert!(!dir.exists(), "the private cache outlived its server");
}

#[test]
fn a_cache_directory_others_may_write_is_not_trusted() {
    let t = scratch();
    let dir = t.path().join("nix-sandbox-mcp");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", t.path())]), 8);
    let e = cache.dir().unwrap_err();
    assert!(
        e.contains("writable by others (mode 777)") && e.contains("remove it"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn a_cache_directory_that_is_a_link_is_not_trusted() {
    let t = scratch();
    let elsewhere = t.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, t.path().join("nix-sandbox-mcp")).unwrap();
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", t.path())]), 8);
    let e = cache.dir().unwrap_err();
    assert!(e.contains("not a directory but a link"), "{e}");
}

#[test]
fn a_cache_directory_of_another_user_is_not_trusted() {
    // As root: a directory another user made; as anyone else: `/`, root's.
    let t = scratch();
    let theirs = t.path().join("nix-sandbox-mcp");
    let (dir, owner) = if euid() == 0 {
        fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        (theirs, 65534)
    } else {
        (PathBuf::from("/"), 0)
    };
    let e = check_own(&dir).unwrap_err();
    assert!(
        e.contains(&format!("belongs to uid {owner}, not to this server's uid")),
        "{e}"
    );
}

#[test]
fn a_cache_under_a_directory_others_may_write_is_not_trusted() {
    let t = scratch();
    let open = t.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", &open.join("cache"))]), 8);
    let e = cache.dir().unwrap_err();
    assert!(e.contains("which another user may change"), "{e}");
    // Sticky, as /tmp is: others cannot replace what is the server's.
    fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", &open.join("cache"))]), 8);
    cache.dir().unwrap();
}

/// A set in `dir`: its GC root (to `target`) and key file, last used
/// `age` ago.
fn set(dir: &Path, stem: &str, age: Duration) {
    symlink("/nix/store/x-target", dir.join(stem)).unwrap();
    let key = dir.join(format!("{stem}.json"));
    fs::write(&key, "{}").unwrap();
    fs::File::options()
        .write(true)
        .open(&key)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
}

#[test]
fn past_the_bound_the_least_recently_used_sets_go_with_their_roots() {
    let t = scratch();
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", t.path())]), 2);
    let dir = cache.dir().unwrap();
    set(&dir, "python-a", Duration::from_secs(300));
    set(&dir, "python-b", Duration::from_secs(200));
    set(&dir, "python-c", Duration::from_secs(100));
    set(&dir, "python-d", Duration::from_secs(0));
    // A root whose key was never written counts as the oldest.
    symlink("/nix/store/x-target", dir.join("python-e")).unwrap();
    Cache::touch(&dir, "python-a");
    let dropped = cache.bound(&dir, |stem| stem == "python-b");
    let mut dropped = dropped;
    dropped.sort();
    assert_eq!(dropped, ["python-c", "python-e"]);
    for gone in ["python-c", "python-e"] {
        assert!(
            fs::symlink_metadata(dir.join(gone)).is_err(),
            "{gone}'s root stayed"
        );
        assert!(
            !dir.join(format!("{gone}.json")).exists(),
            "{gone}'s key stayed"
        );
    }
    for kept in ["python-a", "python-b", "python-d"] {
        assert!(
            fs::symlink_metadata(dir.join(kept)).is_ok(),
            "{kept} was dropped"
        );
    }
}

#[test]
fn an_entry_is_found_only_by_its_key() {
    let t = scratch();
    let cache = Cache::new(with(&[("XDG_CACHE_HOME", t.path())]), 2);
    let dir = cache.dir().unwrap();
    let key = serde_json::json!({"store_path": "/nix/store/x-a", "packages": ["jq"]});
    symlink("/nix/store/x-composed", dir.join("python-1")).unwrap();
    Cache::record(&dir, "python-1", &key).unwrap();
    assert_eq!(
        Cache::find(&dir, "python-1", &key),
        Some(Hit(PathBuf::from("/nix/store/x-composed")))
    );
    let other = serde_json::json!({"store_path": "/nix/store/x-a", "packages": ["rg"]});
    assert_eq!(Cache::find(&dir, "python-1", &other), None);
    assert!(Cache::holds(&dir, "python-1", "/nix/store/x-composed"));
    assert!(!Cache::holds(&dir, "python-1", "/nix/store/x-other"));
}
