//! A thread's own files served to a lead or worker without the volume
//! (`SandboxRequest::ThreadFiles`), over real files written by the sandbox tools: reads,
//! spill files, the outputs snapshot, and escapes (`..`, a link out) refused
//! without naming where they lead.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;

use actix::Actor;
use antler_protocol::messages::{
    FileContent, FileRead, Principal, ThreadFileError, ThreadFileOp, ThreadFileReply, ToolCall,
};
use antler_sandbox_host::{
    pool::SandboxPool,
    provider::ProviderVerdict,
    service::call_once,
    settings::{ProviderKind, SandboxSettings},
    thread_files,
};
use serde_json::{json, Value};

struct Fixture {
    dir: tempfile::TempDir,
    base: PathBuf,
    pool: actix::Addr<SandboxPool>,
}

fn principal() -> Principal {
    Principal {
        user_id: "u".into(),
        thread_id: "t".into(),
        roles: vec![],
    }
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("base");
        let settings = SandboxSettings {
            provider: ProviderKind::Local,
            allow_host_bash: true,
            base_dir: base.clone(),
            skills_dir: dir.path().join("skills"),
            ..SandboxSettings::default()
        };
        let verdict = ProviderVerdict::Serve {
            kind: ProviderKind::Local,
            note: "test".into(),
        };
        let pool = SandboxPool::new(settings, verdict).start();
        Fixture { dir, base, pool }
    }

    async fn tool(&self, tool: &str, args: Value) -> String {
        let call = ToolCall {
            tool: tool.into(),
            args: args.into(),
            secrets: vec![],
            clearance: None,
        };
        call_once(&self.pool, principal(), call)
            .await
            .expect("pool")
            .expect("sandbox")
            .content
    }

    async fn files(&self, op: ThreadFileOp) -> Result<ThreadFileReply, ThreadFileError> {
        thread_files::serve(&self.base, principal(), op).await
    }
}

fn read(path: &str) -> ThreadFileOp {
    ThreadFileOp::Read {
        path: path.into(),
        offset: 0,
        len: 1 << 20,
        max_size: 1 << 20,
    }
}

#[actix_rt::test]
async fn a_file_a_tool_wrote_is_read_and_settled_and_a_spill_file_is_written() {
    let f = Fixture::new();
    assert_eq!(
        f.files(ThreadFileOp::EnsureDirs).await,
        Ok(ThreadFileReply::Done)
    );
    let wrote = f
        .tool(
            "write_file",
            json!({"description": "d", "path": "/mnt/user-data/outputs/report.md", "content": "# Report"}),
        )
        .await;
    assert_eq!(wrote, "OK");
    assert_eq!(
        f.files(read("/mnt/user-data/outputs/report.md")).await,
        Ok(ThreadFileReply::Read(FileRead {
            resolved: "outputs/report.md".into(),
            is_file: true,
            size: 8,
            content: FileContent::Bytes(b"# Report".to_vec()),
        }))
    );
    let spill = ThreadFileOp::WriteSpill {
        name: "bash-abc.log".into(),
        content: b"long output".to_vec(),
    };
    assert_eq!(f.files(spill).await, Ok(ThreadFileReply::Done));
    let cat = f
        .tool(
            "read_file",
            json!({"description": "d", "path": "/mnt/user-data/outputs/.tool-results/bash-abc.log"}),
        )
        .await;
    assert_eq!(cat, "long output");
    let Ok(ThreadFileReply::Snapshot(files)) = f.files(ThreadFileOp::SnapshotOutputs).await else {
        panic!("no snapshot")
    };
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["/mnt/user-data/outputs/report.md"],
        "the spill file is not an output"
    );
}

#[actix_rt::test]
async fn escapes_are_refused_without_naming_their_target() {
    let f = Fixture::new();
    let outside = f.dir.path().join("outside-secret.txt");
    std::fs::write(&outside, "TOPSECRET").unwrap();
    // A link out, as sandboxed code (in its own mount namespace) could plant one.
    f.files(ThreadFileOp::EnsureDirs).await.unwrap();
    let outputs = f.base.join("users/u/threads/t/user-data/outputs");
    std::os::unix::fs::symlink(&outside, outputs.join("link.txt")).unwrap();
    for path in [
        "/mnt/user-data/outputs/link.txt",
        "/mnt/user-data/../../../../outside-secret.txt",
    ] {
        let e = f.files(read(path)).await.unwrap_err();
        assert_eq!(e, ThreadFileError::Escape { path: path.into() });
        let text = e.to_string();
        assert!(
            !text.contains(&*outside.to_string_lossy()) && !text.contains("TOPSECRET"),
            "{text}"
        );
    }
    let bad = Principal {
        user_id: "..".into(),
        ..principal()
    };
    assert!(matches!(
        thread_files::serve(&f.base, bad, read("/mnt/user-data/outputs/x")).await,
        Err(ThreadFileError::InvalidIdentity(_))
    ));
}
