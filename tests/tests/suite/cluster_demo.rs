//! `scripts/cluster-demo.sh`, as a user runs it (with this build's binaries through
//! `ANTLER_BIN_DIR`): it brings the multi-host layout up in network namespaces, runs the
//! bundled example and two subagent tasks across the workers, ends with a JSON array of
//! the runs, and leaves no namespace or process behind; interrupted, it tears down too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use antler_tests::{bin_dir, signal, wait_for};
use serde_json::Value;

fn script() -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster-demo.sh"))
        .env("ANTLER_BIN_DIR", bin_dir())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

/// The namespaces of the demo started as process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("antler-demo-{pid}-")))
        .map(str::to_owned)
        .collect()
}

/// The demo's working directory, from the line that names its certificates.
fn work_dir(lines: &[String]) -> Option<PathBuf> {
    lines.iter().find_map(|l| {
        let rest = l.split("antler cluster init ").nth(1)?;
        Some(PathBuf::from(
            rest.trim_end_matches(')').trim_end_matches("/certs"),
        ))
    })
}

/// Live processes whose command line names `dir` (the hosts, the lead, the sandboxes).
fn processes_naming(dir: &std::path::Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[test]
fn the_demo_runs_the_example_and_two_tasks_across_hosts_and_cleans_up() {
    let child = script()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sandbox-host"), "no status table: {stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    let runs: Vec<Value> = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert_eq!(runs.len(), 2, "{last}");
    for run in &runs {
        assert_eq!(run["status"], "success", "{run:#}");
        assert_eq!(run["delivery"]["satisfied"], true, "{run:#}");
    }
    assert_eq!(
        runs[1]["artifacts"],
        serde_json::json!([
            "/mnt/user-data/outputs/alpha.md",
            "/mnt/user-data/outputs/beta.md"
        ])
    );
    assert!(namespaces_of(pid).is_empty(), "{:?}", namespaces_of(pid));
    let lines: Vec<String> = stderr.lines().map(str::to_owned).collect();
    let work = work_dir(&lines).expect("the demo names its directory");
    assert!(
        !work.exists(),
        "a successful demo removes {}",
        work.display()
    );
    assert!(
        processes_naming(&work).is_empty(),
        "{:#?}",
        processes_naming(&work)
    );
}

#[test]
fn an_interrupted_demo_tears_everything_down() {
    let mut child = script()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let up = line.contains("waiting for the lead");
        seen.push(line);
        if up {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("waiting for the lead")),
        "{seen:#?}"
    );
    assert!(!namespaces_of(pid).is_empty());
    let work = work_dir(&seen).expect("the demo names its directory");
    assert!(!processes_naming(&work).is_empty(), "nothing was started");
    signal(pid, libc::SIGINT);
    let status = wait_for(Duration::from_secs(60), || child.try_wait().ok().flatten())
        .expect("the demo did not stop after SIGINT");
    reader.join().unwrap();
    assert!(!status.success());
    assert!(namespaces_of(pid).is_empty(), "{:?}", namespaces_of(pid));
    let left = processes_naming(&work);
    // An interrupted demo keeps its logs for the user; the test's own clean-up.
    let _ = std::fs::remove_dir_all(&work);
    assert!(left.is_empty(), "{left:#?}");
}
