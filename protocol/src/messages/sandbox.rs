//! Messages between the lead (or a worker) and sandbox-host: acquiring, renewing and
//! releasing a lease on a thread's sandbox, running a sandbox tool in it, the thread's
//! own files (for a lead or worker that cannot see sandbox-host's volume), and the pool's
//! status. Errors the model
//! should see travel inside [`ToolResult`]; errors the operator should see are
//! [`SandboxError`].

use serde::{Deserialize, Serialize};

use crate::json::Json;

/// The tools sandbox-host runs: the contract between the lead and sandbox-host.
pub const SANDBOX_TOOLS: &[&str] = &[
    "bash",
    "ls",
    "read_file",
    "write_file",
    "str_replace",
    "glob",
    "grep",
];

use super::control::Health;

/// Who asks for a sandbox: the user and thread it belongs to, and the user's roles (for
/// acquire-time authorization).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub user_id: String,
    pub thread_id: String,
    /// Roles of the user; empty means the configured default role.
    pub roles: Vec<String>,
}

/// Who holds a lease on a sandbox: one run of one lead incarnation (an id the lead makes
/// when it starts). A lease expires unless renewed (by [`SandboxRequest::RenewLease`] or
/// any call that names it), and the leases of an older incarnation are reclaimed as
/// soon as a newer one names itself. Incarnation ids sort by the lead's start.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaseOwner {
    pub incarnation: String,
    pub run_id: String,
}

/// One sandbox tool call (`bash`, `ls`, `read_file`, `write_file`, `str_replace`, `glob`, `grep`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// Its arguments, a JSON object as the model wrote it.
    pub args: Json,
    /// Request-scoped secrets (name, value) for `bash`: injected into the command's
    /// environment only when the name is on `sandbox.secrets`, and redacted from output.
    pub secrets: Vec<(String, String)>,
    /// The approval rule a person approved this call under (issue 37): sandbox-host checks
    /// the config's approval policy again, and a call its policy asks about runs only with
    /// the approval of that rule.
    pub clearance: Option<String>,
}

/// Requests sandbox-host answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Sandbox::")]
pub enum SandboxRequest {
    /// The host's health together with its pool summary.
    Health,
    /// The sandbox of (user, thread), created, taken from the warm pool or reused.
    /// `known_id` is the id the thread's state already holds, if any: a different id is a
    /// conflict, not an overwrite.
    /// `owner` holds the lease (`None`: an anonymous hold, which expires the same way).
    Acquire {
        principal: Principal,
        known_id: Option<String>,
        owner: Option<LeaseOwner>,
    },
    /// Ends `owner`'s lease (`None`: one anonymous hold); the last one parks the sandbox
    /// in the warm pool (release is not destroy).
    Release {
        sandbox_id: String,
        owner: Option<LeaseOwner>,
    },
    /// Runs a tool in an acquired sandbox. The call renews `owner`'s lease (taking it
    /// again if it had expired). A `call_id` makes it idempotent: the same (owner's run,
    /// call id) on the same sandbox is run once, and a repeat gets the first result.
    Call {
        sandbox_id: String,
        call: ToolCall,
        owner: Option<LeaseOwner>,
        call_id: Option<String>,
    },
    /// Renews every lease `owner` holds (the run is still driven).
    RenewLease { owner: LeaseOwner },
    /// Acquires the principal's sandbox, runs the tool and releases it: one tool call of a
    /// run that holds no sandbox yet (what `antler tool call` does).
    CallOnce {
        principal: Principal,
        call: ToolCall,
    },
    /// The pool and every sandbox in it.
    Status,
    /// One operation on the principal's thread directories (`/mnt/user-data/...`), on
    /// the replica that owns the thread: spill files, `view_image`, settlement and
    /// artifact downloads of a lead or worker that has no access to the volume. It needs
    /// no sandbox and holds no lease.
    ThreadFiles {
        principal: Principal,
        op: ThreadFileOp,
    },
    /// `invoke_acp_agent` (spec F): runs one prompt on the ACP agent `agent` of
    /// sandbox-host's own `acp_agents` (a lead cannot name a command), in the principal's
    /// thread's `acp-workspace`. The reply is a stream: [`SandboxReply::AcpActivity`] items
    /// (the agent's tool calls and plan) as they happen, then [`SandboxReply::AcpEnded`].
    /// Dropping the stream cancels the prompt (`session/cancel`) and stops the agent.
    InvokeAcp(AcpInvocation),
    /// The bytes `user_id` keeps in the uploads of its threads on this replica (the
    /// per-user total of `uploads.max_user_total_size`): sent to every replica, since a
    /// user's threads hash to several; answers [`SandboxReply::UploadsUsage`].
    UploadsUsage { user_id: String },
}

/// One `invoke_acp_agent` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpInvocation {
    pub principal: Principal,
    /// The `acp_agents` entry.
    pub agent: String,
    pub prompt: String,
    /// The session's `mcpServers` (spec F.2.3: the enabled servers of the extensions
    /// config, in ACP's shape once sandbox-host opens the session).
    pub mcp_servers: Vec<AcpMcpServer>,
}

/// One MCP server of an ACP session (spec F.2.3), as the lead's extensions config has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcpMcpServer {
    /// A server the agent starts: `command` with `args`, and `env` as (name, value).
    Stdio {
        name: String,
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A server the agent reaches at `url`, with `headers` as (name, value).
    Remote {
        name: String,
        transport: AcpTransport,
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// How an [`AcpMcpServer::Remote`] is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcpTransport {
    Http,
    Sse,
}

impl AcpMcpServer {
    /// The server as ACP's `session/new` names it (`McpServer`: stdio, `http` or `sse`).
    pub fn to_acp_json(&self) -> serde_json::Value {
        fn pairs(pairs: &[(String, String)]) -> serde_json::Value {
            pairs
                .iter()
                .map(|(name, value)| serde_json::json!({"name": name, "value": value}))
                .collect()
        }
        match self {
            AcpMcpServer::Stdio {
                name,
                command,
                args,
                env,
            } => serde_json::json!({
                "name": name,
                "command": command,
                "args": args,
                "env": pairs(env),
            }),
            AcpMcpServer::Remote {
                name,
                transport,
                url,
                headers,
            } => serde_json::json!({
                "name": name,
                "type": match transport {
                    AcpTransport::Http => "http",
                    AcpTransport::Sse => "sse",
                },
                "url": url,
                "headers": pairs(headers),
            }),
        }
    }
}

/// How an `invoke_acp_agent` call ended: the tool message's text (spec F.5's texts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpOutcome {
    pub text: String,
    /// An error text (unknown agent, timeout, the agent failed).
    pub is_error: bool,
    /// The ACP protocol version the agent and sandbox-host agreed on (`None`: none).
    pub protocol_version: Option<u16>,
}

/// An operation on one thread's `user-data` directory. Paths are virtual
/// (`/mnt/user-data/outputs/a.png`) and resolved beneath the directory, links inside
/// followed and none out: a path that would leave it is [`ThreadFileError::Escape`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThreadFileOp {
    /// Creates `workspace`, `uploads` and `outputs` (existing files are kept).
    EnsureDirs,
    /// Where `path` really is, relative to `user-data` (`outputs/charts/a.png`).
    Resolve { path: String },
    /// Up to `len` bytes of the regular file `path` from `offset`, with its size; a file
    /// larger than `max_size` is not read ([`FileContent::TooLarge`]).
    Read {
        path: String,
        offset: u64,
        len: u64,
        max_size: u64,
    },
    /// Writes `outputs/.tool-results/{name}` (through a temporary name, then a rename):
    /// the output budget's spill file. `name` is one plain file name.
    WriteSpill {
        name: String,
        #[serde(with = "super::bytes")]
        content: Vec<u8>,
    },
    /// Writes `outputs/{name}` as a new file, never over one: when the name is taken the
    /// first free `{stem}-1{ext}`, `{stem}-2{ext}`, ... (at most [`MAX_NAME_PROBES`]) is
    /// used. `name` is one plain file name. Answers [`ThreadFileReply::Written`].
    WriteOutput {
        name: String,
        #[serde(with = "super::bytes")]
        content: Vec<u8>,
    },
    /// The regular files under `outputs` (not `.tool-results`, never through a link),
    /// for delivery settlement.
    SnapshotOutputs,
    /// The regular files (not links) directly in the directory `path`.
    ListFiles { path: String },
    /// One step of the uploads routes on the thread's `uploads` directory.
    Uploads(UploadOp),
    /// Removes the thread's directories, all of them (the thread was deleted); a thread
    /// without any is removed already.
    RemoveThread,
}

/// One step of the uploads routes (spec B.1) on a thread's `uploads` directory, run where
/// the directory is (the lead's disk, or the sandbox-host replica that owns the thread).
/// Every name is one plain file name; staging names are `.upload-*.part`. The twins'
/// manifest (`user-data/.uploads-manifest.json`) says which `.md` a conversion wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UploadOp {
    /// Creates the thread's directories and removes staging files a dead request left
    /// (older than an hour). Answers `Done`.
    Prepare,
    /// Whether the upload `name` may be written: nothing there, or a regular file with one
    /// link. Answers [`ThreadFileReply::Checked`].
    CheckDestination { name: String },
    /// Writes `content` at `offset` of the staging file `staging`, which offset 0 creates
    /// (never over an existing file) and any other offset extends at its end. Answers
    /// `Done`.
    WriteStaged {
        staging: String,
        offset: u64,
        #[serde(with = "super::bytes")]
        content: Vec<u8>,
    },
    /// Removes these staging files (a refused request). Answers `Done`.
    Discard { staging: Vec<String> },
    /// Renames each staging file to its name (the request was accepted), all or none: a
    /// name the user writes is nobody's twin any more, and an upload written again loses
    /// its old twin. Answers `Done`.
    Commit { files: Vec<StagedUpload> },
    /// Keeps the staging file `staging` (a conversion's output, at most `max_bytes`) as
    /// `source`'s twin `twin` and records it; the staging file goes either way. Answers
    /// `Done`.
    KeepTwin {
        source: String,
        staging: String,
        twin: String,
        max_bytes: u64,
    },
    /// Deletes the upload `name` and its recorded twin (never a file that is not its
    /// twin). Answers [`ThreadFileReply::Deleted`].
    Delete { name: String },
    /// The uploads by name (regular files, staging files left out) and the twins.
    /// Answers [`ThreadFileReply::Uploads`].
    List,
}

/// One staged file of an upload request and the name it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedUpload {
    pub staging: String,
    pub name: String,
}

/// [`UploadOp::List`]'s answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadListing {
    /// By name.
    pub files: Vec<ListedFile>,
    /// Upload name -> its twin's name.
    pub twins: std::collections::BTreeMap<String, String>,
}

/// How many suffixed names [`ThreadFileOp::WriteOutput`] tries before it gives up.
pub const MAX_NAME_PROBES: u32 = 1000;

/// What a [`ThreadFileOp`] returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThreadFileReply {
    /// `EnsureDirs` and `WriteSpill` succeeded.
    Done,
    /// `Resolve`: the real path relative to `user-data`.
    Resolved(String),
    Read(FileRead),
    /// `SnapshotOutputs`: virtual path -> (size, modification time in ns).
    Snapshot(std::collections::BTreeMap<String, (u64, u128)>),
    /// `ListFiles`.
    Files(Vec<ListedFile>),
    /// `WriteOutput`: the virtual path written (`/mnt/user-data/outputs/shot-1.png`).
    Written(String),
    /// `UploadOp::CheckDestination`: whether the name may be written.
    Checked(bool),
    /// `UploadOp::Delete`: whether there was such an upload.
    Deleted(bool),
    /// `UploadOp::List`.
    Uploads(UploadListing),
}

/// A [`ThreadFileOp::Read`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRead {
    /// The real path relative to `user-data`.
    pub resolved: String,
    /// Whether it is a regular file (only those are read).
    pub is_file: bool,
    /// Its size when it was opened.
    pub size: u64,
    pub content: FileContent,
}

/// The bytes of a [`FileRead`], or why there are none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileContent {
    /// From the requested offset (shorter than asked at the end of the file).
    Bytes(#[serde(with = "super::bytes")] Vec<u8>),
    /// Not a regular file.
    NotAFile,
    /// Larger than `max_size`.
    TooLarge,
    /// It could not be read.
    Unreadable,
}

/// One entry of [`ThreadFileReply::Files`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedFile {
    pub name: String,
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub modified_ns: u128,
}

/// Why a [`ThreadFileOp`] failed. An escape names the path as it was given, never where
/// it led.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ThreadFileError {
    #[error("access denied: {path} leads outside the thread's directories")]
    Escape { path: String },
    #[error("not found: {path}")]
    NotFound { path: String },
    #[error("not a path under /mnt/user-data: {path}")]
    NotVirtual { path: String },
    #[error("not a plain file name: {name}")]
    BadName { name: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{0}")]
    InvalidIdentity(String),
    /// The replica that owns the thread could not be had, or answered out of protocol.
    #[error("the thread's files are unavailable: {0}")]
    Unavailable(String),
    /// The thread's sandbox is leased (a run or a session holds it): its files stay.
    #[error("the thread's sandbox is in use")]
    InUse,
}

/// Replies from sandbox-host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Sandbox::")]
pub enum SandboxReply {
    Health {
        health: Health,
        live_sandboxes: u32,
    },
    Acquired(Result<Acquired, SandboxError>),
    Released(Result<(), SandboxError>),
    /// How many leases were renewed.
    Renewed(u32),
    /// The tool's result; `Err` when no sandbox could be had for the call.
    ToolResult(Result<ToolResult, SandboxError>),
    Status(PoolStatus),
    ThreadFiles(Result<ThreadFileReply, ThreadFileError>),
    /// [`SandboxRequest::UploadsUsage`]: the user's upload bytes on this replica.
    UploadsUsage(Result<u64, ThreadFileError>),
    /// A stream item of [`SandboxRequest::InvokeAcp`]: one `session/update` of the agent
    /// that is not message text (a tool call, its update, a plan), as the agent sent it
    /// (ACP's `SessionUpdate`, passed on unchanged).
    AcpActivity {
        update: Json,
    },
    /// The final reply of [`SandboxRequest::InvokeAcp`].
    AcpEnded(AcpOutcome),
}

/// A successful acquire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquired {
    /// The deterministic id: the first 16 hex characters of sha256(`user:thread`).
    pub sandbox_id: String,
    /// Where it came from.
    pub source: AcquireSource,
    /// How long the lease lasts without renewal, in milliseconds.
    pub lease_ttl_ms: u64,
}

/// How an acquire was satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcquireSource {
    /// It was already active (another holder, or the same thread again).
    Active,
    /// Taken from the warm pool, bound to this thread before.
    Warm,
    /// A pre-warmed sandbox not bound to any thread yet was bound to this one.
    Prewarmed,
    /// Started now.
    Created,
}

/// What a tool returned: the text the model reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    pub content: String,
    /// Whether the content is an error (it then starts with `Error:`).
    pub is_error: bool,
}

/// Why a sandbox could not be had. These are for the operator and the run; a run turns them
/// into an error tool message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    InvalidIdentity(String),
    #[error("user '{user_id}' is not allowed to use a sandbox")]
    Unauthorized { user_id: String },
    #[error("sandbox id conflict for thread '{thread_id}': the thread holds {known} but its sandbox is {actual}")]
    IdConflict {
        thread_id: String,
        known: String,
        actual: String,
    },
    #[error("the sandbox pool is at capacity ({capacity} sandboxes)")]
    AtCapacity { capacity: u32 },
    #[error("user '{user_id}' holds {limit} active sandboxes, its share of the pool (sandbox.limits.user_max_sandboxes): a thread's sandbox frees when its run ends")]
    UserAtLimit { user_id: String, limit: u32 },
    #[error("no sandbox became free within {waited_ms} ms (capacity {capacity})")]
    WaitTimedOut { capacity: u32, waited_ms: u64 },
    #[error("no sandbox with id {0}")]
    UnknownSandbox(String),
    #[error("sandboxed tools are unavailable: {0}")]
    ProviderUnavailable(String),
    #[error("unknown sandbox tool '{0}'")]
    UnknownTool(String),
}

/// The pool as `antler sandbox status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStatus {
    /// `bwrap` or `local`.
    pub provider: String,
    /// Why the provider is what it is (the probe's verdict).
    pub provider_note: String,
    /// The soft cap on active plus warm sandboxes.
    pub replicas: u32,
    /// The hard cap on sandboxes.
    pub capacity: u32,
    pub idle_timeout_s: u64,
    pub base_dir: String,
    /// The filesystem under the base directory (`None`: it cannot be read).
    #[serde(default)]
    pub volume: Option<VolumeStatus>,
    pub sandboxes: Vec<SandboxStatus>,
}

/// How full the sandboxes' volume is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStatus {
    pub free_bytes: u64,
    pub total_bytes: u64,
    /// Below 1% free (at least 16 MiB): writes in sandboxes are about to fail, or do.
    pub full: bool,
}

/// One sandbox in [`PoolStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatus {
    pub sandbox_id: String,
    /// Empty for a pre-warmed sandbox not bound to a thread.
    pub user_id: String,
    pub thread_id: String,
    /// `active`, `warm` or `prewarmed`.
    pub state: String,
    /// Holders of an active sandbox.
    pub holders: u32,
    pub age_ms: u64,
    /// Since the last acquire or release.
    pub idle_ms: u64,
    /// The supervisor process (bwrap provider).
    pub supervisor_pid: Option<u32>,
}
