//! The leads' gateways as the schedule talks to them: one lead's (`GET`, a keyed `POST`,
//! its cluster view and whether it is healthy), and any lead's, trying each from a given
//! one on (a client behind a Service reaches whichever replica answers). Every request has
//! a short deadline: a paused lead must not hang the schedule.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::leads::Leads;

/// How long one gateway request may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

impl Leads {
    /// `GET` of slot `k`'s gateway: the body of a success, else `None`.
    pub async fn get(&self, k: usize, path: &str) -> Option<Value> {
        let reply = self
            .http
            .get(format!("http://{}{path}", self.slots[k].gateway))
            .bearer_auth(&self.token)
            .timeout(HTTP_TIMEOUT)
            .send()
            .await
            .ok()?;
        if !reply.status().is_success() {
            return None;
        }
        reply.json().await.ok()
    }

    /// `GET` from the first lead that answers, trying each from slot `from` on.
    pub async fn get_any(&self, from: usize, path: &str) -> Option<Value> {
        for i in 0..self.slots.len() {
            if let Some(v) = self.get((from + i) % self.slots.len(), path).await {
                return Some(v);
            }
        }
        None
    }

    /// A `POST` to slot `k`'s gateway, with an `Idempotency-Key` when `key` is given:
    /// its status and body.
    pub async fn post(
        &self,
        k: usize,
        path: &str,
        body: &Value,
        key: Option<&str>,
    ) -> Result<(u16, Value), String> {
        let mut request = self
            .http
            .post(format!("http://{}{path}", self.slots[k].gateway))
            .bearer_auth(&self.token);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let reply = request
            .json(body)
            .timeout(HTTP_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = reply.status().as_u16();
        Ok((status, reply.json().await.unwrap_or(Value::Null)))
    }

    /// Slot `k`'s lead serves: its cluster view shows it and all its hosts healthy, and
    /// its MCP server.
    pub async fn healthy(&self, k: usize) -> bool {
        let Some(view) = self.get(k, "/api/cluster").await else {
            return false;
        };
        let hosts = 2 + self.workers as usize;
        view["processes"]
            .as_array()
            .is_some_and(|ps| ps.len() == 1 + hosts && ps.iter().all(|p| p["healthy"] == true))
            && view["mcp_servers"]
                .as_array()
                .is_some_and(|s| !s.is_empty())
    }

    /// Waits up to `within` until slot `k`'s lead serves: how long it took.
    pub async fn wait_healthy(&self, k: usize, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < within {
            if self.healthy(k).await {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}
