//! `antler run`'s side of approvals (issue 37): the calls a run waits on are answered with
//! `--resume RUN --approve CALL` / `--approve-for-thread CALL` / `--deny CALL [--reason
//! TEXT]`, or asked here on a terminal, one call at a time (`y` approve, `t` approve for
//! this thread, `n` deny, then an optional reason). The lead keeps each answer and resumes
//! the run once every call it waits on is answered. A subagent's call waits while its
//! parent runs: it is asked as its event arrives, and answered the same ways.

use std::io::{BufRead, Write};

use antler_protocol::calls::LeadCalls;
use anyhow::bail;
use serde_json::Value;

use super::run::RunArgs;

/// Deadline of one answer (the last one resumes the run).
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// One answer to give: the call, `approve` / `approve_for_thread` / `deny`, and the reason.
pub type Answer = (String, &'static str, Option<String>);

/// The answers the command line gives (`--approve`, `--approve-for-thread`, `--deny`).
pub fn from_args(args: &RunArgs) -> Vec<Answer> {
    let with = |calls: &[String], decision: &'static str, reason: Option<String>| {
        calls
            .iter()
            .map(move |call| (call.clone(), decision, reason.clone()))
            .collect::<Vec<_>>()
    };
    let mut answers = with(&args.approve, "approve", None);
    answers.extend(with(&args.approve_for_thread, "approve_for_thread", None));
    answers.extend(with(&args.deny, "deny", args.reason.clone()));
    answers
}

/// Whether the run's view waits on approvals.
pub fn waits(view: &Value) -> bool {
    view["status"] == "interrupted" && view["approvals"].as_array().is_some_and(|a| !a.is_empty())
}

/// Gives `answers` to the lead; the calls the run still waits on after them (empty: it
/// goes on).
pub async fn give(
    connection: &antler_protocol::Connection,
    run_id: &str,
    answers: Vec<Answer>,
) -> anyhow::Result<Vec<String>> {
    let mut waiting = Vec::new();
    for (call, decision, reason) in answers {
        let answered = connection
            .answer_run_approval(
                run_id.to_owned(),
                call.clone(),
                decision.to_owned(),
                reason,
                ANSWER_TIMEOUT,
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        match answered {
            Ok(still) => waiting = still,
            Err(why) => bail!("call {call}: {why}"),
        }
    }
    Ok(waiting)
}

/// A subagent's call waiting for the run's user while the run goes on (its
/// `approval_requested` event): asked on a terminal, the answer given at once; otherwise
/// the command that answers it is printed.
pub fn asked_live(
    connection: &antler_protocol::Connection,
    run_id: &str,
    event: &Value,
    interactive: bool,
) {
    let call = event["tool_call_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if !interactive {
        eprintln!(
            "    (the subagent's call waits for approval: antler run --resume {run_id} --approve {call} | --approve-for-thread {call} | --deny {call} [--reason TEXT])"
        );
        return;
    }
    let (connection, run_id) = (connection.clone(), run_id.to_owned());
    let view = serde_json::json!({ "approvals": [event] });
    actix::spawn(async move {
        let answers = match tokio::task::spawn_blocking(move || ask(&view)).await {
            Ok(Ok(answers)) => answers,
            _ => return,
        };
        if let Err(e) = give(&connection, &run_id, answers).await {
            eprintln!("    ({e}; answer again with: antler run --resume {run_id} --approve {call} | --deny {call})");
        }
    });
}

/// Asks on the terminal about each call the view waits on.
pub fn ask(view: &Value) -> anyhow::Result<Vec<Answer>> {
    let mut answers = Vec::new();
    for pending in view["approvals"].as_array().into_iter().flatten() {
        let text = |key: &str| pending[key].as_str().unwrap_or_default().to_owned();
        let call = text("tool_call_id");
        eprintln!(
            "\n⚠ the run wants to call {} {}\n  rule {}: {}",
            text("tool"),
            antler_engine::approval_summary(&pending["args"]),
            pending["rule"].as_str().unwrap_or("?"),
            pending["justification"]
                .as_str()
                .unwrap_or(antler_engine::APPROVAL_NO_JUSTIFICATION),
        );
        let decision = loop {
            match prompt("  approve? [y]es / [t]his thread / [n]o: ")?.as_str() {
                "y" | "yes" => break "approve",
                "t" | "thread" => break "approve_for_thread",
                "n" | "no" => break "deny",
                _ => continue,
            }
        };
        let reason = match decision {
            "deny" => Some(prompt("  reason (optional): ")?).filter(|r| !r.is_empty()),
            _ => None,
        };
        answers.push((call, decision, reason));
    }
    Ok(answers)
}

fn prompt(text: &str) -> anyhow::Result<String> {
    eprint!("{text}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        bail!("no answer: the terminal closed");
    }
    Ok(line.trim().to_owned())
}

/// What `antler run` prints for a run that waits on approvals.
pub fn hint(view: &Value) -> String {
    format!(
        "(the run waits for approval: antler run --resume {} --approve CALL | --approve-for-thread CALL | --deny CALL [--reason TEXT])\n",
        view["run_id"].as_str().unwrap_or_default()
    )
}
