//! The shipped default policy (applied when `approvals.defaults` is true): ask before
//! recursive deletes outside the workspace, `git push`, package publishing and writes to
//! writable host mounts; deny recursive deletes of `/`, `/mnt` and `/mnt/user-data` themselves.
//! Every rule carries examples, checked like any rule's; docs/approvals.md lists them.

use serde_json::{json, Value};

use super::{Decision, Examples, PolicyEnv, RuleConfig};

/// The origin verdicts and errors name for the shipped rules.
pub const DEFAULTS_ORIGIN: &str = "defaults";

/// The flags that make `rm` recursive.
const RECURSIVE: &[&str] = &["-r", "-R", "--recursive"];

/// Package publishing commands: program and argument prefix.
const PUBLISH: &[&[&str]] = &[
    &["npm", "publish"],
    &["pnpm", "publish"],
    &["yarn", "publish"],
    &["yarn", "npm", "publish"],
    &["cargo", "publish"],
    &["twine", "upload"],
    &["python", "-m", "twine", "upload"],
    &["python3", "-m", "twine", "upload"],
    &["poetry", "publish"],
    &["gem", "push"],
    &["uv", "publish"],
    &["hatch", "publish"],
    &["flit", "publish"],
];

/// The shipped rules for `env`, in order.
pub fn default_rules(env: &PolicyEnv) -> Vec<RuleConfig> {
    let workspace = env.workspace.as_str();
    let mut rules = vec![
        RuleConfig {
            command: Some(words(&["rm"])),
            flags: Some(words(RECURSIVE)),
            paths_outside: Some(vec![workspace.to_owned()]),
            justification: Some("deletes a directory tree outside the workspace".to_owned()),
            examples: examples(
                &[
                    "rm -rf ../x",
                    "rm -r /tmp/build",
                    "sudo rm --recursive -f /var/cache/app",
                    "cd /tmp && rm -rf build",
                    "echo $(rm -rf /tmp/x)",
                ],
                &[
                    "rm -rf build",
                    "rm /tmp/x.log",
                    "rm -rf ./dist/*",
                    "echo rm -rf /tmp/x",
                ],
            ),
            ..RuleConfig::new("recursive-delete-outside-workspace", Decision::Ask)
        },
        RuleConfig {
            command: Some(words(&["rm"])),
            flags: Some(words(RECURSIVE)),
            paths: Some(words(&[
                "/",
                "/\\*",
                "/mnt",
                "/mnt/\\*",
                "/mnt/user-data",
                "/mnt/user-data/\\*",
            ])),
            justification: Some(
                "deletes the whole file system or all of the thread's data".to_owned(),
            ),
            examples: examples(
                &[
                    "rm -rf /",
                    "rm -rf /*",
                    "echo x && rm -fr /mnt/user-data",
                    "rm -r ../",
                ],
                &[
                    "rm -rf /tmp/x",
                    "rm -rf build",
                    "rm -rf /mnt/user-data/outputs/old",
                ],
            ),
            ..RuleConfig::new("delete-root", Decision::Deny)
        },
        RuleConfig {
            command: Some(words(&["find"])),
            flags: Some(words(&["-delete"])),
            paths_outside: Some(vec![workspace.to_owned()]),
            justification: Some("deletes files outside the workspace".to_owned()),
            examples: examples(
                &["find /tmp -name '*.log' -delete", "find .. -delete"],
                &["find . -name '*.pyc' -delete", "find /tmp -name '*.log'"],
            ),
            ..RuleConfig::new("find-delete-outside-workspace", Decision::Ask)
        },
        RuleConfig {
            command: Some(words(&["git", "push"])),
            justification: Some("publishes commits to a remote repository".to_owned()),
            examples: examples(
                &[
                    "git push",
                    "git push --force origin main",
                    "git -C repo push",
                    "sudo git push",
                ],
                &[
                    "git status",
                    "git pull",
                    "echo git push",
                    "git commit -m push",
                ],
            ),
            ..RuleConfig::new("git-push", Decision::Ask)
        },
        RuleConfig {
            commands: Some(PUBLISH.iter().map(|c| words(c)).collect()),
            justification: Some("publishes a package to a registry".to_owned()),
            examples: examples(
                &[
                    "npm publish",
                    "cargo publish --allow-dirty",
                    "python -m twine upload dist/*",
                    "poetry publish --build",
                    "gem push my.gem",
                ],
                &[
                    "npm install",
                    "cargo build",
                    "twine check dist/*",
                    "poetry install",
                ],
            ),
            ..RuleConfig::new("package-publish", Decision::Ask)
        },
    ];
    if let Some(mount) = env.writable_mounts.first() {
        let mount = mount.trim_end_matches('/');
        let mut globs = Vec::new();
        for m in &env.writable_mounts {
            let escaped = globset::escape(m.trim_end_matches('/'));
            globs.push(format!("{escaped}/**"));
            globs.push(escaped);
        }
        let matching: Vec<Value> = vec![
            json!(format!("echo x > {mount}/out.txt")),
            json!(format!("cat a | tee -a {mount}/log.txt")),
            json!(format!("cp report.pdf {mount}/")),
            json!({ "path": format!("{mount}/notes.md") }),
        ];
        let not_match: Vec<Value> = vec![
            json!(format!("cat {mount}/in.txt")),
            json!("echo x > out.txt"),
            json!({ "path": format!("{workspace}/notes.md") }),
        ];
        rules.push(RuleConfig {
            writes: Some(globs),
            justification: Some("writes to a directory mounted from the host".to_owned()),
            examples: Some(Examples {
                matching,
                not_match,
            }),
            ..RuleConfig::new("write-host-mount", Decision::Ask)
        });
    }
    rules
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn examples(matching: &[&str], not_match: &[&str]) -> Option<Examples> {
    Some(Examples {
        matching: matching.iter().map(|s| json!(s)).collect(),
        not_match: not_match.iter().map(|s| json!(s)).collect(),
    })
}
