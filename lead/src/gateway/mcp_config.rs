//! The MCP config routes: `GET`/`PUT /api/mcp/config` over the servers of
//! `extensions_config.json` (secrets redacted; stdio servers only from the file unless
//! allowed), a `PUT` validated with mcp-host's loader, written atomically (temporary file,
//! fsync, rename) and applied by asking every mcp-host replica to reload.

use std::io::Write;
use std::path::Path;

use actix::Addr;
use actix_web::{web, HttpResponse};
use antler_protocol::{
    config::{self, WarningKind},
    Role,
};
use serde_json::{json, Value};

use super::{body, error, secrets, State, MAX_CONFIG_BODY, RELOAD_TIMEOUT};
use crate::cluster::supervisor::{GetLinks, Supervisor};
use antler_protocol::calls::{LinkError, Linked, McpCalls};

/// The file as JSON (`{}` when it does not exist yet).
pub(super) fn read_file(path: &Path) -> Result<Value, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            format!(
                "Extensions config file at {} is not valid JSON: {e}",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({})),
        Err(e) => Err(format!("{}: cannot read the file: {e}", path.display())),
    }
}

/// `GET /api/mcp/config`: `{"mcp_servers": {...}}` as written in the file (`$VAR`s
/// unresolved), every secret value shown as `[redacted]`.
pub(super) async fn get_config(state: web::Data<State>) -> HttpResponse {
    match read_file(&state.extensions) {
        Ok(v) => {
            let servers = v.get("mcpServers").cloned().unwrap_or(json!({}));
            HttpResponse::Ok().json(json!({"mcp_servers": secrets::redacted(&servers)}))
        }
        Err(e) => error(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `PUT /api/mcp/config` with `{"mcp_servers": {...}}`: replaces `mcpServers`, keeps the
/// file's other keys, validates, writes atomically, and has mcp-host apply it.
pub(super) async fn put_config(state: web::Data<State>, payload: web::Payload) -> HttpResponse {
    use actix_web::http::StatusCode;
    let body = match body::read_body(payload, MAX_CONFIG_BODY).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not valid JSON: {e}"),
            )
        }
    };
    let Some(mut servers) = body.get("mcp_servers").filter(|v| v.is_object()).cloned() else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be an object with an `mcp_servers` object",
        );
    };
    let mut file = match read_file(&state.extensions) {
        Ok(Value::Object(m)) => m,
        Ok(_) => serde_json::Map::new(),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let stored = file
        .get("mcpServers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Err(e) = secrets::restore(&mut servers, &stored) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, e);
    }
    file.insert("mcpServers".into(), servers.clone());
    let text = match serde_json::to_string_pretty(&Value::Object(file)) {
        Ok(t) => t + "\n",
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match config::parse_extensions_config(&state.extensions, &text, &config::process_env) {
        Ok(loaded) => {
            let invalid: Vec<String> = loaded
                .warnings
                .iter()
                .filter(|w| w.kind == WarningKind::ServerSkipped)
                .map(|w| w.message.clone())
                .collect();
            if !invalid.is_empty() {
                return HttpResponse::UnprocessableEntity()
                    .json(json!({"detail": invalid.join("; "), "errors": invalid}));
            }
        }
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    }
    if !state.settings.allow_stdio_mcp {
        let changed = stdio_changes(&servers, &stored);
        if !changed.is_empty() {
            return error(
                StatusCode::FORBIDDEN,
                format!("{STDIO_REFUSED} ({})", changed.join(", ")),
            );
        }
    }
    if let Err(e) = write_atomically(&state.extensions, text.as_bytes()) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}: cannot write: {e}", state.extensions.display()),
        );
    }
    let applied = reload_mcp_host(&state.supervisor).await;
    let servers = secrets::redacted(&servers);
    match applied {
        Ok(summary) => HttpResponse::Ok().json(json!({"mcp_servers": servers, "applied": summary})),
        // Written; mcp-host's watcher applies it when it is back.
        Err(e) => {
            HttpResponse::Ok().json(json!({"mcp_servers": servers, "applied": null, "warning": e}))
        }
    }
}

/// Why a `PUT /api/mcp/config` that adds or changes a stdio server is refused.
pub const STDIO_REFUSED: &str = "stdio MCP servers run a command on the host as the operator's user: they are added and changed only in the extensions file (or set antler.gateway.allow_stdio_mcp: true)";

/// The keys of a server entry that say what command runs.
pub(super) const STDIO_KEYS: &[&str] = &["type", "transport", "command", "args", "env", "cwd"];

/// The names of the stdio servers of `servers` that are new or whose command differs
/// from `stored`'s entry.
pub(super) fn stdio_changes(
    servers: &Value,
    stored: &serde_json::Map<String, Value>,
) -> Vec<String> {
    let is_stdio = |entry: &Value| {
        let transport = entry
            .get("type")
            .or_else(|| entry.get("transport"))
            .and_then(Value::as_str)
            .unwrap_or("stdio");
        transport.eq_ignore_ascii_case("stdio") || entry.get("command").is_some()
    };
    let command = |entry: Option<&Value>| -> Vec<Option<Value>> {
        STDIO_KEYS
            .iter()
            .map(|k| entry.and_then(|e| e.get(*k)).cloned())
            .collect()
    };
    servers
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(name, entry)| {
            is_stdio(entry)
                && (stored.get(*name).is_none_or(|old| !is_stdio(old))
                    || command(Some(entry)) != command(stored.get(*name)))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, and renames it over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Reloads every mcp-host replica; the first one's summary (they read the same file),
/// or the first failure.
pub(super) async fn reload_mcp_host(supervisor: &Addr<Supervisor>) -> Result<Value, String> {
    let replies = host_calls(supervisor, Role::McpHost, async |host| {
        host.reload(RELOAD_TIMEOUT).await
    })
    .await?;
    let mut first = None;
    for (address, reply) in replies {
        match reply {
            Err(e) => return Err(format!("{address}: {e}")),
            Ok(r) => {
                first.get_or_insert(r);
            }
        }
    }
    let s = first.ok_or_else(|| "no mcp-host in this cluster".to_owned())?;
    Ok(json!({
        "started": s.started,
        "stopped": s.stopped,
        "restarted": s.restarted,
        "unchanged": s.unchanged,
        "error": s.error,
    }))
}

/// One request to every replica of `role` (one in a local cluster) through the
/// supervisor's links, at once (`call` makes it, a typed call): each replica's address
/// and answer.
pub(super) async fn host_calls<T>(
    supervisor: &Addr<Supervisor>,
    role: Role,
    call: impl AsyncFn(&Linked<'_>) -> Result<T, LinkError>,
) -> Result<Vec<(String, Result<T, String>)>, String> {
    let mut links = supervisor.send(GetLinks).await.map_err(|e| e.to_string())?;
    links.retain(|(r, ..)| *r == role);
    links.sort_by_key(|(_, i, ..)| *i);
    if links.is_empty() {
        return Err(format!("no {} in this cluster", role.as_str()));
    }
    let call = &call;
    let calls = links.into_iter().map(|(_, _, address, link)| async move {
        let reply = call(&Linked::new(&link)).await.map_err(|e| e.to_string());
        (address, reply)
    });
    Ok(futures::future::join_all(calls).await)
}
