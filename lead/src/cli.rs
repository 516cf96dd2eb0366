//! Rendering of CLI output: the `antler status` table and its JSON form (a worker's slots
//! and slots in use included), and peer pings.

use antler_protocol::messages::{PeerPing, ProcessStatus};
use serde_json::{json, Value};

/// The JSON array `antler status --json` prints.
pub fn status_json(list: &[ProcessStatus]) -> Value {
    Value::Array(
        list.iter()
            .map(|p| {
                json!({
                    "role": p.role.as_str(),
                    "index": p.index,
                    "pid": p.pid,
                    "address": p.address,
                    "healthy": p.healthy,
                    "restarts": p.restarts,
                    "uptime_s": (p.uptime_s * 10.0).round() / 10.0,
                    "last_heartbeat_ms": p.last_heartbeat_ms,
                    "state": p.state,
                    "reason": p.reason,
                    "slots": p.slots,
                    "in_use": p.in_use,
                })
            })
            .collect(),
    )
}

/// The table `antler status` prints.
pub fn status_table(list: &[ProcessStatus]) -> String {
    let mut out = format!(
        "{:<14} {:>8} {:<8} {:>8} {:>9} {:>10}  {:<10} {:>7} {}\n",
        "ROLE", "PID", "HEALTHY", "RESTARTS", "UPTIME", "HEARTBEAT", "STATE", "SLOTS", "ADDRESS"
    );
    for p in list {
        let role = if p.role == antler_protocol::Role::Subagent {
            format!("subagent-{}", p.index)
        } else {
            p.role.as_str().to_string()
        };
        // A worker's slots in use of its slots.
        let slots = match (p.in_use, p.slots) {
            (Some(used), Some(slots)) => format!("{used}/{slots}"),
            (None, Some(slots)) => format!("-/{slots}"),
            _ => "-".to_owned(),
        };
        out.push_str(&format!(
            "{:<14} {:>8} {:<8} {:>8} {:>8.1}s {:>10}  {:<10} {:>7} {}\n",
            role,
            p.pid.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            if p.healthy { "yes" } else { "no" },
            p.restarts,
            p.uptime_s,
            p.last_heartbeat_ms
                .map(|m| format!("{m} ms"))
                .unwrap_or_else(|| "never".into()),
            p.state,
            slots,
            p.address
        ));
        if let Some(r) = &p.reason {
            if p.state == "failed" || !p.healthy {
                out.push_str(&format!("  └ {r}\n"));
            }
        }
    }
    out
}

/// The lines `antler ping` prints.
pub fn pings_table(list: &[PeerPing]) -> String {
    let mut out = String::new();
    for p in list {
        let who = format!("{}-{}", p.role.as_str(), p.index);
        match &p.result {
            Ok(us) => out.push_str(&format!("{who:<14} ok   {us} µs\n")),
            Err(e) => out.push_str(&format!("{who:<14} FAIL {e}\n")),
        }
    }
    out
}
