//! A caller that waits alone for its reply is woken by the kernel and reads the reply on
//! its own thread: the process's I/O thread is not woken for it, so a round trip costs the
//! caller's wake and no other. With other requests in flight, replies come by the I/O
//! thread, which is then woken for each. The peer runs in another process (this test
//! binary run again), as hosts do, so that no thread of this process serves it.
//!
//! This file holds one test (and the child's part): every test of a binary shares its one
//! I/O thread, whose wakes are what is counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::common_peer::*;
use antler_protocol::{link::dial, Address, ConnectionConfig, Identity, Role, TraceContext};

const SERVE: &str = "ANTLER_TEST_SERVE_AT";

/// The child's part: serves the test service at `$ANTLER_TEST_SERVE_AT` until its stdin
/// closes. Run alone (no such variable), it does nothing.
#[test]
fn serve_for_parent() {
    let Ok(path) = std::env::var(SERVE) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let address = Address::Unix(path.into());
        let _server = serve_at(&address, ConnectionConfig::default(), Default::default()).await;
        println!("peer-ready");
        tokio::task::spawn_blocking(|| {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        })
        .await
        .unwrap();
    });
}

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve_in_child(path: &std::path::Path) -> Served {
    // The child's test by its full name in this binary (its module path, less the crate).
    let serve = format!(
        "{}::serve_for_parent",
        module_path!().split_once("::").unwrap().1
    );
    let mut child = Served(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", serve.as_str(), "--nocapture", "--test-threads=1"])
            .env(SERVE, path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = BufReader::new(child.0.stdout.take().unwrap());
    for line in out.lines() {
        if line.unwrap().ends_with("peer-ready") {
            return child;
        }
    }
    panic!("the serving child ended before it was ready");
}

/// Context switches of this process's I/O thread so far.
fn io_thread_switches() -> u64 {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "antler-io" {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        return status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum();
    }
    panic!("no antler-io thread in this process");
}

const ROUND_TRIPS: u64 = 400;

#[tokio::test(flavor = "current_thread")]
async fn a_lone_caller_reads_its_reply_without_waking_the_io_thread() {
    let _alone = crate::ALONE.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("peer.sock");
    let _child = serve_in_child(&path);
    let c = dial(
        &Address::Unix(path),
        &Identity::new(Role::Lead, "lead", Some(TOKEN.into())),
        ConnectionConfig::default(),
        None,
    )
    .await
    .unwrap();
    let ping_all = |label: &'static str| {
        let c = c.clone();
        async move {
            for i in 0..ROUND_TRIPS {
                let payload = format!("{label} {i}");
                let reply = c
                    .request(
                        ping(payload.as_bytes()),
                        TraceContext::default(),
                        Duration::from_secs(10),
                    )
                    .await
                    .unwrap();
                assert_eq!(reply, pong(payload.as_bytes()));
            }
        }
    };
    ping_all("warm").await;

    let before = io_thread_switches();
    ping_all("alone").await;
    let alone = io_thread_switches() - before;

    // The same round trips with a streamed request in flight all along (whose caller
    // never watches the socket): each reply now comes by the I/O thread.
    let long = c
        .request_stream(
            ping(b"sleep:60000"),
            TraceContext::default(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = io_thread_switches();
    ping_all("beside").await;
    let beside = io_thread_switches() - before;
    drop(long);

    eprintln!(
        "I/O thread wakes in {ROUND_TRIPS} round trips: alone {alone}, beside a stream {beside}"
    );
    assert!(
        alone < ROUND_TRIPS / 10,
        "the I/O thread was woken {alone} times in {ROUND_TRIPS} round trips of a lone caller"
    );
    assert!(
        beside >= ROUND_TRIPS / 2,
        "with another request in flight the I/O thread should read the replies, but was \
         woken only {beside} times in {ROUND_TRIPS} round trips"
    );
}
