//! The run inspector in a real browser: Debian's headless Chromium, driven over the
//! DevTools protocol (`tests/peers/cdp_driver.py`), loads the page the gateway serves
//! against a real cluster with a worker and a bubblewrap sandbox. As alice it lists only
//! her runs (not bob's), shows a run's timeline with each call's lifecycle states and a
//! subagent task nested under its `task` call, downloads an artifact through the gateway,
//! answers a clarification from the page, and refuses her the cluster view; as the
//! operator it shows the cluster's processes with the worker's slots. Screenshots of the
//! views go to `target/inspector-screenshots`; the page logs no error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

/// Calls server-everything's eliciting tool, then ends.
const ELICIT: &str = "turns:\n  - tool_calls:\n      - {id: find, name: tool_search, args: {query: \"select:everything_trigger-elicitation-request\"}}\n  - tool_calls:\n      - {id: ask-mcp, name: everything_trigger-elicitation-request, args: {}}\n  - content: Thanks for the details.\n";
const CONFIG: &str = "tool_search:\n  enabled: true\ntools:\n  - {name: write_file, group: file, use: \"deerflow.sandbox.tools:write_file_tool\"}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 20\nsubagents:\n  enabled: true\nantler:\n  worker_slots: 2\n  gateway:\n    tokens:\n      - {token: alice-token-000000000001, user: alice}\n      - {token: bob-token-00000000000002, user: bob}\n    allow_scripted_models: true\n";

const DELEGATE: &str = "turns:\n  - tool_calls:\n      - id: call-job\n        name: task\n        args: {description: summarise, prompt: Summarise the notes., subagent_type: general-purpose}\n  - content: The subagent summarised the notes.\nsubagents:\n  summarise:\n    turns:\n      - content: The notes say all is well.\n";

const REPORT: &str = "turns:\n  - tool_calls:\n      - name: write_file\n        args: {description: report, path: /mnt/user-data/outputs/report.md, content: \"inspected report\"}\n  - tool_calls:\n      - name: present_files\n        args: {filepaths: [\"/mnt/user-data/outputs/report.md\"]}\n  - content: The report is ready.\n";

const ASK: &str = "turns:\n  - tool_calls:\n      - name: ask_clarification\n        args: {question: \"Which year?\", clarification_type: missing_info}\n  - content: The report covers the year you chose.\n";

/// The DevTools driver and its browser; both end with the test (`inspector_streaming`
/// drives it too).
pub(crate) struct Browser {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    pub(crate) fn start() -> Browser {
        let chromium = ["chromium", "chromium-browser"]
            .iter()
            .find(|c| {
                Command::new("which")
                    .arg(c)
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
            .expect("chromium is installed (scripts/test.sh installs it)");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/cdp_driver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(chromium)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the DevTools driver");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut browser = Browser {
            child,
            stdin,
            stdout,
        };
        let ready = browser.read();
        assert_eq!(ready["ok"], true, "the browser did not start: {ready}");
        browser
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("driver reply");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("driver said {line:?}"))
    }

    pub(crate) fn send(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        let reply = self.read();
        assert_eq!(reply["ok"], true, "{command}: {reply}");
        reply["value"].clone()
    }

    pub(crate) fn goto(&mut self, url: &str) {
        self.send(json!({"op": "goto", "url": url}));
    }

    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        self.send(json!({"op": "eval", "expr": expr}))
    }

    pub(crate) fn wait(&mut self, expr: &str) -> Value {
        self.send(json!({"op": "wait", "expr": expr, "timeout_s": 30}))
    }

    pub(crate) fn screenshot(&mut self, name: &str) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/inspector-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        self.send(json!({"op": "screenshot", "path": path}));
        assert!(
            std::fs::metadata(&path).unwrap().len() > 1000,
            "{name}.png is empty"
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"op": "quit"}));
        let _ = self.stdin.flush();
        let quit = wait_for(Duration::from_secs(15), || {
            matches!(self.child.try_wait(), Ok(Some(_))).then_some(())
        });
        if quit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn the_inspector_shows_a_users_runs_timelines_artifacts_and_the_cluster() {
    // An MCP server whose tool asks the run's user for details (`elicitation: ask`).
    let servers = json!({"mcpServers": {"everything": {
        "type": "stdio",
        "command": mcp_support::npm_bin("mcp-server-everything").display().to_string(),
        "args": ["stdio"],
        "elicitation": "ask",
    }}});
    let cluster = LeadCluster::up_with_workers(
        CONFIG,
        &[("extensions_config.json", &servers.to_string())],
        &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
        1,
    );
    // server-everything adds its eliciting tool once it knows the client can answer.
    let listed = wait_for(Duration::from_secs(30), || {
        let out = antler_tests::antler(&cluster.runtime(), &["mcp", "status", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).ok()?;
        list.as_array()?
            .iter()
            .any(|s| s["name"] == "everything" && s["tools"] == 15)
            .then_some(())
    });
    assert!(listed.is_some(), "the eliciting tool was not listed");
    let addr = cluster.gateway();
    let start = |token: &str, playbook: &str, subagents: bool| {
        let body = json!({"task": "Inspect me", "playbook_yaml": playbook, "clarification": true, "subagents": subagents});
        let (code, _, text) = http_full(&addr, token, "POST", "/api/runs", Some(&body.to_string()));
        assert_eq!(code, 201, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let ended = |token: &str, run_id: &str| {
        wait_for(Duration::from_secs(90), || {
            let (_, _, text) = http_full(&addr, token, "GET", &format!("/api/runs/{run_id}"), None);
            let view: Value = serde_json::from_str(&text).ok()?;
            (view["status"] != "running").then_some(view)
        })
        .expect("the run stopped")
    };
    let delegated = start(ALICE, DELEGATE, true);
    let report = start(ALICE, REPORT, false);
    let asking = start(ALICE, ASK, false);
    let bobs = start(BOB, REPORT, false);
    let eliciting = start(ALICE, ELICIT, false);
    // The bundled example (examples/report): tool_search, an MCP call, a report delivered.
    let example = start(
        ALICE,
        include_str!("../../../examples/report/playbook.yaml"),
        false,
    );
    assert_eq!(ended(ALICE, &delegated)["status"], "success");
    assert_eq!(ended(ALICE, &report)["status"], "success");
    assert_eq!(ended(ALICE, &asking)["status"], "interrupted");
    let example_view = ended(ALICE, &example);
    assert_eq!(example_view["status"], "success", "{example_view}");
    assert_eq!(
        example_view["artifacts"],
        json!(["/mnt/user-data/outputs/report.md"])
    );
    ended(BOB, &bobs);

    // The page holds no data and needs no token; it is never framed or fed script.
    let (code, head, body) = http_full(&addr, "", "GET", "/", None);
    assert_eq!(code, 200);
    assert!(body.contains("/ui/app.js"), "{body}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    assert!(head.contains("x-frame-options: deny"), "{head}");
    assert_eq!(http_full(&addr, ALICE, "GET", "/api/cluster", None).0, 403);

    let mut b = Browser::start();
    let downloads = tempfile::tempdir().unwrap();
    b.send(json!({"op": "downloads", "dir": downloads.path()}));
    b.send(json!({"op": "viewport", "width": 1280, "height": 900}));
    let base = format!("http://{addr}/");

    // The page asks for a token, then lists alice's runs and not bob's.
    b.goto(&base);
    b.wait("!document.getElementById('login').hidden");
    b.goto(&format!("{base}#token={ALICE}"));
    b.wait(&format!(
        "document.querySelectorAll('#runs tbody tr').length >= 3 && !!document.querySelector('[data-run=\"{delegated}\"]')"
    ));
    assert_eq!(b.eval("location.hash"), "#/runs", "the token left the URL");
    for run in [&delegated, &report, &asking, &example] {
        assert_eq!(
            b.eval(&format!("!!document.querySelector('[data-run=\"{run}\"]')")),
            true
        );
    }
    assert_eq!(
        b.eval(&format!(
            "!!document.querySelector('[data-run=\"{bobs}\"]')"
        )),
        false,
        "alice sees bob's run"
    );
    // Each row says what the run used and delivered.
    b.wait(&format!(
        "document.querySelector('[data-run=\"{report}\"] [data-col=\"delivery\"]')?.textContent.includes('file')"
    ));
    let cell = |b: &mut Browser, col: &str| {
        b.eval(&format!(
            "document.querySelector('[data-run=\"{report}\"] [data-col=\"{col}\"]').textContent"
        ))
        .as_str()
        .unwrap_or_default()
        .to_owned()
    };
    assert!(
        cell(&mut b, "model").starts_with("scripted"),
        "{}",
        cell(&mut b, "model")
    );
    assert!(cell(&mut b, "tool-calls").parse::<u32>().unwrap_or(0) >= 1);
    assert!(!cell(&mut b, "duration").is_empty());
    // At 1280 px the table fits: no sideways scroll hides Task and Delivery.
    assert_eq!(
        b.eval("(() => { const t = document.getElementById('runs'); return t.scrollWidth <= t.parentElement.clientWidth + 1; })()"),
        true,
        "the runs table is wider than the page"
    );
    b.screenshot("runs");

    // A run's timeline: every call with its states, the task nested under its call.
    b.goto(&format!("{base}#/runs/{delegated}"));
    b.wait("document.getElementById('run-status')?.textContent === 'success'");
    b.wait(
        "!!document.querySelector('[data-call=\"call-job\"] [data-task-event=\"task_completed\"]')",
    );
    let states = b.eval(
        "[...document.querySelectorAll('[data-call=\"call-job\"] .states li')].map(li => li.dataset.state)",
    );
    for state in ["executed", "returned"] {
        assert!(
            states.as_array().unwrap().contains(&json!(state)),
            "{state} not in {states}"
        );
    }
    let nested = b.eval(
        "[...document.querySelectorAll('[data-call=\"call-job\"] [data-task-event]')].map(li => li.dataset.taskEvent)",
    );
    assert_eq!(
        nested.as_array().unwrap().first(),
        Some(&json!("task_started")),
        "{nested}"
    );
    assert!(
        b.eval("document.querySelectorAll('#timeline li.turn').length")
            .as_u64()
            >= Some(2)
    );
    // The catalog the run saw: the task tool and the builtins.
    b.wait("!!document.querySelector('#catalog [data-tool=\"task\"]')");
    assert_eq!(
        b.eval("!!document.querySelector('#catalog [data-tool=\"present_files\"]')"),
        true
    );
    // And what authorization and the skill policy left of it.
    assert_eq!(
        b.eval("document.getElementById('catalog-denied').textContent"),
        "Removed by authorization: none"
    );
    assert!(b
        .eval("document.getElementById('catalog-skill-policy').textContent")
        .as_str()
        .unwrap_or_default()
        .starts_with("Skill policy: every tool"));
    b.screenshot("run-with-task");
    // The calls on a time axis: a bar per model turn and per call, the task's among them.
    b.wait("document.querySelectorAll('#waterfall svg.waterfall rect').length >= 3");
    assert!(b
        .eval("document.querySelector('#waterfall svg.waterfall').getAttribute('aria-label')")
        .as_str()
        .unwrap_or_default()
        .contains("task"));

    // A link with the token opens the run it names, not the list.
    b.eval("sessionStorage.clear(), true");
    b.goto(&format!("{base}#/runs/{report}&token={ALICE}"));
    b.wait(&format!(
        "location.hash === '#/runs/{report}' && !!document.getElementById('run-status')"
    ));

    // An artifact, downloaded through the gateway.
    b.goto(&format!("{base}#/runs/{report}"));
    b.wait("!!document.querySelector('[data-artifact=\"/mnt/user-data/outputs/report.md\"]')");
    b.eval("document.querySelector('[data-artifact]').click(), true");
    let file = downloads.path().join("report.md");
    let got = wait_for(Duration::from_secs(20), || {
        std::fs::read_to_string(&file).ok()
    });
    assert_eq!(got.as_deref(), Some("inspected report"));

    // A clarification answered from the page.
    b.goto(&format!("{base}#/runs/{asking}"));
    b.wait("!!document.getElementById('answer-form')");
    b.screenshot("clarification");
    // DeerFlow's question icon is said in words: no glyph a machine may draw as a box.
    let asked = b.eval("document.getElementById('answer-form').textContent");
    let asked = asked.as_str().unwrap_or_default();
    assert!(
        asked.contains("Which year?") && !asked.contains('\u{2753}'),
        "{asked}"
    );
    b.eval("document.getElementById('answer').value = '2025', document.querySelector('#answer-form button').click(), true");
    b.wait("document.getElementById('run-status')?.textContent === 'success'");
    assert_eq!(
        ended(ALICE, &asking)["final_answer"],
        "The report covers the year you chose."
    );

    // An MCP server's elicitation answered from the page: a form from its schema.
    b.goto(&format!("{base}#/runs/{eliciting}"));
    b.wait("!!document.querySelector('form[data-elicitation]')");
    b.screenshot("elicitation");
    b.eval(
        "(() => { const f = document.querySelector('form[data-elicitation]'); \
         const name = f.querySelector('[id$=\"-name\"]'); name.value = 'Ada Lovelace'; \
         name.dispatchEvent(new Event('input')); f.querySelector('button[type=submit]').click(); return true; })()",
    );
    b.wait("document.getElementById('run-status')?.textContent === 'success'");
    // The tool it called was deferred; tool_search promoted it.
    b.wait("document.getElementById('promoted')?.textContent.includes('everything_trigger-elicitation-request')");
    let answered = ended(ALICE, &eliciting);
    assert_eq!(answered["status"], "success", "{answered}");
    let (_, _, messages) = http_full(
        &addr,
        ALICE,
        "GET",
        &format!("/api/runs/{eliciting}/messages"),
        None,
    );
    assert!(messages.contains("Ada Lovelace"), "{messages}");
    // A schema's field named like a form property (or `__proto__`) is a field, and the
    // form still renders and sends.
    let built = b.eval(
        "(() => { try { const f = elicitationForm('r', {id: 'odd', server: 's', message: 'm', \
         requested_schema: {properties: {addEventListener: {type: 'string'}, submit: {type: 'string'}, ['__proto__']: {type: 'string'}}}}, () => {}); \
         document.body.append(f); return f.querySelectorAll('input').length; } catch (e) { return String(e); } })()",
    );
    assert_eq!(built, json!(3), "{built}");
    // The header says who the page is signed in as.
    b.wait("document.getElementById('whoami')?.textContent === 'Signed in as alice'");

    // The cluster view is the operator's.
    b.goto(&format!("{base}#/cluster"));
    b.wait("document.getElementById('cluster').textContent.includes('operator role')");
    let operator = cluster.gateway_token();
    b.eval("sessionStorage.clear(), true");
    b.goto(&format!("{base}#token={operator}"));
    b.goto(&format!("{base}#/cluster"));
    b.wait(
        "[...document.querySelectorAll('#cluster td')].some(td => td.textContent === 'subagent-0')",
    );
    let slots = b.eval(
        "[...document.querySelectorAll('#cluster td')].map(td => td.textContent).includes('0/2')",
    );
    assert_eq!(slots, true, "the worker's slots are not shown");
    b.screenshot("cluster");
    // The operator sees bob's run too; a phone-sized view still lists the runs.
    b.send(json!({"op": "viewport", "width": 390, "height": 800, "mobile": true}));
    b.goto(&format!("{base}#/runs"));
    b.wait(&format!(
        "!!document.querySelector('[data-run=\"{bobs}\"]')"
    ));
    b.screenshot("runs-phone");

    let errors = b.send(json!({"op": "errors"}));
    assert_eq!(errors, json!([]), "the page logged errors");
}
