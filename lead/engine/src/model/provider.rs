//! Which client speaks to a `models:` entry. DeerFlow's `use:` ids map to Antler's
//! providers ([`Provider::of_use`]); an explicit `provider:` key overrides, and
//! `use_responses_api: true` or `wire_api: responses` selects OpenAI's Responses API. An
//! entry no provider can speak is an error when the config is checked, not at the first
//! run: [`check_model_entry`] builds the client's settings without a connection.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use antler_protocol::config::{AppConfig, ModelConfig};

use super::entry::{extra_bool, extra_str, select_model_config};
use super::openai::OpenAiModel;
use super::responses::ResponsesModel;
use super::{ChatModel, ModelError};

/// The providers Antler has a client for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Provider {
    /// OpenAI's chat completions and every server compatible with it.
    OpenAi,
    /// OpenAI's Responses API.
    OpenAiResponses,
    /// Azure OpenAI's deployments (chat completions).
    AzureOpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API (`generateContent`).
    Gemini,
    /// Ollama's native `/api/chat`.
    Ollama,
}

/// The values `provider:` takes, in [`Provider`]'s order.
pub const PROVIDER_NAMES: &[&str] = &[
    "openai",
    "openai_responses",
    "azure_openai",
    "anthropic",
    "gemini",
    "ollama",
];

/// DeerFlow's `use:` ids and the provider each maps to (spec D.3).
pub const USE_IDS: &[(&str, Provider)] = &[
    ("langchain_openai:ChatOpenAI", Provider::OpenAi),
    ("langchain_deepseek:ChatDeepSeek", Provider::OpenAi),
    (
        "deerflow.models.patched_openai:PatchedChatOpenAI",
        Provider::OpenAi,
    ),
    (
        "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
        Provider::OpenAi,
    ),
    (
        "deerflow.models.patched_mimo:PatchedChatMiMo",
        Provider::OpenAi,
    ),
    (
        "deerflow.models.patched_stepfun:PatchedChatStepFun",
        Provider::OpenAi,
    ),
    (
        "deerflow.models.patched_minimax:PatchedChatMiniMax",
        Provider::OpenAi,
    ),
    (
        "deerflow.models.vllm_provider:VllmChatModel",
        Provider::OpenAi,
    ),
    (
        "deerflow.models.mindie_provider:MindIEChatModel",
        Provider::OpenAi,
    ),
    ("langchain_openai:AzureChatOpenAI", Provider::AzureOpenAi),
    ("langchain_anthropic:ChatAnthropic", Provider::Anthropic),
    (
        "deerflow.models.claude_provider:ClaudeChatModel",
        Provider::Anthropic,
    ),
    (super::gemini::USE_CHAT_GEMINI, Provider::Gemini),
    (super::ollama::USE_CHAT_OLLAMA, Provider::Ollama),
    (
        "deerflow.models.openai_codex_provider:CodexChatModel",
        Provider::OpenAiResponses,
    ),
];

impl Provider {
    /// The provider of a DeerFlow `use:` id (`None`: not one Antler knows).
    pub fn of_use(use_: &str) -> Option<Provider> {
        USE_IDS
            .iter()
            .find(|(id, _)| *id == use_)
            .map(|(_, provider)| *provider)
    }

    /// The provider named by a `provider:` value.
    pub fn of_name(name: &str) -> Option<Provider> {
        let name = name.trim().to_ascii_lowercase().replace('-', "_");
        Some(match name.as_str() {
            "openai" | "openai_chat" | "openai_compatible" => Provider::OpenAi,
            "openai_responses" | "responses" => Provider::OpenAiResponses,
            "azure_openai" | "azure" => Provider::AzureOpenAi,
            "anthropic" | "claude" => Provider::Anthropic,
            "gemini" | "google" | "google_genai" => Provider::Gemini,
            "ollama" => Provider::Ollama,
            _ => return None,
        })
    }

    /// The name `provider:` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => PROVIDER_NAMES[0],
            Provider::OpenAiResponses => PROVIDER_NAMES[1],
            Provider::AzureOpenAi => PROVIDER_NAMES[2],
            Provider::Anthropic => PROVIDER_NAMES[3],
            Provider::Gemini => PROVIDER_NAMES[4],
            Provider::Ollama => PROVIDER_NAMES[5],
        }
    }

    /// The provider an entry is spoken to with: `provider:` when given, else its `use:`
    /// (an unknown `use:` with a `base_url` is OpenAI-compatible); the Responses API
    /// instead of chat completions when `use_responses_api: true` or
    /// `wire_api: responses` (OpenAI and Azure entries).
    pub fn of_entry(entry: &ModelConfig) -> Result<Provider, ModelError> {
        let invalid = |message: String| ModelError::InvalidConfig {
            model: entry.name.clone(),
            message,
        };
        let provider = match extra_str(&entry.extra, "provider") {
            Some(name) => Provider::of_name(&name).ok_or_else(|| {
                invalid(format!(
                    "provider `{name}` is not one Antler speaks: one of {}",
                    PROVIDER_NAMES.join(", ")
                ))
            })?,
            None => match Provider::of_use(&entry.use_) {
                Some(provider) => provider,
                None if has_base_url(entry) => Provider::OpenAi,
                None => {
                    return Err(ModelError::UnsupportedProvider {
                        model: entry.name.clone(),
                        use_: entry.use_.clone(),
                    })
                }
            },
        };
        let responses = extra_bool(entry, "use_responses_api")?.unwrap_or(false)
            || extra_str(&entry.extra, "wire_api").is_some_and(|w| w == "responses");
        Ok(match provider {
            Provider::OpenAi if responses => Provider::OpenAiResponses,
            other => other,
        })
    }
}

/// `gen_ai.provider.name` of Antler itself: a model that calls no vendor (a playbook).
pub const ANTLER_PROVIDER_NAME: &str = "antler";
/// The OpenTelemetry GenAI conventions' names of the vendors Antler's clients reach.
pub const GEN_AI_OPENAI: &str = "openai";
pub const GEN_AI_AZURE_OPENAI: &str = "azure.ai.openai";
pub const GEN_AI_ANTHROPIC: &str = "anthropic";
pub const GEN_AI_GEMINI: &str = "gcp.gemini";
pub const GEN_AI_DEEPSEEK: &str = "deepseek";
/// Not one of the conventions' well-known values, which allow others.
pub const GEN_AI_OLLAMA: &str = "ollama";

/// DeerFlow's `use:` ids that name DeepSeek (spoken to with the OpenAI client).
const DEEPSEEK_USE_IDS: &[&str] = &[
    "langchain_deepseek:ChatDeepSeek",
    "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
];

/// The vendor an entry's calls go to, as the GenAI conventions name it
/// (`gen_ai.provider.name`): from its provider, and for an OpenAI-compatible entry from its
/// `use:` class (DeepSeek's); any other OpenAI-compatible server is `openai`, the
/// conventions' value when the OpenAI client speaks to it.
pub fn gen_ai_provider_name(entry: &ModelConfig) -> &'static str {
    match Provider::of_entry(entry) {
        Ok(Provider::AzureOpenAi) => GEN_AI_AZURE_OPENAI,
        Ok(Provider::Anthropic) => GEN_AI_ANTHROPIC,
        Ok(Provider::Gemini) => GEN_AI_GEMINI,
        Ok(Provider::Ollama) => GEN_AI_OLLAMA,
        _ if DEEPSEEK_USE_IDS.contains(&entry.use_.as_str()) => GEN_AI_DEEPSEEK,
        Ok(Provider::OpenAi | Provider::OpenAiResponses) | Err(_) => GEN_AI_OPENAI,
    }
}

/// Whether an entry asks for the Responses API (`use_responses_api: true` or
/// `wire_api: responses`).
fn uses_responses(entry: &ModelConfig) -> Result<bool, ModelError> {
    Ok(extra_bool(entry, "use_responses_api")?.unwrap_or(false)
        || extra_str(&entry.extra, "wire_api").is_some_and(|w| w == "responses"))
}

fn has_base_url(entry: &ModelConfig) -> bool {
    entry
        .base_url
        .as_deref()
        .is_some_and(|b| !b.trim().is_empty())
        || ["api_base", "openai_api_base"]
            .iter()
            .any(|k| extra_str(&entry.extra, k).is_some())
}

/// The chat model a run uses: `models:` entry `name` (the first when `None`), or, with
/// no `models:` at all, the default model the environment describes
/// (`OPENAI_BASE_URL`/`ANTLER_MODEL_BASE_URL`, `OPENAI_MODEL`/`ANTLER_MODEL`,
/// `OPENAI_API_KEY`). `env` looks up environment variables
/// (`antler_protocol::config::env::process_env` in production).
pub fn model_from_config(
    app: &AppConfig,
    name: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    let entry = select_model_config(app, name, env)?;
    model_from_entry(&entry, env)
}

/// The client of one `models:` entry.
pub fn model_from_entry(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    match Provider::of_entry(entry)? {
        Provider::OpenAi => Ok(Arc::new(OpenAiModel::from_model_config(entry, env)?)),
        Provider::OpenAiResponses => Ok(Arc::new(ResponsesModel::from_model_config(entry, env)?)),
        Provider::AzureOpenAi if uses_responses(entry)? => {
            Ok(Arc::new(ResponsesModel::azure(entry, env)?))
        }
        Provider::AzureOpenAi => Ok(Arc::new(OpenAiModel::azure(entry, env)?)),
        Provider::Anthropic => super::anthropic::model_of_entry(entry, env),
        Provider::Gemini => Ok(Arc::new(super::gemini::GeminiModel::from_model_config(
            entry, env,
        )?)),
        Provider::Ollama => Ok(Arc::new(super::ollama::OllamaModel::from_model_config(
            entry, env,
        )?)),
    }
}

/// The most clients [`shared_model_from_entry`] keeps; past it the table starts again (a
/// lead reading a config that changes every run should not grow without bound).
const MAX_SHARED_MODELS: usize = 64;

/// The client of one `models:` entry, built once per configuration in this process and
/// shared by every run and task that uses it (a client holds no conversation: it is the
/// endpoint, its headers and settings over the process's HTTP pool). Keyed by the entry
/// as written, so an edited entry gets a new client.
pub fn shared_model_from_entry(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatModel>, ModelError> {
    type Table = Mutex<HashMap<String, Arc<dyn ChatModel>>>;
    static MODELS: LazyLock<Table> = LazyLock::new(Table::default);
    let key = serde_json::to_string(entry).unwrap_or_default();
    if let Some(model) = MODELS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(Arc::clone(model));
    }
    // Built outside the lock; two first uses that race build twice and the first is kept.
    let model = model_from_entry(entry, env)?;
    let mut table = MODELS.lock().unwrap_or_else(PoisonError::into_inner);
    if table.len() >= MAX_SHARED_MODELS && !table.contains_key(&key) {
        table.clear();
    }
    Ok(Arc::clone(table.entry(key).or_insert(model)))
}

/// Whether `entry` can be spoken to: its provider, endpoint, key lookups and settings,
/// without connecting (`antler config check`).
pub fn check_model_entry(
    entry: &ModelConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, ModelError> {
    let provider = Provider::of_entry(entry)?;
    match provider {
        Provider::OpenAi => {
            super::openai::OpenAiConfig::from_model_config(entry, env)?;
        }
        Provider::OpenAiResponses => super::responses::check_entry(entry, env, false)?,
        Provider::AzureOpenAi if uses_responses(entry)? => {
            super::responses::check_entry(entry, env, true)?
        }
        Provider::AzureOpenAi => drop(super::openai::azure::azure_chat(entry, env)?),
        Provider::Anthropic => super::anthropic::check_entry(entry, env)?,
        Provider::Gemini => {
            super::gemini::GeminiConfig::from_model_config(entry, env)?;
        }
        Provider::Ollama => {
            super::ollama::OllamaConfig::from_model_config(entry, env)?;
        }
    }
    Ok(provider)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(yaml: &str) -> ModelConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn one_client_per_configuration_is_shared_and_an_edited_entry_gets_its_own() {
        let a = entry("name: a\nuse: langchain_openai:ChatOpenAI\nmodel: m\nbase_url: http://127.0.0.1:9/v1\n");
        let first = shared_model_from_entry(&a, &|_| None).unwrap();
        let again = shared_model_from_entry(&a, &|_| None).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let edited = entry("name: a\nuse: langchain_openai:ChatOpenAI\nmodel: m\nbase_url: http://127.0.0.1:9/v1\ntemperature: 0\n");
        let other = shared_model_from_entry(&edited, &|_| None).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
    }

    #[test]
    fn each_entry_names_its_vendor_as_the_genai_conventions_do() {
        let vendor = |yaml: &str| gen_ai_provider_name(&entry(yaml));
        for (yaml, expected) in [
            (
                "name: a\nuse: langchain_openai:ChatOpenAI\nmodel: m\n",
                "openai",
            ),
            (
                "name: a\nuse: langchain_openai:ChatOpenAI\nmodel: m\nuse_responses_api: true\n",
                "openai",
            ),
            (
                "name: a\nuse: langchain_openai:AzureChatOpenAI\nmodel: m\n",
                "azure.ai.openai",
            ),
            (
                "name: a\nuse: langchain_anthropic:ChatAnthropic\nmodel: m\n",
                "anthropic",
            ),
            (
                "name: a\nuse: deerflow.models.claude_provider:ClaudeChatModel\nmodel: m\n",
                "anthropic",
            ),
            (
                "name: a\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: m\n",
                "gcp.gemini",
            ),
            (
                "name: a\nuse: langchain_ollama:ChatOllama\nmodel: m\n",
                "ollama",
            ),
            (
                "name: a\nuse: langchain_deepseek:ChatDeepSeek\nmodel: m\n",
                "deepseek",
            ),
            (
                "name: a\nuse: my.module:Chat\nmodel: m\nprovider: anthropic\n",
                "anthropic",
            ),
            (
                "name: a\nuse: my.module:Chat\nmodel: m\nbase_url: http://h/v1\n",
                "openai",
            ),
        ] {
            assert_eq!(vendor(yaml), expected, "{yaml}");
        }
    }

    #[test]
    fn deerflow_use_ids_and_provider_keys_pick_the_client() {
        let of = |yaml: &str| Provider::of_entry(&entry(yaml));
        assert_eq!(
            of("name: c\nuse: langchain_anthropic:ChatAnthropic\nmodel: claude\n").unwrap(),
            Provider::Anthropic
        );
        assert_eq!(
            of("name: g\nuse: langchain_google_genai:ChatGoogleGenerativeAI\nmodel: g\n").unwrap(),
            Provider::Gemini
        );
        assert_eq!(
            of("name: o\nuse: langchain_ollama:ChatOllama\nmodel: q\n").unwrap(),
            Provider::Ollama
        );
        assert_eq!(
            of("name: r\nuse: langchain_openai:ChatOpenAI\nmodel: m\nuse_responses_api: true\n")
                .unwrap(),
            Provider::OpenAiResponses
        );
        assert_eq!(
            of("name: x\nuse: my.module:Chat\nmodel: m\nprovider: anthropic\n").unwrap(),
            Provider::Anthropic
        );
        assert_eq!(
            of("name: v\nuse: my.module:Chat\nmodel: m\nbase_url: http://h/v1\n").unwrap(),
            Provider::OpenAi
        );
        assert!(matches!(
            of("name: n\nuse: my.module:Chat\nmodel: m\n"),
            Err(ModelError::UnsupportedProvider { .. })
        ));
        assert!(
            of("name: p\nuse: my.module:Chat\nmodel: m\nprovider: mistral\n")
                .unwrap_err()
                .to_string()
                .contains("provider `mistral` is not one Antler speaks")
        );
    }
}
