//! A new user's first hour with the `antler` CLI (issue 32): the README's tour works from
//! where the README runs it and says which MCP servers a run has; `--detach` prints the
//! bare id; `config check` names every DeerFlow setting that does nothing and every error
//! at once; a run nobody can answer is not offered `ask_clarification`, and one waiting
//! for an answer is never carried on without it; `tool call` lists what it runs; `up`
//! logs where the README says, `down` and `status` agree; every flag has help; release
//! binaries carry no debug info; a run's output says where its files are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::lead_support::LeadCluster;
use antler_tests::{antler, bin, output_text, wait_for};
use serde_json::Value;

/// The workspace root, where the README's commands run.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// A private directory under /tmp that sandboxed processes can traverse.
fn work_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `antler --runtime-dir DIR/run ARGS` in `cwd` without a terminal, an ephemeral cluster's
/// files under `dir`, no extensions file named by the environment.
fn antler_in(dir: &Path, cwd: &Path, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        repo_root().join("tests/node_modules/.bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .args(args)
        .current_dir(cwd)
        .env("PATH", path)
        .env("ANTLER_SANDBOX_BASE_DIR", dir.join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "warn")
        .env_remove("ANTLER_EXTENSIONS_CONFIG_PATH")
        .env_remove("DEER_FLOW_EXTENSIONS_CONFIG_PATH")
        .env_remove("ANTLER_CONFIG_PATH")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `antler run TASK --playbook p.yaml --config config.yaml EXTRA` (see [`antler_in`]) in
/// a directory of its own holding `config` as config.yaml and `playbook` as p.yaml: the
/// directory and the command's output.
fn run_in_own_dir(
    config: &str,
    playbook: &str,
    task: &str,
    extra: &[&str],
) -> (tempfile::TempDir, Output) {
    let dir = work_dir("antler-fh");
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    std::fs::write(dir.path().join("p.yaml"), playbook).unwrap();
    let mut args = vec![
        "run",
        task,
        "--playbook",
        "p.yaml",
        "--config",
        "config.yaml",
    ];
    args.extend_from_slice(extra);
    let out = antler_in(dir.path(), dir.path(), &args);
    (dir, out)
}

/// A playbook that asks a clarification, then answers.
const ASKS: &str = r#"
turns:
  - tool_calls:
      - name: ask_clarification
        args: {question: "Which year?", clarification_type: missing_info, options: ["2024", "2025"]}
  - content: The report covers the year you chose.
"#;

/// A run of [`ASKS`] with `--json` in a directory of its own, stopped at its question:
/// the directory, the command's output and the run's view.
fn run_that_asks() -> (tempfile::TempDir, Output, Value) {
    let (dir, first) = run_in_own_dir(
        "tool_search:\n  enabled: false\n",
        ASKS,
        "Write a report",
        &["--json"],
    );
    let view: Value = serde_json::from_slice(&first.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&first)));
    (dir, first, view)
}

/// A playbook that writes a report and presents it.
const WRITES: &str = r##"
turns:
  - tool_calls:
      - name: write_file
        args: {description: Write the report, path: /mnt/user-data/outputs/report.md, content: "# Report\n"}
  - tool_calls:
      - name: present_files
        args: {filepaths: ["/mnt/user-data/outputs/report.md"]}
  - content: Done.
"##;

#[test]
fn the_tours_first_run_from_the_repository_root_has_the_examples_mcp_server() {
    let dir = work_dir("antler-fh");
    let root = repo_root();
    let out = antler_in(
        dir.path(),
        &root,
        &[
            "run",
            "Write a short report",
            "--playbook",
            "examples/report/playbook.yaml",
            "--config",
            "examples/report/config.yaml",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    // The first thing the run says is the MCP servers' file: the one beside --config.
    let expected = format!(
        "extensions: {}",
        root.join("examples/report/extensions_config.json")
            .display()
    );
    let said = err.lines().find(|l| l.starts_with("extensions:"));
    assert_eq!(said, Some(expected.as_str()), "{err}");
    let run_line = err.lines().position(|l| l.starts_with("run run-")).unwrap();
    let ext_line = err
        .lines()
        .position(|l| l.starts_with("extensions:"))
        .unwrap();
    assert!(ext_line < run_line, "{err}");
    // tool_search found the server's echo tool and the run called it.
    assert!(err.contains("✓ tool_search"), "{err}");
    assert!(err.contains("✓ everything_echo"), "{err}");
}

#[test]
fn a_run_with_no_extensions_file_says_so_first() {
    let (_dir, out) = run_in_own_dir(
        "tool_search:\n  enabled: true\n",
        "turns:\n  - content: Done.\n",
        "Hi",
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let err = stderr(&out);
    let said = err
        .lines()
        .find(|l| l.starts_with("extensions:"))
        .unwrap_or_default();
    assert!(said.starts_with("extensions: none found"), "{err}");
    assert!(said.ends_with("the run has no MCP tools"), "{err}");
}

#[test]
fn detach_prints_the_bare_id_that_resume_takes_and_json_the_object() {
    let cluster = LeadCluster::up("tool_search:\n  enabled: false\n", &[]);
    let playbook = cluster.write("p.yaml", "turns:\n  - content: Done.\n");
    let out = antler(
        &cluster.runtime(),
        &["run", "Hi", "--detach", "--playbook", &playbook],
    );
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let id = stdout(&out);
    let id = id.trim();
    assert!(
        id.starts_with("run-") && !id.contains(char::is_whitespace) && !id.contains('{'),
        "not a bare run id: {id:?}"
    );
    // `--resume $(antler run … --detach)` works.
    let resumed = antler(&cluster.runtime(), &["run", "--resume", id, "--json"]);
    let view: Value = serde_json::from_slice(&resumed.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&resumed)));
    assert_eq!(view["run_id"], id);
    assert_eq!(view["status"], "success", "{view}");
    // With --json, the object.
    let out = antler(
        &cluster.runtime(),
        &["run", "Hi", "--detach", "--json", "--playbook", &playbook],
    );
    let submitted: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&out)));
    assert!(submitted["run_id"].as_str().unwrap().starts_with("run-"));
    assert_eq!(submitted["status"], "running");
}

/// DeerFlow settings Antler reads but does not act on, one per line from line 1.
const IGNORED: &[&str] = &[
    "memory",
    "suggestions",
    "input_polish",
    "tool_output",
    "loop_detection",
    "uploads",
    "checkpointer",
    "database",
    "channels",
    "auth",
];

#[test]
fn config_check_names_every_deerflow_setting_that_does_nothing_and_strict_refuses_them() {
    let dir = work_dir("antler-fh");
    let config = dir.path().join("config.yaml");
    let text: String = IGNORED
        .iter()
        .map(|k| format!("{k}: {{enabled: true}}\n"))
        .collect();
    std::fs::write(&config, text).unwrap();
    let file = config.display().to_string();
    let out = antler_in(dir.path(), dir.path(), &["config", "check", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let text = stdout(&out);
    for (i, key) in IGNORED.iter().enumerate() {
        let line = format!(
            "warning: {file}:{}:1: {key}: a DeerFlow setting Antler does not act on yet: it does nothing here",
            i + 1
        );
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    assert!(
        text.contains(&format!("0 error(s), {} warning(s)", IGNORED.len())),
        "{text}"
    );
    let strict = antler_in(
        dir.path(),
        dir.path(),
        &["config", "check", "--strict", &file],
    );
    assert_eq!(strict.status.code(), Some(1), "{}", output_text(&strict));
    let text = stdout(&strict);
    assert!(
        text.contains(&format!("error: {file}:1:1: memory: a DeerFlow setting")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} error(s), 0 warning(s)", IGNORED.len())),
        "{text}"
    );

    // The extensions file's interceptors too.
    let extensions = dir.path().join("extensions_config.json");
    std::fs::write(
        &extensions,
        "{\n  \"mcpServers\": {},\n  \"mcpInterceptors\": \"my.pkg:build\"\n}\n",
    )
    .unwrap();
    let file = extensions.display().to_string();
    let out = antler_in(dir.path(), dir.path(), &["config", "check", &file]);
    assert!(
        stdout(&out).contains(&format!(
            "warning: {file}:3:3: mcpInterceptors: a DeerFlow setting"
        )),
        "{}",
        output_text(&out)
    );
}

#[test]
fn a_run_warns_at_start_about_each_deerflow_setting_that_does_nothing() {
    let (_dir, out) = run_in_own_dir(
        "memory:\n  enabled: true\ntitle:\n  enabled: true\n",
        "turns:\n  - content: Done.\n",
        "Hi",
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let err = stderr(&out);
    for key in ["memory", "title"] {
        assert!(
            err.contains(&format!(
                ": {key}: a DeerFlow setting Antler does not act on yet"
            )),
            "no warning about {key}: {err}"
        );
    }
}

#[test]
fn config_check_reports_every_error_with_its_place_and_the_catalogs_hints() {
    let dir = work_dir("antler-fh");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "\
tools:
  - name: bash
    group: bash
    use: deerflow.sandbox.tools:bash_tol
models:
  - name: claude
    use: langchain_openai:ChatOpenAl
    model: claude-3
  - name: local
    use: langchain_openai:ChatOpenAI
    model: qwen
    base_url: 127.0.0.1:8000/v1
  - name: warm
    use: langchain_openai:ChatOpenAI
    model: qwen
    base_url: http://127.0.0.1:8000/v1
    temperature: hot
",
    )
    .unwrap();
    let file = config.display().to_string();
    let out = antler_in(dir.path(), dir.path(), &["config", "check", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 4, "{text}");
    assert!(errors[0].starts_with(&format!(
        "error: {file}:4:5: tools[0].use: tool 'bash': unknown use id `deerflow.sandbox.tools:bash_tol`; closest known ids: deerflow.sandbox.tools:bash_tool"
    )), "{text}");
    assert!(
        errors[1].starts_with(&format!("error: {file}:7:5: models[0].use: "))
            && errors[1].contains("closest known: langchain_openai:ChatOpenAI"),
        "{text}"
    );
    assert!(
        errors[2].starts_with(&format!(
            "error: {file}:12:5: models[1].base_url: model `local`: base_url `127.0.0.1:8000/v1` is not an http:// or https:// URL"
        )),
        "{text}"
    );
    assert_eq!(
        errors[3],
        format!("error: {file}:17:5: models[2].temperature: `hot` cannot be used; expected a number from 0 to 2")
    );
    assert!(text.ends_with("4 error(s), 0 warning(s)\n"), "{text}");

    // Values of the wrong type: every one, not the first.
    std::fs::write(
        &config,
        "tools:\n  - name: a\n    group: 5\n    use: x:y\n  - name: b\nsubagents:\n  max_total_per_run: many\n",
    )
    .unwrap();
    let out = antler_in(dir.path(), dir.path(), &["config", "check", &file]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let text = stdout(&out);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 3, "{text}");
    assert!(
        errors[0].starts_with(&format!("error: {file}:3:")),
        "{text}"
    );
    assert!(errors[0].contains("tools[0].group: invalid type"), "{text}");
    assert_eq!(
        errors[1],
        format!("error: {file}:5:5: tools[1]: missing field `group`")
    );
    assert!(
        errors[2].starts_with(&format!(
            "error: {file}:7:3: subagents.max_total_per_run: invalid type"
        )),
        "{text}"
    );
}

#[test]
fn a_run_without_a_terminal_is_not_offered_ask_clarification() {
    let (_dir, out) = run_in_own_dir(
        "tool_search:\n  enabled: false\n",
        ASKS,
        "Write a report",
        &[],
    );
    let err = stderr(&out);
    assert!(!err.contains("Clarification is disabled"), "{err}");
    let call = err
        .lines()
        .find(|l| l.contains("ask_clarification [call-1-1]") && l.contains('✗'))
        .unwrap_or_else(|| panic!("the call did not fail: {}", output_text(&out)));
    assert!(
        call.contains("ask_clarification is not a valid tool"),
        "{call}"
    );
}

#[test]
fn resume_of_a_run_waiting_for_an_answer_shows_the_question_and_exits_3() {
    let (dir, first, view) = run_that_asks();
    assert_eq!(view["status"], "interrupted", "{view}");
    assert_eq!(first.status.code(), Some(3), "{}", output_text(&first));
    let run_id = view["run_id"].as_str().unwrap();

    let resumed = antler_in(
        dir.path(),
        dir.path(),
        &["run", "--resume", run_id, "--config", "config.yaml"],
    );
    assert_eq!(resumed.status.code(), Some(3), "{}", output_text(&resumed));
    let text = stdout(&resumed);
    assert!(text.contains("Which year?"), "{text}");
    assert!(
        text.contains(&format!("antler run --resume {run_id} --answer TEXT")),
        "{text}"
    );
    // It still waits: nothing carried it on.
    let again = antler_in(
        dir.path(),
        dir.path(),
        &[
            "run",
            "--resume",
            run_id,
            "--config",
            "config.yaml",
            "--json",
        ],
    );
    let view: Value = serde_json::from_slice(&again.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", output_text(&again)));
    assert_eq!(view["status"], "interrupted", "{view}");
    assert_eq!(again.status.code(), Some(3));
    // The answer carries it on.
    let answered = antler_in(
        dir.path(),
        dir.path(),
        &[
            "run",
            "--resume",
            run_id,
            "--answer",
            "2025",
            "--config",
            "config.yaml",
        ],
    );
    assert_eq!(
        answered.status.code(),
        Some(0),
        "{}",
        output_text(&answered)
    );
    assert!(stdout(&answered).starts_with("The report covers the year you chose."));
}

#[test]
fn tool_call_of_an_unknown_name_lists_the_sandbox_tools_it_runs() {
    let dir = work_dir("antler-fh");
    let out = antler_in(
        dir.path(),
        dir.path(),
        &["tool", "call", "bsh", "--args", "{}"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("`bsh` is not a tool `antler tool call` can run (did you mean `bash`?)"),
        "{err}"
    );
    let runs = err.split("it runs: ").nth(1).unwrap_or_default();
    for tool in ["bash", "ls", "read_file", "write_file", "str_replace"] {
        assert!(
            runs.split(", ").any(|t| t.trim() == tool),
            "{tool} missing: {err}"
        );
    }
    // Builtins need a run's state: it does not run them.
    assert!(!runs.contains("present_files"), "{err}");
}

#[test]
fn up_writes_its_info_log_to_antler_log_and_counts_no_http_threads_as_workers() {
    let dir = work_dir("antler-fh");
    let runtime = dir.path().join("run");
    let terminal = dir.path().join("terminal.log");
    let mut up = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(&runtime)
        .args(["up", "--workers", "2"])
        .current_dir(dir.path())
        .env("ANTLER_SANDBOX_BASE_DIR", dir.path().join("base"))
        .env("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&terminal).unwrap())
        .spawn()
        .unwrap();
    let healthy = wait_for(Duration::from_secs(60), || {
        let out = antler(&runtime, &["status", "--json"]);
        let list: Vec<Value> = serde_json::from_slice(&out.stdout).ok()?;
        (list.len() == 5 && list.iter().all(|p| p["healthy"] == true)).then_some(())
    });
    let down = antler(&runtime, &["down"]);
    let _ = up.wait();
    assert!(healthy.is_some(), "the cluster did not come up");
    assert_eq!(down.status.code(), Some(0), "{}", output_text(&down));
    let log = std::fs::read_to_string(runtime.join("logs/antler.log")).unwrap_or_default();
    assert!(log.contains("cluster started"), "antler.log: {log}");
    assert!(log.contains("workers=2"), "antler.log: {log}");
    let shown = std::fs::read_to_string(&terminal).unwrap();
    for text in [&log, &shown] {
        assert!(!text.contains("starting 1 workers"), "{text}");
    }
}

#[test]
fn down_and_status_agree_when_no_cluster_runs() {
    let dir = work_dir("antler-fh");
    // A runtime directory that was never made, and one a cluster left.
    let never = dir.path().join("never");
    let left = dir.path().join("left");
    std::fs::create_dir(&left).unwrap();
    std::fs::set_permissions(&left, std::fs::Permissions::from_mode(0o700)).unwrap();
    for runtime in [&never, &left] {
        let said = format!(
            "no cluster is running in {} (start one with `antler up`)",
            runtime.display()
        );
        let status = antler(runtime, &["status"]);
        let down = antler(runtime, &["down"]);
        for out in [&status, &down] {
            assert_eq!(out.status.code(), Some(1), "{}", output_text(out));
            assert_eq!(stdout(out).trim(), said, "{}", output_text(out));
            assert!(!stderr(out).contains("os error"), "{}", output_text(out));
        }
    }
}

#[test]
fn the_flags_the_issue_named_have_help_text() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["catalog", "search"], &["--catalog", "--config", "--json"]),
        (&["ping"], &["--json"]),
        (&["mcp", "status"], &["--json"]),
    ];
    for (command, flags) in cases {
        let out = Command::new(bin("antler"))
            .args(*command)
            .arg("--help")
            .output()
            .unwrap();
        let help = stdout(&out);
        for flag in *flags {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(flag))
                .unwrap_or_else(|| panic!("{flag} not in {command:?} --help:\n{help}"));
            // After the flag (and its value name), words that say what it is.
            let after: Vec<&str> = line.split_whitespace().skip(1).collect();
            let words = after.iter().filter(|w| !w.starts_with('<')).count();
            assert!(words >= 2, "{command:?} {flag} has no help: {line:?}");
        }
    }
}

#[test]
fn release_binaries_are_built_without_debug_info() {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let release: String = manifest
        .split("\n[")
        .find(|section| section.starts_with("profile.release]"))
        .expect("a [profile.release] section")
        .to_owned();
    let setting = |key: &str| {
        release
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{key} ")))
            .and_then(|l| l.split_once('='))
            .map(|(_, v)| v.trim().trim_matches('"').to_owned())
    };
    let no_debug = matches!(setting("debug").as_deref(), Some("false" | "0" | "none"));
    let stripped = matches!(
        setting("strip").as_deref(),
        Some("debuginfo" | "symbols" | "true")
    );
    let split = setting("split-debuginfo").is_some_and(|v| v != "off");
    assert!(
        split || (no_debug && stripped),
        "[profile.release] ships debug info: {release}"
    );
}

#[test]
fn a_runs_output_says_where_its_artifact_is_and_its_delivery_in_words() {
    let (dir, out) = run_in_own_dir(
        "tools:\n  - name: write_file\n    group: file:write\n    use: deerflow.sandbox.tools:write_file_tool\n",
        WRITES,
        "Write a report",
        &["--thread", "t1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let text = stdout(&out);
    let host = dir
        .path()
        .join("base/users/default/threads/t1/user-data/outputs/report.md");
    assert!(
        text.contains(&format!(
            "artifact: /mnt/user-data/outputs/report.md (on this machine: {})",
            host.display()
        )),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "# Report\n");
    let delivery = text
        .lines()
        .find(|l| l.starts_with("delivery: "))
        .unwrap_or_else(|| panic!("no delivery line: {text}"));
    assert!(!delivery.contains('{'), "raw JSON: {delivery}");
    assert!(delivery.starts_with("delivery: delivered"), "{delivery}");
}

#[test]
fn the_readme_says_what_a_playbook_is_and_stops_a_host_by_its_pid() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    assert!(
        !readme.contains("pgrep -f antler-mcp-host"),
        "kills every cluster's mcp-host"
    );
    assert!(
        !readme.contains("sudo scripts/cluster-demo.sh"),
        "needs sudo"
    );
    assert!(
        readme.contains("status --json"),
        "no pid from status --json"
    );
    assert!(readme.contains("### Playbooks"), "no section on playbooks");
    assert!(
        readme.contains("users/USER/threads/THREAD/user-data/outputs"),
        "no word on where a run's files land"
    );
}

#[test]
fn resume_on_a_terminal_of_a_run_waiting_for_an_answer_asks_the_question_and_waits() {
    use std::io::{Read, Write};
    let (dir, _, view) = run_that_asks();
    let run_id = view["run_id"].as_str().unwrap();
    // `script` gives `antler run` a terminal; the answer is typed once it asks.
    let command = format!(
        "'{}' --runtime-dir '{}' run --resume {run_id} --config config.yaml",
        bin("antler").display(),
        dir.path().join("run").display()
    );
    let mut follower = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(dir.path())
        .env("ANTLER_SANDBOX_BASE_DIR", dir.path().join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = follower.stdin.take().unwrap();
    stdin.write_all(b"2025\n").unwrap();
    stdin.flush().unwrap();
    let status = wait_for(Duration::from_secs(60), || {
        follower.try_wait().ok().flatten()
    });
    drop(stdin);
    let mut shown = String::new();
    follower
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    let status = status.unwrap_or_else(|| {
        let _ = follower.kill();
        panic!("antler run --resume did not end: {shown}")
    });
    assert!(status.success(), "{shown}");
    assert!(shown.contains("Which year?"), "{shown}");
    assert!(
        shown.contains("The report covers the year you chose."),
        "{shown}"
    );
}
