//! Every command and flag the docs show exists: scans `README.md`, `CONTRIBUTING.md` and
//! `docs/*.md` for command lines of Antler's binaries (`antler …`, `antler-subagent …`,
//! `antler-mcp-host …`, `antler-sandbox-host …`, `antler-chaos …`, and the scripts that pass
//! their flags on: `scripts/chaos.sh` to `antler chaos`, `scripts/example.sh` to `antler run`)
//! in fenced code blocks and inline code, and checks each subcommand path and each `--flag`
//! against the built binary's `<path> --help`. A failure names the doc, the line, the command
//! and what is missing.

// Test code: a failure to read a doc or run a binary is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
};

/// One command line found in a doc.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DocCommand {
    /// The 1-based line it starts on.
    line: usize,
    /// The binary's name (`antler`, `antler-subagent`, ...).
    bin: String,
    /// Subcommands a script stands for (`scripts/chaos.sh` is `antler chaos`).
    implied: Vec<String>,
    /// The words after the binary, as a shell would split them (quotes removed).
    words: Vec<String>,
    /// The command as written, for the failure message.
    text: String,
}

/// The binaries whose command lines are checked, by the name a doc may call them.
fn binary_for(first_word: &str) -> Option<(&'static str, &'static [&'static str])> {
    let base = first_word.rsplit('/').next().unwrap_or(first_word);
    match base {
        "antler" => Some(("antler", &[])),
        "antler-subagent" => Some(("antler-subagent", &[])),
        "antler-mcp-host" | "mcp-host" => Some(("antler-mcp-host", &[])),
        "antler-sandbox-host" | "sandbox-host" => Some(("antler-sandbox-host", &[])),
        "antler-chaos" => Some(("antler-chaos", &[])),
        _ if first_word.ends_with("scripts/chaos.sh") => Some(("antler", &["chaos"])),
        _ if first_word.ends_with("scripts/example.sh") => Some(("antler", &["run"])),
        _ => None,
    }
}

/// The code of a Markdown document: each fenced block's lines and each inline code span, with
/// the line it is on. A fenced line ending in `\` is joined with the next.
fn code_spans(doc: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut in_fence = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            if let Some(p) = pending.take() {
                spans.push(p);
            }
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            let (start, mut text) = pending.take().unwrap_or((n, String::new()));
            let body = line.trim_end();
            if let Some(cont) = body.strip_suffix('\\') {
                text.push_str(cont);
                text.push(' ');
                pending = Some((start, text));
            } else {
                text.push_str(body);
                spans.push((start, text));
            }
            continue;
        }
        // Inline code: `...` (a run of backticks opens, the same run closes).
        let bytes = line.as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let run = bytes[j..].iter().take_while(|b| **b == b'`').count();
                let fence = &line[j..j + run];
                let rest = &line[j + run..];
                if let Some(end) = rest.find(fence) {
                    spans.push((n, rest[..end].trim().to_string()));
                    j += run + end + run;
                    continue;
                }
                j += run;
                continue;
            }
            j += 1;
        }
    }
    if let Some(p) = pending.take() {
        spans.push(p);
    }
    spans
}

/// Splits a line of shell into simple commands (at `|`, `&&`, `;`, `&`, `$(`, `(`, `)`, outside
/// quotes; a `#` after whitespace starts a comment) and each command into words.
fn shell_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let end_word = |word: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            if c == q {
                quote = None;
            } else {
                word.push(c);
            }
            i += 1;
            continue;
        }
        match c {
            '\'' | '"' => {
                quote = Some(c);
                in_word = true;
            }
            '#' if !in_word => break,
            ' ' | '\t' => end_word(&mut word, &mut in_word, &mut words),
            '|' | ';' | '&' | '(' | ')' | '`' => {
                end_word(&mut word, &mut in_word, &mut words);
                commands.push(std::mem::take(&mut words));
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                end_word(&mut word, &mut in_word, &mut words);
                commands.push(std::mem::take(&mut words));
                i += 1;
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    end_word(&mut word, &mut in_word, &mut words);
    commands.push(words);
    commands.retain(|c| !c.is_empty());
    commands
}

/// The command lines of Antler's binaries in a document.
fn extract(doc: &str) -> Vec<DocCommand> {
    let mut found = Vec::new();
    for (line, span) in code_spans(doc) {
        for words in shell_commands(&span) {
            // Skip what runs the command: `sudo`, `exec`, `env`, `VAR=value` assignments, a
            // shell prompt.
            let mut k = 0;
            while k < words.len() {
                let w = words[k].as_str();
                let assignment = w.split_once('=').is_some_and(|(name, _)| {
                    !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                });
                if matches!(w, "sudo" | "exec" | "env" | "$" | "time") || assignment {
                    k += 1;
                } else {
                    break;
                }
            }
            let Some(first) = words.get(k) else { continue };
            let Some((bin, implied)) = binary_for(first) else {
                continue;
            };
            found.push(DocCommand {
                line,
                bin: bin.to_string(),
                implied: implied.iter().map(|s| s.to_string()).collect(),
                words: words[k + 1..].to_vec(),
                text: words[k..].join(" "),
            });
        }
    }
    found
}

/// What one `--help` says: its long flags (and whether each takes a value) and its subcommands.
#[derive(Debug, Default, Clone)]
struct Help {
    flags: HashMap<String, bool>,
    commands: Vec<String>,
    has_arguments: bool,
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line.trim_end_matches(':');
            if section == "Arguments" {
                help.has_arguments = true;
            }
            continue;
        }
        let t = line.trim_start();
        match section {
            // `  name  what it does` (a wrapped description is indented further)
            "Commands" if line.starts_with("  ") && !line[2..].starts_with(' ') => {
                if let Some(name) = t.split_whitespace().next() {
                    help.commands.push(name.to_string());
                }
            }
            "Options" if t.starts_with('-') => {
                // `-h, --help`, `--flag <VALUE>`, `--flag`
                let mut parts = t.split_whitespace().peekable();
                while let Some(p) = parts.next() {
                    let p = p.trim_end_matches(',');
                    if let Some(name) = p.strip_prefix("--") {
                        let takes_value = parts.peek().is_some_and(|v| v.starts_with('<'));
                        help.flags.insert(format!("--{name}"), takes_value);
                        break;
                    }
                    if !p.starts_with('-') {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    help
}

/// Runs `<bin> <path> --help` once per (bin, path).
struct HelpCache {
    dir: PathBuf,
    seen: HashMap<(String, Vec<String>), Result<Help, String>>,
}

impl HelpCache {
    fn get(&mut self, bin: &str, path: &[String]) -> Result<Help, String> {
        let key = (bin.to_string(), path.to_vec());
        if let Some(h) = self.seen.get(&key) {
            return h.clone();
        }
        let out = Command::new(self.dir.join(bin))
            .args(path)
            .arg("--help")
            .env("RUST_LOG", "error")
            .output()
            .map_err(|e| format!("cannot run {bin}: {e}"));
        let help = out.and_then(|o| {
            if o.status.success() {
                Ok(parse_help(&String::from_utf8_lossy(&o.stdout)))
            } else {
                Err(format!(
                    "`{bin} {} --help` failed: {}",
                    path.join(" "),
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
        });
        self.seen.insert(key, help.clone());
        help
    }

    fn has(&self, bin: &str) -> bool {
        self.dir.join(bin).exists()
    }
}

/// Whether a word names a subcommand as a doc would write one (not a placeholder like `N`,
/// `RUN_ID`, `...` or `"task"`).
fn looks_like_subcommand(w: &str) -> bool {
    let mut cs = w.chars();
    cs.next().is_some_and(|c| c.is_ascii_lowercase())
        && w.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A binary and a subcommand path as a user types them.
fn shown(bin: &str, path: &[String]) -> String {
    std::iter::once(bin.to_string())
        .chain(path.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks one command against the binary's help; returns what is wrong with it.
fn check(cmd: &DocCommand, helps: &mut HelpCache) -> Vec<String> {
    let mut problems = Vec::new();
    let mut path: Vec<String> = cmd.implied.clone();
    let mut help = match helps.get(&cmd.bin, &path) {
        Ok(h) => h,
        Err(e) => return vec![e],
    };
    let mut descending = true;
    let mut words = cmd.words.iter().peekable();
    while let Some(raw) = words.next() {
        // `[--answer TEXT]`, `--json]`: optional parts written in brackets.
        let w = raw.trim_start_matches('[').trim_end_matches(']');
        if w == "--" {
            break;
        }
        if let Some(flag) = w.strip_prefix("--") {
            if flag.is_empty() || !flag.starts_with(|c: char| c.is_ascii_alphanumeric()) {
                continue;
            }
            let (name, inline_value) = match w.split_once('=') {
                Some((n, _)) => (n, true),
                None => (w, false),
            };
            match help.flags.get(name) {
                Some(&takes_value) => {
                    if takes_value && !inline_value && !raw.ends_with(']') {
                        words.next();
                    }
                }
                None => problems.push(format!("`{}` has no flag {name}", shown(&cmd.bin, &path))),
            }
            continue;
        }
        if w.starts_with('-') || !descending {
            continue;
        }
        if help.commands.iter().any(|c| c == w) {
            path.push(w.to_string());
            help = match helps.get(&cmd.bin, &path) {
                Ok(h) => h,
                Err(e) => {
                    problems.push(e);
                    return problems;
                }
            };
            continue;
        }
        // A word where only a subcommand can stand.
        if !help.commands.is_empty() && !help.has_arguments && looks_like_subcommand(w) {
            problems.push(format!(
                "`{}` has no subcommand {w} (it has: {})",
                shown(&cmd.bin, &path),
                help.commands.join(", ")
            ));
        }
        descending = false;
    }
    problems
}

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The docs the test reads: README.md, CONTRIBUTING.md and docs/*.md.
fn docs() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    pages.sort();
    files.extend(pages);
    files.retain(|p| p.exists());
    files
}

/// Every problem of one document, each naming the doc, the line and the command.
fn problems_in(
    name: &str,
    doc: &str,
    helps: &mut HelpCache,
    skipped: &mut Vec<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for cmd in extract(doc) {
        if !helps.has(&cmd.bin) {
            skipped.push(format!(
                "{name}:{}: {} (no {} binary here)",
                cmd.line, cmd.text, cmd.bin
            ));
            continue;
        }
        for p in check(&cmd, helps) {
            out.push(format!("{name}:{}: `{}`: {p}", cmd.line, cmd.text));
        }
    }
    out
}

fn helps() -> HelpCache {
    HelpCache {
        dir: antler_tests::bin_dir(),
        seen: HashMap::new(),
    }
}

#[test]
fn every_command_and_flag_the_docs_show_exists() {
    let files = docs();
    assert!(
        files.iter().any(|p| p.ends_with("README.md")),
        "README.md not found under {}",
        root().display()
    );
    let mut helps = helps();
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    let mut commands = 0;
    for file in &files {
        let doc = std::fs::read_to_string(file).unwrap();
        let name = file
            .strip_prefix(root())
            .unwrap_or(file)
            .display()
            .to_string();
        commands += extract(&doc).len();
        problems.extend(problems_in(&name, &doc, &mut helps, &mut skipped));
    }
    for s in &skipped {
        eprintln!("docs_cli: not checked: {s}");
    }
    eprintln!(
        "docs_cli: {commands} command lines in {} docs checked against {} --help outputs",
        files.len(),
        helps.seen.len()
    );
    assert!(
        commands >= 20,
        "only {commands} command lines found: is the extractor broken?"
    );
    assert!(
        problems.is_empty(),
        "commands or flags the docs show that the binaries do not have:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_made_up_flag_or_subcommand_is_caught() {
    let doc = "Intro `antler run --no-such-flag` text.\n\
               \n\
               ```sh\n\
               target/release/antler mcp call everything echo --args '{\"a\": 1}' --bogus   # a comment --also-bogus\n\
               sudo scripts/chaos.sh --seed 7 --made-up\n\
               antler catalog shwo\n\
               kill $(target/release/antler status --jsn | jq .)\n\
               antler --runtime-dir run run --trace\n\
               ```\n";
    let cmds = extract(doc);
    assert_eq!(cmds.len(), 6, "{cmds:#?}");
    assert_eq!(cmds[0].line, 1);
    assert_eq!(cmds[0].words, vec!["run", "--no-such-flag"]);
    assert_eq!(cmds[1].line, 4);
    assert_eq!(cmds[2].implied, vec!["chaos"]);
    let mut helps = helps();
    let mut skipped = Vec::new();
    let problems = problems_in("t.md", doc, &mut helps, &mut skipped);
    let text = problems.join("\n");
    for expected in [
        "t.md:1: `antler run --no-such-flag`: `antler run` has no flag --no-such-flag",
        "t.md:4: `target/release/antler mcp call everything echo --args {\"a\": 1} --bogus`: `antler mcp call` has no flag --bogus",
        "t.md:5: `scripts/chaos.sh --seed 7 --made-up`: `antler chaos` has no flag --made-up",
        "`antler catalog` has no subcommand shwo",
        "`antler status` has no flag --jsn",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // A comment's words, a value that looks like a subcommand, and real flags are not problems.
    assert!(!text.contains("also-bogus"), "{text}");
    assert!(!text.contains("no flag --trace"), "{text}");
    assert!(!text.contains("no flag --seed"), "{text}");
    assert_eq!(problems.len(), 5, "{text}");
}

#[test]
fn continuation_lines_and_brackets_are_read_as_one_command() {
    let doc = "```sh\n\
               target/release/antler-mcp-host --listen tcp:0.0.0.0:7001 --token-file t \\\n    \
               --tls-ca ca.crt --tls-nope x\n\
               antler run --resume RUN_ID [--answer TEXT] [--json]\n\
               ```\n\
               and `antler.gateway` or `antler:` are config keys, `antler-tests` a crate.\n";
    let cmds = extract(doc);
    assert_eq!(cmds.len(), 2, "{cmds:#?}");
    assert_eq!(cmds[0].line, 2);
    let mut helps = helps();
    let mut skipped = Vec::new();
    let problems = problems_in("t.md", doc, &mut helps, &mut skipped);
    assert_eq!(
        problems,
        vec!["t.md:2: `target/release/antler-mcp-host --listen tcp:0.0.0.0:7001 --token-file t --tls-ca ca.crt --tls-nope x`: `antler-mcp-host` has no flag --tls-nope".to_string()]
    );
}
