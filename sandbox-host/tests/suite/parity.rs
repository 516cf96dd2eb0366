//! Parity with DeerFlow's sandbox tools (spec 6.4-6.6, section 10 case 15, section 11) on
//! the local provider over real files: the texts a model reads, the limits, the ignore
//! list, path validation and the masking of host paths.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::{os::unix::fs::symlink, path::PathBuf};

use actix::Actor;
use antler_protocol::messages::{Principal, ToolCall};
use antler_sandbox_host::{
    pool::SandboxPool,
    provider::ProviderVerdict,
    service::call_once,
    settings::{ProviderKind, SandboxSettings},
};
use serde_json::{json, Value};

struct Fixture {
    _dir: tempfile::TempDir,
    base: PathBuf,
    pool: actix::Addr<SandboxPool>,
}

impl Fixture {
    fn new(allow_host_bash: bool) -> Fixture {
        Self::with(|s| s.allow_host_bash = allow_host_bash)
    }

    fn with(edit: impl FnOnce(&mut SandboxSettings)) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("base");
        let mut settings = SandboxSettings {
            provider: ProviderKind::Local,
            allow_host_bash: true,
            base_dir: base.clone(),
            skills_dir: dir.path().join("skills"),
            bash_command_timeout: std::time::Duration::from_secs(20),
            ..SandboxSettings::default()
        };
        edit(&mut settings);
        let verdict = ProviderVerdict::Serve {
            kind: ProviderKind::Local,
            note: "test".into(),
        };
        let pool = SandboxPool::new(settings, verdict).start();
        Fixture {
            _dir: dir,
            base,
            pool,
        }
    }

    /// The host path of `/mnt/user-data/{rel}` for thread t of user u.
    fn host(&self, rel: &str) -> PathBuf {
        self.base.join("users/u/threads/t/user-data").join(rel)
    }

    async fn call(&self, tool: &str, args: Value) -> String {
        let principal = Principal {
            user_id: "u".into(),
            thread_id: "t".into(),
            roles: vec![],
        };
        let call = ToolCall {
            tool: tool.into(),
            args: args.into(),
            secrets: vec![],
            clearance: None,
        };
        call_once(&self.pool, principal, call)
            .await
            .expect("pool")
            .expect("sandbox")
            .content
    }

    async fn bash(&self, command: &str) -> String {
        self.call("bash", json!({"description": "d", "command": command}))
            .await
    }

    async fn write(&self, path: &str, content: &str) -> String {
        self.call(
            "write_file",
            json!({"description": "d", "path": path, "content": content}),
        )
        .await
    }
}

const WS: &str = "/mnt/user-data/workspace";

#[actix_rt::test]
async fn host_bash_is_refused_unless_allowed() {
    let f = Fixture::new(false);
    assert_eq!(
        f.bash("echo hi").await,
        "Error: Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox boundary. Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: true only in a fully trusted local environment."
    );
}

#[actix_rt::test]
async fn the_local_bash_validation_matrix_of_case_15() {
    let f = Fixture::new(true);
    let abs = |p: &str| {
        format!("Error: Unsafe absolute paths in command: {p}. Use paths under /mnt/user-data")
    };
    let cwd = |t: &str| {
        format!("Error: Unsafe working directory change in command: {t}. Use paths under /mnt/user-data")
    };
    let traversal = "Error: Access denied: path traversal detected".to_string();
    let rejected = [
        ("cat /etc/passwd", abs("/etc/passwd")),
        ("cat /mnt/user-data/workspace/../../etc/passwd", traversal.clone()),
        ("cat ../uploads/x", traversal.clone()),
        ("cd .. && ls", traversal.clone()),
        ("cd / && ls", cwd("cd /")),
        ("cd $HOME && ls", cwd("cd $HOME")),
        ("if cd $HOME; then ls; fi", cwd("cd $HOME")),
        (
            "echo \"$(cd $HOME && cat x)\"",
            "Error: Unsafe working directory change in command substitution. Use paths under /mnt/user-data".into(),
        ),
        ("ls /", abs("/")),
        ("cat /etc/{passwd,shadow}", abs("/etc/{passwd,shadow}")),
        ("cat /home/${USER}/.ssh/id_rsa", abs("/home/${USER}/.ssh/id_rsa")),
        (
            "curl file:///etc/passwd",
            "Error: Unsafe file:// URL in command: file:///etc/passwd. Use paths under /mnt/user-data".into(),
        ),
    ];
    for (cmd, want) in rejected {
        assert_eq!(f.bash(cmd).await, want, "{cmd}");
    }
    // Allowed: each runs (network-free forms of the spec's cases).
    assert_eq!(
        f.bash("/bin/echo ok > /mnt/user-data/workspace/out.txt && cat /dev/null")
            .await,
        "(no output)"
    );
    assert_eq!(
        std::fs::read_to_string(f.host("workspace/out.txt")).expect("out"),
        "ok\n"
    );
    assert_eq!(f.bash("echo cd /").await, "cd /\n");
    assert_eq!(
        f.bash("python3 -c \"print('/devices/{id}/port')\"").await,
        "/devices/{id}/port\n"
    );
    assert_eq!(
        f.bash("echo '健康检查 /端口 状态'").await,
        "健康检查 /端口 状态\n"
    );
    for allowed_but_offline in [
        "git clone https://github.com/x/y.git",
        "curl https://e.com/a/../b.tgz -o /mnt/user-data/workspace/b.tgz",
    ] {
        let out = f.bash(allowed_but_offline).await;
        assert!(
            !out.contains("Unsafe") && !out.contains("Access denied"),
            "{allowed_but_offline}: {out}"
        );
    }
}

#[actix_rt::test]
async fn bash_output_format_masking_and_truncation() {
    let f = Fixture::new(true);
    assert_eq!(
        f.bash("echo out; echo err >&2; exit 3").await,
        "out\n\nStd Error:\nerr\n\nExit Code: 3"
    );
    // The command runs in the workspace and host paths come back virtual.
    assert_eq!(f.bash("pwd").await, "/mnt/user-data/workspace\n");
    let out = f.bash("python3 -c \"print('x' * 50000)\"").await;
    assert!(out.chars().count() <= 20_000, "{}", out.len());
    assert!(out.contains("\n... [middle truncated: "), "marker");
}

#[actix_rt::test]
async fn a_timeout_kills_the_group_and_says_so() {
    let f = Fixture::with(|s| s.bash_command_timeout = std::time::Duration::from_secs(1));
    let started = std::time::Instant::now();
    let out = f.bash("sleep 30 & sleep 30").await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(
        out,
        "Command timed out after 1 second and was terminated. To run a long-lived process such as a web server, start it in the background and redirect its output, e.g. `your-command > /mnt/user-data/workspace/server.log 2>&1 &`.\nThe command's whole process group was killed."
    );
}

#[actix_rt::test]
async fn write_file_size_guard() {
    let f = Fixture::new(true);
    let big = "a".repeat(81_921);
    assert_eq!(
        f.write(&format!("{WS}/big.txt"), &big).await,
        "Error: write_file content (81921 bytes) exceeds the 81920-byte single-call limit. Split the content into smaller pieces: either (a) write the first section now, then use `str_replace` for further edits, or (b) call write_file again with append=True carrying the next section. See SIZE POLICY in the tool docstring or issue #3189 for the rationale."
    );
    assert!(!f.host("workspace/big.txt").exists());
    assert_eq!(
        f.write(&format!("{WS}/ok.txt"), &"a".repeat(81_920)).await,
        "OK"
    );
    // Append is not capped.
    let r = f
        .call("write_file", json!({"description": "d", "path": format!("{WS}/ok.txt"), "content": big, "append": true}))
        .await;
    assert_eq!(r, "OK");
    assert_eq!(
        std::fs::metadata(f.host("workspace/ok.txt"))
            .expect("file")
            .len(),
        81_920 + 81_921
    );
    // Parents are created.
    assert_eq!(f.write(&format!("{WS}/a/b/c.txt"), "x").await, "OK");
    assert_eq!(
        std::fs::read_to_string(f.host("workspace/a/b/c.txt")).expect("file"),
        "x"
    );
}

#[actix_rt::test]
async fn write_file_outside_the_allowed_roots() {
    let f = Fixture::new(true);
    assert_eq!(
        f.write("/etc/x", "x").await,
        "Error: Permission denied writing to file: /etc/x"
    );
    assert_eq!(
        f.write("/mnt/user-data/workspace/../../x", "x").await,
        "Error: Permission denied writing to file: /mnt/user-data/workspace/../../x"
    );
    assert_eq!(
        f.write("/mnt/skills/x", "x").await,
        "Error: Permission denied writing to file: /mnt/skills/x"
    );
}

#[actix_rt::test]
async fn read_file_ranges_and_errors() {
    let f = Fixture::new(true);
    assert_eq!(
        f.write(&format!("{WS}/r.txt"), "one\ntwo\r\nthree\nfour\n")
            .await,
        "OK"
    );
    let read = |args: Value| f.call("read_file", args);
    let p = format!("{WS}/r.txt");
    assert_eq!(
        read(json!({"description": "d", "path": p})).await,
        "one\ntwo\r\nthree\nfour\n"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "start_line": 2, "end_line": 3})).await,
        "two\nthree"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "start_line": 3})).await,
        "three\nfour"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "end_line": 1})).await,
        "one"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "start_line": 0})).await,
        "(start_line must be >= 1)"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "end_line": 0})).await,
        "(end_line must be >= 1)"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "start_line": 3, "end_line": 2})).await,
        "(start_line > end_line — no lines in range)"
    );
    assert_eq!(
        read(json!({"description": "d", "path": p, "start_line": 9})).await,
        "(start_line exceeds file length)"
    );
    assert_eq!(f.write(&format!("{WS}/empty.txt"), "").await, "OK");
    assert_eq!(
        read(json!({"description": "d", "path": format!("{WS}/empty.txt")})).await,
        "(empty)"
    );
    assert_eq!(
        read(json!({"description": "d", "path": format!("{WS}/nope.txt")})).await,
        "Error: File not found: /mnt/user-data/workspace/nope.txt"
    );
    assert_eq!(
        read(json!({"description": "d", "path": WS})).await,
        "Error: Path is a directory, not a file: /mnt/user-data/workspace"
    );
    assert_eq!(
        read(json!({"description": "d", "path": "/etc/passwd"})).await,
        "Error: Permission denied reading file: /etc/passwd"
    );
    std::fs::write(f.host("workspace/bin.dat"), [0xff, 0xfe, 0x00, 0x80]).expect("bin");
    assert_eq!(
        read(json!({"description": "d", "path": format!("{WS}/bin.dat")})).await,
        "Error: cannot read '/mnt/user-data/workspace/bin.dat' as text — it appears to be a binary file (e.g. .xlsx, .pdf, or an image). read_file only supports UTF-8 text. Use bash with a suitable library instead (pandas/openpyxl for spreadsheets), or view_image for images."
    );
    let long = "y".repeat(60_000);
    assert_eq!(f.write(&format!("{WS}/long.txt"), &long).await, "OK");
    let out = read(json!({"description": "d", "path": format!("{WS}/long.txt")})).await;
    assert!(out.ends_with(
        "\n... [truncated: showing first 49894 of 60000 chars. Use start_line/end_line to read a specific range] ..."
    ));
    assert_eq!(out.chars().count(), 50_000);
}

#[actix_rt::test]
async fn str_replace_cases_including_the_uniqueness_rule() {
    let f = Fixture::new(true);
    let p = format!("{WS}/s.txt");
    let replace = |old: &str, new: &str, all: bool| {
        f.call(
            "str_replace",
            json!({"description": "d", "path": p, "old_str": old, "new_str": new, "replace_all": all}),
        )
    };
    assert_eq!(f.write(&p, "a b a c").await, "OK");
    assert_eq!(replace("", "zzz", false).await, "OK");
    assert_eq!(
        std::fs::read_to_string(f.host("workspace/s.txt")).expect("f"),
        "a b a c"
    );
    assert_eq!(
        replace("q", "r", false).await,
        "Error: String to replace not found in file: /mnt/user-data/workspace/s.txt"
    );
    assert_eq!(
        replace("a", "x", false).await,
        "Error: String to replace occurs 2 times in file: /mnt/user-data/workspace/s.txt. Include more surrounding context to make it unique, or set replace_all=true to replace every occurrence."
    );
    assert_eq!(
        std::fs::read_to_string(f.host("workspace/s.txt")).expect("f"),
        "a b a c"
    );
    assert_eq!(replace("b", "B", false).await, "OK");
    assert_eq!(replace("a", "x", true).await, "OK");
    assert_eq!(
        std::fs::read_to_string(f.host("workspace/s.txt")).expect("f"),
        "x B x c"
    );
    assert_eq!(f.write(&format!("{WS}/e.txt"), "").await, "OK");
    let r = f
        .call("str_replace", json!({"description": "d", "path": format!("{WS}/e.txt"), "old_str": "a", "new_str": "b"}))
        .await;
    assert_eq!(
        r,
        "Error: String to replace not found in file: /mnt/user-data/workspace/e.txt"
    );
    let r = f
        .call("str_replace", json!({"description": "d", "path": format!("{WS}/none.txt"), "old_str": "a", "new_str": "b"}))
        .await;
    assert_eq!(
        r,
        "Error: File not found: /mnt/user-data/workspace/none.txt"
    );
}

#[actix_rt::test]
async fn glob_format_limits_and_ignore_list() {
    let f = Fixture::new(true);
    for rel in [
        "workspace/src/a.py",
        "workspace/src/b.py",
        "workspace/top.py",
        "workspace/node_modules/x.py",
        "workspace/.git/y.py",
        "workspace/build/z.py",
        "workspace/notes.log",
    ] {
        let p = f.host(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, "print('hi')\n").expect("write");
    }
    let glob = |pattern: &str, max: i64| {
        f.call(
            "glob",
            json!({"description": "d", "pattern": pattern, "path": WS, "max_results": max}),
        )
    };
    assert_eq!(
        glob("**/*.py", 200).await,
        "Found 3 paths under /mnt/user-data/workspace\n1. /mnt/user-data/workspace/src/a.py\n2. /mnt/user-data/workspace/src/b.py\n3. /mnt/user-data/workspace/top.py"
    );
    assert_eq!(
        glob("**/*.py", 2).await,
        "Found 2 paths under /mnt/user-data/workspace (showing first 2)\n1. /mnt/user-data/workspace/src/a.py\n2. /mnt/user-data/workspace/src/b.py\nResults truncated. Narrow the path or pattern to see fewer matches."
    );
    assert_eq!(
        glob("*.log", 0).await,
        "No files matched under /mnt/user-data/workspace"
    );
    let dirs = f
        .call(
            "glob",
            json!({"description": "d", "pattern": "src", "path": WS, "include_dirs": true}),
        )
        .await;
    assert_eq!(
        dirs,
        "Found 1 paths under /mnt/user-data/workspace\n1. /mnt/user-data/workspace/src"
    );
    assert_eq!(
        f.call(
            "glob",
            json!({"description": "d", "pattern": "*", "path": format!("{WS}/nope")})
        )
        .await,
        "Error: Directory not found: /mnt/user-data/workspace/nope"
    );
    assert_eq!(
        f.call(
            "glob",
            json!({"description": "d", "pattern": "*", "path": format!("{WS}/top.py")})
        )
        .await,
        "Error: Path is not a directory: /mnt/user-data/workspace/top.py"
    );
    // The limit is min(clamp(asked), clamp(configured)): the configured default is 200...
    for i in 0..1005 {
        std::fs::write(f.host(&format!("uploads/f{i:04}.txt")), "x").expect("write");
    }
    let all = json!({"description": "d", "pattern": "*.txt", "path": "/mnt/user-data/uploads", "max_results": 5000});
    let out = f.call("glob", all.clone()).await;
    assert!(
        out.starts_with("Found 200 paths under /mnt/user-data/uploads (showing first 200)"),
        "{}",
        &out[..80]
    );
}

#[actix_rt::test]
async fn glob_limit_is_capped_at_1000_even_when_configured_higher() {
    let f = Fixture::with(|s| s.glob_max_results = 5000);
    f.bash("true").await;
    for i in 0..1005 {
        std::fs::write(f.host(&format!("uploads/f{i:04}.txt")), "x").expect("write");
    }
    let all = json!({"description": "d", "pattern": "*.txt", "path": "/mnt/user-data/uploads", "max_results": 5000});
    let out = f.call("glob", all).await;
    assert!(
        out.starts_with("Found 1000 paths under /mnt/user-data/uploads (showing first 1000)"),
        "{}",
        &out[..80]
    );
    assert!(out.ends_with("1000. /mnt/user-data/uploads/f0999.txt\nResults truncated. Narrow the path or pattern to see fewer matches."));
}

#[actix_rt::test]
async fn grep_format_limits_and_skips() {
    let f = Fixture::new(true);
    std::fs::create_dir_all(f.host("workspace/src")).expect("mkdir");
    std::fs::create_dir_all(f.host("workspace/node_modules")).expect("mkdir");
    std::fs::write(
        f.host("workspace/src/a.py"),
        "import os\nTODO: one\nx = 1\n",
    )
    .expect("w");
    std::fs::write(
        f.host("workspace/src/b.txt"),
        format!("todo two\n{}\n", "TODO ".repeat(500)),
    )
    .expect("w");
    std::fs::write(f.host("workspace/node_modules/c.py"), "TODO hidden\n").expect("w");
    std::fs::write(f.host("workspace/bin.py"), b"TODO\0binary").expect("w");
    std::fs::write(
        f.host("workspace/big.py"),
        format!("TODO\n{}", "z".repeat(1_000_001)),
    )
    .expect("w");
    std::fs::write(
        f.host("workspace/long.py"),
        format!("TODO {}\n", "w".repeat(300)),
    )
    .expect("w");
    symlink(f.host("workspace/src/a.py"), f.host("workspace/link.py")).expect("symlink");
    let grep = |args: Value| f.call("grep", args);
    let out = grep(json!({"description": "d", "pattern": "todo", "path": WS})).await;
    let long_line = format!("TODO {}...", "w".repeat(192));
    assert_eq!(
        out,
        format!("Found 3 matches under /mnt/user-data/workspace\n/mnt/user-data/workspace/long.py:1: {long_line}\n/mnt/user-data/workspace/src/a.py:2: TODO: one\n/mnt/user-data/workspace/src/b.txt:1: todo two")
    );
    let out = grep(json!({"description": "d", "pattern": "TODO", "path": WS, "case_sensitive": true, "glob": "**/*.py"})).await;
    assert_eq!(
        out,
        format!("Found 2 matches under /mnt/user-data/workspace\n/mnt/user-data/workspace/long.py:1: {long_line}\n/mnt/user-data/workspace/src/a.py:2: TODO: one")
    );
    let out =
        grep(json!({"description": "d", "pattern": "todo", "path": WS, "max_results": 1})).await;
    assert_eq!(
        out,
        format!("Found 1 matches under /mnt/user-data/workspace (showing first 1)\n/mnt/user-data/workspace/long.py:1: {long_line}\nResults truncated. Narrow the path or add a glob filter.")
    );
    assert_eq!(
        grep(json!({"description": "d", "pattern": "x = (", "path": WS}))
            .await
            .lines()
            .next(),
        Some("Error: Invalid regex pattern: regex parse error:")
    );
    assert_eq!(
        grep(json!({"description": "d", "pattern": "x = (", "path": WS, "literal": true})).await,
        "No matches found under /mnt/user-data/workspace"
    );
    // A single file is a root.
    assert_eq!(
        grep(json!({"description": "d", "pattern": "os", "path": format!("{WS}/src/a.py")})).await,
        "Found 1 matches under /mnt/user-data/workspace/src/a.py\n/mnt/user-data/workspace/src/a.py:1: import os"
    );
}

#[actix_rt::test]
async fn ls_tree_masking_and_errors() {
    let f = Fixture::new(true);
    for rel in [
        "workspace/a/b/c/deep.txt",
        "workspace/a/x.txt",
        "workspace/z.txt",
        "workspace/.venv/v.txt",
        "workspace/app.log",
    ] {
        let p = f.host(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, "x").expect("write");
    }
    symlink("/etc", f.host("workspace/etc-link")).expect("symlink");
    // A link that stays in the thread is listed. (An absolute link is never followed on
    // the host side: the sandbox's absolute paths are not the host's.)
    symlink("z.txt", f.host("workspace/z-link")).expect("symlink");
    let ls = |p: &str| f.call("ls", json!({"description": "d", "path": p}));
    assert_eq!(
        ls(WS).await,
        "/mnt/user-data/workspace/a/\n/mnt/user-data/workspace/a/b/\n/mnt/user-data/workspace/a/x.txt\n/mnt/user-data/workspace/z-link\n/mnt/user-data/workspace/z.txt"
    );
    assert_eq!(ls("/mnt/user-data/outputs").await, "(empty)");
    assert_eq!(
        ls(&format!("{WS}/nope")).await,
        "Error: Directory not found: /mnt/user-data/workspace/nope"
    );
    assert_eq!(ls("/etc").await, "Error: Permission denied: /etc");
    assert_eq!(
        ls(&format!("{WS}/etc-link")).await,
        "Error: Permission denied: /mnt/user-data/workspace/etc-link"
    );
}

#[actix_rt::test]
async fn paths_through_a_symlink_out_of_the_thread_are_refused() {
    let f = Fixture::new(true);
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret.txt"), "host secret").expect("secret");
    std::fs::create_dir_all(f.host("workspace")).ok();
    f.bash("true").await;
    symlink(outside.path(), f.host("workspace/out")).expect("symlink");
    assert_eq!(
        f.call(
            "read_file",
            json!({"description": "d", "path": format!("{WS}/out/secret.txt")})
        )
        .await,
        "Error: Permission denied reading file: /mnt/user-data/workspace/out/secret.txt"
    );
    assert_eq!(
        f.write(&format!("{WS}/out/new.txt"), "x").await,
        "Error: Permission denied writing to file: /mnt/user-data/workspace/out/new.txt"
    );
    assert!(!outside.path().join("new.txt").exists());
}

#[actix_rt::test]
async fn secrets_are_injected_only_when_allowlisted_and_redacted_from_output() {
    let f = Fixture::with(|s| s.secrets = vec!["API_TOKEN".into(), "PIN".into()]);
    let principal = Principal {
        user_id: "u".into(),
        thread_id: "t".into(),
        roles: vec![],
    };
    let call = ToolCall {
        tool: "bash".into(),
        args: json!({"description": "d", "command": "echo \"[$API_TOKEN] [$PIN] [$OTHER]\""})
            .into(),
        secrets: vec![
            ("API_TOKEN".into(), "tok-1234567890".into()),
            ("PIN".into(), "1234".into()),
            ("OTHER".into(), "not-allowlisted-value".into()),
        ],
        clearance: None,
    };
    let out = call_once(&f.pool, principal, call)
        .await
        .expect("pool")
        .expect("sandbox");
    // Injected and redacted; a value under 8 characters is injected but not redacted; a
    // name not on sandbox.secrets is not injected at all.
    assert_eq!(out.content, "[[redacted]] [1234] []\n");
}
