//! Stand-ins (named as such: no real MCP server here misbehaves this way on purpose) for
//! hostile or broken HTTP peers: a recorder that notes every request it gets, an SSE
//! stream whose `endpoint` event names any URL, a server that answers every request with
//! a redirect, and a listener that accepts connections and never answers; and for the web
//! services tools call (an API, a site, a screenshot service), one that answers every
//! request with the same content. Each runs on a thread of the test on a free 127.0.0.1
//! port and stops when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

/// One request as received: the head (request line and headers) and the body.
#[derive(Debug, Clone)]
pub struct Received {
    pub head: String,
    pub body: String,
}

impl Received {
    /// Whether the request carries `text` anywhere (head or body), ignoring ASCII case.
    pub fn mentions(&self, text: &str) -> bool {
        let text = text.to_ascii_lowercase();
        self.head.to_ascii_lowercase().contains(&text)
            || self.body.to_ascii_lowercase().contains(&text)
    }

    /// The request line (`POST /search HTTP/1.1`).
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }
}

/// How a stand-in answers one connection.
type Respond = dyn Fn(&Received, &mut TcpStream, &AtomicBool) + Send + Sync;

/// A stand-in HTTP peer on a free port.
pub struct StandIn {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    fn serve(respond: Arc<Respond>) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a stand-in");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (received, stop) = (received.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let (received, stop, respond) =
                                (received.clone(), stop.clone(), respond.clone());
                            std::thread::spawn(move || {
                                serve_connection(stream, &received, &stop, respond.as_ref())
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        StandIn {
            port,
            received,
            stop,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Answers every request with `200 OK` and an empty JSON object, and records it.
    pub fn recorder() -> StandIn {
        Self::serve(Arc::new(
            |_req: &Received, stream: &mut TcpStream, _: &AtomicBool| {
                let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            );
            },
        ))
    }

    /// Answers every request with `200 OK`, `content_type` and `body`, and records it.
    pub fn serving(content_type: &'static str, body: Vec<u8>) -> StandIn {
        Self::serve(Arc::new(
            move |_req: &Received, stream: &mut TcpStream, _: &AtomicBool| {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            },
        ))
    }

    /// A legacy MCP SSE stream: `GET` gets an event stream whose `endpoint` event is
    /// `endpoint`, then held open until the stand-in stops; other requests get 202.
    pub fn sse_announcing(endpoint: String) -> StandIn {
        Self::serve(Arc::new(
            move |req: &Received, stream: &mut TcpStream, stop: &AtomicBool| {
                if !req.head.starts_with("GET ") {
                    let _ = stream.write_all(
                        b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
                let event = format!("event: endpoint\ndata: {endpoint}\n\n");
                if stream.write_all(head.as_bytes()).is_err()
                    || stream.write_all(event.as_bytes()).is_err()
                {
                    return;
                }
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(200));
                    if stream.write_all(b": keep-alive\n\n").is_err() {
                        return;
                    }
                }
            },
        ))
    }

    /// Answers every request with `307 Temporary Redirect` to `location`.
    pub fn redirecting_to(location: String) -> StandIn {
        Self::serve(Arc::new(
            move |_req: &Received, stream: &mut TcpStream, _: &AtomicBool| {
                let reply = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.write_all(reply.as_bytes());
            },
        ))
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve_connection(
    mut stream: TcpStream,
    received: &Mutex<Vec<Received>>,
    stop: &AtomicBool,
    respond: &Respond,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while raw.len() < head_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let body = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    let req = Received { head, body };
    received.lock().unwrap().push(req.clone());
    respond(&req, &mut stream, stop);
}

/// A TCP listener that accepts every connection and never answers (nor closes) one: a
/// server that hangs. The connections are held until it is dropped.
pub struct Silent {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl Silent {
    pub fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => held.push(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Silent { port, stop }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
