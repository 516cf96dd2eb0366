//! The gateway's OpenAPI document against the real gateway: `GET /api/openapi.json` is a
//! member's (401 without a token), JSON, OpenAPI 3.1.0, and names every route of the route
//! table; then schemathesis (PyPI, pinned in tests/requirements.txt) fuzzes the API from
//! that document as an authenticated member: no answer is a 5xx, and every answer's status,
//! content type and body are ones the document gives (bounded: 10 examples per operation,
//! a fixed seed; about 15 s). The operator's routes are fuzzed too: a member gets their 403,
//! so none of them changes anything. So is `/mcp`, with an MCP client's `Accept`: its
//! JSON-RPC answers (JSON, or each event of an event stream), its transport's text refusals
//! and the 401's `WWW-Authenticate` are checked against the document.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Instant;

use crate::lead_support::{http_full, LeadCluster};
use crate::model_support::{recording_server, Reply};
use antler_lead::gateway::ROUTES;
use serde_json::Value;

const ALICE: &str = "alice-token-000000000001";
/// The member's threads the fuzzer may name (it may delete them too).
const THREADS: [&str; 3] = ["fuzz-a", "fuzz-b", "fuzz-c"];

/// The operations schemathesis leaves out (by the document's `operationId`, method and
/// path), each with why. Every other route is fuzzed.
const EXCLUDED: &[(&str, &str)] = &[
    // Server-sent event streams: an answer that lasts as long as its run, which
    // schemathesis cannot read as one response.
    ("post /api/runs/stream", "a stateless run's SSE stream"),
    ("post /api/threads/{tid}/runs/stream", "a run's SSE stream"),
    (
        "get /api/threads/{tid}/runs/{rid}/stream",
        "joins a run's SSE stream",
    ),
    (
        "post /api/threads/{tid}/runs/{rid}/stream",
        "joins a run's SSE stream",
    ),
    ("get /api/runs/{id}/events", "a run's SSE event stream"),
];

/// The MCP endpoint's operations, fuzzed with the headers a streamable-HTTP client sends:
/// an `initialize` (the body's example) opens a session and is answered as an event
/// stream; anything else, without a session the fuzzer could know, is a refusal.
const MCP_OPERATIONS: [&str; 3] = ["post /mcp", "get /mcp", "delete /mcp"];

#[test]
fn the_openapi_document_describes_the_api_and_schemathesis_finds_nothing() {
    // The routes that call a model (runs, suggestions, input polish) get an answer.
    let model = recording_server(vec![Reply::text("Done.")]);
    let config = format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-x\nantler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n",
        model.base_url
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();

    // A member's document: none without a token.
    let (code, _, _) = http_full(&addr, "", "GET", "/api/openapi.json", None);
    assert_eq!(code, 401);
    let (code, headers, text) = http_full(&addr, ALICE, "GET", "/api/openapi.json", None);
    assert_eq!(code, 200, "{text}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{headers}"
    );
    let doc: Value = serde_json::from_str(&text).expect("the document is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    for r in ROUTES {
        let path = r.path.replace("{path:.*}", "{path}");
        assert!(
            doc["paths"][&path][r.method.to_ascii_lowercase()].is_object(),
            "{} {} is not described",
            r.method,
            r.path
        );
    }

    // What is left out is in the document (an operation renamed is not fuzzed by mistake).
    let ids: Vec<&str> = doc["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(_, item)| item.as_object().into_iter().flatten())
        .filter_map(|(_, o)| o["operationId"].as_str())
        .collect();
    for (operation, why) in EXCLUDED {
        assert!(
            ids.contains(operation),
            "{operation} ({why}) is not in the document"
        );
    }
    for operation in MCP_OPERATIONS {
        assert!(
            ids.contains(&operation),
            "{operation} is not in the document"
        );
    }

    // `/mcp`'s answers are typed: JSON-RPC messages as JSON or as server-sent events, the
    // transport's refusals as text, and the 401 naming the resource metadata, as sent.
    let post = &doc["paths"]["/mcp"]["post"]["responses"];
    assert_eq!(
        post["200"]["content"]["text/event-stream"]["schema"]["$ref"],
        "#/components/schemas/McpEvent"
    );
    assert_eq!(
        post["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/JsonRpcMessage"
    );
    assert!(
        doc["paths"]["/mcp"]["delete"]["responses"]["404"]["content"]["text/plain"].is_object()
    );
    let pattern = post["401"]["headers"]["WWW-Authenticate"]["schema"]["pattern"]
        .as_str()
        .expect("the 401's WWW-Authenticate is described");
    let (code, headers, _) = http_full(&addr, "", "POST", "/mcp", Some("{}"));
    assert_eq!(code, 401);
    let sent = headers
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(name, _)| name.eq_ignore_ascii_case("www-authenticate"))
                .map(|(_, value)| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no WWW-Authenticate: {headers}"));
    assert!(
        regex::Regex::new(pattern).unwrap().is_match(&sent),
        "{sent} does not match {pattern}"
    );

    // Found by the fuzzer: `/api/assistants/{aid}` came first and answered this 405.
    let (code, _, text) = http_full(&addr, ALICE, "POST", "/api/assistants/search", Some("{}"));
    assert_eq!(code, 200, "{text}");

    // What the fuzzer may name beside its own inventions, so its cases reach the routes'
    // logic and not only their 404: the member's threads (one with a run), its run and
    // fact ids, and the member itself for `?user=`.
    let call = |method: &str, path: &str, body: &str| {
        let (code, _, text) = http_full(&addr, ALICE, method, path, Some(body));
        assert!(code < 300, "{method} {path}: {code} {text}");
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)
    };
    for thread in THREADS {
        call(
            "POST",
            "/api/threads",
            &format!(r#"{{"thread_id": "{thread}"}}"#),
        );
    }
    call(
        "POST",
        &format!("/api/threads/{}/runs/wait", THREADS[0]),
        r#"{"input": {"messages": [{"role": "user", "content": "Hello"}]}}"#,
    );
    let runs = call("GET", &format!("/api/threads/{}/runs", THREADS[0]), "");
    let thread_run = runs[0]["run_id"]
        .as_str()
        .expect("the thread's run")
        .to_owned();
    let run = call("POST", "/api/runs", r#"{"task": "Hello"}"#)["run_id"]
        .as_str()
        .expect("a run")
        .to_owned();
    let memory = call("POST", "/api/memory/facts", r#"{"content": "Likes tea."}"#);
    let fact = memory["facts"][0]["id"]
        .as_str()
        .expect("a fact")
        .to_owned();
    let quoted = |values: &[&str]| {
        values
            .iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let settings = cluster.dir.path().join("schemathesis.toml");
    std::fs::write(
        &settings,
        format!(
            "[dictionaries.threads]\nvalues = [{}]\n[dictionaries.runs]\nvalues = [{}]\n\
             [dictionaries.ids]\nvalues = [{}]\n[dictionaries.users]\nvalues = [\"alice\"]\n\
             [parameters]\n\"path.tid\" = {{ dictionary = \"threads\", probability = 0.5 }}\n\
             \"path.rid\" = {{ dictionary = \"runs\", probability = 0.5 }}\n\
             \"path.id\" = {{ dictionary = \"ids\", probability = 0.5 }}\n\
             \"query.user\" = {{ dictionary = \"users\", probability = 0.8 }}\n\
             [[operations]]\ninclude-path = \"/mcp\"\n\
             headers = {{ Accept = \"application/json, text/event-stream\", \
             Authorization = \"Bearer {ALICE}\" }}\n",
            quoted(&THREADS),
            quoted(&[&thread_run]),
            quoted(&[&run, &fact, THREADS[1]]),
        ),
    )
    .unwrap();

    let mut cmd = Command::new("schemathesis");
    cmd.arg("--config-file")
        .arg(&settings)
        .args(["run", &format!("http://{addr}/api/openapi.json")])
        .args(["--url", &format!("http://{addr}")])
        .args(["-H", &format!("Authorization: Bearer {ALICE}")])
        // No 5xx; every answer's body matches its documented schema (each event of an
        // event stream too); and its status, content type and headers are documented ones.
        .args([
            "--checks",
            "not_a_server_error,response_schema_conformance,status_code_conformance,\
             content_type_conformance,response_headers_conformance",
        ])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", "10"])
        .args(["--seed", "1"])
        .args(["--request-timeout", "20"])
        // One worker: hypothesis' source introspection is not thread-safe on CPython 3.11
        // (`SystemError: AST constructor recursion depth mismatch`).
        .args(["--workers", "1"])
        .arg("--no-color")
        .current_dir(cluster.dir.path());
    for (operation, _why) in EXCLUDED {
        cmd.args(["--exclude-operation-id", operation]);
    }
    let started = Instant::now();
    let out = cmd
        .output()
        .expect("run schemathesis (pip install -r tests/requirements.txt)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "schemathesis ran {:.1} s\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
