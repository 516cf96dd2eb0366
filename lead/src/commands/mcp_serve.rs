//! `antler mcp serve [--user U] [--config FILE]`: Antler's MCP server on stdin and stdout,
//! for the `mcpServers` entry of any MCP client. With a cluster running it joins it: the
//! session is relayed, message by message, to the cluster's gateway `/mcp` with the local
//! operator's token (`gateway.token` in the runtime directory, or `ANTLER_GATEWAY_TOKEN`),
//! acting for `--user` (default: the local operator's own user); without one it starts an
//! ephemeral cluster, as `antler run` does, and serves its runs in this process. Nothing
//! but the protocol is written to stdout. SIGINT or SIGTERM ends the session as the end of
//! stdin does (its run released, an ephemeral cluster stopped, the spans exported).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use rmcp::service::{RoleClient, RoleServer};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, Transport};
use tokio_util::sync::CancellationToken;

use super::{cluster_spec, interrupt, Ctx};
use crate::cluster::{attach, ClusterError, RunningCluster};
use crate::gateway::{
    ACT_AS_HEADER, GATEWAY_ADDR_FILE, GATEWAY_TOKEN_ENV, GATEWAY_TOKEN_FILE, MCP_PATH,
};
use crate::mcp_server::{serve_stdio, Owner};
use antler_protocol::config::{valid_user, OPERATOR_USER};

/// How long an ephemeral cluster's children may take to come up.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// Serves one MCP session on stdio until the client closes it.
pub async fn serve(
    ctx: &Ctx,
    user: Option<String>,
    config: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    if let Some(user) = user.as_deref().filter(|u| !valid_user(u)) {
        bail!("--user {user:?}: expected a user id (letters, digits, - and _)");
    }
    let spec = cluster_spec(ctx.runtime_dir.clone(), config.as_deref(), None)?;
    match attach(&spec.runtime_dir, spec.connection.clone()).await {
        Ok(connection) => {
            connection.close("antler mcp serve relays through the gateway");
            relay(&spec.runtime_dir, user).await?;
        }
        Err(ClusterError::NotRunning(_)) => {
            let mut ephemeral = spec.clone();
            ephemeral.ephemeral = true;
            ephemeral.runtime_dir = spec
                .runtime_dir
                .join(format!("ephemeral-{}", std::process::id()));
            let cluster = RunningCluster::start(ephemeral).await?;
            crate::cluster::wait_until_healthy(&cluster.supervisor, READY_WITHIN).await;
            let owner = Owner {
                user: user.unwrap_or_else(|| OPERATOR_USER.to_owned()),
                role: None,
            };
            // SIGINT or SIGTERM (how MCP clients stop a stdio server after closing its
            // stdin) ends the session as the end of stdin does.
            let stop = CancellationToken::new();
            let serving = serve_stdio(
                cluster.runs.env.clone(),
                cluster.runs.manager.clone(),
                owner,
                stop.clone(),
            );
            tokio::pin!(serving);
            let served = tokio::select! {
                served = &mut serving => served,
                () = interrupt::signalled() => {
                    interrupt::exit_on_second();
                    stop.cancel();
                    serving.await
                }
            };
            let root = cluster.runtime.root().to_path_buf();
            cluster.stop().await;
            let _ = std::fs::remove_dir_all(root);
            if stop.is_cancelled() {
                interrupt::exit_after_stop(0);
            }
            served?;
        }
        Err(e) => return Err(e.into()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Relays the MCP session on stdio to the running cluster's gateway, message by message,
/// until either side closes.
async fn relay(runtime_dir: &std::path::Path, user: Option<String>) -> anyhow::Result<()> {
    let addr = std::fs::read_to_string(runtime_dir.join(GATEWAY_ADDR_FILE)).with_context(|| {
        format!(
            "the running cluster in {} has no HTTP gateway (antler mcp serve reaches it through {MCP_PATH})",
            runtime_dir.display()
        )
    })?;
    let token = match std::env::var(GATEWAY_TOKEN_ENV)
        .ok()
        .filter(|t| !t.is_empty())
    {
        Some(token) => token,
        None => std::fs::read_to_string(runtime_dir.join(GATEWAY_TOKEN_FILE))
            .with_context(|| format!("cannot read the gateway's token: set {GATEWAY_TOKEN_ENV}"))?,
    };
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}{MCP_PATH}", addr.trim()));
    config.auth_header = Some(token.trim().to_owned());
    if let Some(user) = user {
        config.custom_headers.insert(
            http::HeaderName::from_static(ACT_AS_HEADER),
            http::HeaderValue::from_str(&user)?,
        );
    }
    let mut gateway = StreamableHttpClientTransport::from_config(config);
    let mut client = IntoTransport::<RoleServer, _, _>::into_transport(rmcp::transport::stdio());
    let signalled = interrupt::signalled();
    tokio::pin!(signalled);
    let relayed = loop {
        tokio::select! {
            from_client = client.receive() => match from_client {
                Some(message) => {
                    if let Err(e) = Transport::<RoleClient>::send(&mut gateway, message).await {
                        break Err(anyhow::anyhow!("the gateway refused a message: {e}"));
                    }
                }
                None => break Ok(()),
            },
            from_gateway = Transport::<RoleClient>::receive(&mut gateway) => match from_gateway {
                Some(message) => {
                    if let Err(e) = client.send(message).await {
                        break Err(anyhow::anyhow!("cannot write to the client: {e}"));
                    }
                }
                None => break Ok(()),
            },
            // SIGINT or SIGTERM: the session is closed at the gateway (DELETE) as at the
            // end of stdin.
            () = &mut signalled => {
                interrupt::exit_on_second();
                let _ = Transport::<RoleClient>::close(&mut gateway).await;
                interrupt::exit_after_stop(0);
            }
        }
    };
    let _ = Transport::<RoleClient>::close(&mut gateway).await;
    relayed
}
