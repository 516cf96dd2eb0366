use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;
use crate::agents::store::{write_files, WriteError};

/// A data root with no files, and a run of user `u1` as agent `name` (if any).
struct Agents {
    dir: tempfile::TempDir,
    context: RunContext,
}

fn agents(name: Option<&str>) -> Agents {
    let dir = tempfile::tempdir().unwrap();
    let mut context = RunContext::local(dir.path(), "u1", "t1", "run-1");
    context.agent.agent_name = name.map(str::to_owned);
    context.agent.models = vec!["gpt-4o".into(), "claude-sonnet".into()];
    Agents { dir, context }
}

impl Agents {
    fn base(&self) -> &Path {
        self.dir.path()
    }

    fn agent_dir(&self) -> PathBuf {
        self.base().join("users/u1/agents/helper")
    }

    fn setup(&self, args: serde_json::Value) -> (String, ToolStatus, StateUpdate) {
        let update = setup_agent(&call(SETUP_AGENT, args), &self.context).unwrap();
        let (content, status) = reply(&update);
        (content, status, update)
    }

    fn update(&self, args: serde_json::Value) -> (String, ToolStatus) {
        reply(&update_agent(&call(UPDATE_AGENT, args), &self.context).unwrap())
    }

    /// An existing agent `helper` of `u1`.
    fn existing(&self, config: &str, soul: &str) {
        std::fs::create_dir_all(self.agent_dir()).unwrap();
        std::fs::write(self.agent_dir().join("config.yaml"), config).unwrap();
        std::fs::write(self.agent_dir().join("SOUL.md"), soul).unwrap();
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.agent_dir().join(file)).unwrap()
    }

    /// Every file and directory under the data root, with the files' contents.
    fn tree(&self) -> BTreeMap<PathBuf, Option<String>> {
        let mut tree = BTreeMap::new();
        let mut stack = vec![self.base().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let relative = path.strip_prefix(self.base()).unwrap().to_path_buf();
                if path.is_dir() {
                    tree.insert(relative, None);
                    stack.push(path);
                } else {
                    tree.insert(relative, std::fs::read_to_string(&path).ok());
                }
            }
        }
        tree
    }
}

fn call(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        args,
    }
}

fn reply(update: &StateUpdate) -> (String, ToolStatus) {
    match update.messages.as_slice() {
        [Message::Tool {
            content,
            status,
            tool_call_id,
            ..
        }] => {
            assert_eq!(tool_call_id, "c1");
            (content.clone(), *status)
        }
        other => panic!("{other:?}"),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

const INVALID: &str = "Invalid agent name '{name}'. Must match pattern: ^[A-Za-z0-9-]+$";

// setup_agent

#[test]
fn setup_writes_the_config_and_soul_of_the_named_agent() {
    let agents = agents(Some("helper"));
    let (content, status, update) = agents.setup(json!({
        "soul": "# Helper\nYou help.", "description": "Helps with reports", "skills": ["pdf", "charts"]
    }));
    assert_eq!(content, "Agent 'helper' created successfully!");
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(update.created_agent_name.as_deref(), Some("helper"));
    assert_eq!(
        agents.read("config.yaml"),
        "name: helper\ndescription: Helps with reports\nskills:\n- pdf\n- charts\n"
    );
    assert_eq!(agents.read("SOUL.md"), "# Helper\nYou help.");
    // Nothing staged is left behind.
    assert_eq!(names(&agents.agent_dir()), ["SOUL.md", "config.yaml"]);
}

#[test]
fn setup_leaves_out_an_empty_description_and_absent_skills_but_keeps_an_empty_list() {
    let agents = agents(Some("helper"));
    agents.setup(json!({"soul": "s", "description": ""}));
    assert_eq!(agents.read("config.yaml"), "name: helper\n");
    agents.setup(json!({"soul": "s", "description": "", "skills": []}));
    assert_eq!(agents.read("config.yaml"), "name: helper\nskills: []\n");
}

#[test]
fn setup_is_an_upsert() {
    let agents = agents(Some("helper"));
    agents.existing(
        "name: helper\ndescription: old\nmodel: gpt-4o\n",
        "old soul",
    );
    let (content, _, _) = agents.setup(json!({"soul": "new soul", "description": "new"}));
    assert_eq!(content, "Agent 'helper' created successfully!");
    assert_eq!(
        agents.read("config.yaml"),
        "name: helper\ndescription: new\n"
    );
    assert_eq!(agents.read("SOUL.md"), "new soul");
}

#[test]
fn setup_without_a_name_writes_the_users_own_soul_never_the_global_one() {
    let agents = agents(None);
    let (content, status, update) = agents.setup(json!({"soul": "default", "description": "d"}));
    // DeerFlow formats the missing name with Python's `None`.
    assert_eq!(content, "Agent 'None' created successfully!");
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(update.created_agent_name, None);
    assert_eq!(
        std::fs::read_to_string(agents.base().join("users/u1/SOUL.md")).unwrap(),
        "default"
    );
    // The global SOUL every user's runs read is the operator's file.
    assert_eq!(names(agents.base()), ["users"]);
    assert_eq!(names(&agents.base().join("users/u1")), ["SOUL.md"]);
}

#[test]
fn setup_refuses_a_blank_soul_before_touching_the_disk() {
    for name in [Some("helper"), None] {
        let agents = agents(name);
        let (content, status, update) = agents.setup(json!({"soul": " \n\t", "description": "d"}));
        assert_eq!(
            content,
            "Error: soul content is empty; refusing to create agent with an empty SOUL.md"
        );
        assert_eq!(status, ToolStatus::Error);
        assert_eq!(update.created_agent_name, None);
        assert!(agents.tree().is_empty());
    }
}

#[test]
fn setup_refuses_names_that_are_not_letters_digits_and_dashes() {
    for name in [
        "a/b",
        "..",
        "",
        "../escape",
        "with space",
        "dot.ted",
        "é",
        "x\n",
    ] {
        let agents = agents(Some(name));
        let (content, status, _) = agents.setup(json!({"soul": "s", "description": "d"}));
        assert_eq!(
            content,
            format!("Error: {}", INVALID.replace("{name}", name)),
            "{name:?}"
        );
        assert_eq!(status, ToolStatus::Error);
        assert!(agents.tree().is_empty(), "{name:?}");
    }
}

#[test]
fn setup_with_missing_or_mistyped_arguments_is_a_validation_error() {
    let agents = agents(Some("helper"));
    for (args, detail) in [
        (
            json!({"description": "d"}),
            "soul: field required (a string)",
        ),
        (
            json!({"soul": "s"}),
            "description: field required (a string)",
        ),
        (
            json!({"soul": 1, "description": "d"}),
            "soul: input should be a valid string",
        ),
        (
            json!({"soul": "s", "description": "d", "skills": "pdf"}),
            "skills: input should be a valid list of strings",
        ),
        (
            json!({"soul": "s", "description": "d", "skills": [1]}),
            "skills: input should be a valid list of strings",
        ),
    ] {
        let failure = setup_agent(&call(SETUP_AGENT, args), &agents.context).unwrap_err();
        assert_eq!(
            failure,
            ToolFailure::new(FailureClass::ValidationError, detail)
        );
    }
    assert!(agents.tree().is_empty());
}

#[test]
fn setup_fails_cleanly_where_a_file_stands_in_for_a_directory() {
    // The user's agents directory is a file: nothing can be created under it.
    let agents = agents(Some("helper"));
    std::fs::create_dir_all(agents.base().join("users/u1")).unwrap();
    std::fs::write(agents.base().join("users/u1/agents"), "not a directory").unwrap();
    let before = agents.tree();
    let (content, status, update) = agents.setup(json!({"soul": "s", "description": "d"}));
    assert!(
        content.starts_with("Error: cannot create the agent directory: "),
        "{content}"
    );
    assert_eq!(status, ToolStatus::Error);
    assert_eq!(update.created_agent_name, None);
    assert_eq!(agents.tree(), before);

    // The agent's own directory is a file.
    let agents = self::agents(Some("helper"));
    std::fs::create_dir_all(agents.base().join("users/u1/agents")).unwrap();
    std::fs::write(agents.agent_dir(), "not a directory").unwrap();
    let before = agents.tree();
    let (content, _, _) = agents.setup(json!({"soul": "s", "description": "d"}));
    assert!(content.starts_with("Error: cannot create the agent directory: "));
    assert_eq!(agents.tree(), before);
}

#[test]
fn setup_over_an_existing_agent_leaves_its_files_as_they_were_when_a_write_fails() {
    let agents = agents(Some("helper"));
    std::fs::create_dir_all(agents.agent_dir().join("SOUL.md/notes")).unwrap();
    std::fs::write(agents.agent_dir().join("config.yaml"), "name: helper\n").unwrap();
    let before = agents.tree();
    let (content, status, _) = agents.setup(json!({"soul": "s", "description": "d"}));
    assert!(
        content.starts_with("Error: cannot replace SOUL.md: "),
        "{content}"
    );
    assert_eq!(status, ToolStatus::Error);
    // config.yaml was renamed into place first, then put back; no staged file is left.
    assert_eq!(agents.tree(), before);
}

// The store's rollback of a directory it created

#[test]
fn a_failed_write_removes_the_agent_directory_and_the_parents_it_created() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("users/u1/agents/helper");
    // The second file cannot be staged (its directory does not exist), after the agent
    // directory was created and the first file staged.
    let failed = write_files(
        &dir,
        &[
            ("config.yaml", b"name: helper\n"),
            ("missing/SOUL.md", b"s"),
        ],
    );
    assert!(
        matches!(&failed, Err(WriteError::Stage { file, .. }) if file == "missing/SOUL.md"),
        "{failed:?}"
    );
    assert!(names(base.path()).is_empty());

    // A parent that existed before stays, and so does another agent's directory.
    std::fs::create_dir_all(base.path().join("users/u1/agents/other")).unwrap();
    let failed = write_files(&dir, &[("a", b"1"), ("missing/b", b"2")]);
    assert!(failed.is_err());
    assert_eq!(names(&base.path().join("users/u1/agents")), ["other"]);
}

#[test]
fn a_failed_rename_restores_the_files_already_replaced() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("helper");
    std::fs::create_dir_all(dir.join("b/child")).unwrap();
    std::fs::write(dir.join("a"), "old a").unwrap();
    let failed = write_files(&dir, &[("a", b"new a"), ("b", b"new b"), ("c", b"c")]);
    assert!(matches!(&failed, Err(WriteError::Replace { file, .. }) if file == "b"));
    assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "old a");
    assert_eq!(names(&dir), ["a", "b"]);
}

#[test]
fn a_reader_never_sees_a_half_written_file() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("helper");
    let first = "a".repeat(1 << 20);
    let second = "b".repeat(1 << 20);
    write_files(&dir, &[("SOUL.md", first.as_bytes())]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (path, stop) = (dir.join("SOUL.md"), stop.clone());
        let (first, second) = (first.clone(), second.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let seen = std::fs::read_to_string(&path).unwrap();
                assert!(
                    seen == first || seen == second,
                    "a read saw {} bytes",
                    seen.len()
                );
                reads += 1;
            }
            reads
        })
    };
    for i in 0..40 {
        let soul = if i % 2 == 0 { &second } else { &first };
        write_files(&dir, &[("SOUL.md", soul.as_bytes())]).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    assert_eq!(names(&dir), ["SOUL.md"]);
}

// update_agent

const CONFIG: &str = "name: helper\ndescription: Helps\nmodel: gpt-4o\ntool_groups:\n- web\ngithub:\n  repo: acme/site\n";

#[test]
fn update_changes_only_the_given_fields_and_keeps_the_rest() {
    let agents = agents(Some("helper"));
    agents.existing(CONFIG, "old soul");
    let (content, status) = agents.update(json!({
        "description": "Writes reports", "model": "claude-sonnet", "skills": ["pdf"], "soul": "new soul"
    }));
    assert_eq!(
        content,
        "Agent 'helper' updated successfully. Changed: description, model, skills, soul. The new configuration takes effect on the next user turn."
    );
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(
        agents.read("config.yaml"),
        "name: helper\ndescription: Writes reports\nmodel: claude-sonnet\ntool_groups:\n- web\nskills:\n- pdf\ngithub:\n  repo: acme/site\n"
    );
    assert_eq!(agents.read("SOUL.md"), "new soul");
    assert_eq!(names(&agents.agent_dir()), ["SOUL.md", "config.yaml"]);
}

#[test]
fn update_forces_the_name_and_accepts_empty_lists() {
    let agents = agents(Some("helper"));
    agents.existing("name: drifted\nskills:\n- pdf\n", "soul");
    let (content, _) = agents.update(json!({"skills": [], "tool_groups": []}));
    assert_eq!(
        content,
        "Agent 'helper' updated successfully. Changed: tool_groups, skills. The new configuration takes effect on the next user turn."
    );
    assert_eq!(
        agents.read("config.yaml"),
        "name: helper\ndescription: ''\ntool_groups: []\nskills: []\n"
    );
}

#[test]
fn update_with_only_a_soul_leaves_the_config_file_alone() {
    let agents = agents(Some("helper"));
    let hand_written = "# kept as written\nname: helper\ndescription:   Helps\n";
    agents.existing(hand_written, "old");
    let (content, _) = agents.update(json!({"soul": "new", "description": "null"}));
    assert_eq!(
        content,
        "Agent 'helper' updated successfully. Changed: soul. The new configuration takes effect on the next user turn."
    );
    assert_eq!(agents.read("config.yaml"), hand_written);
    assert_eq!(agents.read("SOUL.md"), "new");
}

#[test]
fn update_with_the_values_already_there_changes_nothing() {
    let agents = agents(Some("helper"));
    agents.existing(CONFIG, "soul");
    let before = agents.tree();
    let (content, status) = agents.update(json!({
        "description": "Helps", "model": "gpt-4o", "tool_groups": ["web"], "skills": "undefined"
    }));
    assert_eq!(
        content,
        "No changes applied to agent 'helper'. The provided values matched the existing config."
    );
    assert_eq!(status, ToolStatus::Success);
    assert_eq!(agents.tree(), before);
}

#[test]
fn update_refusals_have_deerflows_texts_and_change_nothing() {
    let no_fields = "Error: No fields provided. Pass at least one of: soul, description, skills, tool_groups, model. Omit unchanged fields instead of passing null-like strings such as \"null\", \"none\", or \"undefined\".";
    let cases: Vec<(Option<&str>, Option<&str>, serde_json::Value, String)> = vec![
        (
            Some("helper"),
            Some("github"),
            json!({}),
            "Error: update_agent is disabled on the 'github' channel. Self-mutation requests must come from an operator-trusted surface (chat UI or the HTTP API), not a webhook fan-out.".into(),
        ),
        (Some("helper"), None, json!({}), no_fields.into()),
        (
            Some("helper"),
            Some("web"),
            json!({"soul": "null", "description": " None ", "model": "UNDEFINED", "skills": "null", "tool_groups": null}),
            no_fields.into(),
        ),
        (
            Some("helper"),
            None,
            json!({"soul": "  "}),
            "Error: soul content is empty; refusing to update agent with an empty SOUL.md. Omit the soul field if you do not want to change it.".into(),
        ),
        (
            Some("../helper"),
            None,
            json!({"description": "d"}),
            format!("Error: {}", INVALID.replace("{name}", "../helper")),
        ),
        (
            None,
            None,
            json!({"description": "d"}),
            "Error: update_agent is only available inside a custom agent's chat. There is no agent_name in the current runtime context, so there is nothing to update. If you are inside the bootstrap flow, use setup_agent instead.".into(),
        ),
        (
            Some("helper"),
            None,
            json!({"model": "gpt-5"}),
            "Error: Unknown model 'gpt-5'. Pass a model name that exists in config.yaml's models section.".into(),
        ),
    ];
    for (name, channel, args, expected) in cases {
        let mut agents = agents(name);
        agents.context.agent.channel_name = channel.map(str::to_owned);
        agents.existing(CONFIG, "soul");
        let before = agents.tree();
        assert_eq!(
            agents.update(args.clone()),
            (expected, ToolStatus::Error),
            "{args}"
        );
        assert_eq!(agents.tree(), before, "{args}");
    }
}

#[test]
fn update_refuses_legacy_missing_and_unreadable_agents() {
    let agents = agents(Some("helper"));
    assert_eq!(
        agents.update(json!({"description": "d"})).0,
        "Error: Agent 'helper' does not exist for the current user. Use setup_agent to create a new agent first."
    );
    // A per-user directory with only memory.json does not hide the legacy agent.
    std::fs::create_dir_all(agents.agent_dir()).unwrap();
    std::fs::write(agents.agent_dir().join("memory.json"), "{}").unwrap();
    std::fs::create_dir_all(agents.base().join("agents/helper")).unwrap();
    std::fs::write(agents.base().join("agents/helper/config.yaml"), CONFIG).unwrap();
    let before = agents.tree();
    assert_eq!(
        agents.update(json!({"description": "d"})),
        (
            "Error: Agent 'helper' only exists in the legacy shared layout and is not scoped to a user. Run scripts/migrate_user_isolation.py to move legacy agents into the per-user layout before updating.".into(),
            ToolStatus::Error
        )
    );
    assert_eq!(agents.tree(), before);

    std::fs::write(agents.agent_dir().join("config.yaml"), "name: [unclosed").unwrap();
    let before = agents.tree();
    let (content, status) = agents.update(json!({"description": "d"}));
    assert!(
        content.starts_with("Error: Agent 'helper' has an unreadable config: "),
        "{content}"
    );
    assert_eq!(status, ToolStatus::Error);
    assert_eq!(agents.tree(), before);
}

#[test]
fn update_with_mistyped_arguments_is_a_validation_error() {
    let agents = agents(Some("helper"));
    agents.existing(CONFIG, "soul");
    for (args, detail) in [
        (json!({"soul": 3}), "soul: input should be a valid string"),
        (
            json!({"skills": "pdf"}),
            "skills: input should be a valid list of strings",
        ),
        (
            json!({"tool_groups": [true]}),
            "tool_groups: input should be a valid list of strings",
        ),
    ] {
        let failure = update_agent(&call(UPDATE_AGENT, args), &agents.context).unwrap_err();
        assert_eq!(
            failure,
            ToolFailure::new(FailureClass::ValidationError, detail)
        );
    }
}

#[test]
fn a_failed_update_leaves_the_old_config_intact() {
    let agents = agents(Some("helper"));
    agents.existing(CONFIG, "soul");
    // SOUL.md cannot be replaced: a directory with content stands there.
    std::fs::remove_file(agents.agent_dir().join("SOUL.md")).unwrap();
    std::fs::create_dir_all(agents.agent_dir().join("SOUL.md/notes")).unwrap();
    let before = agents.tree();
    let (content, status) = agents.update(json!({"description": "new", "soul": "new soul"}));
    assert!(
        content.starts_with("Error: Failed to update agent 'helper': cannot replace SOUL.md: "),
        "{content}"
    );
    assert_eq!(status, ToolStatus::Error);
    assert_eq!(agents.read("config.yaml"), CONFIG);
    assert_eq!(agents.tree(), before);
}
