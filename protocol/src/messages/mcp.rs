//! Messages between the lead (or a worker) and mcp-host: the registry's status, the
//! aggregated tool list, tool calls, and the extensions config. JSON values (schemas,
//! arguments, structured content) travel as [`Json`], which the codec can carry.

use serde::{Deserialize, Serialize};

use super::control::Health;
use crate::json::Json;

/// Requests mcp-host answers beyond the control pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Mcp::")]
pub enum McpRequest {
    /// The host's health together with its MCP registry summary.
    Health,
    /// Every configured server with its state (`antler mcp status`).
    Status,
    /// The tools of every ready server, or of one.
    ListTools { server: Option<String> },
    /// Call one tool of one server.
    CallTool(McpCall),
    /// Re-read the extensions config now (after the gateway wrote it).
    Reload,
    /// Stream a `McpReply::ToolsChanged` item each time a server's tool list changes;
    /// the final reply comes when the subscriber cancels or the host stops.
    WatchTools,
    /// What a run starts with (`McpReply::Discovery`): the tools of the ready servers and
    /// the servers that are not ready. Answers promptly: a server is waited for only
    /// briefly after it was started, never for its whole start timeout.
    Discover,
    /// Start a user's OAuth login (authorization code + PKCE) to an HTTP server: the
    /// answer is the authorization URL to open (`McpReply::OAuthUrl`). Without
    /// `redirect_uri`, mcp-host takes the redirect on a loopback listener of its own.
    OAuthStart(McpOAuthLogin),
    /// Complete the login in progress with the URL the browser was redirected to (the
    /// gateway's callback route): `McpReply::OAuthDone`.
    OAuthComplete {
        server: String,
        user: Option<String>,
        redirected: String,
    },
    /// Wait, within the request's deadline, for the login in progress to complete:
    /// `McpReply::OAuthDone`, or an error saying why it did not.
    OAuthWait {
        server: String,
        user: Option<String>,
    },
    /// The run's user answers an elicitation a call of theirs is waiting on (policy
    /// `ask`): `McpReply::ElicitationAnswered`, refused when the id is not pending for
    /// this user and run, or when accepted content does not fit the requested schema.
    AnswerElicitation(McpElicitationAnswer),
    /// Stream this host's OAuth credentials, sealed with the mcp-host replicas' shared key
    /// (`--oauth-key-file`): every one it holds, then each change, as
    /// `McpReply::Credential` items. The lead keeps them for the other replicas and for
    /// a replica that starts empty; it cannot open them. Refused (`Unsupported`) by a host
    /// with no key.
    WatchCredentials,
    /// Credentials another replica sealed: each is taken when it is newer than the one
    /// held (`McpReply::CredentialsTaken` with how many were).
    PutCredentials(Vec<SealedCredential>),
}

/// One (server, user)'s OAuth credentials, sealed (AES-256-GCM, the (server, user) as
/// associated data) with the key every mcp-host replica holds and the lead does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedCredential {
    pub server: String,
    pub user: String,
    /// When the sealing replica stored them (Unix ms): the newer one wins.
    pub updated_ms: u64,
    /// Nonce and ciphertext; `None`: the credentials were removed.
    pub sealed: Option<Vec<u8>>,
}

/// One answer to a pending elicitation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpElicitationAnswer {
    /// The elicitation's id, as `McpReply::Elicitation` gave it.
    pub id: String,
    /// Who answers: it must be the user the waiting call runs for.
    pub user: String,
    /// The thread of the waiting call (it routes the answer to the call's replica).
    pub thread: String,
    /// The run of the waiting call.
    pub run_id: String,
    pub action: ElicitationAction,
    /// The answered fields, a JSON object (`accept` only).
    pub content: Option<Json>,
}

/// What the user did with an elicitation (MCP's `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElicitationAction {
    Accept,
    Decline,
    Cancel,
}

/// Why an answer to an elicitation was refused (the elicitation stays as it was).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ElicitationRefusal {
    /// No elicitation with this id waits for this user and run (answered, expired, or
    /// never asked).
    #[error("no pending elicitation '{0}' for this run")]
    Unknown(String),
    /// The content does not fit the requested schema; the elicitation stays pending.
    #[error("the content does not fit the requested schema: {0}")]
    Invalid(String),
}

/// A login to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpOAuthLogin {
    /// The server as named in `mcpServers`.
    pub server: String,
    /// Whose token it gets (`None`: the default user).
    pub user: Option<String>,
    /// Where the authorization server redirects the browser (`None`: a loopback listener
    /// of mcp-host's).
    pub redirect_uri: Option<String>,
}

/// One tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCall {
    /// The server as named in `mcpServers`.
    pub server: String,
    /// The tool's name as the server lists it (unprefixed), or the prefixed `{server}_{tool}`.
    pub tool: String,
    /// The arguments: a JSON object (`{}` when empty).
    pub args: Json,
    /// The user the call runs for (stdio session pool key), if any.
    pub user: Option<String>,
    /// The thread the call runs for (stdio session pool key and workspace), if any.
    pub thread: Option<String>,
    /// The thread's workspace directory (stdio servers run there when pooled).
    pub workspace: Option<String>,
    /// The run the call is made for: with `tool_call_id`, a server's elicitation under
    /// policy `ask` is streamed to the caller (`McpReply::Elicitation`) and waits for
    /// the run's user; without them it is declined.
    #[serde(default)]
    pub run_id: Option<String>,
    /// The model's id for this tool call.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The approval rule a person approved this call under (issue 37): mcp-host checks the
    /// config's approval policy again, and a call its policy asks about runs only with the
    /// approval of that rule.
    #[serde(default)]
    pub clearance: Option<String>,
}

/// Replies from mcp-host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(prefix = "Mcp::")]
pub enum McpReply {
    Health {
        health: Health,
        servers: u32,
    },
    Status(Vec<McpServerStatus>),
    Tools(Vec<McpTool>),
    CallResult(McpCallResult),
    /// The registry after a reload: servers started, stopped, restarted, kept.
    Reloaded(McpReloadSummary),
    /// One server's tool list changed (a stream item of `WatchTools`).
    ToolsChanged {
        server: String,
        tools: u32,
    },
    /// `WatchTools` ended.
    WatchEnded,
    /// The answer to `Discover`.
    Discovery(McpDiscovery),
    /// The authorization URL of a login just started (never a token).
    OAuthUrl {
        url: String,
    },
    /// A login completed: the user's token is stored (and never returned).
    OAuthDone {
        server: String,
        user: String,
    },
    /// A stream item of `CallTool`: the server asks the run's user for input (policy
    /// `ask`); the call's result follows once it is answered, declined or expired.
    Elicitation {
        id: String,
        server: String,
        message: String,
        /// The requested schema (an object of primitive properties).
        requested_schema: Json,
    },
    /// The answer to `AnswerElicitation`.
    ElicitationAnswered(Result<(), ElicitationRefusal>),
    /// A stream item of `WatchCredentials`.
    Credential(SealedCredential),
    /// The answer to `PutCredentials`: how many were newer and taken.
    CredentialsTaken(u32),
}

/// The tools a run can use now, and the servers it goes without.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpDiscovery {
    /// The tools of every server that has a tool list (ready, or reconnecting).
    pub tools: Vec<McpTool>,
    /// The enabled servers that are not ready: those starting or failed in file order,
    /// then those the config could not start (`invalid`).
    pub not_ready: Vec<McpServerStatus>,
}

/// One server as `antler mcp status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    pub name: String,
    /// `stdio`, `sse` or `http`.
    pub transport: String,
    /// `starting`, `ready`, `reconnecting`, `failed` or `stopped`.
    pub state: String,
    pub tools: u32,
    pub last_error: Option<String>,
    pub reconnects: u32,
    /// Calls running on this server now.
    pub in_flight: u32,
    /// The MCP protocol version its session agreed on (`None`: never connected).
    pub protocol_version: Option<String>,
    /// How that session started: `initialize` (the handshake) or `discover` (the stateless
    /// `2026-07-28` lifecycle, `server/discover`); `None`: never connected.
    #[serde(default)]
    pub lifecycle: Option<String>,
    /// How its calls are authorized: `none`, `client credentials: token held`, `login
    /// required`, `logged in: N users`, ... (never a token).
    #[serde(default)]
    pub auth: Option<String>,
}

/// One tool as the model would see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpTool {
    pub server: String,
    /// The exposed name: `{server}_{tool}` when `tool_name_prefix` is on.
    pub name: String,
    /// The server's own name for it.
    pub original_name: String,
    pub description: String,
    /// The JSON Schema of the arguments.
    pub input_schema: Json,
    /// Effective routing mode (`off`, `auto`, ...), for tagging.
    pub routing: String,
}

/// The outcome of a tool call as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCallResult {
    /// True when the server said `isError`, or the call failed (timeout, lost connection).
    pub is_error: bool,
    /// The converted content blocks.
    pub content: Vec<McpContent>,
    /// `structuredContent`.
    pub structured: Option<Json>,
}

impl McpCallResult {
    /// An error result carrying one text.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            content: vec![McpContent::Text(text.into())],
            structured: None,
        }
    }

    /// The texts joined by newlines (DeerFlow's `ToolException` message for errors).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|c| match c {
                McpContent::Text(t) => Some(t.as_str()),
                McpContent::Resource { text: Some(t), .. } => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// One content block of a tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum McpContent {
    Text(String),
    /// Base64 data with its MIME type.
    Image {
        data: String,
        mime_type: String,
    },
    Audio {
        data: String,
        mime_type: String,
    },
    /// A link to a resource (an image or file URL).
    ResourceLink {
        uri: String,
        name: String,
        mime_type: Option<String>,
    },
    /// An embedded resource: text or a base64 blob.
    Resource {
        uri: String,
        mime_type: Option<String>,
        text: Option<String>,
        blob: Option<String>,
    },
}

/// What a reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpReloadSummary {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub restarted: Vec<String>,
    pub unchanged: Vec<String>,
    /// Why the file was not applied (the old set is kept), if it was not.
    pub error: Option<String>,
}
