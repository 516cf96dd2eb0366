//! `ToolOutputBudget` (spec 4.5): a tool result above 12,000 characters is written
//! under `outputs/.tool-results` and replaced by a preview with its path; without a
//! writable outputs directory it is cut to 30,000 characters (head and tail kept).
//! `read_file` is exempt. `tool_output:` sets the limits (C.8: off, per-tool thresholds,
//! exempt tools; a threshold of 0 never writes a file, only cuts at the fallback limit).
//! The file name is a digest of the call id and the content, so a replayed step writes
//! the same file. The preview's synopsis is DeerFlow's text kind
//! (JSON, CSV, YAML, XML and code synopses are not detected yet).

use std::path::Path;

use antler_protocol::beneath::Dir;
use antler_protocol::thread_dir;
use sha2::{Digest, Sha256};

use crate::thread::files::ThreadFiles;

/// The tool-results directory under `outputs`, excluded from delivery settlement.
pub const TOOL_RESULTS_DIR: &str = thread_dir::TOOL_RESULTS_DIR;
/// The virtual outputs root the model sees.
pub const VIRTUAL_OUTPUTS: &str = thread_dir::VIRTUAL_OUTPUTS;

/// The fallback's marker; `{n}` omitted characters of `{tool}`'s output.
pub const OMITTED_MARKER: &str = "\n\n[... {n} chars omitted from {tool} output. Persistent storage unavailable. Consider narrowing the query or using more specific parameters.]\n\n";

/// Tools whose results are never budgeted, by default (`tool_output.exempt_tools`).
pub const EXEMPT_TOOLS: &[&str] = &["read_file", "read_file_tool"];

/// The budget's limits (DeerFlow's defaults; `tool_output:` in config.yaml).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputBudget {
    /// Off: every result goes to the model as it is.
    pub enabled: bool,
    /// Over this many characters a result is written to a file (0: never).
    pub max_chars: usize,
    pub preview_head: usize,
    pub preview_tail: usize,
    /// Without a file, a result is cut to this many characters (0: never cut).
    pub fallback_max_chars: usize,
    pub fallback_head: usize,
    pub fallback_tail: usize,
    pub exempt_tools: Vec<String>,
    /// `max_chars` per tool.
    pub tool_overrides: std::collections::BTreeMap<String, usize>,
}

impl Default for OutputBudget {
    fn default() -> Self {
        OutputBudget {
            enabled: true,
            max_chars: 12_000,
            preview_head: 2_000,
            preview_tail: 1_000,
            fallback_max_chars: 30_000,
            fallback_head: 8_000,
            fallback_tail: 3_000,
            exempt_tools: EXEMPT_TOOLS.iter().map(|t| (*t).to_owned()).collect(),
            tool_overrides: std::collections::BTreeMap::new(),
        }
    }
}

/// What the budget does with one result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    Pass,
    /// Written to a file, a preview sent (cut instead when no file can be written).
    Externalize,
    /// Externalization is off for the tool: cut to `fallback_max_chars`.
    Truncate,
}

impl OutputBudget {
    /// The budget of a checked `tool_output:` section.
    pub fn from_config(config: &antler_protocol::config::ToolOutputConfig) -> OutputBudget {
        OutputBudget {
            enabled: config.enabled,
            max_chars: config.externalize_min_chars,
            preview_head: config.preview_head_chars,
            preview_tail: config.preview_tail_chars,
            fallback_max_chars: config.fallback_max_chars,
            fallback_head: config.fallback_head_chars,
            fallback_tail: config.fallback_tail_chars,
            exempt_tools: config.exempt_tools.clone(),
            tool_overrides: config.tool_overrides.clone(),
        }
    }

    fn plan(&self, tool_name: &str, content: &str) -> Plan {
        if !self.enabled || self.exempt_tools.iter().any(|t| t == tool_name) {
            return Plan::Pass;
        }
        let threshold = self
            .tool_overrides
            .get(tool_name)
            .copied()
            .unwrap_or(self.max_chars);
        let chars = content.chars().count();
        if threshold > 0 && chars > threshold {
            Plan::Externalize
        } else if threshold == 0 && self.fallback_max_chars > 0 && chars > self.fallback_max_chars {
            Plan::Truncate
        } else {
            Plan::Pass
        }
    }
}

impl OutputBudget {
    /// The content the model gets for one tool result, its spill file written through
    /// the thread's `files` (on this disk or on the sandbox-host that owns the thread).
    pub async fn apply_through(
        &self,
        tool_name: &str,
        tool_call_id: &str,
        content: String,
        files: &dyn ThreadFiles,
    ) -> String {
        match self.plan(tool_name, &content) {
            Plan::Pass => return content,
            Plan::Truncate => return self.fallback(&content, tool_name),
            Plan::Externalize => {}
        }
        let file_name = externalized_file_name(tool_name, tool_call_id, &content);
        match files.write_spill(&file_name, &content).await {
            Ok(()) => {
                let virtual_path = format!("{VIRTUAL_OUTPUTS}/{TOOL_RESULTS_DIR}/{file_name}");
                self.preview(&content, tool_name, &virtual_path)
            }
            Err(error) => {
                tracing::warn!(tool = tool_name, %error, "cannot externalise a tool result, truncating");
                self.fallback(&content, tool_name)
            }
        }
    }

    /// The content the model gets for one tool result. `outputs_dir` is the thread's
    /// host outputs directory, when this process can write it.
    pub fn apply(
        &self,
        tool_name: &str,
        tool_call_id: &str,
        content: String,
        outputs_dir: Option<&Path>,
    ) -> String {
        match self.plan(tool_name, &content) {
            Plan::Pass => return content,
            Plan::Truncate => return self.fallback(&content, tool_name),
            Plan::Externalize => {}
        }
        if let Some(dir) = outputs_dir {
            match externalize(&content, tool_name, tool_call_id, dir) {
                Ok(virtual_path) => return self.preview(&content, tool_name, &virtual_path),
                Err(error) => {
                    tracing::warn!(tool = tool_name, %error, "cannot externalise a tool result, truncating")
                }
            }
        }
        self.fallback(&content, tool_name)
    }

    /// `render_tool_output_preview` for text output.
    pub fn preview(&self, content: &str, tool_name: &str, virtual_path: &str) -> String {
        let total = content.chars().count();
        let mut lines = vec![
            format!(
                "[Full {tool_name} output saved to {virtual_path} ({total} chars, ~{} tokens).]",
                total / 4
            ),
            "[Preview kind: text. This is a structured synopsis, not a raw head/tail truncation.]"
                .to_owned(),
            String::new(),
            "Text output:".to_owned(),
        ];
        lines.extend(
            text_summary(content, tool_name)
                .into_iter()
                .map(|l| format!("- {l}")),
        );
        let sample = raw_sample(content, self.preview_head, self.preview_tail);
        if !sample.is_empty() {
            lines.push(String::new());
            lines.push("Raw sample (head + tail, clipped to head_chars / tail_chars):".to_owned());
            lines.push(sample);
        }
        lines.push(String::new());
        lines.push("Access:".to_owned());
        lines.push(format!(
            "- Use read_file on {virtual_path} with start_line and end_line to inspect the raw output."
        ));
        lines.join("\n")
    }

    /// `_build_fallback`: head and tail around the omitted marker, at most
    /// `fallback_max_chars` characters.
    pub fn fallback(&self, content: &str, tool_name: &str) -> String {
        let chars: Vec<char> = content.chars().collect();
        let total = chars.len();
        if self.fallback_max_chars == 0 || total <= self.fallback_max_chars {
            return content.to_owned();
        }
        let marker = |n: usize| {
            OMITTED_MARKER
                .replacen("{n}", &n.to_string(), 1)
                .replacen("{tool}", tool_name, 1)
        };
        let overhead = marker(total).chars().count();
        if overhead >= self.fallback_max_chars {
            return chars[..self.fallback_max_chars].iter().collect();
        }
        let budget = self.fallback_max_chars - overhead;
        let head = self.fallback_head.min(budget);
        let tail = self.fallback_tail.min(budget.saturating_sub(head));
        let head_end = snap_end(&chars, head.min(total));
        let tail_start = snap_start(&chars, head_end.max(total - tail));
        let omitted = total - head_end - (total - tail_start);
        let mut out: String = chars[..head_end].iter().collect();
        out.push_str(&marker(omitted));
        out.extend(&chars[tail_start..]);
        out
    }
}

/// `_snap_to_line_boundary`: end at the last newline in the second half, if any.
fn snap_end(chars: &[char], pos: usize) -> usize {
    if pos == 0 || pos >= chars.len() {
        return pos;
    }
    let half = pos / 2;
    match chars[half..pos].iter().rposition(|&c| c == '\n') {
        Some(i) => half + i + 1,
        None => pos,
    }
}

/// `_snap_start_to_line_boundary`: start after the first newline in the first half of
/// the rest, if any.
fn snap_start(chars: &[char], pos: usize) -> usize {
    if pos == 0 || pos >= chars.len() {
        return pos;
    }
    let half = pos + (chars.len() - pos) / 2;
    match chars[pos..half].iter().position(|&c| c == '\n') {
        Some(i) => pos + i + 1,
        None => pos,
    }
}

/// `_summarize_text` without excerpts (the raw sample follows).
fn text_summary(content: &str, tool_name: &str) -> Vec<String> {
    let lines: Vec<&str> = content.lines().collect();
    let words = content.split_whitespace().count();
    let mut headers: Vec<String> = Vec::new();
    for line in &lines {
        let stripped = line.trim();
        if stripped.is_empty() || !(is_markdown_header(stripped) || is_caps_header(stripped)) {
            continue;
        }
        let header = one_line(stripped, 160);
        if !headers.contains(&header) {
            headers.push(header);
        }
        if headers.len() >= 16 {
            break;
        }
    }
    let hint = if tool_name.is_empty() {
        String::new()
    } else {
        format!(" from {tool_name}")
    };
    vec![
        format!(
            "Text output{hint} with {} characters, {words} words, and {} lines.",
            content.chars().count(),
            lines.len()
        ),
        format!(
            "Detected section headers: {}.",
            if headers.is_empty() {
                "none detected".to_owned()
            } else {
                headers.join(" | ")
            }
        ),
    ]
}

fn is_markdown_header(line: &str) -> bool {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    (1..=6).contains(&hashes) && line[hashes..].starts_with(char::is_whitespace)
}

fn is_caps_header(line: &str) -> bool {
    let mut chars = line.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && line.chars().count() >= 7
        && chars.all(|c| {
            c.is_ascii_uppercase() || c.is_ascii_digit() || c.is_whitespace() || ":_-".contains(c)
        })
}

fn one_line(text: &str, limit: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= limit {
        return joined;
    }
    let mut cut: String = joined.chars().take(limit.saturating_sub(3)).collect();
    cut.push_str("...");
    cut
}

/// `_build_raw_sample`: head up to its last newline, `...`, tail from its first newline.
fn raw_sample(content: &str, head_budget: usize, tail_budget: usize) -> String {
    let chars: Vec<char> = content.chars().collect();
    if chars.len() <= head_budget + tail_budget {
        return content.to_owned();
    }
    let mut parts = Vec::new();
    if head_budget > 0 {
        let head = &chars[..head_budget];
        let end = match head.iter().rposition(|&c| c == '\n') {
            Some(i) if i > 0 => i,
            _ => head.len(),
        };
        parts.push(head[..end].iter().collect::<String>());
    }
    if tail_budget > 0 {
        let tail = &chars[chars.len() - tail_budget..];
        let start = match tail.iter().position(|&c| c == '\n') {
            Some(i) if i < tail.len() - 1 => i + 1,
            _ => 0,
        };
        parts.push(tail[start..].iter().collect::<String>());
    }
    parts.join("\n...\n")
}

/// Writes the full output to `outputs/.tool-results/{tool}-{sha256}.{ext}` (through a
/// temporary name, then a rename, beneath a handle on `outputs`: see
/// `thread_dir::write_spill`) and returns its virtual path.
fn externalize(
    content: &str,
    tool_name: &str,
    tool_call_id: &str,
    outputs_dir: &Path,
) -> std::io::Result<String> {
    let name = outputs_dir
        .file_name()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let parent = outputs_dir.parent().unwrap_or(Path::new("/"));
    let outputs = Dir::open(parent)?.open_dir(Path::new(name))?;
    let file_name = externalized_file_name(tool_name, tool_call_id, content);
    thread_dir::write_spill(&outputs, &file_name, content.as_bytes())
        .map_err(std::io::Error::other)?;
    Ok(format!("{VIRTUAL_OUTPUTS}/{TOOL_RESULTS_DIR}/{file_name}"))
}

/// `_build_externalized_filename`: the tool name without path parts, a digest of the
/// length-framed call id and the content, `.log` for shell and fetch tools.
pub fn externalized_file_name(tool_name: &str, tool_call_id: &str, content: &str) -> String {
    let base = tool_name.rsplit('/').next().unwrap_or_default();
    let safe = base.replace("..", "").replace(['/', '\\'], "_");
    let safe = if safe.is_empty() {
        "unknown".to_owned()
    } else {
        safe
    };
    let ext = match tool_name {
        "bash" | "bash_tool" | "web_fetch" => "log",
        _ => "txt",
    };
    let mut digest = Sha256::new();
    digest.update((tool_call_id.len() as u64).to_be_bytes());
    digest.update(tool_call_id.as_bytes());
    digest.update(content.as_bytes());
    format!("{safe}-{}.{ext}", hex::encode(digest.finalize()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn big(lines: usize) -> String {
        (0..lines)
            .map(|i| format!("line {i:05} of output\n"))
            .collect()
    }

    #[test]
    fn small_results_and_read_file_pass_unchanged() {
        let budget = OutputBudget::default();
        assert_eq!(budget.apply("bash", "c1", "ok".into(), None), "ok");
        let large = big(2_000);
        assert_eq!(budget.apply("read_file", "c1", large.clone(), None), large);
    }

    #[test]
    fn a_large_result_is_written_under_tool_results_with_a_preview() {
        let dir = tempfile::tempdir().unwrap();
        let content = format!("# RESULTS\n{}", big(1_000));
        let total = content.chars().count();
        let preview =
            OutputBudget::default().apply("bash", "c1", content.clone(), Some(dir.path()));
        let name = externalized_file_name("bash", "c1", &content);
        assert!(
            name.starts_with("bash-") && name.ends_with(".log"),
            "{name}"
        );
        let virtual_path = format!("/mnt/user-data/outputs/.tool-results/{name}");
        let on_disk =
            std::fs::read_to_string(dir.path().join(".tool-results").join(&name)).unwrap();
        assert_eq!(on_disk, content);
        let lines: Vec<&str> = preview.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "[Full bash output saved to {virtual_path} ({total} chars, ~{} tokens).]",
                total / 4
            )
        );
        assert_eq!(
            lines[1],
            "[Preview kind: text. This is a structured synopsis, not a raw head/tail truncation.]"
        );
        assert_eq!(lines[3], "Text output:");
        assert_eq!(
            lines[4],
            format!("- Text output from bash with {total} characters, 4002 words, and 1001 lines.")
        );
        assert_eq!(lines[5], "- Detected section headers: # RESULTS.");
        assert!(preview.contains("\n...\nline 00"));
        assert!(preview.ends_with(&format!(
            "Access:\n- Use read_file on {virtual_path} with start_line and end_line to inspect the raw output."
        )));
    }

    #[test]
    fn a_tool_results_link_out_of_outputs_gets_nothing_written() {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let outputs = dir.path().join("outputs");
        std::fs::create_dir(&outputs).unwrap();
        std::os::unix::fs::symlink(host.path(), outputs.join(".tool-results")).unwrap();
        let content = big(1_000);
        let out = OutputBudget::default().apply("bash", "c1", content.clone(), Some(&outputs));
        assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0);
        assert!(!out.contains("saved to"));
        assert_eq!(out, OutputBudget::default().fallback(&content, "bash"));
    }

    #[test]
    fn a_tool_results_directory_swapped_for_a_link_gets_nothing_written_outside() {
        use std::os::unix::ffi::OsStrExt;
        use std::sync::{atomic::AtomicBool, atomic::Ordering, Arc};
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let outputs = dir.path().join("outputs");
        std::fs::create_dir_all(outputs.join(".tool-results")).unwrap();
        std::os::unix::fs::symlink(host.path(), outputs.join("alt")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapping = {
            let stop = stop.clone();
            let a = std::ffi::CString::new(outputs.join(".tool-results").as_os_str().as_bytes())
                .unwrap();
            let b = std::ffi::CString::new(outputs.join("alt").as_os_str().as_bytes()).unwrap();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: valid C strings; renameat2 only reads them.
                    unsafe {
                        libc::syscall(
                            libc::SYS_renameat2,
                            libc::AT_FDCWD,
                            a.as_ptr(),
                            libc::AT_FDCWD,
                            b.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        );
                    }
                }
            })
        };
        let content = big(1_000);
        for i in 0..500 {
            let _ = OutputBudget::default().apply(
                "bash",
                &format!("c{i}"),
                content.clone(),
                Some(&outputs),
            );
        }
        stop.store(true, Ordering::Relaxed);
        swapping.join().unwrap();
        assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0);
    }

    #[test]
    fn without_disk_the_result_is_cut_with_deerflows_marker() {
        let content = "x".repeat(40_000);
        let cut = OutputBudget::default().apply("web_fetch", "c1", content, None);
        assert!(cut.chars().count() <= 30_000);
        assert!(cut.starts_with(&"x".repeat(8_000)));
        let omitted = 40_000 - 8_000 - 3_000;
        assert!(cut.contains(&format!(
            "\n\n[... {omitted} chars omitted from web_fetch output. Persistent storage unavailable. Consider narrowing the query or using more specific parameters.]\n\n"
        )));
        assert!(cut.ends_with(&"x".repeat(3_000)));
    }

    #[test]
    fn the_config_switches_it_off_exempts_tools_and_sets_thresholds_per_tool() {
        let content = "x".repeat(40_000);
        let dir = tempfile::tempdir().unwrap();
        let off = OutputBudget {
            enabled: false,
            ..OutputBudget::default()
        };
        assert_eq!(
            off.apply("bash", "c1", content.clone(), Some(dir.path())),
            content
        );
        let mut config = antler_protocol::config::ToolOutputConfig {
            exempt_tools: vec!["bash".into()],
            ..Default::default()
        };
        config.tool_overrides.insert("web_fetch".into(), 0);
        config.tool_overrides.insert("grep".into(), 50_000);
        let budget = OutputBudget::from_config(&config);
        assert_eq!(
            budget.apply("bash", "c1", content.clone(), Some(dir.path())),
            content
        );
        assert_eq!(
            budget.apply("grep", "c1", content.clone(), Some(dir.path())),
            content
        );
        // 0: never written to a file, cut at fallback_max_chars instead.
        let cut = budget.apply("web_fetch", "c1", content.clone(), Some(dir.path()));
        assert_eq!(cut, budget.fallback(&content, "web_fetch"));
        assert!(cut.chars().count() <= 30_000);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
        // Others: written, a preview sent.
        let preview = budget.apply("ls", "c1", content.clone(), Some(dir.path()));
        assert!(preview.starts_with("[Full ls output saved to"), "{preview}");
    }
}
