//! TLS between a lead and its PostgreSQL (lead/src/ha/tls.rs, docs/ha.md) against a real
//! PostgreSQL with `ssl=on`, a server certificate for `localhost` from a test CA, and a
//! `pg_hba.conf` that takes TCP connections only over TLS (pg_support's TLS cluster):
//! `verify-full` with the right CA connects and opens the leases; a wrong CA, and a host
//! name the certificate does not carry, are refused with a sentence naming the host and the
//! fault (never the password); `verify-ca` accepts the chain whatever the host name;
//! `require` and the default `prefer` encrypt without a CA; a DSN without TLS is refused by
//! the server itself; a password login over verify-full is bound to the server's certificate
//! (SCRAM-SHA-256-PLUS, `channel_binding=require`), and a wrong password is the server's
//! refusal without the password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_lead::ha::{HaError, LeadId, Leases, Postgres};

use crate::pg_support::{connect, tls_database, TlsDatabase, SCRAM_ROLE};

/// The password in the DSNs below: the cluster trusts every TLS connection and never asks
/// for it, so it shows only if an error leaks the DSN.
const PASSWORD: &str = "hunter2-not-in-errors";

fn dsn_with_password(db: &TlsDatabase, host: &str, params: &str) -> String {
    db.dsn(host, params)
        .replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1)
}

/// Whether the lead's connections to `db` (its `application_name`) are all over TLS, and
/// how many there are.
async fn lead_sessions_over_tls(db: &TlsDatabase) -> (i64, bool) {
    let admin = connect(&db.admin_dsn).await;
    let row = admin
        .query_one(
            "SELECT count(*), coalesce(bool_and(s.ssl), false) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s ON s.pid = a.pid \
             WHERE a.datname = $1 AND a.application_name = 'antler-lead'",
            &[&db.name],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// The connect error's hosts and reason; the whole sentence must not carry the password.
fn refusal(result: Result<Postgres, HaError>) -> (String, String) {
    let err = result.err().expect("the connection is refused");
    let text = err.to_string();
    assert!(
        !text.contains(PASSWORD),
        "the error shows the password: {text}"
    );
    match err {
        HaError::Connect { hosts, reason, .. } => (hosts, reason),
        other => panic!("not a connect error: {other:?}"),
    }
}

/// A CA of its own, which signed nothing the server has: its PEM file.
fn foreign_ca(dir: &std::path::Path) -> std::path::PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "Some other CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let path = dir.join("other-ca.crt");
    std::fs::write(&path, ca.self_signed(&key).unwrap().pem()).unwrap();
    path
}

#[tokio::test]
async fn verify_full_with_the_right_ca_connects_and_opens_the_leases() {
    let db = tls_database("tls_full").await;
    let dsn = dsn_with_password(
        &db,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", db.ca.display()),
    );
    let leases = Leases::open(&dsn).await.expect("leases over verify-full");
    let run = "run-over-tls";
    let lead = LeadId::new("lead-tls");
    let lease = leases
        .acquire(run, &lead, Duration::from_secs(600))
        .await
        .unwrap()
        .expect("a new run's lease");
    assert_eq!(leases.current_epoch(run).await.unwrap(), Some(lease));
    let (sessions, all_tls) = lead_sessions_over_tls(&db).await;
    assert!(
        sessions >= 1 && all_tls,
        "{sessions} sessions, all over TLS: {all_tls}"
    );
}

#[tokio::test]
async fn a_wrong_ca_is_refused_naming_the_host_and_the_ca() {
    let db = tls_database("tls_wrong_ca").await;
    let dir = tempfile::tempdir().unwrap();
    let other = foreign_ca(dir.path());
    for mode in ["verify-full", "verify-ca", "require"] {
        let dsn = dsn_with_password(
            &db,
            "localhost",
            &format!("sslmode={mode}&sslrootcert={}", other.display()),
        );
        let (hosts, reason) = refusal(Postgres::connect(&dsn).await);
        assert_eq!(hosts, format!("localhost:{}", db.port));
        assert_eq!(
            reason,
            format!(
                "the server's TLS certificate is not signed by the CA of sslrootcert {} \
                 (sslmode={mode})",
                other.display()
            )
        );
    }
    // Without sslrootcert, the system's CAs, which never signed the test CA.
    let dsn = dsn_with_password(&db, "localhost", "sslmode=verify-full");
    let (_, reason) = refusal(Postgres::connect(&dsn).await);
    assert_eq!(
        reason,
        "the server's TLS certificate is not signed by the system's trusted CAs \
         (sslmode=verify-full)"
    );
    // A CA file that is not there is an error before any connection.
    let missing = dir.path().join("missing.crt");
    let dsn = db.dsn(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", missing.display()),
    );
    let err = Postgres::connect(&dsn).await.err().expect("refused");
    assert!(
        matches!(&err, HaError::Tls(m) if m.starts_with(&format!("sslrootcert {}: cannot read it", missing.display()))),
        "{err}"
    );
}

#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_only_the_chain() {
    let db = tls_database("tls_names").await;
    let ca = format!("sslrootcert={}", db.ca.display());
    // The certificate names `localhost`, not 127.0.0.1.
    let dsn = dsn_with_password(&db, "127.0.0.1", &format!("sslmode=verify-full&{ca}"));
    let (hosts, reason) = refusal(Postgres::connect(&dsn).await);
    assert_eq!(hosts, format!("127.0.0.1:{}", db.port));
    assert!(
        reason.starts_with(
            "the server's TLS certificate does not name the host dialed (sslmode=verify-full \
             checks the host name; verify-ca checks the chain only)"
        ),
        "{reason}"
    );
    let dsn = db.dsn("127.0.0.1", &format!("sslmode=verify-ca&{ca}"));
    let _leases = Leases::open(&dsn)
        .await
        .expect("verify-ca ignores the name");
    let (sessions, all_tls) = lead_sessions_over_tls(&db).await;
    assert!(
        sessions >= 1 && all_tls,
        "{sessions} sessions, all over TLS: {all_tls}"
    );
}

#[tokio::test]
async fn require_and_the_default_encrypt_without_a_ca() {
    let db = tls_database("tls_require").await;
    let _require = Postgres::connect(&db.dsn("127.0.0.1", "sslmode=require"))
        .await
        .expect("sslmode=require");
    // No sslmode: libpq's `prefer`, TLS since the server offers it.
    let _prefer = Postgres::connect(&db.dsn("127.0.0.1", "connect_timeout=5"))
        .await
        .expect("the default sslmode");
    let (sessions, all_tls) = lead_sessions_over_tls(&db).await;
    assert!(
        sessions == 2 && all_tls,
        "{sessions} sessions, all over TLS: {all_tls}"
    );
}

#[tokio::test]
async fn a_dsn_without_tls_is_refused_by_a_hostssl_only_server() {
    let db = tls_database("tls_plain").await;
    let dsn = dsn_with_password(&db, "127.0.0.1", "sslmode=disable");
    let (hosts, reason) = refusal(Postgres::connect(&dsn).await);
    assert_eq!(hosts, format!("127.0.0.1:{}", db.port));
    assert!(
        reason
            .starts_with("the server refused: FATAL: no pg_hba.conf entry for host \"127.0.0.1\"")
            && reason.ends_with("no encryption"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_password_login_is_bound_to_the_servers_certificate() {
    let db = tls_database("tls_scram").await;
    connect(&db.admin_dsn)
        .await
        .batch_execute(&format!(
            "CREATE ROLE {SCRAM_ROLE} LOGIN PASSWORD '{PASSWORD}'"
        ))
        .await
        .unwrap();
    let params = format!(
        "sslmode=verify-full&sslrootcert={}&channel_binding=require",
        db.ca.display()
    );
    let dsn = dsn_with_password(&db, "localhost", &params).replacen(
        &format!("postgres:{PASSWORD}@"),
        &format!("{SCRAM_ROLE}:{PASSWORD}@"),
        1,
    );
    // channel_binding=require: SCRAM-SHA-256-PLUS or no login.
    let _bound = Postgres::connect(&dsn).await.expect("a bound SCRAM login");

    let wrong = dsn.replacen(PASSWORD, "not-the-password", 1);
    let err = Postgres::connect(&wrong).await.err().expect("refused");
    let text = err.to_string();
    assert!(!text.contains("not-the-password"), "{text}");
    assert!(
        text.ends_with(&format!(
            "the server refused: FATAL: password authentication failed for user \"{SCRAM_ROLE}\""
        )),
        "{text}"
    );
}
