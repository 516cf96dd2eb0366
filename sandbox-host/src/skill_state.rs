//! Which skills are disabled, for the gate DeerFlow puts on `ls` of a skill's directory:
//! `skills.{name}.enabled` of `extensions_config.json` (the file the lead and mcp-host
//! read, given by `--extensions` or `ANTLER_EXTENSIONS_CONFIG_PATH`), read at every check
//! so an edit applies at once. Only the `skills` map is read. No file means every skill
//! is enabled; a file that cannot be read or parsed fails closed (DeerFlow's "denying
//! access"): the skill counts as disabled.

use std::path::Path;

use serde_json::Value;

/// DeerFlow's text for a path of a disabled skill; `{name}` is the skill's name.
pub const SKILL_DISABLED: &str = "Error: Skill '{name}' is disabled. Access to its files is blocked. Enable the skill in settings before using it.";

/// The error text for a path of the disabled skill `name`.
pub fn skill_disabled_message(name: &str) -> String {
    SKILL_DISABLED.replacen("{name}", name, 1)
}

/// Whether `name` is disabled in the extensions file at `path` (`None`: no file given).
pub fn is_disabled(path: Option<&Path>, name: &str) -> bool {
    let Some(path) = path else {
        return false;
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the extensions file; skill '{name}' counts as disabled");
            return true;
        }
    };
    let doc: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot parse the extensions file; skill '{name}' counts as disabled");
            return true;
        }
    };
    doc.get("skills")
        .and_then(|s| s.get(name))
        .and_then(|s| s.get("enabled"))
        .and_then(Value::as_bool)
        .is_some_and(|enabled| !enabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_false_is_disabled_and_a_broken_file_fails_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("extensions_config.json");
        assert!(!is_disabled(None, "a"));
        assert!(!is_disabled(Some(&file), "a"), "no file: enabled");
        std::fs::write(
            &file,
            r#"{"mcpServers": {}, "skills": {"a": {"enabled": false}, "b": {"enabled": true}}}"#,
        )
        .expect("write");
        assert!(is_disabled(Some(&file), "a"));
        assert!(!is_disabled(Some(&file), "b"));
        assert!(!is_disabled(Some(&file), "c"));
        std::fs::write(&file, "{not json").expect("write");
        assert!(is_disabled(Some(&file), "c"));
        assert_eq!(
            skill_disabled_message("pdf"),
            "Error: Skill 'pdf' is disabled. Access to its files is blocked. Enable the skill in settings before using it."
        );
    }
}
