//! The end-to-end bench (issue 32): a four-turn run through the gateway against a real
//! cluster, its model a replaying OpenAI-compatible server in this process (streamed
//! chat-completion chunks: bash writes a file, read_file reads it, present_files presents
//! it, then an answer). The reply is chosen by the request's count of assistant messages,
//! so runs served at once each get their four turns. Each run is `POST /api/runs` then
//! `GET /api/runs/{id}/events` on the same keep-alive connection until `event: end`.
//!
//! For the local provider and bubblewrap: runs one after another, then from 20 clients at
//! once. Prints per-run p50 and p90, runs/s, CPU per run (from `/proc/<pid>/stat`: the lead
//! and every process under it, orphans adopted by this process included), and the ratio to
//! a floor sampled before and after each phase: the replaying server's own round trips for
//! the four replies plus a bare `bash -c`. Targets are printed, never asserted (the machine
//! is shared). Exits 1 when a run fails or a tool result is not what the replies expect.
//! The cluster and the server stop when dropped, on a panic too.
//!
//! `cargo build --workspace --bins --release`, then
//! `cargo bench -p antler-tests --bench e2e` (the binaries beside it, in `target/release`;
//! `ANTLER_BIN_DIR` names others). Counts: `ANTLER_E2E_SEQUENTIAL` (200),
//! `ANTLER_E2E_CONCURRENT` (400), `ANTLER_E2E_CLIENTS` (20), `ANTLER_E2E_PROVIDERS`
//! (`local,bwrap`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

// The bench uses part of the suites' support module.
#[allow(dead_code)]
#[path = "../tests/lead_support/mod.rs"]
mod lead_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lead_support::LeadCluster;
use serde_json::{json, Value};

/// What the run's bash writes and its read_file must read back.
const MARKER: &str = "antler e2e bench";
/// The file the run writes, reads and presents.
const NOTE: &str = "/mnt/user-data/outputs/note.txt";
/// Model turns of a run.
const TURNS: usize = 4;
/// Runs before the measured ones (the first sandbox of a cluster is made here).
const WARM_UP: usize = 10;
/// Samples of each half of the floor, before a phase and again after it.
const FLOOR_SAMPLES: usize = 100;

// ---- The replaying model ----------------------------------------------------------

/// The streamed reply of turn `turn`: one chunk with the content or the tool call, one
/// with the finish reason, the usage, `[DONE]`; as a whole HTTP response.
fn reply(turn: usize) -> Vec<u8> {
    let call = |name: &str, args: Value| {
        json!([{"index": 0, "id": format!("call_{turn}"), "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}])
    };
    let (delta, finish) = match turn {
        0 => (
            json!({"role": "assistant", "content": "", "tool_calls": call("bash",
                json!({"description": "Write the note", "command": format!("echo '{MARKER}' > {NOTE}")}))}),
            "tool_calls",
        ),
        1 => (
            json!({"role": "assistant", "content": "", "tool_calls": call("read_file",
                json!({"description": "Read the note", "path": NOTE}))}),
            "tool_calls",
        ),
        2 => (
            json!({"role": "assistant", "content": "", "tool_calls": call("present_files",
                json!({"filepaths": [NOTE]}))}),
            "tool_calls",
        ),
        _ => (
            json!({"role": "assistant", "content": format!("The note is ready at {NOTE}.")}),
            "stop",
        ),
    };
    let chunk = |choices: Value| json!({"id": format!("replay-{turn}"), "object": "chat.completion.chunk", "model": "replay", "choices": choices});
    let mut usage = chunk(json!([]));
    usage["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
    let body = format!(
        "data: {}\n\ndata: {}\n\ndata: {usage}\n\ndata: [DONE]\n\n",
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish}])),
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the replaying server saw: a request body of each turn (the floor replays them),
/// and the requests whose last tool result was not what the replies asked for.
#[derive(Default)]
struct Seen {
    bodies: Mutex<[Option<Vec<u8>>; TURNS]>,
    wrong: AtomicUsize,
}

impl Seen {
    /// Keeps `body` as turn `turn`'s sample and checks the tool result it carries.
    fn check(&self, turn: usize, body: &[u8], request: &Value) {
        let mut bodies = self.bodies.lock().unwrap();
        bodies[turn.min(TURNS - 1)].get_or_insert_with(|| body.to_vec());
        drop(bodies);
        let Some(last) = request["messages"].as_array().and_then(|m| m.last()) else {
            self.wrong.fetch_add(1, Ordering::SeqCst);
            return;
        };
        let content = last["content"].as_str().unwrap_or_default();
        let expected = match turn {
            0 => last["role"] == "user",
            2 => last["role"] == "tool" && content.contains(MARKER),
            1 | 3 => last["role"] == "tool" && !content.starts_with("Error"),
            _ => false,
        };
        if !expected && self.wrong.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("turn {turn}: unexpected last message {last}");
        }
    }
}

/// The replaying OpenAI-compatible server: a thread accepting connections, a thread per
/// keep-alive connection. Dropping it closes every connection and joins every thread.
struct ReplayServer {
    base_url: String,
    addr: String,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl ReplayServer {
    fn start() -> ReplayServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the replaying server");
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        let replies: Arc<Vec<Vec<u8>>> = Arc::new((0..TURNS).map(reply).collect());
        let acceptor = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut connections: Vec<(TcpStream, JoinHandle<()>)> = Vec::new();
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let _ = stream.set_nodelay(true);
                    let Ok(handle) = stream.try_clone() else {
                        continue;
                    };
                    let (seen, replies) = (seen.clone(), replies.clone());
                    let worker = std::thread::spawn(move || serve(stream, &seen, &replies));
                    connections.push((handle, worker));
                }
                for (stream, worker) in connections {
                    let _ = stream.shutdown(Shutdown::Both);
                    let _ = worker.join();
                }
            })
        };
        ReplayServer {
            base_url: format!("http://{addr}/v1"),
            addr,
            seen,
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees `stop`.
        let _ = TcpStream::connect(&self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Answers the requests of one connection until its peer closes it.
fn serve(stream: TcpStream, seen: &Seen, replies: &[Vec<u8>]) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut started = false;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" && started {
                break;
            }
            started = true;
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let turn = request["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
            .unwrap_or(0);
        seen.check(turn, &body, &request);
        if writer.write_all(&replies[turn.min(TURNS - 1)]).is_err() {
            return;
        }
    }
}

// ---- A keep-alive HTTP/1.1 client ---------------------------------------------------

/// The head of a response.
struct Head {
    status: u16,
    length: Option<usize>,
    chunked: bool,
    close: bool,
    retry_after: Option<u64>,
}

/// One keep-alive connection to `addr`, opened again when the server closed it.
struct HttpConn {
    addr: String,
    token: String,
    stream: Option<BufReader<TcpStream>>,
}

impl HttpConn {
    fn new(addr: &str, token: &str) -> HttpConn {
        HttpConn {
            addr: addr.to_owned(),
            token: token.to_owned(),
            stream: None,
        }
    }

    /// Sends a request and reads the response's head. A connection the server closed
    /// while idle is opened again once (nothing was read from it, so nothing was done).
    fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<Head, String> {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            self.token,
            body.len()
        );
        let mut message = request.into_bytes();
        message.extend_from_slice(body);
        for attempt in 0..2 {
            let fresh = self.stream.is_none();
            if fresh {
                let stream = TcpStream::connect(&self.addr).map_err(|e| format!("connect: {e}"))?;
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                stream
                    .set_read_timeout(Some(Duration::from_secs(120)))
                    .map_err(|e| e.to_string())?;
                self.stream = Some(BufReader::new(stream));
            }
            let reader = self.stream.as_mut().unwrap();
            let sent = reader.get_mut().write_all(&message);
            let head = sent
                .map_err(|e| e.to_string())
                .and_then(|_| read_head(reader));
            match head {
                Ok(Some(head)) => return Ok(head),
                Ok(None) | Err(_) if !fresh && attempt == 0 => self.stream = None,
                Ok(None) => return Err("the server closed the connection".into()),
                Err(e) => return Err(e),
            }
        }
        Err("the server closed the connection".into())
    }

    /// Reads a whole body (after [`HttpConn::send`]).
    fn body(&mut self, head: &Head) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        if head.chunked {
            self.chunks(|chunk| {
                out.extend_from_slice(chunk);
                false
            })?;
        } else {
            out.resize(head.length.unwrap_or(0), 0);
            let reader = self.stream.as_mut().unwrap();
            reader.read_exact(&mut out).map_err(|e| e.to_string())?;
        }
        if head.close {
            self.stream = None;
        }
        Ok(out)
    }

    /// Reads a chunked body to its last chunk, handing each chunk to `f` (which says
    /// whether it has seen what it waited for; it is not called after that).
    fn chunks(&mut self, mut f: impl FnMut(&[u8]) -> bool) -> Result<(), String> {
        let reader = self.stream.as_mut().unwrap();
        let mut done = false;
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).map_err(|e| e.to_string())?;
            let size = size.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16).map_err(|e| format!("chunk size: {e}"))?;
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).map_err(|e| e.to_string())?;
            if size == 0 {
                return Ok(());
            }
            if !done {
                done = f(&chunk[..size]);
            }
        }
    }
}

/// A response's head, or `None` when the connection closed before it began.
fn read_head(reader: &mut BufReader<TcpStream>) -> Result<Option<Head>, String> {
    let mut status_line = String::new();
    if reader
        .read_line(&mut status_line)
        .map_err(|e| e.to_string())?
        == 0
    {
        return Ok(None);
    }
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {status_line}"))?;
    let mut head = Head {
        status,
        length: None,
        chunked: false,
        close: false,
        retry_after: None,
    };
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("the response's head was cut".into());
        }
        if line == "\r\n" {
            return Ok(Some(head));
        }
        let line = line.to_ascii_lowercase();
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name {
            "content-length" => head.length = value.parse().ok(),
            "transfer-encoding" => head.chunked = value.contains("chunked"),
            "connection" => head.close = value == "close",
            "retry-after" => head.retry_after = value.parse().ok(),
            _ => {}
        }
    }
}

// ---- Runs and measures --------------------------------------------------------------

/// One run through the gateway: its time from the submission to `event: end`, and the
/// 503s it was answered before it was accepted (their waits are in the time).
fn run_once(conn: &mut HttpConn, n: usize) -> Result<(Duration, usize), String> {
    let body = json!({"task": format!("Write a note, read it back and present it ({n})"), "user": "bench"})
        .to_string();
    let started = Instant::now();
    let mut busy = 0;
    let run_id = loop {
        let head = conn.send("POST", "/api/runs", body.as_bytes())?;
        let text = conn.body(&head)?;
        let text = String::from_utf8_lossy(&text);
        match head.status {
            201 => {
                break serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v["run_id"].as_str().map(str::to_owned))
                    .ok_or_else(|| format!("201 without a run id: {text}"))?
            }
            503 if busy < 30 => {
                busy += 1;
                std::thread::sleep(Duration::from_secs(head.retry_after.unwrap_or(1)));
            }
            other => return Err(format!("POST /api/runs: {other}: {text}")),
        }
    };
    let head = conn.send("GET", &format!("/api/runs/{run_id}/events"), b"")?;
    if head.status != 200 || !head.chunked {
        let text = conn.body(&head)?;
        return Err(format!(
            "events of {run_id}: {}: {}",
            head.status,
            String::from_utf8_lossy(&text)
        ));
    }
    let mut events = Vec::new();
    let mut ended = None;
    conn.chunks(|chunk| {
        events.extend_from_slice(chunk);
        let text = String::from_utf8_lossy(&events);
        let view = text
            .split_once("event: end\ndata: ")
            .and_then(|(_, rest)| rest.split_once("\n\n"))
            .map(|(data, _)| data.to_owned());
        if let Some(view) = view {
            ended = Some((started.elapsed(), view));
        }
        ended.is_some()
    })?;
    if head.close {
        conn.stream = None;
    }
    let (took, view) =
        ended.ok_or_else(|| format!("the events of {run_id} ended without `end`"))?;
    let view: Value = serde_json::from_str(&view).map_err(|e| format!("{e}: {view}"))?;
    if view["status"] != "success" {
        return Err(format!("run {run_id} ended {}: {view}", view["status"]));
    }
    Ok((took, busy))
}

/// Fields 14 to 17 of `/proc/<pid>/stat` (utime, stime, and the same of its reaped
/// children), in clock ticks; empty when the process is gone.
fn cpu_fields(pid: &str) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the name: state (field 3), ppid (4), ..., utime (14) to cstime (17).
    fields
        .get(11..15)
        .map(|f| f.iter().map(|v| v.parse().unwrap_or(0)).collect())
        .unwrap_or_default()
}

/// Every process: (pid, parent, state).
fn processes() -> Vec<(u32, u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let state = rest.next()?.chars().next()?;
            Some((pid, rest.next()?.parse().ok()?, state))
        })
        .collect()
}

/// Makes this process the reaper of its descendants' orphans: a sandbox's supervisor
/// outlives its bwrap, and its CPU time (with its commands') would be lost with init.
fn adopt_orphans() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER reads no memory.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Reaps the orphans that ended, but not `keep` (the lead: its `Child` reaps it).
fn reap_orphans(keep: Option<u32>) {
    let me = std::process::id();
    for (pid, ppid, state) in processes() {
        if ppid == me && state == 'Z' && Some(pid) != keep {
            // SAFETY: waitpid on a child of this process that has ended; no status read.
            unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// CPU time so far of the cluster led by `lead`, in ms: every process under this one
/// but itself (the lead, its hosts and what they run, the orphans adopted), alive or
/// ended and not reaped, and what this process reaped of them.
fn cluster_cpu_ms(lead: u32) -> f64 {
    reap_orphans(Some(lead));
    let procs = processes();
    let mut tree = vec![std::process::id()];
    let mut i = 0;
    while i < tree.len() {
        let of = tree[i];
        tree.extend(procs.iter().filter(|p| p.1 == of).map(|p| p.0));
        i += 1;
    }
    let descendants: u64 = tree[1..]
        .iter()
        .map(|p| cpu_fields(&p.to_string()).iter().sum::<u64>())
        .sum();
    let reaped: u64 = cpu_fields("self").iter().skip(2).sum();
    (descendants + reaped) as f64 * 1000.0 / clock_ticks_per_s()
}

/// This process's own CPU time so far (the clients and the replaying server), in ms.
fn own_cpu_ms() -> f64 {
    let f = cpu_fields("self");
    f.iter().take(2).sum::<u64>() as f64 * 1000.0 / clock_ticks_per_s()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The floor of a run, sampled: the replaying server's own round trips for the four
/// replies (the bodies a run sent, on one keep-alive connection), and a bare `bash -c`
/// writing the note. Added to `samples`.
fn floor(
    server: &ReplayServer,
    dir: &std::path::Path,
    samples: &mut (Vec<Duration>, Vec<Duration>),
) {
    let bodies: Vec<Vec<u8>> = server
        .seen
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b.clone().unwrap_or_default())
        .collect();
    let mut conn = HttpConn::new(&server.addr, "sk-bench");
    let (model, bash) = samples;
    for _ in 0..FLOOR_SAMPLES {
        let t = Instant::now();
        for body in &bodies {
            let head = conn
                .send("POST", "/v1/chat/completions", body)
                .expect("the replaying server");
            conn.body(&head).expect("the replaying server's reply");
        }
        model.push(t.elapsed());
    }
    let note = dir.join("note.txt");
    for _ in 0..FLOOR_SAMPLES {
        let t = Instant::now();
        let status = Command::new("bash")
            .arg("-c")
            .arg(format!("echo '{MARKER}' > {}", note.display()))
            .status()
            .expect("bash");
        assert!(status.success());
        bash.push(t.elapsed());
    }
}

/// What one phase measured.
struct Phase {
    runs: usize,
    failed: usize,
    busy: usize,
    times: Vec<Duration>,
    wall: Duration,
    cpu_ms: f64,
    own_cpu_ms: f64,
}

/// `runs` runs from `clients` clients at once (1: one after another).
fn phase(cluster: &LeadCluster, clients: usize, runs: usize, first: usize) -> Phase {
    let (addr, token) = (cluster.gateway(), cluster.gateway_token());
    let lead = cluster.lead_pid();
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let cpu_before = cluster_cpu_ms(lead);
    let own_before = own_cpu_ms();
    let started = Instant::now();
    let results: Vec<(Duration, usize)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let (addr, token, next, failed) = (&addr, &token, &next, &failed);
                s.spawn(move || {
                    let mut conn = HttpConn::new(addr, token);
                    let mut mine = Vec::new();
                    loop {
                        let n = next.fetch_add(1, Ordering::SeqCst);
                        if n >= runs {
                            return mine;
                        }
                        match run_once(&mut conn, first + n) {
                            Ok(r) => mine.push(r),
                            Err(e) => {
                                if failed.fetch_add(1, Ordering::SeqCst) < 3 {
                                    eprintln!("run failed: {e}");
                                }
                                conn.stream = None;
                            }
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let wall = started.elapsed();
    let cpu_ms = cluster_cpu_ms(lead) - cpu_before;
    let own_cpu_ms = own_cpu_ms() - own_before;
    let mut times: Vec<Duration> = results.iter().map(|(t, _)| *t).collect();
    times.sort();
    Phase {
        runs,
        // A client that panicked returned none of its runs: they count as failed too.
        failed: runs - results.len(),
        busy: results.iter().map(|(_, b)| b).sum(),
        times,
        wall,
        cpu_ms,
        own_cpu_ms,
    }
}

/// Prints a phase's figures, its floor (sampled before and after it) and the ratios, and
/// whether the targets were met.
fn report(provider: &str, clients: usize, p: &Phase, (model, bash): (Duration, Duration)) {
    let p50 = percentile(&p.times, 0.5);
    let rate = p.runs as f64 / p.wall.as_secs_f64().max(1e-9);
    let per_run = p.wall / p.runs.max(1) as u32;
    let floor = model + bash;
    let label = if clients == 1 {
        "sequential".to_owned()
    } else {
        format!("{clients} concurrent")
    };
    let met = |ok: bool| if ok { "met" } else { "MISSED" };
    let target = match (provider, clients) {
        ("local", 1) => format!(
            "; target p50 <= 12 ms: {}",
            met(p50 <= Duration::from_millis(12))
        ),
        (_, c) if c > 1 => format!("; target >= 100 runs/s: {}", met(rate >= 100.0)),
        _ => String::new(),
    };
    println!(
        "{provider}, {label}: {} runs ({} failed, {} 503s): p50 {:.2} ms, p90 {:.2} ms, {rate:.1} runs/s; CPU per run {:.2} ms in the cluster, {:.2} ms in the bench (clients and model)",
        p.runs,
        p.failed,
        p.busy,
        ms(p50),
        ms(percentile(&p.times, 0.9)),
        p.cpu_ms / p.runs.max(1) as f64,
        p.own_cpu_ms / p.runs.max(1) as f64,
    );
    println!(
        "  floor {:.2} ms (the replaying server's {TURNS} round trips p50 {:.2} ms + a bare `bash -c` p50 {:.2} ms): p50 {:.1}x the floor, wall time per run ({:.2} ms) {:.1}x{target}",
        ms(floor),
        ms(model),
        ms(bash),
        ratio(p50, floor),
        ms(per_run),
        ratio(per_run, floor),
    );
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// config.yaml: the replaying model, bash and read_file, and `sandbox`.
fn config(base_url: &str, sandbox: &str) -> String {
    format!(
        "models:\n  - name: replay\n    use: langchain_openai:ChatOpenAI\n    model: replay\n    base_url: {base_url}\n    api_key: sk-bench\ntool_search:\n  enabled: false\ntools:\n  - {{name: bash, group: bash, use: \"deerflow.sandbox.tools:bash_tool\"}}\n  - {{name: read_file, group: file:read, use: \"deerflow.sandbox.tools:read_file_tool\"}}\nsandbox:\n{sandbox}"
    )
}

fn main() -> ExitCode {
    let sequential = count("ANTLER_E2E_SEQUENTIAL", 200);
    let concurrent = count("ANTLER_E2E_CONCURRENT", 400);
    let clients = count("ANTLER_E2E_CLIENTS", 20).max(1);
    let providers = std::env::var("ANTLER_E2E_PROVIDERS").unwrap_or_else(|_| "local,bwrap".into());
    adopt_orphans();
    let server = ReplayServer::start();
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut failures = 0;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "e2e: a run of {TURNS} streamed model turns (bash writes a file, read_file, present_files, an answer) through the gateway, POST /api/runs then its events until `end`, the model a replaying server in this process; load average {}",
        load.join(" ")
    );
    for provider in providers.split(',').map(str::trim) {
        let sandbox = match provider {
            "local" => {
                "  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\n"
            }
            "bwrap" => "  use: deerflow.community.aio_sandbox:AioSandboxProvider\n",
            other => {
                eprintln!("unknown provider {other}: local or bwrap");
                return ExitCode::FAILURE;
            }
        };
        let cluster = LeadCluster::up(
            &config(&server.base_url, sandbox),
            &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")],
        );
        let warm = phase(&cluster, 1, WARM_UP, 0);
        if warm.failed > 0 {
            eprintln!(
                "{provider}: {} of {WARM_UP} warm-up runs failed",
                warm.failed
            );
            failures += warm.failed;
            continue;
        }
        for (clients, runs, first) in [
            (1, sequential, WARM_UP),
            (clients, concurrent, WARM_UP + sequential),
        ] {
            // Sampled on both sides of the phase, as the machine's state drifts.
            let mut samples = (Vec::new(), Vec::new());
            floor(&server, scratch.path(), &mut samples);
            let p = phase(&cluster, clients, runs, first);
            floor(&server, scratch.path(), &mut samples);
            samples.0.sort();
            samples.1.sort();
            let floor = (percentile(&samples.0, 0.5), percentile(&samples.1, 0.5));
            failures += p.failed;
            report(provider, clients, &p, floor);
        }
        drop(cluster);
        reap_orphans(None);
    }
    let wrong = server.seen.wrong.load(Ordering::SeqCst);
    if wrong > 0 {
        eprintln!("{wrong} model requests carried a tool result the replies did not ask for");
    }
    drop(server);
    if failures > 0 || wrong > 0 {
        eprintln!("e2e: {failures} runs failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
