//! A tool call on [`McpServer`]: it runs in the caller's task, never in the actor. It asks
//! the actor for the live session (waiting while it starts or reconnects, within the
//! call's deadline), calls on the peer with no lock held, and on a refused or stale token
//! asks the actor to reopen the session with a fresh one and sends the call once more.
//! Every failure is an error result the model sees.

use std::time::Duration;

use actix::Addr;
use antler_protocol::messages::McpCallResult;
use rmcp::{model::CallToolRequestParams, service::ServiceError};

use super::{
    actor::{InFlight, Live, McpServerActor, Reopen, Session, Unavailable, Want, WhyNot},
    connect::{is_forbidden, is_unauthorized},
    McpServer,
};
use crate::{ask::AskingCall, convert, oauth::OAuthError};

impl McpServer {
    /// Calls `tool` (the server's own name) with `args`. Every failure is an error result:
    /// the model sees it as an error tool message and the run goes on. A call made for a
    /// run (`asking`) lets the server's elicitations reach its user until it ends.
    pub async fn call(
        &self,
        tool: &str,
        args: serde_json::Map<String, serde_json::Value>,
        deadline: Duration,
        asking: Option<AskingCall>,
    ) -> McpCallResult {
        let s = &*self.id;
        let timeout = s
            .config
            .tool_call_timeout
            .filter(|t| *t > 0.0)
            .map(Duration::from_secs_f64)
            .map_or(deadline, |t| t.min(deadline));
        let started = tokio::time::Instant::now();
        let _asking = asking.map(|mut call| {
            call.deadline = started + timeout;
            s.asking.enter(call)
        });
        let mut retried_auth = false;
        let mut refreshes = 0;
        loop {
            let live = match self
                .live_session(timeout.saturating_sub(started.elapsed()))
                .await
            {
                Ok(l) => l,
                Err(e) => return McpCallResult::error(e),
            };
            if let Some(token) = &live.token {
                // A token refreshed since the session opened: reopen with it first. A
                // fresh cached token is compared without any await or request.
                let current = match token.fresh() {
                    Some(h) => Ok(Some(h)),
                    None => token.authorization().await,
                };
                match current {
                    Ok(Some(current))
                        if live.authorization.as_deref() != Some(current.as_str())
                            && refreshes < 2 =>
                    {
                        refreshes += 1;
                        self.reopen_and_wait(&live, timeout.saturating_sub(started.elapsed()))
                            .await;
                        continue;
                    }
                    Ok(_) => {}
                    Err(e @ OAuthError::LoginNeeded { .. }) => {
                        return McpCallResult::error(e.to_string())
                    }
                    Err(e) => return McpCallResult::error(format!("MCP server '{}': {e}", s.name)),
                }
            }
            let mut params = CallToolRequestParams::new(tool.to_owned());
            params.arguments = Some(args.clone());
            let _guard = CallInFlight::enter(&self.addr);
            let left = timeout.saturating_sub(started.elapsed());
            // Dropping the call future (timeout, lost session) makes rmcp send
            // `notifications/cancelled` for it.
            let outcome = tokio::select! {
                r = live.peer.call_tool(params) => r,
                _ = live.closed.cancelled() => Err(ServiceError::TransportClosed),
                _ = tokio::time::sleep(left) => {
                    return McpCallResult::error(format!(
                        "MCP tool '{tool}' on server '{}' timed out after {:.1}s",
                        s.name,
                        timeout.as_secs_f64()
                    ));
                }
            };
            match outcome {
                Ok(result) => {
                    let json = serde_json::to_value(&result).unwrap_or_default();
                    return convert::call_result(&json);
                }
                Err(e)
                    if is_forbidden(&e.to_string())
                        && !retried_auth
                        && e.auth_challenge().is_some() =>
                {
                    // Too narrow a scope for this tool (403 `insufficient_scope`): the
                    // token is stepped up to what the challenge names (a new login, within
                    // the step-up limit), and the call is sent once more.
                    retried_auth = true;
                    let stepped = match (&live.token, e.auth_challenge()) {
                        (Some(t), Some(c)) => t.step_up(c).await,
                        _ => false,
                    };
                    if !stepped {
                        return McpCallResult::error(format!(
                            "MCP tool '{tool}' on server '{}' failed: {e}",
                            s.name
                        ));
                    }
                    if let (Some(t), Some(a)) = (&live.token, &live.authorization) {
                        t.invalidate(a).await;
                    }
                    self.reopen_and_wait(&live, timeout.saturating_sub(started.elapsed()))
                        .await;
                }
                Err(e) if is_unauthorized(&e) && !retried_auth && live.token.is_some() => {
                    // One refresh and one retry: forget the rejected token, reopen.
                    retried_auth = true;
                    if let (Some(t), Some(a)) = (&live.token, &live.authorization) {
                        t.invalidate(a).await;
                    }
                    self.reopen_and_wait(&live, timeout.saturating_sub(started.elapsed()))
                        .await;
                }
                Err(ServiceError::TransportClosed) => {
                    // An OAuth server that refused the token ends the HTTP session; the
                    // request was refused, not run, so it is sent once more if the new
                    // session carries a new token.
                    if live.token.is_some() && !retried_auth {
                        retried_auth = true;
                        let within = timeout.saturating_sub(started.elapsed());
                        if self.reconnected_with_new_token(&live, within).await {
                            continue;
                        }
                    }
                    return self.connection_lost(tool);
                }
                Err(e) => {
                    return McpCallResult::error(format!(
                        "MCP tool '{tool}' on server '{}' failed: {e}",
                        s.name
                    ));
                }
            }
        }
    }

    /// Asks for a session with a fresh token in place of `live`'s, and waits for it.
    async fn reopen_and_wait(&self, live: &Live, within: Duration) {
        self.addr.do_send(Reopen {
            stale: live.authorization.clone(),
        });
        let want = Want::OtherAuthorization(live.authorization.clone());
        let _ = tokio::time::timeout(within, self.addr.send(Session(want))).await;
    }

    /// Waits (up to `within` and the session start timeout) for the session after `live`;
    /// true when it was opened with another token than `live`'s.
    async fn reconnected_with_new_token(&self, live: &Live, within: Duration) -> bool {
        let init = Duration::from_secs_f64(self.id.config.session_init_timeout.max(0.001));
        let next = tokio::time::timeout(
            within.min(init),
            self.addr.send(Session(Want::After(live.generation))),
        )
        .await;
        matches!(next, Ok(Ok(Ok(l))) if l.authorization != live.authorization)
    }

    fn connection_lost(&self, tool: &str) -> McpCallResult {
        McpCallResult::error(format!(
            "MCP server '{}' connection lost during the call to '{tool}'; it is reconnecting",
            self.id.name
        ))
    }

    /// The live session, waiting (up to `within`) while the server is starting or
    /// reconnecting; a failed or stopped server answers at once with why.
    async fn live_session(&self, within: Duration) -> Result<Live, String> {
        let name = &self.id.name;
        match tokio::time::timeout(within, self.addr.send(Session(Want::Any))).await {
            Ok(Ok(Ok(l))) => Ok(l),
            Ok(Ok(Err(Unavailable::Stopped)) | Err(_)) => {
                Err(format!("MCP server '{name}' is stopped"))
            }
            Ok(Ok(Err(Unavailable::Failed(why)))) => {
                Err(format!("MCP server '{name}' is unavailable: {why}"))
            }
            Err(_) => {
                let why = self.addr.send(WhyNot).await.unwrap_or_default();
                Err(format!("MCP server '{name}' is not connected: {why}"))
            }
        }
    }
}

/// Counts a call in the actor's status while it runs on the session.
struct CallInFlight<'a>(&'a Addr<McpServerActor>);

impl<'a> CallInFlight<'a> {
    fn enter(addr: &'a Addr<McpServerActor>) -> Self {
        addr.do_send(InFlight(true));
        Self(addr)
    }
}

impl Drop for CallInFlight<'_> {
    fn drop(&mut self) {
        self.0.do_send(InFlight(false));
    }
}
