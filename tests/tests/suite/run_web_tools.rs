//! Web tools through the whole cluster (`antler run --playbook` with a config.yaml whose
//! `tools:` entries have DeerFlow's shape): Tavily's `web_search` and Antler's own
//! `web_fetch` run in the lead against loopback stand-ins (a Tavily API stand-in and a
//! site serving an article), and a fetch of the metadata address is refused. The model's
//! tool messages are read from the run's last checkpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::standin::StandIn;
use crate::model_support::{self, NO_MCP_SERVERS};

use serde_json::{json, Value};

/// A Tavily API stand-in's one answer.
fn tavily() -> Vec<u8> {
    json!({"results": [{"title": "Actix", "url": "https://actix.rs/", "content": "Actor framework for Rust."}]}).to_string().into_bytes()
}

/// A site's article, with the page around it.
fn site() -> Vec<u8> {
    "<html><head><title>Supervision trees</title></head><body><nav>Home | Blog | Login</nav><article><h1>Supervision trees</h1><p>A supervisor restarts the actors under it when they fail, so one crash never takes the whole system down with it.</p></article><footer>Cookie policy</footer></body></html>".into()
}

#[test]
fn deerflow_shaped_web_entries_search_and_fetch_in_a_run() {
    let api_stand_in = StandIn::serving("application/json", tavily());
    let site_stand_in = StandIn::serving("text/html", site());
    let (api_port, site_port) = (api_stand_in.port, site_stand_in.port);
    let config = format!(
        "tools:\n  - name: web_search\n    group: web\n    use: deerflow.community.tavily.tools:web_search_tool\n    api_key: tvly-test\n    max_results: 2\n    base_url: http://127.0.0.1:{api_port}\n  - name: web_fetch\n    group: web\n    use: antler.web:web_fetch\n    timeout: 10\n    allowed_private_hosts: [\"127.0.0.1:{site_port}\"]\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n"
    );
    let dir = model_support::run_dir("antler-web", &config, NO_MCP_SERVERS);
    let d = dir.path();
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
    let (view, tools) = model_support::run_playbook(d, "Research actors", &playbook);
    assert_eq!(view["status"], "success", "{view}");
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
    let api: Vec<(String, String)> = api_stand_in
        .received()
        .iter()
        .map(|r| (r.request_line().to_owned(), r.body.clone()))
        .collect();
    assert_eq!(api.len(), 1);
    assert_eq!(api[0].0, "POST /search HTTP/1.1");
    assert_eq!(
        serde_json::from_str::<Value>(&api[0].1).unwrap(),
        json!({"query": "rust actors", "max_results": 2})
    );
    assert_eq!(site_stand_in.received().len(), 1);
}
