//! Messages from the CLI (or an operator tool) to the lead's control socket.

use serde::{Deserialize, Serialize};

use super::{Reply, Request};
use crate::handshake::Role;

/// Requests the lead answers on its control socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Lead::")]
pub enum LeadRequest {
    /// Every process of the cluster with its supervision state.
    Status,
    /// Ping every peer through the lead's links (or only those of one role).
    PingPeers { role: Option<Role> },
    /// Send `request` to the peer of `role` (worker `index` for subagents) through the
    /// lead's link and return its reply: how the CLI reaches the hosts.
    Forward {
        role: Role,
        index: u32,
        request: Box<Request>,
        timeout_ms: u32,
    },
    /// Start a run in the lead; the reply is `RunStarted` at once, the run goes on in the
    /// lead whoever watches it.
    SubmitRun(RunSubmission),
    /// Continue a stopped run (`interrupted`, or `running` after a crash) from its last
    /// checkpoint, with an optional answer to its clarification question. A run the lead
    /// is driving already is left as it is. The reply is `RunStarted`.
    ResumeRun {
        run_id: String,
        answer: Option<String>,
        /// Overrides the playbook the run was started with.
        playbook: Option<String>,
    },
    /// Stream the run's events (`RunEvent` items, those so far first) until it stops;
    /// the final reply is `Run` with its view.
    WatchRun { run_id: String },
    /// The run's view now (`Run`).
    GetRun { run_id: String },
    /// Cancel a run the lead is driving, or one waiting for a clarification answer: it
    /// ends `error` with "the run was cancelled" and its subagent tasks are cancelled.
    /// The reply is `RunCancelled`.
    CancelRun { run_id: String },
    /// Answers elicitation `id` that an MCP call of `run_id` waits on (policy `ask`), as
    /// the run's user: `content` is the requested fields when `action` is accept.
    /// The reply is `ElicitationAnswered`.
    AnswerElicitation {
        run_id: String,
        id: String,
        action: super::ElicitationAction,
        content: Option<crate::json::Json>,
    },
    /// Answer the call `tool_call_id` an interrupted run waits on for approval (issue 37),
    /// as the run's user: `decision` is `approve`, `approve_for_thread` or `deny`. Once
    /// every call it waits on is answered the run goes on. The reply is `ApprovalAnswered`.
    AnswerApproval {
        run_id: String,
        tool_call_id: String,
        decision: String,
        reason: Option<String>,
    },
    /// Change the number of subagent workers (1 to `MAX_WORKERS`): new workers are
    /// started; removed ones (highest indexes first) take no new task, finish theirs and
    /// are stopped. The reply (`Workers`) comes once the change is done.
    SetWorkers { workers: u32 },
}

/// Replies to [`LeadRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Lead::")]
pub enum LeadReply {
    Status(Vec<ProcessStatus>),
    PingPeers(Vec<PeerPing>),
    Forwarded(Box<Reply>),
    RunStarted {
        run_id: String,
    },
    /// One run event, as the run's event stream has it (the lead's JSON event API, the
    /// same the gateway streams; see `antler run --trace`).
    RunEvent {
        event: crate::json::Json,
    },
    /// A run's view: run_id, status, final_answer, question, error, artifacts,
    /// delivery, ... (the gateway's run view).
    Run {
        view: crate::json::Json,
    },
    /// How a `CancelRun` went: `cancelled` when a live run was cancelled; otherwise the
    /// run's `status` says why not (it has ended already).
    RunCancelled {
        run_id: String,
        cancelled: bool,
        status: String,
    },
    /// The subagent workers after a `SetWorkers`.
    Workers(Vec<ProcessStatus>),
    /// How an `AnswerElicitation` went: `Err` says why it was not taken (not pending, or
    /// content that does not fit the schema: it stays pending).
    ElicitationAnswered(Result<(), String>),
    /// How an `AnswerApproval` went: the calls the run still waits on (empty: it goes on),
    /// or why the answer was not taken.
    ApprovalAnswered(Result<Vec<String>, String>),
}

/// A run to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSubmission {
    pub task: String,
    pub user: String,
    /// Defaults to the run id.
    pub thread: Option<String>,
    /// A YAML playbook for the scripted model.
    pub playbook: Option<PlaybookSource>,
    /// A model of config.yaml's `models` (the first when neither is given).
    pub model: Option<String>,
    /// Whether someone will answer a clarification (the run then stops at one);
    /// otherwise `ask_clarification` returns DeerFlow's "proceed" text.
    pub clarification: bool,
    /// config.yaml for this run instead of the cluster's (a path on the lead's host).
    pub config: Option<String>,
    /// The custom agent the run talks as (`update_agent` is offered to edit it), or with
    /// `bootstrap` the agent to create.
    pub agent: Option<String>,
    /// A bootstrap run: `setup_agent` is offered.
    pub bootstrap: bool,
    /// Someone may talk to the run; `false` (`antler run --no-input`, `"interactive": false`)
    /// leaves `ask_clarification` out of its catalog.
    pub interactive: bool,
    /// Whether the run is offered `task` (`None`: config.yaml's `subagents.enabled`).
    pub subagents: Option<bool>,
    /// The role of the gateway principal the run acts for (`None`: the operator), for the
    /// catalog's authorization policy.
    pub role: Option<String>,
    /// The client's key for this submission (HTTP `Idempotency-Key`): a repeat with the same
    /// key and user is answered the first one's run instead of starting another.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The uploads (names in the thread's `uploads/`) the task's user turn carries
    /// (`additional_kwargs.files`): the run's start lists them in `<current_uploads>`.
    #[serde(default)]
    pub files: Vec<String>,
}

/// Where a run's scripted playbook comes from. The type says who may name what: only the
/// control socket's caller (the operator's CLI, same user as the lead) names a host path;
/// the HTTP API names a file of `antler.playbook_dirs` or sends the YAML itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlaybookSource {
    /// An absolute path on the lead's host (control socket only).
    File(String),
    /// A file of `antler.playbook_dirs`, by its name relative to one of them.
    Named(String),
    /// The playbook's YAML text.
    Inline(String),
}

/// One process as `antler status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStatus {
    pub role: Role,
    /// Worker index for subagents, 0 otherwise.
    pub index: u32,
    pub pid: Option<u32>,
    pub address: String,
    pub healthy: bool,
    pub restarts: u32,
    pub uptime_s: f64,
    /// Milliseconds since the last heartbeat from this process (None: never heard).
    pub last_heartbeat_ms: Option<u64>,
    /// `running`, `starting`, `restarting` or `failed`.
    pub state: String,
    /// Why the process is failed or was last restarted.
    pub reason: Option<String>,
    /// A subagent worker's task slots (from its handshake), as the dispatcher sees them.
    #[serde(default)]
    pub slots: Option<u32>,
    /// A subagent worker's slots taken by tasks now.
    #[serde(default)]
    pub in_use: Option<u32>,
}

/// The outcome of pinging one peer through its link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerPing {
    pub role: Role,
    pub index: u32,
    pub address: String,
    /// Round trip in microseconds, or the error.
    pub result: Result<u64, String>,
}
