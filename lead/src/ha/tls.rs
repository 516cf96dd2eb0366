//! TLS to PostgreSQL over rustls (aws-lc-rs, as the rest of the tree): tokio-postgres's
//! `MakeTlsConnect` for the settings [`super::dsn`] read. As libpq does, `verify-full`
//! checks the chain and the host name, `verify-ca` the chain only, and `require`/`prefer`
//! encrypt without checking (unless `sslrootcert` names a file: then the chain is checked).
//! The CAs are `sslrootcert`'s PEM file, or the system's (the platform verifier). The
//! session offers SCRAM's channel binding (`tls-server-end-point`, RFC 5929), so a password
//! login over TLS is bound to the server's certificate. It also turns a failed connect into
//! a sentence that names what went wrong ([`reason`]).

use std::error::Error as _;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::Socket;

use super::dsn::{Roots, SslSettings};
use super::HaError;

/// Makes a TLS session per host tokio-postgres dials, with one client configuration.
#[derive(Clone)]
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
}

impl RustlsConnect {
    /// The connector for `settings`: reads `sslrootcert` and builds the verifier now, so a
    /// missing or empty CA file is an error before any connection is tried.
    pub fn new(settings: &SslSettings) -> Result<Self, HaError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match settings.checks() {
            (false, _) => Arc::new(Unchecked {
                provider: provider.clone(),
            }),
            (true, check_name) => {
                let full = chain_verifier(&settings.roots(), provider.clone())?;
                if check_name {
                    full
                } else {
                    Arc::new(ChainOnly { inner: full })
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| HaError::Tls(format!("TLS setup failed: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

/// A verifier of the chain and the host name against `roots`.
fn chain_verifier(
    roots: &Roots,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, HaError> {
    match roots {
        Roots::System => rustls_platform_verifier::Verifier::new(provider)
            .map(|v| Arc::new(v) as Arc<dyn ServerCertVerifier>)
            .map_err(|e| HaError::Tls(format!("cannot load the system's trusted CAs: {e}"))),
        Roots::File(path) => {
            let store = read_roots(path)?;
            WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                .build()
                .map(|v| v as Arc<dyn ServerCertVerifier>)
                .map_err(|e| HaError::Tls(format!("sslrootcert {}: {e}", path.display())))
        }
    }
}

/// The CA certificates of a PEM file.
fn read_roots(path: &Path) -> Result<RootCertStore, HaError> {
    let bad = |reason: String| HaError::Tls(format!("sslrootcert {}: {reason}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(format!("not a PEM certificate file: {e}")))?;
        store
            .add(cert)
            .map_err(|e| bad(format!("not a CA certificate: {e}")))?;
    }
    if store.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    Ok(store)
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream<Socket>;
    type TlsConnect = RustlsConnectHost;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnectHost, Self::Error> {
        Ok(RustlsConnectHost {
            config: self.config.clone(),
            name: ServerName::try_from(host.to_owned())?,
        })
    }
}

/// The TLS handshake with one host.
pub struct RustlsConnectHost {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnectHost
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move { connector.connect(self.name, stream).await.map(RustlsStream) })
    }
}

/// A TLS session with PostgreSQL.
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    /// `tls-server-end-point`: the hash of the server's certificate, which SCRAM-SHA-256-PLUS
    /// signs into the login; none for a certificate whose hash RFC 5929 leaves undefined
    /// (Ed25519, RSA-PSS: PostgreSQL offers no `-PLUS` for those either).
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.0.get_ref();
        session
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| server_end_point(cert))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

/// RFC 5929's `tls-server-end-point` of a DER certificate: its hash with the hash function
/// of its signature algorithm, SHA-256 for MD5 and SHA-1 (as PostgreSQL computes it).
fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    use aws_lc_rs::digest;
    /// 1.2.840.113549.1.1 (PKCS #1) and 1.2.840.10045.4 (ECDSA), DER-encoded.
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    let oid = signature_algorithm(cert)?;
    let algorithm = if let Some(rsa) = oid.strip_prefix(RSA) {
        match rsa {
            [4 | 5 | 11] => &digest::SHA256,
            [12] => &digest::SHA384,
            [13] => &digest::SHA512,
            [14] => &digest::SHA224,
            _ => return None,
        }
    } else if let Some(ecdsa) = oid.strip_prefix(ECDSA) {
        match ecdsa {
            [1] | [3, 2] => &digest::SHA256,
            [3, 1] => &digest::SHA224,
            [3, 3] => &digest::SHA384,
            [3, 4] => &digest::SHA512,
            _ => return None,
        }
    } else {
        return None;
    };
    Some(digest::digest(algorithm, cert).as_ref().to_vec())
}

/// The OID of a certificate's `signatureAlgorithm` (X.509: `SEQUENCE { tbsCertificate
/// SEQUENCE, signatureAlgorithm SEQUENCE { algorithm OID, … }, signature BIT STRING }`).
fn signature_algorithm(cert: &[u8]) -> Option<&[u8]> {
    let (certificate, _) = der(cert, 0x30)?;
    let (_tbs, rest) = der(certificate, 0x30)?;
    let (algorithm, _) = der(rest, 0x30)?;
    let (oid, _) = der(algorithm, 0x06)?;
    Some(oid)
}

/// One DER element of tag `tag` at the start of `input`: (its contents, what follows).
fn der(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = if len < 0x80 {
        (usize::from(len), rest)
    } else {
        let n = usize::from(len & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| acc << 8 | usize::from(*b));
        (len, rest)
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// `require`/`prefer` without a CA: the session is encrypted, the certificate not checked
/// (libpq's behaviour); the handshake's signatures still are.
#[derive(Debug)]
struct Unchecked {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `verify-ca`: the full check, forgiving only a certificate that does not name the host.
/// webpki checks the name last, after the chain, its validity and revocation, so a
/// name-only failure means everything else held.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<dyn ServerCertVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
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

/// Why a connect failed, as one sentence: the server's refusal (`FATAL: no pg_hba.conf
/// entry …`), what was wrong with its certificate, or the error with its causes. The DSN's
/// password is in none of them.
pub fn reason(error: &tokio_postgres::Error, settings: &SslSettings) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("the server refused: {db}");
    }
    let mut source = error.source();
    while let Some(e) = source {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return tls_reason(tls, settings);
        }
        if let Some(tls) = e
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return tls_reason(tls, settings);
        }
        source = e.source();
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn tls_reason(error: &rustls::Error, settings: &SslSettings) -> String {
    let roots = match settings.roots() {
        Roots::File(path) => format!("the CA of sslrootcert {}", path.display()),
        Roots::System => "the system's trusted CAs".to_owned(),
    };
    let mode = settings.mode.as_str();
    match error {
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => format!("the server's TLS certificate is not signed by {roots} (sslmode={mode})"),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the server's TLS certificate does not name the host dialed (sslmode={mode} \
             checks the host name; verify-ca checks the chain only): {error}"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => format!("the server's TLS certificate has expired: {error}"),
        other => format!("TLS handshake failed (sslmode={mode}): {other}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use aws_lc_rs::digest;

    fn certificate(alg: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        rcgen::CertificateParams::new(vec!["db.example".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .der()
            .to_vec()
    }

    #[test]
    fn the_end_point_hash_follows_the_signature_algorithm() {
        let p256 = certificate(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(
            server_end_point(&p256).unwrap(),
            digest::digest(&digest::SHA256, &p256).as_ref()
        );
        let p384 = certificate(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(
            server_end_point(&p384).unwrap(),
            digest::digest(&digest::SHA384, &p384).as_ref()
        );
        // Ed25519: RFC 5929 defines no hash, and PostgreSQL offers no -PLUS.
        assert_eq!(server_end_point(&certificate(&rcgen::PKCS_ED25519)), None);
        assert_eq!(server_end_point(b"not a certificate"), None);
        assert_eq!(server_end_point(&p256[..p256.len() / 2]), None);
    }
}
