//! A task as it travels from the lead to a worker: who it is for (run, call, user and
//! thread, so it uses the parent's sandbox), what to do (the task text and the system
//! prompt the lead built per spec B), the subagent's catalog with its hash (the worker
//! rebuilds it and refuses a task whose catalog does not hash to what the lead sent),
//! the model's settings ([`WireModel`]), and the limits. It crosses the wire as the
//! protocol's `TaskSpec` (`task::wire` converts); the model's key is in it but never in
//! its `Debug` form, a log or an event.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::routing::McpRouting;
use crate::catalog::{Catalog, CatalogError, ToolSource, ToolSpec, TOOL_SEARCH_NAME};
use crate::middleware::token_budget::TokenBudget;
use crate::model::WireModel;
use crate::tools::web::WireWebTools;

/// One task for a worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskSpec {
    pub run_id: String,
    pub tool_call_id: String,
    pub user_id: String,
    pub thread_id: String,
    /// The data root the thread's directories are under (`ThreadPaths`).
    pub data_root: PathBuf,
    /// Whether the thread's files are on the worker's disk under `data_root` or reached
    /// through the sandbox-host replica that owns the thread.
    #[serde(default)]
    pub thread_files: crate::thread::files::ThreadFilesMode,
    pub subagent_type: String,
    pub description: String,
    /// The task text, exactly as the lead's model wrote it.
    pub prompt: String,
    /// The subagent's system message (spec B.1), `None` when it has no parts.
    pub system_prompt: Option<String>,
    pub catalog: WireCatalog,
    pub model: WireModel,
    /// The recursion limit (`max_turns`).
    pub max_turns: usize,
    /// The task's timeout (7.3).
    pub timeout_s: u64,
    /// Deadline of one tool call on a host.
    pub tool_timeout_s: u64,
    pub token_budget: Option<TokenBudget>,
    /// The config's web tool entries, so the subagent's web tools run on the worker.
    #[serde(default)]
    pub web_tools: WireWebTools,
    /// The sandbox-host replica holding the thread's sandbox (`None`: the worker's own).
    #[serde(default)]
    pub sandbox_host: Option<String>,
    /// The mcp-host replica holding the thread's pooled sessions (`None`: the worker's own).
    #[serde(default)]
    pub mcp_host: Option<String>,
    /// `summarization:` when it is on; the task summarizes with its own model, within its
    /// model's window.
    #[serde(default)]
    pub summarization: Option<antler_protocol::config::SummarizationConfig>,
    /// The lead's `loop_detection:`: the task's loop stops at the lead's thresholds.
    #[serde(default)]
    pub loop_detection: antler_protocol::config::LoopDetectionConfig,
    /// The lead's `tool_output:`: the task's large results are budgeted as the lead's.
    #[serde(default)]
    pub tool_output: antler_protocol::config::ToolOutputConfig,
    /// The parent run's approval policy (`task::approvals`, JSON text; `None`: none).
    #[serde(default)]
    pub approvals: Option<String>,
}

/// A catalog's tools and deferral setting, and the hash it must have.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireCatalog {
    pub tools: Vec<WireTool>,
    pub tool_search_enabled: bool,
    pub hash: Option<String>,
}

/// One tool of a [`WireCatalog`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WireTool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub source: WireSource,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub routing: Option<McpRouting>,
}

/// Where a [`WireTool`] comes from.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireSource {
    Config {
        use_id: String,
    },
    Builtin,
    Mcp {
        server: Option<String>,
        original_name: String,
    },
    Acp,
}

/// Why a worker refuses a catalog.
#[derive(Debug, thiserror::Error)]
pub enum CatalogMismatch {
    #[error("the subagent's catalog does not build: {0}")]
    Build(#[from] CatalogError),
    #[error("the subagent's catalog hashes to {got}, the lead sent {sent}: refused")]
    Hash { sent: String, got: String },
}

impl WireCatalog {
    /// `catalog` as it travels (`tool_search` is rebuilt by the worker, not sent).
    pub fn of(catalog: &Catalog, tool_search_enabled: bool) -> WireCatalog {
        WireCatalog {
            tools: catalog
                .tools()
                .iter()
                .filter(|t| !(t.name == TOOL_SEARCH_NAME && t.source == ToolSource::Builtin))
                .map(WireTool::of)
                .collect(),
            tool_search_enabled,
            hash: catalog.hash().map(|h| h.as_str().to_owned()),
        }
    }

    /// The catalog again, checked against the hash the lead computed.
    pub fn rebuild(&self) -> Result<Catalog, CatalogMismatch> {
        let tools = self.tools.iter().map(WireTool::to_spec).collect();
        let catalog = Catalog::build(tools, self.tool_search_enabled)?;
        let got = catalog.hash().map(|h| h.as_str().to_owned());
        if got != self.hash {
            return Err(CatalogMismatch::Hash {
                sent: self.hash.clone().unwrap_or_else(|| "none".into()),
                got: got.unwrap_or_else(|| "none".into()),
            });
        }
        Ok(catalog)
    }
}

impl WireTool {
    fn of(tool: &ToolSpec) -> WireTool {
        WireTool {
            name: tool.name.clone(),
            description: tool.description.clone(),
            parameters: tool.parameters.value().clone(),
            source: match &tool.source {
                ToolSource::Config { use_id } => WireSource::Config {
                    use_id: use_id.clone(),
                },
                ToolSource::Builtin => WireSource::Builtin,
                ToolSource::Mcp {
                    server,
                    original_name,
                } => WireSource::Mcp {
                    server: server.as_deref().map(str::to_owned),
                    original_name: original_name.to_string(),
                },
                ToolSource::Acp => WireSource::Acp,
            },
            group: tool.group.clone(),
            routing: tool.routing.clone(),
        }
    }

    fn to_spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone().into(),
            source: match &self.source {
                WireSource::Config { use_id } => ToolSource::Config {
                    use_id: use_id.clone(),
                },
                WireSource::Builtin => ToolSource::Builtin,
                WireSource::Mcp {
                    server,
                    original_name,
                } => ToolSource::Mcp {
                    server: server.as_deref().map(Arc::from),
                    original_name: Arc::from(original_name.as_str()),
                },
                WireSource::Acp => ToolSource::Acp,
            },
            group: self.group.clone(),
            routing: self.routing.clone(),
        }
    }
}
