//! Links that sandboxed code plants or swaps cannot lead sandbox-host's file tools out of
//! the thread's directories: with links to a host directory and a host file planted from
//! inside the sandbox, and with links swapped in a tight loop by a process left running in
//! the sandbox while the tools run many times, no host file's content is ever returned and
//! no host file is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crate::sandbox_support::*;
use serde_json::{json, Value};

const SECRET: &str = "host-secret-value-5b7e";

/// A host directory with a secret file and a file named like one inside the thread.
fn host_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("antler-hostdir")
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::write(dir.path().join("file.txt"), SECRET).unwrap();
    std::fs::write(dir.path().join("secret.txt"), SECRET).unwrap();
    std::fs::write(dir.path().join("host-only-name.txt"), SECRET).unwrap();
    let secret = dir.path().join("secret.txt");
    (dir, secret)
}

fn host_untouched(dir: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["file.txt", "host-only-name.txt", "secret.txt"]);
    for n in names {
        assert_eq!(std::fs::read_to_string(dir.join(n)).unwrap(), SECRET);
    }
}

/// Every file tool on `paths`, as (tool, args).
fn calls(file: &str, dir: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"description": "d", "path": file})),
        (
            "read_file",
            json!({"description": "d", "path": format!("{dir}/file.txt")}),
        ),
        (
            "write_file",
            json!({"description": "d", "path": format!("{dir}/written.txt"), "content": "sandbox-chose-this"}),
        ),
        (
            "write_file",
            json!({"description": "d", "path": file, "content": "sandbox-chose-this"}),
        ),
        (
            "write_file",
            json!({"description": "d", "path": file, "content": "more", "append": true}),
        ),
        (
            "str_replace",
            json!({"description": "d", "path": file, "old_str": "host", "new_str": "pwned"}),
        ),
        (
            "str_replace",
            json!({"description": "d", "path": format!("{dir}/file.txt"), "old_str": "host", "new_str": "pwned"}),
        ),
        (
            "write_file",
            json!({"description": "d", "path": format!("{dir}/sub/deeper/x.txt"), "content": "x"}),
        ),
        (
            "ls",
            json!({"description": "d", "path": "/mnt/user-data/workspace"}),
        ),
        ("ls", json!({"description": "d", "path": dir})),
        (
            "glob",
            json!({"description": "d", "pattern": "**/*", "path": "/mnt/user-data/workspace"}),
        ),
        (
            "glob",
            json!({"description": "d", "pattern": "*", "path": dir}),
        ),
        (
            "grep",
            json!({"description": "d", "pattern": "secret", "path": "/mnt/user-data/workspace"}),
        ),
        (
            "grep",
            json!({"description": "d", "pattern": "secret", "path": dir}),
        ),
        (
            "grep",
            json!({"description": "d", "pattern": "secret", "path": file}),
        ),
    ]
}

fn assert_no_host_content(tool: &str, args: &Value, out: &str) {
    assert!(
        !out.contains(SECRET) && !out.contains("host-only-name"),
        "{tool} {args} returned host content: {out}"
    );
}

#[tokio::test]
async fn links_planted_inside_the_sandbox_lead_nowhere() {
    let (dir, secret) = host_dir();
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    let planted = c
        .bash(
            id,
            &format!(
                "ln -s {d} d && ln -s {s} f && ln -s ../../../../../../../../../../..{s} rel && ln -s ../../../../../../../../../../..{d} reldir && mkdir -p /mnt/user-data/outputs && ln -s {d} /mnt/user-data/outputs/out && echo planted",
                d = dir.path().display(),
                s = secret.display()
            ),
        )
        .await;
    assert_eq!(planted, "planted\n");
    for (file, d) in [("f", "d"), ("rel", "reldir")] {
        let file = format!("/mnt/user-data/workspace/{file}");
        let d = format!("/mnt/user-data/workspace/{d}");
        for (tool, args) in calls(&file, &d) {
            let out = c.text(id, tool, args.clone()).await;
            assert_no_host_content(tool, &args, &out);
        }
        let r = c
            .text(id, "read_file", json!({"description": "d", "path": file}))
            .await;
        assert_eq!(r, format!("Error: Permission denied reading file: {file}"));
    }
    for (tool, args) in calls(
        "/mnt/user-data/outputs/out/secret.txt",
        "/mnt/user-data/outputs/out",
    ) {
        let out = c.text(id, tool, args.clone()).await;
        assert_no_host_content(tool, &args, &out);
    }
    host_untouched(dir.path());
    // The links themselves are still listed as what they are, inside the thread.
    let ls = c
        .text(
            id,
            "ls",
            json!({"description": "d", "path": "/mnt/user-data/workspace"}),
        )
        .await;
    assert!(!ls.contains("/mnt/user-data/workspace/d/"), "{ls}");
}

#[tokio::test]
async fn links_swapped_in_a_tight_loop_lead_nowhere() {
    let (dir, secret) = host_dir();
    let h = SandboxHost::start(BWRAP_CONFIG);
    let c = h.connect().await;
    let a = c.acquire("u", "t").await.expect("acquire");
    let id = a.sandbox_id.as_str();
    // `swap` and `alt` trade places atomically (renameat2 RENAME_EXCHANGE) as fast as
    // perl can ask: `swap` is a directory inside the thread one moment, a link to the host
    // directory the next; `fswap` likewise between a file and a link to the host file.
    let looping = c
        .bash(
            id,
            &format!(
                "mkdir -p swap && echo inside > swap/file.txt && ln -s {d} alt && echo inside > fswap && ln -s {s} falt && (perl -e 'my ($a, $b, $c, $d) = qw(swap alt fswap falt); while (1) {{ syscall(316, -100, $a, -100, $b, 2); syscall(316, -100, $c, -100, $d, 2); }}' > /dev/null 2>&1 &) ; echo looping",
                d = dir.path().display(),
                s = secret.display()
            ),
        )
        .await;
    assert!(looping.starts_with("looping\n"), "{looping}");
    let file = "/mnt/user-data/workspace/fswap";
    let d = "/mnt/user-data/workspace/swap";
    let mut outcomes = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let mut tasks = Vec::new();
        for (tool, args) in calls(file, d) {
            let c = c.clone();
            let id = id.to_string();
            tasks.push(tokio::spawn(async move {
                let out = c.text(&id, tool, args.clone()).await;
                (tool, args, out)
            }));
        }
        for t in tasks {
            let (tool, args, out) = t.await.expect("join");
            assert_no_host_content(tool, &args, &out);
            outcomes.insert(format!("{tool}:{}", out.lines().next().unwrap_or_default()));
        }
        host_untouched(dir.path());
    }
    // The loop ran: the tools saw the files it made as well as its links.
    assert!(
        outcomes.iter().any(|o| o.starts_with("read_file:inside")),
        "{outcomes:?}"
    );
    host_untouched(dir.path());
}
