//! `bash` (spec 6.5). Under the local provider: refused unless `allow_host_bash`, then the
//! command validation matrix, virtual paths rewritten, `cd '{workspace}' && ` prefixed, and
//! host paths masked in the output. Under bwrap: `cd /mnt/user-data/workspace; ` and run
//! through the sandbox's supervisor. Both: timeout (default 600 s) kills the process group,
//! injected secrets (allowlisted names only) are redacted, the middle is cut at 20,000.

use serde::Deserialize;

use super::{quota, ToolContext};
use crate::{
    command_policy::validate_local_bash_command,
    exec::{ExecRequest, MAX_CAPTURE_BYTES},
    output::{format_bash, redact, truncate_middle},
    paths::VIRTUAL_PATH_PREFIX,
    provider::Runner,
};

/// Appended when the command left processes running; `{secs}` is
/// `sandbox.background_lifetime`.
pub const LEFT_RUNNING: &str = "Still running in the background (killed when the sandbox is released, or after {secs} seconds):";

/// DeerFlow's refusal of host bash.
pub const HOST_BASH_DISABLED: &str = "Host bash execution is disabled for LocalSandboxProvider because it is not a secure sandbox boundary. Switch to AioSandboxProvider for isolated bash access, or set sandbox.allow_host_bash: true only in a fully trusted local environment.";

/// In front of the output of a command during which the kernel killed a process of the
/// sandbox for memory; `{limit}` is the sandbox's memory cap in MiB.
pub const OUT_OF_MEMORY: &str = "Error: Out of memory: the sandbox's processes together passed its memory limit of {limit} MiB (sandbox.limits.max_memory_mb), and the kernel killed one of them. Use less memory at once (smaller inputs, fewer processes in parallel), or ask the operator for a higher limit.";

fn out_of_memory(limit: u64) -> String {
    OUT_OF_MEMORY.replacen("{limit}", &(limit >> 20).to_string(), 1)
}

#[derive(Debug, Deserialize)]
pub struct BashArgs {
    pub command: String,
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

pub async fn run(ctx: &ToolContext, a: BashArgs, secrets: &[(String, String)]) -> String {
    let injected: Vec<(String, String)> = secrets
        .iter()
        .filter(|(name, _)| {
            let allowed = ctx.settings.secrets.iter().any(|s| s == name);
            if !allowed {
                tracing::warn!(secret = %name, "dropping a secret that sandbox.secrets does not allow");
            }
            allowed
        })
        .cloned()
        .collect();
    let timeout = ctx.settings.bash_command_timeout;
    let (command, cwd, env, clear_env) = match &ctx.runner {
        Runner::Local(_) => {
            if !ctx.settings.allow_host_bash {
                return format!("Error: {HOST_BASH_DISABLED}");
            }
            if let Err(e) = validate_local_bash_command(&a.command, &ctx.map, &[]) {
                return format!("Error: {e}");
            }
            let command = ctx.map.virtual_to_host_in_command(&a.command);
            let workspace = ctx.map.thread.workspace.to_string_lossy().into_owned();
            (
                format!("cd {} && {command}", shell_quote(&workspace)),
                None,
                injected.clone(),
                false,
            )
        }
        Runner::Bwrap(_) => (
            format!("cd {VIRTUAL_PATH_PREFIX}/workspace; {}", a.command),
            None,
            injected.clone(),
            false,
        ),
    };
    let req = ExecRequest {
        command,
        cwd,
        env,
        clear_env,
        timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
        max_capture: MAX_CAPTURE_BYTES,
    };
    let oom_before = ctx.runner.oom_kills();
    let result = ctx.runner.exec(req).await;
    // An OOM kill during the command (of it, or of the supervisor that ran it).
    let oom = match (oom_before, ctx.runner.oom_kills()) {
        (Some((before, _)), Some((after, limit))) if after > before => Some(out_of_memory(limit)),
        _ => None,
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => {
            return match oom {
                Some(oom) => format!("{oom}\n\n({})", ctx.map.mask(&e)),
                None => format!(
                    "Error: Unexpected error executing command: {}",
                    ctx.map.mask(&e)
                ),
            }
        }
    };
    let text = format_bash(
        &outcome.stdout,
        &outcome.stderr,
        outcome.code,
        outcome.timed_out.then_some(timeout.as_secs_f64()),
    );
    let mut text = text;
    if !outcome.background.is_empty() {
        let secs = crate::output::fmt_g(ctx.settings.background_lifetime.as_secs_f64());
        text.push('\n');
        text.push_str(&LEFT_RUNNING.replacen("{secs}", &secs, 1));
        for p in &outcome.background {
            text.push_str(&format!("\n- pid {}: {}", p.pid, p.command));
        }
    }
    let text = match ctx.runner {
        Runner::Local(_) => ctx.map.mask(&text),
        Runner::Bwrap(_) => text,
    };
    let text = truncate_middle(
        &redact(&text, &injected),
        ctx.settings.bash_output_max_chars,
    );
    let text = match oom {
        Some(oom) => format!("{oom}\n\n{text}"),
        None => text,
    };
    let quota_ctx = ctx.clone();
    match tokio::task::spawn_blocking(move || quota::over(&quota_ctx)).await {
        Ok(Some(error)) => format!("{error}\n\n{text}"),
        _ => text,
    }
}
