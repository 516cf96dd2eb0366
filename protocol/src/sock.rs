//! A connection's socket, made for whoever waits on it. Reads and writes are non-blocking
//! system calls on the descriptor; readiness is watched through registrations with one
//! runtime each:
//! - read readiness, through a duplicate of the descriptor, by the I/O thread's runtime,
//!   or, while a caller waits alone for its reply (its turn), by the caller's own: the
//!   kernel then wakes the caller's thread when the reply comes, not the I/O thread that
//!   would then have to wake it (on a shared or busy machine each wake is a context
//!   switch, or a vCPU brought out of idle). Between turns the caller's runtime keeps the
//!   registration, with the reader task's waker on it, so a next turn there costs no
//!   system call; the I/O thread takes it back at its next heartbeat tick, when a caller on
//!   another runtime takes it, or should that runtime have ended;
//! - write readiness by the I/O thread's runtime, and only from the first write that
//!   would block (a Unix socket signals writability each time its peer reads, which
//!   would wake the I/O thread at every request).
//!
//! Read readiness moves by deregistering the duplicate from one runtime and registering it
//! with another (a system call each), which never closes the socket.

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd, RawFd},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll, Waker},
};

use tokio::io::{unix::AsyncFd, AsyncRead, AsyncWrite, Interest, ReadBuf};

/// The socket of one connection. Clones are handles on the same socket (one reads, one
/// writes, one moves read readiness), so a plain connection needs no lock to split.
#[derive(Clone)]
pub struct Sock {
    inner: Arc<Inner>,
}

/// A descriptor a runtime watches without owning it (the socket, or `Reads::fd`): every
/// registration is dropped before the descriptor is (field order below).
pub(crate) struct Watched(pub(crate) RawFd);

impl AsRawFd for Watched {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

struct Inner {
    reads: Mutex<Reads>,
    /// Write readiness, watched on the I/O thread from the first write that would block.
    writes: Mutex<Option<AsyncFd<Watched>>>,
    fd: OwnedFd,
}

/// Who watches read readiness: a duplicate of the socket, registered with one runtime at
/// a time (moving it costs one system call to leave a runtime and one to join another).
struct Reads {
    watch: Option<AsyncFd<Watched>>,
    /// The caller runtime that has the registration; `None`: the I/O thread.
    holder: Option<Holder>,
    turns: u64,
    fd: OwnedFd,
}

/// A caller's runtime holding read readiness: while a caller's turn is on, it reads the
/// socket itself; between turns the runtime keeps the registration (a next turn there
/// costs no system call) with the reader task's waker on it, so the reader task reads what
/// arrives.
struct Holder {
    runtime: tokio::runtime::Id,
    turn: u64,
    on: bool,
}

impl Reads {
    /// Registers the duplicate with the I/O thread and `task` (the reader task's waker)
    /// with it, and wakes `task` if the socket is readable already.
    fn watch_on_io(&mut self, task: &Waker) {
        self.holder = None;
        self.watch = None;
        self.watch = crate::io::register(&self.fd, Interest::READABLE, true);
        self.arm(task);
    }

    /// Registers `task` with the registration, and wakes it if the socket is readable
    /// already (or unwatched: out of memory, the reader task then fails the connection).
    fn arm(&self, task: &Waker) {
        match self.watch.as_ref() {
            Some(watch) => {
                if watch
                    .poll_read_ready(&mut Context::from_waker(task))
                    .is_ready()
                {
                    task.wake_by_ref();
                }
            }
            None => task.wake_by_ref(),
        }
    }
}

/// Who holds a socket's read readiness ([`Sock::holder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// The I/O thread.
    Io,
    /// A caller runtime, between turns.
    Between,
    /// A caller in its turn, reading the socket itself.
    Turn(u64),
}

impl Sock {
    /// Takes over a connected socket (already non-blocking) from a Tokio stream: read
    /// readiness is watched on the I/O thread.
    pub fn new(fd: OwnedFd) -> io::Result<Sock> {
        let dup = fd.try_clone()?;
        let watch = crate::io::register(&dup, Interest::READABLE, true)
            .ok_or_else(|| io::Error::other("the I/O thread cannot watch a socket"))?;
        Ok(Sock {
            inner: Arc::new(Inner {
                reads: Mutex::new(Reads {
                    watch: Some(watch),
                    holder: None,
                    turns: 0,
                    fd: dup,
                }),
                writes: Mutex::new(None),
                fd,
            }),
        })
    }

    /// The plaintext halves: handles on this socket, one to read and one to write.
    pub fn halves(&self) -> (crate::transport::ReadHalf, crate::transport::WriteHalf) {
        (Box::new(self.clone()), Box::new(self.clone()))
    }

    /// Starts a turn for a caller that waits alone for its reply: read readiness is
    /// watched by the current runtime (moved there unless it holds it already, between
    /// turns). Returns the turn; `None` if another caller is in its turn, or this runtime
    /// cannot watch a socket. `task` is the reader task's waker, registered again should
    /// a move fail.
    pub(crate) fn watch_here(&self, task: &Waker) -> Option<u64> {
        let mut reads = self.inner.reads.lock().ok()?;
        let here = tokio::runtime::Handle::try_current().ok()?.id();
        match reads.holder.as_ref() {
            Some(h) if h.on => return None,
            Some(h) if h.runtime == here => {}
            _ => {
                if crate::io::no_driver_here() {
                    return None;
                }
                // The old registration goes first (a descriptor joins one runtime at a
                // time here), and the reader task's waker on it, with it.
                reads.watch = None;
                reads.watch = crate::io::register(&reads.fd, Interest::READABLE, false);
                if reads.watch.is_none() {
                    reads.watch_on_io(task);
                    return None;
                }
            }
        }
        reads.turns += 1;
        let turn = reads.turns;
        reads.holder = Some(Holder {
            runtime: here,
            turn,
            on: true,
        });
        Some(turn)
    }

    /// Ends a caller's turn: its runtime keeps the registration, with `task` (the reader
    /// task's waker) on it, which is woken should the socket be readable already.
    pub(crate) fn end_turn(&self, turn: u64, task: &Waker) {
        let Ok(mut reads) = self.inner.reads.lock() else {
            return;
        };
        match reads.holder.as_mut() {
            Some(h) if h.on && h.turn == turn => h.on = false,
            _ => return,
        }
        reads.arm(task);
    }

    /// Gives read readiness back to the I/O thread from a caller (`turn`: only while that
    /// turn is on; `None`: from any) and registers `task`, the reader task's waker, with
    /// it; wakes `task` if the socket is readable already.
    pub(crate) fn watch_on_io(&self, turn: Option<u64>, task: &Waker) {
        let Ok(mut reads) = self.inner.reads.lock() else {
            return;
        };
        match (reads.holder.as_ref(), turn) {
            (None, _) => return,
            (Some(h), Some(turn)) if !(h.on && h.turn == turn) => return,
            _ => {}
        }
        reads.watch_on_io(task);
    }

    /// Who holds read readiness now.
    pub(crate) fn holder(&self) -> Held {
        match self.inner.reads.lock().ok().and_then(|r| {
            r.holder.as_ref().map(|h| {
                if h.on {
                    Held::Turn(h.turn)
                } else {
                    Held::Between
                }
            })
        }) {
            Some(held) => held,
            None => Held::Io,
        }
    }

    /// Reads what the socket holds into `buf`: `Ok(n)`, `n` bytes read.
    fn recv(&self, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
        // SAFETY: `recv` writes at most `unfilled.len()` bytes into the unfilled part, and
        // exactly the `n` it returns are then marked initialised and filled.
        unsafe {
            let unfilled = buf.unfilled_mut();
            let n = libc::recv(
                self.inner.fd.as_raw_fd(),
                unfilled.as_mut_ptr().cast(),
                unfilled.len(),
                0,
            );
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            buf.assume_init(n);
            buf.advance(n);
            Ok(n)
        }
    }

    /// Reads once readiness says the socket may hold bytes (as Tokio's own sockets do: no
    /// system call that would only say "would block").
    fn poll_recv(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let Ok(mut reads) = self.inner.reads.lock() else {
            return Poll::Ready(Err(io::Error::other("socket state poisoned")));
        };
        loop {
            let Some(watch) = reads.watch.as_ref() else {
                return Poll::Ready(Err(io::Error::other(
                    "the socket's readiness could not be watched",
                )));
            };
            let mut ready = match watch.poll_read_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                // A caller thread's runtime that shut down between its turns: the socket
                // goes back to the I/O thread (and this poll registers with it).
                Poll::Ready(Err(_)) if reads.holder.as_ref().is_some_and(|h| !h.on) => {
                    reads.watch_on_io(Waker::noop());
                    continue;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            let wanted = buf.remaining();
            match self.recv(buf) {
                Ok(n) => {
                    // Less than asked for: the socket is empty (a later arrival marks it
                    // ready again).
                    if n > 0 && n < wanted {
                        ready.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Writes with `send`; once a write would block, only when readiness says the socket
    /// takes bytes again, so frames queued meanwhile leave in one write.
    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        send: impl Fn(&OwnedFd) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let Ok(mut writes) = self.inner.writes.lock() else {
            return Poll::Ready(Err(io::Error::other("socket state poisoned")));
        };
        loop {
            let Some(watch) = writes.as_ref() else {
                // A task's budget, as Tokio's sockets (and `poll_write_ready` below) spend
                // it: a task that sends many frames in one poll runs out, and the rest
                // leave together in the writer task's next write.
                let coop = match tokio::task::coop::poll_proceed(cx) {
                    Poll::Ready(coop) => coop,
                    Poll::Pending => return Poll::Pending,
                };
                match send(&self.inner.fd) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        *writes = crate::io::register(&self.inner.fd, Interest::WRITABLE, true);
                        if writes.is_none() {
                            return Poll::Ready(Err(io::Error::other(
                                "the I/O thread cannot watch a socket",
                            )));
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => {
                        coop.made_progress();
                        return Poll::Ready(r);
                    }
                }
            };
            let mut ready = match watch.poll_write_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match send(&self.inner.fd) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return Poll::Ready(r),
            }
        }
    }
}

fn send(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn send_vectored(fd: &OwnedFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let count = bufs.len().min(1024) as libc::c_int;
    // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix, and each is valid for its
    // length. (A broken pipe is an error here, not a signal: Rust ignores SIGPIPE.)
    let n = unsafe { libc::writev(fd.as_raw_fd(), bufs.as_ptr().cast(), count) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_recv(cx, buf)
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, |fd| send(fd, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, |fd| send_vectored(fd, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: a plain system call on a descriptor this socket owns.
        let r = unsafe { libc::shutdown(self.inner.fd.as_raw_fd(), libc::SHUT_WR) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::NotConnected {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(()))
    }
}
