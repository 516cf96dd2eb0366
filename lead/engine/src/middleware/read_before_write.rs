//! ReadBeforeWrite (spec 4.5, DeerFlow's `read_before_write:`): a version gate on writes.
//! `write_file` and `str_replace` on a file that exists are blocked unless the run's
//! messages hold a `read_file` result of the file's current version: each successful
//! `read_file` is stamped with a read mark (`additional_kwargs.deerflow_read_mark`: the
//! path and the sha256 of the whole file as it was then), and a write is let through when
//! the file's current content hashes to a mark of its path. Writes never refresh marks:
//! a write changes the content, so the next write needs a new read. Marks live on the
//! tool messages, so a summarization that removes a read removes its mark. Fail-open: a
//! file that does not exist or cannot be read is not gated (the tool gives its own
//! error). The current content is read through the run's sandbox, like the tools.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::thread::state::Message;

/// DeerFlow's block message (`{tool}`, `{path}`).
pub const BLOCK_MESSAGE: &str = "Error: {tool} blocked — {path} already exists and you have not read its current version. Any write invalidates earlier reads, so re-read before every modification. Call read_file on it (a ranged read of the relevant section is enough, e.g. the last ~30 lines before an append), check what is already there, then retry.";

/// Where a read mark lives on a `read_file` tool message.
pub const READ_MARK_KEY: &str = "deerflow_read_mark";

/// The tool whose results are stamped.
pub const READ_TOOL: &str = "read_file";
/// The tools gated.
pub const GATED_TOOLS: [&str; 2] = ["write_file", "str_replace"];

/// What a sandbox's read answers when it cannot read the file (a missing file too).
const UNINSPECTABLE_PREFIX: &str = "Error:";

/// `read_before_write.enabled` (off unless the config turns it on, as DeerFlow's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadBeforeWrite {
    pub enabled: bool,
}

/// The path as marks compare it: POSIX-normalised (`a/./b/../c` is `a/c`).
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// The content a gate read answered, when it could read the file (`None`: not there or
/// not readable, so nothing is gated or stamped).
pub fn inspectable(content: &str, is_error: bool) -> Option<&str> {
    (!is_error && !content.starts_with(UNINSPECTABLE_PREFIX)).then_some(content)
}

fn digest(content: &str) -> String {
    hex::encode(Sha256::digest(content.as_bytes()))
}

/// The read mark of `path` read at `content`.
pub fn mark(path: &str, content: &str) -> Value {
    json!({"path": normalize(path), "sha256": digest(content)})
}

/// `kwargs` (a tool message's `additional_kwargs`) with the read mark added.
pub fn stamped(kwargs: Option<Box<Value>>, path: &str, content: &str) -> Option<Box<Value>> {
    let mut kwargs = kwargs.map_or_else(|| json!({}), |k| *k);
    if let Some(object) = kwargs.as_object_mut() {
        object.insert(READ_MARK_KEY.to_owned(), mark(path, content));
    }
    Some(Box::new(kwargs))
}

/// Whether `messages` hold a read of `path` at `content`.
pub fn has_read(messages: &[Message], path: &str, content: &str) -> bool {
    let wanted = mark(path, content);
    messages.iter().any(|m| match m {
        Message::Tool {
            name,
            additional_kwargs: Some(kwargs),
            ..
        } if name == READ_TOOL => kwargs.get(READ_MARK_KEY) == Some(&wanted),
        _ => false,
    })
}

/// The block message for `tool` on `path`.
pub fn block_message(tool: &str, path: &str) -> String {
    BLOCK_MESSAGE
        .replace("{tool}", tool)
        .replace("{path}", path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread::state::ToolStatus;

    fn read_result(path: &str, content: &str) -> Message {
        let mut message = Message::tool("c1", READ_TOOL, "1: text", ToolStatus::Success);
        if let Message::Tool {
            additional_kwargs, ..
        } = &mut message
        {
            *additional_kwargs = stamped(None, path, content);
        }
        message
    }

    #[test]
    fn paths_normalise_as_posixpath_does() {
        assert_eq!(
            normalize("/mnt/user-data/./outputs/../outputs/a.md"),
            "/mnt/user-data/outputs/a.md"
        );
        assert_eq!(normalize("a//b/"), "a/b");
        assert_eq!(normalize("../x"), "../x");
        assert_eq!(normalize("/.."), "/");
    }

    #[test]
    fn a_write_needs_a_read_of_the_current_version() {
        let messages = vec![read_result("/mnt/user-data/outputs/a.md", "v1")];
        assert!(has_read(&messages, "/mnt/user-data/outputs/./a.md", "v1"));
        // The file changed since (another write): the old read does not count.
        assert!(!has_read(&messages, "/mnt/user-data/outputs/a.md", "v2"));
        assert!(!has_read(&messages, "/mnt/user-data/outputs/b.md", "v1"));
    }

    #[test]
    fn a_missing_or_unreadable_file_is_not_gated() {
        assert_eq!(inspectable("Error: File not found: /x", false), None);
        assert_eq!(inspectable("text", true), None);
        assert_eq!(inspectable("text", false), Some("text"));
    }

    #[test]
    fn the_block_message_is_deerflows() {
        assert_eq!(
            block_message("str_replace", "/mnt/user-data/outputs/a.md"),
            "Error: str_replace blocked — /mnt/user-data/outputs/a.md already exists and you have not read its current version. Any write invalidates earlier reads, so re-read before every modification. Call read_file on it (a ranged read of the relevant section is enough, e.g. the last ~30 lines before an append), check what is already there, then retry."
        );
    }
}
