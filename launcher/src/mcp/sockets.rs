//! Standard input and output as stream sockets, read and written on the
//! runtime's reactor.
//!
//! Node's `child_process` (libuv) gives a server socketpairs, not pipes, so
//! Claude Code, Gemini CLI, opencode and the TypeScript SDK start us on
//! sockets. rmcp's `stdio_pipes` drives pipes on the reactor but falls back
//! to tokio's stdin and stdout for anything else, and those read and write
//! on the blocking pool: every message then crosses threads, several
//! wake-ups of other threads a call.
//!
//! A pipe is reopened through `/proc/self/fd` to get an open file
//! description of its own, on which `O_NONBLOCK` is private; a socket
//! cannot be reopened. So the descriptors keep their flags, and each read
//! and write asks for itself not to wait: `recv` and `send` with
//! `MSG_DONTWAIT`. The process's standard streams, and anything that
//! inherits them, stay blocking.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use nix::sys::socket::{MsgFlags, SockType, getsockopt, recv, send, sockopt};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Standard input: read when the reactor says there is something to read.
pub struct Input {
    fd: AsyncFd<OwnedFd>,
}

/// Standard output: written straight away, and registered with the reactor
/// only once a write would wait (the client is not reading). A socket
/// registered for writing wakes the runtime each time the client reads an
/// answer, a wake-up a call for nothing.
pub struct Output {
    fd: OwnedFd,
    full: Option<AsyncFd<OwnedFd>>,
}

/// Standard input and output, when both are stream sockets: `None`
/// otherwise (pipes, a terminal, a file), or if the reactor refuses them.
pub fn stdio() -> Option<(Input, Output)> {
    let input = Input::new(stream_socket(io::stdin().as_raw_fd())?).ok()?;
    let output = Output::new(stream_socket(io::stdout().as_raw_fd())?);
    Some((input, output))
}

/// A duplicate of `fd` (the same description, so the same flags,
/// untouched), if `fd` is a stream socket.
fn stream_socket(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: the standard streams stay open for the process's life.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    if getsockopt(&borrowed, sockopt::SockType).ok()? != SockType::Stream {
        return None;
    }
    borrowed.try_clone_to_owned().ok()
}

impl Input {
    /// Reads `fd`, a stream socket.
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: the AsyncFd owns `fd`, which is neither closed nor
        // replaced while registered.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
        Ok(Self { fd })
    }
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let fd = self.fd.as_raw_fd();
            match ready.try_io(|_| without_waiting(|| recv(fd, unfilled, MsgFlags::MSG_DONTWAIT))) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl Output {
    /// Writes `fd`, a stream socket.
    pub fn new(fd: OwnedFd) -> Self {
        Self { fd, full: None }
    }
}

/// Sends what of `buf` the socket `fd` takes now.
fn send_now(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    // MSG_NOSIGNAL: a client gone is an EPIPE to report, not a signal.
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    without_waiting(|| send(fd.as_raw_fd(), buf, flags))
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let Self { fd, full } = self.get_mut();
        let full = match full {
            Some(full) => full,
            None => match send_now(fd, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // SAFETY: the AsyncFd owns this duplicate, which is
                    // neither closed nor replaced while registered.
                    let writable = unsafe {
                        AsyncFd::register_with_interest(fd.try_clone()?, Interest::WRITABLE)?
                    };
                    full.insert(writable)
                }
                done => return Poll::Ready(done),
            },
        };
        loop {
            let mut ready = ready!(full.poll_write_ready(cx))?;
            match ready.try_io(|_| send_now(fd, buf)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    /// Nothing is buffered here: a write that returned was sent.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// As tokio's stdout: nothing to shut, the socket closes with the
    /// process (the descriptor may be shared; a `shutdown` would end it for
    /// every holder).
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Runs `op` again when a signal interrupted it; its other errors as I/O
/// errors (EAGAIN becomes `WouldBlock`, which clears the readiness).
fn without_waiting(mut op: impl FnMut() -> nix::Result<usize>) -> io::Result<usize> {
    loop {
        match op() {
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn flags(fd: RawFd) -> i32 {
        // SAFETY: F_GETFL only reads the flags of a live descriptor.
        unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFL) }
    }

    #[tokio::test]
    async fn a_socketpair_round_trips_and_ends_at_its_peers_close() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut reader = Input::new(ours.try_clone().unwrap().into()).unwrap();
        let mut writer = Output::new(ours.into());
        let mut peer = tokio::net::UnixStream::from_std({
            theirs.set_nonblocking(true).unwrap();
            theirs
        })
        .unwrap();
        writer.write_all(b"answer\n").await.unwrap();
        let mut got = [0u8; 7];
        peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer\n");
        peer.write_all(b"request\n").await.unwrap();
        drop(peer);
        let mut all = Vec::new();
        reader.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"request\n");
    }

    /// A write larger than the socket takes waits for the peer to read, and
    /// none of it is lost; the descriptor's own flags stay blocking.
    #[tokio::test]
    async fn a_full_socket_waits_and_its_flags_stay_blocking() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let before = flags(ours.as_raw_fd());
        assert_eq!(before & nix::libc::O_NONBLOCK, 0);
        let kept = ours.try_clone().unwrap();
        let mut writer = Output::new(ours.into());
        let big = vec![7u8; 8 << 20];
        let sent = big.clone();
        let writing = tokio::spawn(async move {
            writer.write_all(&sent).await.unwrap();
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!writing.is_finished(), "8 MiB fit in the socket at once");
        assert_eq!(flags(kept.as_raw_fd()), before);
        let reading = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut got = vec![0u8; 8 << 20];
            (&theirs).read_exact(&mut got).unwrap();
            got
        });
        // A guard against a hang, not a timing: a write that is never woken
        // fails here.
        let guard = std::time::Duration::from_secs(30);
        tokio::time::timeout(guard, writing)
            .await
            .expect("the write is woken once the peer reads")
            .unwrap();
        assert!(reading.await.unwrap() == big);
    }

    #[test]
    fn only_stream_sockets_are_taken() {
        let (stream, _peer) = UnixStream::pair().unwrap();
        let (datagram, _dpeer) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let (pipe, _w) = nix::unistd::pipe().unwrap();
        assert!(stream_socket(stream.as_raw_fd()).is_some());
        assert!(stream_socket(datagram.as_raw_fd()).is_none());
        assert!(stream_socket(null.as_raw_fd()).is_none());
        assert!(stream_socket(pipe.as_raw_fd()).is_none());
    }
}
