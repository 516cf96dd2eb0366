//! The lead's own writes and checks under a thread's directories never follow a link the
//! sandbox planted (`antler run` against real sandbox-host): with
//! `/mnt/user-data/outputs/.tool-results` made a link to a host directory from inside the
//! sandbox, a tool result over 12,000 characters is not written there (the run falls back
//! to truncation), and `present_files` through a link to the host is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use antler_tests::bin;
use serde_json::Value;

const CONFIG: &str = "tools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n";

#[test]
fn a_planted_tool_results_link_gets_nothing_written_through_it() {
    let dir = tempfile::Builder::new()
        .prefix("antler-links")
        .tempdir_in("/tmp")
        .unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = d.join("host-dir");
    std::fs::create_dir(&host).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(host.join("secret.txt"), "host-secret-value-77").unwrap();
    std::fs::write(d.join("config.yaml"), CONFIG).unwrap();
    std::fs::write(d.join("extensions_config.json"), r#"{"mcpServers": {}}"#).unwrap();
    let playbook = format!(
        r#"
turns:
  - tool_calls:
      - {{name: bash, args: {{description: plant, command: "ln -s {h} /mnt/user-data/outputs/.tool-results && ln -s {h} /mnt/user-data/outputs/hostlink && echo planted"}}}}
  - tool_calls:
      - {{name: bash, args: {{description: big, command: "head -c 13000 /dev/zero | tr '\\0' a"}}}}
  - tool_calls:
      - {{name: present_files, args: {{filepaths: ["/mnt/user-data/outputs/hostlink/secret.txt"]}}}}
  - content: Done.
"#,
        h = host.display()
    );
    std::fs::write(d.join("playbook.yaml"), playbook).unwrap();
    let out = Command::new(bin("antler"))
        .arg("--runtime-dir")
        .arg(d.join("run"))
        .args(["run", "Do the task", "--json", "--playbook"])
        .arg(d.join("playbook.yaml"))
        .arg("--config")
        .arg(d.join("config.yaml"))
        .current_dir(d)
        .env(
            "ANTLER_EXTENSIONS_CONFIG_PATH",
            d.join("extensions_config.json"),
        )
        .env("ANTLER_SANDBOX_BASE_DIR", d.join("base"))
        .env("ANTLER_GATEWAY_ADDR", "off")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let tools = tool_messages(&d.join("run/runs.sqlite"), view["run_id"].as_str().unwrap());
    let contents: Vec<&str> = tools
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents[0], "planted\n", "{view}");
    // Nothing was written into the host directory; the result came back in full instead.
    let names: Vec<String> = std::fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["secret.txt"]);
    assert!(!contents[1].contains("saved to"), "{}", &contents[1][..200]);
    assert_eq!(contents[1], "a".repeat(13_000));
    assert_eq!(
        contents[2],
        "Error: Only files in /mnt/user-data/outputs can be presented: /mnt/user-data/outputs/hostlink/secret.txt"
    );
    assert!(!stdout.contains("host-secret-value-77"));
}

fn tool_messages(store: &std::path::Path, run_id: &str) -> Vec<Value> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3,sys,json;c=sqlite3.connect(sys.argv[1]);\
             s=json.loads(c.execute('select state from checkpoints where run_id=? order by step desc limit 1',(sys.argv[2],)).fetchone()[0]);\
             print(json.dumps([m for m in s['messages'] if m['role']=='tool']))",
        )
        .arg(store)
        .arg(run_id)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}
