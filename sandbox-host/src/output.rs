//! What tool output looks like (spec 6.5): the `bash` result format and its timeout text,
//! redaction of injected secrets, and the three truncations (bash: middle, 50/50 around a
//! marker; read_file and ls: head). Lengths count characters, as Python's `len` does, and
//! every truncated result including its marker fits in the limit.

/// Injected secrets shorter than this are not redacted (they would shred unrelated output).
pub const MIN_REDACTED_SECRET_CHARS: usize = 8;
/// What a redacted secret becomes.
pub const REDACTED: &str = "[redacted]";
/// The result of a command with no output at all.
pub const NO_OUTPUT: &str = "(no output)";
/// Added after DeerFlow's timeout text: the improvement of spec section 11.
pub const GROUP_KILLED: &str = "The command's whole process group was killed.";

/// Formats seconds as Python's `%g` does for the values a timeout takes.
pub fn fmt_g(secs: f64) -> String {
    if secs.fract() == 0.0 && secs.abs() < 1e15 {
        return format!("{}", secs as i64);
    }
    let s = format!("{secs:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// DeerFlow's timeout text; the unit is singular for exactly 1.
pub fn timeout_message(secs: f64) -> String {
    let unit = if secs == 1.0 { "second" } else { "seconds" };
    format!(
        "Command timed out after {} {unit} and was terminated. To run a long-lived process such as a web server, start it in the background and redirect its output, e.g. `your-command > /mnt/user-data/workspace/server.log 2>&1 &`.",
        fmt_g(secs)
    )
}

/// `stdout`, then `\nStd Error:\n{stderr}`, then `\nExit Code: {rc}` when rc ≠ 0, or
/// `(no output)`; a timeout appends its text and says the group was killed.
pub fn format_bash(stdout: &str, stderr: &str, code: i32, timed_out: Option<f64>) -> String {
    let mut out = stdout.to_string();
    if !stderr.is_empty() {
        out.push_str("\nStd Error:\n");
        out.push_str(stderr);
    }
    match (code, timed_out) {
        (_, Some(secs)) => {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&timeout_message(secs));
            out.push('\n');
            out.push_str(GROUP_KILLED);
        }
        (rc, None) if rc != 0 => out.push_str(&format!("\nExit Code: {rc}")),
        _ => {}
    }
    if out.is_empty() {
        NO_OUTPUT.to_string()
    } else {
        out
    }
}

/// Replaces injected secret values (8 characters or more) by `[redacted]`, longest first.
pub fn redact(output: &str, secrets: &[(String, String)]) -> String {
    let mut values: Vec<&str> = secrets
        .iter()
        .map(|(_, v)| v.as_str())
        .filter(|v| v.chars().count() >= MIN_REDACTED_SECRET_CHARS)
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    let mut out = output.to_string();
    for v in values {
        out = out.replace(v, REDACTED);
    }
    out
}

fn char_prefix(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn char_suffix(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

/// Middle truncation around `\n... [middle truncated: {skipped} chars skipped] ...\n`,
/// head and tail 50/50; `max == 0` disables it.
pub fn truncate_middle(output: &str, max: usize) -> String {
    let total = output.chars().count();
    if max == 0 || total <= max {
        return output.to_string();
    }
    let marker_max = format!("\n... [middle truncated: {total} chars skipped] ...\n")
        .chars()
        .count();
    let kept = max.saturating_sub(marker_max);
    if kept == 0 {
        return char_prefix(output, max).to_string();
    }
    let head = kept / 2;
    let tail = kept - head;
    let skipped = total - kept;
    format!(
        "{}\n... [middle truncated: {skipped} chars skipped] ...\n{}",
        char_prefix(output, head),
        char_suffix(output, tail)
    )
}

fn truncate_head(output: &str, max: usize, hint: &str) -> String {
    let total = output.chars().count();
    if max == 0 || total <= max {
        return output.to_string();
    }
    let marker_max =
        format!("\n... [truncated: showing first {total} of {total} chars. {hint}] ...")
            .chars()
            .count();
    let kept = max.saturating_sub(marker_max);
    if kept == 0 {
        return char_prefix(output, max).to_string();
    }
    format!(
        "{}\n... [truncated: showing first {kept} of {total} chars. {hint}] ...",
        char_prefix(output, kept)
    )
}

/// read_file's head truncation.
pub fn truncate_read_file(output: &str, max: usize) -> String {
    truncate_head(
        output,
        max,
        "Use start_line/end_line to read a specific range",
    )
}

/// ls's head truncation.
pub fn truncate_ls(output: &str, max: usize) -> String {
    truncate_head(output, max, "Use a more specific path to see fewer results")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_format() {
        assert_eq!(format_bash("", "", 0, None), "(no output)");
        assert_eq!(
            format_bash("a\n", "b\n", 2, None),
            "a\n\nStd Error:\nb\n\nExit Code: 2"
        );
        assert!(
            format_bash("", "", -9, Some(1.0)).starts_with("Command timed out after 1 second and")
        );
        assert!(format_bash("", "", -9, Some(0.5))
            .starts_with("Command timed out after 0.5 seconds and"));
        assert!(format_bash("", "", -9, Some(600.0))
            .starts_with("Command timed out after 600 seconds and"));
    }

    #[test]
    fn middle_truncation_fits_and_keeps_both_ends() {
        let s: String = "a".repeat(30_000) + &"b".repeat(30_000);
        let t = truncate_middle(&s, 20_000);
        assert!(t.chars().count() <= 20_000);
        assert!(t.starts_with('a') && t.ends_with('b'));
        assert!(
            t.contains("\n... [middle truncated: 40049 chars skipped] ...\n"),
            "{}",
            &t[9_900..10_100]
        );
        assert_eq!(truncate_middle(&s, 0), s);
    }

    #[test]
    fn head_truncation_marker() {
        let s = "x".repeat(60_000);
        let t = truncate_read_file(&s, 50_000);
        assert!(t.chars().count() <= 50_000);
        assert!(t.ends_with("\n... [truncated: showing first 49894 of 60000 chars. Use start_line/end_line to read a specific range] ..."));
    }

    #[test]
    fn redaction_longest_first_and_skips_short_values() {
        let secrets = vec![
            ("A".into(), "supersecret".into()),
            ("B".into(), "supersecret-long".into()),
            ("C".into(), "short".into()),
        ];
        assert_eq!(
            redact("supersecret-long supersecret short", &secrets),
            "[redacted] [redacted] short"
        );
    }
}
