//! Tool naming (spec 5.2): `{server}_{tool}` when `tool_name_prefix` is on, the raw name
//! otherwise, and the validation that drops any name outside `^[A-Za-z0-9_-]+$` so a crafted
//! name cannot forge prompt tags or markdown.

/// The name the model sees for `tool` of `server`.
pub fn exposed_name(server: &str, tool: &str, prefix: bool) -> String {
    if prefix {
        format!("{server}_{tool}")
    } else {
        tool.to_owned()
    }
}

/// The server's own name for an exposed name (the prefix stripped when prefixing is on).
pub fn original_name<'a>(server: &str, exposed: &'a str, prefix: bool) -> &'a str {
    if prefix {
        exposed
            .strip_prefix(server)
            .and_then(|rest| rest.strip_prefix('_'))
            .unwrap_or(exposed)
    } else {
        exposed
    }
}

/// Whether a name may be shown to the model: `^[A-Za-z0-9_-]+$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixing_and_stripping_round_trip() {
        assert_eq!(exposed_name("fs", "read_file", true), "fs_read_file");
        assert_eq!(exposed_name("fs", "read_file", false), "read_file");
        assert_eq!(original_name("fs", "fs_read_file", true), "read_file");
        assert_eq!(original_name("fs", "read_file", true), "read_file");
        assert_eq!(original_name("fs", "fs_read_file", false), "fs_read_file");
    }

    #[test]
    fn only_the_safe_alphabet_is_valid() {
        assert!(is_valid_tool_name("a-B_9"));
        for bad in ["", "a b", "a<b>", "tool`x`", "é", "a.b", "a/b"] {
            assert!(!is_valid_tool_name(bad), "{bad:?}");
        }
    }
}
