//! A real PostgreSQL for the suites (Debian's, spec/test-peers.md): one throwaway cluster per
//! test binary, made at its first use by `initdb` and `postgres` in a directory of its own (as
//! the `postgres` user when the tests run as root), and a fresh database per test
//! ([`database`]). The cluster never outlives the binary: an `atexit` hook shuts it down
//! (fast shutdown, awaited) and removes its directory, and the postmaster carries
//! `PR_SET_PDEATHSIG` from a keeper thread should the binary die without exiting.
//!
//! A second cluster, also started once per binary at its first use, speaks TLS
//! ([`tls_database`]): `ssl=on` with a server certificate for `localhost` from a test CA
//! made here with rcgen, and a `pg_hba.conf` that takes TCP connections only over TLS
//! (`hostssl`); the harness's own connections to it go through its Unix socket.
//!
//! [`forwarder`] is a TCP forwarder a test puts between a lead and the cluster, so it can
//! cut the network between them; [`leads`] starts `antler up` leads with their gateways on
//! a database of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod forwarder;
pub mod leads;

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The directories of the clusters, `/tmp/antler-pg-<pid of the test binary>`.
const DIR_PREFIX: &str = "antler-pg-";

/// The running cluster of this binary.
struct Cluster {
    port: u16,
    dir: PathBuf,
    /// The postmaster, a child of this process.
    pid: i32,
    /// The CA that signed the server's certificate, when the cluster speaks TLS.
    ca: Option<PathBuf>,
}

/// A database made for one test.
pub struct TestDatabase {
    /// `postgres://postgres@127.0.0.1:PORT/NAME`.
    pub dsn: String,
    /// The cluster's TCP port on 127.0.0.1.
    pub port: u16,
    name: String,
}

impl TestDatabase {
    /// The same database dialed at another port of 127.0.0.1 (a forwarder to [`Self::port`]).
    pub fn dsn_via(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{}", self.name)
    }
}

/// A fresh, empty database on this binary's cluster (started on the first call). `label`
/// names it (lowercase letters, digits, `_`), with a counter so each call gets its own.
pub async fn database(label: &str) -> TestDatabase {
    assert!(
        label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
        "a database label is [a-z0-9_]: {label}"
    );
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let cluster = tokio::task::spawn_blocking(cluster).await.unwrap();
    let name = format!("{label}_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let admin = connect(&cluster.dsn("postgres")).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    TestDatabase {
        dsn: cluster.dsn(&name),
        port: cluster.port,
        name,
    }
}

/// A plain client of `dsn` for a test's own SQL (its connection is driven by a task of the
/// test's runtime and ends with the client).
pub async fn connect(dsn: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {dsn}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A fresh database on this binary's TLS cluster (started on the first call).
pub struct TlsDatabase {
    pub port: u16,
    pub name: String,
    /// The PEM of the CA that signed the server's certificate (which names `localhost`).
    pub ca: PathBuf,
    /// The cluster's `postgres` database through its Unix socket, without TLS, for a
    /// test's own checks (`pg_stat_ssl`).
    pub admin_dsn: String,
}

impl TlsDatabase {
    /// `postgres://postgres@HOST:PORT/NAME?PARAMS`; `localhost` is dialed at 127.0.0.1
    /// (`hostaddr`: the name is what TLS checks), where the server listens, whatever else
    /// the machine resolves it to.
    pub fn dsn(&self, host: &str, params: &str) -> String {
        let hostaddr = if host == "localhost" {
            "hostaddr=127.0.0.1&"
        } else {
            ""
        };
        format!(
            "postgres://postgres@{host}:{}/{}?{hostaddr}{params}",
            self.port, self.name
        )
    }
}

/// A fresh, empty database on this binary's TLS cluster: TCP connections only over TLS.
pub async fn tls_database(label: &str) -> TlsDatabase {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let cluster = tokio::task::spawn_blocking(tls_cluster).await.unwrap();
    let name = format!("{label}_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let admin = connect(&cluster.socket_dsn("postgres")).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    TlsDatabase {
        port: cluster.port,
        name,
        ca: cluster.ca.clone().unwrap(),
        admin_dsn: cluster.socket_dsn("postgres"),
    }
}

impl Cluster {
    fn dsn(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Through the Unix socket in the cluster's directory (`local … trust`, no TLS).
    fn socket_dsn(&self, database: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={database}",
            self.dir.display(),
            self.port
        )
    }
}

/// This binary's clusters, once started: the plain one and the TLS one.
static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static TLS_CLUSTER: OnceLock<Cluster> = OnceLock::new();

fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let cluster = start(false);
        // SAFETY: registers a plain function; it runs at exit, when the lock is set.
        unsafe { libc::atexit(stop_at_exit) };
        cluster
    })
}

fn tls_cluster() -> &'static Cluster {
    TLS_CLUSTER.get_or_init(|| {
        let cluster = start(true);
        // SAFETY: as in `cluster`.
        unsafe { libc::atexit(stop_tls_at_exit) };
        cluster
    })
}

extern "C" fn stop_at_exit() {
    if let Some(cluster) = CLUSTER.get() {
        stop(cluster);
    }
}

extern "C" fn stop_tls_at_exit() {
    if let Some(cluster) = TLS_CLUSTER.get() {
        stop(cluster);
    }
}

/// At exit: fast shutdown of the postmaster, awaited (SIGKILL after 30 s), then the
/// cluster's directory removed.
fn stop(cluster: &Cluster) {
    // SAFETY: signals and reaps our own child.
    unsafe {
        libc::kill(cluster.pid, libc::SIGINT);
        let mut status = 0;
        let until = Instant::now() + Duration::from_secs(30);
        while libc::waitpid(cluster.pid, &mut status, libc::WNOHANG) == 0 {
            if Instant::now() > until {
                libc::kill(cluster.pid, libc::SIGKILL);
                libc::waitpid(cluster.pid, &mut status, 0);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let _ = std::fs::remove_dir_all(&cluster.dir);
}

/// Debian's PostgreSQL binaries: `ANTLER_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/N/bin`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ANTLER_TEST_PG_BIN") {
        return dir.into();
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|v| Path::new(&format!("/usr/lib/postgresql/{v}/bin/postgres")).exists())
        .max();
    match newest {
        Some(v) => format!("/usr/lib/postgresql/{v}/bin").into(),
        None => panic!(
            "PostgreSQL is missing: `apt-get install postgresql-15` (scripts/test.sh does this), \
             or set ANTLER_TEST_PG_BIN to the directory holding initdb and postgres"
        ),
    }
}

/// The `postgres` user's ids when the tests run as root (PostgreSQL refuses root), else
/// `None`: the cluster runs as the tests' own user.
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = CString::new("postgres").unwrap();
    // SAFETY: getpwnam with a valid C string; the entry is read at once, before any other
    // passwd call (the tests make none).
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !entry.is_null(),
        "running as root needs the `postgres` user (Debian's postgresql package makes it)"
    );
    // SAFETY: non-null, checked above.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Some((uid, gid))
}

fn as_server_user(command: &mut Command, user: Option<(u32, u32)>) {
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
}

/// The cluster's directory, after removing those of binaries that have exited without
/// removing theirs.
fn make_dir(suffix: &str) -> PathBuf {
    let tmp = Path::new("/tmp");
    for entry in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|n| n.split('-').next());
        if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("{DIR_PREFIX}{}{suffix}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The test CA and a server certificate for `localhost` it signed, in `dir` (`ca.crt`,
/// `server.crt`, `server.key`: the key readable by the server's user only, as PostgreSQL
/// requires). Returns the CA's path.
fn write_tls_files(dir: &Path, user: Option<(u32, u32)>) -> PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use std::os::unix::fs::PermissionsExt;

    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "Antler test PostgreSQL CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_cert = server.signed_by(&key, &issuer).unwrap();
    for (name, pem) in [
        ("ca.crt", ca_cert.pem()),
        ("server.crt", server_cert.pem()),
        ("server.key", key.serialize_pem()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        }
    }
    dir.join("ca.crt")
}

/// The role the TLS cluster authenticates by password (SCRAM), for channel binding.
pub const SCRAM_ROLE: &str = "antler_scram";

/// Local connections trusted (the harness's), TCP ones only over TLS: by password for
/// [`SCRAM_ROLE`], trusted for the rest.
const TLS_HBA: &str = "local all all trust\n\
    hostssl all antler_scram 127.0.0.1/32 scram-sha-256\n\
    hostssl all all 127.0.0.1/32 trust\n";

/// `initdb`, then the postmaster from a keeper thread; returns once it accepts connections.
/// With `tls`, the server has `ssl=on` and takes TCP connections only over TLS.
fn start(tls: bool) -> Cluster {
    let bin = bin_dir();
    let user = server_user();
    let dir = make_dir(if tls { "-tls" } else { "" });
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    }
    let data = dir.join("data");
    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "-A", "trust", "--no-sync"])
        .args(["-E", "UTF8", "--locale=C"])
        .current_dir(&dir)
        .stdin(Stdio::null());
    as_server_user(&mut initdb, user);
    let out = initdb.output().expect("run initdb");
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ca = tls.then(|| {
        std::fs::write(data.join("pg_hba.conf"), TLS_HBA).unwrap();
        write_tls_files(&dir, user)
    });

    let port = free_port();
    let log = std::fs::File::create(dir.join("postgres.log")).unwrap();
    let mut postgres = Command::new(bin.join("postgres"));
    postgres
        .arg("-D")
        .arg(&data)
        .arg("-k")
        .arg(&dir)
        .args(["-p", &port.to_string()])
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .args(if tls {
            vec![
                "-c".to_owned(),
                "ssl=on".to_owned(),
                "-c".to_owned(),
                format!("ssl_cert_file={}", dir.join("server.crt").display()),
                "-c".to_owned(),
                format!("ssl_key_file={}", dir.join("server.key").display()),
            ]
        } else {
            Vec::new()
        })
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    as_server_user(&mut postgres, user);
    // SAFETY: prctl is async-signal-safe; the closure only calls it. It runs after the
    // change of user, which would otherwise clear the parent-death signal.
    unsafe {
        postgres.pre_exec(|| {
            // SIGQUIT: the postmaster's immediate shutdown (its children go with it).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // The parent-death signal follows the thread that forked: one that lives as long as
    // the binary.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("postgres-keeper".into())
        .spawn(move || {
            let _ = tx.send(postgres.spawn().map(|child| child.id()));
            loop {
                std::thread::park();
            }
        })
        .unwrap();
    let pid = rx
        .recv()
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start postgres: {e}")) as i32;

    // Ready when postmaster.pid's status line says so (what `pg_ctl -w` waits for).
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let status = std::fs::read_to_string(data.join("postmaster.pid")).unwrap_or_default();
        if status.lines().nth(7).map(str::trim) == Some("ready") {
            return Cluster { port, dir, pid, ca };
        }
        let mut wait = 0;
        // SAFETY: reaps the child if it exited; WNOHANG never blocks.
        let exited = unsafe { libc::waitpid(pid, &mut wait, libc::WNOHANG) } == pid;
        let log = || std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
        assert!(!exited, "postgres exited at start: {}", log());
        assert!(
            Instant::now() < until,
            "postgres was not ready within 60 s: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
