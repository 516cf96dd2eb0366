//! Web tools through the whole cluster (`antler run --playbook` with a config.yaml whose
//! `tools:` entries have DeerFlow's shape): Tavily's `web_search` and Antler's own
//! `web_fetch` run in the lead against loopback stand-ins (a Tavily API stand-in and a
//! site serving an article), and a fetch of the metadata address is refused. The model's
//! tool messages are read from the run's last checkpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// The requests a stand-in got: first line and body.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A stand-in HTTP server on loopback: each request's first line and body are kept, the
/// reply is `answer(path, body)`. Its thread ends with the test process.
fn stand_in(answer: fn(&str, &str) -> (&'static str, String)) -> (u16, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let body = String::from_utf8_lossy(&body).into_owned();
            let path = first.split(' ').nth(1).unwrap_or("").to_owned();
            let (content_type, reply) = answer(&path, &body);
            log.lock().unwrap().push((first.trim().to_owned(), body));
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (port, seen)
}

fn tavily(_path: &str, _body: &str) -> (&'static str, String) {
    (
        "application/json",
        json!({"results": [{"title": "Actix", "url": "https://actix.rs/", "content": "Actor framework for Rust."}]}).to_string(),
    )
}

fn site(_path: &str, _body: &str) -> (&'static str, String) {
    ("text/html", "<html><head><title>Supervision trees</title></head><body><nav>Home | Blog | Login</nav><article><h1>Supervision trees</h1><p>A supervisor restarts the actors under it when they fail, so one crash never takes the whole system down with it.</p></article><footer>Cookie policy</footer></body></html>".to_owned())
}

#[test]
fn deerflow_shaped_web_entries_search_and_fetch_in_a_run() {
    let (api_port, api_seen) = stand_in(tavily);
    let (site_port, site_seen) = stand_in(site);
    let dir = tempfile::Builder::new()
        .prefix("antler-web")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!(
        "tools:\n  - name: web_search\n    group: web\n    use: deerflow.community.tavily.tools:web_search_tool\n    api_key: tvly-test\n    max_results: 2\n    base_url: http://127.0.0.1:{api_port}\n  - name: web_fetch\n    group: web\n    use: antler.web:web_fetch\n    timeout: 10\n    allowed_private_hosts: [\"127.0.0.1:{site_port}\"]\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n"
    );
    std::fs::write(d.join("config.yaml"), config).unwrap();
    std::fs::write(d.join("extensions_config.json"), r#"{"mcpServers": {}}"#).unwrap();
    let playbook = format!(
        r#"
turns:
  - tool_calls:
      - {{name: web_search, args: {{query: "rust actors"}}}}
  - tool_calls:
      - {{name: web_fetch, args: {{url: "http://127.0.0.1:{site_port}/posts/supervision"}}}}
  - tool_calls:
      - {{name: web_fetch, args: {{url: "http://169.254.169.254/latest/meta-data/"}}}}
  - content: Done.
"#
    );
    std::fs::write(d.join("playbook.yaml"), playbook).unwrap();
    let playbook_path = d.join("playbook.yaml").display().to_string();
    let (view, _) =
        model_support::antler_run(d, &["Research actors", "--playbook", &playbook_path]);
    assert_eq!(view["status"], "success", "{view}");
    let tools =
        model_support::tool_messages(&d.join("run/runs.sqlite"), view["run_id"].as_str().unwrap());
    let contents: Vec<&str> = tools
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents[0],
        "[\n  {\n    \"title\": \"Actix\",\n    \"url\": \"https://actix.rs/\",\n    \"snippet\": \"Actor framework for Rust.\"\n  }\n]"
    );
    assert!(
        contents[1].starts_with("# Supervision trees\n\n"),
        "{}",
        contents[1]
    );
    assert!(
        contents[1].contains("A supervisor restarts the actors under it"),
        "{}",
        contents[1]
    );
    assert!(!contents[1].contains("Cookie policy"), "{}", contents[1]);
    assert_eq!(
        contents[2],
        "Error: Refusing to fetch a private, loopback, or metadata address"
    );
    assert_eq!(tools[2]["status"], "error");
    let api = api_seen.lock().unwrap().clone();
    assert_eq!(api.len(), 1);
    assert_eq!(api[0].0, "POST /search HTTP/1.1");
    assert_eq!(
        serde_json::from_str::<Value>(&api[0].1).unwrap(),
        json!({"query": "rust actors", "max_results": 2})
    );
    assert_eq!(site_seen.lock().unwrap().len(), 1);
}
