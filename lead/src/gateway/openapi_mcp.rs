//! `/mcp` in the gateway's OpenAPI document (`openapi`): what the streamable-HTTP MCP
//! endpoint answers, status by status, as rmcp's service and the gateway's bridge
//! (`mcp_endpoint`) write it. A JSON-RPC message is [`JSON_RPC_MESSAGE`] (a JSON body, or
//! the `data` of each server-sent event, [`MCP_EVENT`], the stream's first event being
//! rmcp's empty priming event); a refusal of the JSON-RPC layer is a [`JSON_RPC_ERROR`],
//! one of the transport's is `text/plain` (the bridge gives rmcp's bare texts that type),
//! one of the gateway's is its `{"detail"}` `Error`; the 401 names the resource metadata in
//! `WWW-Authenticate`. The schemas use JSON Schema keywords utoipa does not build
//! (`const`, `if`/`else`, `contentSchema`), so they are written here as JSON and put into
//! the document's components by [`add_schemas`].

use serde_json::{json, Value};

use super::mcp_endpoint::RESOURCE_METADATA_MCP_PATH;

/// The schema name of one JSON-RPC message (a request, notification, result or error).
pub(super) const JSON_RPC_MESSAGE: &str = "JsonRpcMessage";
/// The schema name of a JSON-RPC error message.
pub(super) const JSON_RPC_ERROR: &str = "JsonRpcError";
/// The schema name of one server-sent event of an MCP stream.
pub(super) const MCP_EVENT: &str = "McpEvent";
/// The MCP revisions a session may name in `Mcp-Protocol-Version` (`AntlerTools` serves the
/// session revisions, up to 2025-11-25).
const SESSION_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The content type of the transport's plain-text refusals (the bridge sets it).
pub(super) const TEXT: &str = "text/plain; charset=utf-8";

/// A JSON-RPC 2.0 message: `jsonrpc` and an `id` (absent for a notification, null in an
/// error about an unreadable request), with a `method`, a `result` or an `error`.
fn json_rpc_message() -> Value {
    json!({
        "type": "object",
        "description": "A JSON-RPC 2.0 message of MCP: a request or notification (method), a result, or an error",
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "method": {"type": "string"},
            "params": {"type": "object"},
            "result": {"type": "object"},
            "error": error_object(),
        },
        "required": ["jsonrpc"],
        "anyOf": [
            {"required": ["method"]},
            {"required": ["id", "result"]},
            {"required": ["error"]},
        ],
    })
}

/// A JSON-RPC error object.
fn error_object() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "integer"},
            "message": {"type": "string"},
            "data": {},
        },
        "required": ["code", "message"],
    })
}

/// A JSON-RPC error message (what rmcp answers a request it refuses with).
fn json_rpc_error() -> Value {
    json!({
        "type": "object",
        "description": "A JSON-RPC 2.0 error: the request was refused by MCP's rules",
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "error": error_object(),
        },
        "required": ["jsonrpc", "error"],
    })
}

/// One event of an MCP event stream: its `data` is a JSON-RPC message, but for the empty
/// priming event that opens a stream (its `id` and `retry` let a client resume it).
fn mcp_event() -> Value {
    json!({
        "type": "object",
        "description": "A server-sent event: its data is one JSON-RPC message (JsonRpcMessage); the stream's first event, with empty data, primes it",
        "properties": {
            "event": {"type": "string"},
            "id": {"type": "string"},
            "retry": {"type": "integer", "minimum": 0},
            "data": {"type": "string"},
        },
        "required": ["data"],
        "if": {"properties": {"data": {"const": ""}}},
        "else": {
            "properties": {
                "data": {
                    "contentMediaType": "application/json",
                    "contentSchema": json_rpc_message(),
                },
            },
        },
    })
}

/// Puts the MCP schemas into the document's `components.schemas`.
pub(super) fn add_schemas(document: &mut Value) {
    let schemas = &mut document["components"]["schemas"];
    schemas[JSON_RPC_MESSAGE] = json_rpc_message();
    schemas[JSON_RPC_ERROR] = json_rpc_error();
    schemas[MCP_EVENT] = mcp_event();
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn text() -> Value {
    json!({"schema": {"type": "string"}})
}

/// The `/mcp` operation's header parameters: the session, its revision, and whom an
/// operator acts for.
pub(super) fn parameters() -> Value {
    json!([
        {
            "name": "Mcp-Session-Id",
            "in": "header",
            "required": false,
            "description": "The session (from the initialize response); another user's is unknown (404)",
            "schema": {"type": "string"},
        },
        {
            "name": "Mcp-Protocol-Version",
            "in": "header",
            "required": false,
            "description": "The MCP revision the session negotiated",
            "schema": {"type": "string", "enum": SESSION_REVISIONS},
        },
        {
            "name": super::mcp_endpoint::ACT_AS_HEADER,
            "in": "header",
            "required": false,
            "description": "The user an operator's session acts for (`antler mcp serve --user`); a member gets 403",
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
        },
    ])
}

/// The request body of `POST /mcp`: one JSON-RPC message.
pub(super) fn request_body() -> Value {
    json!({
        "required": true,
        "content": {"application/json": {
            "schema": schema_ref(JSON_RPC_MESSAGE),
            "example": {
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "client", "version": "1.0"},
                },
            },
        }},
    })
}

/// The `WWW-Authenticate` of the 401: the resource metadata's address (RFC 9728).
fn www_authenticate() -> Value {
    json!({
        "WWW-Authenticate": {
            "required": true,
            "description": "Bearer, naming the protected resource metadata",
            "schema": {
                "type": "string",
                // The scheme's name is case-insensitive (RFC 9110).
                "pattern": format!("^[Bb][Ee][Aa][Rr][Ee][Rr] resource_metadata=\"[^\"]+{RESOURCE_METADATA_MCP_PATH}\"$"),
            },
        },
    })
}

/// The responses of `method /mcp`, by status.
pub(super) fn responses(method: &str) -> Value {
    let error = || json!({"schema": schema_ref("Error")});
    let rpc_error = || json!({"schema": schema_ref(JSON_RPC_ERROR)});
    let stream = || json!({"schema": schema_ref(MCP_EVENT)});
    let mut r = json!({
        "401": {
            "description": "no valid bearer token: WWW-Authenticate names the resource metadata",
            "headers": www_authenticate(),
            "content": {"application/json": error()},
        },
        "403": {
            "description": "refused: the Host, a cross-origin request, or a member naming another user",
            "content": {"application/json": error(), "text/plain": text()},
        },
        "404": {
            "description": "no such session (another user's is the same as a missing one)",
            "content": {"text/plain": text(), "application/json": rpc_error()},
        },
        "500": {
            "description": "the MCP transport's failure",
            "content": {"text/plain": text()},
        },
    });
    match method {
        "POST" => {
            r["200"] = json!({
                "description": "the answer to a request: one JSON-RPC message, or an event stream of the messages about it and then its answer",
                "content": {"application/json": {"schema": schema_ref(JSON_RPC_MESSAGE)}, "text/event-stream": stream()},
            });
            r["202"] = json!({"description": "a notification or a response accepted: no body"});
            r["400"] = json!({
                "description": "bad request: no session for a request other than initialize, a bad header, a message MCP refuses",
                "content": {
                    "application/json": {"schema": {"anyOf": [schema_ref("Error"), schema_ref(JSON_RPC_ERROR)]}},
                    "text/plain": text(),
                },
            });
            r["406"] = json!({
                "description": "the client must accept both application/json and text/event-stream",
                "content": {"text/plain": text()},
            });
            r["408"] = json!({"description": "the body did not arrive in time", "content": {"application/json": error()}});
            r["413"] = json!({
                "description": "the message is too large",
                "content": {"application/json": error(), "text/plain": text()},
            });
            r["415"] = json!({
                "description": "the body is not a JSON-RPC message in JSON",
                "content": {"application/json": error(), "text/plain": text()},
            });
        }
        "GET" => {
            r["200"] = json!({
                "description": "the session's stream of server messages (it stays open)",
                "content": {"text/event-stream": stream()},
            });
            r["400"] = json!({
                "description": "no session named, or a bad header",
                "content": {"text/plain": text(), "application/json": error()},
            });
            r["405"] = json!({"description": "no stream outside a session", "content": {"text/plain": text()}});
            r["406"] = json!({
                "description": "the client must accept text/event-stream",
                "content": {"text/plain": text()},
            });
        }
        _ => {
            r["202"] =
                json!({"description": "the session is closed and its run released: no body"});
            r["400"] = json!({
                "description": "no session named, or a bad header",
                "content": {"text/plain": text(), "application/json": error()},
            });
            r["405"] = json!({"description": "no session to close in a stateless revision", "content": {"text/plain": text()}});
        }
    }
    r
}

/// The document with `/mcp` described by [`parameters`], [`request_body`] and
/// [`responses`], and the schemas they use.
pub(super) fn describe(document: &mut Value, path: &str) {
    add_schemas(document);
    let Some(item) = document["paths"][path].as_object_mut() else {
        return;
    };
    for (method, operation) in item.iter_mut() {
        let method = method.to_ascii_uppercase();
        operation["parameters"] = parameters();
        operation["responses"] = responses(&method);
        if method == "POST" {
            operation["requestBody"] = request_body();
        } else if let Some(o) = operation.as_object_mut() {
            o.remove("requestBody");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_status_has_a_typed_body_or_none() {
        for method in ["POST", "GET", "DELETE"] {
            let r = responses(method);
            for (status, response) in r.as_object().unwrap() {
                let content = &response["content"];
                if ["202"].contains(&status.as_str()) {
                    assert!(content.is_null(), "{method} {status}");
                    continue;
                }
                for (media, entry) in content.as_object().unwrap() {
                    assert!(entry["schema"].is_object(), "{method} {status} {media}");
                }
            }
        }
        assert!(responses("POST")["200"]["content"]["text/event-stream"].is_object());
        assert!(responses("GET")["401"]["headers"]["WWW-Authenticate"]["required"] == true);
    }

    #[test]
    fn the_401_header_pattern_matches_what_the_endpoint_sends() {
        let r = responses("POST");
        let pattern = r["401"]["headers"]["WWW-Authenticate"]["schema"]["pattern"]
            .as_str()
            .unwrap()
            .to_owned();
        let pattern = regex::Regex::new(&pattern).unwrap();
        let sent = format!(
            "Bearer resource_metadata=\"http://127.0.0.1:8001{RESOURCE_METADATA_MCP_PATH}\""
        );
        assert!(pattern.is_match(&sent), "{sent}");
        assert!(!pattern.is_match("Bearer"));
    }
}
