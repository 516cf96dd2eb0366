//! The tool-list-changed stream a catalog subscribes to: `WatchTools` on mcp-host streams a
//! `ToolsChanged` item when a server re-lists its tools after `notifications/tools/list_changed`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::mcp_support::{peer_script, python, stdio, McpCluster};
use antler_protocol::{
    calls::{watch_tools, ToolsChanged},
    link::dial,
    runtime_dir::RuntimeDir,
    Address, ConnectionConfig, Identity, Role,
};
use serde_json::json;

#[test]
fn watch_tools_streams_each_change_of_a_servers_tool_list() {
    let c = McpCluster::start(json!({"py": stdio(python(), &[&peer_script("slow_tools.py")])}));
    assert_eq!(c.tool_names("py").len(), 7);
    let rt = RuntimeDir::open(c.runtime_dir()).expect("runtime dir");
    let token = rt.read_token().expect("token");
    let socket = rt.socket(Role::McpHost, 0);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = c.runtime_dir();
    let item = runtime.block_on(async move {
        let me = Identity::new(Role::Lead, "watch-test", Some(token));
        let conn = dial(
            &Address::Unix(socket),
            &me,
            ConnectionConfig::default(),
            None,
        )
        .await
        .expect("dial mcp-host");
        let mut stream = watch_tools(&conn, Duration::from_secs(30))
            .await
            .expect("watch");
        // Give the subscription a moment to register, then change the tool list.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let grow = tokio::task::spawn_blocking(move || {
            antler_tests::antler(
                &dir,
                &[
                    "mcp",
                    "call",
                    "py",
                    "grow",
                    "--args",
                    r#"{"name": "watched"}"#,
                ],
            )
        });
        let item = stream.next().await.expect("an item").expect("not an error");
        assert!(grow.await.expect("grow").status.success());
        item
    });
    assert_eq!(
        item,
        Some(ToolsChanged {
            server: "py".into(),
            tools: 8
        })
    );
    assert!(c.tool_names("py").contains(&"py_watched".to_owned()));
}
