//! The `memory:` section of `config.yaml` (DeerFlow spec C.6), typed: the host-shared keys
//! (`enabled`, `injection_enabled`, `mode`, `manager_class`, `shutdown_flush_timeout_seconds`)
//! and DeerMem's `backend_config` (DeerFlow's legacy top-level DeerMem keys are moved
//! into it, as DeerFlow does). Defaults and ranges are DeerFlow's. A value Antler cannot
//! honour (`mode: tool`, another backend, consolidation) is a [`MemoryProblem`] naming
//! its key; a key neither knows is a [`MemoryNote`] (a warning), as is a DeerMem knob
//! Antler accepts but has no use for (its storage lives in the runs database).

use serde_json::{Map, Value};

use super::diagnostics::FieldPath;

/// `memory.backend_config` keys Antler acts on.
const ACTED_ON: &[&str] = &[
    "debounce_seconds",
    "max_delay_seconds",
    "queue_max_depth",
    "max_facts",
    "fact_confidence_threshold",
    "max_injection_tokens",
    "token_counting",
    "guaranteed_categories",
    "guaranteed_token_budget",
    "staleness_review_enabled",
    "staleness_age_days",
    "staleness_min_candidates",
    "staleness_max_removals_per_cycle",
    "staleness_protected_categories",
    "staleness_max_lifetime_multiplier",
    "staleness_max_extension_days",
    "consolidation_enabled",
    "fact_eviction_policy",
    "prompts_dir",
    "patterns_dir",
    "model",
];

/// DeerMem keys about its file storage, retrieval index, hybrid eviction and in-process
/// caches, with the values that change nothing (DeerFlow's defaults, as its example config
/// writes them): Antler keeps memory in the runs database, so another value has no effect
/// (a note says so).
const NO_EFFECT: &[(&str, &[&str])] = &[
    ("storage_path", &[""]),
    ("storage_class", &["", "file"]),
    ("strict_user_scope", &["false"]),
    ("manifest_filename", &["memory.json"]),
    ("file_lock_timeout_seconds", &["10"]),
    ("retrieval_adapter", &["fts5"]),
    ("watermark_max_keys", &["4096"]),
    ("fact_eviction_shadow_enabled", &["false"]),
    ("eviction_confidence_weight", &["0.65"]),
    ("eviction_confirmation_weight", &["0.25"]),
    ("eviction_access_weight", &["0.1"]),
    ("eviction_confirmation_half_life_days", &["90"]),
    ("eviction_access_half_life_days", &["30"]),
    ("eviction_correction_reserved_fraction", &["0.1"]),
    ("eviction_correction_reserved_max", &["10"]),
    ("eviction_audit_max_entries", &["200"]),
    ("consolidation_min_facts", &["8"]),
    ("consolidation_max_groups_per_cycle", &["3"]),
    ("consolidation_max_sources", &["8"]),
];

/// Whether `key` is one of [`NO_EFFECT`]'s.
fn no_effect_key(key: &str) -> bool {
    NO_EFFECT.iter().any(|(k, _)| *k == key)
}

/// Whether `value` of a [`NO_EFFECT`] key is one that changes nothing.
fn changes_nothing(key: &str, value: &Value) -> bool {
    let Some((_, defaults)) = NO_EFFECT.iter().find(|(k, _)| *k == key) else {
        return false;
    };
    let shown = match value {
        Value::Null => return true,
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().map(|x| x.to_string()).unwrap_or_default(),
        other => other.to_string(),
    };
    defaults.contains(&shown.as_str())
}

/// The host-shared keys of `memory:`.
const SHARED: &[&str] = &[
    "enabled",
    "injection_enabled",
    "mode",
    "manager_class",
    "shutdown_flush_timeout_seconds",
    "backend_config",
];

/// `memory.backend_config.model` keys.
const MODEL_KEYS: &[&str] = &["provider", "model", "api_key", "base_url", "temperature"];

/// The note for a DeerMem key that has no effect in Antler.
pub const NO_EFFECT_NOTE: &str =
    "a DeerMem storage setting: Antler keeps memory in the runs database, so it does nothing here";

/// `memory:`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// Whether runs are remembered and memory is injected at all.
    pub enabled: bool,
    /// Whether the memory block is put into the lead's system prompt.
    pub injection_enabled: bool,
    /// `shutdown_flush_timeout_seconds` (1–300): Antler's queue is in the runs database,
    /// so a shutdown loses nothing and does not wait for it.
    pub shutdown_flush_timeout_seconds: f64,
    /// `manager_class`: `deermem` or `noop` (nothing is remembered or injected).
    pub manager: MemoryManagerKind,
    /// DeerMem's settings.
    pub deermem: DeerMemSettings,
    /// `backend_config` as written (for `GET /api/memory/config`).
    pub backend_config: Map<String, Value>,
}

/// The memory backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryManagerKind {
    DeerMem,
    Noop,
}

impl MemoryManagerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryManagerKind::DeerMem => "deermem",
            MemoryManagerKind::Noop => "noop",
        }
    }
}

/// `memory.backend_config` (DeerMem's `DeerMemConfig`, the keys Antler acts on).
#[derive(Debug, Clone, PartialEq)]
pub struct DeerMemSettings {
    /// Quiet seconds after a user's last finished run before its update (1–300, 30).
    pub debounce_seconds: u64,
    /// Antler's: the longest a user's pending update waits, however busy the user is
    /// (at least `debounce_seconds`; 300).
    pub max_delay_seconds: u64,
    /// Pending updates beyond which a new one (without a signal) is dropped (0: no cap).
    pub queue_max_depth: u64,
    /// Facts kept per user and agent (10–500, 100); the least confident go first.
    pub max_facts: usize,
    /// The least confidence a new fact needs (0–1, 0.7).
    pub fact_confidence_threshold: f64,
    /// The memory block's budget in tokens (100–8000, 2000).
    pub max_injection_tokens: usize,
    /// `tiktoken` or `char`; both count as `char` does (non-CJK/4 + CJK/2).
    pub token_counting: String,
    /// Categories injected first from their own budget (`[correction]`).
    pub guaranteed_categories: Vec<String>,
    /// Their budget (50–2000, 500).
    pub guaranteed_token_budget: usize,
    pub staleness_review_enabled: bool,
    /// Days before a fact without its own lifetime is reviewed (30–365, 90).
    pub staleness_age_days: u64,
    /// Stale facts needed for a review (1–50, 3).
    pub staleness_min_candidates: usize,
    /// Removals one review may make (1–50, 10).
    pub staleness_max_removals_per_cycle: usize,
    /// Categories never reviewed (`[correction]`).
    pub staleness_protected_categories: Vec<String>,
    /// A new fact's lifetime is at most `staleness_age_days` times this (1–100, 20).
    pub staleness_max_lifetime_multiplier: f64,
    /// A reviewed fact's lifetime is at most this many days (90–36500, 3650).
    pub staleness_max_extension_days: u64,
    /// The model of the update call (`None`: the first of `models:`).
    pub model: Option<MemoryModel>,
}

/// `memory.backend_config.model`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryModel {
    /// `openai` (or unset: an OpenAI-compatible endpoint) or `anthropic`.
    pub provider: Option<String>,
    /// A model id, or the name of a `models:` entry (then that entry is used).
    pub model: String,
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    pub temperature: Option<f64>,
}

impl Default for DeerMemSettings {
    fn default() -> Self {
        DeerMemSettings {
            debounce_seconds: 30,
            max_delay_seconds: 300,
            queue_max_depth: 1000,
            max_facts: 100,
            fact_confidence_threshold: 0.7,
            max_injection_tokens: 2000,
            token_counting: "tiktoken".to_owned(),
            guaranteed_categories: vec!["correction".to_owned()],
            guaranteed_token_budget: 500,
            staleness_review_enabled: true,
            staleness_age_days: 90,
            staleness_min_candidates: 3,
            staleness_max_removals_per_cycle: 10,
            staleness_protected_categories: vec!["correction".to_owned()],
            staleness_max_lifetime_multiplier: 20.0,
            staleness_max_extension_days: 3650,
            model: None,
        }
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            injection_enabled: true,
            shutdown_flush_timeout_seconds: 30.0,
            manager: MemoryManagerKind::DeerMem,
            deermem: DeerMemSettings::default(),
            backend_config: Map::new(),
        }
    }
}

/// A value of `memory:` Antler refuses: where, what is wrong, what would be accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryProblem {
    pub path: FieldPath,
    pub message: String,
    pub expected: String,
}

impl std::fmt::Display for MemoryProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} ({})", self.path, self.message, self.expected)
    }
}

/// Something of `memory:` the operator should know: an unknown key, a key with no effect,
/// a legacy key moved under `backend_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryNote {
    pub path: FieldPath,
    pub message: String,
    /// An unknown key (else: a key Antler reads and does not act on).
    pub unknown: bool,
}

impl MemoryConfig {
    /// Reads `memory:` (absent or empty: DeerFlow's defaults); the first problem, if any.
    pub fn from_config(section: Option<&Value>) -> Result<MemoryConfig, MemoryProblem> {
        let (config, _, mut problems) = parse(section);
        match problems.is_empty() {
            true => Ok(config),
            false => Err(problems.remove(0)),
        }
    }

    /// Whether nothing is remembered (`enabled: false` or the `noop` backend).
    pub fn is_off(&self) -> bool {
        !self.enabled || self.manager == MemoryManagerKind::Noop
    }
}

/// `memory:` read: the config (defaults where a value is refused), its notes, and every
/// problem.
pub fn parse(section: Option<&Value>) -> (MemoryConfig, Vec<MemoryNote>, Vec<MemoryProblem>) {
    let mut config = MemoryConfig::default();
    let mut notes = Vec::new();
    let mut problems = Vec::new();
    let root = FieldPath::root().key("memory");
    let Some(section) = section.filter(|s| !s.is_null()) else {
        return (config, notes, problems);
    };
    let Some(map) = section.as_object() else {
        problems.push(problem(
            &root,
            "not a mapping",
            "a mapping of memory settings",
        ));
        return (config, notes, problems);
    };
    let mut reader = Reader {
        problems: &mut problems,
    };
    if let Some(b) = reader.boolean(map, &root, "enabled") {
        config.enabled = b;
    }
    if let Some(b) = reader.boolean(map, &root, "injection_enabled") {
        config.injection_enabled = b;
    }
    if let Some(mode) = reader.string(map, &root, "mode") {
        match mode.as_str() {
            "middleware" => {}
            "tool" => reader.refuse(
                &root.key("mode"),
                "tool mode (memory_search, memory_add, ...) is not built in Antler",
                "middleware",
            ),
            _ => reader.refuse(&root.key("mode"), "unknown mode", "middleware or tool"),
        }
    }
    if let Some(manager) = reader.string(map, &root, "manager_class") {
        match manager.as_str() {
            "deermem" => config.manager = MemoryManagerKind::DeerMem,
            "noop" => config.manager = MemoryManagerKind::Noop,
            _ => reader.refuse(
                &root.key("manager_class"),
                &format!("backend {manager:?} is not built in Antler"),
                "deermem or noop",
            ),
        }
    }
    if let Some(t) = reader.number(map, &root, "shutdown_flush_timeout_seconds", 1.0, 300.0) {
        config.shutdown_flush_timeout_seconds = t;
    }
    // DeerMem's own keys, and the legacy top-level ones DeerFlow moves under it.
    let mut backend = match map.get("backend_config") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            reader.refuse(
                &root.key("backend_config"),
                "not a mapping",
                "a mapping of DeerMem settings",
            );
            Map::new()
        }
    };
    for (key, value) in map {
        if SHARED.contains(&key.as_str()) {
            continue;
        }
        let legacy = ACTED_ON.contains(&key.as_str()) || no_effect_key(key);
        if key == "model_name" {
            if let Some(name) = value.as_str().filter(|s| !s.is_empty()) {
                let model = backend
                    .entry("model")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(m) = model.as_object_mut() {
                    m.entry("model")
                        .or_insert_with(|| Value::String(name.to_owned()));
                }
            }
        } else if legacy {
            if !value.is_null() {
                backend.entry(key.clone()).or_insert_with(|| value.clone());
            }
        } else {
            notes.push(MemoryNote {
                path: root.key(key),
                message: format!(
                    "unknown memory key (known: {}, and DeerMem's keys under backend_config)",
                    SHARED.join(", ")
                ),
                unknown: true,
            });
        }
    }
    let bc = root.key("backend_config");
    let s = &mut config.deermem;
    for (key, value) in &backend {
        if no_effect_key(key) {
            if !changes_nothing(key, value) {
                notes.push(MemoryNote {
                    path: bc.key(key),
                    message: NO_EFFECT_NOTE.to_owned(),
                    unknown: false,
                });
            }
        } else if !ACTED_ON.contains(&key.as_str()) {
            notes.push(MemoryNote {
                path: bc.key(key),
                message: "unknown DeerMem key".to_owned(),
                unknown: true,
            });
        }
    }
    if let Some(n) = reader.whole(&backend, &bc, "debounce_seconds", 1, 300) {
        s.debounce_seconds = n;
    }
    s.max_delay_seconds = s.max_delay_seconds.max(s.debounce_seconds);
    if let Some(n) = reader.whole(&backend, &bc, "max_delay_seconds", 1, 86_400) {
        if n < s.debounce_seconds {
            reader.refuse(
                &bc.key("max_delay_seconds"),
                "shorter than debounce_seconds",
                &format!("at least {}", s.debounce_seconds),
            );
        } else {
            s.max_delay_seconds = n;
        }
    }
    if let Some(n) = reader.whole(&backend, &bc, "queue_max_depth", 0, u64::MAX) {
        s.queue_max_depth = n;
    }
    if let Some(n) = reader.whole(&backend, &bc, "max_facts", 10, 500) {
        s.max_facts = n as usize;
    }
    if let Some(x) = reader.number(&backend, &bc, "fact_confidence_threshold", 0.0, 1.0) {
        s.fact_confidence_threshold = x;
    }
    if let Some(n) = reader.whole(&backend, &bc, "max_injection_tokens", 100, 8000) {
        s.max_injection_tokens = n as usize;
    }
    if let Some(t) = reader.string(&backend, &bc, "token_counting") {
        match t.as_str() {
            "tiktoken" | "char" => s.token_counting = t,
            _ => reader.refuse(
                &bc.key("token_counting"),
                "unknown counting",
                "tiktoken or char",
            ),
        }
    }
    if let Some(list) = reader.strings(&backend, &bc, "guaranteed_categories") {
        s.guaranteed_categories = list;
    }
    if let Some(n) = reader.whole(&backend, &bc, "guaranteed_token_budget", 50, 2000) {
        s.guaranteed_token_budget = n as usize;
    }
    if let Some(b) = reader.boolean(&backend, &bc, "staleness_review_enabled") {
        s.staleness_review_enabled = b;
    }
    if let Some(n) = reader.whole(&backend, &bc, "staleness_age_days", 30, 365) {
        s.staleness_age_days = n;
    }
    if let Some(n) = reader.whole(&backend, &bc, "staleness_min_candidates", 1, 50) {
        s.staleness_min_candidates = n as usize;
    }
    if let Some(n) = reader.whole(&backend, &bc, "staleness_max_removals_per_cycle", 1, 50) {
        s.staleness_max_removals_per_cycle = n as usize;
    }
    if let Some(list) = reader.strings(&backend, &bc, "staleness_protected_categories") {
        s.staleness_protected_categories = list;
    }
    if let Some(x) = reader.number(
        &backend,
        &bc,
        "staleness_max_lifetime_multiplier",
        1.0,
        100.0,
    ) {
        s.staleness_max_lifetime_multiplier = x;
    }
    if let Some(n) = reader.whole(&backend, &bc, "staleness_max_extension_days", 90, 36_500) {
        s.staleness_max_extension_days = n;
    }
    if reader.boolean(&backend, &bc, "consolidation_enabled") == Some(true) {
        reader.refuse(
            &bc.key("consolidation_enabled"),
            "consolidation is not built in Antler",
            "false",
        );
    }
    if let Some(policy) = reader.string(&backend, &bc, "fact_eviction_policy") {
        if policy != "confidence" {
            reader.refuse(
                &bc.key("fact_eviction_policy"),
                &format!("eviction policy {policy:?} is not built in Antler"),
                "confidence",
            );
        }
    }
    for key in ["prompts_dir", "patterns_dir"] {
        if reader.string(&backend, &bc, key).is_some() {
            reader.refuse(
                &bc.key(key),
                "custom memory prompts and patterns are not built in Antler",
                "unset (DeerFlow's bundled texts)",
            );
        }
    }
    s.model = model(&backend, &bc, &mut reader, &mut notes);
    config.backend_config = backend;
    (config, notes, problems)
}

/// `backend_config.model` (`None` when it names no model).
fn model(
    backend: &Map<String, Value>,
    bc: &FieldPath,
    reader: &mut Reader<'_>,
    notes: &mut Vec<MemoryNote>,
) -> Option<MemoryModel> {
    let at = bc.key("model");
    let map = match backend.get("model") {
        None | Some(Value::Null) => return None,
        Some(Value::Object(m)) => m,
        Some(_) => {
            reader.refuse(
                &at,
                "not a mapping",
                "a mapping with provider, model, api_key, base_url, temperature",
            );
            return None;
        }
    };
    for key in map.keys() {
        if !MODEL_KEYS.contains(&key.as_str()) {
            notes.push(MemoryNote {
                path: at.key(key),
                message: format!("unknown key (known: {})", MODEL_KEYS.join(", ")),
                unknown: true,
            });
        }
    }
    let provider = reader.string(map, &at, "provider");
    if let Some(p) = provider.as_deref() {
        if !matches!(p, "openai" | "anthropic") {
            reader.refuse(
                &at.key("provider"),
                &format!("provider {p:?} is not built for the memory model"),
                "openai or anthropic, or a models: entry named in model",
            );
        }
    }
    let name = reader.string(map, &at, "model")?;
    Some(MemoryModel {
        provider,
        model: name,
        api_key: reader.string(map, &at, "api_key"),
        base_url: reader.string(map, &at, "base_url"),
        temperature: reader.number(map, &at, "temperature", 0.0, 2.0),
    })
}

fn problem(path: &FieldPath, message: &str, expected: &str) -> MemoryProblem {
    MemoryProblem {
        path: path.clone(),
        message: message.to_owned(),
        expected: expected.to_owned(),
    }
}

/// Reads typed values, recording a problem for each of the wrong type or range.
struct Reader<'a> {
    problems: &'a mut Vec<MemoryProblem>,
}

impl Reader<'_> {
    fn refuse(&mut self, path: &FieldPath, message: &str, expected: &str) {
        self.problems.push(problem(path, message, expected));
    }

    fn boolean(&mut self, map: &Map<String, Value>, at: &FieldPath, key: &str) -> Option<bool> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.refuse(&at.key(key), "not a boolean", "true or false");
                None
            }
        }
    }

    fn string(&mut self, map: &Map<String, Value>, at: &FieldPath, key: &str) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.refuse(&at.key(key), "not a string", "a string");
                None
            }
        }
    }

    fn strings(
        &mut self,
        map: &Map<String, Value>,
        at: &FieldPath,
        key: &str,
    ) -> Option<Vec<String>> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            Some(_) => {
                self.refuse(
                    &at.key(key),
                    "not a list of strings",
                    "a list of categories",
                );
                None
            }
        }
    }

    fn whole(
        &mut self,
        map: &Map<String, Value>,
        at: &FieldPath,
        key: &str,
        min: u64,
        max: u64,
    ) -> Option<u64> {
        let value = map.get(key).filter(|v| !v.is_null())?;
        match value.as_u64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                let expected = if max == u64::MAX {
                    format!("a whole number of at least {min}")
                } else {
                    format!("a whole number from {min} to {max}")
                };
                self.refuse(&at.key(key), "value out of range", &expected);
                None
            }
        }
    }

    fn number(
        &mut self,
        map: &Map<String, Value>,
        at: &FieldPath,
        key: &str,
        min: f64,
        max: f64,
    ) -> Option<f64> {
        let value = map.get(key).filter(|v| !v.is_null())?;
        match value.as_f64() {
            Some(x) if x.is_finite() && (min..=max).contains(&x) => Some(x),
            _ => {
                self.refuse(
                    &at.key(key),
                    "value out of range",
                    &format!("a number from {min} to {max}"),
                );
                None
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_absent_section_is_deerflows_defaults() {
        let config = MemoryConfig::from_config(None).unwrap();
        assert!(config.enabled && config.injection_enabled && !config.is_off());
        assert_eq!(config.deermem.debounce_seconds, 30);
        assert_eq!(config.deermem.max_facts, 100);
        assert_eq!(config.deermem.fact_confidence_threshold, 0.7);
        assert_eq!(config.deermem.max_injection_tokens, 2000);
        assert_eq!(config.deermem.guaranteed_categories, ["correction"]);
        assert_eq!(config.deermem.model, None);
    }

    #[test]
    fn what_antler_cannot_honour_is_refused_by_its_key() {
        let err = MemoryConfig::from_config(Some(&json!({"mode": "tool"}))).unwrap_err();
        assert_eq!(err.path.to_string(), "memory.mode");
        let err = MemoryConfig::from_config(Some(&json!({"manager_class": "mem0"}))).unwrap_err();
        assert_eq!(err.path.to_string(), "memory.manager_class");
        let err = MemoryConfig::from_config(Some(
            &json!({"backend_config": {"consolidation_enabled": true}}),
        ))
        .unwrap_err();
        assert_eq!(
            err.path.to_string(),
            "memory.backend_config.consolidation_enabled"
        );
        let err =
            MemoryConfig::from_config(Some(&json!({"backend_config": {"debounce_seconds": 0}})))
                .unwrap_err();
        assert_eq!(
            err.path.to_string(),
            "memory.backend_config.debounce_seconds"
        );
        let noop = MemoryConfig::from_config(Some(&json!({"manager_class": "noop"}))).unwrap();
        assert!(noop.is_off());
    }

    #[test]
    fn legacy_keys_move_under_backend_config_and_storage_keys_are_noted() {
        let (config, notes, problems) = parse(Some(&json!({
            "debounce_seconds": 5,
            "model_name": "small",
            "storage_path": "/data/memory",
            "typo": 1,
        })));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(config.deermem.debounce_seconds, 5);
        assert_eq!(config.deermem.model.unwrap().model, "small");
        let noted: Vec<String> = notes.iter().map(|n| n.path.to_string()).collect();
        assert!(noted.contains(&"memory.typo".to_owned()), "{noted:?}");
        assert!(
            noted.contains(&"memory.backend_config.storage_path".to_owned()),
            "{noted:?}"
        );
    }

    #[test]
    fn deerflows_example_section_loads_without_a_note() {
        let example: Value = serde_json::from_str(
            r#"{
            "enabled": true, "injection_enabled": true, "shutdown_flush_timeout_seconds": 30.0,
            "manager_class": "deermem", "mode": "middleware",
            "backend_config": {
                "storage_path": "", "storage_class": "file", "strict_user_scope": false,
                "manifest_filename": "memory.json", "file_lock_timeout_seconds": 10,
                "retrieval_adapter": "fts5", "debounce_seconds": 30, "queue_max_depth": 1000,
                "model": null, "max_facts": 100, "fact_confidence_threshold": 0.7,
                "fact_eviction_policy": "confidence", "fact_eviction_shadow_enabled": false,
                "eviction_confidence_weight": 0.65, "eviction_confirmation_weight": 0.25,
                "eviction_access_weight": 0.10, "eviction_confirmation_half_life_days": 90,
                "eviction_access_half_life_days": 30,
                "eviction_correction_reserved_fraction": 0.10,
                "eviction_correction_reserved_max": 10, "eviction_audit_max_entries": 200,
                "max_injection_tokens": 2000, "token_counting": "tiktoken",
                "guaranteed_categories": ["correction"], "guaranteed_token_budget": 500,
                "staleness_review_enabled": true, "staleness_age_days": 90,
                "staleness_min_candidates": 3, "staleness_max_removals_per_cycle": 10,
                "staleness_protected_categories": ["correction"],
                "staleness_max_lifetime_multiplier": 20.0, "staleness_max_extension_days": 3650,
                "consolidation_enabled": false, "consolidation_min_facts": 8,
                "consolidation_max_groups_per_cycle": 3, "consolidation_max_sources": 8
            }}"#,
        )
        .unwrap();
        let (config, notes, problems) = parse(Some(&example));
        assert!(problems.is_empty(), "{problems:?}");
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(config.deermem, DeerMemSettings::default());
    }
}
