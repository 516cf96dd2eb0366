//! The local provider's bash command validation (spec 6.5 and section 10 case 15): a best
//! effort guard for the explicit `allow_host_bash: true` opt-in, not a security boundary
//! (the bwrap provider is the boundary). Rejects `file://` URLs, `cd` in command
//! substitutions, `..` segments, unsafe `cd`/`pushd` targets, a bare `/` argument to file
//! commands, and absolute paths outside the allowed roots, with DeerFlow's texts.

use std::sync::OnceLock;

use regex::Regex;

use crate::paths::{reject_traversal, PathMap, TRAVERSAL_DENIED, VIRTUAL_PATH_PREFIX};

const CWD_COMMANDS: &[&str] = &["cd", "pushd"];
const COMMAND_WRAPPERS: &[&str] = &["command", "builtin"];
const PREFIX_KEYWORDS: &[&str] = &[
    "!", "{", "case", "do", "elif", "else", "for", "if", "select", "then", "time", "until", "while",
];
const END_KEYWORDS: &[&str] = &["}", "done", "esac", "fi"];
const ROOT_PATH_COMMANDS: &[&str] = &[
    "awk", "cat", "cp", "du", "find", "grep", "head", "less", "ln", "ls", "more", "mv", "rm",
    "sed", "tail", "tar",
];
const SEPARATORS: &[&str] = &[";", "&&", "||", "|", "|&", "&", "(", ")"];
const REDIRECTIONS: &[&str] = &[
    "<", ">", "<<", ">>", "<<<", "<>", ">&", "<&", "&>", "&>>", ">|",
];
const SYSTEM_PATH_PREFIXES: &[&str] = &[
    "/bin/",
    "/usr/bin/",
    "/usr/sbin/",
    "/sbin/",
    "/opt/homebrew/bin/",
    "/dev/",
];
const PUNCTUATION: &str = "();<>|&";

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    // The patterns are constants that compile; a failure is a programming error caught by
    // the unit tests.
    #[allow(clippy::expect_used)]
    cell.get_or_init(|| Regex::new(pattern).expect("constant regex"))
}

fn file_url() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"(?i)\bfile://\S+")
}

fn cd_in_substitution() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"\$\([^)]*\b(?:cd|pushd)\b")
}

fn url_with_scheme() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"(?i)^[a-z][a-z0-9+.-]*://")
}

fn url_in_command() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r#"(?i)\b[a-z][a-z0-9+.-]*://[^\s"'`;&|<>()]+"#)
}

fn dotdot_segment() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"(?:^|[/\\=])\.\.(?:$|[/\\])")
}

fn identifier_block() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"\{([^{}]*)\}")
}

fn identifier() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^[A-Za-z_][A-Za-z0-9_]*$")
}

fn assignment() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^[A-Za-z_][A-Za-z0-9_]*=")
}

fn unsafe_cwd(command: &str, target: Option<&str>) -> String {
    match target {
        Some(t) => format!("Unsafe working directory change in command: {command} {t}. Use paths under {VIRTUAL_PATH_PREFIX}"),
        None => format!("Unsafe working directory change in command: {command}. Use paths under {VIRTUAL_PATH_PREFIX}"),
    }
}

/// Splits like Python's `shlex.shlex(posix=True, punctuation_chars=True)` with whitespace
/// splitting: quotes removed, runs of `();<>|&` as their own tokens. `None` on bad quoting.
fn split_posix(command: &str) -> Option<Vec<String>> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    tokens.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c if PUNCTUATION.contains(c) => {
                if in_word {
                    tokens.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                let mut p = c.to_string();
                while let Some(&n) = chars.peek() {
                    if !PUNCTUATION.contains(n) {
                        break;
                    }
                    p.push(n);
                    chars.next();
                }
                tokens.push(p);
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return None,
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('\\' | '"' | '$' | '`' | '\n')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return None,
                        },
                        Some(x) => cur.push(x),
                        None => return None,
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => return None,
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        tokens.push(cur);
    }
    Some(tokens)
}

fn split_shell_tokens(command: &str) -> Vec<String> {
    let normalized = command
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('\n', " ; ");
    split_posix(&normalized)
        .unwrap_or_else(|| command.split_whitespace().map(str::to_string).collect())
}

fn is_non_file_url_token(token: &str) -> bool {
    let mut values = vec![token];
    if let Some((_, v)) = token.split_once('=') {
        values.push(v);
    }
    values
        .iter()
        .any(|v| url_with_scheme().is_match(v) && !v.to_ascii_lowercase().starts_with("file://"))
}

fn has_dotdot_segment(token: &str) -> bool {
    !is_non_file_url_token(token) && dotdot_segment().is_match(token)
}

fn is_separator(t: &str) -> bool {
    SEPARATORS.contains(&t)
}

fn is_redirection(t: &str) -> bool {
    REDIRECTIONS.contains(&t)
}

fn basename(t: &str) -> &str {
    t.rsplit('/').next().unwrap_or(t)
}

/// The roots a command may name.
struct Allowed<'a> {
    map: &'a PathMap,
    /// MCP filesystem servers' allowed paths.
    extra: &'a [String],
}

impl Allowed<'_> {
    fn allows(&self, path: &str, system_paths: bool) -> Result<bool, String> {
        if self
            .extra
            .iter()
            .any(|a| path.starts_with(a.as_str()) || path == a.trim_end_matches('/'))
            || self.map.is_allowed_command_path(path)
        {
            reject_traversal(path)?;
            return Ok(true);
        }
        Ok(system_paths
            && SYSTEM_PATH_PREFIXES
                .iter()
                .any(|p| path == p.trim_end_matches('/') || path.starts_with(p)))
    }
}

fn next_cd_target(tokens: &[String], start: usize) -> (Option<&str>, usize) {
    let mut i = start;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        if is_separator(t) {
            return (None, i);
        }
        if is_redirection(t) {
            i += 2;
            continue;
        }
        if t == "--" || (t.starts_with('-') && t != "-") {
            i += 1;
            continue;
        }
        return (Some(t), i + 1);
    }
    (None, i)
}

fn validate_cwd_target(
    command: &str,
    target: Option<&str>,
    allowed: &Allowed<'_>,
) -> Result<(), String> {
    let Some(t) = target.filter(|t| *t != "-") else {
        return Err(unsafe_cwd(command, None));
    };
    if t.starts_with('$') || t.starts_with('`') || t.starts_with('~') {
        return Err(unsafe_cwd(command, Some(t)));
    }
    if t.starts_with('/') {
        reject_traversal(t)?;
        if !allowed.allows(t, false)? {
            return Err(unsafe_cwd(command, Some(t)));
        }
    }
    Ok(())
}

fn validate_root_path_args(command: &str, tokens: &[String], start: usize) -> Result<(), String> {
    if !ROOT_PATH_COMMANDS.contains(&command) {
        return Ok(());
    }
    let mut i = start;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        if is_separator(t) {
            return Ok(());
        }
        if is_redirection(t) {
            i += 2;
            continue;
        }
        if t == "/" {
            return Err(format!(
                "Unsafe absolute paths in command: /. Use paths under {VIRTUAL_PATH_PREFIX}"
            ));
        }
        i += 1;
    }
    Ok(())
}

fn validate_shell_tokens(command: &str, allowed: &Allowed<'_>) -> Result<(), String> {
    if cd_in_substitution().is_match(command) {
        return Err(format!(
            "Unsafe working directory change in command substitution. Use paths under {VIRTUAL_PATH_PREFIX}"
        ));
    }
    let tokens = split_shell_tokens(command);
    for t in &tokens {
        if !is_separator(t) && !is_redirection(t) && has_dotdot_segment(t) {
            return Err(TRAVERSAL_DENIED.to_string());
        }
    }
    let mut at_start = true;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        if is_separator(t) {
            at_start = true;
            i += 1;
            continue;
        }
        if is_redirection(t) || (at_start && assignment().is_match(t)) {
            i += 1;
            continue;
        }
        let name = basename(t);
        if !at_start || PREFIX_KEYWORDS.contains(&name) || END_KEYWORDS.contains(&name) {
            i += 1;
            continue;
        }
        at_start = false;
        if COMMAND_WRAPPERS.contains(&name) && i + 1 < tokens.len() {
            let wrapped = basename(&tokens[i + 1]);
            if CWD_COMMANDS.contains(&wrapped) {
                let (target, next) = next_cd_target(&tokens, i + 2);
                validate_cwd_target(wrapped, target, allowed)?;
                i = next;
                continue;
            }
            validate_root_path_args(wrapped, &tokens, i + 2)?;
        }
        if !CWD_COMMANDS.contains(&name) {
            validate_root_path_args(name, &tokens, i + 1)?;
            i += 1;
            continue;
        }
        let (target, next) = next_cd_target(&tokens, i + 1);
        validate_cwd_target(name, target, allowed)?;
        i = next;
    }
    Ok(())
}

fn braces_are_identifier_placeholders_only(fragment: &str) -> bool {
    if fragment.contains("${") {
        return false;
    }
    let blocks: Vec<&str> = identifier_block()
        .captures_iter(fragment)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect();
    if fragment.matches('{').count() != blocks.len()
        || fragment.matches('}').count() != blocks.len()
    {
        return false;
    }
    blocks.iter().all(|b| identifier().is_match(b))
}

fn is_non_path_literal(fragment: &str) -> bool {
    if !fragment.is_ascii() {
        return true;
    }
    if fragment.contains('{') || fragment.contains('}') {
        return braces_are_identifier_placeholders_only(fragment);
    }
    false
}

/// The absolute-path fragments of a command: ``(?<![:\w])(?<!:/)/[^\s"'`;&|<>()]+``.
fn absolute_paths(command: &str) -> Vec<(usize, &str)> {
    let bytes = command.as_bytes();
    let stop = |c: char| c.is_whitespace() || "\"'`;&|<>()".contains(c);
    let mut out = Vec::new();
    let mut i = 0;
    while i < command.len() {
        if bytes[i] != b'/' {
            i += 1;
            continue;
        }
        let prev = command[..i].chars().next_back();
        let prev_ok = !matches!(prev, Some(c) if c == ':' || c.is_alphanumeric() || c == '_');
        let not_after_colon_slash = !(i >= 2 && &bytes[i - 2..i] == b":/");
        let rest = &command[i + 1..];
        let len: usize = rest
            .chars()
            .take_while(|c| !stop(*c))
            .map(char::len_utf8)
            .sum();
        if prev_ok && not_after_colon_slash && len > 0 {
            out.push((i, &command[i..i + 1 + len]));
            i += 1 + len;
        } else {
            i += 1;
        }
    }
    out
}

/// DeerFlow's `validate_local_bash_command_paths`: `Err` holds the `PermissionError` text.
/// `extra_allowed` are the MCP filesystem servers' allowed paths.
pub fn validate_local_bash_command(
    command: &str,
    map: &PathMap,
    extra_allowed: &[String],
) -> Result<(), String> {
    if let Some(m) = file_url().find(command) {
        return Err(format!(
            "Unsafe file:// URL in command: {}. Use paths under {VIRTUAL_PATH_PREFIX}",
            m.as_str()
        ));
    }
    let allowed = Allowed {
        map,
        extra: extra_allowed,
    };
    validate_shell_tokens(command, &allowed)?;
    let url_spans: Vec<(usize, usize)> = url_in_command()
        .find_iter(command)
        .filter(|m| !m.as_str().to_ascii_lowercase().starts_with("file://"))
        .map(|m| (m.start(), m.end()))
        .collect();
    let mut unsafe_paths: Vec<&str> = Vec::new();
    for (start, path) in absolute_paths(command) {
        if url_spans.iter().any(|(s, e)| *s <= start && start < *e) {
            continue;
        }
        if is_non_path_literal(path) {
            continue;
        }
        if allowed.allows(path, true)? {
            continue;
        }
        unsafe_paths.push(path);
    }
    if !unsafe_paths.is_empty() {
        unsafe_paths.sort_unstable();
        unsafe_paths.dedup();
        return Err(format!(
            "Unsafe absolute paths in command: {}. Use paths under {VIRTUAL_PATH_PREFIX}",
            unsafe_paths.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{paths::ThreadPaths, settings::SandboxSettings};

    fn check(cmd: &str) -> Result<(), String> {
        let map = PathMap::new(
            ThreadPaths::new(Path::new("/B"), "u", "t"),
            &SandboxSettings::default(),
        );
        validate_local_bash_command(cmd, &map, &[])
    }

    #[test]
    fn tokens_follow_shlex_with_punctuation() {
        assert_eq!(
            split_shell_tokens("if cd $HOME; then echo 'a b'>x; fi"),
            ["if", "cd", "$HOME", ";", "then", "echo", "a b", ">", "x", ";", "fi"]
        );
    }

    #[test]
    fn the_matrix_of_case_15() {
        let abs = |p: &str| {
            Err(format!(
                "Unsafe absolute paths in command: {p}. Use paths under /mnt/user-data"
            ))
        };
        let cwd = |t: &str| {
            Err(format!(
                "Unsafe working directory change in command: {t}. Use paths under /mnt/user-data"
            ))
        };
        assert_eq!(check("cat /etc/passwd"), abs("/etc/passwd"));
        assert_eq!(
            check("cat /mnt/user-data/workspace/../../etc/passwd"),
            Err(TRAVERSAL_DENIED.into())
        );
        assert_eq!(check("cat ../uploads/x"), Err(TRAVERSAL_DENIED.into()));
        assert_eq!(check("cd .. && ls"), Err(TRAVERSAL_DENIED.into()));
        assert_eq!(check("cd / && ls"), cwd("cd /"));
        assert_eq!(check("cd $HOME && ls"), cwd("cd $HOME"));
        assert_eq!(check("if cd $HOME; then ls; fi"), cwd("cd $HOME"));
        assert_eq!(
            check("echo \"$(cd $HOME && cat x)\""),
            Err("Unsafe working directory change in command substitution. Use paths under /mnt/user-data".into())
        );
        assert_eq!(check("ls /"), abs("/"));
        assert_eq!(
            check("cat /etc/{passwd,shadow}"),
            abs("/etc/{passwd,shadow}")
        );
        assert_eq!(
            check("cat /home/${USER}/.ssh/id_rsa"),
            abs("/home/${USER}/.ssh/id_rsa")
        );
        assert_eq!(
            check("curl file:///etc/passwd"),
            Err(
                "Unsafe file:// URL in command: file:///etc/passwd. Use paths under /mnt/user-data"
                    .into()
            )
        );
        assert_eq!(
            check("cd"),
            Err(
                "Unsafe working directory change in command: cd. Use paths under /mnt/user-data"
                    .into()
            )
        );
        assert_eq!(check("cat /etc/b /etc/a /etc/b"), abs("/etc/a, /etc/b"));
        for ok in [
            "/bin/echo ok > /mnt/user-data/workspace/out.txt && cat /dev/null",
            "git clone https://github.com/x/y.git",
            "curl https://e.com/a/../b.tgz -o /mnt/user-data/workspace/b.tgz",
            "echo cd /",
            "python3 -c \"print('/devices/{id}/port')\"",
            "echo '健康检查 /端口 状态'",
            "cd /mnt/user-data/workspace && ls",
            "ls /mnt/skills/x",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }
}
