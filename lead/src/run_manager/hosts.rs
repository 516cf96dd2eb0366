//! [`LinkHosts`]: how runs in the lead reach sandbox-host and mcp-host: the request goes
//! through the supervisor's link to the host (one link per child, reconnecting on its
//! own), with the caller's deadline; a host that is down fails the call at once with a
//! [`HostError`], which the run turns into an error tool message.

use std::time::Duration;

use actix::Addr;
use antler_protocol::{envelope::TraceContext, link::Call as LinkCall, messages::Reply};
use antler_protocol::{messages::Request, Role};
use futures::future::BoxFuture;

use crate::run::hosts::{HostError, ToolHosts};
use crate::supervisor::{GetLinks, Supervisor};

/// Tool hosts reached through the lead's own links.
#[derive(Clone)]
pub struct LinkHosts {
    supervisor: Addr<Supervisor>,
}

impl LinkHosts {
    pub fn new(supervisor: Addr<Supervisor>) -> LinkHosts {
        LinkHosts { supervisor }
    }
}

impl ToolHosts for LinkHosts {
    fn request(
        &self,
        role: Role,
        request: Request,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Reply, HostError>> {
        Box::pin(async move {
            let links = self.supervisor.send(GetLinks).await.map_err(|e| {
                HostError::unavailable(format!("the lead's supervisor is gone: {e}"))
            })?;
            let Some((.., link)) = links.into_iter().find(|(r, i, ..)| *r == role && *i == 0)
            else {
                return Err(HostError::failed(format!("no {role} in this cluster")));
            };
            link.send(LinkCall {
                request,
                trace: TraceContext::new_root(),
                timeout,
            })
            .await
            .map_err(|e| HostError::unavailable(format!("{role:?} unreachable: {e}")))?
            .map_err(|e| HostError::from_rpc(role, e))
        })
    }
}
