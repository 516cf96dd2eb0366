//! Where a peer listens and how to reach it: Unix sockets (local mode, mode 0600 inside a
//! 0700 runtime directory) and TCP (cluster mode, TLS from [`crate::tls`] on top, or
//! plaintext on loopback only). Streams come out as boxed halves so the rest of the
//! protocol does not care which it is.

use std::{fmt, os::unix::fs::PermissionsExt, path::PathBuf, str::FromStr};

use crate::sock::Sock;
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
};

/// A boxed read half.
pub type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// A boxed write half.
pub type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// A listening or connecting address: `unix:PATH` (or a bare path) or `tcp:HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    Unix(PathBuf),
    Tcp(String),
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
            Address::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl FromStr for Address {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix("tcp:") {
            if rest
                .rsplit_once(':')
                .is_none_or(|(_, p)| p.parse::<u16>().is_err())
            {
                return Err(format!(
                    "`{s}` is not a TCP address: expected tcp:HOST:PORT"
                ));
            }
            return Ok(Address::Tcp(rest.to_string()));
        }
        let path = s.strip_prefix("unix:").unwrap_or(s);
        if path.is_empty() {
            return Err("empty address: expected unix:PATH or tcp:HOST:PORT".into());
        }
        Ok(Address::Unix(PathBuf::from(path)))
    }
}

/// A connected socket of either kind, before TLS (if any) and framing.
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    /// Connects to `addr` (TCP with `TCP_NODELAY`).
    pub async fn connect(addr: &Address) -> std::io::Result<Stream> {
        match addr {
            Address::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p).await?)),
            Address::Tcp(a) => {
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
        }
    }

    /// The socket as a connection's [`Sock`] (readiness watched on the I/O thread or by a
    /// waiting caller, see [`crate::sock`]).
    pub fn into_sock(self) -> std::io::Result<Sock> {
        let fd: std::os::fd::OwnedFd = match self {
            Stream::Unix(s) => s.into_std()?.into(),
            Stream::Tcp(s) => s.into_std()?.into(),
        };
        Sock::new(fd)
    }

    /// The plaintext halves, each watched by the runtime that polls it (raw clients,
    /// tests, benches; a connection's socket is a [`Sock`]).
    pub fn into_halves(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
        }
    }
}

/// Connects to `addr` in plaintext, returning both halves (raw clients, tests, benches).
pub async fn connect(addr: &Address) -> std::io::Result<(ReadHalf, WriteHalf)> {
    Ok(Stream::connect(addr).await?.into_halves())
}

/// A bound listener of either kind.
pub enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    /// Binds `addr`. A Unix socket replaces a stale socket file at the path and is made
    /// readable and writable by its owner only (0600).
    pub async fn bind(addr: &Address) -> std::io::Result<Listener> {
        match addr {
            Address::Unix(p) => {
                if let Ok(meta) = std::fs::symlink_metadata(p) {
                    use std::os::unix::fs::FileTypeExt;
                    if meta.file_type().is_socket() {
                        std::fs::remove_file(p)?;
                    } else {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            format!("{} exists and is not a socket", p.display()),
                        ));
                    }
                }
                let l = UnixListener::bind(p)?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))?;
                Ok(Listener::Unix(l, p.clone()))
            }
            Address::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(a).await?)),
        }
    }

    /// The address actually bound (with the real port for `tcp:HOST:0`).
    pub fn local_address(&self) -> Address {
        match self {
            Listener::Unix(_, p) => Address::Unix(p.clone()),
            Listener::Tcp(l) => Address::Tcp(
                l.local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|_| "?".into()),
            ),
        }
    }

    /// Accepts one connection: its socket and a printable peer address.
    pub async fn accept_stream(&self) -> std::io::Result<(Stream, String)> {
        match self {
            Listener::Unix(l, p) => {
                let (s, _) = l.accept().await?;
                Ok((Stream::Unix(s), format!("unix:{}", p.display())))
            }
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Stream::Tcp(s), format!("tcp:{peer}")))
            }
        }
    }

    /// Accepts one plaintext connection: its halves and a printable peer address.
    pub async fn accept(&self) -> std::io::Result<(ReadHalf, WriteHalf, String)> {
        let (s, peer) = self.accept_stream().await?;
        let (r, w) = s.into_halves();
        Ok((r, w, peer))
    }

    /// Removes the socket file of a Unix listener (when draining, so no one new connects).
    pub fn unlink(&self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            "unix:/tmp/a.sock".parse::<Address>(),
            Ok(Address::Unix("/tmp/a.sock".into()))
        );
        assert_eq!(
            "/tmp/a.sock".parse::<Address>(),
            Ok(Address::Unix("/tmp/a.sock".into()))
        );
        assert_eq!(
            "tcp:127.0.0.1:80".parse::<Address>(),
            Ok(Address::Tcp("127.0.0.1:80".into()))
        );
        assert!("tcp:nohost".parse::<Address>().is_err());
        assert!("".parse::<Address>().is_err());
    }
}
