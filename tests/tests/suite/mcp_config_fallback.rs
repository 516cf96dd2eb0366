//! An extensions file caught half-written (issue 10, item 18): runs started while
//! `extensions_config.json` does not parse succeed with the last good file's servers and
//! carry a warning event (they failed with 422 before); the lead logs it as well. A file
//! gone for a moment is treated alike. When the file is whole again, runs use it and the
//! warning goes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support::{peer_script, python, stdio, McpCluster};
use serde_json::json;

const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - name: tool_search
        args: {query: "select:good_echo"}
  - tool_calls:
      - name: good_echo
        args: {text: "still here"}
  - content: Done.
"#;

const FALLBACK: &str =
    "the extensions config could not be loaded (see the lead's log); this run uses the last good one";

#[test]
fn a_half_written_extensions_file_leaves_runs_on_the_last_good_one_with_a_warning() {
    let c = McpCluster::start(json!({
        "good": stdio(python(), &[&peer_script("slow_tools.py")]),
    }));
    // Half of the file, as a writer that is not done yet leaves it (a plain write, not
    // the atomic rename).
    let whole = std::fs::read_to_string(&c.config).unwrap();
    let half = &whole[..whole.len() / 2];
    std::fs::write(&c.config, half).unwrap();

    let run = c.run_playbook(PLAYBOOK);
    assert_eq!(
        (run.code, run.view["status"].as_str()),
        (0, Some("success")),
        "{}\n{}",
        run.view,
        run.stderr
    );
    assert!(run.called_ok("good_echo"), "{:?}", run.events);
    // Exactly this text: the parse error, which may quote the file's secrets, stays in
    // the lead's log.
    assert_eq!(run.warnings(), [FALLBACK], "{:?}", run.events);

    // Gone for a moment (a writer that deletes, then writes): the same.
    std::fs::remove_file(&c.config).unwrap();
    let run = c.run_playbook(PLAYBOOK);
    assert_eq!(run.view["status"], "success", "{}", run.stderr);
    assert!(run.called_ok("good_echo"), "{:?}", run.events);
    assert_eq!(run.warnings(), [FALLBACK], "{:?}", run.events);

    // The file is whole again: no warning.
    std::fs::write(&c.config, &whole).unwrap();
    let run = c.run_playbook(PLAYBOOK);
    assert_eq!(run.view["status"], "success", "{}", run.stderr);
    assert!(run.warnings().is_empty(), "{:?}", run.warnings());
}
