//! `antler sandbox status [--json]`: the sandbox pool of the cluster's sandbox-host, its
//! provider, and every active, warm and pre-warmed sandbox with id, user, thread and ages.

use std::{process::ExitCode, time::Duration};

use antler_protocol::{calls::SandboxCalls, messages::PoolStatus, Role};
use clap::Subcommand;
use serde_json::{json, Value};

use super::{on_host, Ctx};

/// The sandbox commands.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// The pool: provider, limits, and every sandbox with its id, user, thread and ages.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(ctx: &Ctx, command: SandboxCommand) -> anyhow::Result<ExitCode> {
    match command {
        SandboxCommand::Status { json } => actix::System::new().block_on(status(ctx, json)),
    }
}

async fn status(ctx: &Ctx, json: bool) -> anyhow::Result<ExitCode> {
    let timeout = Duration::from_secs(10);
    let status = on_host(ctx, Role::SandboxHost, 0, async |host| {
        host.sandbox_status(timeout).await
    })
    .await?;
    if json {
        println!("{}", status_json(&status));
    } else {
        print!("{}", status_table(&status));
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSON `antler sandbox status --json` prints.
pub fn status_json(s: &PoolStatus) -> Value {
    json!({
        "provider": s.provider,
        "provider_note": s.provider_note,
        "replicas": s.replicas,
        "capacity": s.capacity,
        "idle_timeout_s": s.idle_timeout_s,
        "base_dir": s.base_dir,
        "volume": s.volume,
        "sandboxes": s.sandboxes.iter().map(|b| json!({
            "sandbox_id": b.sandbox_id,
            "user_id": b.user_id,
            "thread_id": b.thread_id,
            "state": b.state,
            "holders": b.holders,
            "age_s": (b.age_ms as f64 / 100.0).round() / 10.0,
            "idle_s": (b.idle_ms as f64 / 100.0).round() / 10.0,
            "supervisor_pid": b.supervisor_pid,
        })).collect::<Vec<_>>(),
    })
}

/// The table `antler sandbox status` prints.
pub fn status_table(s: &PoolStatus) -> String {
    let warm = s.sandboxes.iter().filter(|b| b.state == "warm").count();
    let active = s.sandboxes.iter().filter(|b| b.state == "active").count();
    let mut out = format!(
        "provider: {} ({})\npool: {active} active, {warm} warm, {} pre-warmed; replicas {}, capacity {}, idle timeout {} s\nbase: {}\n",
        s.provider,
        s.provider_note,
        s.sandboxes.len() - warm - active,
        s.replicas,
        s.capacity,
        s.idle_timeout_s,
        s.base_dir
    );
    if let Some(v) = &s.volume {
        out.push_str(&format!(
            "volume: {} MiB free of {} MiB{}\n",
            v.free_bytes >> 20,
            v.total_bytes >> 20,
            if v.full {
                " (FULL: sandbox writes fail)"
            } else {
                ""
            }
        ));
    }
    out.push_str(&format!(
        "{:<18} {:<10} {:<16} {:<20} {:>7} {:>9} {:>9} {:>8}\n",
        "SANDBOX", "STATE", "USER", "THREAD", "HOLDERS", "AGE", "IDLE", "PID"
    ));
    for b in &s.sandboxes {
        out.push_str(&format!(
            "{:<18} {:<10} {:<16} {:<20} {:>7} {:>8.1}s {:>8.1}s {:>8}\n",
            b.sandbox_id,
            b.state,
            if b.user_id.is_empty() {
                "-"
            } else {
                &b.user_id
            },
            if b.thread_id.is_empty() {
                "-"
            } else {
                &b.thread_id
            },
            b.holders,
            b.age_ms as f64 / 1000.0,
            b.idle_ms as f64 / 1000.0,
            b.supervisor_pid
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
        ));
    }
    out
}
