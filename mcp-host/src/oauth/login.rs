//! The user's side of a login: a loopback callback listener on a free port that takes one
//! authorization redirect (`/callback?code=…&state=…`) and answers the browser with a short
//! page, and the hand-off of the authorization URL to `$BROWSER` (the Unix convention: a
//! command, `%s` replaced by the URL or the URL appended). The listener lives until it got
//! its redirect or its deadline passed.

use std::time::Duration;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    sync::oneshot,
};

/// The callback path on the loopback listener.
pub const CALLBACK_PATH: &str = "/callback";
/// How long a login waits for its redirect.
pub const LOGIN_DEADLINE: Duration = Duration::from_secs(300);

/// A listening loopback callback.
pub struct Callback {
    /// `http://127.0.0.1:PORT/callback`.
    pub redirect_uri: String,
    /// The full redirect URL the browser was sent to, once it came.
    pub redirected: oneshot::Receiver<String>,
}

/// Listens on 127.0.0.1 at a free port for one redirect, for up to `deadline`.
pub async fn listen(deadline: Duration) -> std::io::Result<Callback> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let redirect_uri = format!("http://127.0.0.1:{port}{CALLBACK_PATH}");
    let base = redirect_uri.clone();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let _ = tokio::time::timeout(deadline, accept_one(listener, &base, tx)).await;
    });
    Ok(Callback {
        redirect_uri,
        redirected: rx,
    })
}

/// Serves connections until one carries the callback; the others get a 404.
async fn accept_one(listener: TcpListener, base: &str, tx: oneshot::Sender<String>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut buf = vec![0u8; 8192];
        let mut n = 0;
        // The request line is all that is read: it ends at the first CRLF.
        while n < buf.len() {
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf[n..])).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(k)) => {
                    n += k;
                    if buf[..n].windows(2).any(|w| w == b"\r\n") {
                        break;
                    }
                }
            }
        }
        let head = String::from_utf8_lossy(&buf[..n]);
        let target = head
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("");
        if target.starts_with(CALLBACK_PATH) && target.contains('?') {
            let query = &target[CALLBACK_PATH.len()..];
            let body = "Antler: login complete. You can close this window.\n";
            let _ = stream.write_all(response(200, body).as_bytes()).await;
            let _ = stream.shutdown().await;
            let _ = tx.send(format!("{base}{query}"));
            return;
        }
        let _ = stream
            .write_all(response(404, "not the login callback\n").as_bytes())
            .await;
    }
}

fn response(status: u16, body: &str) -> String {
    let reason = if status == 200 { "OK" } else { "Not Found" };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The `$BROWSER` of this process, if one is set.
pub fn browser() -> Option<String> {
    std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
}

/// Opens `url` with the `browser` command (its first `:`-separated entry), detached; its
/// exit status is not awaited beyond reaping. `Err`: it could not be started.
pub fn open_in(browser: &str, url: &str) -> std::io::Result<()> {
    let first = browser.split(':').next().unwrap_or(browser).trim();
    let mut words: Vec<String> = first.split_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        return Err(std::io::Error::other("$BROWSER is empty"));
    }
    if words.iter().any(|w| w.contains("%s")) {
        for w in &mut words {
            *w = w.replace("%s", url);
        }
    } else {
        words.push(url.to_owned());
    }
    let mut child = tokio::process::Command::new(&words[0])
        .args(&words[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false)
        .spawn()?;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(LOGIN_DEADLINE, child.wait()).await;
    });
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_listener_takes_one_redirect_and_answers_the_browser() {
        let cb = listen(Duration::from_secs(10)).await.unwrap();
        let url = format!("{}?code=abc&state=xyz", cb.redirect_uri);
        let authority = cb.redirect_uri.trim_start_matches("http://").to_owned();
        let host = authority.split('/').next().unwrap().to_owned();
        let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
        s.write_all(b"GET /favicon.ico HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 404"), "{out}");
        let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
        s.write_all(b"GET /callback?code=abc&state=xyz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.contains("login complete"), "{out}");
        assert_eq!(cb.redirected.await.unwrap(), url);
    }
}
