//! Every request and reply that crosses a process, one enum per pair of peers.
//! `Request`/`Reply` wrap them so one connection type carries any pair; a host answers
//! the pairs of its role and replies `RemoteError::Unsupported` to the others.

mod bytes;
mod control;
mod lead;
mod mcp;
mod sandbox;
mod task;
mod worker;

pub use control::{
    ActorRef, ControlReply, ControlRequest, Health, ACTOR_KINDS, CHAOS_ENV, CHAOS_OFF,
};
pub use lead::{LeadReply, LeadRequest, PeerPing, PlaybookSource, ProcessStatus, RunSubmission};
pub use mcp::{
    ElicitationAction, ElicitationRefusal, McpCall, McpCallResult, McpContent, McpDiscovery,
    McpElicitationAnswer, McpOAuthLogin, McpReloadSummary, McpReply, McpRequest, McpServerStatus,
    McpTool, SealedCredential,
};
pub use sandbox::{
    AcpInvocation, AcpMcpServer, AcpOutcome, AcpTransport, AcquireSource, Acquired, FileContent,
    FileRead, LeaseOwner, ListedFile, PoolStatus, Principal, SandboxError, SandboxReply,
    SandboxRequest, SandboxStatus, StagedUpload, ThreadFileError, ThreadFileOp, ThreadFileReply,
    ToolCall, ToolResult, UploadListing, UploadOp, VolumeStatus, MAX_NAME_PROBES, SANDBOX_TOOLS,
};
pub use task::{
    ModelEntry, RoutingMode, TaskEvent, TaskResult, TaskSpec, TaskStatus, TaskStopReason,
    ThreadFilesMode, TokenBudget, TokenUsage, ToolRouting, WebToolEntry, WireCatalog,
    WireContextSize, WireLoopDetection, WireModel, WireSource, WireSummarization, WireTool,
    WireToolOutput,
};
pub use worker::{
    ApprovalAnswer, ApprovalAnswerChoice, TaskAssignment, WorkerReply, WorkerRequest,
};

use serde::{Deserialize, Serialize};

/// A request to any peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Understood by every peer: ping and health.
    Control(ControlRequest),
    /// A CLI or operator to the lead.
    Lead(LeadRequest),
    /// The lead (or a worker) to mcp-host.
    Mcp(McpRequest),
    /// The lead (or a worker) to sandbox-host.
    Sandbox(SandboxRequest),
    /// The lead to a subagent worker.
    Worker(WorkerRequest),
}

/// A reply (or stream item) from any peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Control(ControlReply),
    Lead(LeadReply),
    Mcp(McpReply),
    Sandbox(SandboxReply),
    Worker(WorkerReply),
}

impl Request {
    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Control(r) => r.kind(),
            Request::Lead(_) => "lead",
            Request::Mcp(_) => "mcp",
            Request::Sandbox(_) => "sandbox",
            Request::Worker(_) => "worker",
        }
    }
}
