use super::*;
use serde_json::json;

/// A skills root with `{category}/{dir}/SKILL.md` for each skill.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Root {
        Root {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn install(&self, category: &str, dir: &str, front: &str) -> &Root {
        let skill_dir = self.dir.path().join("skills").join(category).join(dir);
        std::fs::create_dir_all(&skill_dir).unwrap();
        std::fs::write(
            skill_dir.join(SKILL_FILE),
            format!("---\n{front}\n---\n# Use <this> & that\n"),
        )
        .unwrap();
        self
    }

    fn store(&self) -> SkillStore {
        SkillStore {
            root: Some(self.dir.path().join("skills")),
            container_root: DEFAULT_SKILLS_CONTAINER_PATH.into(),
            extensions: Some(self.dir.path().join("extensions_config.json")),
            user: None,
        }
    }

    fn disable(&self, name: &str) {
        std::fs::write(
            self.dir.path().join("extensions_config.json"),
            json!({"skills": {name: {"enabled": false}}}).to_string(),
        )
        .unwrap();
    }
}

fn read(id: &str, path: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "read_file".into(),
        args: json!({"description": "load the skill", "path": path}),
    }
}

fn result(id: &str, content: &str, status: ToolStatus) -> StateUpdate {
    StateUpdate::messages([Message::tool(id, "read_file", content, status)])
}

fn active(name: &str, path: &str, source: SkillSource) -> ActiveSkill {
    ActiveSkill {
        name: name.into(),
        path: path.into(),
        source,
    }
}

fn denial(policy: &SkillPolicy, name: &str) -> Option<String> {
    match policy.check_call(name, "c1") {
        Ok(()) => None,
        Err(Message::Tool { content, .. }) => Some(content),
        Err(other) => panic!("not a tool message: {other:?}"),
    }
}

#[test]
fn slash_references_follow_deerflows_pattern() {
    let parsed = parse_slash("  /my-skill  write a report").unwrap();
    assert_eq!(
        (parsed.name, parsed.remaining),
        ("my-skill", "write a report")
    );
    assert_eq!(parse_slash("/pdf").unwrap().remaining, "");
    assert_eq!(parse_slash("/report2\twith a tab").unwrap().name, "report2");
    assert_eq!(
        parse_slash("/data-analysis总结").unwrap().name,
        "data-analysis"
    );
    for text in [
        "my-skill",
        "/My-skill",
        "/my_skill",
        "/my--skill",
        "/-skill",
        "/skill-",
        "/tmp/report.md",
        "/skill.",
        "/",
        "please /my-skill",
    ] {
        assert_eq!(parse_slash(text), None, "{text:?}");
    }
}

#[test]
fn installed_skills_are_public_and_custom_directories_with_a_loadable_skill_md() {
    let root = Root::new();
    root.install("public", "pdf", "name: pdf\nallowed-tools: [bash]")
        .install("custom", "team/report", "name: report")
        .install("custom", "pdf", "name: pdf\nallowed-tools: [ls]")
        .install("legacy", "old", "name: old")
        .install("public", ".hidden", "name: hidden");
    std::fs::create_dir_all(root.dir.path().join("skills/public/broken")).unwrap();
    std::fs::write(
        root.dir.path().join("skills/public/broken/SKILL.md"),
        "no front matter",
    )
    .unwrap();
    let installed = root.store().scan();
    let found: Vec<(&str, &str, &str)> = installed
        .iter()
        .map(|s| (s.skill.name.as_str(), s.category, s.container_file.as_str()))
        .collect();
    // The shared `custom/` directory is DeerFlow's read-only legacy category.
    assert_eq!(
        found,
        [
            ("pdf", "legacy", "/mnt/skills/custom/pdf/SKILL.md"),
            (
                "report",
                "legacy",
                "/mnt/skills/custom/team/report/SKILL.md"
            ),
        ]
    );
    assert!(SkillStore::default().scan().is_empty());
}

#[test]
fn a_users_own_skills_are_scanned_for_that_user_only_and_shadow_shared_ones() {
    let root = Root::new();
    root.install("public", "pdf", "name: pdf")
        .install("users/alice/custom", "pdf", "name: pdf\ndescription: Mine")
        .install("users/alice/custom", "notes", "name: notes")
        .install("users/bob/custom", "bobs", "name: bobs");
    let names = |store: SkillStore| -> Vec<(String, &'static str, String)> {
        store
            .scan()
            .into_iter()
            .map(|s| (s.skill.name, s.category, s.container_file))
            .collect()
    };
    assert_eq!(
        names(root.store().for_user("alice")),
        [
            (
                "notes".to_owned(),
                "custom",
                "/mnt/skills/users/alice/custom/notes/SKILL.md".to_owned()
            ),
            (
                "pdf".to_owned(),
                "custom",
                "/mnt/skills/users/alice/custom/pdf/SKILL.md".to_owned()
            ),
        ]
    );
    assert_eq!(
        names(root.store()),
        [(
            "pdf".to_owned(),
            "public",
            "/mnt/skills/public/pdf/SKILL.md".to_owned()
        )]
    );
    // A user id that is not a safe directory name has no directory of its own.
    assert!(root.store().for_user("../bob").user_custom_dir().is_none());
    assert_eq!(names(root.store().for_user("../bob")).len(), 1);
}

#[test]
fn the_skills_root_comes_from_config_like_sandbox_host() {
    let yaml = "skills:\n  path: /srv/skills\n  container_path: /mnt/sk/\n";
    let app: AppConfig = serde_yaml::from_str(yaml).unwrap();
    let store = SkillStore::from_config(&app, Path::new("/data"), None);
    assert_eq!(store.root.as_deref(), Some(Path::new("/srv/skills")));
    assert_eq!(store.container_root, "/mnt/sk");
    let store = SkillStore::from_config(&AppConfig::default(), Path::new("/data"), None);
    assert_eq!(store.root.as_deref(), Some(Path::new("/data/skills")));
    assert_eq!(store.container_root, "/mnt/skills");
}

#[test]
fn a_slash_command_activates_an_installed_skill_with_its_content_as_a_reminder() {
    let root = Root::new();
    root.install(
        "public",
        "my-skill",
        "name: my-skill\nallowed-tools: [bash]",
    );
    let store = root.store();
    let messages = [Message::human("/my-skill write <a> report")];
    let Some(SlashActivation::Activated { skill, reminder }) = store.slash_activation(&messages)
    else {
        panic!("not activated");
    };
    assert_eq!(
        skill,
        active(
            "my-skill",
            "/mnt/skills/public/my-skill/SKILL.md",
            SkillSource::Slash
        )
    );
    let content = "---\nname: my-skill\nallowed-tools: [bash]\n---\n# Use <this> & that\n";
    let hash = hex::encode(Sha256::digest(content.as_bytes()));
    assert_eq!(
        reminder,
        format!(
            "<slash_skill_activation>\nThe user explicitly activated the `my-skill` skill for this turn.\nTreat the task text as:\n<user_request>\nwrite &lt;a&gt; report\n</user_request>\n\nFollow this skill before choosing a general workflow. Load supporting resources from the same skill directory only when needed.\n\n<skill name=\"my-skill\" category=\"public\" path=\"/mnt/skills/public/my-skill/SKILL.md\" sha256=\"{hash}\" editable=\"false\">\n<skill_content encoding=\"xml-escaped\">\n---\nname: my-skill\nallowed-tools: [bash]\n---\n# Use &lt;this&gt; &amp; that\n\n</skill_content>\n</skill>\n</slash_skill_activation>"
        )
    );
    let mut model_messages = messages.to_vec();
    insert_reminder(&mut model_messages, reminder.clone());
    assert_eq!(model_messages.len(), 2);
    assert!(
        matches!(&model_messages[0], Message::Human { content, hide_from_ui: true, .. } if *content == reminder)
    );
    // Once a model reply answered the command, it does not activate again.
    let answered = [
        Message::human("/my-skill write a report"),
        Message::Ai {
            id: "m1".into(),
            content: String::new(),
            tool_calls: Vec::new(),
            reasoning: None,
        },
    ];
    assert_eq!(store.slash_activation(&answered), None);
    assert_eq!(
        store.slash_activation(&[Message::human("write a report")]),
        None
    );
}

#[test]
fn a_slash_command_for_a_missing_or_disabled_skill_gets_deerflows_reply() {
    let root = Root::new();
    root.install("custom", "charts", "name: charts");
    let store = root.store();
    assert_eq!(
        store.slash_activation(&[Message::human("/nope do it")]),
        Some(SlashActivation::Failed(
            "Skill `/nope` is not installed.".into()
        ))
    );
    root.disable("charts");
    assert_eq!(
        store.slash_activation(&[Message::human("/charts")]),
        Some(SlashActivation::Failed(
            "Skill `/charts` is installed but disabled. Enable it before using slash activation."
                .into()
        ))
    );
}

#[test]
fn a_successful_read_of_a_skill_md_activates_the_skill() {
    let store = Root::new().store();
    let path = "/mnt/skills/custom/charts/../charts//SKILL.md";
    assert_eq!(
        store.read_activation(
            &read("c1", path),
            &result("c1", "---\nname: charts\n---", ToolStatus::Success)
        ),
        Some(active(
            "charts",
            "/mnt/skills/custom/charts/SKILL.md",
            SkillSource::Read
        ))
    );
    let mut by_file_path = read("c2", "");
    by_file_path.args = json!({"file_path": "/mnt/skills/public/pdf/SKILL.md"});
    assert!(store
        .read_activation(&by_file_path, &result("c2", "ok", ToolStatus::Success))
        .is_some());
    // Not activated: a failed read, an error text, another file, a path outside the
    // skills root, another tool.
    let cases = [
        (
            read("c3", "/mnt/skills/public/pdf/SKILL.md"),
            result("c3", "boom", ToolStatus::Error),
        ),
        (
            read("c4", "/mnt/skills/public/pdf/SKILL.md"),
            result("c4", "  Error: File not found", ToolStatus::Success),
        ),
        (
            read("c5", "/mnt/skills/public/pdf/README.md"),
            result("c5", "ok", ToolStatus::Success),
        ),
        (
            read("c6", "/mnt/skills/../user-data/SKILL.md"),
            result("c6", "ok", ToolStatus::Success),
        ),
        (
            read("c7", "/mnt/skillsx/pdf/SKILL.md"),
            result("c7", "ok", ToolStatus::Success),
        ),
        (
            ToolCall {
                name: "bash".into(),
                ..read("c8", "/mnt/skills/public/pdf/SKILL.md")
            },
            result("c8", "ok", ToolStatus::Success),
        ),
    ];
    for (call, result) in cases {
        assert_eq!(store.read_activation(&call, &result), None, "{call:?}");
    }
}

#[test]
fn the_policy_is_the_union_of_the_skills_read_and_a_legacy_skill_adds_nothing() {
    let root = Root::new();
    root.install("public", "pdf", "name: pdf\nallowed-tools: [bash]")
        .install(
            "custom",
            "charts",
            "name: charts\nallowed-tools: [ls, present_files]",
        )
        .install("public", "legacy", "name: legacy");
    let store = root.store();
    let pdf = active("pdf", "/mnt/skills/public/pdf/SKILL.md", SkillSource::Read);
    let charts = active(
        "charts",
        "/mnt/skills/custom/charts/SKILL.md",
        SkillSource::Read,
    );
    let legacy = active(
        "legacy",
        "/mnt/skills/public/legacy/SKILL.md",
        SkillSource::Read,
    );
    let union = store.policy(&[pdf.clone(), charts.clone(), legacy.clone()]);
    for allowed in [
        "bash",
        "ls",
        "present_files",
        "read_file",
        "tool_search",
        "describe_skill",
        "review_skill_package",
    ] {
        assert_eq!(denial(&union, allowed), None, "{allowed}");
    }
    assert_eq!(
        denial(&union, "write_file").as_deref(),
        Some("Error: Tool 'write_file' is not allowed by the active skill policy.")
    );
    // No active skill declares `allowed-tools`: everything is allowed (legacy).
    assert_eq!(denial(&store.policy(&[legacy]), "write_file"), None);
    // No active skill: the passive policy.
    assert_eq!(denial(&store.policy(&[]), "write_file"), None);
}

#[test]
fn a_slash_skill_dominates_skills_read_later() {
    let root = Root::new();
    root.install("public", "pdf", "name: pdf\nallowed-tools: [bash]")
        .install("custom", "charts", "name: charts\nallowed-tools: [ls]");
    let policy = root.store().policy(&[
        active("pdf", "/mnt/skills/public/pdf/SKILL.md", SkillSource::Slash),
        active(
            "charts",
            "/mnt/skills/custom/charts/SKILL.md",
            SkillSource::Read,
        ),
    ]);
    assert_eq!(denial(&policy, "bash"), None);
    assert!(denial(&policy, "ls").is_some());
}

#[test]
fn an_active_skill_that_cannot_be_loaded_fails_closed_to_the_framework_tools() {
    let root = Root::new();
    root.install("public", "pdf", "name: pdf");
    let store = root.store();
    let pdf = active("pdf", "/mnt/skills/public/pdf/SKILL.md", SkillSource::Slash);
    assert_eq!(
        denial(&store.policy(std::slice::from_ref(&pdf)), "write_file"),
        None
    );
    // Its SKILL.md no longer loads: not installed any more, the policy fails closed.
    std::fs::write(
        root.dir.path().join("skills/public/pdf/SKILL.md"),
        "---\nallowed-tools: [unclosed\n---\n",
    )
    .unwrap();
    let broken = store.policy(std::slice::from_ref(&pdf));
    assert_eq!(denial(&broken, "read_file"), None);
    assert_eq!(
        denial(&broken, "bash").as_deref(),
        Some("Error: Tool 'bash' is not allowed by the active skill policy.")
    );
    // A path naming no skill, or a disabled skill, fails closed the same way.
    let unknown = active("x", "/mnt/skills/public/x/SKILL.md", SkillSource::Read);
    assert!(denial(&store.policy(&[unknown]), "bash").is_some());
    root.install("public", "pdf", "name: pdf");
    root.disable("pdf");
    assert!(denial(&store.policy(&[pdf]), "bash").is_some());
}
