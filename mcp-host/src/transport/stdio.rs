//! stdio servers: the command runs in its own process group with piped stdin/stdout, its
//! stderr captured (the last lines kept to explain a failed start). Dropping the
//! `ChildGroup` kills the whole group; rmcp's child guard reaps the child, so no zombies.
//! The environment is never the host's: only the MCP SDK's default variables
//! ([`antler_protocol::sys::INHERITED_ENV_VARS`]), then the pool's, then the server's configured `env`.

use std::{
    collections::VecDeque,
    process::Stdio,
    sync::{Arc, Mutex},
};

use antler_protocol::config::McpServerConfig;
use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{OpenError, OpenOptions, Opened};
use crate::{client::Client, lifecycle::Lifecycle};

/// Lines of stderr kept per server.
const STDERR_TAIL_LINES: usize = 20;

pub use antler_protocol::sys::default_environment;

/// The process group of a stdio server; killed with SIGKILL when dropped.
#[derive(Debug)]
pub struct ChildGroup {
    pgid: i32,
}

impl ChildGroup {
    /// The group's id, which is its leader's (the server's) pid.
    pub fn pid(&self) -> u32 {
        self.pgid as u32
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        if self.pgid > 0 {
            // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
        }
    }
}

/// The last lines a child wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    pub fn text(&self) -> String {
        match self.0.lock() {
            Ok(lines) => lines.iter().cloned().collect::<Vec<_>>().join("\n"),
            Err(_) => String::new(),
        }
    }

    fn push(&self, line: String) {
        if let Ok(mut lines) = self.0.lock() {
            if lines.len() == STDERR_TAIL_LINES {
                lines.pop_front();
            }
            lines.push_back(line);
        }
    }
}

pub(super) async fn open(
    name: &str,
    config: &McpServerConfig,
    lifecycle: Lifecycle,
    client: Client,
    options: &OpenOptions,
) -> Result<Opened, OpenError> {
    let command = config.command.clone().unwrap_or_default();
    let mut cmd = tokio::process::Command::new(&command);
    cmd.args(&config.args);
    cmd.env_clear();
    cmd.envs(default_environment(|k| std::env::var(k).ok()));
    for (k, v) in &options.default_env {
        if !config.env.contains_key(k) {
            cmd.env(k, v);
        }
    }
    for (k, v) in config.env.iter() {
        cmd.env(k, v);
    }
    if let Some(cwd) = config.cwd.as_ref().or(options.cwd.as_ref()) {
        cmd.current_dir(cwd);
    }
    cmd.process_group(0);
    cmd.kill_on_drop(true);
    // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
    // which is async-signal-safe. It makes the server die with this host even when the
    // host is killed with SIGKILL and cannot kill the group itself.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (proc, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| OpenError::Spawn {
            command: command.clone(),
            reason: e.to_string(),
        })?;
    let child = proc.id().map(|pid| ChildGroup { pgid: pid as i32 });
    let tail = StderrTail::default();
    if let Some(stderr) = stderr {
        let tail = tail.clone();
        let server = name.to_owned();
        // Ends at EOF, which comes when the child exits.
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = %server, "stderr: {line}");
                tail.push(line);
            }
        });
    }
    match lifecycle.serve(client, proc).await {
        Ok(session) => Ok(Opened { session, child }),
        Err(e) => {
            drop(child);
            // Give the stderr reader a moment to collect the child's last words.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Err(OpenError::Initialize {
                reason: e.to_string(),
                stderr: tail.text(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sdk_default_variables_are_inherited() {
        let host = |k: &str| match k {
            "HOME" => Some("/root".to_owned()),
            "PATH" => Some("/usr/bin".to_owned()),
            "SHELL" => Some("() { evil; }".to_owned()),
            "OPENAI_API_KEY" => Some("sk-secret".to_owned()),
            _ => None,
        };
        assert_eq!(
            default_environment(host),
            [
                ("HOME".to_owned(), "/root".to_owned()),
                ("PATH".to_owned(), "/usr/bin".to_owned())
            ]
        );
    }
}
