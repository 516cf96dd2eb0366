//! What a chaos schedule does, decided by its seed alone (the same seed replays the same
//! schedule): the runs (which playbook, when each starts), the faults (which kind, when),
//! the cluster's config.yaml and extensions file, and the playbooks. Every playbook leaves
//! traces the invariants read: each subagent task appends one line to a file of its own
//! (a task that ran twice leaves two), and the outputs it presents.

use std::time::Duration;

use crate::faults::FaultKind;

/// A run of the schedule.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    pub index: usize,
    pub kind: RunKind,
    /// When it is submitted, after the schedule starts.
    pub at: Duration,
}

/// The playbook a run follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// tool_search promotes an MCP tool, which is called; sandbox bash and write_file; the
    /// report is presented.
    Tools,
    /// The model asks for a clarification; once answered it writes and presents a file.
    Clarify,
    /// Two subagent tasks at once, each appending to its own file and writing a note;
    /// both notes are presented.
    Delegate,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Tools => "tools",
            RunKind::Clarify => "clarify",
            RunKind::Delegate => "delegate",
        }
    }
}

/// One fault at a time of the schedule.
#[derive(Debug, Clone)]
pub struct PlannedFault {
    pub kind: FaultKind,
    pub at: Duration,
    /// How long a SIGSTOP lasts before SIGCONT.
    pub pause: Duration,
}

/// The whole schedule.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub duration: Duration,
    pub runs: Vec<PlannedRun>,
    pub faults: Vec<PlannedFault>,
}

impl Plan {
    /// The schedule of `seed`: `runs` runs submitted over the first 60% of `duration`;
    /// every fault kind of `kinds` once in a shuffled order, then more at random, one
    /// about every 6 s, at random times over the first 80% (none when `kinds` is empty).
    pub fn new(seed: u64, runs: usize, duration: Duration, kinds: &[FaultKind]) -> Plan {
        let mut rng = fastrand::Rng::with_seed(seed);
        let span = |rng: &mut fastrand::Rng, from: f64, to: f64| {
            Duration::from_secs_f64(duration.as_secs_f64() * (from + (to - from) * rng.f64()))
        };
        let kinds_of_runs = [RunKind::Tools, RunKind::Clarify, RunKind::Delegate];
        let mut planned: Vec<PlannedRun> = (0..runs)
            .map(|index| PlannedRun {
                index,
                kind: kinds_of_runs[index % kinds_of_runs.len()],
                at: span(&mut rng, 0.0, 0.6),
            })
            .collect();
        planned.sort_by_key(|r| r.at);
        let mut faults = Vec::new();
        if !kinds.is_empty() {
            let mut order = kinds.to_vec();
            rng.shuffle(&mut order);
            let extra = (duration.as_secs_f64() / 6.0) as usize;
            for _ in 0..extra.saturating_sub(order.len()) {
                order.push(kinds[rng.usize(..kinds.len())]);
            }
            for kind in order {
                faults.push(PlannedFault {
                    kind,
                    at: span(&mut rng, 0.1, 0.8),
                    pause: Duration::from_millis(rng.u64(2000..3500)),
                });
            }
            faults.sort_by_key(|f| f.at);
        }
        Plan {
            seed,
            duration,
            runs: planned,
            faults,
        }
    }
}

/// How long a run's pooled stdio session outlives its last call in the schedule's cluster:
/// short, so that once the runs have ended every pooled session is seen to stop.
pub const POOL_IDLE_TIMEOUT_S: u64 = 15;

/// The cluster's config.yaml: sandbox tools, MCP tools behind tool_search, subagents, a
/// fast heartbeat (faults are seen quickly) and a restart budget no schedule exhausts. With
/// `antler_lines` (lines of `antler:` in place of the workers', e.g. the hosts to dial, so
/// the lead starts no host, or the workers and the leases' time to live) those.
pub fn config_yaml(workers: u32, antler_lines: Option<String>) -> String {
    let workers = match &antler_lines {
        Some(lines) => lines.clone(),
        None => format!("  workers: {workers}\n"),
    };
    format!(
        r#"tool_search:
  enabled: true
tools:
  - {{name: bash, group: bash, use: "deerflow.sandbox.tools:bash_tool"}}
  - {{name: read_file, group: file:read, use: "deerflow.sandbox.tools:read_file_tool"}}
  - {{name: write_file, group: file:write, use: "deerflow.sandbox.tools:write_file_tool"}}
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
subagents:
  max_concurrent: 3
  max_total_per_run: 6
  slot_wait_s: 120
antler:
{workers}  worker_slots: 3
  heartbeat_interval_ms: 500
  heartbeat_misses: 3
  restart_max: 1000
  restart_window_s: 60
  mcp_pool:
    idle_timeout_s: {POOL_IDLE_TIMEOUT_S}
"#
    )
}

/// extensions_config.json with the `everything` MCP server run by `command`.
pub fn extensions_json(command: &str) -> String {
    serde_json::json!({"mcpServers": {"everything": {
        "type": "stdio", "command": command, "args": ["stdio"]}}})
    .to_string()
}

/// The file a subagent task of run `run` appends one line to each time it runs.
pub fn task_trace(run: usize, task: &str) -> String {
    format!("/mnt/user-data/workspace/task-{run}-{task}.log")
}

/// The id of the `task` call of run `run`'s task `task` (the task's id on its worker).
pub fn task_call_id(run: usize, task: &str) -> String {
    format!("t{task}-{run}")
}

/// The playbook of `run`.
pub fn playbook(run: &PlannedRun) -> String {
    let i = run.index;
    match run.kind {
        RunKind::Tools => format!(
            r#"turns:
  - delay_ms: 400
    tool_calls:
      - {{id: search, name: tool_search, args: {{query: "select:everything_echo"}}}}
  - delay_ms: 400
    tool_calls:
      - {{id: echo, name: everything_echo, args: {{message: "chaos {i}"}}}}
  - delay_ms: 400
    tool_calls:
      - {{id: sh, name: bash, args: {{description: count, command: "echo run >> /mnt/user-data/workspace/bash-{i}.log"}}}}
  - delay_ms: 400
    tool_calls:
      - {{id: write, name: write_file, args: {{description: report, path: /mnt/user-data/outputs/report-{i}.md, content: "report {i}\n"}}}}
  - delay_ms: 300
    tool_calls:
      - {{id: present, name: present_files, args: {{filepaths: [/mnt/user-data/outputs/report-{i}.md]}}}}
  - content: report {i} is ready
"#
        ),
        RunKind::Clarify => format!(
            r#"turns:
  - delay_ms: 300
    tool_calls:
      - {{id: ask, name: ask_clarification, args: {{question: "Which title for note {i}?", clarification_type: missing_info}}}}
  - delay_ms: 400
    tool_calls:
      - {{id: write, name: write_file, args: {{description: note, path: /mnt/user-data/outputs/answered-{i}.md, content: "answered {i}\n"}}}}
  - delay_ms: 300
    tool_calls:
      - {{id: present, name: present_files, args: {{filepaths: [/mnt/user-data/outputs/answered-{i}.md]}}}}
  - content: note {i} is ready
"#
        ),
        RunKind::Delegate => {
            let task = |name: &str| {
                format!(
                    r#"  work {name}:
    turns:
      - delay_ms: 600
        tool_calls:
          - {{name: bash, args: {{description: trace, command: "echo ran >> {trace}"}}}}
      - delay_ms: 600
        tool_calls:
          - {{name: write_file, args: {{description: note, path: /mnt/user-data/outputs/sub-{i}-{name}.md, content: "sub {i} {name}\n"}}}}
      - content: wrote sub-{i}-{name}.md
"#,
                    trace = task_trace(i, name)
                )
            };
            format!(
                r#"turns:
  - delay_ms: 300
    tool_calls:
      - {{id: ta-{i}, name: task, args: {{description: work a, prompt: "Write note a", subagent_type: general-purpose}}}}
      - {{id: tb-{i}, name: task, args: {{description: work b, prompt: "Write note b", subagent_type: general-purpose}}}}
  - delay_ms: 300
    tool_calls:
      - {{id: present, name: present_files, args: {{filepaths: [/mnt/user-data/outputs/sub-{i}-a.md, /mnt/user-data/outputs/sub-{i}-b.md]}}}}
  - content: notes of run {i} are ready
subagents:
{a}{b}"#,
                a = task("a"),
                b = task("b"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_schedule_and_every_kind_fires() {
        let kinds = FaultKind::all_local();
        let a = Plan::new(7, 9, Duration::from_secs(120), &kinds);
        let b = Plan::new(7, 9, Duration::from_secs(120), &kinds);
        assert_eq!(format!("{:?}", a.faults), format!("{:?}", b.faults));
        assert_eq!(format!("{:?}", a.runs), format!("{:?}", b.runs));
        for kind in &kinds {
            assert!(a.faults.iter().any(|f| f.kind == *kind), "{kind:?}");
        }
        let c = Plan::new(8, 9, Duration::from_secs(120), &kinds);
        assert_ne!(format!("{:?}", a.faults), format!("{:?}", c.faults));
        assert!(Plan::new(7, 3, Duration::from_secs(60), &[])
            .faults
            .is_empty());
    }

    #[test]
    fn playbooks_parse() {
        for (index, kind) in [RunKind::Tools, RunKind::Clarify, RunKind::Delegate]
            .into_iter()
            .enumerate()
        {
            let run = PlannedRun {
                index,
                kind,
                at: Duration::ZERO,
            };
            let text = playbook(&run);
            let parsed: Result<antler_engine::Playbook, _> = serde_yaml::from_str(&text);
            assert!(parsed.is_ok(), "{text}\n{parsed:?}");
        }
    }
}
