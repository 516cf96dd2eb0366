//! `GET /api/cluster`, the operator's view of the cluster: the processes (workers with
//! their slots), sandbox-host's pool and mcp-host's servers, each host asked with a
//! deadline; one that does not answer is `null` with an `errors` entry.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use antler_protocol::Role;
use serde_json::{json, Value};

use super::mcp_config::host_calls;
use super::{error, State};
use antler_protocol::calls::{McpCalls, SandboxCalls};

/// How long the cluster view waits for each host.
pub(super) const CLUSTER_TIMEOUT: Duration = Duration::from_millis(2000);

/// `GET /api/cluster` (the operator's): `processes` (as `antler status --json`, workers
/// with their slots), `sandboxes` (sandbox-host's pool) and `mcp_servers` (mcp-host's
/// servers); a host that does not answer is `null` with an `errors` entry.
pub(super) async fn cluster_view(state: web::Data<State>) -> HttpResponse {
    let mut processes = match state
        .supervisor
        .send(crate::cluster::supervisor::GetStatus)
        .await
    {
        Ok(list) => list,
        Err(e) => {
            return error(
                actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
                e.to_string(),
            )
        }
    };
    crate::cluster::scaling::with_slots(&mut processes, &state.runs.dispatcher).await;
    // The lead is unhealthy while its runs database cannot be written.
    let unwritable = crate::runs::store::unwritable();
    processes.insert(
        0,
        antler_protocol::messages::ProcessStatus {
            role: Role::Lead,
            index: 0,
            pid: Some(std::process::id()),
            address: "lead".into(),
            healthy: unwritable.is_none(),
            restarts: 0,
            uptime_s: state.started.elapsed().as_secs_f64(),
            last_heartbeat_ms: Some(0),
            state: "running".into(),
            reason: unwritable,
            slots: None,
            in_use: None,
        },
    );
    let (pools, mcp) = futures::join!(
        host_calls(&state.supervisor, Role::SandboxHost, async |host| {
            host.sandbox_status(CLUSTER_TIMEOUT).await
        }),
        host_calls(&state.supervisor, Role::McpHost, async |host| {
            host.mcp_status(CLUSTER_TIMEOUT).await
        }),
    );
    let mut errors = Vec::new();
    // The pool of every sandbox-host replica as one: the first replica's settings, every
    // replica's sandboxes (each with its replica's address when there are several).
    let mut sandboxes = Value::Null;
    let several = pools.as_ref().is_ok_and(|p| p.len() > 1);
    for (address, reply) in pools.unwrap_or_else(|e| vec![(String::new(), Err(e))]) {
        match reply {
            Ok(status) => {
                let mut listed = json!(status.sandboxes);
                if several {
                    for sandbox in listed.as_array_mut().into_iter().flatten() {
                        sandbox["replica"] = json!(address);
                    }
                }
                // Each replica's volume: a full one is where sandbox writes fail.
                let mut volume = json!(status.volume);
                if !volume.is_null() {
                    volume["replica"] = json!(address);
                }
                if sandboxes.is_null() {
                    sandboxes = json!(status);
                    sandboxes["sandboxes"] = listed;
                    sandboxes["volumes"] = json!([]);
                } else if let (Some(all), Some(more)) =
                    (sandboxes["sandboxes"].as_array_mut(), listed.as_array())
                {
                    all.extend(more.iter().cloned());
                }
                if let Some(volumes) = sandboxes["volumes"].as_array_mut() {
                    if !volume.is_null() {
                        volumes.push(volume);
                    }
                }
            }
            Err(e) => errors.push(format!("sandbox-host {address}: {e}").replace("  ", " ")),
        }
    }
    // Every replica connects to every server: each server once per replica.
    let mut mcp_servers = Value::Null;
    let several = mcp.as_ref().is_ok_and(|p| p.len() > 1);
    for (address, reply) in mcp.unwrap_or_else(|e| vec![(String::new(), Err(e))]) {
        match reply {
            Ok(list) => {
                let mut listed = json!(list);
                if several {
                    for server in listed.as_array_mut().into_iter().flatten() {
                        server["replica"] = json!(address);
                    }
                }
                match (mcp_servers.as_array_mut(), listed) {
                    (Some(all), Value::Array(more)) => all.extend(more),
                    (_, listed) => mcp_servers = listed,
                }
            }
            Err(e) => errors.push(format!("mcp-host {address}: {e}").replace("  ", " ")),
        }
    }
    HttpResponse::Ok().json(json!({
        "processes": crate::cli::status_json(&processes),
        "sandboxes": sandboxes,
        "mcp_servers": mcp_servers,
        "errors": errors,
    }))
}
