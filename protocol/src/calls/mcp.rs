//! The typed calls to mcp-host: its registry's status and tools, a tool call (with the
//! elicitations it streams), reloads, OAuth logins, elicitation answers and sealed
//! credentials. A refusal mcp-host reports on purpose stays the inner `Result`.

use std::future::Future;
use std::time::Duration;

use super::{ask, ask_items, reply_kind, Requester, Watch};
use crate::connection::{Connection, RpcError};
use crate::json::Json;
use crate::messages::{
    ElicitationRefusal, Health, McpCall, McpCallResult, McpDiscovery, McpElicitationAnswer,
    McpOAuthLogin, McpReloadSummary, McpReply, McpRequest, McpServerStatus, McpTool, Reply,
    Request, SealedCredential,
};

/// An elicitation a tool call streams before its result (policy `ask`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elicitation {
    pub id: String,
    pub server: String,
    pub message: String,
    /// The requested schema.
    pub requested_schema: Json,
}

/// A server's tool list changed (a stream item of [`McpRequest::WatchTools`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsChanged {
    pub server: String,
    /// How many tools it lists now.
    pub tools: u32,
}

/// One method per [`McpRequest`] that has a single answer, on any [`Requester`].
pub trait McpCalls: Requester {
    /// [`McpRequest::Health`]: the host's health and how many servers it has.
    fn mcp_health(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Health, u32), Self::Error>> + Send {
        ask(
            self,
            Request::Mcp(McpRequest::Health),
            timeout,
            |reply| match reply {
                Reply::Mcp(McpReply::Health { health, servers }) => Ok((health, servers)),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`McpRequest::Status`]: every configured server with its state.
    fn mcp_status(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<McpServerStatus>, Self::Error>> + Send {
        ask(
            self,
            Request::Mcp(McpRequest::Status),
            timeout,
            |reply| match reply {
                Reply::Mcp(McpReply::Status(servers)) => Ok(servers),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`McpRequest::ListTools`]: the tools of every ready server, or of one.
    fn list_tools(
        &self,
        server: Option<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<McpTool>, Self::Error>> + Send {
        let request = Request::Mcp(McpRequest::ListTools { server });
        ask(self, request, timeout, |reply| match reply {
            Reply::Mcp(McpReply::Tools(tools)) => Ok(tools),
            other => Err(reply_kind(&other)),
        })
    }

    /// [`McpRequest::CallTool`], unary: an elicitation the server asks for is declined.
    fn call_tool(
        &self,
        call: McpCall,
        timeout: Duration,
    ) -> impl Future<Output = Result<McpCallResult, Self::Error>> + Send {
        ask(
            self,
            Request::Mcp(McpRequest::CallTool(call)),
            timeout,
            call_result,
        )
    }

    /// [`McpRequest::CallTool`], handing each elicitation it streams to `elicited`
    /// before its result.
    fn call_tool_elicited(
        &self,
        call: McpCall,
        timeout: Duration,
        elicited: &(dyn Fn(Elicitation) + Send + Sync),
    ) -> impl Future<Output = Result<McpCallResult, Self::Error>> + Send {
        let items = move |item: Reply| {
            if let Reply::Mcp(McpReply::Elicitation {
                id,
                server,
                message,
                requested_schema,
            }) = item
            {
                elicited(Elicitation {
                    id,
                    server,
                    message,
                    requested_schema,
                });
            }
        };
        async move {
            let request = Request::Mcp(McpRequest::CallTool(call));
            ask_items(self, request, timeout, &items, call_result).await
        }
    }

    /// [`McpRequest::Reload`]: re-read the extensions config now.
    fn reload(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<McpReloadSummary, Self::Error>> + Send {
        ask(
            self,
            Request::Mcp(McpRequest::Reload),
            timeout,
            |reply| match reply {
                Reply::Mcp(McpReply::Reloaded(summary)) => Ok(summary),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`McpRequest::Discover`]: what a run starts with.
    fn discover(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<McpDiscovery, Self::Error>> + Send {
        ask(
            self,
            Request::Mcp(McpRequest::Discover),
            timeout,
            |reply| match reply {
                Reply::Mcp(McpReply::Discovery(discovery)) => Ok(discovery),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`McpRequest::OAuthStart`]: the authorization URL of a login just started.
    fn oauth_start(
        &self,
        login: McpOAuthLogin,
        timeout: Duration,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send {
        ask(
            self,
            Request::Mcp(McpRequest::OAuthStart(login)),
            timeout,
            |reply| match reply {
                Reply::Mcp(McpReply::OAuthUrl { url }) => Ok(url),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`McpRequest::OAuthComplete`]: the (server, user) whose login completed.
    fn oauth_complete(
        &self,
        server: String,
        user: Option<String>,
        redirected: String,
        timeout: Duration,
    ) -> impl Future<Output = Result<(String, String), Self::Error>> + Send {
        let request = McpRequest::OAuthComplete {
            server,
            user,
            redirected,
        };
        ask(self, Request::Mcp(request), timeout, oauth_done)
    }

    /// [`McpRequest::OAuthWait`]: the (server, user) whose login completed.
    fn oauth_wait(
        &self,
        server: String,
        user: Option<String>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(String, String), Self::Error>> + Send {
        let request = McpRequest::OAuthWait { server, user };
        ask(self, Request::Mcp(request), timeout, oauth_done)
    }

    /// [`McpRequest::AnswerElicitation`].
    fn answer_elicitation(
        &self,
        answer: McpElicitationAnswer,
        timeout: Duration,
    ) -> impl Future<Output = Result<Result<(), ElicitationRefusal>, Self::Error>> + Send {
        let request = Request::Mcp(McpRequest::AnswerElicitation(answer));
        ask(self, request, timeout, |reply| match reply {
            Reply::Mcp(McpReply::ElicitationAnswered(answered)) => Ok(answered),
            other => Err(reply_kind(&other)),
        })
    }

    /// [`McpRequest::PutCredentials`]: how many were newer and taken.
    fn put_credentials(
        &self,
        credentials: Vec<SealedCredential>,
        timeout: Duration,
    ) -> impl Future<Output = Result<u32, Self::Error>> + Send {
        let request = Request::Mcp(McpRequest::PutCredentials(credentials));
        ask(self, request, timeout, |reply| match reply {
            Reply::Mcp(McpReply::CredentialsTaken(taken)) => Ok(taken),
            other => Err(reply_kind(&other)),
        })
    }
}

impl<R: Requester + ?Sized> McpCalls for R {}

fn call_result(reply: Reply) -> Result<McpCallResult, &'static str> {
    match reply {
        Reply::Mcp(McpReply::CallResult(result)) => Ok(result),
        other => Err(reply_kind(&other)),
    }
}

fn oauth_done(reply: Reply) -> Result<(String, String), &'static str> {
    match reply {
        Reply::Mcp(McpReply::OAuthDone { server, user }) => Ok((server, user)),
        other => Err(reply_kind(&other)),
    }
}

/// [`McpRequest::WatchCredentials`] on a connection to mcp-host: each credential it holds,
/// then each change (`Some`), until the watch ends (`None` items are its end). The whole
/// watch is bounded by `timeout`; dropping it cancels it at the host.
pub async fn watch_credentials(
    host: &Connection,
    timeout: Duration,
) -> Result<Watch<Option<SealedCredential>>, RpcError> {
    let request = Request::Mcp(McpRequest::WatchCredentials);
    Watch::start(host, request, timeout, |reply| match reply {
        Reply::Mcp(McpReply::Credential(sealed)) => Ok(Some(sealed)),
        _ => Ok(None),
    })
    .await
}

/// [`McpRequest::WatchTools`] on a connection to mcp-host: a [`ToolsChanged`] (`Some`) each
/// time a server's tool list changes, until the watch ends (`None`: the host stopped it).
/// The whole watch is bounded by `timeout`; dropping it cancels it at the host.
pub async fn watch_tools(
    host: &Connection,
    timeout: Duration,
) -> Result<Watch<Option<ToolsChanged>>, RpcError> {
    let request = Request::Mcp(McpRequest::WatchTools);
    Watch::start(host, request, timeout, |reply| match reply {
        Reply::Mcp(McpReply::ToolsChanged { server, tools }) => {
            Ok(Some(ToolsChanged { server, tools }))
        }
        Reply::Mcp(McpReply::WatchEnded) => Ok(None),
        other => Err(reply_kind(&other)),
    })
    .await
}
