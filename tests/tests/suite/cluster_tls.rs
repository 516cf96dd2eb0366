//! TCP between Antler processes is mutual TLS against the cluster CA that `antler cluster
//! init` writes: a real `antler-mcp-host` listens on loopback TCP with its files, and
//! this test dials it as the lead would. A request round trip succeeds; a certificate of
//! another CA, an expired one, none at all, one of the wrong role (either side) and a
//! wrong token are each refused, with the reason in the host's log and in the dialer's
//! error. A real worker's links reach mcp-host over TLS and refuse a host of the wrong
//! role. A host refuses to start plaintext TCP off loopback, or with TLS files that do
//! not fit it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use antler_lead::commands::cluster_init;
use antler_protocol::{
    calls::ControlCalls,
    handshake::{self, HandshakeError},
    link::{dial, dial_expecting, DialError},
    messages::{ControlReply, ControlRequest, Reply, Request},
    tls::{role_dns_name, ClusterTls},
    Address, ConnectionConfig, Identity, Role,
};
use antler_tests::{bin, wait_for};
use rcgen::{CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair};

/// The files `antler cluster init` wrote, in a private directory.
struct Secret {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Secret {
    fn init() -> Secret {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("secret");
        let out = Command::new(bin("antler"))
            .args(["cluster", "init"])
            .arg(&dir)
            .args(["--days", "30"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster init: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Secret { _tmp: tmp, dir }
    }

    fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap()
    }

    fn token(&self) -> String {
        String::from_utf8(self.file("token")).unwrap()
    }

    /// TLS as a process of `role` holds it: the cluster CA, the role's certificate.
    fn tls(&self, role: Role) -> Arc<ClusterTls> {
        Arc::new(
            ClusterTls::from_pem(
                &self.file("ca.crt"),
                &self.file(&format!("{role}.crt")),
                &self.file(&format!("{role}.key")),
            )
            .unwrap(),
        )
    }

    /// A certificate for `role` signed with the cluster's `ca.key`, valid from
    /// `not_before` to `not_after`: (certificate PEM, key PEM).
    fn issue(
        &self,
        role: Role,
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> (String, String) {
        let ca_key = KeyPair::from_pem(&String::from_utf8(self.file("ca.key")).unwrap()).unwrap();
        let issuer = Issuer::new(cluster_init::ca_params(), ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = cluster_init::role_params(role).unwrap();
        params.not_before = not_before;
        params.not_after = not_after;
        (
            params.signed_by(&key, &issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    }
}

/// Another CA and a lead certificate it signed: (CA PEM, certificate PEM, key PEM).
fn foreign_ca() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Some other CA");
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![role_dns_name(Role::Lead)])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// A host binary listening on `tcp:127.0.0.1:0` with its role's TLS files; its stderr
/// is its log file. Killed when dropped.
struct TlsHost {
    child: Child,
    log: PathBuf,
    address: Address,
}

impl TlsHost {
    fn start(binary: &str, role: Role, secret: &Secret) -> TlsHost {
        Self::start_with(binary, role, secret, &[], "info")
    }

    /// [`TlsHost::start`] with more arguments and a log filter.
    fn start_with(
        binary: &str,
        role: Role,
        secret: &Secret,
        extra: &[&str],
        log_filter: &str,
    ) -> TlsHost {
        let log = secret.dir.join(format!("{binary}.log"));
        let d = &secret.dir;
        let child = Command::new(bin(binary))
            .args(["--listen", "tcp:127.0.0.1:0"])
            .arg("--token-file")
            .arg(d.join("token"))
            .arg("--tls-ca")
            .arg(d.join("ca.crt"))
            .arg("--tls-cert")
            .arg(d.join(format!("{role}.crt")))
            .arg("--tls-key")
            .arg(d.join(format!("{role}.key")))
            .args(extra)
            .current_dir(d)
            .env("RUST_LOG", log_filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut host = TlsHost {
            child,
            log,
            address: Address::Tcp(String::new()),
        };
        let bound = wait_for(Duration::from_secs(10), || {
            let text = host.log_text();
            let line = text.lines().find(|l| l.contains("listening"))?;
            let at = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address=tcp:"))?;
            Some(at.to_string())
        });
        let bound = bound.unwrap_or_else(|| panic!("{binary} did not listen: {}", host.log_text()));
        host.address = Address::Tcp(bound);
        host
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for a warning in the log that contains `reason`.
    fn assert_logged(&self, reason: &str) {
        self.assert_line("WARN", reason);
    }

    /// Waits for a line of `level` in the log that contains `text`.
    fn assert_line(&self, level: &str, text: &str) {
        let reason = text;
        let found = wait_for(Duration::from_secs(10), || {
            self.log_text()
                .lines()
                .any(|l| l.contains(level) && l.contains(reason))
                .then_some(())
        });
        assert!(
            found.is_some(),
            "the log has no {level} line with {reason:?}:\n{}",
            self.log_text()
        );
    }
}

impl Drop for TlsHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lead(secret: &Secret, tls: Arc<ClusterTls>) -> Identity {
    Identity::new(Role::Lead, "test-lead", Some(secret.token())).with_tls(Some(tls))
}

async fn ping(address: &Address, identity: &Identity) -> Result<Vec<u8>, String> {
    let conn = dial_expecting(
        address,
        Role::McpHost,
        identity,
        ConnectionConfig::default(),
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    let reply = conn
        .ping(b"over tls".to_vec(), Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string());
    conn.close("test done");
    reply
}

fn assert_contains(text: &str, part: &str) {
    assert!(text.contains(part), "expected {part:?} in: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_round_trip_over_mutual_tls_succeeds() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    let lead = lead(&secret, secret.tls(Role::Lead));
    assert_eq!(ping(&host.address, &lead).await.unwrap(), b"over tls");
    // A worker may call mcp-host too, and a dialer that does not insist on a role
    // learns it from the certificate.
    let worker = Identity::new(Role::Subagent, "w", Some(secret.token()))
        .with_tls(Some(secret.tls(Role::Subagent)));
    let conn = dial(&host.address, &worker, ConnectionConfig::default(), None)
        .await
        .unwrap();
    assert_eq!(conn.peer().role, Role::McpHost);
    conn.close("test done");
    // The listener speaks TLS only: a plaintext peer is refused.
    let plain = Identity::new(Role::Lead, "plain", Some(secret.token()));
    let e = dial(&host.address, &plain, ConnectionConfig::default(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, DialError::Handshake { .. }), "{e}");
    host.assert_logged("the peer does not speak TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_probe_is_not_a_refusal() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    let Address::Tcp(bound) = &host.address else {
        panic!("not tcp")
    };
    // What a Kubernetes tcpSocket probe does: connect, then close without a byte.
    for _ in 0..3 {
        drop(tokio::net::TcpStream::connect(bound).await.unwrap());
    }
    let lead = lead(&secret, secret.tls(Role::Lead));
    assert_eq!(ping(&host.address, &lead).await.unwrap(), b"over tls");
    let log = host.log_text();
    assert!(!log.contains("refused a connection"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_another_ca_is_refused_both_ways() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    let (ca, cert, key) = foreign_ca();
    // Our certificate is another CA's: the host refuses it.
    let foreign =
        ClusterTls::from_pem(&secret.file("ca.crt"), cert.as_bytes(), key.as_bytes()).unwrap();
    let e = ping(&host.address, &lead(&secret, Arc::new(foreign)))
        .await
        .unwrap_err();
    assert_contains(
        &e,
        "TLS refused: the peer refused this side's certificate: it is not signed by the peer's cluster CA",
    );
    host.assert_logged("the peer's certificate was refused: it is not signed by the cluster CA");
    // We trust another CA: the host's certificate is refused here.
    let distrustful = ClusterTls::from_pem(
        ca.as_bytes(),
        &secret.file("lead.crt"),
        &secret.file("lead.key"),
    )
    .unwrap();
    let e = ping(&host.address, &lead(&secret, Arc::new(distrustful)))
        .await
        .unwrap_err();
    assert_contains(
        &e,
        "TLS refused: the peer's certificate was refused: it is not signed by the cluster CA",
    );
    host.assert_logged(
        "the peer refused this side's certificate: it is not signed by the peer's cluster CA",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    let now = time::OffsetDateTime::now_utc();
    let (cert, key) = secret.issue(
        Role::Lead,
        now - time::Duration::days(30),
        now - time::Duration::days(1),
    );
    let expired =
        ClusterTls::from_pem(&secret.file("ca.crt"), cert.as_bytes(), key.as_bytes()).unwrap();
    let e = ping(&host.address, &lead(&secret, Arc::new(expired)))
        .await
        .unwrap_err();
    assert_contains(
        &e,
        "TLS refused: the peer refused this side's certificate: it has expired",
    );
    host.assert_logged("the peer's certificate was refused: it expired 1 d ago");
    // The same role's certificate, valid now, from the same CA is accepted.
    let (cert, key) = secret.issue(
        Role::Lead,
        now - time::Duration::days(1),
        now + time::Duration::days(1),
    );
    let fresh =
        ClusterTls::from_pem(&secret.file("ca.crt"), cert.as_bytes(), key.as_bytes()).unwrap();
    assert!(ping(&host.address, &lead(&secret, Arc::new(fresh)))
        .await
        .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_certificate_is_refused() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    // A TLS client that trusts the cluster CA but has no certificate of its own.
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&secret.file("ca.crt")) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let Address::Tcp(at) = &host.address else {
        unreachable!()
    };
    let tcp = tokio::net::TcpStream::connect(at).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(role_dns_name(Role::McpHost)).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("the host's certificate verifies against the cluster CA");
    let (r, w) = tokio::io::split(tls);
    let (mut fr, mut fw) = handshake::framed(Box::new(r), Box::new(w), 1 << 20);
    let me = Identity::new(Role::Lead, "no-cert", Some(secret.token()));
    let e = handshake::connect(&mut fr, &mut fw, &me, at)
        .await
        .unwrap_err();
    assert_eq!(
        e,
        HandshakeError::Tls("the peer requires a certificate and this side presented none".into())
    );
    host.assert_logged("the peer presented no certificate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_the_wrong_role_is_refused_both_ways() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    // A sandbox-host's certificate may not call mcp-host.
    let sandbox = Identity::new(Role::SandboxHost, "sb", Some(secret.token()))
        .with_tls(Some(secret.tls(Role::SandboxHost)));
    let e = ping(&host.address, &sandbox).await.unwrap_err();
    let reason =
        "mcp-host accepts certificates of lead, subagent only; the peer's certificate names sandbox-host";
    assert_contains(&e, &format!("handshake refused by peer: {reason}"));
    host.assert_logged(reason);
    // A hello that claims another role than the certificate names.
    let liar = Identity::new(Role::Lead, "liar", Some(secret.token()))
        .with_tls(Some(secret.tls(Role::SandboxHost)));
    let e = ping(&host.address, &liar).await.unwrap_err();
    let reason = "the hello claims role lead but the peer's certificate names sandbox-host";
    assert_contains(&e, reason);
    host.assert_logged(reason);
    // The lead dials this address for a worker: the host's certificate says mcp-host.
    let lead = lead(&secret, secret.tls(Role::Lead));
    let e = dial_expecting(
        &host.address,
        Role::Subagent,
        &lead,
        ConnectionConfig::default(),
        None,
    )
    .await
    .unwrap_err()
    .to_string();
    assert_contains(
        &e,
        "TLS refused: the peer's certificate was refused: it does not name the role dialed (subagent)",
    );
    host.assert_logged(
        "the peer refused this side's certificate: it does not name the role the peer dialed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_inside_tls() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    let wrong = Identity::new(Role::Lead, "test-lead", Some("not-the-token".into()))
        .with_tls(Some(secret.tls(Role::Lead)));
    let e = ping(&host.address, &wrong).await.unwrap_err();
    assert_contains(&e, "handshake refused by peer: cluster token mismatch");
    host.assert_logged("cluster token mismatch");
}

/// `identity` as a process of another Antler build presents it: another message schema
/// (standing in for a second build, which a test cannot make).
fn of_another_build(identity: Identity) -> Identity {
    Identity {
        schema: handshake::SCHEMA_FINGERPRINT ^ 0x00ff,
        ..identity
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_build_is_refused_at_the_handshake() {
    let secret = Secret::init();
    let host = TlsHost::start("antler-mcp-host", Role::McpHost, &secret);
    let old_lead = of_another_build(lead(&secret, secret.tls(Role::Lead)));
    let e = ping(&host.address, &old_lead).await.unwrap_err();
    assert_contains(&e, "handshake refused by peer: message schema mismatch");
    assert_contains(
        &e,
        "every process of a cluster must run the same Antler build",
    );
    host.assert_logged("message schema mismatch");
    // The same build still gets in.
    let lead = lead(&secret, secret.tls(Role::Lead));
    assert_eq!(ping(&host.address, &lead).await.unwrap(), b"over tls");
}

/// Answers pings: the service of the stand-in host below.
struct Pong;

impl antler_protocol::Service for Pong {
    fn call(
        &self,
        request: Request,
        _: antler_protocol::Call,
    ) -> futures::future::BoxFuture<'static, Result<Reply, antler_protocol::RemoteError>> {
        Box::pin(async move {
            match request {
                Request::Control(ControlRequest::Ping { payload }) => {
                    Ok(Reply::Control(ControlReply::Pong { payload }))
                }
                other => Err(antler_protocol::RemoteError::Unsupported(
                    other.kind().into(),
                )),
            }
        })
    }
}

#[test]
fn the_lead_shows_a_host_of_another_build_unlinked_with_the_reason_and_warns_once() {
    let secret = Secret::init();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // mcp-host as another build would serve it: with TLS, the cluster's files and token.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _old_mcp_host = rt
        .block_on(antler_protocol::server::Server::bind(
            &Address::Tcp(format!("127.0.0.1:{port}")),
            of_another_build(
                Identity::new(Role::McpHost, "old-mcp-host", Some(secret.token()))
                    .with_tls(Some(secret.tls(Role::McpHost))),
            ),
            ConnectionConfig::default(),
            Arc::new(Pong),
            Arc::new(antler_protocol::InFlight::default()),
        ))
        .unwrap();
    // No sandbox-host listens at the address named: the mcp-host row is what is checked.
    let idle = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = &secret.dir;
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "antler:\n  cluster_token: {}\n  tls: {{ca: ca.crt, cert: lead.crt, key: lead.key}}\n  cluster:\n    sandbox_hosts: [\"tcp:127.0.0.1:{idle}\"]\n    mcp_hosts: [\"tcp:127.0.0.1:{port}\"]\n",
            secret.token().trim()
        ),
    )
    .unwrap();
    let run = d.join("run");
    let mut lead = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(&run)
        .args(["up", "--config"])
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("lead.log")).unwrap())
        .spawn()
        .unwrap();
    let row = wait_for(Duration::from_secs(30), || {
        let out = antler_tests::antler(&run, &["status", "--json"]);
        let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
        list.into_iter().find(|p| {
            p["role"] == "mcp-host"
                && p["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("message schema mismatch"))
        })
    });
    let table = antler_tests::antler(&run, &["status"]);
    // The link keeps redialing (the old host may be replaced any moment): the dials of
    // these 4 s (about seven), each refused alike, are one warning.
    std::thread::sleep(Duration::from_secs(4));
    let _ = lead.kill();
    let _ = lead.wait();
    let log = std::fs::read_to_string(d.join("lead.log")).unwrap_or_default();
    let row = row.unwrap_or_else(|| panic!("no mcp-host row with the mismatch:\n{log}"));
    assert_eq!(row["healthy"], false, "{row}");
    // The table says it under the host's row, and the lead logged the refusal.
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.lines().any(|l| l.starts_with("  └ ")
            && l.contains("handshake refused by peer: message schema mismatch")),
        "{table}"
    );
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("message schema mismatch"))
        .count();
    assert_eq!(warnings, 1, "{log}");
}

#[test]
fn a_worker_links_to_its_hosts_over_tls_and_checks_their_roles() {
    let secret = Secret::init();
    let mcp = TlsHost::start_with("antler-mcp-host", Role::McpHost, &secret, &[], "debug");
    let Address::Tcp(at) = &mcp.address else {
        unreachable!()
    };
    let at = format!("tcp:{at}");
    // The worker's mcp-host link connects; its sandbox-host link is pointed at the same
    // mcp-host, whose certificate does not name sandbox-host.
    let worker = TlsHost::start_with(
        "antler-subagent",
        Role::Subagent,
        &secret,
        &["--mcp-host", &at, "--sandbox-host", &at],
        "info",
    );
    // The only line naming the worker's node is the connection's.
    mcp.assert_line("DEBUG", "role=subagent node=subagent-0");
    worker.assert_logged("peer refused the link address=tcp:127.0.0.1:");
    worker.assert_logged(
        "TLS refused: the peer's certificate was refused: it does not name the role dialed (sandbox-host)",
    );
    mcp.assert_logged(
        "the peer refused this side's certificate: it does not name the role the peer dialed",
    );
}

/// Runs a host binary that should refuse to start; returns its stderr.
fn refused_start(binary: &str, args: &[&str], cwd: &Path) -> String {
    let out = Command::new(bin(binary))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("ANTLER_TLS_CA")
        .env_remove("ANTLER_TLS_CERT")
        .env_remove("ANTLER_TLS_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{binary} {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_host_refuses_plaintext_off_loopback_and_tls_files_that_do_not_fit() {
    let secret = Secret::init();
    let d = &secret.dir;
    let token = d.join("token");
    let token = token.to_str().unwrap();
    // Refused before it binds anything.
    let e = refused_start(
        "antler-subagent",
        &["--listen", "tcp:0.0.0.0:0", "--token-file", token],
        d,
    );
    assert_contains(
        &e,
        "cannot listen on tcp:0.0.0.0:0: plaintext TCP is allowed only on loopback, and tcp:0.0.0.0:0",
    );
    assert_contains(&e, "--tls-ca, --tls-cert and --tls-key");
    let ca = d.join("ca.crt");
    let e = refused_start(
        "antler-mcp-host",
        &[
            "--listen",
            "tcp:127.0.0.1:0",
            "--token-file",
            token,
            "--tls-ca",
            ca.to_str().unwrap(),
        ],
        d,
    );
    assert_contains(
        &e,
        "TLS needs --tls-ca, --tls-cert and --tls-key together; missing --tls-cert",
    );
    let (cert, key) = (d.join("lead.crt"), d.join("lead.key"));
    let e = refused_start(
        "antler-mcp-host",
        &[
            "--listen",
            "tcp:127.0.0.1:0",
            "--token-file",
            token,
            "--tls-ca",
            ca.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        d,
    );
    assert_contains(&e, "names role lead, not this process's role mcp-host");
}
