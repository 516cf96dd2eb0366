//! Which failures to prepare a run are the lead's own load (the gateway answers 503 with
//! `Retry-After`, never a 4xx): a host away, refusing for load, draining or too slow, and
//! the checkpoint store locked; a host's real answer or a bad request is not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_engine::HostError;
use antler_lead::runs::CheckpointError;
use antler_lead::runs::PrepareError;
use antler_protocol::{RemoteError, Role, RpcError};

fn host(error: RpcError) -> PrepareError {
    PrepareError::Host(HostError::from_rpc(Role::McpHost, error))
}

#[test]
fn the_leads_own_load_is_an_overload() {
    for error in [
        RpcError::PeerUnavailable("no heartbeat from mcp-host for 3778 ms (3 missed)".into()),
        RpcError::DeadlineExceeded(Duration::from_secs(30)),
        RpcError::Overloaded("outgoing queue to mcp-host stayed full until the deadline".into()),
        RpcError::Remote(RemoteError::Overloaded("1024 requests in flight".into())),
        RpcError::Remote(RemoteError::ShuttingDown),
    ] {
        let e = host(error.clone());
        assert!(e.is_overload(), "{error:?} must answer 503: {e}");
    }
    let busy = CheckpointError::Sql(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
        Some("database is locked".into()),
    ));
    assert!(PrepareError::Checkpoint(busy).is_overload());
}

#[test]
fn answers_and_bad_requests_are_not() {
    assert!(!host(RpcError::Remote(RemoteError::Failed(
        "the server said no".into()
    )))
    .is_overload());
    assert!(!host(RpcError::TooLarge { size: 2, max: 1 }).is_overload());
    assert!(!PrepareError::InvalidId {
        what: "user",
        value: "../x".into()
    }
    .is_overload());
    assert!(!PrepareError::Config("bad yaml".into()).is_overload());
}
