//! The memory routes (DeerFlow's `/api/memory`, spec C.6): a principal reads, exports,
//! imports and deletes its own memory only (its facts for the lead, or for `?agent=NAME`);
//! the operator names a user with `?user=`. A member naming another user is refused (403),
//! so no route reaches another user's memory. Answers have DeerFlow's `MemoryResponse`
//! shape; `GET /api/memory/config` hides the memory model's API key.

use actix_web::{http::StatusCode, web, HttpResponse};
use antler_protocol::config::{MemoryConfig, OPERATOR_USER};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::runs_api::principal_of;
use super::{body, error, Refusal, State};
use crate::memory::{agent_key, time, update};
use crate::runs::store::memory::{Fact, MemoryDoc, Section, SECTIONS};
use crate::runs::store::CheckpointError;

/// The largest `POST /api/memory/import` body.
const MAX_IMPORT_BODY: usize = 1 << 20;
/// Writes retried when the memory changed meanwhile (an update landed).
const WRITE_ATTEMPTS: usize = 3;
/// What replaces a secret in `GET /api/memory/config`.
const REDACTED: &str = "***";

/// `?user=` (the operator's) and `?agent=`.
#[derive(Deserialize, utoipa::IntoParams)]
pub(super) struct Scope {
    /// The operator's: whose memory (a member may name only itself, else 403).
    #[serde(default)]
    user: Option<String>,
    /// An agent's own memory instead of the user's.
    #[serde(default)]
    #[param(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    agent: Option<String>,
}

/// A request refused before the store is asked: the status and the detail.
struct Refused(StatusCode, String);

impl Refused {
    fn response(self) -> HttpResponse {
        error(self.0, self.1)
    }
}

/// The response refusing a request (`None`: it had no principal).
fn refuse(refused: Option<Refused>) -> HttpResponse {
    match refused {
        None => Refusal::Credential.response(),
        Some(refused) => refused.response(),
    }
}

/// Whose memory a request reads: (user, agent bucket), or why not (`None`: no principal).
fn owner(req: &actix_web::HttpRequest, scope: &Scope) -> Result<(String, String), Option<Refused>> {
    let Some(principal) = principal_of(req) else {
        return Err(None);
    };
    let user = match (&principal.user, scope.user.as_deref()) {
        (_, Some(asked)) if principal.operator => asked.to_owned(),
        (Some(own), Some(asked)) if asked != own => {
            return Err(Some(Refused(
                StatusCode::FORBIDDEN,
                format!("this token acts as user {own}: its memory is the only one it reaches"),
            )))
        }
        (Some(own), _) => own.clone(),
        (None, asked) => asked.unwrap_or(OPERATOR_USER).to_owned(),
    };
    crate::runs::prepare::check_id("user", &user)
        .map_err(|e| Some(Refused(StatusCode::BAD_REQUEST, e.to_string())))?;
    if let Some(agent) = scope.agent.as_deref() {
        let plain = !agent.is_empty()
            && agent.len() <= 128
            && agent
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            return Err(Some(Refused(
                StatusCode::BAD_REQUEST,
                "invalid agent: use 1 to 128 letters, digits, '-' or '_'".to_owned(),
            )));
        }
    }
    Ok((user, agent_key(scope.agent.as_deref())))
}

fn store_error(e: CheckpointError) -> HttpResponse {
    let status = if e.is_busy() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    error(status, format!("memory: {e}"))
}

async fn read(state: &State, user: &str, agent: &str) -> Result<MemoryDoc, HttpResponse> {
    let (user, agent) = (user.to_owned(), agent.to_owned());
    state
        .runs
        .env
        .store
        .call(move |store| store.memory(&user, &agent))
        .await
        .map_err(store_error)
}

/// `GET /api/memory` (and `/export`): the memory document.
pub(super) async fn get_memory(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    scope: web::Query<Scope>,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    match read(&state, &user, &agent).await {
        Ok(doc) => HttpResponse::Ok().json(doc.to_json()),
        Err(r) => r,
    }
}

/// `GET /api/memory/facts`: `{"facts": [...]}`, the most confident first.
pub(super) async fn list_facts(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    scope: web::Query<Scope>,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    match read(&state, &user, &agent).await {
        Ok(doc) => HttpResponse::Ok().json(json!({"facts": doc.facts})),
        Err(r) => r,
    }
}

/// `DELETE /api/memory`: everything of the user forgotten (every agent's facts, the
/// profile, its pending updates); the empty document.
pub(super) async fn clear_memory(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    scope: web::Query<Scope>,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    let (u, now) = (user.clone(), time::now_iso());
    if let Err(e) = state
        .runs
        .env
        .store
        .call(move |store| store.clear_memory(&u, &now))
        .await
    {
        return store_error(e);
    }
    match read(&state, &user, &agent).await {
        Ok(doc) => HttpResponse::Ok().json(doc.to_json()),
        Err(r) => r,
    }
}

/// Writes `change(doc)` over the current document, again from a fresh read when an update
/// landed meanwhile; the written document, or the response `change` or the store gave.
async fn rewrite(
    state: &State,
    user: &str,
    agent: &str,
    change: impl Fn(&mut MemoryDoc) -> Result<(), Refused>,
) -> Result<MemoryDoc, HttpResponse> {
    for _ in 0..WRITE_ATTEMPTS {
        let mut doc = read(state, user, agent).await?;
        change(&mut doc).map_err(Refused::response)?;
        let (u, a, d, now) = (
            user.to_owned(),
            agent.to_owned(),
            doc.clone(),
            time::now_iso(),
        );
        let written = state
            .runs
            .env
            .store
            .call(move |store| store.write_memory(&u, &a, &d, &now))
            .await
            .map_err(store_error)?;
        if written.is_some() {
            return read(state, user, agent).await;
        }
    }
    Err(error(
        StatusCode::CONFLICT,
        "Memory changed concurrently; reload and retry.",
    ))
}

/// `DELETE /api/memory/facts/{id}`: the fact forgotten; 404 when the principal's memory
/// has no such fact (another user's fact is not there either).
pub(super) async fn delete_fact(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    id: web::Path<String>,
    scope: web::Query<Scope>,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    let id = id.into_inner();
    let written = rewrite(&state, &user, &agent, |doc| {
        let before = doc.facts.len();
        doc.facts.retain(|f| f.id != id);
        match doc.facts.len() == before {
            true => Err(not_found(&id)),
            false => Ok(()),
        }
    })
    .await;
    match written {
        Ok(doc) => HttpResponse::Ok().json(doc.to_json()),
        Err(r) => r,
    }
}

/// The body of `POST /api/memory/facts` and `PATCH /api/memory/facts/{id}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FactBody {
    /// Not blank.
    #[serde(default)]
    #[schema(pattern = "\\S")]
    content: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    #[schema(minimum = 0.0, maximum = 1.0)]
    confidence: Option<f64>,
}

/// The largest fact body.
const MAX_FACT_BODY: usize = 64 << 10;

/// A fact body, its content trimmed and its confidence checked (DeerFlow's texts).
async fn fact_body(payload: web::Payload) -> Result<FactBody, HttpResponse> {
    let raw = body::read_body(payload, MAX_FACT_BODY).await?;
    let mut fact: FactBody = serde_json::from_slice(&raw).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body must be {{content?, category?, confidence?}}: {e}"),
        )
    })?;
    if let Some(c) = fact.content.as_mut() {
        *c = c.trim().to_owned();
        if c.is_empty() {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "Memory fact content cannot be empty.",
            ));
        }
    }
    if fact
        .confidence
        .is_some_and(|c| !(c.is_finite() && (0.0..=1.0).contains(&c)))
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "Invalid confidence value; must be between 0 and 1.",
        ));
    }
    Ok(fact)
}

fn duplicate() -> Refused {
    Refused(
        StatusCode::CONFLICT,
        "A fact with the same content already exists.".to_owned(),
    )
}

/// `POST /api/memory/facts` with `{content, category?, confidence?}`: a fact the user
/// wrote (`source: manual`); 409 for one already there, or one `max_facts` would evict.
pub(super) async fn create_fact(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    scope: web::Query<Scope>,
    payload: web::Payload,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    let body = match fact_body(payload).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(content) = body.content else {
        return error(
            StatusCode::BAD_REQUEST,
            "Memory fact content cannot be empty.",
        );
    };
    let memory = match memory_config(&state).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let seed = format!("{user}/{agent}");
    let id = update::fact_id(&seed, &content);
    let written = rewrite(&state, &user, &agent, |doc| {
        let key = update::content_key(&content);
        if doc.facts.iter().any(|f| update::content_key(&f.content) == key) {
            return Err(duplicate());
        }
        doc.facts.push(Fact {
            id: id.clone(),
            content: content.clone(),
            category: update::category(body.category.as_deref()),
            confidence: body.confidence.unwrap_or(0.5),
            created_at: time::now_iso(),
            updated_at: None,
            source: "manual".to_owned(),
            source_error: None,
            expected_valid_days: None,
            last_confirmed_at: None,
        });
        update::keep_most_confident(&mut doc.facts, memory.deermem.max_facts);
        match doc.facts.iter().any(|f| f.id == id) {
            true => Ok(()),
            false => Err(Refused(
                StatusCode::CONFLICT,
                "Fact was not stored because the configured memory.max_facts capacity policy evicted it".to_owned(),
            )),
        }
    })
    .await;
    match written {
        Ok(doc) => HttpResponse::Ok().json(doc.to_json()),
        Err(r) => r,
    }
}

/// `PATCH /api/memory/facts/{id}` with `{content?, category?, confidence?}`: the fact
/// changed, what is omitted kept; 404 for a fact the principal's memory does not hold.
pub(super) async fn patch_fact(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    id: web::Path<String>,
    scope: web::Query<Scope>,
    payload: web::Payload,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    let body = match fact_body(payload).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let id = id.into_inner();
    let written = rewrite(&state, &user, &agent, |doc| {
        if let Some(content) = body.content.as_deref() {
            let key = update::content_key(content);
            if doc
                .facts
                .iter()
                .any(|f| f.id != id && update::content_key(&f.content) == key)
            {
                return Err(duplicate());
            }
        }
        let Some(fact) = doc.facts.iter_mut().find(|f| f.id == id) else {
            return Err(not_found(&id));
        };
        if let Some(content) = body.content.as_deref() {
            fact.content = content.to_owned();
        }
        if let Some(category) = body.category.as_deref() {
            fact.category = update::category(Some(category));
        }
        if let Some(confidence) = body.confidence {
            fact.confidence = confidence;
        }
        fact.updated_at = Some(time::now_iso());
        Ok(())
    })
    .await;
    match written {
        Ok(doc) => HttpResponse::Ok().json(doc.to_json()),
        Err(r) => r,
    }
}

fn not_found(id: &str) -> Refused {
    Refused(
        StatusCode::NOT_FOUND,
        format!(
            "Memory fact '{}' not found.",
            id.chars().take(128).collect::<String>()
        ),
    )
}

/// `POST /api/memory/import`: a `MemoryResponse` document replaces the user's profile and
/// the agent's facts (facts checked as an update's are: content, confidence 0–1, known
/// categories, duplicates once, at most `max_facts`).
pub(super) async fn import_memory(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    scope: web::Query<Scope>,
    payload: web::Payload,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    let raw = match body::read_body(payload, MAX_IMPORT_BODY).await {
        Ok(raw) => raw,
        Err(r) => return r,
    };
    let memory = match memory_config(&state).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let imported = match imported_doc(&raw, &user, &agent, memory.deermem.max_facts) {
        Ok(doc) => doc,
        Err(detail) => return error(StatusCode::BAD_REQUEST, detail),
    };
    let written = rewrite(&state, &user, &agent, |doc| {
        doc.sections = imported.sections.clone();
        doc.facts = imported.facts.clone();
        Ok(())
    })
    .await;
    match written {
        Ok(doc) => HttpResponse::Ok().json(doc.to_json()),
        Err(r) => r,
    }
}

/// The document an import body describes, or why it cannot be imported.
fn imported_doc(
    raw: &[u8],
    user: &str,
    agent: &str,
    max_facts: usize,
) -> Result<MemoryDoc, String> {
    let value: Value = serde_json::from_slice(raw).map_err(|e| {
        format!("the body must be a memory document (GET /api/memory's shape): {e}")
    })?;
    let Some(map) = value.as_object() else {
        return Err("the body must be a JSON object".to_owned());
    };
    let now = time::now_iso();
    let mut doc = MemoryDoc::default();
    for (at, (group, key)) in SECTIONS.iter().enumerate() {
        let Some(section) = map.get(*group).and_then(|g| g.get(*key)) else {
            continue;
        };
        let section: Section =
            serde_json::from_value(section.clone()).map_err(|e| format!("{group}.{key}: {e}"))?;
        doc.sections[at] = section;
    }
    let facts = match map.get("facts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err("facts must be a list".to_owned()),
    };
    let seed = format!("{user}/{agent}");
    let mut keys: Vec<String> = Vec::new();
    for (i, raw_fact) in facts.into_iter().enumerate() {
        let mut fact: Fact =
            serde_json::from_value(with_id(raw_fact)).map_err(|e| format!("facts[{i}]: {e}"))?;
        fact.content = fact.content.trim().to_owned();
        if fact.content.is_empty() {
            return Err(format!("facts[{i}]: Memory fact content cannot be empty."));
        }
        if !(fact.confidence.is_finite() && (0.0..=1.0).contains(&fact.confidence)) {
            return Err(format!(
                "facts[{i}]: Invalid confidence value; must be between 0 and 1."
            ));
        }
        let key = update::content_key(&fact.content);
        if keys.contains(&key) {
            continue;
        }
        keys.push(key);
        fact.category = update::category(Some(&fact.category));
        let plain_id = !fact.id.is_empty()
            && fact.id.len() <= 64
            && fact
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !plain_id {
            fact.id = update::fact_id(&seed, &fact.content);
        }
        if fact.created_at.is_empty() {
            fact.created_at = now.clone();
        }
        doc.facts.push(fact);
    }
    update::keep_most_confident(&mut doc.facts, max_facts);
    Ok(doc)
}

/// A fact object with an `id` (empty when it had none), so it decodes.
fn with_id(mut fact: Value) -> Value {
    if let Some(map) = fact.as_object_mut() {
        map.entry("id")
            .or_insert_with(|| Value::String(String::new()));
    }
    fact
}

async fn memory_config(state: &State) -> Result<MemoryConfig, HttpResponse> {
    let app = state
        .runs
        .env
        .load_config(None)
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    crate::memory::config(&app).map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// DeerFlow's `MemoryConfigResponse`, the memory model's key hidden.
fn config_json(memory: &MemoryConfig) -> Value {
    let mut backend = memory.backend_config.clone();
    if let Some(Value::Object(model)) = backend.get_mut("model") {
        if model.get("api_key").is_some_and(|k| !k.is_null()) {
            model.insert("api_key".into(), Value::String(REDACTED.into()));
        }
    }
    json!({
        "enabled": memory.enabled,
        "mode": "middleware",
        "injection_enabled": memory.injection_enabled,
        "shutdown_flush_timeout_seconds": memory.shutdown_flush_timeout_seconds,
        "manager_class": memory.manager.as_str(),
        "backend_config": Value::Object(backend),
    })
}

/// `GET /api/memory/config`.
pub(super) async fn get_config(state: web::Data<State>) -> HttpResponse {
    match memory_config(&state).await {
        Ok(memory) => HttpResponse::Ok().json(config_json(&memory)),
        Err(r) => r,
    }
}

/// `GET /api/memory/status`: `{config, data, pending}` (`pending`: the user's updates
/// waiting in the queue).
pub(super) async fn get_status(
    state: web::Data<State>,
    req: actix_web::HttpRequest,
    scope: web::Query<Scope>,
) -> HttpResponse {
    let (user, agent) = match owner(&req, &scope) {
        Ok(o) => o,
        Err(r) => return refuse(r),
    };
    let memory = match memory_config(&state).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let doc = match read(&state, &user, &agent).await {
        Ok(doc) => doc,
        Err(r) => return r,
    };
    let u = user.clone();
    let pending = state
        .runs
        .env
        .store
        .call(move |store| store.memory_pending(&u))
        .await
        .unwrap_or(0);
    let mut out = Map::new();
    out.insert("config".into(), config_json(&memory));
    out.insert("data".into(), doc.to_json());
    out.insert("pending".into(), json!(pending));
    HttpResponse::Ok().json(Value::Object(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_import_is_checked_as_an_update_is() {
        let body = json!({
            "user": {"workContext": {"summary": "Rust at Acme", "updatedAt": "2026-01-01T00:00:00Z"}},
            "facts": [
                {"content": "Likes tea", "category": "preference", "confidence": 0.8},
                {"id": "fact_keep", "content": " likes  TEA ", "confidence": 0.9},
                {"id": "../x", "content": "Writes Rust", "category": "hobby", "confidence": 1.0}
            ]
        });
        let doc = imported_doc(body.to_string().as_bytes(), "alice", "__default__", 100).unwrap();
        assert_eq!(doc.section("user", "workContext").summary, "Rust at Acme");
        assert_eq!(doc.facts.len(), 2);
        assert!(doc.facts[0].id.starts_with("fact_"));
        assert_eq!(doc.facts[1].category, "other");
        assert_ne!(doc.facts[1].id, "../x");
        let bad = json!({"facts": [{"content": "x", "confidence": 2}]});
        assert!(imported_doc(bad.to_string().as_bytes(), "a", "b", 100)
            .unwrap_err()
            .contains("Invalid confidence"));
    }

    #[test]
    fn the_config_hides_the_models_key() {
        let memory = MemoryConfig::from_config(Some(&json!({
            "backend_config": {"model": {"model": "m", "api_key": "sk-secret"}}
        })))
        .unwrap();
        let shown = config_json(&memory).to_string();
        assert!(
            !shown.contains("sk-secret") && shown.contains(REDACTED),
            "{shown}"
        );
    }
}
