//! The jail's view of the store (`--store-view DIR --store-paths LIST`):
//! a tmpfs mounted over DIR (an empty directory of the store, the
//! wrapper's, in this process' own mount namespace) that holds each store
//! path of LIST (the jail's runtime closure, one path a line) bound at its
//! name, the whole tree read-only, nosuid and nodev. Bubblewrap then binds
//! DIR at /nix/store once, where it would bind each path on its own.
//!
//! Why: bubblewrap reads the whole mount table (/proc/self/mountinfo, the
//! host's mounts and every one it made so far) after each bind, to find the
//! new mount's flags, so a closure of N paths cost it N readings of a
//! table that grows with N. Here each path is one mount(2), and bubblewrap
//! finds the tree already read-only and remounts nothing.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};

/// Where every path of a closure lives.
const STORE: &[u8] = b"/nix/store/";

/// The names (`HASH-NAME`) of the store paths `list` holds, one path a
/// line, each once; any line that is not a path directly below
/// /nix/store is an error that names it.
pub fn names(list: &Path) -> Result<Vec<OsString>, String> {
    let text = std::fs::read(list)
        .map_err(|e| format!("cannot read the store paths {}: {e}", list.display()))?;
    let mut names = text
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            name_of(line).ok_or_else(|| {
                format!(
                    "{}: `{}` is not a path of /nix/store",
                    list.display(),
                    String::from_utf8_lossy(line)
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    names.sort();
    names.dedup();
    Ok(names)
}

/// `HASH-NAME` of `/nix/store/HASH-NAME`: one component, not `.` or `..`.
fn name_of(line: &[u8]) -> Option<OsString> {
    let name = line.strip_prefix(STORE)?;
    let plain = !name.is_empty() && !name.contains(&b'/') && name != b"." && name != b"..";
    plain.then(|| OsString::from_vec(name.to_vec()))
}

/// Mounts the view of `names` over `dir`, in this process' mount
/// namespace (which must be its own).
pub fn mount_view(dir: &Path, names: &[OsString]) -> Result<(), String> {
    let at = dir.display();
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("mode=0755,size=64k,nr_inodes={}", names.len() + 16).as_str()),
    )
    .map_err(|e| format!("cannot mount the store view's tmpfs on {at}: {e}"))?;
    let mut bound = Vec::with_capacity(names.len());
    for name in names {
        let source = Path::new(OsStr::from_bytes(STORE)).join(name);
        let target = dir.join(name);
        // Followed as bubblewrap follows it: a symlink's target is bound.
        let is_dir = std::fs::metadata(&source)
            .map_err(|e| format!("cannot show {} in the jail: {e}", source.display()))?
            .is_dir();
        let made = if is_dir {
            std::fs::create_dir(&target)
        } else {
            std::fs::File::create(&target).map(drop)
        };
        made.map_err(|e| format!("cannot make {} in the store view: {e}", target.display()))?;
        mount(
            Some(&source),
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| format!("cannot bind {} in the store view: {e}", source.display()))?;
        bound.push(target);
    }
    read_only(dir, &bound)
}

/// `mount_attr`'s flags (linux/mount.h).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    set: u64,
    clear: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Makes `dir` and every mount below it read-only, nosuid and nodev: one
/// `mount_setattr` (Linux 5.12), else a remount of each that keeps the
/// flags it has (`bound`, then `dir`), as bubblewrap does.
fn read_only(dir: &Path, bound: &[PathBuf]) -> Result<(), String> {
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| format!("a NUL byte in {}", dir.display()))?;
    let attr = MountAttr {
        set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        clear: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads `attr` (its size given) and the
    // NUL-terminated path.
    let done = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_mount_setattr,
            nix::libc::AT_FDCWD,
            path.as_ptr(),
            nix::libc::AT_RECURSIVE,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    match nix::errno::Errno::result(done) {
        Ok(_) => Ok(()),
        Err(nix::errno::Errno::ENOSYS) => bound
            .iter()
            .map(PathBuf::as_path)
            .chain([dir])
            .try_for_each(remount_read_only),
        Err(e) => Err(format!(
            "cannot make the store view on {} read-only: {e}",
            dir.display()
        )),
    }
}

/// Remounts the mount at `path` read-only, nosuid and nodev, keeping the
/// flags it has (a user namespace may not change a locked mount's others).
fn remount_read_only(path: &Path) -> Result<(), String> {
    let kept = nix::sys::statvfs::statvfs(path)
        .map_err(|e| format!("cannot read the flags of {}: {e}", path.display()))?
        .flags()
        .bits();
    let kept = MsFlags::from_bits_truncate(kept as nix::libc::c_ulong)
        & (MsFlags::MS_NOEXEC
            | MsFlags::MS_NOATIME
            | MsFlags::MS_NODIRATIME
            | MsFlags::MS_RELATIME
            | MsFlags::MS_SYNCHRONOUS);
    mount(
        None::<&str>,
        path,
        None::<&str>,
        kept | MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| format!("cannot remount {} read-only: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_component_below_the_store() {
        assert_eq!(
            name_of(b"/nix/store/abc-python3-3.11"),
            Some(OsString::from("abc-python3-3.11"))
        );
        for bad in [
            &b"/nix/store/"[..],
            b"/nix/store/.",
            b"/nix/store/..",
            b"/nix/store/a/b",
            b"/nix/storeabc",
            b"/etc/passwd",
            b"nix/store/abc",
            b"/nix/store/../../etc",
        ] {
            assert_eq!(name_of(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
