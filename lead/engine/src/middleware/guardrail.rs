//! `GuardrailMiddleware` with the `AllowlistProvider` (spec 4.4): the second
//! authorization of a call, just before it runs. A denial becomes an error tool message;
//! a provider that fails denies the call unless the guardrail is configured fail-open.

use std::collections::HashSet;

use antler_protocol::config::GuardrailsConfig;
use serde_json::Value;

use super::error_message;
use crate::thread::state::Message;

/// The message a denied call gets.
pub const GUARDRAIL_DENIED: &str = "Guardrail denied: tool '{name}' was blocked ({code}). Reason: {message}. Choose an alternative approach.";

/// Code and message of a denial without reasons.
pub const DEFAULT_DENIED_CODE: &str = "oap.denied";
pub const DEFAULT_DENIED_MESSAGE: &str = "blocked by guardrail policy";

/// Code and message of a provider error when the guardrail fails closed.
pub const EVALUATOR_ERROR_CODE: &str = "oap.evaluator_error";
pub const EVALUATOR_ERROR_MESSAGE: &str = "guardrail provider error (fail-closed)";

/// The allowlist provider's codes and messages.
pub const ALLOWED_CODE: &str = "oap.allowed";
pub const TOOL_NOT_ALLOWED_CODE: &str = "oap.tool_not_allowed";
pub const NOT_IN_ALLOWLIST: &str = "tool '{name}' not in allowlist";
pub const TOOL_DENIED: &str = "tool '{name}' is denied";

/// What a provider is asked about one call.
#[derive(Clone, Copy, Debug)]
pub struct GuardrailRequest<'a> {
    pub tool_name: &'a str,
    pub tool_input: &'a Value,
    pub tool_call_id: &'a str,
    pub run_id: &'a str,
    pub thread_id: &'a str,
    pub user_id: &'a str,
    pub is_subagent: bool,
}

/// One reason of a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardrailReason {
    pub code: String,
    pub message: String,
}

/// A provider's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardrailDecision {
    pub allow: bool,
    pub reasons: Vec<GuardrailReason>,
}

/// A provider could not evaluate a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("guardrail provider failed: {0}")]
pub struct ProviderError(pub String);

/// A guardrail policy provider.
pub trait GuardrailProvider: Send + Sync {
    fn evaluate(&self, request: &GuardrailRequest<'_>) -> Result<GuardrailDecision, ProviderError>;
}

/// `AllowlistProvider(allowed_tools, denied_tools)`: `None` allows everything, an empty
/// list allows nothing; the allowlist is checked before the denylist.
#[derive(Clone, Debug, Default)]
pub struct AllowlistProvider {
    allowed: Option<HashSet<String>>,
    denied: Option<HashSet<String>>,
}

impl AllowlistProvider {
    pub fn new(allowed: Option<Vec<String>>, denied: Option<Vec<String>>) -> AllowlistProvider {
        AllowlistProvider {
            allowed: allowed.map(|names| names.into_iter().collect()),
            denied: denied.map(|names| names.into_iter().collect()),
        }
    }
}

fn decision(allow: bool, code: &str, message: String) -> GuardrailDecision {
    GuardrailDecision {
        allow,
        reasons: vec![GuardrailReason {
            code: code.to_owned(),
            message,
        }],
    }
}

impl GuardrailProvider for AllowlistProvider {
    fn evaluate(&self, request: &GuardrailRequest<'_>) -> Result<GuardrailDecision, ProviderError> {
        let name = request.tool_name;
        if self.allowed.as_ref().is_some_and(|a| !a.contains(name)) {
            let message = NOT_IN_ALLOWLIST.replacen("{name}", name, 1);
            return Ok(decision(false, TOOL_NOT_ALLOWED_CODE, message));
        }
        if self.denied.as_ref().is_some_and(|d| d.contains(name)) {
            let message = TOOL_DENIED.replacen("{name}", name, 1);
            return Ok(decision(false, TOOL_NOT_ALLOWED_CODE, message));
        }
        Ok(decision(true, ALLOWED_CODE, String::new()))
    }
}

/// DeerFlow's class path of the allowlist provider (any `...:AllowlistProvider` is it).
pub const ALLOWLIST_PROVIDER_USE: &str = "deerflow.guardrails.builtin:AllowlistProvider";

/// A `guardrails:` section Antler cannot honour (operator-facing: the run cannot start).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardrailConfigError {
    #[error("guardrails.provider.use: unknown guardrail provider {0:?}; Antler provides {ALLOWLIST_PROVIDER_USE}")]
    UnknownProvider(String),
    #[error("guardrails.provider.config.{0}: expected a list of tool names or null")]
    NotANameList(&'static str),
}

impl AllowlistProvider {
    /// The provider from its `config` (`allowed_tools`, `denied_tools`: lists or null).
    pub fn from_config(
        config: &serde_json::Map<String, Value>,
    ) -> Result<AllowlistProvider, GuardrailConfigError> {
        let list = |key: &'static str| -> Result<Option<Vec<String>>, GuardrailConfigError> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| item.as_str().map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
                    .map(Some)
                    .ok_or(GuardrailConfigError::NotANameList(key)),
                Some(_) => Err(GuardrailConfigError::NotANameList(key)),
            }
        };
        Ok(AllowlistProvider::new(
            list("allowed_tools")?,
            list("denied_tools")?,
        ))
    }
}

/// The guardrail: a provider and what a provider error means.
pub struct Guardrail {
    provider: Box<dyn GuardrailProvider>,
    fail_closed: bool,
}

impl Guardrail {
    /// `fail_closed` is DeerFlow's default (`true`).
    pub fn new(provider: Box<dyn GuardrailProvider>, fail_closed: bool) -> Guardrail {
        Guardrail {
            provider,
            fail_closed,
        }
    }

    /// The guardrail of a `guardrails:` section: `None` unless it is enabled with a
    /// provider (DeerFlow's condition).
    pub fn from_config(
        config: &GuardrailsConfig,
    ) -> Result<Option<Guardrail>, GuardrailConfigError> {
        let Some(provider) = config.provider.as_ref().filter(|_| config.enabled) else {
            return Ok(None);
        };
        if !provider.use_.ends_with(":AllowlistProvider") {
            return Err(GuardrailConfigError::UnknownProvider(provider.use_.clone()));
        }
        let allowlist = AllowlistProvider::from_config(&provider.config)?;
        Ok(Some(Guardrail::new(
            Box::new(allowlist),
            config.fail_closed,
        )))
    }

    /// `wrap_tool_call`: `Ok` lets the call run; `Err` is the denial tool message.
    pub fn check_call(&self, request: &GuardrailRequest<'_>) -> Result<(), Message> {
        let (code, message) = match self.provider.evaluate(request) {
            Ok(decision) if decision.allow => return Ok(()),
            Ok(decision) => match decision.reasons.into_iter().next() {
                Some(reason) => (reason.code, reason.message),
                None => (
                    DEFAULT_DENIED_CODE.to_owned(),
                    DEFAULT_DENIED_MESSAGE.to_owned(),
                ),
            },
            Err(error) if self.fail_closed => {
                tracing::warn!(tool = request.tool_name, %error, "guardrail provider error, denying");
                (
                    EVALUATOR_ERROR_CODE.to_owned(),
                    EVALUATOR_ERROR_MESSAGE.to_owned(),
                )
            }
            Err(error) => {
                tracing::warn!(tool = request.tool_name, %error, "guardrail provider error, allowing (fail-open)");
                return Ok(());
            }
        };
        let content = GUARDRAIL_DENIED
            .replacen("{name}", request.tool_name, 1)
            .replacen("{code}", &code, 1)
            .replacen("{message}", &message, 1);
        Err(error_message(
            request.tool_call_id,
            request.tool_name,
            content,
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::thread::state::ToolStatus;

    fn request<'a>(name: &'a str, input: &'a Value) -> GuardrailRequest<'a> {
        GuardrailRequest {
            tool_name: name,
            tool_input: input,
            tool_call_id: "c1",
            run_id: "run-1",
            thread_id: "t1",
            user_id: "u1",
            is_subagent: false,
        }
    }

    fn denial(guardrail: &Guardrail, name: &str) -> Option<String> {
        match guardrail.check_call(&request(name, &Value::Null)) {
            Ok(()) => None,
            Err(Message::Tool {
                content, status, ..
            }) => {
                assert_eq!(status, ToolStatus::Error);
                Some(content)
            }
            Err(other) => panic!("{other:?}"),
        }
    }

    fn strings(names: &[&str]) -> Option<Vec<String>> {
        Some(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn allowlist_then_denylist_with_deerflows_texts() {
        let guardrail = Guardrail::new(
            Box::new(AllowlistProvider::new(
                strings(&["bash", "read_file"]),
                strings(&["bash"]),
            )),
            true,
        );
        assert_eq!(denial(&guardrail, "read_file"), None);
        assert_eq!(
            denial(&guardrail, "write_file").as_deref(),
            Some("Guardrail denied: tool 'write_file' was blocked (oap.tool_not_allowed). Reason: tool 'write_file' not in allowlist. Choose an alternative approach.")
        );
        assert_eq!(
            denial(&guardrail, "bash").as_deref(),
            Some("Guardrail denied: tool 'bash' was blocked (oap.tool_not_allowed). Reason: tool 'bash' is denied. Choose an alternative approach.")
        );
    }

    #[test]
    fn none_allows_everything_and_empty_allows_nothing() {
        let open = Guardrail::new(Box::new(AllowlistProvider::new(None, None)), true);
        assert_eq!(denial(&open, "anything"), None);
        let closed = Guardrail::new(Box::new(AllowlistProvider::new(strings(&[]), None)), true);
        assert!(denial(&closed, "anything").is_some());
    }

    struct Broken;
    impl GuardrailProvider for Broken {
        fn evaluate(&self, _: &GuardrailRequest<'_>) -> Result<GuardrailDecision, ProviderError> {
            Err(ProviderError("policy server unreachable".into()))
        }
    }

    struct Silent;
    impl GuardrailProvider for Silent {
        fn evaluate(&self, _: &GuardrailRequest<'_>) -> Result<GuardrailDecision, ProviderError> {
            Ok(GuardrailDecision {
                allow: false,
                reasons: vec![],
            })
        }
    }

    #[test]
    fn provider_errors_fail_closed_by_default_and_open_when_configured() {
        assert_eq!(
            denial(&Guardrail::new(Box::new(Broken), true), "bash").as_deref(),
            Some("Guardrail denied: tool 'bash' was blocked (oap.evaluator_error). Reason: guardrail provider error (fail-closed). Choose an alternative approach.")
        );
        assert_eq!(
            denial(&Guardrail::new(Box::new(Broken), false), "bash"),
            None
        );
    }

    fn section(yaml: &str) -> GuardrailsConfig {
        let app = antler_protocol::config::parse_app_config(
            std::path::Path::new("config.yaml"),
            yaml,
            &|_| None,
        )
        .unwrap();
        app.value.guardrails
    }

    #[test]
    fn the_config_section_builds_the_allowlist_guardrail() {
        let enabled = section(
            "guardrails:\n  enabled: true\n  provider:\n    use: deerflow.guardrails.builtin:AllowlistProvider\n    config:\n      denied_tools: [bash]\n",
        );
        let guardrail = Guardrail::from_config(&enabled).unwrap().unwrap();
        assert_eq!(denial(&guardrail, "read_file"), None);
        assert_eq!(
            denial(&guardrail, "bash").as_deref(),
            Some("Guardrail denied: tool 'bash' was blocked (oap.tool_not_allowed). Reason: tool 'bash' is denied. Choose an alternative approach.")
        );
        let disabled = section(
            "guardrails:\n  enabled: false\n  provider:\n    use: deerflow.guardrails.builtin:AllowlistProvider\n",
        );
        assert!(Guardrail::from_config(&disabled).unwrap().is_none());
        let unknown =
            section("guardrails:\n  enabled: true\n  provider:\n    use: my.module:Policy\n");
        assert_eq!(
            Guardrail::from_config(&unknown).err().map(|e| e.to_string()).as_deref(),
            Some("guardrails.provider.use: unknown guardrail provider \"my.module:Policy\"; Antler provides deerflow.guardrails.builtin:AllowlistProvider")
        );
        let bad = section(
            "guardrails:\n  enabled: true\n  provider:\n    use: x:AllowlistProvider\n    config:\n      allowed_tools: bash\n",
        );
        assert_eq!(
            Guardrail::from_config(&bad).err(),
            Some(GuardrailConfigError::NotANameList("allowed_tools"))
        );
    }

    #[test]
    fn a_denial_without_reasons_uses_the_default_code() {
        assert_eq!(
            denial(&Guardrail::new(Box::new(Silent), true), "bash").as_deref(),
            Some("Guardrail denied: tool 'bash' was blocked (oap.denied). Reason: blocked by guardrail policy. Choose an alternative approach.")
        );
    }
}
