//! The policy: the shipped defaults on the issue's cases, rule matchers, the strictest verdict,
//! examples checked at load (also through `load_app_config`), and no panic on any input.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn env() -> PolicyEnv {
    PolicyEnv {
        workspace: SANDBOX_WORKSPACE.to_owned(),
        writable_mounts: vec!["/mnt/host-data".to_owned()],
    }
}

fn defaults() -> ApprovalPolicy {
    ApprovalPolicy::from_config(&ApprovalsConfig::default(), &env()).unwrap()
}

fn policy(yaml: &str) -> Result<ApprovalPolicy, PolicyError> {
    let config: ApprovalsConfig = serde_yaml::from_str(yaml).unwrap();
    ApprovalPolicy::from_config(&config, &env())
}

fn bash(policy: &ApprovalPolicy, line: &str) -> Verdict {
    let args = json!({ "description": "run", "command": line });
    policy.evaluate(&CallFacts {
        tool: "bash",
        source: CallSource::Sandbox,
        args: &args,
    })
}

fn call(policy: &ApprovalPolicy, tool: &str, source: CallSource<'_>, args: Value) -> Verdict {
    policy.evaluate(&CallFacts {
        tool,
        source,
        args: &args,
    })
}

/// The decision and the deciding rule.
fn decided(verdict: Verdict) -> (Decision, Option<String>) {
    (verdict.decision, verdict.rule)
}

fn ask(rule: &str) -> (Decision, Option<String>) {
    (Decision::Ask, Some(rule.to_owned()))
}

fn deny(rule: &str) -> (Decision, Option<String>) {
    (Decision::Deny, Some(rule.to_owned()))
}

const ALLOW: (Decision, Option<String>) = (Decision::Allow, None);

#[test]
fn a_pipeline_hiding_rm_rf_root_behind_echo_is_denied() {
    let p = defaults();
    let verdict = bash(&p, "echo x && rm -rf /");
    assert_eq!(verdict.decision, Decision::Deny);
    assert_eq!(verdict.rule.as_deref(), Some("delete-root"));
    assert_eq!(verdict.origin.as_deref(), Some(DEFAULTS_ORIGIN));
    assert!(verdict.justification.is_some());
    for line in [
        "echo x; (true && rm -fr /mnt/user-data)",
        "ls | sudo rm --recursive --force /*",
        "cd /tmp; rm -rf ../",
        "bash -c 'echo hi && rm -rf //'",
    ] {
        assert_eq!(decided(bash(&p, line)), deny("delete-root"), "{line}");
    }
}

#[test]
fn defaults_ask_for_deletes_outside_pushes_and_publishing() {
    let p = defaults();
    let cases = [
        (
            "echo $(rm -rf /tmp/x)",
            ask("recursive-delete-outside-workspace"),
        ),
        ("rm -rf ../x", ask("recursive-delete-outside-workspace")),
        (
            "cd /tmp && rm -rf build",
            ask("recursive-delete-outside-workspace"),
        ),
        (
            "rm -rf \"$TARGET\"",
            ask("recursive-delete-outside-workspace"),
        ),
        (
            "find / -name '*.log' | xargs rm -rf",
            ask("recursive-delete-outside-workspace"),
        ),
        (
            "find .. -type f -delete",
            ask("find-delete-outside-workspace"),
        ),
        ("bash -c 'git push'", ask("git-push")),
        ("sudo git push", ask("git-push")),
        ("\"git\" \"push\"", ask("git-push")),
        ("git -C repo push origin main", ask("git-push")),
        ("env GIT_TRACE=1 git push", ask("git-push")),
        (
            "cd pkg && npm publish --access public",
            ask("package-publish"),
        ),
        ("python3 -m twine upload dist/*", ask("package-publish")),
        ("git status", ALLOW),
        ("echo git push", ALLOW),
        ("rm -rf build node_modules", ALLOW),
        ("rm -rf ./dist/*", ALLOW),
        ("rm /tmp/x.log", ALLOW),
        ("cargo build && cargo test", ALLOW),
    ];
    for (line, expected) in cases {
        assert_eq!(decided(bash(&p, line)), expected, "{line}");
    }
}

#[test]
fn an_unanalysable_command_asks_by_default() {
    let p = defaults();
    let verdict = bash(&p, "$CMD push");
    assert_eq!(decided(verdict.clone()), ask(UNPARSED_RULE));
    assert!(verdict.justification.unwrap().contains("expansion"));
    assert_eq!(decided(bash(&p, "eval \"$X\"")), ask(UNPARSED_RULE));
    // A denial found beside the unanalysable part still wins.
    assert_eq!(decided(bash(&p, "rm -rf /; $CMD")), deny("delete-root"));
    let strict = policy("unparsed: deny").unwrap();
    assert_eq!(decided(bash(&strict, "$CMD push")), deny(UNPARSED_RULE));
    // No rule reads commands: nothing to analyse for.
    let none = policy("defaults: false").unwrap();
    assert!(none.is_empty());
    assert_eq!(decided(bash(&none, "$CMD push")), ALLOW);
}

#[test]
fn writes_to_writable_mounts_ask() {
    let p = defaults();
    let sandbox = CallSource::Sandbox;
    let write = |path: &str| json!({ "description": "d", "path": path, "content": "x" });
    assert_eq!(
        decided(call(
            &p,
            "write_file",
            sandbox,
            write("/mnt/host-data/a.txt")
        )),
        ask("write-host-mount")
    );
    assert_eq!(
        decided(call(
            &p,
            "str_replace",
            sandbox,
            write("/mnt/host-data/../host-data/b")
        )),
        ask("write-host-mount")
    );
    assert_eq!(
        decided(call(
            &p,
            "read_file",
            sandbox,
            write("/mnt/host-data/a.txt")
        )),
        ALLOW
    );
    assert_eq!(
        decided(call(&p, "write_file", sandbox, write("notes.md"))),
        ALLOW
    );
    assert_eq!(
        decided(bash(&p, "echo hi > /mnt/host-data/x")),
        ask("write-host-mount")
    );
    assert_eq!(
        decided(bash(&p, "cd /mnt/host-data && touch x")),
        ask("write-host-mount")
    );
    assert_eq!(decided(bash(&p, "cat /mnt/host-data/x > out.txt")), ALLOW);
    // Without writable mounts the rule is not there.
    let plain =
        ApprovalPolicy::from_config(&ApprovalsConfig::default(), &PolicyEnv::default()).unwrap();
    assert_eq!(decided(bash(&plain, "echo hi > /mnt/host-data/x")), ALLOW);
}

#[test]
fn the_strictest_matching_rule_wins_and_the_first_among_equals() {
    let p = policy(
        r#"
defaults: false
rules:
  - { name: git-ok, command: [git], decision: allow }
  - { name: push, command: [git, push], decision: ask, justification: pushes }
  - { name: push-again, command: [git, push], decision: ask }
  - { name: force, command: [git, push], flags: [--force, -f], decision: deny }
"#,
    )
    .unwrap();
    assert_eq!(
        decided(bash(&p, "git log")),
        (Decision::Allow, Some("git-ok".into()))
    );
    let push = bash(&p, "git push");
    assert_eq!(decided(push.clone()), ask("push"));
    assert_eq!(push.origin.as_deref(), Some(GLOBAL_ORIGIN));
    assert_eq!(push.justification.as_deref(), Some("pushes"));
    assert_eq!(decided(bash(&p, "git push -f")), deny("force"));
    assert_eq!(
        decided(bash(&p, "git status; git push --for origin")),
        deny("force")
    );
    // Known only at run time: a deny rule that may match asks.
    assert_eq!(decided(bash(&p, "git push $FLAGS")), ask("push"));
    assert_eq!(decided(bash(&p, "ls")), ALLOW);
}

#[test]
fn json_pointer_matchers_and_sources() {
    let p = policy(
        r#"
defaults: false
rules:
  - name: mail-customers
    tool: mcp_mail_*
    source: mcp:mail
    args:
      - { pointer: /to/0, glob: "*@customer.com" }
      - { pointer: /draft, present: false }
    decision: ask
    examples:
      match: [{ to: [a@customer.com] }]
      not_match: [{ to: [a@us.com] }, { to: [a@customer.com], draft: true }]
  - name: prod-deploy
    tool: deploy
    args: [{ pointer: /env, equals: prod }, { pointer: /version, regex: "^v\\d+" }]
    decision: deny
"#,
    )
    .unwrap();
    let mail = CallSource::Mcp { server: "mail" };
    let to = |a: &str| json!({ "to": [a], "body": "hi" });
    assert_eq!(
        decided(call(&p, "mcp_mail_send", mail, to("x@customer.com"))),
        ask("mail-customers")
    );
    assert_eq!(
        decided(call(&p, "mcp_mail_send", mail, to("x@us.com"))),
        ALLOW
    );
    let other = CallSource::Mcp { server: "other" };
    assert_eq!(
        decided(call(&p, "mcp_mail_send", other, to("x@customer.com"))),
        ALLOW
    );
    let config = CallSource::Config;
    let prod = json!({ "env": "prod", "version": "v12" });
    assert_eq!(
        decided(call(&p, "deploy", config, prod)),
        deny("prod-deploy")
    );
    let staging = json!({ "env": "staging", "version": "v12" });
    assert_eq!(decided(call(&p, "deploy", config, staging)), ALLOW);
}

#[test]
fn path_globs_on_file_tools_and_bash() {
    let p = policy(
        r#"
defaults: false
rules:
  - name: secrets
    paths: ["**/.env", "/etc/**", "secrets/**"]
    decision: deny
    examples:
      match: ["cat /etc/passwd", { path: secrets/key.pem }, "grep -r x ../workspace/.env"]
      not_match: ["cat README.md", { path: /mnt/user-data/workspace/src/main.rs }]
  - name: outside
    tool: read_file
    paths_outside: [/mnt/user-data]
    decision: ask
"#,
    )
    .unwrap();
    let sandbox = CallSource::Sandbox;
    let read = |path: &str| json!({ "description": "d", "path": path });
    assert_eq!(
        decided(call(
            &p,
            "read_file",
            sandbox,
            read("/mnt/user-data/workspace/.env")
        )),
        deny("secrets")
    );
    assert_eq!(
        decided(call(&p, "glob", sandbox, read("/etc/ssl"))),
        deny("secrets")
    );
    assert_eq!(
        decided(call(&p, "read_file", sandbox, read("/opt/x"))),
        ask("outside")
    );
    assert_eq!(
        decided(call(
            &p,
            "read_file",
            sandbox,
            read("/mnt/user-data/uploads/a")
        )),
        ALLOW
    );
    assert_eq!(decided(bash(&p, "cp secrets/a.pem /tmp")), deny("secrets"));
    assert_eq!(decided(bash(&p, "ls src")), ALLOW);
    // An MCP tool has no known path arguments.
    let mcp = CallSource::Mcp { server: "fs" };
    assert_eq!(
        decided(call(&p, "mcp_fs_read", mcp, read("/etc/passwd"))),
        ALLOW
    );
}

#[test]
fn failing_examples_and_bad_matchers_are_errors_naming_the_rule() {
    let error = policy(
        r#"
rules:
  - { name: fine, command: [ls], decision: allow }
  - name: git-any
    command: [git]
    decision: ask
    examples: { match: [git push], not_match: [git status] }
"#,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "approvals.rules[1] (git-any): example `git status` must not match but does"
    );
    assert_eq!(error.field().to_string(), "examples.not_match[0]");
    let cases = [
        (
            "{ name: r, command: [git, push], decision: ask, examples: { match: [git pull] } }",
            "approvals.rules[0] (r): example `git pull` must match but does not",
        ),
        (
            "{ name: r, command: [rm], paths_outside: [/w], decision: ask, examples: { match: [rm $X] } }",
            "approvals.rules[0] (r): example `rm $X` must match but only may (a part is known only at run time)",
        ),
        (
            "{ name: r, tool: write_file, decision: ask, examples: { match: [ls] } }",
            "approvals.rules[0] (r): example `ls` is a command line, but the rule is about `write_file`: give an object of arguments",
        ),
        (
            "{ name: r, tool: x, args: [{ pointer: to }], decision: ask }",
            "approvals.rules[0] (r): `to` is not a JSON pointer (`/path`, `/to/0`)",
        ),
        (
            "{ name: r, tool: x, args: [{ pointer: /a, regex: '(' }], decision: ask }",
            "approvals.rules[0] (r): bad regex",
        ),
        (
            "{ name: r, paths: ['a[b'], decision: ask }",
            "approvals.rules[0] (r): bad glob",
        ),
        (
            "{ name: r, tool: read_file, command: [cat], decision: ask }",
            "approvals.rules[0] (r): command, commands and flags match bash command lines, but this tool is not `bash`",
        ),
        (
            "{ name: r, source: web, decision: ask }",
            "approvals.rules[0] (r): unknown source `web`",
        ),
        (
            "{ name: r, flags: [r], decision: ask }",
            "approvals.rules[0] (r): `r` is not a flag",
        ),
    ];
    for (rule, message) in cases {
        let error = policy(&format!("rules: [{rule}]")).unwrap_err().to_string();
        assert!(error.starts_with(message), "{error}\n  expected: {message}");
    }
    let duplicate = policy("rules: [{ name: a, decision: ask }, { name: a, decision: deny }]");
    assert_eq!(
        duplicate.unwrap_err().to_string(),
        "approvals.rules[1] (a): the name is already used by approvals.rules[0]"
    );
}

#[test]
fn a_config_with_a_failing_example_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let yaml = "\
models: []
approvals:
  rules:
    - name: ok
      command: [ls]
      decision: allow
    - name: git-any
      command: [git]
      decision: ask
      examples:
        not_match: [git status]
";
    std::fs::write(&path, yaml).unwrap();
    let error = crate::config::load_app_config(&path)
        .unwrap_err()
        .to_string();
    assert!(
        error.ends_with(
            "approvals.rules[1].examples.not_match[0]: rule `git-any`: example `git status` must not match but does"
        ),
        "{error}"
    );
    assert!(error.contains("config.yaml:11:"), "{error}");
    // An unknown key is an error naming it.
    std::fs::write(
        &path,
        "approvals:\n  rules:\n    - { name: a, comand: [git], decision: ask }\n",
    )
    .unwrap();
    let error = crate::config::load_app_config(&path)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("approvals.rules[0]") && error.contains("unknown field `comand`"),
        "{error}"
    );
    std::fs::write(&path, "approvals:\n  deadline_seconds: 0\n").unwrap();
    let error = crate::config::load_app_config(&path)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("approvals.deadline_seconds: value out of range"),
        "{error}"
    );
    std::fs::write(&path, "approvals:\n  unparsed: maybe\n").unwrap();
    let error = crate::config::load_app_config(&path)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("approvals.unparsed") && error.contains("maybe"),
        "{error}"
    );
    // A role's rule is checked too.
    std::fs::write(
        &path,
        "approvals:\n  roles:\n    ops:\n      - { name: x, command: [kubectl, delete], decision: ask, examples: { match: [kubectl get] } }\n",
    )
    .unwrap();
    let error = crate::config::load_app_config(&path)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("approvals.roles.ops[0].examples.match[0]: rule `x`"),
        "{error}"
    );
    // The defaults apply when the section is absent.
    std::fs::write(&path, "models: []\n").unwrap();
    let loaded = crate::config::load_app_config(&path).unwrap();
    assert_eq!(loaded.value.approvals, ApprovalsConfig::default());
    assert!(loaded.value.approvals.defaults);
}

#[test]
fn layers_join_and_keep_their_origin() {
    let config: ApprovalsConfig = serde_yaml::from_str(
        "defaults: false\nroles:\n  ops: [{ name: kube, command: [kubectl, delete], decision: deny }]\n",
    )
    .unwrap();
    let global = ApprovalPolicy::from_config(&config, &env()).unwrap();
    let ops = ApprovalPolicy::role(&config, "ops", &env()).unwrap();
    assert!(ApprovalPolicy::role(&config, "dev", &env())
        .unwrap()
        .is_empty());
    let joined = global.with(&ops);
    let verdict = bash(&joined, "kubectl delete pod x");
    assert_eq!(verdict.decision, Decision::Deny);
    assert_eq!(verdict.origin.as_deref(), Some("approvals.roles.ops"));
    assert_eq!(decided(bash(&global, "kubectl delete pod x")), ALLOW);
    let agent = ApprovalPolicy::layer(
        &[RuleConfig {
            command: Some(vec!["curl".into()]),
            ..RuleConfig::new("no-curl", Decision::Ask)
        }],
        "agent researcher",
        &env(),
    )
    .unwrap();
    let verdict = bash(&joined.with(&agent), "curl x | jq .");
    assert_eq!(verdict.origin.as_deref(), Some("agent researcher"));
}

#[test]
fn the_defaults_compile_for_any_mounts() {
    for mounts in [
        vec![],
        vec!["/mnt/data/".to_owned()],
        vec!["/mnt/a[1]".to_owned(), "/srv/b*".to_owned()],
    ] {
        let env = PolicyEnv {
            writable_mounts: mounts.clone(),
            ..PolicyEnv::default()
        };
        let p = ApprovalPolicy::from_config(&ApprovalsConfig::default(), &env).unwrap();
        if let Some(mount) = mounts.first() {
            let line = format!("echo > '{}/x'", mount.trim_end_matches('/'));
            assert_eq!(decided(bash(&p, &line)), ask("write-host-mount"), "{line}");
        }
    }
}

#[test]
fn config_problems_map_to_field_paths() {
    let config: ApprovalsConfig = serde_yaml::from_str(
        "rules: [{ name: a, tool: x, args: [{ pointer: /a }], decision: ask }]",
    )
    .unwrap();
    let problems = config_problems(&config, &PolicyEnv::default());
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].0.to_string(), "approvals.rules[0].args[0]");
    assert_eq!(
        problems[0].1,
        "rule `a`: a matcher needs equals, glob, regex or present"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn analysis_evaluation_and_redaction_never_panic(line in ".{0,200}", key in ".{0,20}") {
        let p = defaults();
        let _ = shell::analyse(&line);
        let _ = bash(&p, &line);
        let args = json!({ key.clone(): line.clone(), "headers": [{ "Bearer": format!("bearer {line}") }] });
        let _ = redact(&args, &[line.as_str(), key.as_str()]);
    }

    #[test]
    fn shell_like_text_never_panics(
        line in r#"[a-z/.~*?\[\]{},=$()`'"\\|&;<> \n!#0-9-]{0,120}"#
    ) {
        let p = defaults();
        let _ = shell::analyse(&line);
        let _ = bash(&p, &line);
        let args = json!({ "path": line, "command": line });
        let _ = p.evaluate(&CallFacts { tool: "write_file", source: CallSource::Sandbox, args: &args });
    }
}

#[test]
fn the_second_layer_refuses_denials_and_asks_without_the_rules_approval() {
    let p = policy(
        r#"
defaults: false
rules:
  - name: publish
    tool: pub_publish
    source: "mcp:pub"
    decision: ask
    examples: { match: [{ text: x }] }
  - name: no-delete
    tool: pub_delete
    decision: deny
    justification: deleting is not allowed
"#,
    )
    .unwrap();
    let source = CallSource::Mcp { server: "pub" };
    let facts = |tool| CallFacts {
        tool,
        source,
        args: &Value::Null,
    };
    let not_approved = Some(Refusal::NotApproved {
        rule: "publish".to_owned(),
    });
    assert_eq!(p.recheck(&facts("pub_publish"), None), not_approved);
    assert_eq!(
        p.recheck(&facts("pub_publish"), Some("other")),
        not_approved
    );
    assert_eq!(p.recheck(&facts("pub_publish"), Some("publish")), None);
    assert_eq!(
        p.recheck(&facts("pub_delete"), Some("no-delete")),
        Some(Refusal::Denied {
            rule: "no-delete".to_owned(),
            justification: Some("deleting is not allowed".to_owned()),
        })
    );
    assert_eq!(p.recheck(&facts("pub_echo"), None), None);
    assert_eq!(
        ApprovalPolicy::default().recheck(&facts("pub_publish"), None),
        None
    );
}
