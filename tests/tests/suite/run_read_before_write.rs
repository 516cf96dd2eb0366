//! ReadBeforeWrite through the whole cluster (`antler run` against the real sandbox-host):
//! with `read_before_write: {enabled: true}`, a new file is written freely, a second write
//! to it is blocked with DeerFlow's text until the model reads it, the read lets exactly
//! one write through (the write changes the file, so the next needs a new read), and a
//! blocked write changes nothing on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::model_support;

const CONFIG: &str = "tools:\n  - {name: read_file, group: file:read, use: deerflow.sandbox.tools:read_file_tool}\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\n  - {name: str_replace, group: file:write, use: deerflow.sandbox.tools:str_replace_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\nread_before_write:\n  enabled: true\n";

const BLOCKED: &str = "Error: {tool} blocked — /mnt/user-data/workspace/notes.md already exists and you have not read its current version. Any write invalidates earlier reads, so re-read before every modification. Call read_file on it (a ranged read of the relevant section is enough, e.g. the last ~30 lines before an append), check what is already there, then retry.";

#[test]
fn writes_to_an_existing_file_need_a_read_of_its_current_version() {
    let dir = model_support::run_dir("antler-rbw", CONFIG, "{\"mcpServers\": {}}");
    let (view, tools) = model_support::run_playbook(
        dir.path(),
        "Keep notes",
        r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: new file, path: /mnt/user-data/workspace/notes.md, content: "first\n"}}
  - tool_calls:
      - {name: write_file, args: {description: overwrite unread, path: /mnt/user-data/workspace/notes.md, content: "clobbered\n"}}
  - tool_calls:
      - {name: read_file, args: {description: look, path: /mnt/user-data/workspace/notes.md, start_line: 1, end_line: 1}}
  - tool_calls:
      - {name: str_replace, args: {description: edit, path: /mnt/user-data/workspace/notes.md, old_str: first, new_str: second}}
  - tool_calls:
      - {name: str_replace, args: {description: edit again unread, path: /mnt/user-data/workspace/./notes.md, old_str: second, new_str: third}}
  - content: Done.
"#,
    );
    assert_eq!(view["status"], "success", "{view}");
    let contents: Vec<&str> = tools
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tools[0]["status"], "success", "{contents:?}");
    assert_eq!(contents[1], BLOCKED.replace("{tool}", "write_file"));
    assert_eq!(tools[1]["status"], "error");
    assert!(contents[2].contains("first"), "{contents:?}");
    assert_eq!(tools[3]["status"], "success", "{contents:?}");
    assert_eq!(
        contents[4],
        BLOCKED
            .replace("{tool}", "str_replace")
            .replace("/workspace/notes.md", "/workspace/./notes.md")
    );
    // The blocked writes changed nothing: the file holds the one edit let through.
    let notes = walk_for(dir.path(), "notes.md").expect("the workspace file");
    assert_eq!(std::fs::read_to_string(notes).unwrap(), "second\n");
}

/// The first file named `name` under `dir`.
fn walk_for(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = walk_for(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}
