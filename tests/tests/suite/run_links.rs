//! The lead's own writes and checks under a thread's directories never follow a link the
//! sandbox planted (`antler run` against real sandbox-host): with
//! `/mnt/user-data/outputs/.tool-results` made a link to a host directory from inside the
//! sandbox, a tool result over 12,000 characters is not written there (the run falls back
//! to truncation), and `present_files` through a link to the host is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use crate::model_support::{self, NO_MCP_SERVERS};

const CONFIG: &str = "tools:\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n";

#[test]
fn a_planted_tool_results_link_gets_nothing_written_through_it() {
    let dir = model_support::run_dir("antler-links", CONFIG, NO_MCP_SERVERS);
    let d = dir.path();
    let host = d.join("host-dir");
    std::fs::create_dir(&host).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(host.join("secret.txt"), "host-secret-value-77").unwrap();
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
    let (view, tools) = model_support::run_playbook(d, "Do the task", &playbook);
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
    assert!(!view.to_string().contains("host-secret-value-77"));
}
