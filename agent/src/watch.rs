//! Whether anything under the outputs directory changed since it was last
//! listed (inotify), so that a call which writes no output costs one
//! `read` where a listing of the directory before and after it cost eight
//! system calls or more.
//!
//! Everything a listing holds (each regular file's size, inode, times) is
//! watched before it is read: every directory listed, for entries made,
//! removed, renamed in or out, and the directory itself removed or renamed;
//! every entry's own inode, for writes, truncation and changed attributes
//! made through any name (a hard link outside `outputs` too). Any event at
//! all, an overflow of the queue included, makes the next listing read the
//! directory again. Where inotify is unusable (no `/proc` to name an open
//! directory by, the per-user limit on instances or watches reached) every
//! listing reads the directory, as if nothing were known.
//!
//! The one change no event reports is a write through a shared memory
//! mapping; tmpfs (the jail's `/workspace`) does not change the file's
//! times for it either, so a listing never saw it.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// What a listing can see change.
const CHANGES: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);

/// An inotify instance watching what the last listing read.
#[derive(Debug)]
pub struct Watch {
    inotify: Inotify,
}

impl Watch {
    /// A new instance; `None` (said once in the log) where inotify is
    /// unusable.
    pub fn new() -> Option<Self> {
        match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => Some(Watch { inotify }),
            Err(e) => {
                unusable(e);
                None
            }
        }
    }

    /// Watches the directory open as `dir` (its magic link in `/proc`
    /// followed).
    pub fn directory(&self, dir: BorrowedFd<'_>) -> nix::Result<()> {
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let flags = CHANGES | AddWatchFlags::IN_ONLYDIR;
        self.inotify.add_watch(path.as_str(), flags).map(drop)
    }

    /// Watches the entry `name` of the directory open as `dir`, whatever it
    /// is: a symbolic link is watched itself, not followed.
    pub fn entry(&self, dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
        let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        path.extend_from_slice(name.as_bytes());
        let flags = CHANGES | AddWatchFlags::IN_DONT_FOLLOW;
        self.inotify
            .add_watch(OsStr::from_bytes(&path), flags)
            .map(drop)
    }

    /// Whether nothing changed since the last call: every event queued is
    /// read, so what changes from here on is seen by the next call.
    pub fn quiet(&self) -> nix::Result<bool> {
        let mut quiet = true;
        loop {
            match self.inotify.read_events() {
                Ok(_) => quiet = false,
                Err(Errno::EAGAIN) => return Ok(quiet),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Says in the log why inotify is given up on; the caller drops its
/// [`Watch`], so this is said once.
pub fn unusable(e: Errno) {
    tracing::warn!("inotify: {e}; every call lists the outputs directory");
}
