//! A second handle on one dialed connection's socket, for callers on the connection's home
//! runtime: a duplicate of the socket registered with that runtime's reactor, so a caller
//! waiting for its reply is woken by the kernel on its own thread and reads the reply
//! itself (see `Connection::request`), instead of the I/O thread reading it and waking
//! the caller across threads. Over TLS the caller reads through the TLS session the
//! connection's halves share ([`crate::tls::SharedTls`]). The I/O thread's reader still
//! reads the same socket; the connection's inbox lock decides who reads at any moment.

use std::{
    io::{self, Read},
    os::fd::{AsFd, AsRawFd, OwnedFd, RawFd},
    sync::{Arc, Mutex},
};

use bytes::BytesMut;
use tokio::io::{unix::AsyncFd, Interest};

use crate::tls::SharedTls;

/// The socket as the I/O thread made it, duplicated, not yet registered anywhere.
enum Raw {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

/// The duplicate registered with the home runtime's reactor, for reading only (so the
/// caller's own writes do not wake it).
pub(crate) struct HomeSocket(AsyncFd<Raw>);

impl AsRawFd for Raw {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Raw::Unix(s) => s.as_raw_fd(),
            Raw::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl Raw {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Raw::Unix(s) => (&*s).read(buf),
            Raw::Tcp(s) => (&*s).read(buf),
        }
    }
}

enum Registration {
    NotYet(Raw),
    Ready(Arc<HomeSocket>),
    /// Closed, or the home runtime cannot register sockets: no direct reads.
    Off,
}

/// What one direct read did.
pub(crate) enum Got {
    /// Bytes came (over TLS, maybe no plaintext yet).
    Data,
    /// The peer closed the stream (or sent TLS close_notify).
    Eof,
}

/// A connection's direct read path.
pub(crate) struct Direct {
    home: tokio::runtime::Id,
    tls: Option<SharedTls>,
    registration: Mutex<Registration>,
}

/// A duplicate of a connected socket's descriptor (same socket, another fd).
pub(crate) fn duplicate(stream: &crate::transport::Stream) -> io::Result<OwnedFd> {
    match stream {
        crate::transport::Stream::Unix(s) => s.as_fd().try_clone_to_owned(),
        crate::transport::Stream::Tcp(s) => s.as_fd().try_clone_to_owned(),
    }
}

impl Direct {
    /// A direct path over `fd` (from [`duplicate`]) for callers on `home`; over TLS,
    /// through `tls`. `unix` says which kind of socket `fd` is.
    pub(crate) fn new(
        fd: OwnedFd,
        unix: bool,
        tls: Option<SharedTls>,
        home: &tokio::runtime::Handle,
    ) -> Direct {
        let raw = if unix {
            Raw::Unix(std::os::unix::net::UnixStream::from(fd))
        } else {
            Raw::Tcp(std::net::TcpStream::from(fd))
        };
        Direct {
            home: home.id(),
            tls,
            registration: Mutex::new(Registration::NotYet(raw)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registration> {
        self.registration.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registered socket, if the calling task runs on the home runtime (registered
    /// on first use).
    pub(crate) fn here(&self) -> Option<Arc<HomeSocket>> {
        let current = tokio::runtime::Handle::try_current().ok()?;
        if current.id() != self.home {
            return None;
        }
        let mut reg = self.lock();
        if let Registration::Ready(s) = &*reg {
            return Some(s.clone());
        }
        let Registration::NotYet(raw) = std::mem::replace(&mut *reg, Registration::Off) else {
            return None;
        };
        // Tokio panics when the runtime was built without its I/O driver (and offers no
        // way to ask first): such a runtime simply gets no direct reads.
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `raw` owns its descriptor, which stays open and the same for as long
            // as the `AsyncFd` owns `raw`.
            unsafe { AsyncFd::register_with_interest(raw, Interest::READABLE) }
                .map(HomeSocket)
                .map_err(io::Error::from)
        }));
        match made {
            Ok(Ok(s)) => {
                let s = Arc::new(s);
                *reg = Registration::Ready(s.clone());
                Some(s)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "no direct reads on this connection");
                None
            }
            Err(_) => None,
        }
    }

    /// Drops the duplicate (the connection closed): the socket is closed with its last fd.
    pub(crate) fn close(&self) {
        *self.lock() = Registration::Off;
    }

    /// Reads what the socket has into `buf` (plaintext over TLS) without waiting:
    /// `WouldBlock` when it has nothing (and the readiness is cleared).
    pub(crate) fn read(&self, sock: &HomeSocket, buf: &mut BytesMut) -> io::Result<Got> {
        match &self.tls {
            None => {
                let start = buf.len();
                buf.resize(start + READ_CHUNK, 0);
                let n = sock
                    .0
                    .try_io(Interest::READABLE, |raw| raw.read(&mut buf[start..]));
                buf.truncate(start + *n.as_ref().unwrap_or(&0));
                Ok(if n? == 0 { Got::Eof } else { Got::Data })
            }
            Some(tls) => {
                let mut conn = tls.lock().unwrap_or_else(|p| p.into_inner());
                conn.read_direct(&mut TryRead(sock), buf)
            }
        }
    }

    /// Readiness to read on the home runtime.
    pub(crate) async fn readable(sock: &HomeSocket) -> io::Result<()> {
        // The guard is dropped without clearing: the read that meets `WouldBlock` clears.
        sock.0.readable().await.map(|_| ())
    }
}

/// Room kept free before each direct plaintext read.
const READ_CHUNK: usize = 16 * 1024;

/// A non-blocking `Read` over the registered socket (for rustls).
pub(crate) struct TryRead<'a>(&'a HomeSocket);

impl Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0 .0.try_io(Interest::READABLE, |raw| raw.read(buf))
    }
}
