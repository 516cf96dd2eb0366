//! Two mcp-host replicas of a cluster (mutual TLS on loopback, certificates and the
//! OAuth sealing key from `antler cluster init`) share a user's login through the lead: a
//! login made on the first replica (`antler mcp login`, against the npm
//! `@modelcontextprotocol/sdk` example server with `--oauth`) reaches the second, whose
//! server connects with it; a replica restarted on an empty disk, as a new pod would be,
//! gets it back from the lead; the lead keeps it sealed, so its database never holds the
//! token.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use crate::mcp_support::{free_port, headless_browser, oauth_example_server, BrowserLog};
use antler_protocol::{
    calls::McpCalls, link::dial_expecting, tls::ClusterTls, Address, ConnectionConfig, Identity,
    Role,
};
use antler_tests::{bin, wait_for};
use serde_json::{json, Value};

/// One hand-started mcp-host replica, as a pod of the Deployment would be.
struct Replica {
    name: &'static str,
    port: u16,
    data: PathBuf,
    child: Option<Child>,
}

impl Replica {
    fn start(name: &'static str, work: &Path, port: u16) -> Replica {
        let mut r = Replica {
            name,
            port,
            data: work.join(name),
            child: None,
        };
        r.spawn(work);
        r
    }

    fn spawn(&mut self, work: &Path) {
        let secret = work.join("secret");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(work.join(format!("{}.log", self.name)))
            .unwrap();
        let child = Command::new(bin("antler-mcp-host"))
            .arg("--listen")
            .arg(format!("tcp:127.0.0.1:{}", self.port))
            .arg("--node-id")
            .arg(self.name)
            .arg("--token-file")
            .arg(secret.join("token"))
            .arg("--tls-ca")
            .arg(secret.join("ca.crt"))
            .arg("--tls-cert")
            .arg(secret.join("mcp-host.crt"))
            .arg("--tls-key")
            .arg(secret.join("mcp-host.key"))
            .arg("--oauth-key-file")
            .arg(secret.join("mcp-oauth.key"))
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--extensions")
            .arg(work.join("extensions_config.json"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn address(&self) -> Address {
        Address::Tcp(format!("127.0.0.1:{}", self.port))
    }

    /// The stored credentials of (notes, default) in this replica's token store.
    fn stored_token(&self) -> Option<String> {
        let bytes = std::fs::read(self.data.join("mcp-oauth.json")).ok()?;
        let v: Value = serde_json::from_slice(&bytes).ok()?;
        v["entries"]["notes\u{1f}default"]["credentials"]["token_response"]["access_token"]
            .as_str()
            .map(str::to_owned)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The lead's `antler up`, stopped with the test.
struct Lead(Child);

impl Drop for Lead {
    fn drop(&mut self) {
        antler_tests::signal(self.0.id(), libc::SIGTERM);
        let stopped = wait_for(Duration::from_secs(15), || {
            self.0.try_wait().ok().flatten().map(|_| ())
        });
        if stopped.is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The state of server `notes` on one replica, asked over mutual TLS as the lead would.
fn notes_state(work: &Path, replica: &Replica) -> Option<String> {
    let secret = work.join("secret");
    let read = |f: &str| std::fs::read(secret.join(f)).unwrap();
    let tls = ClusterTls::from_pem(&read("ca.crt"), &read("lead.crt"), &read("lead.key")).unwrap();
    let token = String::from_utf8(read("token")).unwrap();
    let me = Identity::new(Role::Lead, "test-lead", Some(token.trim().to_owned()))
        .with_tls(Some(Arc::new(tls)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = dial_expecting(
            &replica.address(),
            Role::McpHost,
            &me,
            ConnectionConfig::default(),
            None,
        )
        .await
        .ok()?;
        let reply = conn.mcp_status(Duration::from_secs(5)).await.ok();
        conn.close("test done");
        reply?
            .into_iter()
            .find(|s| s.name == "notes")
            .map(|s| s.state)
    })
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

#[test]
fn a_login_on_one_replica_serves_both_and_comes_back_to_a_replica_with_an_empty_disk() {
    let (_server, port) = oauth_example_server();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let out = Command::new(bin("antler"))
        .args(["cluster", "init"])
        .arg(work.join("secret"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        work.join("extensions_config.json"),
        json!({"mcpServers": {"notes": {"type": "http", "url": format!("http://localhost:{port}/mcp")}}})
            .to_string(),
    )
    .unwrap();
    let mut a = Replica::start("mcp-a", work, free_port());
    let mut b = Replica::start("mcp-b", work, free_port());
    let token = std::fs::read_to_string(work.join("secret/token")).unwrap();
    // No sandbox-host listens at the one address named: this test needs none.
    std::fs::write(
        work.join("config.yaml"),
        format!(
            "antler:\n  cluster_token: {}\n  tls: {{ca: secret/ca.crt, cert: secret/lead.crt, key: secret/lead.key}}\n  cluster:\n    sandbox_hosts: [\"tcp:127.0.0.1:{}\"]\n    mcp_hosts: [\"tcp:127.0.0.1:{}\", \"tcp:127.0.0.1:{}\"]\n",
            token.trim(),
            free_port(),
            a.port,
            b.port
        ),
    )
    .unwrap();
    let run_dir = work.join("run");
    let lead = Lead(
        Command::new(bin("antler"))
            .arg("--runtime-dir")
            .arg(&run_dir)
            .args(["up", "--config"])
            .arg(work.join("config.yaml"))
            .env("ANTLER_GATEWAY_ADDR", "off")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("lead.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let linked = wait_for(Duration::from_secs(30), || {
        let out = antler_tests::antler(&run_dir, &["status", "--json"]);
        let list: Vec<Value> = serde_json::from_slice(&out.stdout).ok()?;
        let healthy = list
            .iter()
            .filter(|p| p["role"] == "mcp-host" && p["healthy"] == true)
            .count();
        (healthy == 2).then_some(())
    });
    assert!(
        linked.is_some(),
        "the lead did not link both replicas: {}",
        std::fs::read_to_string(work.join("lead.log")).unwrap_or_default()
    );
    // Neither replica has a login: the server needs one on both.
    for r in [&a, &b] {
        let failed = wait_for(Duration::from_secs(20), || {
            (notes_state(work, r).as_deref() == Some("failed")).then_some(())
        });
        assert!(failed.is_some(), "{}: {:?}", r.name, notes_state(work, r));
    }

    // The login goes to the first replica.
    let browser = headless_browser(work, BrowserLog::None);
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(&run_dir)
        .args(["mcp", "login", "notes"])
        .env("BROWSER", &browser)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let access = wait_for(Duration::from_secs(5), || a.stored_token()).unwrap_or_else(|| {
        panic!(
            "the first replica stores no login: a {:?} b {:?}",
            String::from_utf8_lossy(&file_bytes(&a.data.join("mcp-oauth.json"))),
            String::from_utf8_lossy(&file_bytes(&b.data.join("mcp-oauth.json")))
        )
    });

    // The second replica gets it through the lead, and its server connects with it.
    let shared = wait_for(Duration::from_secs(15), || {
        (b.stored_token().as_deref() == Some(access.as_str())).then_some(())
    });
    assert!(
        shared.is_some(),
        "the second replica has no login: {:?}",
        b.stored_token()
    );
    for r in [&a, &b] {
        let ready = wait_for(Duration::from_secs(20), || {
            (notes_state(work, r).as_deref() == Some("ready")).then_some(())
        });
        assert!(ready.is_some(), "{}: {:?}", r.name, notes_state(work, r));
    }

    // The second replica comes back on an empty disk, as a new pod: the lead gives the
    // login back, and its server connects with no new login.
    b.kill();
    std::fs::remove_dir_all(&b.data).unwrap();
    b.spawn(work);
    let back = wait_for(Duration::from_secs(30), || {
        (b.stored_token().as_deref() == Some(access.as_str())).then_some(())
    });
    assert!(
        back.is_some(),
        "the restarted replica did not get the login back"
    );
    let ready = wait_for(Duration::from_secs(20), || {
        (notes_state(work, &b).as_deref() == Some("ready")).then_some(())
    });
    assert!(
        ready.is_some(),
        "mcp-b after the restart: {:?}",
        notes_state(work, &b)
    );

    // The lead keeps the login sealed: its database names the server, never the token.
    let db: Vec<u8> = [
        file_bytes(&run_dir.join("runs.sqlite")),
        file_bytes(&run_dir.join("runs.sqlite-wal")),
    ]
    .concat();
    assert!(
        db.windows(b"notes".len()).any(|w| w == b"notes"),
        "the lead's database keeps no shared login: the check would be vacuous"
    );
    assert!(
        !db.windows(access.len()).any(|w| w == access.as_bytes()),
        "the access token is in the lead's database in the clear"
    );
    let lead_log = std::fs::read_to_string(work.join("lead.log")).unwrap_or_default();
    assert!(
        !lead_log.contains(&access),
        "the access token is in the lead's log"
    );
    drop(lead);
    a.kill();
}
