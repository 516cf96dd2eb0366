//! A body trickled a byte at a time cannot hold the gateway: each request must arrive
//! within the body deadline (10 s), or it gets 408 and its connection is closed, while the
//! gateway keeps answering everyone else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use antler_tests::{http, Cluster};

#[test]
fn trickled_bodies_are_cut_off_at_the_deadline() {
    let c = Cluster::up_ready(0, &[("ANTLER_GATEWAY_ADDR", "127.0.0.1:0")]);
    let addr = c.gateway_addr().unwrap();
    let token = c.gateway_token();
    let started = Instant::now();
    let slow: Vec<_> = (0..40)
        .map(|_| {
            let addr = addr.clone();
            let token = token.clone();
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                write!(
                    s,
                    "POST /api/runs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
                )
                .unwrap();
                let mut reply = Vec::new();
                let until = Instant::now() + Duration::from_secs(40);
                while Instant::now() < until {
                    if s.write_all(b" ").is_err() {
                        break;
                    }
                    let mut buf = [0u8; 512];
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => reply.extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                }
                String::from_utf8_lossy(&reply).into_owned()
            })
        })
        .collect();
    // Meanwhile others are served.
    std::thread::sleep(Duration::from_secs(2));
    let (status, _) = http(&addr, "GET", "/health", &[], None);
    assert_eq!(status, 200);
    for t in slow {
        let reply = t.join().unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 408"),
            "a trickled body was not cut off: {reply:?}"
        );
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(35),
        "the connections stayed open for {took:?}"
    );
}
