//! A lead (or worker) without sandbox-host's volume reaches the thread's files through a
//! real `antler-sandbox-host` (`SandboxRequest::ThreadFiles`): the lead side's data root
//! is an empty directory of its own, sandbox-host's `--base-dir` another. A spill file is
//! written there and read back by a sandbox tool, `view_image` sees a PNG a sandbox tool
//! wrote, a presented file settles the run, an artifact downloads, and escapes (`..`, a
//! link out) are refused without the outside file's path or content in any answer. The
//! lead side's directory stays empty throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sandbox_support::RemoteThread;
use antler_engine::{
    images_for_next_call, present_files, view_image, DeliveryReceipt, Message, OutputBudget,
    OutputsSnapshot, StateUpdate, ToolCall,
};
use antler_lead::runs::{read_artifact, ArtifactContent};
use antler_protocol::messages::ThreadFileError;
use serde_json::json;

const PNG: &[u8] = &[0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n', 1, 2, 3];

fn call(name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: format!("call-{name}"),
        name: name.into(),
        args,
    }
}

fn text(update: &StateUpdate) -> String {
    match update.messages.as_slice() {
        [Message::Tool { content, .. }] => content.clone(),
        other => panic!("{other:?}"),
    }
}

fn entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[actix_rt::test]
async fn a_lead_without_the_volume_spills_views_settles_and_downloads_through_sandbox_host() {
    let thread = RemoteThread::start().await;
    let context = thread.context();
    let RemoteThread {
        host,
        client,
        lead_root,
        files,
        ..
    } = thread;
    files.ensure_dirs().await.unwrap();
    let remote = host.user_data("u1", "t1");
    assert!(remote.join("outputs").is_dir() && remote.join("uploads").is_dir());
    let before = OutputsSnapshot::take_through(&*files).await.unwrap();

    // A sandbox tool writes a PNG and a report; the lead side views and presents them.
    let id = client.acquire("u1", "t1").await.unwrap().sandbox_id;
    let wrote = client
        .bash(
            &id,
            "printf '\\211PNG\\r\\n\\032\\n\\001\\002\\003' > /mnt/user-data/outputs/chart.png && echo '# Report' > /mnt/user-data/outputs/report.md && echo done",
        )
        .await;
    assert!(wrote.contains("done"), "{wrote}");
    assert_eq!(
        std::fs::read(remote.join("outputs/chart.png")).unwrap(),
        PNG
    );
    let view = call(
        "view_image",
        json!({"image_path": "/mnt/user-data/outputs/chart.png"}),
    );
    let viewed = view_image(&view, &context).await;
    assert_eq!(text(&viewed), "Successfully read image");
    let seen = viewed.viewed_images.clone().unwrap();
    assert_eq!(
        seen["/mnt/user-data/outputs/chart.png"].mime_type,
        "image/png"
    );
    assert_eq!(
        seen["/mnt/user-data/outputs/chart.png"].size,
        PNG.len() as u64
    );
    // The next model call gets the image's bytes, read through sandbox-host again.
    let messages = vec![
        Message::Ai {
            content: String::new(),
            tool_calls: vec![view.clone()],
            id: "ai-1".into(),
            reasoning: None,
        },
        viewed.messages[0].clone(),
    ];
    let images = images_for_next_call(&messages, &seen, &context).await;
    use base64::Engine as _;
    assert_eq!(
        images[0].base64.as_deref(),
        Some(
            base64::engine::general_purpose::STANDARD
                .encode(PNG)
                .as_str()
        )
    );

    // A large tool result spills into the thread's outputs on sandbox-host.
    let big: String = (0..2_000).map(|i| format!("line {i:05}\n")).collect();
    let preview = OutputBudget::default()
        .apply_through("bash", "c-big", big.clone(), &*files)
        .await;
    let first = preview.lines().next().unwrap();
    let virtual_path = first
        .strip_prefix("[Full bash output saved to ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no spill file: {first}"));
    let name = virtual_path.rsplit('/').next().unwrap();
    assert_eq!(
        std::fs::read_to_string(remote.join("outputs/.tool-results").join(name)).unwrap(),
        big
    );
    let read_back = client
        .text(
            &id,
            "read_file",
            json!({"description": "d", "path": virtual_path, "start_line": 1, "end_line": 2}),
        )
        .await;
    assert_eq!(read_back, "line 00000\nline 00001");

    // present_files checks the report on sandbox-host; settlement sees it produced.
    let presented = present_files(
        &call(
            "present_files",
            json!({"filepaths": ["/mnt/user-data/outputs/report.md"]}),
        ),
        &context,
    )
    .await;
    assert_eq!(text(&presented), "Successfully presented files");
    assert_eq!(presented.artifacts, ["/mnt/user-data/outputs/report.md"]);
    let after = OutputsSnapshot::take_through(&*files).await.unwrap();
    let produced = before.produced_since(&after);
    assert_eq!(
        produced,
        [
            "/mnt/user-data/outputs/chart.png",
            "/mnt/user-data/outputs/report.md"
        ],
        "the spill file is not a produced output"
    );
    let receipt = DeliveryReceipt::settle(&presented.artifacts, &produced);
    assert_eq!(receipt.satisfied, Some(true));
    assert_eq!(receipt.matched_paths, ["/mnt/user-data/outputs/report.md"]);

    // The artifact download reads it through sandbox-host.
    match read_artifact(&*files, "/mnt/user-data/outputs/report.md").await {
        Ok(Some(ArtifactContent::Bytes(bytes))) => assert_eq!(bytes, b"# Report\n"),
        other => panic!("{other:?}"),
    }

    // Nothing of the thread was ever on the lead side's disk.
    assert_eq!(entries(lead_root.path()), 0);
}

#[actix_rt::test]
async fn escapes_through_sandbox_host_are_refused_without_quoting_the_target() {
    let thread = RemoteThread::start().await;
    let context = thread.context();
    let RemoteThread {
        host,
        lead_root,
        files,
        ..
    } = thread;
    files.ensure_dirs().await.unwrap();
    // A file outside the thread, and links to it planted in the thread's directories (as
    // sandboxed code in its own namespace could).
    let outside = host.dir.path().join("outside-secret.png");
    let mut secret = PNG.to_vec();
    secret.extend_from_slice(b"TOPSECRET");
    std::fs::write(&outside, &secret).unwrap();
    let remote = host.user_data("u1", "t1");
    std::os::unix::fs::symlink(&outside, remote.join("outputs/link.png")).unwrap();
    std::os::unix::fs::symlink(host.dir.path(), remote.join("outputs/.tool-results")).unwrap();
    let outside_path = outside.display().to_string();
    let quiet = |text: &str| {
        assert!(
            !text.contains(&outside_path) && !text.contains("TOPSECRET"),
            "{text}"
        );
    };

    for path in [
        "/mnt/user-data/outputs/link.png",
        "/mnt/user-data/../../../../outside-secret.png",
    ] {
        let e = files.read(path, 1 << 20).await.unwrap_err();
        assert_eq!(e, ThreadFileError::Escape { path: path.into() });
        quiet(&e.to_string());
    }
    let viewed = view_image(
        &call(
            "view_image",
            json!({"image_path": "/mnt/user-data/outputs/link.png"}),
        ),
        &context,
    )
    .await;
    assert_eq!(
        text(&viewed),
        "Error: Access denied: path traversal detected"
    );
    assert!(viewed.viewed_images.is_none());
    let presented = present_files(
        &call(
            "present_files",
            json!({"filepaths": ["/mnt/user-data/outputs/link.png"]}),
        ),
        &context,
    )
    .await;
    assert_eq!(
        text(&presented),
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/outputs/link.png"
    );
    assert!(presented.artifacts.is_empty());
    assert!(matches!(
        read_artifact(&*files, "/mnt/user-data/outputs/link.png").await,
        Ok(None)
    ));
    assert!(matches!(
        read_artifact(
            &*files,
            "/mnt/user-data/outputs/../../../outside-secret.png"
        )
        .await,
        Ok(None)
    ));
    // A `.tool-results` link out gets nothing written outside: the result is truncated.
    let before: Vec<_> = std::fs::read_dir(host.dir.path()).unwrap().collect();
    let big = "x".repeat(40_000);
    let out = OutputBudget::default()
        .apply_through("bash", "c1", big.clone(), &*files)
        .await;
    assert_eq!(out, OutputBudget::default().fallback(&big, "bash"));
    assert_eq!(
        std::fs::read_dir(host.dir.path()).unwrap().count(),
        before.len()
    );
    assert_eq!(entries(lead_root.path()), 0);
}

#[actix_rt::test]
async fn a_sandbox_host_that_is_gone_is_an_error_the_model_reads_not_a_missing_file() {
    let thread = RemoteThread::start().await;
    let context = thread.context();
    let RemoteThread { host, files, .. } = thread;
    drop(host);
    let viewed = view_image(
        &call(
            "view_image",
            json!({"image_path": "/mnt/user-data/outputs/chart.png"}),
        ),
        &context,
    )
    .await;
    let said = text(&viewed);
    assert!(
        said.starts_with("Error: the thread's files are unavailable: "),
        "{said}"
    );
    assert!(read_artifact(&*files, "/mnt/user-data/outputs/report.md")
        .await
        .is_err());
}
