//! Principals on the gateway, against a real cluster: static tokens of
//! `antler.gateway.tokens` act as their users and JWTs verified against a JWKS file
//! (RS256 and ES256 keys made with openssl) as the user of their `sub`. A user starts runs
//! only as itself; another user's run is 404 to it on every route (view, events, answer,
//! cancel), like a run that does not exist; `GET /api/runs` lists a user's own runs and
//! every run to the operator; the MCP config is the operator's. The catalog's
//! authorization policy gets the principal's role. A JWT signed by another key, expired,
//! with a wrong audience or a wrong issuer is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::lead_support::{http_full, LeadCluster};
use antler_tests::wait_for;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";
const OPS: &str = "ops-token-00000000000003";

/// Presents a file that does not exist: the result says the tool ran, or, where the
/// policy denies `present_files`, that it is not a valid tool.
const PRESENT: &str = r#"
turns:
  - tool_calls:
      - name: present_files
        args: {filepaths: ["/mnt/user-data/outputs/missing.md"]}
  - content: Done.
"#;

const ASK: &str = r#"
turns:
  - tool_calls:
      - name: ask_clarification
        args: {question: "Which year?", clarification_type: missing_info}
  - content: Never reached.
"#;

fn openssl(args: &[&str], dir: &Path) -> Vec<u8> {
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
    out.stdout
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An RSA key in `name.pem` and its JWK with `kid`.
fn rsa_key(dir: &Path, name: &str, kid: &str) -> (Vec<u8>, Value) {
    let pem = format!("{name}.pem");
    openssl(&["genrsa", "-out", &pem, "2048"], dir);
    let modulus =
        String::from_utf8(openssl(&["rsa", "-in", &pem, "-noout", "-modulus"], dir)).unwrap();
    let hex = modulus.trim().strip_prefix("Modulus=").unwrap();
    let n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let jwk =
        json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(&n), "e": "AQAB"});
    (std::fs::read(dir.join(pem)).unwrap(), jwk)
}

/// A P-256 key in `name.pem` (PKCS#8) and its JWK with `kid`.
fn ec_key(dir: &Path, name: &str, kid: &str) -> (Vec<u8>, Value) {
    let pem = format!("{name}.pem");
    openssl(
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &pem,
        ],
        dir,
    );
    let der = openssl(&["pkey", "-in", &pem, "-pubout", "-outform", "DER"], dir);
    // The SubjectPublicKeyInfo ends with the uncompressed point 04 || x || y.
    let point = &der[der.len() - 65..];
    assert_eq!(point[0], 4);
    let jwk = json!({"kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256",
        "x": b64(&point[1..33]), "y": b64(&point[33..])});
    (std::fs::read(dir.join(pem)).unwrap(), jwk)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn jwt(alg: Algorithm, kid: &str, pem: &[u8], claims: Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem).unwrap(),
        _ => EncodingKey::from_rsa_pem(pem).unwrap(),
    };
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

fn claims(user: &str) -> Value {
    json!({"sub": user, "iss": "https://idp.test", "aud": "antler", "exp": now() + 600, "roles": ["member"]})
}

struct Gateway {
    cluster: LeadCluster,
    addr: String,
}

impl Gateway {
    fn call(&self, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string);
        let (code, _, text) = http_full(&self.addr, token, method, path, body.as_deref());
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Starts a run as `token`'s principal; its id.
    fn start(&self, token: &str, playbook: &str) -> String {
        // Someone answers: a clarification stops the run.
        let (code, body) = self.call(
            token,
            "POST",
            "/api/runs",
            Some(&json!({"task": "Present it", "playbook_yaml": playbook, "clarification": true})),
        );
        assert_eq!(code, 201, "{body}");
        body["run_id"].as_str().unwrap().to_owned()
    }

    /// Waits until the run stopped; its view.
    fn ended(&self, token: &str, run_id: &str) -> Value {
        wait_for(Duration::from_secs(60), || {
            let (code, view) = self.call(token, "GET", &format!("/api/runs/{run_id}"), None);
            (code == 200 && view["status"] != "running").then_some(view)
        })
        .unwrap_or_else(|| panic!("run {run_id} did not stop"))
    }

    fn listed(&self, token: &str, query: &str) -> Vec<String> {
        let (code, body) = self.call(token, "GET", &format!("/api/runs{query}"), None);
        assert_eq!(code, 200, "{body}");
        body["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The content of the run's tool message of `tool`.
fn tool_result(cluster: &LeadCluster, run_id: &str, tool: &str) -> String {
    let state = cluster.run_state(run_id);
    let text = state.to_string();
    let found = state["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "tool" && m["name"] == tool)
        .and_then(|m| m["content"].as_str().map(str::to_owned));
    found.unwrap_or_else(|| panic!("no {tool} result in {text}"))
}

#[test]
fn principals_see_only_their_own_runs_and_jwts_are_verified() {
    let keys = tempfile::tempdir().unwrap();
    let (rsa_pem, rsa_jwk) = rsa_key(keys.path(), "rsa", "k-rsa");
    let (ec_pem, ec_jwk) = ec_key(keys.path(), "ec", "k-ec");
    let (other_pem, _) = rsa_key(keys.path(), "other", "k-rsa");
    let config = format!(
        r#"antler:
  gateway:
    tokens:
      - {{token: {ALICE}, user: alice, role: member}}
      - {{token: {BOB}, user: bob}}
      - {{token: {OPS}, user: ops, role: operator}}
    allow_scripted_models: true
    jwt:
      jwks_file: jwks.json
      issuer: https://idp.test
      audience: antler
      role_claim: roles
authorization:
  enabled: true
  provider:
    use: antler.authz:AllowlistPolicy
    config:
      default: {{allowed_tools: null}}
      roles:
        member: {{denied_tools: [present_files]}}
"#
    );
    let cluster = {
        // The JWKS sits beside config.yaml before the lead starts.
        let c = LeadCluster::up_with_files(
            &config,
            &[("jwks.json", &json!({"keys": [rsa_jwk, ec_jwk]}).to_string())],
            &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
        );
        let addr = c.gateway();
        Gateway { cluster: c, addr }
    };
    let g = &cluster;
    let operator = g.cluster.gateway_token();

    // A user starts runs as itself, and only as itself.
    let alice_run = g.start(ALICE, PRESENT);
    let bob_run = g.start(BOB, PRESENT);
    let (code, body) = g.call(
        ALICE,
        "POST",
        "/api/runs",
        Some(&json!({"task": "t", "playbook_yaml": PRESENT, "user": "bob"})),
    );
    assert_eq!(code, 403, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("alice"), "{body}");
    assert_eq!(g.ended(ALICE, &alice_run)["user"], "alice");
    assert_eq!(g.ended(BOB, &bob_run)["user"], "bob");

    // The catalog's policy got alice's role: present_files is not hers; bob has it.
    assert!(
        tool_result(&g.cluster, &alice_run, "present_files")
            .starts_with("Error: present_files is not a valid tool"),
        "{}",
        tool_result(&g.cluster, &alice_run, "present_files")
    );
    assert!(
        !tool_result(&g.cluster, &bob_run, "present_files").contains("not a valid tool"),
        "{}",
        tool_result(&g.cluster, &bob_run, "present_files")
    );
    // The run's catalog view says what authorization removed, and the skill policy in
    // force (no skill active: every tool).
    let (code, catalog) = g.call(
        ALICE,
        "GET",
        &format!("/api/runs/{alice_run}/catalog"),
        None,
    );
    assert_eq!(code, 200, "{catalog}");
    assert_eq!(
        catalog["authorization"]["denied"],
        json!(["present_files"]),
        "{catalog}"
    );
    assert_eq!(
        catalog["skill_policy"]["allowed_tools"],
        Value::Null,
        "{catalog}"
    );
    assert_eq!(
        catalog["skill_policy"]["active_skills"],
        json!([]),
        "{catalog}"
    );
    let (_, catalog) = g.call(BOB, "GET", &format!("/api/runs/{bob_run}/catalog"), None);
    assert_eq!(catalog["authorization"]["denied"], json!([]), "{catalog}");

    // Another user's run does not exist for bob, on every route.
    let (code, missing) = g.call(BOB, "GET", "/api/runs/run-nope", None);
    assert_eq!(code, 404);
    for (method, path, body) in [
        ("GET", format!("/api/runs/{alice_run}"), None),
        ("GET", format!("/api/runs/{alice_run}/events"), None),
        (
            "POST",
            format!("/api/runs/{alice_run}/answer"),
            Some(json!({"answer": "2025"})),
        ),
        ("POST", format!("/api/runs/{alice_run}/cancel"), None),
    ] {
        let (code, body) = g.call(BOB, method, &path, body.as_ref());
        assert_eq!(code, 404, "{method} {path}: {body}");
        assert_eq!(
            body["detail"].as_str().unwrap().replace(&alice_run, "ID"),
            missing["detail"]
                .as_str()
                .unwrap()
                .replace("run-nope", "ID"),
            "{method} {path}: the refusal differs from an unknown run's"
        );
    }
    // A waiting run of alice's is answered by alice only.
    let asking = g.start(ALICE, ASK);
    assert_eq!(g.ended(ALICE, &asking)["status"], "interrupted");
    let answer = json!({"answer": "2025"});
    let path = format!("/api/runs/{asking}/answer");
    assert_eq!(g.call(BOB, "POST", &path, Some(&answer)).0, 404);
    assert_eq!(g.call(ALICE, "POST", &path, Some(&json!({}))).0, 400);
    assert_eq!(g.call(ALICE, "POST", &path, Some(&answer)).0, 202);

    // Lists: one's own runs; the operator's, everyone's.
    let mine = g.listed(ALICE, "");
    assert!(
        mine.contains(&alice_run) && mine.contains(&asking),
        "{mine:?}"
    );
    assert!(!mine.contains(&bob_run), "{mine:?}");
    assert_eq!(g.listed(BOB, ""), vec![bob_run.clone()]);
    assert_eq!(
        g.listed(ALICE, "?user=bob"),
        mine,
        "a user cannot list another's"
    );
    for token in [OPS, operator.as_str()] {
        let all = g.listed(token, "");
        assert!(
            all.contains(&alice_run) && all.contains(&bob_run),
            "{all:?}"
        );
        assert_eq!(g.listed(token, "?user=bob"), vec![bob_run.clone()]);
        let (code, view) = g.call(token, "GET", &format!("/api/runs/{alice_run}"), None);
        assert_eq!((code, view["user"].as_str()), (200, Some("alice")));
    }
    assert_eq!(g.call(ALICE, "GET", "/api/runs?limit=0", None).0, 400);

    // The MCP config is the operator's.
    assert_eq!(g.call(ALICE, "GET", "/api/mcp/config", None).0, 403);
    assert_eq!(g.call(OPS, "GET", "/api/mcp/config", None).0, 200);
    assert_eq!(
        g.call("not-a-token-at-all", "GET", "/api/runs", None).0,
        401
    );

    // JWTs: RS256 and ES256 keys of the set act as their sub.
    let carol = jwt(Algorithm::RS256, "k-rsa", &rsa_pem, claims("carol"));
    let carol_run = g.start(&carol, PRESENT);
    // A JWT's users live in their own namespace: `sub` carol is user jwt-carol.
    assert_eq!(g.ended(&carol, &carol_run)["user"], "jwt-carol");
    // A JWT whose `sub` names a static user or the operator's own id reads none of theirs.
    for sub in ["alice", "default"] {
        let token = jwt(Algorithm::RS256, "k-rsa", &rsa_pem, claims(sub));
        assert_eq!(g.listed(&token, ""), Vec::<String>::new(), "sub {sub}");
        assert_eq!(
            g.call(&token, "GET", &format!("/api/runs/{alice_run}"), None)
                .0,
            404,
            "sub {sub}"
        );
    }
    assert_eq!(g.listed(&carol, ""), vec![carol_run.clone()]);
    assert_eq!(
        g.call(&carol, "GET", &format!("/api/runs/{alice_run}"), None)
            .0,
        404
    );
    // The role claim reached the policy too.
    assert!(tool_result(&g.cluster, &carol_run, "present_files").contains("not a valid tool"));
    let dave = jwt(Algorithm::ES256, "k-ec", &ec_pem, claims("dave"));
    assert_eq!(g.listed(&dave, ""), Vec::<String>::new());

    let mut expired = claims("carol");
    expired["exp"] = json!(now() - 3600);
    let mut audience = claims("carol");
    audience["aud"] = json!("someone-else");
    let mut issuer = claims("carol");
    issuer["iss"] = json!("https://evil.test");
    let mut bad_user = claims("../carol");
    bad_user["sub"] = json!("../carol");
    // Configured means required: a token lacking the claim is refused.
    let without = |claim: &str| {
        let mut c = claims("carol");
        c.as_object_mut().unwrap().remove(claim);
        jwt(Algorithm::RS256, "k-rsa", &rsa_pem, c)
    };
    for (what, token) in [
        (
            "another key",
            jwt(Algorithm::RS256, "k-rsa", &other_pem, claims("carol")),
        ),
        ("expired", jwt(Algorithm::RS256, "k-rsa", &rsa_pem, expired)),
        (
            "wrong audience",
            jwt(Algorithm::RS256, "k-rsa", &rsa_pem, audience),
        ),
        (
            "wrong issuer",
            jwt(Algorithm::RS256, "k-rsa", &rsa_pem, issuer),
        ),
        (
            "unknown key id",
            jwt(Algorithm::RS256, "k-none", &rsa_pem, claims("carol")),
        ),
        (
            "a sub that is no user id",
            jwt(Algorithm::RS256, "k-rsa", &rsa_pem, bad_user),
        ),
        ("no aud", without("aud")),
        ("no iss", without("iss")),
        ("no exp", without("exp")),
    ] {
        let (code, body) = g.call(&token, "GET", "/api/runs", None);
        assert_eq!(code, 401, "{what}: {body}");
    }
}

/// A static file server (Python's http.server) standing in for an identity provider's
/// JWKS endpoint; stopped with the test.
struct JwksServer {
    child: Child,
    url: String,
}

impl JwksServer {
    fn start(dir: &Path) -> JwksServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        let up = wait_for(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(up.is_some(), "the JWKS server did not start");
        JwksServer {
            child,
            url: format!("http://127.0.0.1:{port}/jwks.json"),
        }
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_jwks_url_is_fetched_and_a_rotated_key_is_found_again() {
    let keys = tempfile::tempdir().unwrap();
    let (old_pem, old_jwk) = rsa_key(keys.path(), "old", "k-old");
    let (new_pem, new_jwk) = rsa_key(keys.path(), "new", "k-new");
    let jwks = keys.path().join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [old_jwk]}).to_string()).unwrap();
    let server = JwksServer::start(keys.path());
    let config = format!(
        "antler:\n  gateway:\n    allow_scripted_models: true\n    jwt:\n      jwks_url: {}\n      issuer: https://idp.test\n      audience: antler\n",
        server.url
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let g = Gateway {
        addr: cluster.gateway(),
        cluster,
    };
    let old = jwt(Algorithm::RS256, "k-old", &old_pem, claims("erin"));
    let fetched = wait_for(Duration::from_secs(20), || {
        (g.call(&old, "GET", "/api/runs", None).0 == 200).then_some(())
    });
    assert!(
        fetched.is_some(),
        "a token of the fetched set was not accepted"
    );
    // The provider rotates its key: a token of the new key is refused until the set is
    // fetched again, which such a token starts (at most every 10 s).
    std::fs::write(&jwks, json!({"keys": [new_jwk]}).to_string()).unwrap();
    let new = jwt(Algorithm::RS256, "k-new", &new_pem, claims("erin"));
    let rotated = wait_for(Duration::from_secs(40), || {
        (g.call(&new, "GET", "/api/runs", None).0 == 200).then_some(())
    });
    assert!(rotated.is_some(), "the rotated key was never fetched");
    let run = g.start(&new, PRESENT);
    assert_eq!(g.ended(&new, &run)["user"], "jwt-erin");
    // The old key left the set: its tokens are refused once it is fetched again.
    assert_eq!(g.call(&old, "GET", "/api/runs", None).0, 401);
}
