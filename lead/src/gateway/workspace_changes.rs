//! A run's workspace changes as DeerFlow's `GET …/runs/{rid}/workspace-changes` shows
//! them (`{available, version, summary, files, limits}`), from what Antler knows: the
//! run's own `write_file` and `str_replace` calls that succeeded. A file `bash` (or any
//! other tool) wrote is not seen, nor a deletion; no diff is kept (`diff` is empty). Pure:
//! `langgraph_reads` reads the run's checkpoints and outputs snapshot.

use serde_json::{json, Value};

use antler_engine::{Message, OutputsSnapshot, ToolStatus};

/// Where a thread's outputs are, as the sandbox tools name them.
const OUTPUTS: &str = "/mnt/user-data/outputs/";

/// One file a run's file tools changed.
#[derive(Default)]
pub(super) struct FileChange {
    created: bool,
    size_after: Option<usize>,
    additions: usize,
    deletions: usize,
}

fn lines(text: &str) -> usize {
    text.lines().count()
}

/// What the run's own `write_file` and `str_replace` calls that succeeded wrote, by
/// path, in call order: a file is `created` when a non-appending `write_file` wrote it
/// first and it was not among the run's outputs when it started (a file of the
/// workspace from before the run, written over, reads as created too).
pub(super) fn file_changes(
    own: &[Message],
    outputs_before: Option<&OutputsSnapshot>,
) -> Vec<(String, FileChange)> {
    let succeeded: std::collections::HashSet<&str> = own
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                status,
                ..
            } if *status != ToolStatus::Error => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut changes: Vec<(String, FileChange)> = Vec::new();
    for message in own {
        let Message::Ai { tool_calls, .. } = message else {
            continue;
        };
        for call in tool_calls {
            if !succeeded.contains(call.id.as_str()) {
                continue;
            }
            let Some(path) = call.args["path"].as_str() else {
                continue;
            };
            let text = |key: &str| call.args[key].as_str().unwrap_or_default().to_owned();
            let existed = outputs_before.is_some_and(|s| {
                path.strip_prefix(OUTPUTS)
                    .is_some_and(|rel| s.files.contains_key(rel))
            });
            let (at, first) = match changes.iter().position(|(p, _)| p == path) {
                Some(at) => (at, false),
                None => {
                    changes.push((path.to_owned(), FileChange::default()));
                    (changes.len() - 1, true)
                }
            };
            let change = &mut changes[at].1;
            match call.name.as_str() {
                "write_file" => {
                    let content = text("content");
                    let append = call.args["append"].as_bool().unwrap_or(false);
                    if first && !append && !existed {
                        change.created = true;
                    }
                    change.additions += lines(&content);
                    change.size_after = (!append).then_some(content.len());
                }
                "str_replace" => {
                    change.deletions += lines(&text("old_str"));
                    change.additions += lines(&text("new_str"));
                    change.size_after = None;
                }
                _ => {}
            }
        }
    }
    changes
}

/// The `root` DeerFlow names a sandbox path by.
fn root_of(path: &str) -> &'static str {
    for (prefix, root) in [
        ("/mnt/user-data/outputs", "outputs"),
        ("/mnt/user-data/workspace", "workspace"),
        ("/mnt/user-data/uploads", "uploads"),
    ] {
        if path.starts_with(prefix) {
            return root;
        }
    }
    "other"
}

/// DeerFlow's workspace-changes response from the run's file changes.
pub(super) fn workspace_changes_json(
    changes: &[(String, FileChange)],
    include_files: bool,
) -> Value {
    let created = changes.iter().filter(|(_, c)| c.created).count();
    let files: Vec<Value> = changes
        .iter()
        .map(|(path, c)| {
            json!({
                "path": path, "root": root_of(path),
                "status": if c.created { "created" } else { "modified" },
                "binary": false, "sensitive": false,
                "size_before": null, "size_after": c.size_after,
                "sha256_before": null, "sha256_after": null,
                "diff": "", "diff_truncated": false, "diff_unavailable_reason": null,
                "additions": c.additions, "deletions": c.deletions,
                "symlink": false, "symlink_target_before": null, "symlink_target_after": null,
            })
        })
        .collect();
    json!({
        "available": true,
        "version": 1,
        "summary": {
            "created": created,
            "modified": changes.len() - created,
            "deleted": 0,
            "symlink_created": 0,
            "additions": changes.iter().map(|(_, c)| c.additions).sum::<usize>(),
            "deletions": changes.iter().map(|(_, c)| c.deletions).sum::<usize>(),
            "truncated": false,
        },
        "files": if include_files { files } else { Vec::new() },
        "limits": {},
    })
}

/// DeerFlow's answer for a run it recorded no changes of.
pub(super) fn no_workspace_changes() -> Value {
    json!({
        "available": false,
        "version": 1,
        "summary": {"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0,
                    "additions": 0, "deletions": 0, "truncated": false},
        "files": [],
        "limits": {},
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_engine::ToolCall;

    #[test]
    fn workspace_changes_are_what_the_file_tools_wrote() {
        let call = |id: &str, name: &str, args: Value| ToolCall {
            id: id.into(),
            name: name.into(),
            args,
        };
        let own = vec![
            Message::human("write"),
            Message::Ai {
                id: "ai-1".into(),
                content: String::new(),
                tool_calls: vec![
                    call(
                        "c1",
                        "write_file",
                        json!({"path": "/mnt/user-data/outputs/new.md", "content": "a\nb\n"}),
                    ),
                    call(
                        "c2",
                        "write_file",
                        json!({"path": "/mnt/user-data/outputs/old.md", "content": "x"}),
                    ),
                    call(
                        "c3",
                        "str_replace",
                        json!({"path": "/mnt/user-data/workspace/w.py", "old_str": "a", "new_str": "b\nc"}),
                    ),
                    call(
                        "c4",
                        "write_file",
                        json!({"path": "/mnt/user-data/outputs/failed.md", "content": "z"}),
                    ),
                ],
                reasoning: None,
            },
            Message::tool("c1", "write_file", "OK", ToolStatus::Success),
            Message::tool("c2", "write_file", "OK", ToolStatus::Success),
            Message::tool("c3", "str_replace", "OK", ToolStatus::Success),
            Message::tool("c4", "write_file", "Error: no", ToolStatus::Error),
        ];
        let before = OutputsSnapshot {
            files: [("old.md".to_owned(), (1, 1))].into_iter().collect(),
        };
        let changes = file_changes(&own, Some(&before));
        let v = workspace_changes_json(&changes, true);
        assert_eq!(v["available"], true);
        assert_eq!(v["summary"]["created"], 1);
        assert_eq!(v["summary"]["modified"], 2);
        assert_eq!(v["summary"]["additions"], 2 + 1 + 2);
        assert_eq!(v["summary"]["deletions"], 1);
        let files = v["files"].as_array().unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(
            (files[0]["status"].as_str(), files[0]["root"].as_str()),
            (Some("created"), Some("outputs"))
        );
        assert_eq!(files[0]["size_after"], 4);
        assert_eq!(files[2]["root"], "workspace");
        assert_eq!(workspace_changes_json(&changes, false)["files"], json!([]));
    }
}
