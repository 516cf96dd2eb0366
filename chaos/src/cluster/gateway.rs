//! The gateway of the cluster under test, as the schedule talks to it: the cluster view
//! (`GET /api/cluster`), the runs' routes, and whether every process is healthy. Every
//! request has a short deadline: a paused lead must not hang the schedule.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::ChaosCluster;

/// How long one gateway request may take (a paused lead must not hang the schedule).
const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

impl ChaosCluster {
    /// `GET /api/cluster`: processes, sandboxes, MCP servers; `None` when the lead does not
    /// answer in time.
    pub async fn view(&self) -> Option<Value> {
        self.get("/api/cluster")
            .await
            .filter(|v| v["processes"].is_array())
    }

    pub async fn get(&self, path: &str) -> Option<Value> {
        let reply = self
            .http
            .get(format!("http://{}{path}", self.gateway))
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

    pub(crate) async fn post(&self, path: &str, body: Value) -> Result<(u16, Value), String> {
        self.post_keyed(path, body, None).await
    }

    /// A POST with an `Idempotency-Key`, when `key` is given: safe to repeat.
    pub(crate) async fn post_keyed(
        &self,
        path: &str,
        body: Value,
        key: Option<&str>,
    ) -> Result<(u16, Value), String> {
        let mut request = self
            .http
            .post(format!("http://{}{path}", self.gateway))
            .bearer_auth(&self.token);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let reply = request
            .json(&body)
            .timeout(HTTP_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = reply.status().as_u16();
        Ok((status, reply.json().await.unwrap_or(Value::Null)))
    }

    /// Every process of the view healthy, the lead and all its hosts present.
    pub fn all_healthy(&self, view: &Value) -> bool {
        view["processes"].as_array().is_some_and(|ps| {
            let hosts = match &self.multi {
                Some(m) => m.nodes.len(),
                None => 2 + self.workers as usize,
            };
            ps.len() == 1 + hosts && ps.iter().all(|p| p["healthy"] == true)
        })
    }

    pub(crate) async fn wait_healthy(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if let Some(v) = self.view().await {
                if self.all_healthy(&v)
                    && v["mcp_servers"].as_array().is_some_and(|s| !s.is_empty())
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}
