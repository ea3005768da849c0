//! Reading the agent's non-blocking pipes (and stdin, after poll said so).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;

/// What became of a read.
pub enum Read {
    Data(usize),
    /// Nothing to read now.
    Again,
    Eof,
}

pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Read> {
    loop {
        return match nix::unistd::read(fd, buf) {
            Ok(0) => Ok(Read::Eof),
            Ok(n) => Ok(Read::Data(n)),
            Err(Errno::EAGAIN) => Ok(Read::Again),
            Err(Errno::EINTR) => continue,
            Err(e) => Err(e.into()),
        };
    }
}

/// Whether a read of `n` bytes into `buf` emptied the pipe. A pipe's read
/// returns less than asked only when the pipe held no more, so the reader
/// can stop there without one more read to hear "nothing": what comes
/// later, end of file included, wakes the agent's poll.
pub fn emptied(n: usize, buf: &[u8]) -> bool {
    n < buf.len()
}

/// Reads what `pipe` has now, up to about `budget` bytes, into `sink` (a
/// call's cap, and its live output when it asked); drops the pipe (sets it
/// to `None`) at end of file.
pub fn pump(
    pipe: &mut Option<OwnedFd>,
    buf: &mut [u8],
    budget: usize,
    mut sink: impl FnMut(&[u8]),
) {
    let mut taken = 0;
    while let Some(fd) = pipe {
        match read(fd.as_fd(), buf) {
            Ok(Read::Data(n)) => {
                sink(&buf[..n]);
                taken += n;
                if taken >= budget || emptied(n, buf) {
                    return;
                }
            }
            Ok(Read::Again) => return,
            Ok(Read::Eof) => *pipe = None,
            Err(e) => {
                tracing::warn!("reading the interpreter's output: {e}");
                *pipe = None;
            }
        }
    }
}
