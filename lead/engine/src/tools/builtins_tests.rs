use super::*;
use crate::catalog::{Promoted, ToolSpec};
use serde_json::json;

struct Thread {
    _dir: tempfile::TempDir,
    context: RunContext,
}

fn thread() -> Thread {
    let dir = tempfile::tempdir().unwrap();
    let context = RunContext::local(dir.path(), "u1", "thread-1", "run-1");
    let paths = &context.paths;
    paths.create().unwrap();
    std::fs::write(paths.outputs().join("report.md"), "# Report").unwrap();
    std::fs::create_dir_all(paths.outputs().join("charts")).unwrap();
    std::fs::write(paths.user_data().join("workspace/notes.txt"), "notes").unwrap();
    Thread { context, _dir: dir }
}

/// Runs a tool's future to its end on this test thread's runtime.
pub(crate) fn block<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
    }
    RUNTIME.with(|rt| rt.block_on(future))
}

fn present(thread: &Thread, paths: &[&str]) -> StateUpdate {
    block(present_files(
        &ToolCall {
            id: "c1".into(),
            name: "present_files".into(),
            args: json!({ "filepaths": paths }),
        },
        &thread.context,
    ))
}

fn reply(update: &StateUpdate) -> (&str, ToolStatus) {
    match update.messages.as_slice() {
        [Message::Tool {
            content, status, ..
        }] => (content.as_str(), *status),
        other => panic!("{other:?}"),
    }
}

#[test]
fn host_and_virtual_output_paths_are_presented_normalised() {
    let thread = thread();
    let host = thread.context.paths.outputs().join("report.md");
    let update = present(
        &thread,
        &[
            host.to_str().unwrap(),
            "/mnt/user-data/outputs/report.md",
            "mnt/user-data/outputs/charts/",
        ],
    );
    assert_eq!(
        reply(&update),
        ("Successfully presented files", ToolStatus::Success)
    );
    assert_eq!(
        update.artifacts,
        [
            "/mnt/user-data/outputs/report.md",
            "/mnt/user-data/outputs/report.md",
            "/mnt/user-data/outputs/charts"
        ]
    );
}

#[test]
fn paths_outside_outputs_are_refused_with_deerflows_texts() {
    let thread = thread();
    let workspace = thread.context.paths.user_data().join("workspace/notes.txt");
    let workspace = workspace.to_str().unwrap();
    let update = present(&thread, &[workspace]);
    assert_eq!(
        reply(&update),
        (
            format!("Error: Only files in /mnt/user-data/outputs can be presented: {workspace}")
                .as_str(),
            ToolStatus::Error
        )
    );
    assert!(update.artifacts.is_empty());
    assert_eq!(
        reply(&present(&thread, &["/mnt/user-data/../etc/passwd"])).0,
        "Error: Access denied: path traversal detected"
    );
    assert_eq!(
        reply(&present(&thread, &["/mnt/user-dataX/a"])).0,
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-dataX/a"
    );
}

#[test]
fn a_missing_file_is_an_error_and_one_bad_path_fails_the_batch() {
    let thread = thread();
    let update = present(
        &thread,
        &[
            "/mnt/user-data/outputs/report.md",
            "/mnt/user-data/outputs/missing.md",
        ],
    );
    assert_eq!(
        reply(&update),
        (
            "Error: File not found: /mnt/user-data/outputs/missing.md",
            ToolStatus::Error
        )
    );
    assert!(update.artifacts.is_empty());
}

#[test]
fn the_outputs_directory_itself_is_its_own_path_so_it_covers_every_output() {
    let thread = thread();
    let artifacts = present(
        &thread,
        &["/mnt/user-data/outputs", "/mnt/user-data/outputs/"],
    )
    .artifacts;
    assert_eq!(
        artifacts,
        ["/mnt/user-data/outputs", "/mnt/user-data/outputs"]
    );
    assert!(crate::settlement::covers(
        &artifacts[0],
        "/mnt/user-data/outputs/report.md"
    ));
}

#[test]
fn a_symlink_out_of_outputs_is_refused() {
    let thread = thread();
    let outputs = thread.context.paths.outputs();
    std::os::unix::fs::symlink(
        thread.context.paths.user_data().join("workspace"),
        outputs.join("escape"),
    )
    .unwrap();
    assert_eq!(
        reply(&present(&thread, &["/mnt/user-data/outputs/escape/notes.txt"])).0,
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/outputs/escape/notes.txt"
    );
}

#[test]
fn clarification_text_is_the_formatted_question() {
    assert_eq!(
        ask_clarification_text(
            &json!({"question": "Which year?", "clarification_type": "missing_info", "options": ["2024", "2025"]})
        ),
        "❓ Which year?\n\n  1. 2024\n  2. 2025"
    );
}

#[test]
fn tool_search_promotes_through_the_catalog() {
    let catalog = Catalog::build(
        vec![ToolSpec::mcp(
            "mcp_calc",
            "Compute sums.",
            json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
            Some("calc".into()),
            "calc",
        )],
        true,
    )
    .unwrap();
    let hash = catalog.hash().unwrap().as_str().to_owned();
    let call = |query: &str| ToolCall {
        id: "tc2".into(),
        name: "tool_search".into(),
        args: json!({ "query": query }),
    };
    let none = tool_search(&call("select:nonexistent"), &catalog).unwrap();
    assert_eq!(
        none.promoted,
        Some(Promoted {
            catalog_hash: hash.clone(),
            names: vec![]
        })
    );
    assert_eq!(
        none.messages,
        [Message::tool(
            "tc2",
            "tool_search",
            "No tools found matching: select:nonexistent",
            ToolStatus::Success
        )]
    );
    let found = tool_search(&call("select:mcp_calc"), &catalog).unwrap();
    assert_eq!(found.promoted.unwrap().names, ["mcp_calc"]);
    let Message::Tool { content, .. } = &found.messages[0] else {
        panic!()
    };
    let schemas: serde_json::Value = serde_json::from_str(content).unwrap();
    assert_eq!(schemas[0]["name"], "mcp_calc");
    let missing = ToolCall {
        args: json!({}),
        ..call("")
    };
    assert_eq!(
        tool_search(&missing, &catalog).unwrap_err(),
        ToolFailure::new(
            FailureClass::ValidationError,
            "query: field required (a string)"
        )
    );
}

// list_uploaded_files

fn list_uploads(thread: &Thread, args: serde_json::Value) -> String {
    list_uploads_beside(thread, args, &[])
}

/// [`list_uploads`] in a run whose own uploads are `current`.
fn list_uploads_beside(
    thread: &Thread,
    args: serde_json::Value,
    current: &[crate::thread::state::UploadedFile],
) -> String {
    let update = block(list_uploaded_files(
        &ToolCall {
            id: "c1".into(),
            name: "list_uploaded_files".into(),
            args,
        },
        &thread.context,
        current,
    ))
    .unwrap();
    let (content, status) = reply(&update);
    assert_eq!(status, ToolStatus::Success);
    content.to_owned()
}

/// Writes `name` in the thread's uploads with `size` bytes, modified `at` seconds after
/// the epoch.
fn upload(thread: &Thread, name: &str, size: usize, at: u64) {
    let path = thread.context.paths.uploads().join(name);
    std::fs::write(&path, "x".repeat(size)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(at))
        .unwrap();
}

#[test]
fn recorded_twins_are_hidden_a_users_md_is_listed_and_the_runs_own_uploads_left_out() {
    let thread = thread();
    upload(&thread, "report.pdf", 20, 100);
    upload(&thread, "report.md", 5, 200);
    upload(&thread, "report_1.md", 30, 100);
    upload(&thread, "now.csv", 3, 300);
    std::fs::write(
        thread
            .context
            .paths
            .user_data()
            .join(".uploads-manifest.json"),
        r#"{"twins":{"report.pdf":"report_1.md"}}"#,
    )
    .unwrap();
    std::fs::write(
        thread.context.paths.uploads().join("report_1.md"),
        "# Introduction\ntext\n## Results\n",
    )
    .unwrap();
    let current = [crate::thread::state::UploadedFile {
        filename: "now.csv".into(),
        size: 3,
        path: "/mnt/user-data/uploads/now.csv".into(),
        extension: ".csv".into(),
    }];
    let listed = list_uploads_beside(
        &thread,
        json!({"include_outline": ["report.pdf"]}),
        &current,
    );
    assert_eq!(
        listed,
        r#"{"files": [{"filename": "report.md", "size": 5, "path": "/mnt/user-data/uploads/report.md", "extension": ".md"}, {"filename": "report.pdf", "size": 20, "path": "/mnt/user-data/uploads/report.pdf", "extension": ".pdf", "outline": [{"title": "Introduction", "line": 1}, {"title": "Results", "line": 3}]}], "total_count": 2, "message": "Found 2 historical file(s)."}"#
    );
}

#[test]
fn no_uploads_have_deerflows_texts() {
    let thread = thread();
    assert_eq!(
        list_uploads(&thread, json!({})),
        r#"{"files": [], "message": "No historical uploaded files in this thread."}"#
    );
    // Only what is never listed.
    upload(&thread, ".upload-3f2a.part", 4, 10);
    std::fs::create_dir(thread.context.paths.uploads().join("folder")).unwrap();
    assert_eq!(
        list_uploads(&thread, json!({})),
        r#"{"files": [], "message": "No historical uploaded files in this thread."}"#
    );
    std::fs::remove_dir_all(thread.context.paths.uploads()).unwrap();
    assert_eq!(
        list_uploads(&thread, json!({})),
        r#"{"files": [], "message": "No uploads directory for this thread."}"#
    );
}

#[test]
fn uploads_are_listed_newest_first_with_virtual_paths() {
    let thread = thread();
    upload(&thread, "notes.txt", 5, 100);
    upload(&thread, "report.pdf", 2048, 300);
    // The converted copy of report.pdf is hidden; a lone .md is not.
    upload(&thread, "report.md", 10, 400);
    upload(&thread, "summary.md", 7, 200);
    upload(&thread, "Makefile", 1, 50);
    upload(&thread, ".upload-9.part", 3, 500);
    std::os::unix::fs::symlink(
        thread.context.paths.uploads().join("notes.txt"),
        thread.context.paths.uploads().join("link.txt"),
    )
    .unwrap();
    assert_eq!(
        list_uploads(&thread, json!({})),
        concat!(
            r#"{"files": ["#,
            r#"{"filename": "report.pdf", "size": 2048, "path": "/mnt/user-data/uploads/report.pdf", "extension": ".pdf"}, "#,
            r#"{"filename": "summary.md", "size": 7, "path": "/mnt/user-data/uploads/summary.md", "extension": ".md"}, "#,
            r#"{"filename": "notes.txt", "size": 5, "path": "/mnt/user-data/uploads/notes.txt", "extension": ".txt"}, "#,
            r#"{"filename": "Makefile", "size": 1, "path": "/mnt/user-data/uploads/Makefile", "extension": ""}], "#,
            r#""total_count": 4, "message": "Found 4 historical file(s)."}"#
        )
    );
}

#[test]
fn uploads_with_the_same_time_are_ordered_by_name() {
    let thread = thread();
    for name in ["c.csv", "a.csv", "b.csv"] {
        upload(&thread, name, 1, 100);
    }
    let listed: serde_json::Value =
        serde_json::from_str(&list_uploads(&thread, json!({}))).unwrap();
    let names: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.csv", "b.csv", "c.csv"]);
}

#[test]
fn a_long_list_is_truncated_with_a_summary_of_what_was_left_out() {
    let thread = thread();
    upload(&thread, "new.txt", 1, 600);
    upload(&thread, "b.CSV", 1, 500);
    upload(&thread, "a.csv", 1, 400);
    upload(&thread, "README", 1, 300);
    upload(&thread, "c.csv", 1, 200);
    assert_eq!(
        list_uploads(&thread, json!({"max_results": 1, "include_outline": true})),
        concat!(
            r#"{"files": [{"filename": "new.txt", "size": 1, "path": "/mnt/user-data/uploads/new.txt", "extension": ".txt"}], "#,
            r#""total_count": 5, "truncated": true, "omitted_summary": "1 (no extension), 3 .csv", "#,
            r#""message": "Found 5 historical file(s)."}"#
        )
    );
    // max_results is clamped to [1, 100].
    let count = |args| {
        let listed: serde_json::Value = serde_json::from_str(&list_uploads(&thread, args)).unwrap();
        listed["files"].as_array().unwrap().len()
    };
    assert_eq!(count(json!({"max_results": 0})), 1);
    assert_eq!(count(json!({"max_results": -5})), 1);
    assert_eq!(count(json!({"max_results": 4})), 4);
    for i in 0..120 {
        upload(&thread, &format!("f{i:03}.txt"), 1, 10);
    }
    assert_eq!(count(json!({"max_results": 1000})), 100);
    assert_eq!(count(json!({})), 20);
}

#[test]
fn list_uploaded_files_refuses_mistyped_arguments() {
    let thread = thread();
    for (args, detail) in [
        (
            json!({"max_results": "5"}),
            "max_results: input should be a valid integer",
        ),
        (
            json!({"include_outline": "yes"}),
            "include_outline: input should be a boolean or a list of file names",
        ),
    ] {
        let failure = block(list_uploaded_files(
            &ToolCall {
                id: "c1".into(),
                name: "list_uploaded_files".into(),
                args,
            },
            &thread.context,
            &[],
        ))
        .unwrap_err();
        assert_eq!(
            failure,
            ToolFailure::new(FailureClass::ValidationError, detail)
        );
    }
}

#[test]
fn uploads_behind_links_are_not_listed() {
    let thread = thread();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("host-secret.pdf"), "host").unwrap();
    let uploads = thread.context.paths.uploads();
    std::os::unix::fs::symlink(host.path().join("host-secret.pdf"), uploads.join("a.pdf")).unwrap();
    std::os::unix::fs::symlink(host.path(), uploads.join("dir")).unwrap();
    std::fs::write(uploads.join("real.txt"), "x").unwrap();
    let listed = list_uploads(&thread, json!({}));
    assert!(
        !listed.contains("a.pdf") && !listed.contains("host-secret"),
        "{listed}"
    );
    assert!(listed.contains("real.txt"), "{listed}");
}

#[test]
fn present_files_through_a_link_to_the_host_is_refused() {
    let thread = thread();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("secret.txt"), "host").unwrap();
    let outputs = thread.context.paths.outputs();
    std::os::unix::fs::symlink(host.path(), outputs.join("hostlink")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../../../tmp", outputs.join("up")).unwrap();
    for path in [
        "/mnt/user-data/outputs/hostlink/secret.txt",
        "/mnt/user-data/outputs/up",
    ] {
        assert_eq!(
            reply(&present(&thread, &[path])).0,
            format!("Error: Only files in /mnt/user-data/outputs can be presented: {path}")
        );
    }
}

/// Swaps `a` and `b` (renameat2 RENAME_EXCHANGE) in a tight loop until `stop`.
fn swapper(
    a: std::path::PathBuf,
    b: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    use std::os::unix::ffi::OsStrExt;
    std::thread::spawn(move || {
        let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
        let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: valid C strings; renameat2 only reads them.
            unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                );
            }
        }
    })
}

#[test]
fn links_swapped_while_present_files_and_list_uploaded_files_run_lead_nowhere() {
    let thread = thread();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("host-secret.txt"), "host").unwrap();
    let outputs = thread.context.paths.outputs();
    std::fs::create_dir(outputs.join("swap")).unwrap();
    std::fs::write(outputs.join("swap/host-secret.txt"), "inside").unwrap();
    std::os::unix::fs::symlink(host.path(), outputs.join("alt")).unwrap();
    let uploads = thread.context.paths.uploads();
    std::fs::write(uploads.join("u.txt"), "inside").unwrap();
    std::os::unix::fs::symlink(host.path().join("host-secret.txt"), uploads.join("u-alt")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swaps = [
        swapper(outputs.join("swap"), outputs.join("alt"), stop.clone()),
        swapper(uploads.join("u.txt"), uploads.join("u-alt"), stop.clone()),
    ];
    let path = "/mnt/user-data/outputs/swap/host-secret.txt";
    for _ in 0..1_000 {
        let update = present(&thread, &[path]);
        let (text, status) = reply(&update);
        match status {
            ToolStatus::Success => {}
            _ => assert_eq!(
                text,
                format!("Error: Only files in /mnt/user-data/outputs can be presented: {path}")
            ),
        }
        let listed = list_uploads(&thread, json!({}));
        // The host file is 4 bytes, the thread's 6: a listing through the link shows it.
        assert!(!listed.contains("\"size\": 4"), "{listed}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in swaps {
        t.join().unwrap();
    }
}
