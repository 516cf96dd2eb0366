//! The sandbox benchmark, one run, ratios against baselines measured in the same run:
//! a bare `bash -c true` spawned on the host; a `bash` call of `true` through the lead,
//! sandbox-host and a warm bwrap sandbox (and through sandbox-host alone); warm and cold
//! acquire; the memory (PSS, and RSS) of 100 warm sandboxes. Never gates on absolute times.
//!
//! `cargo bench -p antler-sandbox-host --bench sandbox` (the lead leg needs the `antler`
//! binary of the same profile next to `antler-sandbox-host`: `cargo build --release --bins`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use antler_protocol::{
    link::dial,
    messages::{
        LeadReply, LeadRequest, Principal, Reply, Request, SandboxReply, SandboxRequest, ToolCall,
    },
    Address, Connection, ConnectionConfig, Identity, Role, TraceContext,
};

const ITER: usize = 200;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p90(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() * 9 / 10]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn principal(thread: &str) -> Principal {
    Principal {
        user_id: "bench".into(),
        thread_id: thread.into(),
        roles: vec![],
    }
}

fn bash_true() -> ToolCall {
    ToolCall {
        tool: "bash".into(),
        args: serde_json::json!({"description": "bench", "command": "true"}).into(),
        secrets: vec![],
        clearance: None,
    }
}

async fn ask(conn: &Connection, r: SandboxRequest) -> SandboxReply {
    match conn
        .request(
            Request::Sandbox(r),
            TraceContext::new_root(),
            Duration::from_secs(30),
        )
        .await
    {
        Ok(Reply::Sandbox(r)) => r,
        other => panic!("unexpected reply {other:?}"),
    }
}

async fn acquire(conn: &Connection, thread: &str) -> String {
    match ask(
        conn,
        SandboxRequest::Acquire {
            principal: principal(thread),
            known_id: None,
            owner: None,
        },
    )
    .await
    {
        SandboxReply::Acquired(Ok(a)) => a.sandbox_id,
        other => panic!("acquire: {other:?}"),
    }
}

async fn release(conn: &Connection, id: &str) {
    match ask(
        conn,
        SandboxRequest::Release {
            sandbox_id: id.into(),
            owner: None,
        },
    )
    .await
    {
        SandboxReply::Released(Ok(())) => {}
        other => panic!("release: {other:?}"),
    }
}

/// Proportional and resident memory (KiB) of `pid` and all its descendants.
fn tree_memory(root: u32) -> (u64, u64, usize) {
    let mut children: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|x| x.parse::<u32>().ok())
            .unwrap_or(0);
        children.entry(ppid).or_default().push(pid);
    }
    let (mut pss, mut rss, mut n) = (0, 0, 0);
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        n += 1;
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
            for line in s.lines() {
                let kib = |l: &str| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|x| x.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                if line.starts_with("Pss:") {
                    pss += kib(line);
                } else if line.starts_with("Rss:") {
                    rss += kib(line);
                }
            }
        }
        stack.extend(children.get(&pid).cloned().unwrap_or_default());
    }
    (pss, rss, n)
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_file(p: &Path) {
    let until = Instant::now() + Duration::from_secs(20);
    while !p.exists() {
        assert!(Instant::now() < until, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("sandbox: bench");
        return;
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_antler-sandbox-host"));
    let dir = tempfile::Builder::new()
        .prefix("antler-bench")
        .tempdir_in("/tmp")
        .expect("tempdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n  replicas: 100\n  capacity: 128\n",
    )
    .expect("config");
    let base = dir.path().join("base");
    std::fs::write(dir.path().join("token"), "bench-token").expect("token");
    let sock = dir.path().join("sb.sock");
    let host = Proc(
        Command::new(&exe)
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .arg("--token-file")
            .arg(dir.path().join("token"))
            .arg("--config")
            .arg(&config)
            .arg("--base-dir")
            .arg(&base)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .spawn()
            .expect("start sandbox-host"),
    );
    wait_for_file(&sock);

    // The host's own memory before any sandbox exists.
    std::thread::sleep(Duration::from_millis(300));
    let (pss0, rss0, _) = tree_memory(host.0.id());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // Baseline: a bare `bash -c true` spawned here.
        let mut bare = Vec::new();
        for _ in 0..ITER {
            let t = Instant::now();
            let s = tokio::process::Command::new("bash").args(["-c", "true"]).status().await.expect("bash");
            assert!(s.success());
            bare.push(t.elapsed());
        }
        let bare50 = p50(bare.clone());

        let me = Identity::new(Role::Lead, "bench", Some("bench-token".into()));
        let conn = dial(&Address::Unix(sock.clone()), &me, ConnectionConfig::default(), None)
            .await
            .expect("connect");

        // Cold acquire: a new thread each time (directories and a bubblewrap start).
        let mut cold = Vec::new();
        for i in 0..30 {
            let t = Instant::now();
            let id = acquire(&conn, &format!("cold-{i}")).await;
            cold.push(t.elapsed());
            release(&conn, &id).await;
        }
        // Warm acquire: the same thread, parked warm in between.
        let id = acquire(&conn, "warm").await;
        release(&conn, &id).await;
        let mut warm = Vec::new();
        for _ in 0..ITER {
            let t = Instant::now();
            let id = acquire(&conn, "warm").await;
            warm.push(t.elapsed());
            release(&conn, &id).await;
        }
        // bash `true` through sandbox-host into a warm sandbox.
        let id = acquire(&conn, "calls").await;
        let mut direct = Vec::new();
        for _ in 0..ITER {
            let t = Instant::now();
            match ask(&conn, SandboxRequest::Call { sandbox_id: id.clone(), call: bash_true(), owner: None, call_id: None }).await {
                SandboxReply::ToolResult(Ok(r)) => assert_eq!(r.content, "(no output)"),
                other => panic!("call: {other:?}"),
            }
            direct.push(t.elapsed());
        }
        release(&conn, &id).await;

        // The same call through the lead (antler up), when the binary is there.
        let lead = lead_leg(&exe, dir.path(), &config, &base).await;

        // Memory of 100 warm sandboxes.
        for i in 0..100 {
            let id = acquire(&conn, &format!("mem-{i}")).await;
            release(&conn, &id).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let warm_count = match ask(&conn, SandboxRequest::Status).await {
            SandboxReply::Status(s) => s.sandboxes.iter().filter(|s| s.state == "warm").count(),
            other => panic!("status: {other:?}"),
        };
        let (pss, rss, procs) = tree_memory(host.0.id());

        println!("sandbox bench ({ITER} iterations; p50 / p90)");
        println!("  bare `bash -c true` on the host      {:>8.3} ms / {:>8.3} ms  (baseline)", ms(bare50), ms(p90(bare)));
        println!("  cold acquire (new thread)            {:>8.3} ms / {:>8.3} ms", ms(p50(cold.clone())), ms(p90(cold)));
        let w50 = p50(warm.clone());
        println!("  warm acquire                         {:>8.3} ms / {:>8.3} ms  (target <= 1 ms)", ms(w50), ms(p90(warm)));
        let d50 = p50(direct.clone());
        println!(
            "  bash true via sandbox-host           {:>8.3} ms / {:>8.3} ms  = {:.2}x bare",
            ms(d50),
            ms(p90(direct)),
            d50.as_secs_f64() / bare50.as_secs_f64()
        );
        match lead {
            Some(l) => {
                let l50 = p50(l.clone());
                println!(
                    "  bash true via lead + sandbox-host    {:>8.3} ms / {:>8.3} ms  = {:.2}x bare  (target <= 2x)",
                    ms(l50),
                    ms(p90(l)),
                    l50.as_secs_f64() / bare50.as_secs_f64()
                );
            }
            None => println!("  bash true via lead: skipped (no `antler` binary next to antler-sandbox-host)"),
        }
        println!(
            "  {warm_count} warm sandboxes ({procs} processes): PSS {:.1} MiB (host alone {:.1}), RSS {:.1} MiB (host alone {:.1}); {:.2} MiB PSS per sandbox  (target <= 300 MiB)",
            pss as f64 / 1024.0,
            pss0 as f64 / 1024.0,
            rss as f64 / 1024.0,
            rss0 as f64 / 1024.0,
            (pss - pss0) as f64 / 1024.0 / warm_count.max(1) as f64
        );
    });
    drop(host);
}

/// `antler up` with this config, then `bash true` forwarded through the lead.
async fn lead_leg(exe: &Path, dir: &Path, config: &Path, base: &Path) -> Option<Vec<Duration>> {
    let antler = exe.parent()?.join("antler");
    if !antler.exists() {
        return None;
    }
    let run = dir.join("run");
    let _up = Proc(
        Command::new(&antler)
            .arg("--runtime-dir")
            .arg(&run)
            .args(["up", "--workers", "1"])
            .env("ANTLER_CONFIG", config)
            .env("ANTLER_SANDBOX_BASE_DIR", base)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .ok()?,
    );
    wait_for_file(&run.join("lead.sock"));
    wait_for_file(&run.join("sandbox-host.sock"));
    let token = std::fs::read_to_string(run.join("cluster.token")).ok()?;
    let me = Identity::new(Role::Cli, "bench-cli", Some(token.trim().to_string()));
    let lead = dial(
        &Address::Unix(run.join("lead.sock")),
        &me,
        ConnectionConfig::default(),
        None,
    )
    .await
    .ok()?;
    let forward = |r: SandboxRequest| {
        Request::Lead(LeadRequest::Forward {
            role: Role::SandboxHost,
            index: 0,
            request: Box::new(Request::Sandbox(r)),
            timeout_ms: 30_000,
        })
    };
    let via_lead = |r: SandboxRequest| {
        let lead = lead.clone();
        let req = forward(r);
        async move {
            // The lead's link to sandbox-host may still be coming up.
            for _ in 0..100 {
                match lead
                    .request(
                        req.clone(),
                        TraceContext::new_root(),
                        Duration::from_secs(30),
                    )
                    .await
                {
                    Ok(Reply::Lead(LeadReply::Forwarded(r))) => match *r {
                        Reply::Sandbox(s) => return s,
                        other => panic!("unexpected {other:?}"),
                    },
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            panic!("the lead never reached sandbox-host");
        }
    };
    let id = match via_lead(SandboxRequest::Acquire {
        principal: principal("lead-calls"),
        known_id: None,
        owner: None,
    })
    .await
    {
        SandboxReply::Acquired(Ok(a)) => a.sandbox_id,
        other => panic!("acquire via lead: {other:?}"),
    };
    let mut times = Vec::new();
    for _ in 0..ITER {
        let t = Instant::now();
        match via_lead(SandboxRequest::Call {
            sandbox_id: id.clone(),
            call: bash_true(),
            owner: None,
            call_id: None,
        })
        .await
        {
            SandboxReply::ToolResult(Ok(r)) => assert_eq!(r.content, "(no output)"),
            other => panic!("call via lead: {other:?}"),
        }
        times.push(t.elapsed());
    }
    Some(times)
}
