//! `POST /api/runs` reads no host file: a playbook is a name in `antler.playbook_dirs`
//! (a relative path that stays beneath its directory) or YAML in the body. An absolute
//! path, `..`, a link out of the directory, a device, a FIFO or a file that is not a
//! playbook is refused, and no error quotes what such a file holds; the lead stays small.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_tests::Cluster;
use serde_json::{json, Value};

const PLAYBOOK: &str = "turns:\n  - content: Done from the playbook directory.\n";
const SECRET: &str = "root:$6$TopSecretHashValue:19000:0:99999:7:::";

fn lead_rss_kib(c: &Cluster) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.lead.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn the_api_names_playbooks_only_in_the_configured_directories() {
    let dir = tempfile::tempdir().unwrap();
    let books = dir.path().join("playbooks");
    std::fs::create_dir(&books).unwrap();
    std::fs::write(books.join("done.yaml"), PLAYBOOK).unwrap();
    let outside = dir.path().join("shadow");
    std::fs::write(&outside, SECRET).unwrap();
    std::fs::write(books.join("not-a-playbook.yaml"), SECRET).unwrap();
    std::os::unix::fs::symlink(&outside, books.join("link.yaml")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", books.join("zero.yaml")).unwrap();
    let fifo = std::ffi::CString::new(books.join("fifo.yaml").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "antler:\n  playbook_dirs: [playbooks]\n").unwrap();
    let c = Cluster::up_ready(
        0,
        &[
            ("ANTLER_CONFIG_PATH", config.to_str().unwrap()),
            ("ANTLER_GATEWAY_ADDR", "127.0.0.1:0"),
        ],
    );
    let token_path = c.runtime_dir().join("cluster.token");
    let cluster_token = std::fs::read_to_string(&token_path).unwrap();
    let rss_before = lead_rss_kib(&c);

    let refused = [
        ("/etc/shadow".to_owned(), 400, "relative path"),
        (outside.display().to_string(), 400, "relative path"),
        (token_path.display().to_string(), 400, "relative path"),
        ("/dev/zero".to_owned(), 400, "relative path"),
        ("../shadow".to_owned(), 400, "relative path"),
        ("link.yaml".to_owned(), 400, "no such file"),
        ("zero.yaml".to_owned(), 400, "no such file"),
        ("fifo.yaml".to_owned(), 422, "not a regular file"),
        ("not-a-playbook.yaml".to_owned(), 422, "invalid playbook"),
        ("missing.yaml".to_owned(), 400, "no such file"),
    ];
    for (playbook, want, reason) in refused {
        let body = json!({"task": "x", "playbook": playbook});
        let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
        assert_eq!(status, want, "{playbook}: {text}");
        assert!(text.contains(reason), "{playbook}: {text}");
        assert!(
            !text.contains("TopSecretHashValue") && !text.contains(cluster_token.trim()),
            "{playbook}: the response quotes a file: {text}"
        );
    }
    assert!(
        lead_rss_kib(&c) < rss_before + 64 * 1024,
        "the lead grew reading a playbook"
    );

    let body = json!({"task": "x", "playbook": "done.yaml"});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 201, "{text}");
    let run_id = serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, stream) = c.gateway_http("GET", &format!("/api/runs/{run_id}/events"), None);
    assert!(
        stream.contains("Done from the playbook directory."),
        "{stream}"
    );

    // Inline YAML is bounded too.
    let huge = format!("turns:\n  - content: {}\n", "x".repeat(300 * 1024));
    let body = json!({"task": "x", "playbook_yaml": huge});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("larger than 256 KiB"), "{text}");
}

#[test]
fn without_configured_directories_the_api_names_no_file() {
    let c = Cluster::up_ready(0, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let body = json!({"task": "x", "playbook": "playbook.yaml"});
    let (status, text) = c.gateway_http("POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("no playbook directories are configured"),
        "{text}"
    );
}
