//! Per-user skills through a real sandbox-host: in the sandbox of user A, user B's custom
//! skills (`/mnt/skills/users/B/...`) cannot be listed, read, globbed, grepped or `cat`
//! (bwrap: they are not mounted; the file tools refuse them in the same words whether
//! or not the file exists, and their walks skip them), while A reads its own custom
//! skills and the public ones at the paths the lead shows the model; the local provider
//! refuses them too; a pre-warmed sandbox bound to A gets A's skills only; a skills root
//! whose `users` cannot be a directory still shows the shared skills and nothing more; and
//! `ls` of a disabled skill gets DeerFlow's exact error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    os::unix::fs::{symlink, PermissionsExt},
    path::{Path, PathBuf},
    time::Duration,
};

use crate::sandbox_support::*;
use antler_protocol::messages::AcquireSource;
use serde_json::json;

const ALICE_SKILL: &str = "/mnt/skills/users/alice/custom/alice-notes/SKILL.md";
const BOB_SKILL: &str = "/mnt/skills/users/bob/custom/bob-notes/SKILL.md";
const PUBLIC_SKILL: &str = "/mnt/skills/public/pdf/SKILL.md";
const DISABLED_ERROR: &str = "Error: Skill 'off-skill' is disabled. Access to its files is blocked. Enable the skill in settings before using it.";

fn skill(dir: &Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir).expect("skill dir");
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: d\n---\n{body}\n"),
    )
    .expect("SKILL.md");
}

/// A skills root with public skills (one disabled), and alice's and bob's custom skills,
/// and an extensions file that disables `off-skill`.
struct Skills {
    dir: tempfile::TempDir,
}

impl Skills {
    fn new() -> Skills {
        let dir = tempfile::Builder::new()
            .prefix("antler-skills")
            .tempdir_in("/tmp")
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let root = dir.path().join("skills");
        skill(&root.join("public/pdf"), "pdf", "public pdf skill");
        skill(&root.join("public/off-skill"), "off-skill", "disabled");
        skill(
            &root.join("users/alice/custom/alice-notes"),
            "alice-notes",
            "alice-secret-text",
        );
        skill(
            &root.join("users/bob/custom/bob-notes"),
            "bob-notes",
            "bob-secret-text",
        );
        std::fs::write(
            dir.path().join("extensions_config.json"),
            r#"{"mcpServers": {}, "skills": {"off-skill": {"enabled": false}}}"#,
        )
        .expect("extensions");
        Skills { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("skills")
    }

    fn host(&self, config: &str) -> SandboxHost {
        let config = format!("{config}skills:\n  path: {}\n", self.root().display());
        let ext = self.dir.path().join("extensions_config.json");
        SandboxHost::start_with(
            &config,
            &[(
                "ANTLER_EXTENSIONS_CONFIG_PATH",
                ext.to_str().expect("utf-8"),
            )],
        )
    }
}

async fn read(c: &Client, id: &str, path: &str) -> String {
    c.text(id, "read_file", json!({"description": "d", "path": path}))
        .await
}

async fn ls(c: &Client, id: &str, path: &str) -> String {
    c.text(id, "ls", json!({"description": "d", "path": path}))
        .await
}

async fn glob(c: &Client, id: &str, path: &str, pattern: &str) -> String {
    c.text(
        id,
        "glob",
        json!({"description": "d", "path": path, "pattern": pattern}),
    )
    .await
}

async fn grep(c: &Client, id: &str, path: &str, pattern: &str) -> String {
    c.text(
        id,
        "grep",
        json!({"description": "d", "path": path, "pattern": pattern}),
    )
    .await
}

/// The file tools (the same under both providers): own and public skills read, the other
/// user's refused with one text whether or not the file exists, and walks that skip it.
async fn file_tools_see_only_alices_skills(c: &Client, id: &str) {
    assert!(read(c, id, ALICE_SKILL).await.contains("alice-secret-text"));
    assert!(read(c, id, PUBLIC_SKILL).await.contains("public pdf skill"));
    for path in [
        BOB_SKILL,
        "/mnt/skills/users/bob/custom/no-such-skill/SKILL.md",
        "/mnt/skills/users/bob",
    ] {
        assert_eq!(
            read(c, id, path).await,
            format!("Error: Permission denied reading file: {path}"),
            "read_file {path}"
        );
    }
    for path in ["/mnt/skills/users/bob", "/mnt/skills/users/nobody-here"] {
        assert_eq!(
            ls(c, id, path).await,
            format!("Error: Permission denied: {path}")
        );
        assert_eq!(
            glob(c, id, path, "**/*").await,
            format!("Error: Permission denied: {path}")
        );
        assert_eq!(
            grep(c, id, path, "secret").await,
            format!("Error: Permission denied: {path}")
        );
    }
    assert_eq!(
        ls(c, id, "/mnt/skills/users").await,
        "/mnt/skills/users/alice/\n/mnt/skills/users/alice/custom/"
    );
    let top = ls(c, id, "/mnt/skills").await;
    assert!(top.contains("/mnt/skills/users/alice/"), "{top}");
    assert!(top.contains("/mnt/skills/public/pdf/"), "{top}");
    assert!(!top.contains("bob"), "{top}");
    let found = glob(c, id, "/mnt/skills", "**/SKILL.md").await;
    assert!(found.contains(ALICE_SKILL), "{found}");
    assert!(found.contains(PUBLIC_SKILL), "{found}");
    assert!(!found.contains("bob"), "{found}");
    let users = glob(c, id, "/mnt/skills/users", "**/*").await;
    assert!(!users.contains("bob"), "{users}");
    let matches = grep(c, id, "/mnt/skills", "secret-text").await;
    assert_eq!(
        matches,
        format!("Found 1 matches under /mnt/skills\n{ALICE_SKILL}:5: alice-secret-text")
    );
    // Writes to skills stay refused, one's own included.
    let w = c
        .text(
            id,
            "write_file",
            json!({"description": "d", "path": BOB_SKILL, "content": "x"}),
        )
        .await;
    assert_eq!(
        w,
        format!("Error: Permission denied writing to file: {BOB_SKILL}")
    );
}

#[tokio::test]
async fn a_bwrap_sandbox_sees_its_own_users_skills_and_no_other_users() {
    let skills = Skills::new();
    let h = skills.host(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    file_tools_see_only_alices_skills(&c, id).await;
    // Inside the sandbox bob's directory is not there at all.
    assert_eq!(c.bash(id, "ls /mnt/skills/users").await, "alice\n");
    assert_eq!(
        c.bash(id, &format!("cat {BOB_SKILL}")).await,
        format!("\nStd Error:\ncat: {BOB_SKILL}: No such file or directory\n\nExit Code: 1")
    );
    assert_eq!(
        c.bash(id, "grep -rl secret-text /mnt/skills").await,
        format!("{ALICE_SKILL}\n")
    );
    assert!(c
        .bash(id, &format!("cat {ALICE_SKILL}"))
        .await
        .contains("alice-secret-text"));
    assert!(c
        .bash(id, &format!("cat {PUBLIC_SKILL}"))
        .await
        .contains("public pdf skill"));
    // Nothing can be written under the skills, the empty users/ included.
    let w = c
        .bash(id, "touch /mnt/skills/users/x /mnt/skills/users/alice/x")
        .await;
    assert!(w.contains("Read-only file system"), "{w}");
    // A skill alice makes while the sandbox runs appears at once.
    skill(
        &skills.root().join("users/alice/custom/later"),
        "later",
        "made later",
    );
    assert!(c
        .bash(id, "cat /mnt/skills/users/alice/custom/later/SKILL.md")
        .await
        .contains("made later"));
    // Bob's sandbox is the mirror image.
    let b = c.acquire("bob", "t1").await.expect("acquire bob");
    assert_eq!(c.bash(&b.sandbox_id, "ls /mnt/skills/users").await, "bob\n");
    assert!(read(&c, &b.sandbox_id, BOB_SKILL)
        .await
        .contains("bob-secret-text"));
    assert_eq!(
        read(&c, &b.sandbox_id, ALICE_SKILL).await,
        format!("Error: Permission denied reading file: {ALICE_SKILL}")
    );
}

#[tokio::test]
async fn a_user_without_skills_gets_an_empty_users_directory_of_its_own() {
    let skills = Skills::new();
    let h = skills.host(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("carol", "t1").await.expect("acquire");
    assert_eq!(
        c.bash(&a.sandbox_id, "ls /mnt/skills/users").await,
        "carol\n"
    );
    assert_eq!(
        c.bash(&a.sandbox_id, "ls -A /mnt/skills/users/carol").await,
        "(no output)"
    );
    // Made for the mount, so carol's first skill appears in the running sandbox.
    assert!(skills.root().join("users/carol").is_dir());
    skill(
        &skills.root().join("users/carol/custom/first"),
        "first",
        "carol's first",
    );
    assert!(c
        .bash(
            &a.sandbox_id,
            "cat /mnt/skills/users/carol/custom/first/SKILL.md"
        )
        .await
        .contains("carol's first"));
}

#[tokio::test]
async fn a_link_in_the_shared_skills_does_not_lead_into_another_users_skills() {
    let skills = Skills::new();
    symlink(
        "../users/bob/custom/bob-notes",
        skills.root().join("public/linked"),
    )
    .expect("symlink");
    let h = skills.host(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let path = "/mnt/skills/public/linked/SKILL.md";
    assert_eq!(
        read(&c, &a.sandbox_id, path).await,
        format!("Error: Permission denied reading file: {path}")
    );
    assert_eq!(
        ls(&c, &a.sandbox_id, "/mnt/skills/public/linked").await,
        "Error: Permission denied: /mnt/skills/public/linked"
    );
    let out = c.bash(&a.sandbox_id, &format!("cat {path}")).await;
    assert!(out.contains("No such file or directory"), "{out}");
}

#[tokio::test]
async fn the_local_provider_refuses_another_users_skills() {
    let skills = Skills::new();
    let h = skills.host(LOCAL_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    file_tools_see_only_alices_skills(&c, id).await;
    assert_eq!(
        c.bash(id, &format!("cat {BOB_SKILL}")).await,
        format!(
            "Error: Unsafe absolute paths in command: {BOB_SKILL}. Use paths under /mnt/user-data"
        )
    );
    assert_eq!(
        c.bash(id, "cat /mnt/skills/users/*/custom/*/SKILL.md").await,
        "Error: Unsafe absolute paths in command: /mnt/skills/users/*/custom/*/SKILL.md. Use paths under /mnt/user-data"
    );
    assert!(c
        .bash(id, &format!("cat {ALICE_SKILL}"))
        .await
        .contains("alice-secret-text"));
}

#[tokio::test]
async fn a_prewarmed_sandbox_bound_to_a_user_gets_that_users_skills_only() {
    let skills = Skills::new();
    let h = skills.host(&format!("{BWRAP_CONFIG}  prewarm: 1\n"));
    let c = h.connect().await;
    let mut ready = false;
    for _ in 0..100 {
        let st = c.status().await;
        if st.sandboxes.iter().any(|s| s.state == "prewarmed") {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "no pre-warmed sandbox");
    // Warmed for no user: it made no user's skills directory.
    let mut users: Vec<String> = std::fs::read_dir(skills.root().join("users"))
        .expect("users")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    users.sort();
    assert_eq!(users, ["alice", "bob"]);
    let a = c.acquire("alice", "warm").await.expect("acquire");
    assert_eq!(a.source, AcquireSource::Prewarmed);
    assert_eq!(
        c.bash(&a.sandbox_id, "ls /mnt/skills/users").await,
        "alice\n"
    );
    assert!(c
        .bash(&a.sandbox_id, &format!("cat {ALICE_SKILL}"))
        .await
        .contains("alice-secret-text"));
    assert_eq!(
        c.bash(&a.sandbox_id, "echo kept > w.txt && cat w.txt")
            .await,
        "kept\n"
    );
}

#[tokio::test]
async fn ls_of_a_disabled_skill_gets_deerflows_error() {
    let skills = Skills::new();
    let h = skills.host(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    for path in [
        "/mnt/skills/public/off-skill",
        "/mnt/skills/public/off-skill/",
        "/mnt/skills/public/off-skill/references",
    ] {
        assert_eq!(ls(&c, id, path).await, DISABLED_ERROR, "ls {path}");
    }
    assert_eq!(
        ls(&c, id, "/mnt/skills/public/pdf").await,
        "/mnt/skills/public/pdf/SKILL.md"
    );
    // The file is read at every call: enabling the skill applies at once.
    std::fs::write(
        skills.dir.path().join("extensions_config.json"),
        r#"{"skills": {"off-skill": {"enabled": true}}}"#,
    )
    .expect("enable");
    assert_eq!(
        ls(&c, id, "/mnt/skills/public/off-skill").await,
        "/mnt/skills/public/off-skill/SKILL.md"
    );
    // A user's own custom skill is gated by its name too.
    std::fs::write(
        skills.dir.path().join("extensions_config.json"),
        r#"{"skills": {"alice-notes": {"enabled": false}}}"#,
    )
    .expect("disable");
    assert_eq!(
        ls(&c, id, "/mnt/skills/users/alice/custom/alice-notes").await,
        "Error: Skill 'alice-notes' is disabled. Access to its files is blocked. Enable the skill in settings before using it."
    );
}

#[tokio::test]
async fn without_a_users_directory_the_shared_skills_are_still_mounted_and_nothing_else() {
    let skills = Skills::new();
    std::fs::remove_dir_all(skills.root().join("users")).expect("no users dir");
    // Nothing can make `users/` a directory: it is a file.
    std::fs::write(skills.root().join("users"), "not a directory").expect("users file");
    let h = skills.host(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("alice", "t1").await.expect("acquire");
    assert_eq!(c.bash(&a.sandbox_id, "ls /mnt/skills").await, "public\n");
    assert!(c
        .bash(&a.sandbox_id, &format!("cat {PUBLIC_SKILL}"))
        .await
        .contains("public pdf skill"));
    let w = c.bash(&a.sandbox_id, "touch /mnt/skills/x").await;
    assert!(w.contains("Read-only file system"), "{w}");
}
