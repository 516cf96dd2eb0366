//! The gateway's route table: every route once, with the [`Access`] it needs. Who may use a
//! route is decided on the route the router matched (a middleware on each resource), never
//! on the request's path string: a percent-encoded, doubled or dotted path either matches a
//! route, and gets that route's check, or matches none, and gets the default service's (a
//! credential, then 404). [`ROUTES`] is public so tests can walk every route × role.

use actix_web::{http::Method, web, Route};

use super::{elicitation, mcp_endpoint, oauth, openapi, ui, uploads};

/// Who may use a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `/health`: anyone, no check (liveness probes).
    Open,
    /// The OAuth callback: the browser's top-level navigation back from an authorization
    /// server, cross-site and tokenless by nature; `Host` is checked, and it completes
    /// only a login the gateway started (its single-use `state`).
    Callback,
    /// The OAuth confirmation: a form the callback's page posts, same origin only (a
    /// browser sends `Origin`), no token; it completes only a login whose browser cookie
    /// it carries.
    Confirm,
    /// The run inspector's page and assets: no data, no token; `Host` and origin checked.
    Page,
    /// `/metrics`: the operator's; open without a token on loopback only while no user
    /// principal is configured (one person's machine).
    Metrics,
    /// Any principal: a user, acting as itself.
    Member,
    /// As [`Access::Member`], and the body may be `multipart/form-data` (an upload's
    /// files) as well as JSON; a cross-origin browser request is still refused.
    Upload,
    /// The operator only.
    Operator,
}

/// One route of the gateway.
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec {
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: &'static str,
    /// The router's pattern (`{name}` segments).
    pub path: &'static str,
    pub access: Access,
    /// Its handler (the gateway adds the method guard).
    pub handler: fn() -> Route,
}

const fn route(
    method: &'static str,
    path: &'static str,
    access: Access,
    handler: fn() -> Route,
) -> RouteSpec {
    RouteSpec {
        method,
        path,
        access,
        handler,
    }
}

/// Every route of the gateway, in the order the router tries them.
pub const ROUTES: &[RouteSpec] = &[
    route("GET", "/health", Access::Open, || web::to(super::health)),
    route("GET", "/ready", Access::Open, || web::to(super::ready)),
    // Antler's MCP server (streamable HTTP) and its protected resource metadata, before
    // every pattern route so none can ever take them.
    route("POST", mcp_endpoint::MCP_PATH, Access::Member, || {
        web::to(mcp_endpoint::serve)
    }),
    route("GET", mcp_endpoint::MCP_PATH, Access::Member, || {
        web::to(mcp_endpoint::serve)
    }),
    route("DELETE", mcp_endpoint::MCP_PATH, Access::Member, || {
        web::to(mcp_endpoint::serve)
    }),
    route(
        "GET",
        mcp_endpoint::RESOURCE_METADATA_PATH,
        Access::Open,
        || web::to(mcp_endpoint::resource_metadata),
    ),
    route(
        "GET",
        mcp_endpoint::RESOURCE_METADATA_MCP_PATH,
        Access::Open,
        || web::to(mcp_endpoint::resource_metadata),
    ),
    // The API's OpenAPI document: a member's (docs/gateway-api.md#openapi).
    route("GET", openapi::OPENAPI_PATH, Access::Member, || {
        web::to(openapi::serve)
    }),
    route("GET", "/api/mcp/config", Access::Operator, || {
        web::to(super::mcp_config::get_config)
    }),
    route("PUT", "/api/mcp/config", Access::Operator, || {
        web::to(super::mcp_config::put_config)
    }),
    route("GET", oauth::CALLBACK_PATH, Access::Callback, || {
        web::to(oauth::callback)
    }),
    route("POST", oauth::CONFIRM_PATH, Access::Confirm, || {
        web::to(oauth::confirm)
    }),
    // A user starts its own MCP logins.
    route(
        "POST",
        "/api/mcp/{server}/oauth/start",
        Access::Member,
        || web::to(oauth::start),
    ),
    route("POST", "/api/runs", Access::Member, || {
        web::to(super::runs_api::post_run)
    }),
    // The LangGraph-compatible API (docs/gateway-api.md#langgraph): before
    // `/api/runs/{id}`, which would take `stream` and `wait` for run ids.
    route("POST", "/api/runs/stream", Access::Member, || {
        web::to(super::langgraph_runs::stateless_stream)
    }),
    route("POST", "/api/runs/wait", Access::Member, || {
        web::to(super::langgraph_runs::stateless_wait)
    }),
    route("POST", "/api/threads", Access::Member, || {
        web::to(super::langgraph_threads::create_thread)
    }),
    route("POST", "/api/threads/search", Access::Member, || {
        web::to(super::langgraph_threads::search_threads)
    }),
    route("GET", "/api/threads/{tid}", Access::Member, || {
        web::to(super::langgraph_threads::get_thread)
    }),
    route("PATCH", "/api/threads/{tid}", Access::Member, || {
        web::to(super::langgraph_threads::patch_thread)
    }),
    route("DELETE", "/api/threads/{tid}", Access::Member, || {
        web::to(super::langgraph_threads::delete_thread)
    }),
    route("GET", "/api/threads/{tid}/state", Access::Member, || {
        web::to(super::langgraph_threads::get_state)
    }),
    route("POST", "/api/threads/{tid}/state", Access::Member, || {
        web::to(super::langgraph_threads::post_state)
    }),
    route(
        "GET",
        "/api/threads/{tid}/artifacts/{path:.*}",
        Access::Member,
        || web::to(super::thread_artifacts::thread_artifact),
    ),
    route("POST", "/api/threads/{tid}/compact", Access::Member, || {
        web::to(super::compact::compact_thread)
    }),
    route("POST", "/api/threads/{tid}/history", Access::Member, || {
        web::to(super::langgraph_threads::history)
    }),
    // DeerFlow's reads (spec A.1): the thread's messages, a run's, the token usage.
    route("GET", "/api/threads/{tid}/messages", Access::Member, || {
        web::to(super::langgraph_reads::thread_messages)
    }),
    route(
        "GET",
        "/api/threads/{tid}/messages/page",
        Access::Member,
        || web::to(super::langgraph_reads::thread_messages_page),
    ),
    route(
        "GET",
        "/api/threads/{tid}/token-usage",
        Access::Member,
        || web::to(super::langgraph_reads::token_usage),
    ),
    route(
        "POST",
        "/api/threads/{tid}/branches",
        Access::Member,
        || web::to(super::langgraph_branches::branch_thread),
    ),
    route("GET", "/api/threads/{tid}/goal", Access::Member, || {
        web::to(super::goal::get_goal)
    }),
    route("PUT", "/api/threads/{tid}/goal", Access::Member, || {
        web::to(super::goal::put_goal)
    }),
    route("DELETE", "/api/threads/{tid}/goal", Access::Member, || {
        web::to(super::goal::delete_goal)
    }),
    route(
        "POST",
        "/api/threads/{tid}/runs/regenerate/prepare",
        Access::Member,
        || web::to(super::langgraph_regenerate::prepare_regenerate),
    ),
    route(
        "POST",
        "/api/threads/{tid}/runs/edit-regenerate/prepare",
        Access::Member,
        || web::to(super::langgraph_regenerate::prepare_edit_regenerate),
    ),
    route("POST", "/api/threads/{tid}/runs", Access::Member, || {
        web::to(super::langgraph_runs::create_run)
    }),
    route("GET", "/api/threads/{tid}/runs", Access::Member, || {
        web::to(super::langgraph_runs::list_runs)
    }),
    route(
        "POST",
        "/api/threads/{tid}/runs/stream",
        Access::Member,
        || web::to(super::langgraph_runs::create_stream),
    ),
    route(
        "POST",
        "/api/threads/{tid}/runs/wait",
        Access::Member,
        || web::to(super::langgraph_runs::create_wait),
    ),
    route(
        "GET",
        "/api/threads/{tid}/runs/{rid}",
        Access::Member,
        || web::to(super::langgraph_runs::get_run),
    ),
    route(
        "GET",
        "/api/threads/{tid}/runs/{rid}/messages",
        Access::Member,
        || web::to(super::langgraph_reads::run_messages),
    ),
    route(
        "GET",
        "/api/threads/{tid}/runs/{rid}/events",
        Access::Member,
        || web::to(super::langgraph_reads::run_events),
    ),
    route(
        "GET",
        "/api/threads/{tid}/runs/{rid}/workspace-changes",
        Access::Member,
        || web::to(super::langgraph_reads::run_workspace_changes),
    ),
    route(
        "POST",
        "/api/threads/{tid}/runs/{rid}/cancel",
        Access::Member,
        || web::to(super::langgraph_runs::cancel_run),
    ),
    route(
        "GET",
        "/api/threads/{tid}/runs/{rid}/join",
        Access::Member,
        || web::to(super::langgraph_runs::join_run),
    ),
    route(
        "GET",
        "/api/threads/{tid}/runs/{rid}/stream",
        Access::Member,
        || web::to(super::langgraph_runs::join_stream),
    ),
    route(
        "POST",
        "/api/threads/{tid}/runs/{rid}/stream",
        Access::Member,
        || web::to(super::langgraph_runs::join_stream),
    ),
    // Before `/api/assistants/{aid}`, which would take `search` (and answer its POST 405).
    route("POST", "/api/assistants/search", Access::Member, || {
        web::to(super::langgraph::search_assistants)
    }),
    route("GET", "/api/assistants/{aid}", Access::Member, || {
        web::to(super::langgraph::get_assistant)
    }),
    route("GET", "/api/runs", Access::Member, || {
        web::to(super::runs_api::list_runs)
    }),
    route("GET", "/api/runs/{id}", Access::Member, || {
        web::to(super::runs_api::get_run)
    }),
    route("GET", "/api/runs/{id}/events", Access::Member, || {
        web::to(super::events::run_events)
    }),
    route("POST", "/api/runs/{id}/answer", Access::Member, || {
        web::to(super::runs_api::answer_run)
    }),
    route("POST", "/api/runs/{id}/cancel", Access::Member, || {
        web::to(super::runs_api::cancel_run)
    }),
    route(
        "POST",
        "/api/runs/{id}/elicitations/{eid}",
        Access::Member,
        || web::to(elicitation::answer),
    ),
    route(
        "POST",
        "/api/runs/{id}/approvals/{call}",
        Access::Member,
        || web::to(super::approvals::answer),
    ),
    route("GET", "/api/runs/{id}/artifact", Access::Member, || {
        web::to(super::runs_api::download_artifact)
    }),
    route("GET", "/api/runs/{id}/messages", Access::Member, || {
        web::to(super::runs_api::run_messages)
    }),
    route("GET", "/api/runs/{id}/catalog", Access::Member, || {
        web::to(super::runs_api::run_catalog)
    }),
    route("POST", "/api/threads/{tid}/uploads", Access::Upload, || {
        web::to(uploads::upload)
    }),
    route(
        "GET",
        "/api/threads/{tid}/uploads/limits",
        Access::Member,
        || web::to(uploads::limits),
    ),
    route(
        "GET",
        "/api/threads/{tid}/uploads/list",
        Access::Member,
        || web::to(uploads::list),
    ),
    route(
        "DELETE",
        "/api/threads/{tid}/uploads/{filename}",
        Access::Member,
        || web::to(uploads::delete),
    ),
    // A principal's own memory (the operator names a user with `?user=`).
    route("GET", "/api/memory", Access::Member, || {
        web::to(super::memory::get_memory)
    }),
    route("DELETE", "/api/memory", Access::Member, || {
        web::to(super::memory::clear_memory)
    }),
    route("GET", "/api/memory/facts", Access::Member, || {
        web::to(super::memory::list_facts)
    }),
    route("POST", "/api/memory/reload", Access::Member, || {
        web::to(super::memory::get_memory)
    }),
    route("POST", "/api/memory/facts", Access::Member, || {
        web::to(super::memory::create_fact)
    }),
    route("PATCH", "/api/memory/facts/{id}", Access::Member, || {
        web::to(super::memory::patch_fact)
    }),
    route("DELETE", "/api/memory/facts/{id}", Access::Member, || {
        web::to(super::memory::delete_fact)
    }),
    route("GET", "/api/memory/export", Access::Member, || {
        web::to(super::memory::get_memory)
    }),
    route("POST", "/api/memory/import", Access::Member, || {
        web::to(super::memory::import_memory)
    }),
    route("GET", "/api/memory/config", Access::Member, || {
        web::to(super::memory::get_config)
    }),
    route("GET", "/api/memory/status", Access::Member, || {
        web::to(super::memory::get_status)
    }),
    // DeerFlow's one-call routes (spec C.8).
    route("GET", "/api/suggestions/config", Access::Member, || {
        web::to(super::suggestions::suggestions_config)
    }),
    route(
        "POST",
        "/api/threads/{id}/suggestions",
        Access::Member,
        || web::to(super::suggestions::suggestions),
    ),
    route("POST", "/api/input-polish", Access::Member, || {
        web::to(super::suggestions::input_polish)
    }),
    route("GET", "/api/whoami", Access::Member, || {
        web::to(super::whoami)
    }),
    route("GET", "/api/cluster", Access::Operator, || {
        web::to(super::cluster_view::cluster_view)
    }),
    route("GET", "/metrics", Access::Metrics, || {
        web::to(super::metrics)
    }),
    route("GET", "/", Access::Page, || web::to(ui::index)),
    route("GET", "/ui/{asset}", Access::Page, || web::to(ui::asset)),
    route("GET", "/favicon.ico", Access::Page, || web::to(ui::favicon)),
];

/// The access a request with `method` needs on the resource of `path` (a method the
/// resource does not route needs a principal, then gets 405).
pub fn access_of(path: &str, method: &Method) -> Access {
    ROUTES
        .iter()
        .find(|r| r.path == path && r.method == method.as_str())
        .map(|r| r.access)
        .unwrap_or(Access::Member)
}

/// The distinct paths of [`ROUTES`], in order (one resource each).
pub fn paths() -> Vec<&'static str> {
    let mut paths: Vec<&'static str> = Vec::new();
    for r in ROUTES {
        if !paths.contains(&r.path) {
            paths.push(r.path);
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_has_one_access_per_method_and_unknown_methods_need_a_principal() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(
                matches!(r.method, "GET" | "POST" | "PUT" | "PATCH" | "DELETE"),
                "{r:?}"
            );
            assert!(
                !ROUTES[..i]
                    .iter()
                    .any(|o| o.path == r.path && o.method == r.method),
                "{r:?} twice"
            );
        }
        assert_eq!(access_of("/api/mcp/config", &Method::PUT), Access::Operator);
        assert_eq!(access_of("/health", &Method::POST), Access::Member);
        assert_eq!(access_of("/nope", &Method::GET), Access::Member);
    }

    /// Whether the router would match `earlier`'s pattern for the literal path `later`
    /// (the router takes the first resource whose pattern matches, then answers a method
    /// it lacks 405).
    fn shadows(earlier: &str, later: &str) -> bool {
        let (e, l): (Vec<&str>, Vec<&str>) =
            (earlier.split('/').collect(), later.split('/').collect());
        e.len() == l.len()
            && e.iter()
                .zip(&l)
                .all(|(e, l)| e == l || (e.starts_with('{') && !l.starts_with('{')))
    }

    #[test]
    fn no_route_is_taken_by_an_earlier_pattern() {
        let paths = paths();
        for (i, later) in paths.iter().enumerate() {
            for earlier in &paths[..i] {
                assert!(
                    !shadows(earlier, later),
                    "{earlier} comes first and takes {later}"
                );
            }
        }
        assert!(shadows("/api/assistants/{aid}", "/api/assistants/search"));
    }

    #[test]
    fn the_mcp_routes_come_before_every_pattern_route() {
        let first_pattern = ROUTES
            .iter()
            .position(|r| r.path.contains('{'))
            .unwrap_or(ROUTES.len());
        for path in [
            mcp_endpoint::MCP_PATH,
            mcp_endpoint::RESOURCE_METADATA_PATH,
            mcp_endpoint::RESOURCE_METADATA_MCP_PATH,
        ] {
            let at = ROUTES.iter().position(|r| r.path == path);
            assert!(
                at.is_some_and(|at| at < first_pattern),
                "{path} at {at:?}, a pattern route at {first_pattern}"
            );
        }
    }
}
