//! Elicitation by policy (asking the run's user is `mcp_elicitation_ask`): Antler declares form
//! elicitation; a server's `elicitation/create` is declined by default, and under
//! `"elicitation": "accept_defaults"` accepted with the requested schema's defaults when
//! they fill every required field (the raw server's `ask`), else declined
//! (server-everything's `trigger-elicitation-request`, whose required `name` has none).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::{config_check_refused, npm_bin, peer_script, python, McpCluster};
use serde_json::{json, Value};

fn raw_elicit(policy: Option<&str>) -> Value {
    let mut server = json!({"type": "stdio", "command": python(), "args": [peer_script("raw_server.py"), "elicit"]});
    if let Some(p) = policy {
        server["elicitation"] = json!(p);
    }
    server
}

#[test]
fn elicitation_is_declined_or_answered_with_the_schema_defaults() {
    let c = McpCluster::start(json!({
        "declines": raw_elicit(None),
        "defaults": raw_elicit(Some("accept_defaults")),
        "everything": {
            "type": "stdio",
            "command": npm_bin("mcp-server-everything").display().to_string(),
            "elicitation": "accept_defaults",
        },
    }));
    let answer = |server: &str| {
        let (code, result) = c.call(server, "ask", "{}");
        assert_eq!(code, 0, "{result}");
        serde_json::from_str::<Value>(&McpCluster::text(&result)).unwrap()
    };
    assert_eq!(answer("declines"), json!({"action": "decline"}));
    assert_eq!(
        answer("defaults"),
        json!({"action": "accept", "content": {"name": "Ada", "age": 36}})
    );

    // everything asks for a required `name` with no default: declined.
    let names = antler_tests::wait_for(std::time::Duration::from_secs(15), || {
        c.tool_names("everything")
            .iter()
            .any(|n| n == "everything_trigger-elicitation-request")
            .then_some(())
    });
    assert!(names.is_some(), "{:?}", c.tool_names("everything"));
    let (code, result) = c.call("everything", "trigger-elicitation-request", "{}");
    assert_eq!(code, 0, "{result}");
    let text = McpCluster::text(&result);
    assert!(
        text.contains("User declined to provide the requested information"),
        "{text}"
    );
}

#[test]
fn an_unknown_elicitation_policy_is_refused_with_what_is_accepted() {
    let said = config_check_refused(&json!({"odd": raw_elicit(Some("ask_the_moon"))}));
    assert!(
        said.contains("mcpServers.odd.elicitation: unknown variant `ask_the_moon`, expected one of `decline`, `accept_defaults`, `ask`"),
        "{said}"
    );
}
