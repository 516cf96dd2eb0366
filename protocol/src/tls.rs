//! Mutual TLS for TCP between Antler processes: TLS 1.3 only (rustls, aws-lc-rs), both
//! sides presenting a certificate signed by the cluster CA. A certificate names its role
//! as the DNS name `<role>.antler.cluster` (`lead`, `mcp-host`, `sandbox-host`,
//! `subagent`, `cli`); a dialer that knows the role it dials accepts only a certificate
//! naming it, and a listener accepts only the roles [`may_connect`] lets call it. Unix
//! sockets carry no TLS. The cluster token still travels in the handshake, inside TLS.
//! Every refusal is turned into a sentence both sides log ([`describe`]).

use std::{
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        Resumption, WebPkiServerVerifier,
    },
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName, UnixTime},
    server::{NoServerSessionStorage, ParsedCertificate, WebPkiClientVerifier},
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    ServerConfig, SignatureScheme,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};

use crate::{
    handshake::{Role, HANDSHAKE_TIMEOUT},
    transport::{ReadHalf, WriteHalf},
};

/// The domain under which certificates name roles: `mcp-host.antler.cluster`.
pub const ROLE_DOMAIN: &str = "antler.cluster";
/// The environment variables a host reads when `--tls-ca`, `--tls-cert`, `--tls-key` are
/// not given (containers mount a Secret and point these at it).
pub const TLS_CA_ENV: &str = "ANTLER_TLS_CA";
pub const TLS_CERT_ENV: &str = "ANTLER_TLS_CERT";
pub const TLS_KEY_ENV: &str = "ANTLER_TLS_KEY";

/// Every role a certificate may name.
const ROLES: [Role; 5] = [
    Role::Lead,
    Role::McpHost,
    Role::SandboxHost,
    Role::Subagent,
    Role::Cli,
];

/// The DNS name a certificate of `role` carries, e.g. `subagent.antler.cluster`.
pub fn role_dns_name(role: Role) -> String {
    format!("{}.{ROLE_DOMAIN}", role.as_str())
}

/// Who may open a connection to whom. The lead dials every host; workers call tools on
/// mcp-host and sandbox-host; the operator's CLI (and a second lead probing) reaches the
/// lead. Nothing dials a CLI, and no host dials a worker or another host.
pub fn may_connect(caller: Role, listener: Role) -> bool {
    matches!(
        (caller, listener),
        (Role::Cli | Role::Lead, Role::Lead)
            | (
                Role::Lead | Role::Subagent,
                Role::McpHost | Role::SandboxHost
            )
            | (Role::Lead, Role::Subagent)
    )
}

/// The roles a listener of `role` accepts, for refusal messages.
pub fn accepted_callers(listener: Role) -> Vec<Role> {
    ROLES
        .into_iter()
        .filter(|c| may_connect(*c, listener))
        .collect()
}

/// Where a process's CA, certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Pem { path: PathBuf, reason: String },
    #[error("the certificate {} names no Antler role: expected a DNS name such as mcp-host.{ROLE_DOMAIN} (make certificates with `antler cluster init`)", path.display())]
    NoRole { path: PathBuf },
    #[error("the certificate {} names role {found}, not this process's role {expected}", path.display())]
    WrongRole {
        path: PathBuf,
        found: Role,
        expected: Role,
    },
    #[error("the certificate {} does not verify against the CA {}: {reason}", cert.display(), ca.display())]
    Untrusted {
        cert: PathBuf,
        ca: PathBuf,
        reason: String,
    },
    #[error("TLS setup failed: {0}")]
    Setup(String),
}

/// A process's TLS material, ready to dial and accept: the CA it trusts, its certificate
/// (whose role it knows) and key.
pub struct ClusterTls {
    role: Role,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterTls")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            reason: "holds no PEM certificate".into(),
        });
    }
    Ok(certs)
}

/// The role a certificate names, if it names exactly one.
pub fn certificate_role(cert: &CertificateDer<'_>) -> Option<Role> {
    let parsed = ParsedCertificate::try_from(cert).ok()?;
    let mut named = ROLES.into_iter().filter(|r| {
        ServerName::try_from(role_dns_name(*r))
            .is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok())
    });
    match (named.next(), named.next()) {
        (Some(r), None) => Some(r),
        _ => None,
    }
}

impl ClusterTls {
    /// Reads the files and checks them as a process of `role` starts: the certificate
    /// must name `role`, chain to the CA and be valid now, so a misconfiguration fails
    /// the start-up instead of every connection.
    pub fn load(files: &TlsFiles, role: Role) -> Result<ClusterTls, TlsError> {
        let ca = read("CA", &files.ca)?;
        let cert = read("certificate", &files.cert)?;
        let key = read("key", &files.key)?;
        let chain = certs(&files.cert, &cert)?;
        let tls = Self::from_pem_at(&ca, &cert, &key, Some(files))?;
        if tls.role != role {
            return Err(TlsError::WrongRole {
                path: files.cert.clone(),
                found: tls.role,
                expected: role,
            });
        }
        let roots = roots(&files.ca, &ca)?;
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        let name = ServerName::try_from(role_dns_name(role))
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        verifier
            .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
            .map_err(|e| TlsError::Untrusted {
                cert: files.cert.clone(),
                ca: files.ca.clone(),
                reason: describe_local(&e),
            })?;
        Ok(tls)
    }

    /// Builds from PEM text without checking validity dates or the chain (the peer
    /// does): the role is the one the certificate names.
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<ClusterTls, TlsError> {
        Self::from_pem_at(ca, cert, key, None)
    }

    fn from_pem_at(
        ca: &[u8],
        cert: &[u8],
        key: &[u8],
        files: Option<&TlsFiles>,
    ) -> Result<ClusterTls, TlsError> {
        let at = |pick: fn(&TlsFiles) -> &PathBuf, default: &str| {
            files.map_or_else(|| PathBuf::from(default), |f| pick(f).clone())
        };
        let (ca_path, cert_path, key_path) = (
            at(|f| &f.ca, "CA"),
            at(|f| &f.cert, "certificate"),
            at(|f| &f.key, "key"),
        );
        let roots = roots(&ca_path, ca)?;
        let chain = certs(&cert_path, cert)?;
        let role = certificate_role(&chain[0]).ok_or(TlsError::NoRole {
            path: cert_path.clone(),
        })?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Pem {
            path: key_path.clone(),
            reason: format!("not a PEM private key: {e}"),
        })?;
        let provider = provider();
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| TlsError::Setup(e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| TlsError::Pem {
                path: key_path.clone(),
                reason: format!("does not match the certificate: {e}"),
            })?;
        // Connections are long-lived; no resumption, so every connection shows its
        // certificate and is checked in full.
        server.session_storage = Arc::new(NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(RoleVerifier {
                inner: server_verifier,
            }))
            .with_client_auth_cert(chain, key)
            .map_err(|e| TlsError::Pem {
                path: key_path,
                reason: format!("does not match the certificate: {e}"),
            })?;
        client.resumption = Resumption::disabled();
        Ok(ClusterTls {
            role,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The role this process's certificate names.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The TLS client side on a connected socket. With `expect`, the peer's certificate
    /// must name that role; without, any role, which is returned.
    pub async fn connect<IO>(
        &self,
        tcp: IO,
        expect: Option<Role>,
    ) -> Result<(ReadHalf, WriteHalf, Role), String>
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let name = match expect {
            Some(role) => role_dns_name(role),
            None => ROLE_DOMAIN.to_string(),
        };
        let name = ServerName::try_from(name).map_err(|e| e.to_string())?;
        let connector = tokio_rustls::TlsConnector::from(self.client.clone());
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp))
            .await
            .map_err(|_| format!("TLS handshake timed out after {HANDSHAKE_TIMEOUT:?}"))?
            .map_err(|e| describe_io(&e))?;
        let role = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(certificate_role)
            .ok_or_else(|| "the peer's certificate names no Antler role".to_string())?;
        let (r, w) = tokio::io::split(stream);
        Ok((Box::new(r), Box::new(w), role))
    }

    /// The TLS server side on an accepted socket: the peer must present a certificate
    /// of the cluster CA that names a role, which is returned (the handshake then checks
    /// it against [`may_connect`]).
    pub async fn accept(&self, tcp: TcpStream) -> Result<(ReadHalf, WriteHalf, Role), String> {
        probe(&tcp).await?;
        self.accept_io(tcp).await
    }

    /// [`ClusterTls::accept`] over any stream, once [`probe`] found it is not a probe.
    pub async fn accept_io<IO>(&self, tcp: IO) -> Result<(ReadHalf, WriteHalf, Role), String>
    where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.server.clone());
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
            .await
            .map_err(|_| format!("TLS handshake timed out after {HANDSHAKE_TIMEOUT:?}"))?
            .map_err(|e| describe_io(&e))?;
        let role = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(certificate_role)
            .ok_or_else(|| "the peer's certificate names no Antler role".to_string())?;
        let (r, w) = tokio::io::split(stream);
        Ok((Box::new(r), Box::new(w), role))
    }
}

/// Why [`ClusterTls::accept`] gave up on a connection that closed before its first byte.
pub const PROBE: &str = "the peer closed before sending anything (a TCP probe)";

/// Waits for an accepted socket's first byte: a peer that closes before sending one is a
/// TCP probe (a Kubernetes `tcpSocket` check), not a refusal worth a warning ([`PROBE`]).
pub async fn probe(tcp: &TcpStream) -> Result<(), String> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await {
        Ok(Ok(0)) => Err(PROBE.to_owned()),
        Err(_) => Err(format!(
            "TLS handshake timed out after {HANDSHAKE_TIMEOUT:?}"
        )),
        _ => Ok(()),
    }
}

fn roots(path: &Path, pem: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for c in certs(path, pem)? {
        store.add(c).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(store))
}

/// Checks the server's certificate against the CA and the role dialed; dialing the bare
/// [`ROLE_DOMAIN`] accepts whichever single role the certificate names.
#[derive(Debug)]
struct RoleVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for RoleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let any = matches!(server_name, ServerName::DnsName(n) if n.as_ref() == ROLE_DOMAIN);
        let name = match (any, certificate_role(end_entity)) {
            (true, Some(role)) => ServerName::try_from(role_dns_name(role))
                .map_err(|e| rustls::Error::General(e.to_string()))?,
            _ => server_name.to_owned(),
        };
        self.inner
            .verify_server_cert(end_entity, intermediates, &name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The sentence for a TLS failure seen in an I/O error (from the handshake or from the
/// first read after it, where TLS 1.3 delivers the listener's verdict on a client
/// certificate), or `None` when the error is not TLS's.
pub fn tls_reason(e: &std::io::Error) -> Option<String> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .map(describe)
}

fn describe_io(e: &std::io::Error) -> String {
    tls_reason(e).unwrap_or_else(|| format!("TLS handshake failed: {e}"))
}

/// A TLS failure as the sentence both sides log: what this side found wrong with the
/// peer's certificate, or what the peer said was wrong with this side's.
pub fn describe(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            describe_local(e)
        }
        rustls::Error::AlertReceived(alert) => {
            let why = match alert {
                AlertDescription::UnknownCA => "it is not signed by the peer's cluster CA",
                AlertDescription::CertificateExpired => "it has expired",
                AlertDescription::CertificateRequired => {
                    return "the peer requires a certificate and this side presented none".into()
                }
                AlertDescription::BadCertificate => {
                    "it does not name the role the peer dialed, or is malformed"
                }
                AlertDescription::CertificateUnknown => "the peer cannot verify it",
                AlertDescription::ProtocolVersion => {
                    return "the peer does not speak TLS 1.3".into()
                }
                other => return format!("the peer ended the TLS handshake ({other:?})"),
            };
            format!("the peer refused this side's certificate: {why}")
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            "the peer does not speak TLS (plaintext TCP?); both sides need TLS settings".into()
        }
        other => format!("TLS failed: {other}"),
    }
}

/// What is wrong with the peer's certificate, as this side found it.
fn describe_local(e: &rustls::Error) -> String {
    let why = match e {
        rustls::Error::NoCertificatesPresented => {
            return "the peer presented no certificate".into()
        }
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                "it is not signed by the cluster CA".to_string()
            }
            CertificateError::Expired => "it has expired".to_string(),
            CertificateError::ExpiredContext { time, not_after } => format!(
                "it expired {} ago",
                ago(time.as_secs().saturating_sub(not_after.as_secs()))
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "it is not valid yet".to_string()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                let expected = match c {
                    CertificateError::NotValidForNameContext { expected, .. } => {
                        format!(" {}", name_role(expected))
                    }
                    _ => String::new(),
                };
                format!("it does not name the role dialed{expected}")
            }
            other => format!("it is invalid ({other:?})"),
        },
        other => return format!("TLS failed: {other}"),
    };
    format!("the peer's certificate was refused: {why}")
}

/// Seconds as the largest whole unit: `3 d`, `5 h`, `12 s`.
fn ago(secs: u64) -> String {
    match secs {
        s if s >= 86_400 => format!("{} d", s / 86_400),
        s if s >= 3_600 => format!("{} h", s / 3_600),
        s if s >= 60 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// `mcp-host.antler.cluster` as `(mcp-host)`.
fn name_role(name: &ServerName<'_>) -> String {
    let s = match name {
        ServerName::DnsName(n) => n.as_ref().to_string(),
        other => format!("{other:?}"),
    };
    match s.strip_suffix(&format!(".{ROLE_DOMAIN}")) {
        Some(role) => format!("({role})"),
        None => format!("({s})"),
    }
}

/// Plaintext TCP listens and dials only on loopback, so the cluster token never crosses
/// a network in clear: every address `address` resolves to must be a loopback one.
pub async fn check_plaintext(address: &str) -> Result<(), std::io::Error> {
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host(address).await?.collect();
    match resolved.iter().find(|a| !a.ip().is_loopback()) {
        None if !resolved.is_empty() => Ok(()),
        found => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "plaintext TCP is allowed only on loopback, and tcp:{address}{} is not; configure TLS \
                 (--tls-ca, --tls-cert and --tls-key, or {TLS_CA_ENV}, {TLS_CERT_ENV} and \
                 {TLS_KEY_ENV}; for the lead antler.tls in config.yaml; `antler cluster init` \
                 makes the files) or use a loopback address",
                found.map(|a| format!(" ({a})")).unwrap_or_default()
            ),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plaintext_is_allowed_on_loopback_only() {
        for ok in ["127.0.0.1:0", "127.3.4.5:9000", "[::1]:0", "localhost:0"] {
            assert!(check_plaintext(ok).await.is_ok(), "{ok} is loopback");
        }
        for refused in ["0.0.0.0:7000", "10.1.2.3:80", "[::]:7000"] {
            let e = check_plaintext(refused).await.unwrap_err();
            let text = e.to_string();
            assert!(text.contains(&format!("tcp:{refused}")), "{text}");
            assert!(text.contains("only on loopback"), "{text}");
            assert!(text.contains("--tls-ca"), "{text}");
        }
    }

    #[test]
    fn the_roles_that_may_call_each_listener() {
        assert_eq!(
            accepted_callers(Role::McpHost),
            vec![Role::Lead, Role::Subagent]
        );
        assert_eq!(
            accepted_callers(Role::SandboxHost),
            vec![Role::Lead, Role::Subagent]
        );
        assert_eq!(accepted_callers(Role::Subagent), vec![Role::Lead]);
        assert_eq!(accepted_callers(Role::Lead), vec![Role::Lead, Role::Cli]);
        assert!(accepted_callers(Role::Cli).is_empty());
    }

    #[test]
    fn a_certificate_names_its_role_in_a_dns_name() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![role_dns_name(Role::SandboxHost)])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(certificate_role(cert.der()), Some(Role::SandboxHost));
        let two = rcgen::CertificateParams::new(vec![
            role_dns_name(Role::Lead),
            role_dns_name(Role::Subagent),
        ])
        .unwrap()
        .self_signed(&key)
        .unwrap();
        assert_eq!(certificate_role(two.der()), None);
        let none = rcgen::CertificateParams::new(vec!["example.com".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(certificate_role(none.der()), None);
    }
}
