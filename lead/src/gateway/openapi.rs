//! The gateway's OpenAPI 3.1 document, served at `GET /api/openapi.json` (a member's route:
//! the API's shape is no secret from someone who may call it, and says nothing to anyone
//! else). It is built with utoipa from the code: every route of [`ROUTES`] with its method,
//! path parameters and security (from its [`Access`]), each request body's schema derived
//! (`ToSchema`) from the struct its handler deserializes, and every error in the gateway's
//! one shape, `{"detail": string}`, under the statuses the guard and the handler can answer.
//! A route added to [`ROUTES`] without a description here is missing from the document, and
//! the unit test comparing the two fails.

use std::sync::OnceLock;

use actix_web::HttpResponse;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, Content, InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, Ref, RefOr,
    Required, Response, ResponseBuilder,
};
use utoipa::{IntoParams, ToSchema};

use super::routes::{Access, RouteSpec, ROUTES};
use super::{
    approvals, compact, goal, langgraph_branches, langgraph_regenerate, langgraph_runs,
    langgraph_threads, memory, runs_api, suggestions,
};

/// Where the document is served.
pub const OPENAPI_PATH: &str = "/api/openapi.json";
/// The name of the bearer security scheme.
const BEARER: &str = "bearer";
/// The error body's schema name.
const ERROR: &str = "Error";
/// The thread ids the thread routes take (`langgraph::check_thread_id`).
const THREAD_ID_PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";
/// A LangGraph thread's schema name.
const THREAD: &str = "Thread";

/// `GET /api/openapi.json`: the document, built once.
pub(super) async fn serve() -> HttpResponse {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    let body = DOCUMENT.get_or_init(|| document_json().to_string());
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body.clone())
}

/// What a route takes as its body.
enum Body {
    None,
    /// JSON of a derived schema (by its component name).
    Typed(String),
    /// Any JSON value: the handler reads it as free JSON.
    Free,
    /// `multipart/form-data`: the upload's files.
    Multipart,
    /// `application/x-www-form-urlencoded` (the OAuth confirmation's page).
    Form,
}

/// What a route answers on success.
enum Reply {
    /// JSON of a schema.
    Json(Box<RefOr<Schema>>),
    /// Any JSON value (built by the handler, untyped).
    Free,
    /// Server-sent events.
    Sse,
    /// A text body of this content type.
    Text(&'static str),
    /// A file's bytes.
    Bytes,
    /// No body.
    Empty,
}

/// One route's description.
struct Op {
    summary: &'static str,
    body: Body,
    /// The success status and body.
    ok: (u16, Reply),
    /// Other successes (a `202`, a `204`).
    also: Vec<(u16, &'static str, Reply)>,
    /// The error statuses of the handler (the guard's are added from the route's access).
    errors: &'static [u16],
    query: Vec<utoipa::openapi::path::Parameter>,
}

fn op(summary: &'static str, body: Body, ok: Reply, errors: &'static [u16]) -> Op {
    Op {
        summary,
        body,
        ok: (200, ok),
        also: Vec::new(),
        errors,
        query: Vec::new(),
    }
}

impl Op {
    fn status(mut self, status: u16) -> Op {
        self.ok.0 = status;
        self
    }
    fn also(mut self, status: u16, description: &'static str, reply: Reply) -> Op {
        self.also.push((status, description, reply));
        self
    }
    fn query(mut self, query: Vec<utoipa::openapi::path::Parameter>) -> Op {
        self.query.extend(query);
        self
    }
}

/// A success of JSON of `schema`.
fn json(schema: RefOr<Schema>) -> Reply {
    Reply::Json(Box::new(schema))
}

fn typed<T: ToSchema>() -> Body {
    Body::Typed(T::name().into_owned())
}

fn reference(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

fn any() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .build(),
    ))
}

fn object(fields: &[(&str, Type)]) -> RefOr<Schema> {
    let mut o = ObjectBuilder::new().schema_type(Type::Object);
    for (name, ty) in fields {
        o = o
            .property(*name, ObjectBuilder::new().schema_type(ty.clone()))
            .required(*name);
    }
    RefOr::T(Schema::Object(o.build()))
}

/// `{run_id, status}`: a run submitted, answered or cancelled.
fn run_status() -> RefOr<Schema> {
    object(&[("run_id", Type::String), ("status", Type::String)])
}

fn array_of(item: RefOr<Schema>) -> RefOr<Schema> {
    RefOr::T(Schema::Array(ArrayBuilder::new().items(item).build()))
}

fn int_query(
    name: &str,
    description: &str,
    min: i64,
    max: i64,
) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(min as f64))
                .maximum(Some(max as f64)),
        ))
        .build()
}

/// A page's query: `limit` (50, at most `max`), `before_seq`, `after_seq`.
fn cursor(max: i64) -> Vec<utoipa::openapi::path::Parameter> {
    vec![
        int_query("limit", "how many (50)", 1, max),
        int_query(
            "before_seq",
            "the ones before this sequence number",
            1,
            i64::MAX,
        ),
        int_query(
            "after_seq",
            "the ones after this sequence number",
            1,
            i64::MAX,
        ),
    ]
}

fn string_query(name: &str, description: &str) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// The description of the route `method path`, `None` for a route not described.
fn describe(method: &str, path: &str) -> Option<Op> {
    use Body::{Free as FreeBody, Multipart, None as NoBody};
    use Reply::{Bytes, Empty, Free, Sse, Text};
    let cancel = || langgraph_runs::CancelQuery::into_params(|| Some(ParameterIn::Query));
    let scope = || memory::Scope::into_params(|| Some(ParameterIn::Query));
    let thread = || json(reference(THREAD));
    // `{goal}`: the active goal, or null.
    let goal = || {
        json(RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property("goal", any())
                .required("goal")
                .build(),
        )))
    };
    let d = match (method, path) {
        ("GET", "/health") => op(
            "Liveness",
            NoBody,
            json(object(&[("status", Type::String)])),
            &[],
        ),
        ("GET", "/ready") => op(
            "Readiness: 200 once runs can be prepared, 503 with what it waits for",
            NoBody,
            json(object(&[("status", Type::String)])),
            &[],
        )
        .also(
            503,
            "starting: `waiting_for` lists what is not ready yet",
            json(object(&[("status", Type::String), ("waiting_for", Type::Array)])),
        ),
        ("GET", OPENAPI_PATH) => op(
            "This document (OpenAPI 3.1)",
            NoBody,
            Free,
            &[],
        ),
        ("GET", "/api/mcp/config") => op(
            "The MCP servers of extensions_config.json (secrets redacted)",
            NoBody,
            Free,
            &[500],
        ),
        ("PUT", "/api/mcp/config") => op(
            "Replaces the MCP config (validated, written atomically, applied at once)",
            FreeBody,
            Free,
            &[400, 403, 408, 413, 422, 500],
        ),
        ("GET", "/api/mcp/oauth/callback") => op(
            "The OAuth authorization server's redirect back (an HTML page)",
            NoBody,
            Text("text/html"),
            &[],
        )
        .also(400, "the login cannot complete (an HTML page)", Text("text/html"))
        .also(403, "another browser's login (an HTML page)", Text("text/html"))
        .query(vec![
            string_query("state", "the login's single-use state"),
            string_query("error", "the authorization server's error"),
            string_query("code", "the authorization code"),
        ]),
        ("POST", "/api/mcp/oauth/confirm") => op(
            "Completes a login the callback's page confirms (an HTML page)",
            Body::Form,
            Text("text/html"),
            &[],
        )
        .also(400, "the login cannot complete (an HTML page)", Text("text/html"))
        .also(403, "another browser's login (an HTML page)", Text("text/html")),
        ("POST", "/api/mcp/{server}/oauth/start") => op(
            "Starts the caller's OAuth login to an MCP server",
            NoBody,
            json(object(&[
                ("authorization_url", Type::String),
                ("expires_in_s", Type::Integer),
            ])),
            &[400, 502, 503],
        ),
        ("POST", "/api/runs") => op(
            "Submits a run",
            typed::<runs_api::SubmitBody>(),
            json(run_status()),
            &[400, 403, 404, 408, 409, 413, 422, 429, 503],
        )
        .status(201),
        ("POST", "/api/runs/stream") => op(
            "A stateless run, streamed (server-sent events)",
            typed::<langgraph_runs::RunBody>(),
            Sse,
            &[400, 404, 408, 409, 413, 422, 429, 503],
        ),
        ("POST", "/api/runs/wait") => op(
            "A stateless run, waited for: its final values",
            typed::<langgraph_runs::RunBody>(),
            Free,
            &[400, 404, 408, 409, 413, 422, 429, 503],
        ),
        ("POST", "/api/threads") => op(
            "Creates a thread",
            typed::<langgraph_threads::CreateBody>(),
            thread(),
            &[408, 409, 413, 422, 503],
        ),
        ("POST", "/api/threads/search") => op(
            "Searches the caller's threads",
            typed::<langgraph_threads::SearchBody>(),
            json(array_of(reference(THREAD))),
            &[408, 413, 422, 503],
        ),
        ("GET", "/api/threads/{tid}") => op("A thread", NoBody, thread(), &[404, 422, 503]),
        ("PATCH", "/api/threads/{tid}") => op(
            "Merges metadata into a thread",
            typed::<langgraph_threads::PatchBody>(),
            thread(),
            &[404, 408, 413, 422, 503],
        ),
        ("DELETE", "/api/threads/{tid}") => op(
            "Deletes a thread (409 while a run of it is in flight)",
            NoBody,
            Empty,
            &[404, 409, 422, 500, 503],
        )
        .status(204),
        ("GET", "/api/threads/{tid}/state") => op(
            "A thread's latest state (LangGraph's ThreadState)",
            NoBody,
            Free,
            &[404, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/state") => op(
            "Writes a thread's state values",
            typed::<langgraph_threads::StateBody>(),
            Free,
            &[404, 408, 409, 413, 422, 503],
        ),
        ("GET", "/api/threads/{tid}/artifacts/{path}") => op(
            "A file of the thread's workspace",
            NoBody,
            Bytes,
            &[404, 413, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/compact") => op(
            "Compacts a thread's context",
            typed::<compact::CompactBody>(),
            Free,
            &[404, 408, 409, 413, 422, 500, 503],
        ),
        ("POST", "/api/threads/{tid}/history") => op(
            "A thread's checkpoints, newest first",
            typed::<langgraph_threads::HistoryBody>(),
            json(array_of(any())),
            &[404, 408, 413, 422, 503],
        ),
        ("GET", "/api/threads/{tid}/messages") => op(
            "A thread's messages",
            NoBody,
            Free,
            &[404, 422, 503],
        )
        .query(cursor(200)),
        ("GET", "/api/threads/{tid}/messages/page") => op(
            "A page of a thread's messages",
            NoBody,
            Free,
            &[404, 422, 503],
        )
        .query(cursor(200)),
        ("GET", "/api/threads/{tid}/token-usage") => op(
            "A thread's token usage",
            NoBody,
            Free,
            &[404, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/branches") => op(
            "Branches a new thread off a message",
            typed::<langgraph_branches::BranchBody>(),
            Free,
            &[404, 408, 409, 413, 422, 500, 503],
        ),
        ("GET", "/api/threads/{tid}/goal") => {
            op("A thread's goal", NoBody, goal(), &[404, 422, 503])
        }
        ("PUT", "/api/threads/{tid}/goal") => op(
            "Sets a thread's goal",
            typed::<goal::GoalBody>(),
            goal(),
            &[404, 408, 409, 413, 422, 503],
        ),
        ("DELETE", "/api/threads/{tid}/goal") => op(
            "Clears a thread's goal",
            NoBody,
            goal(),
            &[404, 409, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/runs/regenerate/prepare") => op(
            "Prepares regenerating an answer",
            typed::<langgraph_regenerate::RegenerateBody>(),
            Free,
            &[404, 408, 409, 413, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/runs/edit-regenerate/prepare") => op(
            "Prepares regenerating from an edited message",
            typed::<langgraph_regenerate::EditBody>(),
            Free,
            &[404, 408, 409, 413, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/runs") => op(
            "Starts a run on a thread",
            typed::<langgraph_runs::RunBody>(),
            Free,
            &[400, 404, 408, 409, 413, 422, 429, 503],
        ),
        ("GET", "/api/threads/{tid}/runs") => op(
            "A thread's runs",
            NoBody,
            json(array_of(any())),
            &[404, 422, 503],
        )
        .query(vec![
            string_query("limit", "how many runs (10, at most 1,000)"),
            string_query("offset", "how many to skip"),
        ]),
        ("POST", "/api/threads/{tid}/runs/stream") => op(
            "Starts a run on a thread, streamed (server-sent events)",
            typed::<langgraph_runs::RunBody>(),
            Sse,
            &[400, 404, 408, 409, 413, 422, 429, 503],
        ),
        ("POST", "/api/threads/{tid}/runs/wait") => op(
            "Starts a run on a thread and waits: its final values",
            typed::<langgraph_runs::RunBody>(),
            Free,
            &[400, 404, 408, 409, 413, 422, 429, 503],
        ),
        ("GET", "/api/threads/{tid}/runs/{rid}") => {
            op("A run of a thread", NoBody, Free, &[404, 422, 503])
        }
        ("GET", "/api/threads/{tid}/runs/{rid}/messages") => op(
            "A run's messages",
            NoBody,
            Free,
            &[404, 422, 503],
        )
        .query(cursor(200)),
        ("GET", "/api/threads/{tid}/runs/{rid}/events") => op(
            "A run's events",
            NoBody,
            Free,
            &[404, 422, 503],
        )
        .query(vec![
            int_query("limit", "how many events (500)", 1, 2000),
            int_query("after_seq", "the events after this one", 1, i64::MAX),
            string_query("event_types", "only these types, comma-separated"),
            string_query("task_id", "only this subagent task's"),
        ]),
        ("GET", "/api/threads/{tid}/runs/{rid}/workspace-changes") => op(
            "The workspace changes a run made",
            NoBody,
            Free,
            &[404, 422, 503],
        ),
        ("POST", "/api/threads/{tid}/runs/{rid}/cancel") => op(
            "Cancels a run: 202, or 204 with `wait` once it stopped",
            NoBody,
            Empty,
            &[400, 404, 409, 422, 503],
        )
        .status(202)
        .also(204, "the run stopped (`wait`)", Empty)
        .query(cancel()),
        ("GET", "/api/threads/{tid}/runs/{rid}/join") => op(
            "Waits for a run to end: the thread's values",
            NoBody,
            Free,
            &[404, 422, 503],
        ),
        ("GET", "/api/threads/{tid}/runs/{rid}/stream")
        | ("POST", "/api/threads/{tid}/runs/{rid}/stream") => op(
            "Joins a run's stream (server-sent events)",
            NoBody,
            Sse,
            &[400, 404, 409, 422, 503],
        )
        .query(cancel()),
        ("GET", "/api/assistants/{aid}") => op("An assistant", NoBody, Free, &[404]),
        ("POST", "/api/assistants/search") => op(
            "The assistants",
            FreeBody,
            json(array_of(any())),
            &[],
        ),
        ("GET", "/api/runs") => op(
            "The caller's runs (the operator's: every run)",
            NoBody,
            Free,
            &[400, 503],
        )
        .query(vec![
            string_query("limit", "how many runs"),
            string_query("status", "only runs with this status"),
            string_query("user", "the operator's: one user's runs"),
        ]),
        ("GET", "/api/runs/{id}") => op("A run", NoBody, Free, &[404, 503]),
        ("GET", "/api/runs/{id}/events") => op(
            "A run's events (server-sent events)",
            NoBody,
            Sse,
            &[404, 503],
        ),
        ("POST", "/api/runs/{id}/answer") => op(
            "Answers a run's clarification question",
            FreeBody,
            json(run_status()),
            &[400, 404, 408, 409, 413, 503],
        )
        .status(202),
        ("POST", "/api/runs/{id}/cancel") => op(
            "Cancels a run",
            NoBody,
            json(run_status()),
            &[404, 409, 503],
        )
        .status(202),
        ("POST", "/api/runs/{id}/elicitations/{eid}") => op(
            "Answers an MCP elicitation of a run",
            FreeBody,
            Free,
            &[400, 404, 408, 413, 502, 503],
        ),
        ("POST", "/api/runs/{id}/approvals/{call}") => op(
            "Answers a tool call a run waits on for approval",
            typed::<approvals::ApprovalBody>(),
            Free,
            &[400, 404, 409, 413, 500, 503],
        ),
        ("GET", "/api/runs/{id}/artifact") => op(
            "A file a run wrote",
            NoBody,
            Bytes,
            &[400, 403, 404, 413, 503],
        )
        .query(vec![string_query("path", "the file's path in the workspace")]),
        ("GET", "/api/runs/{id}/messages") => op("A run's messages", NoBody, Free, &[404, 503]),
        ("GET", "/api/runs/{id}/catalog") => {
            op("A run's catalog", NoBody, Free, &[404, 503])
        }
        ("POST", "/api/threads/{tid}/uploads") => op(
            "Uploads files to a thread",
            Multipart,
            Free,
            &[400, 404, 408, 413, 422, 500, 503],
        ),
        ("GET", "/api/threads/{tid}/uploads/limits") => op(
            "A thread's upload limits",
            NoBody,
            Free,
            &[400, 404, 422, 503],
        ),
        ("GET", "/api/threads/{tid}/uploads/list") => op(
            "A thread's uploads",
            NoBody,
            Free,
            &[400, 404, 422, 503],
        ),
        ("DELETE", "/api/threads/{tid}/uploads/{filename}") => op(
            "Deletes an upload",
            NoBody,
            Free,
            &[400, 404, 422, 500, 503],
        ),
        ("GET", "/api/memory") | ("POST", "/api/memory/reload") | ("GET", "/api/memory/export") => {
            op("The caller's memory", NoBody, Free, &[400, 403, 503]).query(scope())
        }
        ("DELETE", "/api/memory") => {
            op("Clears the caller's memory", NoBody, Free, &[400, 403, 409, 500, 503])
                .query(scope())
        }
        ("GET", "/api/memory/facts") => {
            op("The memory's facts", NoBody, Free, &[400, 403, 503]).query(scope())
        }
        ("POST", "/api/memory/facts") => op(
            "Adds a fact",
            typed::<memory::FactBody>(),
            Free,
            &[400, 403, 408, 409, 413, 422, 500, 503],
        )
        .query(scope()),
        ("PATCH", "/api/memory/facts/{id}") => op(
            "Edits a fact",
            typed::<memory::FactBody>(),
            Free,
            &[400, 403, 404, 408, 409, 413, 422, 500, 503],
        )
        .query(scope()),
        ("DELETE", "/api/memory/facts/{id}") => op(
            "Deletes a fact",
            NoBody,
            Free,
            &[400, 403, 404, 409, 500, 503],
        )
        .query(scope()),
        ("POST", "/api/memory/import") => op(
            "Replaces the memory with an exported one",
            FreeBody,
            Free,
            &[400, 403, 408, 409, 413, 422, 500, 503],
        )
        .query(scope()),
        ("GET", "/api/memory/config") => op("The memory's settings", NoBody, Free, &[503]),
        ("GET", "/api/memory/status") => {
            op("The memory's settings and contents", NoBody, Free, &[400, 403, 503])
                .query(scope())
        }
        ("GET", "/api/suggestions/config") => {
            op(
                "Whether suggestions are on",
                NoBody,
                json(object(&[
                    ("enabled", Type::Boolean),
                    ("max_suggestions", Type::Integer),
                ])),
                &[503],
            )
        }
        ("POST", "/api/threads/{id}/suggestions") => op(
            "Follow-up questions for a conversation",
            typed::<suggestions::SuggestionsBody>(),
            json(object(&[("suggestions", Type::Array)])),
            &[400, 404, 408, 413, 422, 503],
        ),
        ("POST", "/api/input-polish") => op(
            "Polishes a prompt",
            typed::<suggestions::PolishBody>(),
            json(object(&[
                ("rewritten_text", Type::String),
                ("changed", Type::Boolean),
            ])),
            &[400, 404, 408, 413, 422, 503],
        ),
        ("GET", "/api/whoami") => op(
            "The principal the token acts as",
            NoBody,
            json(object(&[
                ("user", Type::String),
                ("role", Type::String),
                ("operator", Type::Boolean),
            ])),
            &[],
        ),
        ("GET", "/api/cluster") => op("The cluster's hosts and replicas", NoBody, Free, &[503]),
        // Its parameters, body and responses are `openapi_mcp`'s (`document_json`).
        ("POST", "/mcp") | ("GET", "/mcp") | ("DELETE", "/mcp") => op(
            "Antler's MCP server (streamable HTTP: JSON-RPC, answered as JSON or server-sent events)",
            FreeBody,
            Free,
            &[],
        ),
        ("GET", "/.well-known/oauth-protected-resource")
        | ("GET", "/.well-known/oauth-protected-resource/mcp") => op(
            "The MCP resource's protected resource metadata (RFC 9728)",
            NoBody,
            Free,
            &[],
        ),
        ("GET", "/metrics") => op(
            "Prometheus metrics",
            NoBody,
            Text("text/plain; version=0.0.4"),
            &[],
        ),
        ("GET", "/") => op("The run inspector's page", NoBody, Text("text/html"), &[]),
        ("GET", "/ui/{asset}") => {
            op("An asset of the run inspector", NoBody, Bytes, &[]).also(404, "no such asset", Empty)
        }
        ("GET", "/favicon.ico") => op("No icon", NoBody, Empty, &[]).status(204),
        _ => return None,
    };
    Some(d)
}

/// The OpenAPI path of a router pattern: `{path:.*}` is `{path}`.
pub(super) fn openapi_path(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let inner = &rest[open + 1..open + close];
        let name = inner.split(':').next().unwrap_or(inner);
        out.push('{');
        out.push_str(name);
        out.push('}');
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// The path parameters of an OpenAPI path.
fn path_parameters(path: &str) -> Vec<String> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

fn method_of(method: &str) -> Option<HttpMethod> {
    Some(match method {
        "GET" => HttpMethod::Get,
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "PATCH" => HttpMethod::Patch,
        "DELETE" => HttpMethod::Delete,
        _ => return None,
    })
}

/// What an error status means, for its response's description.
fn meaning(status: u16) -> &'static str {
    match status {
        400 => "bad request",
        401 => "missing or wrong bearer token",
        403 => "refused: the Host, a cross-origin request, or the operator's route",
        404 => "not found (another user's is the same as a missing one)",
        406 => "not acceptable",
        408 => "the body did not arrive in time",
        409 => "conflict with the resource's state",
        413 => "too large",
        415 => "the body must be JSON",
        422 => "invalid input",
        429 => "the caller is over its own limit (Retry-After)",
        500 => "internal error",
        502 => "a peer answered unexpectedly",
        503 => "unavailable: the store or a host, or the gateway is full (Retry-After)",
        _ => "error",
    }
}

/// The response of a success (or of a status that is not an error's shape).
fn reply_response(description: &str, reply: Reply) -> Response {
    let text = || Content::new(Some(ObjectBuilder::new().schema_type(Type::String)));
    match reply {
        Reply::Json(schema) => respond(description, "application/json", json_content(*schema)),
        Reply::Free => respond(description, "application/json", json_content(any())),
        Reply::Sse => respond(description, "text/event-stream", text()),
        Reply::Text(content_type) => respond(description, content_type, text()),
        Reply::Bytes => Response::new(format!("{description}: a body of its own content type")),
        Reply::Empty => Response::new(format!("{description}: no body")),
    }
}

/// A response of `description` whose body is `content_type`.
fn respond(description: &str, content_type: &str, content: Content) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(content_type, content)
        .build()
}

fn json_content(schema: RefOr<Schema>) -> Content {
    Content::new(Some(schema))
}

/// The operation of one route.
fn operation(route: &RouteSpec, d: Op) -> utoipa::openapi::path::Operation {
    let path = openapi_path(route.path);
    let mut o = OperationBuilder::new()
        .summary(Some(d.summary))
        .operation_id(Some(format!(
            "{} {}",
            route.method.to_ascii_lowercase(),
            path
        )));
    for name in path_parameters(&path) {
        let mut schema = ObjectBuilder::new().schema_type(Type::String);
        // A thread id DeerFlow accepts (`check_thread_id`); any other is 422.
        if name == "tid" {
            schema = schema.pattern(Some(THREAD_ID_PATTERN));
        }
        o = o.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(schema)),
        );
    }
    for q in d.query {
        o = o.parameter(q);
    }
    let has_body = !matches!(d.body, Body::None);
    let body = match d.body {
        Body::None => None,
        Body::Typed(name) => Some(("application/json", json_content(reference(&name)))),
        Body::Free => Some(("application/json", json_content(any()))),
        Body::Multipart => Some((
            "multipart/form-data",
            json_content(RefOr::T(Schema::Object(
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .property(
                        "files",
                        ArrayBuilder::new().items(
                            ObjectBuilder::new()
                                .schema_type(Type::String)
                                .content_media_type("application/octet-stream"),
                        ),
                    )
                    .build(),
            ))),
        )),
        Body::Form => Some((
            "application/x-www-form-urlencoded",
            json_content(object(&[("nonce", Type::String), ("cookie", Type::String)])),
        )),
    };
    if let Some((content_type, content)) = body {
        o = o.request_body(Some(
            RequestBodyBuilder::new()
                .content(content_type, content)
                .required(Some(Required::False))
                .build(),
        ));
    }
    // By status; an error whose status also answers another shape (the OAuth pages' 403
    // from the handler, as HTML, beside the guard's JSON) has both.
    let mut responses: std::collections::BTreeMap<String, Response> =
        std::collections::BTreeMap::new();
    let (status, reply) = d.ok;
    responses.insert(status.to_string(), reply_response("OK", reply));
    for (status, description, reply) in d.also {
        responses.insert(status.to_string(), reply_response(description, reply));
    }
    let mut errors: Vec<u16> = d.errors.to_vec();
    let guarded = !matches!(route.access, Access::Open);
    match route.access {
        Access::Open => {}
        Access::Callback | Access::Confirm | Access::Page => errors.push(403),
        Access::Metrics | Access::Member | Access::Upload | Access::Operator => {
            errors.extend([401, 403]);
        }
    }
    if guarded && has_body {
        errors.push(415);
    }
    errors.sort_unstable();
    errors.dedup();
    for status in errors {
        let error = json_content(reference(ERROR));
        match responses.get_mut(&status.to_string()) {
            Some(response) => {
                response
                    .content
                    .insert("application/json".to_owned(), error);
            }
            None => {
                responses.insert(
                    status.to_string(),
                    respond(meaning(status), "application/json", error),
                );
            }
        }
    }
    for (status, response) in responses {
        o = o.response(status, response);
    }
    if let Some(requirement) = security(route.access) {
        o = o.security(requirement);
    }
    o.build()
}

/// The security requirement of a route's access (`None`: public).
fn security(access: Access) -> Option<SecurityRequirement> {
    match access {
        Access::Open | Access::Callback | Access::Confirm | Access::Page => None,
        Access::Metrics | Access::Member | Access::Upload | Access::Operator => {
            Some(SecurityRequirement::new(BEARER, Vec::<String>::new()))
        }
    }
}

/// The gateway's OpenAPI document as served: [`document`] with `/mcp` described by
/// `openapi_mcp` (its schemas need JSON Schema keywords utoipa does not build).
pub fn document_json() -> serde_json::Value {
    let mut document = serde_json::to_value(document()).unwrap_or_default();
    super::openapi_mcp::describe(&mut document, super::mcp_endpoint::MCP_PATH);
    document
}

/// The gateway's OpenAPI document, every route but `/mcp`'s details.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new().build();
    for route in ROUTES {
        let (Some(d), Some(method)) = (
            describe(route.method, &openapi_path(route.path)),
            method_of(route.method),
        ) else {
            continue;
        };
        paths.add_path_operation(openapi_path(route.path), vec![method], operation(route, d));
    }
    let error = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("Every error the gateway answers"))
        .property("detail", ObjectBuilder::new().schema_type(Type::String))
        .required("detail")
        .build();
    let thread = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some("A LangGraph thread"))
        .property("thread_id", ObjectBuilder::new().schema_type(Type::String))
        .property("created_at", ObjectBuilder::new().schema_type(Type::String))
        .property("updated_at", ObjectBuilder::new().schema_type(Type::String))
        .property("metadata", ObjectBuilder::new().schema_type(Type::Object))
        .property("status", ObjectBuilder::new().schema_type(Type::String))
        .property("values", any())
        .property("interrupts", ObjectBuilder::new().schema_type(Type::Object))
        .property("config", ObjectBuilder::new().schema_type(Type::Object))
        .required("thread_id")
        .required("created_at")
        .required("updated_at")
        .required("metadata")
        .required("status")
        .build();
    let components = ComponentsBuilder::new()
        .schema(ERROR, error)
        .schema(THREAD, thread)
        .schema_from::<runs_api::SubmitBody>()
        .schema_from::<runs_api::UploadRef>()
        .schema_from::<langgraph_runs::RunBody>()
        .schema_from::<langgraph_threads::CreateBody>()
        .schema_from::<langgraph_threads::SearchBody>()
        .schema_from::<langgraph_threads::PatchBody>()
        .schema_from::<langgraph_threads::StateBody>()
        .schema_from::<langgraph_threads::HistoryBody>()
        .schema_from::<compact::CompactBody>()
        .schema_from::<approvals::ApprovalBody>()
        .schema_from::<langgraph_branches::BranchBody>()
        .schema_from::<goal::GoalBody>()
        .schema_from::<langgraph_regenerate::RegenerateBody>()
        .schema_from::<langgraph_regenerate::EditBody>()
        .schema_from::<memory::FactBody>()
        .schema_from::<suggestions::SuggestionsBody>()
        .schema_from::<suggestions::SuggestionMessage>()
        .schema_from::<suggestions::PolishBody>()
        .security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The operator's token, a user's static token, or a JWT a configured issuer signed",
                    ))
                    .build(),
            ),
        )
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Antler gateway")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Antler's HTTP API and its LangGraph-compatible routes (docs/gateway-api.md)",
                ))
                .build(),
        )
        .paths(paths)
        .components(Some(components))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_document_describes_every_route_and_nothing_else() {
        let doc = document_json();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut described = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for method in item.as_object().into_iter().flatten().map(|(m, _)| m) {
                if matches!(method.as_str(), "get" | "post" | "put" | "patch" | "delete") {
                    described.insert((method.to_ascii_uppercase(), path.clone()));
                }
            }
        }
        let routed: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.to_owned(), openapi_path(r.path)))
            .collect();
        assert_eq!(described, routed);
    }

    #[test]
    fn every_guarded_route_needs_a_bearer_token_and_public_ones_none() {
        let doc = document_json();
        assert_eq!(
            doc["components"]["securitySchemes"][BEARER]["scheme"],
            "bearer"
        );
        for r in ROUTES {
            let o = &doc["paths"][openapi_path(r.path)][r.method.to_ascii_lowercase()];
            let public = matches!(
                r.access,
                Access::Open | Access::Callback | Access::Confirm | Access::Page
            );
            assert_eq!(o["security"].is_null(), public, "{r:?}");
            if !public {
                assert_eq!(o["security"][0][BEARER], serde_json::json!([]), "{r:?}");
                assert!(o["responses"]["401"].is_object(), "{r:?}");
            }
        }
    }

    #[test]
    fn errors_are_the_detail_shape_and_parameters_match_the_path() {
        let doc = document_json();
        assert_eq!(
            doc["components"]["schemas"][ERROR]["required"],
            serde_json::json!(["detail"])
        );
        for r in ROUTES {
            let path = openapi_path(r.path);
            let o = &doc["paths"][&path][r.method.to_ascii_lowercase()];
            // The handler's errors, and the guard's, are each `{"detail"}`.
            let d = describe(r.method, &path).unwrap_or_else(|| panic!("{r:?}"));
            let guard: &[u16] = match r.access {
                Access::Open => &[],
                Access::Callback | Access::Confirm | Access::Page => &[403],
                _ => &[401, 403],
            };
            for status in d.errors.iter().chain(guard) {
                assert_eq!(
                    o["responses"][status.to_string()]["content"]["application/json"]["schema"]
                        ["$ref"],
                    "#/components/schemas/Error",
                    "{r:?} {status}"
                );
            }
            let named: BTreeSet<String> = o["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect();
            assert_eq!(named, path_parameters(&path).into_iter().collect(), "{r:?}");
        }
        assert_eq!(
            openapi_path("/api/threads/{tid}/artifacts/{path:.*}"),
            "/api/threads/{tid}/artifacts/{path}"
        );
    }

    #[test]
    fn request_bodies_are_the_handlers_structs() {
        let doc = document_json();
        let body = &doc["paths"]["/api/threads/{tid}/goal"]["put"]["requestBody"];
        assert_eq!(
            body["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/GoalBody"
        );
        let goal = &doc["components"]["schemas"]["GoalBody"];
        assert_eq!(goal["required"], serde_json::json!(["objective"]));
        // `deny_unknown_fields` is the schema's closed object.
        assert_eq!(
            doc["components"]["schemas"]["RunBody"]["additionalProperties"],
            false
        );
    }

    #[test]
    fn the_thread_id_pattern_is_the_one_the_routes_check() {
        let pattern = regex::Regex::new(THREAD_ID_PATTERN).unwrap_or_else(|e| panic!("{e}"));
        let long = "a".repeat(65);
        for id in ["t1", "A-b_9", "a/b", "", "é", "a b", &long, &long[1..]] {
            assert_eq!(
                pattern.is_match(id),
                super::super::langgraph::check_thread_id(id).is_ok(),
                "{id}"
            );
        }
    }

    #[test]
    fn the_goal_schema_bounds_are_the_engines() {
        let doc = document_json();
        let goal = &doc["components"]["schemas"]["GoalBody"]["properties"];
        assert_eq!(
            goal["objective"]["maxLength"],
            antler_engine::MAX_GOAL_OBJECTIVE_CHARS
        );
        assert_eq!(
            goal["max_continuations"]["maximum"],
            antler_engine::MAX_GOAL_CONTINUATIONS
        );
    }
}
