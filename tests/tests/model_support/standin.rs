//! The suites' raw HTTP stand-ins: a loopback listener whose every request (its head read
//! up to the blank line, its body by `Content-Length`) is handed to a handler that writes
//! the answer on the connection itself. The recording server, the recording proxy and the
//! endpoints a real server cannot be made to imitate on cue (answer after a delay, stream a
//! word at a time on a signal, fail every request) are built on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

/// One request a stand-in received.
pub struct Request {
    /// Its index in arrival order (0 for the first).
    pub n: usize,
    /// The request line's path (`/v1/chat/completions`).
    pub path: String,
    /// The head's lines after the request line, each with its `\r\n`.
    pub headers: Vec<String>,
    /// The request line, with its `\r\n`.
    pub request_line: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How a stand-in takes its connections.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    /// One at a time, in arrival order (a scripted reply per request, in order).
    InOrder,
    /// Each on its own thread (a slow answer does not hold the next request up).
    Concurrently,
}

/// Reads one request off `stream`; `None` when the connection closed before a whole one.
fn read_request(stream: &TcpStream, n: usize) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).ok()? == 0 {
        return None;
    }
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        headers.push(line);
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Some(Request {
        n,
        path,
        headers,
        request_line,
        body,
    })
}

/// Starts a stand-in on a free loopback port; it lives as long as the test process. Its
/// `http://127.0.0.1:PORT` (no path).
pub fn standin(
    serve: Serve,
    handler: impl Fn(Request, &mut TcpStream) + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let handler = Arc::new(handler);
    let count = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let handler = handler.clone();
            let count = count.clone();
            let mut answer = move || {
                let n = count.fetch_add(1, Ordering::SeqCst);
                if let Some(request) = read_request(&stream, n) {
                    handler(request, &mut stream);
                }
            };
            match serve {
                Serve::InOrder => answer(),
                Serve::Concurrently => {
                    std::thread::spawn(answer);
                }
            }
        }
    });
    base
}

/// Writes a whole answer with its `Content-Length`, then closes.
pub fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Starts an event stream: the status line and head of a `text/event-stream` answer with no
/// length (the frames follow as they are written; closing the connection ends it).
pub fn start_event_stream(stream: &mut TcpStream) {
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    );
}

/// One OpenAI `chat.completion.chunk` as an SSE frame.
pub fn chunk_frame(model: &str, delta: Value, finish: Value) -> String {
    let c = json!({"id": "c1", "object": "chat.completion.chunk", "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

/// A whole streamed OpenAI answer of `text`: the content, the finish, `[DONE]`.
pub fn text_answer(model: &str, text: &str) -> String {
    format!(
        "{}{}data: [DONE]\n\n",
        chunk_frame(
            model,
            json!({"role": "assistant", "content": text}),
            Value::Null
        ),
        chunk_frame(model, json!({}), json!("stop"))
    )
}
