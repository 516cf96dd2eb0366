//! Uploads through the gateway (spec B), against a real cluster, a real bubblewrap sandbox
//! and the real converters (pymupdf4llm, MarkItDown) run inside it: a PDF, a DOCX and an
//! XLSX made here with their own Python libraries get Markdown twins, and the model's next
//! request (the recording stand-in) carries the `<current_uploads>` block with their
//! outlines; a user's own `report.md` survives the PDF's conversion and deletion; an
//! oversized file, too many files and a user over its quota are 413 and leave nothing; a
//! traversal name is dropped; a file that cannot be converted is kept with the reason;
//! another member's thread is 404; responses never show a host path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::lead_support::{http_full, LeadCluster};
use crate::model_support::{recording_server, Reply};
use antler_tests::wait_for;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-000000000001";
const BOB: &str = "bob-token-00000000000002";

/// Writes report.pdf (headings "Quarterly Report" and "Results"), notes.docx ("Meeting
/// Notes", "Action Items") and sales.xlsx (sheet "Sales") into `dir`.
const MAKE_DOCUMENTS: &str = r#"
import sys, pymupdf, docx, openpyxl
out = sys.argv[1]
doc = pymupdf.open()
page = doc.new_page()
y = 72
page.insert_text((72, y), "Quarterly Report", fontsize=24); y += 40
for i in range(12):
    page.insert_text((72, y), f"Revenue grew in region {i} because customers bought more widgets.", fontsize=11); y += 16
page.insert_text((72, y + 10), "Results", fontsize=24); y += 50
for i in range(12):
    page.insert_text((72, y), f"The results for quarter {i} were above the plan by a wide margin.", fontsize=11); y += 16
doc.save(f"{out}/report.pdf")
d = docx.Document()
d.add_heading("Meeting Notes", level=1)
d.add_paragraph("We agreed on the budget.")
d.add_heading("Action Items", level=2)
d.add_paragraph("Ship the release.")
d.save(f"{out}/notes.docx")
wb = openpyxl.Workbook()
ws = wb.active
ws.title = "Sales"
ws.append(["region", "amount"])
ws.append(["north", 42])
ws.append(["south", 17])
wb.save(f"{out}/sales.xlsx")
"#;

fn documents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let status = Command::new("python3")
        .args(["-c", MAKE_DOCUMENTS])
        .arg(dir)
        .status()
        .expect("python3");
    assert!(status.success(), "the documents could not be made");
    ["report.pdf", "notes.docx", "sales.xlsx"]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(dir.join(n)).unwrap()))
        .collect()
}

/// `POST /api/threads/{thread}/uploads` with one `files` part per (name, bytes).
fn upload(addr: &str, token: &str, thread: &str, files: &[(String, Vec<u8>)]) -> (u16, Value) {
    let boundary = "antler-test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, bytes) in files {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    let head = format!(
        "POST /api/threads/{thread}/uploads HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    // A refused upload may be answered before the whole body is sent.
    let _ = stream.write_all(&body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (
        status,
        serde_json::from_str(rest).unwrap_or(Value::String(rest.to_owned())),
    )
}

fn call(addr: &str, token: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string);
    let (code, _, text) = http_full(addr, token, method, path, body.as_deref());
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The names in a directory (none when it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn uploads_dir(base: &Path, user: &str, thread: &str) -> PathBuf {
    base.join("users")
        .join(user)
        .join("threads")
        .join(thread)
        .join("user-data/uploads")
}

#[test]
fn documents_get_twins_converted_in_the_sandbox_and_the_next_request_lists_them() {
    let server = recording_server(vec![Reply::text("Done.")]);
    let config = format!(
        "models:\n  - name: rec\n    use: langchain_openai:ChatOpenAI\n    model: recorded\n    base_url: {}\n    api_key: sk-test-key\n\
sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  bash_command_timeout: 300\n\
uploads:\n  auto_convert_documents: true\n  max_file_count: 5\n  max_single_file_size: 200000\n  max_user_total_size: 700000\n  conversion_timeout_s: 240\n\
antler:\n  gateway:\n    tokens:\n      - {{token: {ALICE}, user: alice, role: member}}\n      - {{token: {BOB}, user: bob, role: member}}\n",
        server.base_url
    );
    let cluster = LeadCluster::up(&config, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = cluster.gateway();
    let base = cluster.base();
    let docs_dir = cluster.dir.path().join("docs");
    std::fs::create_dir_all(&docs_dir).unwrap();
    let docs = documents(&docs_dir);
    let alice_t1 = uploads_dir(&base, "alice", "t1");

    let (code, limits) = call(&addr, ALICE, "GET", "/api/threads/t1/uploads/limits", None);
    assert_eq!(code, 200, "{limits}");
    assert_eq!(
        (
            &limits["max_files"],
            &limits["max_file_size"],
            &limits["max_total_size"]
        ),
        (&json!(5), &json!(200000), &json!(104857600)),
        "legacy names apply: {limits}"
    );

    // The user's own report.md, uploaded first.
    let own = ("report.md".to_owned(), b"# My own notes\n".to_vec());
    let (code, reply) = upload(&addr, ALICE, "t1", &[own]);
    assert_eq!(code, 200, "{reply}");

    // The three documents and a name that climbs out (dropped silently).
    let mut request = docs.clone();
    request.push(("../../evil.txt".to_owned(), b"x".to_vec()));
    request.push(("..".to_owned(), b"y".to_vec()));
    let (code, reply) = upload(&addr, ALICE, "t1", &request);
    assert_eq!(code, 200, "{reply}");
    assert_eq!(
        reply["message"], "Successfully uploaded 4 file(s)",
        "{reply}"
    );
    assert_eq!(reply["success"], true);
    let text = reply.to_string();
    assert!(
        !text.contains(&*base.to_string_lossy()),
        "a host path: {text}"
    );
    let files = reply["files"].as_array().unwrap();
    let by_name = |n: &str| files.iter().find(|f| f["filename"] == n).cloned().unwrap();
    for (name, bytes) in &docs {
        let f = by_name(name);
        assert_eq!(f["size"], bytes.len(), "{f}");
        assert!(f.get("path").is_none(), "{f}");
        assert_eq!(f["virtual_path"], format!("/mnt/user-data/uploads/{name}"));
        assert!(f["markdown_file"].is_string(), "not converted: {f}");
    }
    // The traversal name kept only its basename, inside the uploads.
    assert_eq!(by_name("evil.txt")["size"], 1);
    // Each file's `artifact_url` downloads it, for its owner only; a path out of the
    // thread's files is not there.
    let url = by_name("evil.txt")["artifact_url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        url,
        "/api/threads/t1/artifacts/mnt/user-data/uploads/evil.txt"
    );
    let (code, headers, text) = http_full(&addr, ALICE, "GET", &url, None);
    assert_eq!((code, text.as_str()), (200, "x"), "{headers:?}");
    assert_eq!(call(&addr, BOB, "GET", &url, None).0, 404);
    for escape in [
        "/api/threads/t1/artifacts/mnt/user-data/uploads/../../../../../etc/passwd",
        "/api/threads/t1/artifacts/mnt/user-data/%2e%2e/%2e%2e/etc/passwd",
        "/api/threads/t1/artifacts/etc/passwd",
    ] {
        let (code, reply) = call(&addr, ALICE, "GET", escape, None);
        assert_eq!(code, 404, "{escape}: {reply}");
    }
    // The PDF's twin does not take the user's report.md.
    assert_eq!(by_name("report.pdf")["markdown_file"], "report_1.md");
    assert_eq!(
        by_name("report.pdf")["markdown_artifact_url"],
        "/api/threads/t1/artifacts/mnt/user-data/uploads/report_1.md"
    );
    assert_eq!(
        std::fs::read_to_string(alice_t1.join("report.md")).unwrap(),
        "# My own notes\n"
    );
    let pdf_md = std::fs::read_to_string(alice_t1.join("report_1.md")).unwrap();
    assert!(pdf_md.contains("Results"), "{pdf_md}");
    let docx_md = std::fs::read_to_string(alice_t1.join("notes.md")).unwrap();
    assert!(docx_md.contains("# Meeting Notes"), "{docx_md}");
    let xlsx_md = std::fs::read_to_string(alice_t1.join("sales.md")).unwrap();
    assert!(xlsx_md.contains("north"), "{xlsx_md}");
    assert!(
        !names(&alice_t1).iter().any(|n| n.ends_with(".part")),
        "{:?}",
        names(&alice_t1)
    );
    assert!(!base.join("users/alice/threads/evil.txt").exists());

    // A file that cannot be converted is kept, with the reason.
    let broken = ("broken.pdf".to_owned(), b"not a pdf at all".to_vec());
    let (code, reply) = upload(&addr, ALICE, "t1", &[broken]);
    assert_eq!(code, 200, "{reply}");
    let f = &reply["files"][0];
    assert!(f.get("markdown_file").is_none(), "{f}");
    assert!(
        f["conversion_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{f}"
    );
    assert!(alice_t1.join("broken.pdf").exists());

    // The run on the thread with the uploads on its turn: the model sees the block.
    let (code, reply) = call(
        &addr,
        ALICE,
        "POST",
        "/api/runs",
        Some(&json!({
            "task": "Summarise the uploads",
            "thread": "t1",
            "files": ["report.pdf", {"filename": "notes.docx", "size": 1}, "sales.xlsx"],
        })),
    );
    assert_eq!(code, 201, "{reply}");
    let run_id = reply["run_id"].as_str().unwrap().to_owned();
    let view = wait_for(Duration::from_secs(120), || {
        let (code, view) = call(&addr, ALICE, "GET", &format!("/api/runs/{run_id}"), None);
        (code == 200 && view["status"] != "running").then_some(view)
    })
    .expect("the run ended");
    assert_eq!(view["status"], "success", "{view}");
    let first = server.requests.lock().unwrap()[0].clone();
    let user_turn = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_owned();
    let pdf_size = docs[0].1.len() as f64 / 1024.0;
    for needle in [
        "<current_uploads>\nThe following files were uploaded in this message:\n\n- report.pdf (".to_owned(),
        format!("- report.pdf ({pdf_size:.1} KB)\n  Path: /mnt/user-data/uploads/report.pdf\n  Document outline (use `read_file` with line ranges to read sections):\n"),
        ": Results\n".to_owned(),
        "- notes.docx (".to_owned(),
        ": Meeting Notes\n".to_owned(),
        ": Action Items\n".to_owned(),
        "- sales.xlsx (".to_owned(),
        ": Sales\n".to_owned(),
        "</current_uploads>\n\n--- BEGIN USER INPUT ---\nSummarise the uploads\n--- END USER INPUT ---".to_owned(),
    ] {
        assert!(user_turn.contains(&needle), "{needle:?} missing in:\n{user_turn}");
    }
    assert!(!user_turn.contains("My own notes"), "{user_turn}");

    // The listing: every file, the twins marked, no host path.
    let (code, list) = call(&addr, ALICE, "GET", "/api/threads/t1/uploads/list", None);
    assert_eq!(code, 200, "{list}");
    let listed: Vec<&str> = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [
            "broken.pdf",
            "evil.txt",
            "notes.docx",
            "notes.md",
            "report.md",
            "report.pdf",
            "report_1.md",
            "sales.md",
            "sales.xlsx"
        ]
    );
    assert_eq!(list["count"], 9);
    assert!(!list.to_string().contains(&*base.to_string_lossy()));

    // Another member: alice's thread is 404 on every route. Bob's own `t1` is another
    // thread: his upload creates it, in his own directory, and neither sees the other's.
    for (method, path) in [
        ("GET", "/api/threads/t1/uploads/list"),
        ("DELETE", "/api/threads/t1/uploads/report.pdf"),
    ] {
        let (code, reply) = call(&addr, BOB, method, path, None);
        assert_eq!(code, 404, "bob {method} {path}: {reply}");
    }
    assert!(uploads_dir(&base, "alice", "t1")
        .join("report.pdf")
        .exists());
    let (code, reply) = upload(&addr, BOB, "t1", &[("x.txt".into(), b"x".to_vec())]);
    assert_eq!(code, 200, "{reply}");
    assert!(uploads_dir(&base, "bob", "t1").join("x.txt").exists());
    let (_, bobs) = call(&addr, BOB, "GET", "/api/threads/t1/uploads/list", None);
    assert_eq!(bobs["count"], 1, "{bobs}");
    let (_, alices) = call(&addr, ALICE, "GET", "/api/threads/t1/uploads/list", None);
    assert!(!alices.to_string().contains("x.txt"), "{alices}");

    // Deleting the PDF deletes its twin, never the user's report.md.
    let (code, reply) = call(
        &addr,
        ALICE,
        "DELETE",
        "/api/threads/t1/uploads/report.pdf",
        None,
    );
    assert_eq!(code, 200, "{reply}");
    assert_eq!(
        reply,
        json!({"success": true, "message": "Deleted report.pdf"})
    );
    assert!(!alice_t1.join("report_1.md").exists());
    assert!(alice_t1.join("report.md").exists());
    let (code, reply) = call(
        &addr,
        ALICE,
        "DELETE",
        "/api/threads/t1/uploads/nope.pdf",
        None,
    );
    assert_eq!(
        (code, &reply["detail"]),
        (404, &json!("File not found: nope.pdf"))
    );
    let (code, reply) = call(
        &addr,
        ALICE,
        "DELETE",
        "/api/threads/t1/uploads/a%5Cb",
        None,
    );
    assert_eq!(
        (code, &reply["detail"]),
        (400, &json!("Invalid path")),
        "{reply}"
    );

    // Limits: each refusal is 413 and leaves nothing of the request behind.
    let alice_t2 = uploads_dir(&base, "alice", "t2");
    let big = ("big.bin".to_owned(), vec![7u8; 300_000]);
    let (code, reply) = upload(
        &addr,
        ALICE,
        "t2",
        &[("small.txt".into(), b"s".to_vec()), big],
    );
    assert_eq!(
        (code, &reply["detail"]),
        (413, &json!("File too large: big.bin"))
    );
    assert_eq!(names(&alice_t2), Vec::<String>::new());
    let many: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| (format!("f{i}.txt"), vec![b'x'; 10]))
        .collect();
    let (code, reply) = upload(&addr, ALICE, "t2", &many);
    assert_eq!(
        (code, &reply["detail"]),
        (413, &json!("Too many files: maximum is 5"))
    );
    assert_eq!(names(&alice_t2), Vec::<String>::new());
    // alice keeps about 60 KB; four more files of 190 KB pass her 700 KB total.
    let quota: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("q{i}.bin"), vec![b'q'; 190_000]))
        .collect();
    let (code, reply) = upload(&addr, ALICE, "t2", &quota);
    assert_eq!(code, 413, "{reply}");
    assert!(
        reply["detail"]
            .as_str()
            .unwrap()
            .starts_with("Upload quota exceeded"),
        "{reply}"
    );
    assert_eq!(names(&alice_t2), Vec::<String>::new());
    // A request with no file is 400.
    let (code, reply) = upload(&addr, ALICE, "t2", &[]);
    assert_eq!((code, &reply["detail"]), (400, &json!("No files provided")));
    // The user's earlier uploads are untouched by the refusals.
    assert!(alice_t1.join("notes.md").exists());
}
