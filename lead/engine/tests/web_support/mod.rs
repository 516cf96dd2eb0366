//! Shared by the web tool tests: a stand-in HTTP server on loopback (a free port) that
//! records each request and answers with what the test's handler says, and a way to run
//! one web tool call from a `tools:` entry as config.yaml writes it, on a thread whose
//! directories are under a temporary directory. The server's task is owned by the
//! [`StandIn`] and stops when it is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_engine::{Message, ThreadFiles, ThreadPaths, ToolCall, ToolStatus, WebTools};
use antler_protocol::config::ToolConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request the stand-in got.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Lower-cased names.
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
    pub fn query(&self) -> Vec<(String, String)> {
        let url = reqwest::Url::parse(&format!("http://x{}", self.target)).unwrap();
        url.query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }
}

/// A reply: status, headers, body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wait this long before answering (a backend that is too slow).
    pub delay: Duration,
}

impl Reply {
    pub fn json(body: Value) -> Reply {
        Reply::with(200, "application/json", body.to_string())
    }
    pub fn html(body: &str) -> Reply {
        Reply::with(200, "text/html; charset=utf-8", body.to_owned())
    }
    pub fn with(status: u16, content_type: &str, body: String) -> Reply {
        Reply::bytes(status, content_type, body.into_bytes())
    }
    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
            delay: Duration::ZERO,
        }
    }
    pub fn redirect(location: &str) -> Reply {
        Reply {
            status: 302,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
            delay: Duration::ZERO,
        }
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A stand-in for a backend's API or a web site, on 127.0.0.1.
pub struct StandIn {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    pub async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let handler = Arc::clone(&handler);
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    let reply = handler(&request);
                    log.lock().unwrap().push(request);
                    if !reply.delay.is_zero() {
                        tokio::time::sleep(reply.delay).await;
                    }
                    let mut head = format!(
                        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                        reply.status,
                        reply.body.len()
                    );
                    for (k, v) in &reply.headers {
                        head.push_str(&format!("{k}: {v}\r\n"));
                    }
                    head.push_str("\r\n");
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(&reply.body).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        StandIn { port, seen, task }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The only request it got.
    pub fn one(&self) -> Seen {
        let seen = self.seen();
        assert_eq!(seen.len(), 1, "expected one request, got {seen:?}");
        seen.into_iter().next().unwrap()
    }
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let target = first.next()?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Seen {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A `tools:` entry as config.yaml writes it.
pub fn entry(name: &str, use_: &str, extra: Value) -> ToolConfig {
    ToolConfig {
        name: name.into(),
        group: "web".into(),
        use_: use_.into(),
        extra: extra.as_object().cloned().unwrap_or_default(),
    }
}

/// A thread's directories (`user-data/{workspace,uploads,outputs}`) under a temporary
/// directory, reached as a local run reaches them.
pub struct Thread {
    /// Held, not read: dropping it removes the directories.
    pub _dir: tempfile::TempDir,
    pub paths: ThreadPaths,
    pub files: Arc<dyn ThreadFiles>,
}

impl Thread {
    pub fn new() -> Thread {
        let dir = tempfile::tempdir().unwrap();
        let paths = ThreadPaths::new(dir.path(), "u", "t");
        paths.create().unwrap();
        let files = paths.local_files();
        Thread {
            _dir: dir,
            paths,
            files,
        }
    }
}

/// What the model gets back from one call, and the artifacts it declares.
#[derive(Debug)]
pub struct Outcome {
    pub text: String,
    pub error: bool,
    pub artifacts: Vec<String>,
}

/// Runs one call of `tool` with `args` on the web tools of `entries`.
pub async fn call(entries: &[ToolConfig], tool: &str, args: Value) -> Outcome {
    call_in(&Thread::new(), entries, tool, args).await
}

/// Runs one call of `tool` with `args` on the web tools of `entries`, on `thread`.
pub async fn call_in(thread: &Thread, entries: &[ToolConfig], tool: &str, args: Value) -> Outcome {
    let web = WebTools::from_config(entries);
    assert!(web.handles(tool), "{tool} is not a configured web tool");
    let call = ToolCall {
        id: "call_1".into(),
        name: tool.into(),
        args,
    };
    let update = web
        .execute(&call, Duration::from_secs(30), thread.files.as_ref())
        .await
        .expect("a web tool")
        .unwrap_or_else(|f| panic!("the tool failed: {f:?}"));
    match update.messages.into_iter().next() {
        Some(Message::Tool {
            content, status, ..
        }) => Outcome {
            text: content,
            error: status == ToolStatus::Error,
            artifacts: update.artifacts,
        },
        other => panic!("not a tool message: {other:?}"),
    }
}

/// Runs one call that the tool does not catch: its failure.
pub async fn failure(
    entries: &[ToolConfig],
    tool: &str,
    args: Value,
) -> antler_engine::ToolFailure {
    let web = WebTools::from_config(entries);
    let call = ToolCall {
        id: "call_1".into(),
        name: tool.into(),
        args,
    };
    let thread = Thread::new();
    match web
        .execute(&call, Duration::from_secs(30), thread.files.as_ref())
        .await
    {
        Some(Err(f)) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}
