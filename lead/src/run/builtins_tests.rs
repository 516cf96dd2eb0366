use super::*;
use crate::catalog::{Promoted, ToolSpec};
use crate::run::context::{AgentContext, ThreadPaths};
use serde_json::json;

struct Thread {
    _dir: tempfile::TempDir,
    context: RunContext,
}

fn thread() -> Thread {
    let dir = tempfile::tempdir().unwrap();
    let paths = ThreadPaths::new(dir.path(), "u1", "thread-1");
    paths.create().unwrap();
    std::fs::write(paths.outputs().join("report.md"), "# Report").unwrap();
    std::fs::create_dir_all(paths.outputs().join("charts")).unwrap();
    std::fs::write(paths.user_data().join("workspace/notes.txt"), "notes").unwrap();
    Thread {
        context: RunContext {
            run_id: "run-1".into(),
            user_id: "u1".into(),
            thread_id: "thread-1".into(),
            agent: AgentContext::new(dir.path()),
            paths,
            clarification_enabled: false,
        },
        _dir: dir,
    }
}

fn present(thread: &Thread, paths: &[&str]) -> StateUpdate {
    present_files(
        &ToolCall {
            id: "c1".into(),
            name: "present_files".into(),
            args: json!({ "filepaths": paths }),
        },
        &thread.context,
    )
}

fn reply(update: &StateUpdate) -> (&str, ToolStatus) {
    match update.messages.as_slice() {
        [Message::Tool {
            content, status, ..
        }] => (content.as_str(), *status),
        other => panic!("{other:?}"),
    }
}

#[test]
fn host_and_virtual_output_paths_are_presented_normalised() {
    let thread = thread();
    let host = thread.context.paths.outputs().join("report.md");
    let update = present(
        &thread,
        &[
            host.to_str().unwrap(),
            "/mnt/user-data/outputs/report.md",
            "mnt/user-data/outputs/charts/",
        ],
    );
    assert_eq!(
        reply(&update),
        ("Successfully presented files", ToolStatus::Success)
    );
    assert_eq!(
        update.artifacts,
        [
            "/mnt/user-data/outputs/report.md",
            "/mnt/user-data/outputs/report.md",
            "/mnt/user-data/outputs/charts"
        ]
    );
}

#[test]
fn paths_outside_outputs_are_refused_with_deerflows_texts() {
    let thread = thread();
    let workspace = thread.context.paths.user_data().join("workspace/notes.txt");
    let workspace = workspace.to_str().unwrap();
    let update = present(&thread, &[workspace]);
    assert_eq!(
        reply(&update),
        (
            format!("Error: Only files in /mnt/user-data/outputs can be presented: {workspace}")
                .as_str(),
            ToolStatus::Error
        )
    );
    assert!(update.artifacts.is_empty());
    assert_eq!(
        reply(&present(&thread, &["/mnt/user-data/../etc/passwd"])).0,
        "Error: Access denied: path traversal detected"
    );
    assert_eq!(
        reply(&present(&thread, &["/mnt/user-dataX/a"])).0,
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-dataX/a"
    );
}

#[test]
fn a_missing_file_is_an_error_and_one_bad_path_fails_the_batch() {
    let thread = thread();
    let update = present(
        &thread,
        &[
            "/mnt/user-data/outputs/report.md",
            "/mnt/user-data/outputs/missing.md",
        ],
    );
    assert_eq!(
        reply(&update),
        (
            "Error: File not found: /mnt/user-data/outputs/missing.md",
            ToolStatus::Error
        )
    );
    assert!(update.artifacts.is_empty());
}

#[test]
fn the_outputs_directory_itself_is_its_own_path_so_it_covers_every_output() {
    let thread = thread();
    let artifacts = present(
        &thread,
        &["/mnt/user-data/outputs", "/mnt/user-data/outputs/"],
    )
    .artifacts;
    assert_eq!(
        artifacts,
        ["/mnt/user-data/outputs", "/mnt/user-data/outputs"]
    );
    assert!(crate::run::settlement::covers(
        &artifacts[0],
        "/mnt/user-data/outputs/report.md"
    ));
}

#[test]
fn a_symlink_out_of_outputs_is_refused() {
    let thread = thread();
    let outputs = thread.context.paths.outputs();
    std::os::unix::fs::symlink(
        thread.context.paths.user_data().join("workspace"),
        outputs.join("escape"),
    )
    .unwrap();
    assert_eq!(
        reply(&present(&thread, &["/mnt/user-data/outputs/escape/notes.txt"])).0,
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/outputs/escape/notes.txt"
    );
}

#[test]
fn clarification_text_is_the_formatted_question() {
    assert_eq!(
        ask_clarification_text(
            &json!({"question": "Which year?", "clarification_type": "missing_info", "options": ["2024", "2025"]})
        ),
        "❓ Which year?\n\n  1. 2024\n  2. 2025"
    );
}

#[test]
fn tool_search_promotes_through_the_catalog() {
    let catalog = Catalog::build(
        vec![ToolSpec::mcp(
            "mcp_calc",
            "Compute sums.",
            json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
            Some("calc".into()),
            "calc",
        )],
        true,
    )
    .unwrap();
    let hash = catalog.hash().unwrap().as_str().to_owned();
    let call = |query: &str| ToolCall {
        id: "tc2".into(),
        name: "tool_search".into(),
        args: json!({ "query": query }),
    };
    let none = tool_search(&call("select:nonexistent"), &catalog).unwrap();
    assert_eq!(
        none.promoted,
        Some(Promoted {
            catalog_hash: hash.clone(),
            names: vec![]
        })
    );
    assert_eq!(
        none.messages,
        [Message::tool(
            "tc2",
            "tool_search",
            "No tools found matching: select:nonexistent",
            ToolStatus::Success
        )]
    );
    let found = tool_search(&call("select:mcp_calc"), &catalog).unwrap();
    assert_eq!(found.promoted.unwrap().names, ["mcp_calc"]);
    let Message::Tool { content, .. } = &found.messages[0] else {
        panic!()
    };
    let schemas: serde_json::Value = serde_json::from_str(content).unwrap();
    assert_eq!(schemas[0]["name"], "mcp_calc");
    let missing = ToolCall {
        args: json!({}),
        ..call("")
    };
    assert_eq!(
        tool_search(&missing, &catalog).unwrap_err(),
        ToolFailure::new("ValidationError", "query: field required (a string)")
    );
}
