//! The writable mounts a jail has, as its /proc/self/mountinfo shows them
//! from inside (the probe prints the lines whose mount is `rw`). A tmpfs
//! is memory no rlimit counts, so each one needs a size; without a cgroup
//! nothing else bounds what a jail writes there. The probe holds `/tmp`
//! and `/workspace` to the sizes the manifest declares and `--check`
//! reports the rest.

/// One mount the jail may write to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writable {
    /// Where the jail sees it (mountinfo's escapes, such as `\040`, kept).
    pub path: String,
    /// The filesystem type (`tmpfs`, `ext4`...).
    pub fstype: String,
    /// A tmpfs's `size=`, in bytes; `None` for a tmpfs without one or any
    /// other filesystem.
    pub bytes: Option<u64>,
}

/// Filesystems whose writes store no data: processes' files, terminals,
/// message queues (bounded by their rlimit).
const NOT_STORAGE: [&str; 6] = ["proc", "devpts", "mqueue", "sysfs", "cgroup", "cgroup2"];

/// A writable mount of the jail, from one line of /proc/self/mountinfo;
/// `None` for a read-only one or one that stores nothing (a device node
/// bound from the host's devtmpfs: /dev/null and the like).
pub fn parse(line: &str) -> Option<Writable> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let dash = fields.iter().position(|f| *f == "-")?;
    let (root, path, options) = (fields.get(3)?, fields.get(4)?, fields.get(5)?);
    let (fstype, superopts) = (fields.get(dash + 1)?, fields.get(dash + 3).unwrap_or(&""));
    if options.split(',').next() != Some("rw") || NOT_STORAGE.contains(fstype) {
        return None;
    }
    if *fstype == "devtmpfs" && *root != "/" {
        return None;
    }
    let bytes = if *fstype == "tmpfs" {
        superopts
            .split(',')
            .find_map(|o| o.strip_prefix("size="))
            .and_then(size_bytes)
    } else {
        None
    };
    Some(Writable {
        path: (*path).to_owned(),
        fstype: (*fstype).to_owned(),
        bytes,
    })
}

/// Adds the writable mount of one line of /proc/self/mountinfo (in mount
/// order) to `mounts`, or removes the one it covers: only the last mount
/// at a path is reachable (the jail cannot unmount; sandboxes built
/// before had an unbounded /tmp under the bounded one).
pub fn add(mounts: &mut Vec<Writable>, line: &str) {
    let Some(path) = line.split_whitespace().nth(4) else {
        return;
    };
    mounts.retain(|m| m.path != path);
    mounts.extend(parse(line));
}

/// A tmpfs `size=` as the kernel shows it (`16384k`, `1g`, bytes).
fn size_bytes(size: &str) -> Option<u64> {
    let (digits, unit) = match size.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => size.split_at(i),
        None => (size, ""),
    };
    let shift = match unit {
        "" => 0,
        "k" | "K" => 10,
        "m" | "M" => 20,
        "g" | "G" => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `--check`'s words for a jail's writable mounts: each bounded one with
/// its size and their total, or every mount that has no bound.
pub fn describe(mounts: &[Writable]) -> String {
    const MIB: u64 = 1024 * 1024;
    let unbounded: Vec<String> = mounts
        .iter()
        .filter(|m| m.bytes.is_none())
        .map(|m| match m.fstype.as_str() {
            "tmpfs" => format!("{} (a tmpfs without a size)", m.path),
            other => format!("{} ({other})", m.path),
        })
        .collect();
    if !unbounded.is_empty() {
        return format!(
            "writable mounts UNBOUNDED: {} (a sandbox built before every writable mount had a \
             size: without a cgroup a jail may fill them with the host's memory; rebuild it)",
            unbounded.join(", ")
        );
    }
    let total: u64 = mounts.iter().filter_map(|m| m.bytes).sum();
    let each: Vec<String> = mounts
        .iter()
        .map(|m| format!("{} {} MiB", m.path, m.bytes.unwrap_or(0) / MIB))
        .collect();
    format!(
        "writable mounts bounded, {} MiB in all ({}), the rest read-only",
        total / MIB,
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Nix-built jail's writable mounts, as a uid's bubblewrap makes them.
    const BOUNDED: &str = "\
66 42 0:41 /newroot / ro,nosuid,nodev,relatime - tmpfs tmpfs rw,uid=65534,gid=65534
67 66 0:42 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
68 66 0:43 / /dev ro,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755,uid=65534,gid=65534
69 68 0:6 /null /dev/null rw,nosuid,relatime - devtmpfs devtmpfs rw,size=12334432k,nr_inodes=3083608,mode=755
75 68 0:44 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,mode=620,ptmxmode=666
78 66 0:46 / /home/sandbox rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=16384k,mode=755
79 66 0:47 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=16384k,mode=755
81 66 0:48 / /workspace rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=65536k,mode=755
83 68 0:49 / /dev/shm rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=16384k,mode=755
90 66 254:0 /nix/store/abc-python /nix/store/abc-python ro,nosuid,nodev,relatime - ext4 /dev/vda rw
";

    fn all(lines: &str) -> Vec<Writable> {
        let mut mounts = Vec::new();
        for line in lines.lines() {
            add(&mut mounts, line);
        }
        mounts
    }

    #[test]
    fn only_writable_storage_is_kept_with_its_size() {
        let mounts = all(BOUNDED);
        let paths: Vec<&str> = mounts.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["/home/sandbox", "/tmp", "/workspace", "/dev/shm"]);
        assert_eq!(mounts[2].bytes, Some(64 << 20));
        assert_eq!(
            describe(&mounts),
            "writable mounts bounded, 112 MiB in all (/home/sandbox 16 MiB, /tmp 16 MiB, \
             /workspace 64 MiB, /dev/shm 16 MiB), the rest read-only"
        );
    }

    #[test]
    fn a_tmpfs_without_a_size_and_a_host_directory_are_unbounded() {
        let lines = BOUNDED.replace("/newroot / ro,", "/newroot / rw,").replace(
            "/home/sandbox rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=16384k,",
            "/home/sandbox rw,nosuid,nodev,relatime - tmpfs tmpfs rw,",
        ) + "91 66 254:0 /srv/data /data rw,relatime - ext4 /dev/vda rw\n";
        let said = describe(&all(&lines));
        assert!(
            said.starts_with(
                "writable mounts UNBOUNDED: / (a tmpfs without a size), /home/sandbox (a tmpfs \
                 without a size), /data (ext4) ("
            ),
            "{said}"
        );
    }

    /// A mount covered by a later one at the same path is out of reach: an
    /// unbounded /tmp under a bounded one, or a read-only bind over a
    /// writable mount.
    #[test]
    fn only_the_last_mount_at_a_path_counts() {
        let covered = BOUNDED.replace(
            "79 66 0:47 / /tmp",
            "77 66 0:40 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755\n79 66 0:47 / /tmp",
        );
        assert_eq!(all(&covered), all(BOUNDED));
        let hidden = format!("{BOUNDED}95 66 254:0 /srv /tmp ro,relatime - ext4 /dev/vda rw\n");
        assert!(all(&hidden).iter().all(|m| m.path != "/tmp"));
    }

    #[test]
    fn sizes_read_in_every_unit() {
        assert_eq!(size_bytes("16384k"), Some(16 << 20));
        assert_eq!(size_bytes("2g"), Some(2 << 30));
        assert_eq!(size_bytes("4096"), Some(4096));
        assert_eq!(size_bytes("10%"), None);
    }
}
