//! `antler threads list|show|delete [--user U] [--json]`: a user's threads in the runs
//! store of the runtime directory (read directly: the store takes readers beside a
//! running lead). `show` prints the thread's messages; `delete` removes the thread's
//! files (`users/{uid}/threads/{tid}` on sandbox-host's base directory) and its row, and
//! refuses while a run is in flight on it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use antler_engine::Message;
use antler_protocol::calls::SandboxCalls;
use antler_protocol::messages::{Principal, ThreadFileError, ThreadFileOp};
use antler_protocol::Role;
use anyhow::{bail, Context as _};
use clap::Subcommand;
use serde_json::{json, Value};

use super::{cluster_spec, Ctx};
use crate::runs::store::{CheckpointStore, ThreadRefusal, ThreadRow};

/// DeerFlow's refusal to delete a thread with a run in flight.
const DELETE_IN_FLIGHT: &str = "Thread has work in flight. Delete it after the work finishes.";

/// `antler threads`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ThreadsArgs {
    #[command(subcommand)]
    pub command: ThreadsCommand,
    /// The user whose threads these are.
    #[arg(long, global = true, default_value = "default")]
    pub user: String,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// config.yaml (for its `antler.runtime_dir`; default: found as `antler up` finds it).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
}

/// The thread commands.
#[derive(Debug, Subcommand)]
pub enum ThreadsCommand {
    /// The user's threads, most recently updated first.
    List,
    /// One thread: its status, title, runs and messages.
    Show {
        /// The thread's id.
        thread: String,
    },
    /// Delete a thread with its files (refused while a run is in flight on it).
    Delete {
        /// The thread's id.
        thread: String,
    },
}

pub fn run(ctx: &Ctx, args: ThreadsArgs) -> anyhow::Result<ExitCode> {
    let spec = cluster_spec(ctx.runtime_dir.clone(), args.config.as_deref(), None)?;
    if spec.store_dsn.is_none() && !spec.store_path.exists() {
        bail!(
            "no runs store at {} (no run yet)",
            spec.store_path.display()
        );
    }
    let store = CheckpointStore::open_at(&spec.store_location())?;
    match args.command {
        ThreadsCommand::List => {
            let rows = store.search_threads(&args.user, &Default::default(), None, 1000, 0)?;
            if args.json {
                println!("{}", Value::Array(rows.iter().map(row_json).collect()));
            } else {
                println!("{:<36} {:<12} {:<20} TITLE", "THREAD", "STATUS", "LAST RUN");
                for r in &rows {
                    println!(
                        "{:<36} {:<12} {:<20} {}",
                        r.thread_id,
                        r.status.as_str(),
                        r.last_run_id.as_deref().unwrap_or("-"),
                        r.title.as_deref().unwrap_or("")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ThreadsCommand::Show { thread } => {
            let Some(row) = store.thread(&args.user, &thread)? else {
                bail!("Thread {thread} not found");
            };
            let state = store.thread_state(&args.user, &thread)?.unwrap_or_default();
            if args.json {
                let mut out = row_json(&row);
                out["messages"] = serde_json::to_value(&state.messages)?;
                out["artifacts"] = json!(state.artifacts);
                println!("{out}");
            } else {
                println!("thread {} ({})", row.thread_id, row.status.as_str());
                if let Some(title) = &row.title {
                    println!("title: {title}");
                }
                for message in &state.messages {
                    println!("{}", message_line(message));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ThreadsCommand::Delete { thread } => {
            crate::runs::prepare::check_id("thread", &thread)?;
            let Some(row) = store.thread(&args.user, &thread)? else {
                bail!("Thread {thread} not found");
            };
            if row.active_run_id.is_some() {
                bail!("{DELETE_IN_FLIGHT}");
            }
            remove_files(&spec, &args.user, &thread)?;
            match store.delete_thread(&args.user, &thread)? {
                Ok(()) => {}
                Err(ThreadRefusal::Busy { .. }) => bail!("{DELETE_IN_FLIGHT}"),
                Err(ThreadRefusal::NotFound(_)) => bail!("Thread {thread} not found"),
            }
            if args.json {
                println!("{}", json!({"thread_id": thread, "deleted": true}));
            } else {
                eprintln!("deleted thread {thread}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Removes the thread's sandbox and directory on sandbox-host (the running cluster's, or
/// an ephemeral one started for it): a sandbox still leased keeps them.
fn remove_files(
    spec: &crate::cluster::ClusterSpec,
    user: &str,
    thread: &str,
) -> anyhow::Result<()> {
    crate::runs::prepare::check_id("user", user)?;
    let spec = spec.clone();
    let principal = Principal {
        user_id: user.to_owned(),
        thread_id: thread.to_owned(),
        roles: Vec::new(),
    };
    let removed = actix::System::new().block_on(async move {
        let client = crate::cluster::attach_or_start(spec, Duration::from_secs(15)).await?;
        let host = super::host(&client, Role::SandboxHost, 0);
        let removed = host
            .thread_files(
                principal,
                ThreadFileOp::RemoveThread,
                Duration::from_secs(30),
            )
            .await;
        client.finish().await;
        anyhow::Ok(removed?)
    })?;
    match removed {
        Ok(_) => Ok(()),
        Err(ThreadFileError::InUse) => bail!("{DELETE_IN_FLIGHT}"),
        Err(e) => Err(e).context("cannot remove the thread's files"),
    }
}

fn row_json(r: &ThreadRow) -> Value {
    json!({
        "thread_id": r.thread_id,
        "status": r.status.as_str(),
        "title": r.title,
        "metadata": r.metadata,
        "created_ms": r.created_ms,
        "updated_ms": r.updated_ms,
        "last_run_id": r.last_run_id,
    })
}

/// One message as `show` prints it.
fn message_line(message: &Message) -> String {
    match message {
        Message::Human { content, .. } => format!("user: {content}"),
        Message::System { content } => format!("system: {content}"),
        Message::Ai {
            content,
            tool_calls,
            ..
        } => {
            let calls: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
            if calls.is_empty() {
                format!("assistant: {content}")
            } else {
                format!("assistant: {content} [calls: {}]", calls.join(", "))
            }
        }
        Message::Tool { name, content, .. } => {
            let first = content.lines().next().unwrap_or_default();
            format!("tool {name}: {first}")
        }
    }
}
