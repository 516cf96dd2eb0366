//! client_credentials with `private_key_jwt` at a discovered token endpoint that verifies
//! the client assertion (`peers/oauth_strict_issuer.mjs --client-key`: signature by the
//! client's registered public key, `iss` = `sub` = the client id, `aud` the issuer or its
//! token endpoint, not expired), for a Python SDK server verifying the issued JWTs. The
//! configured key gets a token and the call succeeds; another key is refused by the token
//! endpoint (401 `invalid_client`) and the server fails saying so, without the key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use crate::mcp_support::{free_port, npm_bin, peer_script, python, wait_port, McpCluster, Peer};
use serde_json::{json, Value};

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An RSA key pair in `name.pem` / `name.pub.pem`: the private key's PEM.
fn rsa_key(dir: &Path, name: &str) -> String {
    let pem = format!("{name}.pem");
    openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &pem,
        ],
        dir,
    );
    openssl(
        &[
            "pkey",
            "-in",
            &pem,
            "-pubout",
            "-out",
            &format!("{name}.pub.pem"),
        ],
        dir,
    );
    std::fs::read_to_string(dir.join(pem)).unwrap()
}

#[test]
fn a_signed_client_assertion_gets_a_token_and_another_key_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let client_key = rsa_key(work.path(), "client");
    let other_key = rsa_key(work.path(), "other");
    let log = work.path().join("tokens.jsonl");
    let _ = npm_bin("oauth2-mock-server");
    let iport = free_port();
    let _issuer = Peer(
        Command::new("node")
            .arg(peer_script("oauth_strict_issuer.mjs"))
            .arg(iport.to_string())
            .arg(&log)
            .arg("--client-key")
            .arg(work.path().join("client.pub.pem"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the issuer"),
    );
    wait_port(iport, Duration::from_secs(20));
    let sport = free_port();
    let _server = Peer(
        Command::new(python())
            .args([
                &peer_script("oauth_server.py"),
                &sport.to_string(),
                &iport.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the secure server"),
    );
    wait_port(sport, Duration::from_secs(20));
    let url = format!("http://127.0.0.1:{sport}/mcp");
    let oauth = |id: &str, pem: &str| {
        json!({"grant_type": "client_credentials", "client_id": id, "private_key_pem": pem,
               "signing_algorithm": "RS256", "scope": "mcp"})
    };
    let c = McpCluster::start(json!({
        "signed": {"type": "http", "url": url, "oauth": oauth("cc-jwt", &client_key)},
        "forged": {"type": "http", "url": url, "oauth": oauth("cc-forged", &other_key)},
    }));

    let (code, r) = c.call("signed", "whoami", "{}");
    assert_eq!(code, 0, "{r}");
    assert_eq!(McpCluster::text(&r), "cc-jwt", "{r}");

    let st = c.server("forged");
    assert_eq!(st["state"], "failed", "{st}");
    let why = st["last_error"].as_str().unwrap_or("");
    assert!(why.contains("answered HTTP 401"), "{st}");
    assert!(!why.contains("PRIVATE KEY"), "{st}");

    let reqs: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let signed: Vec<&Value> = reqs.iter().filter(|r| r["client_id"] == "cc-jwt").collect();
    assert_eq!(signed.len(), 1, "{reqs:?}");
    assert_eq!(signed[0]["assertion"], "verified", "{reqs:?}");
    assert_eq!(signed[0]["status"], 200);
    assert_eq!(signed[0]["resource"], url);
    assert!(
        reqs.iter()
            .any(|r| r["assertion"] == "refused" && r["status"] == 401),
        "the other key was not refused: {reqs:?}"
    );
}
