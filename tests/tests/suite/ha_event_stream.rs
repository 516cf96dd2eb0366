//! A run's event stream across leads and across a takeover (issue 38): two `antler up`
//! leads with gateways on one PostgreSQL. Lead A drives a run; a client following it
//! through lead B (which does not drive it) sees A's events as they happen; a second client
//! follows it on A and, when A is killed mid-run, reconnects to B with the last event id it
//! got. B takes the run over and completes it. Both clients end with the run's `end`
//! (`success`); each saw every event the store keeps for the run, in order, none twice, one
//! `lead_takeover` among them; the reconnected client got nothing it had already seen.
//! And a stream on the lead that does not drive the run is woken by the run's notices
//! (PostgreSQL's `NOTIFY`), not by reading the store at an interval.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use antler_tests::wait_for;
use serde_json::{json, Value};

use crate::lead_support::http_full;
use crate::pg_support::leads::{workdir, Lead};
use crate::pg_support::{connect, database};
use antler_lead::runs::store::notices::POLL_WHILE_LISTENING_ENV;

const ALICE: &str = "alice-token-000000000001";
const OPERATOR: &str = "operator-token-0000000000000003";

/// A first step checkpointed, then the model "thinks" long enough for A to be killed in it.
const PLAYBOOK: &str = r#"
turns:
  - tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 6000
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
"#;

/// An HTTP/1.1 chunked body, decoded.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            if self.inner.read_line(&mut line)? == 0 {
                self.done = true;
                return Ok(0);
            }
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(size, 16)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let take = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..take])?;
        if n == 0 {
            self.done = true;
            return Ok(0);
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = String::new();
            self.inner.read_line(&mut crlf)?;
        }
        Ok(n)
    }
}

/// One server-sent event: its kind, its id (if it has one) and its data.
#[derive(Clone, Debug)]
struct Frame {
    kind: String,
    id: Option<String>,
    data: Value,
}

/// `GET /api/runs/{id}/events` on `addr` as alice (after `last` when given), read as it
/// comes.
struct Stream {
    lines: BufReader<Chunked<BufReader<TcpStream>>>,
}

impl Stream {
    fn open(addr: &str, run_id: &str, last: Option<&str>) -> Stream {
        let mut tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
        let last = last.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            tcp,
            "GET /api/runs/{run_id}/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ALICE}\r\nAccept: text/event-stream\r\n{last}\r\n"
        )
        .unwrap();
        let mut head = BufReader::new(tcp);
        let mut status = String::new();
        head.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        let mut chunked = false;
        loop {
            let mut line = String::new();
            head.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            chunked |= line
                .to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked");
        }
        assert!(chunked, "the event stream is chunked");
        Stream {
            lines: BufReader::new(Chunked {
                inner: head,
                left: 0,
                done: false,
            }),
        }
    }

    /// The next event; `None` when the stream ends or breaks.
    fn next(&mut self) -> Option<Frame> {
        let (mut kind, mut id, mut data) = (String::new(), None, String::new());
        loop {
            let mut line = String::new();
            match self.lines.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if kind.is_empty() && data.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                return Some(Frame { kind, id, data });
            }
            if let Some(v) = line.strip_prefix("event: ") {
                kind = v.to_owned();
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
    }
}

/// Reads `stream` into `seen` on a thread of its own until it ends.
fn follow(mut stream: Stream, seen: Arc<Mutex<Vec<Frame>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while let Some(frame) = stream.next() {
            seen.lock().unwrap().push(frame);
        }
    })
}

/// `"{gen}-{seq}"` as a pair that orders as the run's history does.
fn order(id: &str) -> (u64, u64) {
    let (gen, seq) = id.split_once('-').expect("an id is gen-seq");
    (gen.parse().unwrap(), seq.parse().unwrap())
}

/// The ids of `frames`' run events, asserting they only grow.
fn ids_in_order(frames: &[Frame], who: &str) -> Vec<(u64, u64)> {
    let ids: Vec<(u64, u64)> = frames
        .iter()
        .filter(|f| f.kind == "run")
        .filter_map(|f| f.id.as_deref().map(order))
        .collect();
    for pair in ids.windows(2) {
        assert!(pair[0] < pair[1], "{who}: {:?} then {:?}", pair[0], pair[1]);
    }
    ids
}

fn takeovers(frames: &[Frame]) -> usize {
    frames
        .iter()
        .filter(|f| f.kind == "run" && f.data["event"] == "lead_takeover")
        .count()
}

/// A run of `playbook` submitted to the gateway at `addr` as alice: its id.
fn submit(addr: &str, playbook: &str) -> String {
    let body = json!({"task": "Write two files and present them", "playbook_yaml": playbook});
    let (code, _, text) = http_full(addr, ALICE, "POST", "/api/runs", Some(&body.to_string()));
    assert_eq!(code, 201, "{text}");
    serde_json::from_str::<Value>(&text).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The leads' config.yaml: a write tool, the sandbox, leases of 3 s, alice's token.
fn config() -> String {
    format!(
        "tools:\n  - {{name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}}\nsandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\ntool_search:\n  enabled: false\nantler:\n  ha:\n    lease_ttl_ms: 3000\n  gateway:\n    allow_scripted_models: true\n    tokens:\n      - {{token: {ALICE}, user: alice}}\n"
    )
}

/// The ids of the events the store keeps for `run_id`, in the run's order.
async fn stored_ids(pg: &tokio_postgres::Client, run_id: &str) -> Vec<(u64, u64)> {
    pg.query(
        "SELECT gen, seq FROM run_events WHERE run_id = $1 ORDER BY gen, seq",
        &[&run_id],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_follows_its_run_across_leads_and_a_takeover() {
    let db = database("ha_event_stream").await;
    let pg = connect(&db.dsn).await;
    let tmp = workdir("antler-ha-ev", &config());
    let dir = tmp.path();
    let mut lead_a = Some(Lead::up(dir, dir.join("a"), &db.dsn, OPERATOR));
    let lead_b = Lead::up(dir, dir.join("b"), &db.dsn, OPERATOR);
    let a = lead_a.as_ref().unwrap().gateway();
    let b = lead_b.gateway();

    let run_id = submit(&a, PLAYBOOK);

    // One client follows the run on B, which does not drive it; one on A, which does.
    let on_b = Arc::new(Mutex::new(Vec::new()));
    let on_a = Arc::new(Mutex::new(Vec::new()));
    let reader_b = follow(Stream::open(&b, &run_id, None), on_b.clone());
    let reader_a = follow(Stream::open(&a, &run_id, None), on_a.clone());

    // A drives it at epoch 1: its first step is checkpointed and the model "thinks".
    let row = pg
        .query_one("SELECT epoch FROM run_leases WHERE run_id = $1", &[&run_id])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let steps: i64 = pg
            .query_one(
                "SELECT count(*) FROM checkpoints WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .unwrap()
            .get(0);
        if steps >= 3 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the first step was never checkpointed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // B's client sees A's first tool call as it happens (from the store, as A writes it).
    let finished = |frames: &Arc<Mutex<Vec<Frame>>>| {
        frames
            .lock()
            .unwrap()
            .iter()
            .any(|f| f.data["event"] == "tool_finished")
    };
    assert!(
        wait_for(Duration::from_secs(30), || finished(&on_b).then_some(())).is_some(),
        "B's client never saw A's first tool call: {:?}",
        on_b.lock().unwrap()
    );
    assert!(wait_for(Duration::from_secs(30), || finished(&on_a).then_some(())).is_some());

    // A dies mid-run; its client's stream breaks, and it reconnects to B with the last id
    // it got.
    drop(lead_a.take());
    reader_a.join().unwrap();
    let before: Vec<Frame> = on_a.lock().unwrap().clone();
    assert!(
        before.iter().all(|f| f.kind != "end"),
        "A's stream ended before A died"
    );
    let last = before
        .iter()
        .rev()
        .find_map(|f| f.id.clone())
        .expect("A's client got ids");
    let after = Arc::new(Mutex::new(Vec::new()));
    follow(Stream::open(&b, &run_id, Some(&last)), after.clone())
        .join()
        .unwrap();
    reader_b.join().unwrap();
    let after: Vec<Frame> = after.lock().unwrap().clone();
    let on_b: Vec<Frame> = on_b.lock().unwrap().clone();

    // Both end with the run's success on B, at epoch 2, with one takeover among its events.
    for (who, frames) in [("reconnected", &after), ("on B", &on_b)] {
        let end = frames.last().expect("events");
        assert_eq!(end.kind, "end", "{who}: {frames:?}");
        assert_eq!(end.data["status"], "success", "{who}: {}", end.data);
    }
    assert_eq!(takeovers(&after), 1, "{after:?}");
    assert_eq!(takeovers(&on_b), 1, "{on_b:?}");
    assert_eq!(takeovers(&before), 0);

    // What the store keeps of the run, in its order.
    let stored = stored_ids(&pg, &run_id).await;
    assert!(stored.iter().any(|(gen, _)| *gen == 1), "{stored:?}");
    assert!(stored.iter().any(|(gen, _)| *gen >= 2), "{stored:?}");

    // B's client, never reconnected: every stored event once, in order.
    let ids_b = ids_in_order(&on_b, "on B");
    assert_eq!(ids_b, stored, "the stream through B is the run's history");

    // The reconnected client: nothing twice across its two connections, nothing lost.
    let first = ids_in_order(&before, "on A");
    let second = ids_in_order(&after, "reconnected");
    assert!(
        second.first().is_some_and(|id| Some(id) > first.last()),
        "the reconnected stream starts after the last id: {first:?} then {second:?}"
    );
    let seen: HashSet<(u64, u64)> = first.iter().chain(&second).copied().collect();
    assert_eq!(
        seen.len(),
        first.len() + second.len(),
        "an event came twice"
    );
    for id in &stored {
        assert!(
            seen.contains(id),
            "event {id:?} was lost: {first:?} {second:?}"
        );
    }
    // Whatever it saw that the store lacks, A showed and died before writing (A's epoch).
    for id in &seen {
        assert!(
            stored.contains(id) || id.0 == 1,
            "{id:?} is no event of the run"
        );
    }
    drop(lead_b);
}

/// Steps a stream on another lead must see as they happen: each after a pause.
const STEPS: &str = r#"
turns:
  - delay_ms: 1500
    tool_calls:
      - {name: write_file, args: {description: first, path: /mnt/user-data/outputs/a.md, content: a}}
  - delay_ms: 500
    tool_calls:
      - {name: write_file, args: {description: second, path: /mnt/user-data/outputs/b.md, content: b}}
  - delay_ms: 500
    tool_calls:
      - {name: present_files, args: {filepaths: ["/mnt/user-data/outputs/a.md", "/mnt/user-data/outputs/b.md"]}}
  - content: Both files are written and presented.
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_another_lead_is_woken_by_the_runs_notices() {
    let db = database("ha_event_notices").await;
    let pg = connect(&db.dsn).await;
    let tmp = workdir("antler-ha-nt", &config());
    let dir = tmp.path();
    // While notices come, the leads read a stream's run from the store only every ten
    // minutes: what B's client sees, it sees because A's writes notified it.
    let env = [(POLL_WHILE_LISTENING_ENV, "600000")];
    let lead_a = Lead::up_with(dir, dir.join("a"), &db.dsn, OPERATOR, &env);
    let lead_b = Lead::up_with(dir, dir.join("b"), &db.dsn, OPERATOR, &env);
    let (a, b) = (lead_a.gateway(), lead_b.gateway());
    // Both listen (each lead's gateway starts its listener).
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let listening: i64 = pg
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND query = 'LISTEN antler_run_events'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if listening == 2 {
            break;
        }
        assert!(Instant::now() < until, "{listening} leads listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let run_id = submit(&a, STEPS);
    let on_b = Arc::new(Mutex::new(Vec::new()));
    let reader = follow(Stream::open(&b, &run_id, None), on_b.clone());
    let ended = wait_for(Duration::from_secs(60), || {
        reader.is_finished().then_some(())
    });
    let frames: Vec<Frame> = on_b.lock().unwrap().clone();
    assert!(ended.is_some(), "B's stream did not end: {frames:?}");
    reader.join().unwrap();

    // It saw the whole run, ending in its success, every event the store keeps.
    let end = frames.last().expect("events");
    assert_eq!(end.kind, "end", "{frames:?}");
    assert_eq!(end.data["status"], "success", "{}", end.data);
    let stored = stored_ids(&pg, &run_id).await;
    assert_eq!(ids_in_order(&frames, "on B"), stored);
    let tools = frames
        .iter()
        .filter(|f| f.data["event"] == "tool_finished")
        .count();
    assert_eq!(tools, 3, "{frames:?}");
}
