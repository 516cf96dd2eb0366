//! What one tool is to the catalog: its name, the description and parameter schema the
//! model reads, where it comes from (config, builtin, MCP, ACP) and its MCP routing
//! settings (spec 2.7, read from config; `routing` derives hints and auto-promotion).
//! A leaf of `catalog`: it depends on nothing in it but `pyjson`.
//! `parameters` is always in OpenAI-function form: for MCP tools that is the server's
//! `inputSchema` as langchain's `convert_to_openai_function` leaves it (titles and the
//! top-level description removed), so hashing and rendering never re-derive it.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::pyjson::SortedCompact;

thread_local! {
    static CANONICAL_BUFFER: std::cell::RefCell<String> =
        std::cell::RefCell::new(String::with_capacity(4096));
}

/// A tool's parameter schema: an immutable, shared JSON value (cloning a tool or a
/// catalog never deep-copies it) with its canonical hash form
/// (`json.dumps(v, sort_keys=True, ensure_ascii=False)`) written at most once. The value
/// cannot change behind the cache: there is no mutable access, only a new `Schema`.
#[derive(Clone)]
pub struct Schema(Arc<SchemaInner>);

struct SchemaInner {
    value: Value,
    canonical: OnceLock<Box<str>>,
}

impl Schema {
    pub fn new(value: Value) -> Self {
        Schema(Arc::new(SchemaInner {
            value,
            canonical: OnceLock::new(),
        }))
    }

    /// The schema as the catalog hash writes it, computed on first use and then kept.
    pub fn canonical(&self) -> &str {
        self.0.canonical.get_or_init(|| {
            // Written into a per-thread buffer, then copied into one exact allocation.
            CANONICAL_BUFFER.with(|buffer| {
                let mut buffer = buffer.borrow_mut();
                buffer.clear();
                SortedCompact::default().write(&mut buffer, &self.0.value);
                Box::from(buffer.as_str())
            })
        })
    }

    /// Appends the canonical form to `out`, without keeping it (the cached form when it
    /// was already written).
    pub fn write_canonical(&self, out: &mut String) {
        match self.0.canonical.get() {
            Some(canonical) => out.push_str(canonical),
            None => SortedCompact::default().write(out, &self.0.value),
        }
    }

    /// Heap bytes of the cached canonical form (0 until written).
    pub fn canonical_bytes(&self) -> usize {
        self.0.canonical.get().map_or(0, |c| c.len())
    }

    pub fn value(&self) -> &Value {
        &self.0.value
    }
}

impl Deref for Schema {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.0.value
    }
}

impl From<Value> for Schema {
    fn from(value: Value) -> Self {
        Schema::new(value)
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Schema) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.value == other.0.value
    }
}

impl PartialEq<Value> for Schema {
    fn eq(&self, other: &Value) -> bool {
        self.0.value == *other
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.value.fmt(f)
    }
}

impl serde::Serialize for Schema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.value.serialize(serializer)
    }
}

/// Where a tool comes from; assembly order and deferral depend on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolSource {
    /// A `tools[]` entry of the config, resolved from its `use:` id.
    Config { use_id: String },
    /// A tool Antler always offers (`present_files`, `tool_search`, ...).
    Builtin,
    /// A tool discovered on an MCP server. `original_name` is the name the server knows.
    /// Shared strings: assembly copies every MCP tool into each catalog it builds.
    Mcp {
        server: Option<Arc<str>>,
        original_name: Arc<str>,
    },
    /// The `invoke_acp_agent` tool.
    Acp,
}

/// One tool as the catalog holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// OpenAI-function parameters (a JSON schema object, key order as received), shared.
    pub parameters: Schema,
    pub source: ToolSource,
    /// The config group (`web`, `file:read`, ...), for config tools.
    pub group: Option<String>,
    /// Effective MCP routing (server settings merged with the per-tool override),
    /// present only when its mode is not `off`.
    pub routing: Option<McpRouting>,
}

impl ToolSpec {
    /// An MCP tool from the server's listing. `input_schema` is normalised like
    /// langchain's `convert_to_openai_function` (see [`openai_parameters`]); when the
    /// tool has no description, the schema's own top-level description stands in.
    pub fn mcp(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        server: Option<String>,
        original_name: impl Into<String>,
    ) -> Self {
        let converted = openai_parameters(input_schema);
        let mut description = description.into();
        if description.is_empty() {
            description = converted.schema_description.unwrap_or_default();
        }
        ToolSpec {
            name: name.into(),
            description,
            parameters: Schema::new(converted.parameters),
            source: ToolSource::Mcp {
                server: server.map(Arc::from),
                original_name: Arc::from(original_name.into()),
            },
            group: None,
            routing: None,
        }
    }

    /// A builtin tool with parameters already in OpenAI-function form.
    pub fn builtin(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: Schema::new(parameters),
            source: ToolSource::Builtin,
            group: None,
            routing: None,
        }
    }

    /// Whether the tool is MCP-tagged (DeerFlow's `metadata["deerflow_mcp"] is True`):
    /// only such tools are ever deferred.
    pub fn is_mcp(&self) -> bool {
        matches!(self.source, ToolSource::Mcp { .. })
    }

    /// The OpenAI function definition `{"name", "description", "parameters"}`, in that
    /// key order, as `convert_to_openai_function` returns it.
    pub fn openai_function(&self) -> Value {
        let mut function = Map::with_capacity(3);
        function.insert("name".to_owned(), Value::String(self.name.clone()));
        function.insert(
            "description".to_owned(),
            Value::String(self.description.clone()),
        );
        function.insert("parameters".to_owned(), self.parameters.value().clone());
        Value::Object(function)
    }
}

/// An MCP `inputSchema` turned into OpenAI-function parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenAiParameters {
    pub parameters: Value,
    /// The schema's top-level `description`, which langchain pops and uses as the
    /// function description when the tool has none.
    pub schema_description: Option<String>,
}

/// Normalises an MCP `inputSchema` the way langchain's
/// `_convert_json_schema_to_openai_function` does: the top-level `title` and
/// `description` are popped, then `_rm_titles` drops every `title` key except a
/// property that is itself named `title` (a dict under `properties`). Lists are not
/// descended into, as in langchain. The function is idempotent.
///
/// Not reproduced: langchain's `dereference_refs` (`$ref` inlining and `$defs`
/// removal), whose behaviour differs between langchain versions; a schema with
/// `$ref`s is kept as it is, so its hash matches DeerFlow only when it has none.
pub fn openai_parameters(input_schema: Value) -> OpenAiParameters {
    match input_schema {
        Value::Object(mut schema) => {
            schema.shift_remove("title");
            let schema_description = match schema.shift_remove("description") {
                Some(Value::String(text)) => Some(text),
                _ => None,
            };
            OpenAiParameters {
                parameters: Value::Object(remove_titles(schema, "")),
                schema_description,
            }
        }
        other => OpenAiParameters {
            parameters: other,
            schema_description: None,
        },
    }
}

/// langchain's `_rm_titles`: `prev_key` is the key under which `object` sits. Done in
/// place (order kept, no key rehashed): a `title` goes unless it is an object under
/// `properties` (a property named `title`), and every object below is visited.
fn remove_titles(mut object: Map<String, Value>, prev_key: &str) -> Map<String, Value> {
    remove_titles_in_place(&mut object, prev_key);
    object
}

fn remove_titles_in_place(object: &mut Map<String, Value>, prev_key: &str) {
    object.retain(|key, value| key != "title" || (prev_key == "properties" && value.is_object()));
    for (key, value) in object.iter_mut() {
        if let Value::Object(inner) = value {
            remove_titles_in_place(inner, key);
        }
    }
}

/// Whether routing hints and auto-promotion apply to a tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoutingMode {
    #[default]
    Off,
    Prefer,
}

/// A server's `routing` section, or a tool's effective routing. `priority` is clamped to
/// 0..=100 when read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawRouting")]
pub struct McpRouting {
    pub mode: RoutingMode,
    pub priority: i64,
    pub keywords: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRouting {
    #[serde(default)]
    mode: RoutingMode,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    keywords: Vec<String>,
}

impl From<RawRouting> for McpRouting {
    fn from(raw: RawRouting) -> Self {
        McpRouting {
            mode: raw.mode,
            priority: clamp_priority(raw.priority),
            keywords: raw.keywords,
        }
    }
}

/// A tool's `routing` override: only the fields it sets replace the server's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RawOverride")]
pub struct McpRoutingOverride {
    pub mode: Option<RoutingMode>,
    pub priority: Option<i64>,
    pub keywords: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    mode: Option<RoutingMode>,
    priority: Option<i64>,
    keywords: Option<Vec<String>>,
}

impl From<RawOverride> for McpRoutingOverride {
    fn from(raw: RawOverride) -> Self {
        McpRoutingOverride {
            mode: raw.mode,
            priority: raw.priority.map(clamp_priority),
            keywords: raw.keywords,
        }
    }
}

/// Clamps a routing priority to 0..=100, with DeerFlow's warnings.
pub(crate) fn clamp_priority(priority: i64) -> i64 {
    if priority < 0 {
        tracing::warn!("MCP routing priority {priority} is below 0; clamping to 0.");
        0
    } else if priority > 100 {
        tracing::warn!("MCP routing priority {priority} is above 100; clamping to 100.");
        100
    } else {
        priority
    }
}

/// `resolve_effective_mcp_routing`: the server's routing (defaults without a server) with
/// the fields the tool's override sets.
pub fn resolve_effective_routing(
    server: Option<&McpRouting>,
    tool_override: Option<&McpRoutingOverride>,
) -> McpRouting {
    let mut effective = server.cloned().unwrap_or_default();
    if let Some(over) = tool_override {
        if let Some(mode) = over.mode {
            effective.mode = mode;
        }
        if let Some(priority) = over.priority {
            effective.priority = priority;
        }
        if let Some(keywords) = &over.keywords {
            effective.keywords = keywords.clone();
        }
    }
    effective
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_schema_loses_titles_but_keeps_a_property_named_title() {
        let schema = json!({
            "title": "create_issueArguments",
            "description": "Arguments.",
            "type": "object",
            "properties": {
                "title": {"title": "Title", "type": "string"},
                "labels": {"title": "Labels", "type": "array", "items": {"title": "Label", "type": "string"}},
                "anyof": {"anyOf": [{"title": "kept inside lists", "type": "string"}]}
            },
            "required": ["title"]
        });
        let converted = openai_parameters(schema);
        assert_eq!(converted.schema_description.as_deref(), Some("Arguments."));
        assert_eq!(
            converted.parameters,
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "labels": {"type": "array", "items": {"type": "string"}},
                    "anyof": {"anyOf": [{"title": "kept inside lists", "type": "string"}]}
                },
                "required": ["title"]
            })
        );
        let again = openai_parameters(converted.parameters.clone());
        assert_eq!(again.parameters, converted.parameters);
    }

    #[test]
    fn mcp_tool_without_description_takes_the_schema_description() {
        let tool = ToolSpec::mcp(
            "srv_x",
            "",
            json!({"description": "From the schema.", "type": "object", "properties": {}}),
            Some("srv".into()),
            "x",
        );
        assert_eq!(tool.description, "From the schema.");
        assert!(tool.is_mcp());
        let function = tool.openai_function();
        let keys: Vec<&str> = function
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys, ["name", "description", "parameters"]);
    }

    #[test]
    fn routing_reads_with_defaults_clamps_and_forbids_extra_fields() {
        let routing: McpRouting =
            serde_json::from_value(json!({"mode": "prefer", "priority": 250})).unwrap();
        assert_eq!(routing.priority, 100);
        assert_eq!(routing.mode, RoutingMode::Prefer);
        let low: McpRouting = serde_json::from_value(json!({"priority": -3})).unwrap();
        assert_eq!((low.mode, low.priority), (RoutingMode::Off, 0));
        assert!(serde_json::from_value::<McpRouting>(json!({"mode": "prefer", "x": 1})).is_err());
        assert!(serde_json::from_value::<McpRouting>(json!({"mode": "always"})).is_err());
    }

    #[test]
    fn override_replaces_only_the_fields_it_sets() {
        let server: McpRouting =
            serde_json::from_value(json!({"mode": "prefer", "priority": 10, "keywords": ["sql"]}))
                .unwrap();
        let over: McpRoutingOverride = serde_json::from_value(json!({"priority": 900})).unwrap();
        let effective = resolve_effective_routing(Some(&server), Some(&over));
        assert_eq!(effective.mode, RoutingMode::Prefer);
        assert_eq!(effective.priority, 100);
        assert_eq!(effective.keywords, ["sql"]);
        assert_eq!(resolve_effective_routing(None, None), McpRouting::default());
    }
}
