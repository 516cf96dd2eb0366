//! The relay of the mcp-host replicas' OAuth credentials. A user logs in once, on
//! whichever replica the login reached; every replica then calls the server as that user,
//! and a replica that starts on an empty disk (a new pod) gets every login back. Each
//! replica started with `--oauth-key-file` streams its credentials sealed with the key the
//! replicas share (`McpRequest::WatchCredentials`); the lead keeps the newest of each
//! (server, user) in its runs database (`mcp_credentials`), sends it on to the other
//! replicas (`McpRequest::PutCredentials`), and sends a replica everything kept when it
//! connects. The lead holds no key: it cannot open what it keeps, and no API returns it.
//! A replica with no key refuses the watch, and is asked again only on its next connection.

use std::{collections::HashMap, time::Duration};

use actix::Addr;
use antler_protocol::{
    calls::{watch_credentials, McpCalls},
    link::CurrentConnection,
    messages::SealedCredential,
    Connection, RemoteError, Role, RpcError,
};

use crate::cluster::supervisor::{GetLinks, Supervisor};
use crate::runs::store::{CheckpointError, CheckpointStore};

/// How often the replicas' connections are looked at (a new one is watched).
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The deadline of a `PutCredentials` request.
const PUT_DEADLINE: Duration = Duration::from_secs(10);
/// A watch is opened again after this long (its request's deadline).
const WATCH_DEADLINE: Duration = Duration::from_secs(3600);

/// What the relay knows of one replica's current connection.
struct Watched {
    connection: Connection,
    task: tokio::task::JoinHandle<()>,
}

/// Runs the relay until the supervisor stops. Spawn it on the lead's system.
pub async fn relay(supervisor: Addr<Supervisor>, store: CheckpointStore) {
    let mut watched: HashMap<String, Watched> = HashMap::new();
    loop {
        let Ok(links) = supervisor.send(GetLinks).await else {
            break;
        };
        let mut current = Vec::new();
        for (role, _, address, link) in links {
            if role != Role::McpHost {
                continue;
            }
            let Ok(Some(connection)) = link.send(CurrentConnection).await else {
                continue;
            };
            current.push((address, connection));
        }
        for (address, connection) in &current {
            let same = watched
                .get(address)
                .is_some_and(|w| !w.connection.is_closed() && w.connection.same(connection));
            if same {
                continue;
            }
            if let Some(old) = watched.remove(address) {
                old.task.abort();
            }
            let task = tokio::spawn(watch(
                address.clone(),
                connection.clone(),
                store.clone(),
                supervisor.clone(),
            ));
            watched.insert(
                address.clone(),
                Watched {
                    connection: connection.clone(),
                    task,
                },
            );
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    for (_, w) in watched {
        w.task.abort();
    }
}

/// Gives the replica at `address` everything kept, then keeps what it streams and sends
/// each newer one to the other replicas.
async fn watch(
    address: String,
    connection: Connection,
    store: CheckpointStore,
    supervisor: Addr<Supervisor>,
) {
    let kept = store.call(|s| s.credentials()).await.unwrap_or_default();
    if !kept.is_empty() {
        match put(&connection, kept).await {
            Ok(_) => {}
            Err(RpcError::Remote(RemoteError::Unsupported(why))) => {
                tracing::debug!(replica = %address, "{why}");
                return;
            }
            Err(e) => {
                tracing::warn!(replica = %address, "cannot give mcp-host the shared OAuth logins: {e}");
            }
        }
    }
    loop {
        let stream = watch_credentials(&connection, WATCH_DEADLINE).await;
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(replica = %address, "cannot watch mcp-host's OAuth logins: {e}");
                return;
            }
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(Some(sealed)) => {
                    let newer = {
                        let sealed = sealed.clone();
                        store.call(move |s| s.keep_credential(&sealed)).await
                    };
                    match newer {
                        Ok(true) => share(&address, sealed, &supervisor).await,
                        Ok(false) | Err(CheckpointError::ThreadGone) => {}
                        Err(e) => {
                            tracing::warn!(replica = %address, "cannot keep a shared OAuth login: {e}");
                            // Still sent on: the replicas hold it even if the lead does not.
                            share(&address, sealed, &supervisor).await;
                        }
                    }
                }
                Ok(None) => {}
                Err(RpcError::Remote(RemoteError::Unsupported(why))) => {
                    tracing::debug!(replica = %address, "{why}");
                    return;
                }
                Err(e) => {
                    tracing::debug!(replica = %address, "the OAuth logins watch ended: {e}");
                    break;
                }
            }
        }
        if connection.is_closed() {
            return;
        }
    }
}

/// Sends one replica's new credential to every other replica connected now.
async fn share(from: &str, sealed: SealedCredential, supervisor: &Addr<Supervisor>) {
    let Ok(links) = supervisor.send(GetLinks).await else {
        return;
    };
    for (role, _, address, link) in links {
        if role != Role::McpHost || address == from {
            continue;
        }
        let Ok(Some(connection)) = link.send(CurrentConnection).await else {
            continue;
        };
        let sealed = sealed.clone();
        tokio::spawn(async move {
            if let Err(e) = put(&connection, vec![sealed]).await {
                tracing::debug!(replica = %address, "cannot share an OAuth login: {e}");
            }
        });
    }
}

async fn put(connection: &Connection, list: Vec<SealedCredential>) -> Result<u32, RpcError> {
    match connection.put_credentials(list, PUT_DEADLINE).await {
        // A reply out of protocol takes none.
        Err(RpcError::Unexpected(_)) => Ok(0),
        taken => taken,
    }
}
