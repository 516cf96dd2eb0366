//! `antler up` leads on one PostgreSQL database, as production runs them: each with its own
//! runtime directory, its gateway on a free loopback port (advertised to the other leads
//! as `http://` + that address), one operator token, and `ANTLER_STORE_DSN` naming the
//! database that holds the runs store and (by default) the run leases. A [`Lead`] is
//! killed, with its children, when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use antler_lead::runs::store::STORE_DSN_ENV;
use antler_tests::{bin, signal, wait_for};
use serde_json::Value;

use crate::lead_support::http_full;

/// A lead started by `antler up`; killed (with its children) when dropped.
pub struct Lead {
    child: Child,
    runtime: PathBuf,
    operator: String,
}

impl Drop for Lead {
    fn drop(&mut self) {
        signal(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A private directory under `/tmp` (readable by the sandboxes' user) with `config` as its
/// config.yaml: where [`Lead::up`] runs its leads.
pub fn workdir(prefix: &str, config: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(dir.path().join("config.yaml"), config).expect("config.yaml");
    dir
}

impl Lead {
    /// `antler up` with `dir`'s config.yaml on `runtime` (its log beside it, `.log`), no
    /// workers, its gateway on a free loopback port with the operator token `operator`,
    /// its runs store and leases in the database `dsn` names.
    pub fn up(dir: &Path, runtime: PathBuf, dsn: &str, operator: &str) -> Lead {
        Lead::up_with(dir, runtime, dsn, operator, &[])
    }

    /// [`Lead::up`] with `env` in the lead's environment too.
    pub fn up_with(
        dir: &Path,
        runtime: PathBuf,
        dsn: &str,
        operator: &str,
        env: &[(&str, &str)],
    ) -> Lead {
        let mut command = Command::new(bin("antler"));
        command
            .arg("--runtime-dir")
            .arg(&runtime)
            .args(["up", "--workers", "0", "--config"])
            .arg(dir.join("config.yaml"))
            .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
            .env("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")
            .env("ANTLER_GATEWAY_TOKEN", operator)
            .env("RUST_LOG", "warn")
            .env_remove("ANTLER_HA_DSN")
            .env_remove("ANTLER_HA_ADVERTISE_URL")
            .env(STORE_DSN_ENV, dsn)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(runtime.with_extension("log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            );
        command.envs(env.iter().copied());
        Lead {
            child: command.spawn().expect("start antler up"),
            runtime,
            operator: operator.to_owned(),
        }
    }

    /// The gateway's address, once it listens and its runs can be prepared.
    pub fn gateway(&self) -> String {
        let addr = wait_for(Duration::from_secs(60), || {
            std::fs::read_to_string(self.runtime.join("gateway.addr")).ok()
        })
        .expect("the gateway listens");
        let addr = addr.trim().to_owned();
        wait_for(Duration::from_secs(60), || {
            (call(&addr, &self.operator, "GET", "/ready", None).0 == 200).then_some(())
        })
        .expect("the lead is ready");
        addr
    }
}

/// `method path` on the gateway at `addr` with `token`: the status and the body as JSON
/// (a body that is not JSON as a string).
pub fn call(
    addr: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string);
    let (code, _, text) = http_full(addr, token, method, path, body.as_deref());
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The gateway URLs in `leads`, sorted, once `count` leads have advertised (polled for up
/// to 30 s; what is there then, otherwise).
pub async fn advertised(pg: &tokio_postgres::Client, count: usize) -> Vec<String> {
    let mut advertised: Vec<String> = Vec::new();
    for _ in 0..300 {
        let rows = pg
            .query("SELECT gateway_url FROM leads ORDER BY gateway_url", &[])
            .await
            .unwrap();
        advertised = rows.iter().map(|r| r.get(0)).collect();
        if advertised.len() == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    advertised
}

/// A run's lease row: (owner, epoch), `None` when it has none.
pub async fn lease(pg: &tokio_postgres::Client, run_id: &str) -> Option<(Option<String>, i64)> {
    pg.query_opt(
        "SELECT lead_id, epoch FROM run_leases WHERE run_id = $1",
        &[&run_id],
    )
    .await
    .unwrap()
    .map(|row| (row.get(0), row.get(1)))
}
