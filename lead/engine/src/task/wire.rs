//! The task's types in their wire forms (`antler_protocol::messages`: `TaskSpec`,
//! `TaskEvent`, `TaskResult` and what they carry): the lead converts a task before it
//! sends it and a worker after it receives one, and back for the task's events and
//! result. Every conversion is total but a scripted model's: its playbook travels in the
//! playbook's own JSON form (the scripted model owns that shape) and is read back on the
//! worker.

use std::time::Duration;

use antler_protocol::messages as wire;
use antler_protocol::Json;
use serde_json::{Map, Value};

use super::spec::{TaskSpec, WireCatalog, WireSource, WireTool};
use crate::catalog::routing::{McpRouting, RoutingMode};
use crate::middleware::token_budget::TokenBudget;
use crate::model::resilient::{BreakerSettings, LlmCall};
use crate::model::WireModel;
use crate::thread::files::ThreadFilesMode;
use crate::thread::state::TokenUsage;
use crate::tools::task::{TaskEvent, TaskResult, TaskStatus, TaskStopReason};
use crate::tools::web::{WireWebEntry, WireWebTools};

/// Why a task's wire form could not be made or read: its scripted model's playbook. It
/// names the kind of error, never the text (which is the playbook author's).
#[derive(Debug, thiserror::Error)]
#[error("the task's playbook does not convert ({:?})", .0.classify())]
pub struct TaskWireError(#[from] serde_json::Error);

impl TaskSpec {
    /// The task as it travels.
    pub fn to_wire(&self) -> Result<wire::TaskSpec, TaskWireError> {
        Ok(wire::TaskSpec {
            run_id: self.run_id.clone(),
            tool_call_id: self.tool_call_id.clone(),
            user_id: self.user_id.clone(),
            thread_id: self.thread_id.clone(),
            data_root: self.data_root.clone(),
            thread_files: self.thread_files.into(),
            subagent_type: self.subagent_type.clone(),
            description: self.description.clone(),
            prompt: self.prompt.clone(),
            system_prompt: self.system_prompt.clone(),
            catalog: (&self.catalog).into(),
            model: model_to_wire(&self.model)?,
            max_turns: u64::try_from(self.max_turns).unwrap_or(u64::MAX),
            timeout_s: self.timeout_s,
            tool_timeout_s: self.tool_timeout_s,
            token_budget: self.token_budget.as_ref().map(Into::into),
            web_tools: (&self.web_tools).into(),
            sandbox_host: self.sandbox_host.clone(),
            mcp_host: self.mcp_host.clone(),
            summarization: self.summarization.as_ref().map(Into::into),
            loop_detection: (&self.loop_detection).into(),
            tool_output: (&self.tool_output).into(),
            approvals: self.approvals.clone(),
        })
    }

    /// The task a worker received.
    pub fn from_wire(spec: wire::TaskSpec) -> Result<TaskSpec, TaskWireError> {
        Ok(TaskSpec {
            model: model_from_wire(spec.model)?,
            run_id: spec.run_id,
            tool_call_id: spec.tool_call_id,
            user_id: spec.user_id,
            thread_id: spec.thread_id,
            data_root: spec.data_root,
            thread_files: spec.thread_files.into(),
            subagent_type: spec.subagent_type,
            description: spec.description,
            prompt: spec.prompt,
            system_prompt: spec.system_prompt,
            catalog: spec.catalog.into(),
            max_turns: usize::try_from(spec.max_turns).unwrap_or(usize::MAX),
            timeout_s: spec.timeout_s,
            tool_timeout_s: spec.tool_timeout_s,
            token_budget: spec.token_budget.map(Into::into),
            web_tools: spec.web_tools.into(),
            sandbox_host: spec.sandbox_host,
            mcp_host: spec.mcp_host,
            summarization: spec.summarization.map(Into::into),
            loop_detection: spec.loop_detection.into(),
            tool_output: spec.tool_output.into(),
            approvals: spec.approvals,
        })
    }
}

fn model_to_wire(model: &WireModel) -> Result<wire::WireModel, TaskWireError> {
    Ok(match model {
        WireModel::Scripted { playbook } => wire::WireModel::Scripted {
            playbook: serde_json::to_value(playbook)?.into(),
        },
        WireModel::Entry { entry } => wire::WireModel::Entry {
            entry: entry.into(),
        },
        WireModel::Resilient {
            entry,
            fallbacks,
            llm_call,
            circuit_breaker,
        } => wire::WireModel::Resilient {
            entry: entry.into(),
            fallbacks: fallbacks.iter().map(Into::into).collect(),
            retry_max_attempts: llm_call.retry_max_attempts,
            retry_base_delay_ms: millis(llm_call.retry_base_delay),
            retry_cap_delay_ms: millis(llm_call.retry_cap_delay),
            burst_retry_base_delay_ms: millis(llm_call.burst_retry_base_delay),
            max_concurrent_calls: u64::try_from(llm_call.max_concurrent_calls).unwrap_or(u64::MAX),
            failure_threshold: circuit_breaker.failure_threshold,
            recovery_timeout_ms: millis(circuit_breaker.recovery_timeout),
        },
    })
}

/// A duration in whole milliseconds (saturating).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn model_from_wire(model: wire::WireModel) -> Result<WireModel, TaskWireError> {
    Ok(match model {
        wire::WireModel::Scripted { playbook } => WireModel::Scripted {
            playbook: serde_json::from_value(playbook.into())?,
        },
        wire::WireModel::Entry { entry } => WireModel::Entry {
            entry: entry.into(),
        },
        wire::WireModel::Resilient {
            entry,
            fallbacks,
            retry_max_attempts,
            retry_base_delay_ms,
            retry_cap_delay_ms,
            burst_retry_base_delay_ms,
            max_concurrent_calls,
            failure_threshold,
            recovery_timeout_ms,
        } => WireModel::Resilient {
            entry: entry.into(),
            fallbacks: fallbacks.into_iter().map(Into::into).collect(),
            llm_call: LlmCall {
                retry_max_attempts,
                retry_base_delay: Duration::from_millis(retry_base_delay_ms),
                retry_cap_delay: Duration::from_millis(retry_cap_delay_ms),
                burst_retry_base_delay: Duration::from_millis(burst_retry_base_delay_ms),
                max_concurrent_calls: usize::try_from(max_concurrent_calls).unwrap_or(usize::MAX),
            },
            circuit_breaker: BreakerSettings {
                failure_threshold,
                recovery_timeout: Duration::from_millis(recovery_timeout_ms),
            },
        },
    })
}

impl From<ThreadFilesMode> for wire::ThreadFilesMode {
    fn from(mode: ThreadFilesMode) -> Self {
        match mode {
            ThreadFilesMode::Local => wire::ThreadFilesMode::Local,
            ThreadFilesMode::SandboxHost => wire::ThreadFilesMode::SandboxHost,
        }
    }
}

impl From<wire::ThreadFilesMode> for ThreadFilesMode {
    fn from(mode: wire::ThreadFilesMode) -> Self {
        match mode {
            wire::ThreadFilesMode::Local => ThreadFilesMode::Local,
            wire::ThreadFilesMode::SandboxHost => ThreadFilesMode::SandboxHost,
        }
    }
}

impl From<&WireCatalog> for wire::WireCatalog {
    fn from(catalog: &WireCatalog) -> Self {
        wire::WireCatalog {
            tools: catalog.tools.iter().map(Into::into).collect(),
            tool_search_enabled: catalog.tool_search_enabled,
            hash: catalog.hash.clone(),
        }
    }
}

impl From<wire::WireCatalog> for WireCatalog {
    fn from(catalog: wire::WireCatalog) -> Self {
        WireCatalog {
            tools: catalog.tools.into_iter().map(Into::into).collect(),
            tool_search_enabled: catalog.tool_search_enabled,
            hash: catalog.hash,
        }
    }
}

impl From<&WireTool> for wire::WireTool {
    fn from(tool: &WireTool) -> Self {
        wire::WireTool {
            name: tool.name.clone(),
            description: tool.description.clone(),
            parameters: Json::from(&tool.parameters),
            source: match &tool.source {
                WireSource::Config { use_id } => wire::WireSource::Config {
                    use_id: use_id.clone(),
                },
                WireSource::Builtin => wire::WireSource::Builtin,
                WireSource::Mcp {
                    server,
                    original_name,
                } => wire::WireSource::Mcp {
                    server: server.clone(),
                    original_name: original_name.clone(),
                },
                WireSource::Acp => wire::WireSource::Acp,
            },
            group: tool.group.clone(),
            routing: tool.routing.as_ref().map(|routing| wire::ToolRouting {
                mode: match routing.mode {
                    RoutingMode::Off => wire::RoutingMode::Off,
                    RoutingMode::Prefer => wire::RoutingMode::Prefer,
                },
                priority: routing.priority,
                keywords: routing.keywords.clone(),
            }),
        }
    }
}

impl From<wire::WireTool> for WireTool {
    fn from(tool: wire::WireTool) -> Self {
        WireTool {
            name: tool.name,
            description: tool.description,
            parameters: tool.parameters.into(),
            source: match tool.source {
                wire::WireSource::Config { use_id } => WireSource::Config { use_id },
                wire::WireSource::Builtin => WireSource::Builtin,
                wire::WireSource::Mcp {
                    server,
                    original_name,
                } => WireSource::Mcp {
                    server,
                    original_name,
                },
                wire::WireSource::Acp => WireSource::Acp,
            },
            group: tool.group,
            // As sent: the lead clamped the priority when it read its config.
            routing: tool.routing.map(|routing| McpRouting {
                mode: match routing.mode {
                    wire::RoutingMode::Off => RoutingMode::Off,
                    wire::RoutingMode::Prefer => RoutingMode::Prefer,
                },
                priority: routing.priority,
                keywords: routing.keywords,
            }),
        }
    }
}

impl From<&TokenBudget> for wire::TokenBudget {
    fn from(budget: &TokenBudget) -> Self {
        wire::TokenBudget {
            enabled: budget.enabled,
            max_tokens: budget.max_tokens,
            max_input_tokens: budget.max_input_tokens,
            max_output_tokens: budget.max_output_tokens,
            warn_threshold: budget.warn_threshold,
            hard_stop_threshold: budget.hard_stop_threshold,
        }
    }
}

impl From<wire::TokenBudget> for TokenBudget {
    fn from(budget: wire::TokenBudget) -> Self {
        TokenBudget {
            enabled: budget.enabled,
            max_tokens: budget.max_tokens,
            max_input_tokens: budget.max_input_tokens,
            max_output_tokens: budget.max_output_tokens,
            warn_threshold: budget.warn_threshold,
            hard_stop_threshold: budget.hard_stop_threshold,
        }
    }
}

impl From<&WireWebTools> for Vec<wire::WebToolEntry> {
    fn from(tools: &WireWebTools) -> Self {
        tools
            .entries
            .iter()
            .map(|entry| wire::WebToolEntry {
                name: entry.name.clone(),
                group: entry.group.clone(),
                use_id: entry.use_id.clone(),
                extra: entry
                    .extra
                    .iter()
                    .map(|(key, value)| (key.clone(), Json::from(value)))
                    .collect(),
            })
            .collect()
    }
}

impl From<Vec<wire::WebToolEntry>> for WireWebTools {
    fn from(entries: Vec<wire::WebToolEntry>) -> Self {
        WireWebTools {
            entries: entries
                .into_iter()
                .map(|entry| WireWebEntry {
                    name: entry.name,
                    group: entry.group,
                    use_id: entry.use_id,
                    extra: entry
                        .extra
                        .into_iter()
                        .map(|(key, value)| (key, Value::from(value)))
                        .collect::<Map<String, Value>>(),
                })
                .collect(),
        }
    }
}

impl From<TokenUsage> for wire::TokenUsage {
    fn from(usage: TokenUsage) -> Self {
        wire::TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens,
            cache_creation_input_tokens: usage.cache_creation_input_tokens,
            cache_read_input_tokens: usage.cache_read_input_tokens,
            reasoning_tokens: usage.reasoning_tokens,
        }
    }
}

impl From<wire::TokenUsage> for TokenUsage {
    fn from(usage: wire::TokenUsage) -> Self {
        TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens,
            cache_creation_input_tokens: usage.cache_creation_input_tokens,
            cache_read_input_tokens: usage.cache_read_input_tokens,
            reasoning_tokens: usage.reasoning_tokens,
        }
    }
}

impl From<TaskStatus> for wire::TaskStatus {
    fn from(status: TaskStatus) -> Self {
        match status {
            TaskStatus::Completed => wire::TaskStatus::Completed,
            TaskStatus::Failed => wire::TaskStatus::Failed,
            TaskStatus::Cancelled => wire::TaskStatus::Cancelled,
            TaskStatus::TimedOut => wire::TaskStatus::TimedOut,
            TaskStatus::PollingTimedOut => wire::TaskStatus::PollingTimedOut,
        }
    }
}

impl From<wire::TaskStatus> for TaskStatus {
    fn from(status: wire::TaskStatus) -> Self {
        match status {
            wire::TaskStatus::Completed => TaskStatus::Completed,
            wire::TaskStatus::Failed => TaskStatus::Failed,
            wire::TaskStatus::Cancelled => TaskStatus::Cancelled,
            wire::TaskStatus::TimedOut => TaskStatus::TimedOut,
            wire::TaskStatus::PollingTimedOut => TaskStatus::PollingTimedOut,
        }
    }
}

impl From<TaskStopReason> for wire::TaskStopReason {
    fn from(reason: TaskStopReason) -> Self {
        match reason {
            TaskStopReason::TokenCapped => wire::TaskStopReason::TokenCapped,
            TaskStopReason::TurnCapped => wire::TaskStopReason::TurnCapped,
            TaskStopReason::LoopCapped => wire::TaskStopReason::LoopCapped,
        }
    }
}

impl From<wire::TaskStopReason> for TaskStopReason {
    fn from(reason: wire::TaskStopReason) -> Self {
        match reason {
            wire::TaskStopReason::TokenCapped => TaskStopReason::TokenCapped,
            wire::TaskStopReason::TurnCapped => TaskStopReason::TurnCapped,
            wire::TaskStopReason::LoopCapped => TaskStopReason::LoopCapped,
        }
    }
}

impl From<TaskResult> for wire::TaskResult {
    fn from(result: TaskResult) -> Self {
        wire::TaskResult {
            status: result.status.into(),
            result: result.result,
            error: result.error,
            stop_reason: result.stop_reason.map(Into::into),
            model_name: result.model_name,
            token_usage: result.token_usage.into(),
            worker: result.worker,
        }
    }
}

impl From<wire::TaskResult> for TaskResult {
    fn from(result: wire::TaskResult) -> Self {
        TaskResult {
            status: result.status.into(),
            result: result.result,
            error: result.error,
            stop_reason: result.stop_reason.map(Into::into),
            model_name: result.model_name,
            token_usage: result.token_usage.into(),
            worker: result.worker,
        }
    }
}

impl From<TaskEvent> for wire::TaskEvent {
    fn from(event: TaskEvent) -> Self {
        match event {
            TaskEvent::TaskStarted {
                task_id,
                description,
                model_name,
                worker,
            } => wire::TaskEvent::TaskStarted {
                task_id,
                description,
                model_name,
                worker,
            },
            TaskEvent::TaskWaiting {
                task_id,
                deadline_ms,
            } => wire::TaskEvent::TaskWaiting {
                task_id,
                deadline_ms,
            },
            TaskEvent::TaskRunning {
                task_id,
                message,
                message_index,
                total_messages,
                usage,
                model_name,
            } => wire::TaskEvent::TaskRunning {
                task_id,
                message,
                message_index: u64::try_from(message_index).unwrap_or(u64::MAX),
                total_messages: u64::try_from(total_messages).unwrap_or(u64::MAX),
                usage: usage.map(Into::into),
                model_name,
            },
            TaskEvent::TaskTool {
                task_id,
                name,
                call_id,
                error,
                message,
            } => wire::TaskEvent::TaskTool {
                task_id,
                name,
                call_id,
                error,
                message,
            },
            TaskEvent::TaskElicitation {
                task_id,
                run_id,
                id,
                server,
                message,
                requested_schema,
            } => wire::TaskEvent::TaskElicitation {
                task_id,
                run_id,
                id,
                server,
                message,
                requested_schema: requested_schema.into(),
            },
            TaskEvent::TaskApproval {
                task_id,
                call_id,
                tool,
                args,
                rule,
                origin,
                justification,
                asked_at,
                deadline_at,
            } => wire::TaskEvent::TaskApproval {
                task_id,
                call_id,
                tool,
                args: args.into(),
                rule,
                origin,
                justification,
                asked_at,
                deadline_at,
            },
            TaskEvent::TaskApprovalDecided {
                task_id,
                call_id,
                tool,
                decision,
                rule,
                by,
                reason,
                at,
                waited_ms,
            } => wire::TaskEvent::TaskApprovalDecided {
                task_id,
                call_id,
                tool,
                decision,
                rule,
                by,
                reason,
                at,
                waited_ms,
            },
            TaskEvent::TaskCompleted { task_id, result } => wire::TaskEvent::TaskCompleted {
                task_id,
                result: result.into(),
            },
            TaskEvent::TaskFailed { task_id, result } => wire::TaskEvent::TaskFailed {
                task_id,
                result: result.into(),
            },
            TaskEvent::TaskCancelled { task_id, result } => wire::TaskEvent::TaskCancelled {
                task_id,
                result: result.into(),
            },
            TaskEvent::TaskTimedOut { task_id, result } => wire::TaskEvent::TaskTimedOut {
                task_id,
                result: result.into(),
            },
        }
    }
}

impl From<wire::TaskEvent> for TaskEvent {
    fn from(event: wire::TaskEvent) -> Self {
        match event {
            wire::TaskEvent::TaskStarted {
                task_id,
                description,
                model_name,
                worker,
            } => TaskEvent::TaskStarted {
                task_id,
                description,
                model_name,
                worker,
            },
            wire::TaskEvent::TaskWaiting {
                task_id,
                deadline_ms,
            } => TaskEvent::TaskWaiting {
                task_id,
                deadline_ms,
            },
            wire::TaskEvent::TaskRunning {
                task_id,
                message,
                message_index,
                total_messages,
                usage,
                model_name,
            } => TaskEvent::TaskRunning {
                task_id,
                message,
                message_index: usize::try_from(message_index).unwrap_or(usize::MAX),
                total_messages: usize::try_from(total_messages).unwrap_or(usize::MAX),
                usage: usage.map(Into::into),
                model_name,
            },
            wire::TaskEvent::TaskTool {
                task_id,
                name,
                call_id,
                error,
                message,
            } => TaskEvent::TaskTool {
                task_id,
                name,
                call_id,
                error,
                message,
            },
            wire::TaskEvent::TaskElicitation {
                task_id,
                run_id,
                id,
                server,
                message,
                requested_schema,
            } => TaskEvent::TaskElicitation {
                task_id,
                run_id,
                id,
                server,
                message,
                requested_schema: requested_schema.into(),
            },
            wire::TaskEvent::TaskApproval {
                task_id,
                call_id,
                tool,
                args,
                rule,
                origin,
                justification,
                asked_at,
                deadline_at,
            } => TaskEvent::TaskApproval {
                task_id,
                call_id,
                tool,
                args: args.into(),
                rule,
                origin,
                justification,
                asked_at,
                deadline_at,
            },
            wire::TaskEvent::TaskApprovalDecided {
                task_id,
                call_id,
                tool,
                decision,
                rule,
                by,
                reason,
                at,
                waited_ms,
            } => TaskEvent::TaskApprovalDecided {
                task_id,
                call_id,
                tool,
                decision,
                rule,
                by,
                reason,
                at,
                waited_ms,
            },
            wire::TaskEvent::TaskCompleted { task_id, result } => TaskEvent::TaskCompleted {
                task_id,
                result: result.into(),
            },
            wire::TaskEvent::TaskFailed { task_id, result } => TaskEvent::TaskFailed {
                task_id,
                result: result.into(),
            },
            wire::TaskEvent::TaskCancelled { task_id, result } => TaskEvent::TaskCancelled {
                task_id,
                result: result.into(),
            },
            wire::TaskEvent::TaskTimedOut { task_id, result } => TaskEvent::TaskTimedOut {
                task_id,
                result: result.into(),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::{Playbook, ScriptedTurn, WireModel};
    use antler_protocol::codec;

    fn spec() -> TaskSpec {
        let web: WireWebTools = serde_json::from_value(serde_json::json!({"entries": [{
            "name": "web_search", "group": "web", "use_id": "antler.web.exa:web_search",
            "extra": {"api_key": "k", "max_results": 5, "score": 0.5}
        }]}))
        .unwrap();
        TaskSpec {
            run_id: "r".into(),
            tool_call_id: "c".into(),
            user_id: "u".into(),
            thread_id: "t".into(),
            data_root: "/data".into(),
            thread_files: ThreadFilesMode::SandboxHost,
            subagent_type: "general-purpose".into(),
            description: "d".into(),
            prompt: "p".into(),
            system_prompt: Some("s".into()),
            catalog: WireCatalog {
                tools: vec![WireTool {
                    name: "fs_read".into(),
                    description: "reads".into(),
                    parameters: serde_json::json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 18446744073709551615u64}}}),
                    source: WireSource::Mcp {
                        server: Some("fs".into()),
                        original_name: "read".into(),
                    },
                    group: None,
                    routing: Some(McpRouting {
                        mode: RoutingMode::Prefer,
                        priority: 50,
                        keywords: vec!["files".into()],
                    }),
                }],
                tool_search_enabled: true,
                hash: Some("abc".into()),
            },
            model: WireModel::Scripted {
                playbook: Playbook {
                    turns: vec![ScriptedTurn {
                        content: "done".into(),
                        ..ScriptedTurn::default()
                    }],
                    ..Playbook::default()
                },
            },
            max_turns: 7,
            timeout_s: 60,
            tool_timeout_s: 30,
            token_budget: Some(TokenBudget {
                enabled: true,
                warn_threshold: 0.75,
                ..TokenBudget::default()
            }),
            web_tools: web,
            sandbox_host: Some("10.0.0.1:7000".into()),
            mcp_host: None,
            summarization: None,
            loop_detection: serde_json::from_value(serde_json::json!({
                "enabled": true, "warn_threshold": 2, "hard_limit": 3, "window_size": 9,
                "tool_freq_warn": 7, "tool_freq_hard_limit": 11,
                "tool_freq_overrides": {"bash": {"warn": 4, "hard_limit": 6}}
            }))
            .unwrap(),
            tool_output: serde_json::from_value(serde_json::json!({
                "enabled": true, "externalize_min_chars": 500, "preview_head_chars": 40,
                "preview_tail_chars": 20, "fallback_max_chars": 900, "fallback_head_chars": 300,
                "fallback_tail_chars": 100, "exempt_tools": ["ls"],
                "tool_overrides": {"bash": 700}
            }))
            .unwrap(),
            approvals: Some(r#"{"config": {"rules": []}}"#.into()),
        }
    }

    #[test]
    fn the_leads_loop_detection_and_tool_output_reach_the_worker() {
        let spec = spec();
        let wire = spec.to_wire().unwrap();
        let decoded: wire::TaskSpec = codec::decode(&codec::encode(&wire).unwrap()).unwrap();
        let back = TaskSpec::from_wire(decoded).unwrap();
        assert_eq!(back.loop_detection, spec.loop_detection);
        assert_eq!(back.loop_detection.hard_limit, 3);
        assert_eq!(
            back.loop_detection.tool_freq_overrides["bash"].hard_limit,
            6
        );
        assert_eq!(back.tool_output, spec.tool_output);
        assert_eq!(back.tool_output.tool_overrides["bash"], 700);
        assert_eq!(back.tool_output.exempt_tools, ["ls"]);
        // The parent's approval policy travels as it was written.
        assert_eq!(back.approvals, spec.approvals);
    }

    #[test]
    fn a_task_crosses_the_wire_unchanged() {
        let spec = spec();
        let wire = spec.to_wire().unwrap();
        let decoded: wire::TaskSpec = codec::decode(&codec::encode(&wire).unwrap()).unwrap();
        assert_eq!(decoded, wire);
        let back = TaskSpec::from_wire(decoded).unwrap();
        // The engine's spec has no `PartialEq`; its JSON form says all it holds.
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&spec).unwrap()
        );
    }

    #[test]
    fn an_entry_model_crosses_the_wire_with_its_key() {
        let entry: antler_protocol::config::ModelConfig =
            serde_json::from_value(serde_json::json!({
                "name": "m", "use": "langchain_openai:ChatOpenAI", "model": "gpt-x",
                "api_key": "sk-secret", "base_url": "http://127.0.0.1:9/v1",
                "temperature": 0.2, "max_tokens": 100
            }))
            .unwrap();
        let spec = TaskSpec {
            model: WireModel::Entry {
                entry: entry.clone(),
            },
            ..spec()
        };
        let wire = spec.to_wire().unwrap();
        let decoded: wire::TaskSpec = codec::decode(&codec::encode(&wire).unwrap()).unwrap();
        let back = TaskSpec::from_wire(decoded).unwrap();
        let WireModel::Entry { entry: back } = back.model else {
            panic!("not an entry: {:?}", back.model);
        };
        assert_eq!(back, entry);
        let text = format!("{wire:?}");
        assert!(!text.contains("sk-secret"), "{text}");
        assert!(text.contains("gpt-x"), "{text}");
    }

    #[test]
    fn a_resilient_model_crosses_the_wire_with_its_chain_and_settings() {
        let entry = |name: &str, key: &str| -> antler_protocol::config::ModelConfig {
            serde_json::from_value(serde_json::json!({
                "name": name, "use": "langchain_openai:ChatOpenAI", "model": "gpt-x",
                "api_key": key, "base_url": "http://127.0.0.1:9/v1", "max_retries": 0
            }))
            .unwrap()
        };
        let model = WireModel::Resilient {
            entry: entry("main", "sk-main"),
            fallbacks: vec![entry("spare", "sk-spare"), entry("last", "sk-last")],
            llm_call: LlmCall {
                retry_max_attempts: 4,
                retry_base_delay: Duration::from_millis(250),
                retry_cap_delay: Duration::from_millis(9000),
                burst_retry_base_delay: Duration::from_millis(6000),
                max_concurrent_calls: 3,
            },
            circuit_breaker: BreakerSettings {
                failure_threshold: 2,
                recovery_timeout: Duration::from_secs(30),
            },
        };
        let spec = TaskSpec {
            model: model.clone(),
            ..spec()
        };
        let wire = spec.to_wire().unwrap();
        let decoded: wire::TaskSpec = codec::decode(&codec::encode(&wire).unwrap()).unwrap();
        assert_eq!(decoded, wire);
        let back = TaskSpec::from_wire(decoded).unwrap();
        assert_eq!(
            serde_json::to_value(&back.model).unwrap(),
            serde_json::to_value(&model).unwrap()
        );
        let WireModel::Resilient { fallbacks, .. } = &back.model else {
            panic!("not the chain: {:?}", back.model);
        };
        assert_eq!(fallbacks[1].api_key.as_deref(), Some("sk-last"));
        assert_eq!(back.model.name(), "main");
        for text in [format!("{wire:?}"), format!("{back:?}")] {
            assert!(!text.contains("sk-"), "{text}");
            assert!(text.contains("spare") && text.contains("last"), "{text}");
        }
    }

    #[test]
    fn the_keys_stay_out_of_the_wire_forms_debug() {
        let text = format!("{:?}", spec().to_wire().unwrap());
        assert!(!text.contains("done"), "{text}");
        assert!(!text.contains("\"k\""), "{text}");
    }

    #[test]
    fn events_and_results_cross_the_wire_unchanged() {
        let result = TaskResult {
            stop_reason: Some(TaskStopReason::TurnCapped),
            model_name: Some("m".into()),
            worker: Some("w1".into()),
            ..TaskResult::failed("boom")
        };
        let events = [
            TaskEvent::TaskRunning {
                task_id: "c".into(),
                message: "hi".into(),
                message_index: 1,
                total_messages: 2,
                usage: Some(TokenUsage {
                    input_tokens: 3,
                    output_tokens: 4,
                    total_tokens: 7,
                    cache_read_input_tokens: 2,
                    reasoning_tokens: 1,
                    ..TokenUsage::default()
                }),
                model_name: None,
            },
            TaskEvent::TaskElicitation {
                task_id: "c".into(),
                run_id: "r.task.c".into(),
                id: "e1".into(),
                server: "s".into(),
                message: "m".into(),
                requested_schema: serde_json::json!({"type": "object"}),
            },
            TaskEvent::TaskApproval {
                task_id: "c".into(),
                call_id: "b1".into(),
                tool: "bash".into(),
                args: serde_json::json!({"command": "git push"}),
                rule: Some("git-push".into()),
                origin: Some("defaults".into()),
                justification: None,
                asked_at: 1,
                deadline_at: 2,
            },
            TaskEvent::TaskApprovalDecided {
                task_id: "c".into(),
                call_id: "b1".into(),
                tool: "bash".into(),
                decision: "deny".into(),
                rule: Some("git-push".into()),
                by: Some("alice".into()),
                reason: Some("not now".into()),
                at: 3,
                waited_ms: Some(1),
            },
            TaskEvent::ended("c", result.clone()),
        ];
        for event in events {
            let wire = wire::TaskEvent::from(event.clone());
            let decoded: wire::TaskEvent = codec::decode(&codec::encode(&wire).unwrap()).unwrap();
            assert_eq!(TaskEvent::from(decoded), event);
        }
        let wire = wire::TaskResult::from(result.clone());
        let decoded: wire::TaskResult = codec::decode(&codec::encode(&wire).unwrap()).unwrap();
        assert_eq!(TaskResult::from(decoded), result);
    }
}
