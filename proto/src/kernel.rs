//! The running kernel's release, where the launcher and `jail-budget`
//! decide by it.

/// Whether this kernel counts `RLIMIT_NPROC` per user namespace and uid
/// (Linux 5.14 and later): `jail-budget` sets the jail's process limit only
/// there, and the launcher's probe and `--check` say so.
pub fn nproc_per_namespace() -> bool {
    running_at_least(5, 14)
}

/// Whether the running kernel's release is at least `major.minor`; a
/// release it cannot read counts as one that is.
pub fn running_at_least(major: u32, minor: u32) -> bool {
    nix::sys::utsname::uname().map_or(true, |name| {
        release_at_least(&name.release().to_string_lossy(), (major, minor))
    })
}

/// Whether a kernel release (`5.10.0-32-amd64`, `6.1.0`) is at least
/// `major.minor`; true when it does not start with two numbers.
fn release_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b) >= (major, minor),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_compared() {
        for (release, at_least) in [
            ("5.14.0-427.el9.x86_64", true),
            ("6.1.0-50-amd64", true),
            ("5.15.0-91-generic", true),
            ("5.13.19", false),
            ("5.10.0-32-amd64", false),
            ("4.18.0-553.el8_10.x86_64", false),
            ("not-a-release", true),
        ] {
            assert_eq!(release_at_least(release, (5, 14)), at_least, "{release}");
        }
    }
}
