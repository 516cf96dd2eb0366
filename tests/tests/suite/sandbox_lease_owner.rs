//! Leases against a real sandbox-host: a lease that is renewed stays, one that is not is
//! reclaimed after `sandbox.lease_ttl` (the sandbox goes warm), a newer lead incarnation
//! reclaims every lease of the older one (and a late request of the older one nothing),
//! and a call by a run whose lease lapsed takes it again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::sandbox_support::{who, Client, SandboxHost};
use antler_protocol::messages::{LeaseOwner, SandboxReply, SandboxRequest, ToolCall};

const CONFIG: &str =
    "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  lease_ttl: 1\n  replicas: 8\n";

fn owner(incarnation: &str, run: &str) -> LeaseOwner {
    LeaseOwner {
        incarnation: incarnation.into(),
        run_id: run.into(),
    }
}

async fn acquire(client: &Client, thread: &str, owner: LeaseOwner) -> String {
    match client
        .request(SandboxRequest::Acquire {
            principal: who("alice", thread),
            known_id: None,
            owner: Some(owner),
        })
        .await
    {
        SandboxReply::Acquired(Ok(a)) => {
            assert_eq!(a.lease_ttl_ms, 1000);
            a.sandbox_id
        }
        other => panic!("acquire: {other:?}"),
    }
}

/// The state (`active`, `warm`) of each sandbox, by id.
async fn states(client: &Client) -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> = client
        .status()
        .await
        .sandboxes
        .into_iter()
        .map(|s| (s.sandbox_id, s.state))
        .collect();
    list.sort();
    list
}

async fn state_of(client: &Client, id: &str) -> String {
    states(client)
        .await
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, s)| s)
        .unwrap_or_default()
}

#[tokio::test]
async fn leases_expire_unless_renewed_and_a_new_incarnation_reclaims_the_old_ones() {
    let host = SandboxHost::start(CONFIG);
    let client = host.connect().await;
    let renewed = acquire(&client, "t1", owner("lead-1", "run-1")).await;
    let lapsed = acquire(&client, "t2", owner("lead-1", "run-2")).await;
    // Three TTLs: run-1 renews every 300 ms, run-2 never does.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        match client
            .request(SandboxRequest::RenewLease {
                owner: owner("lead-1", "run-1"),
            })
            .await
        {
            SandboxReply::Renewed(n) => assert_eq!(n, 1),
            other => panic!("renew: {other:?}"),
        }
    }
    assert_eq!(state_of(&client, &renewed).await, "active");
    assert_eq!(state_of(&client, &lapsed).await, "warm");

    // A call by the run whose lease lapsed takes it again.
    let call = SandboxRequest::Call {
        sandbox_id: lapsed.clone(),
        call: ToolCall {
            tool: "ls".into(),
            args: serde_json::json!({"description": "look", "path": "/mnt/user-data"}).into(),
            secrets: vec![],
            clearance: None,
        },
        owner: Some(owner("lead-1", "run-2")),
        call_id: Some("c1".into()),
    };
    assert!(matches!(
        client.request(call).await,
        SandboxReply::ToolResult(Ok(_))
    ));
    assert_eq!(state_of(&client, &lapsed).await, "active");

    // A new lead incarnation names itself: every lease of the old one goes.
    let newer = acquire(&client, "t3", owner("lead-2", "run-3")).await;
    assert_eq!(states(&client).await, {
        let mut want = vec![
            (renewed.clone(), "warm".to_string()),
            (lapsed.clone(), "warm".to_string()),
            (newer.clone(), "active".to_string()),
        ];
        want.sort();
        want
    });
    // A late request of the older incarnation reclaims nothing of the newer one's.
    let late = acquire(&client, "t4", owner("lead-1", "run-4")).await;
    assert_eq!(state_of(&client, &late).await, "active");
    assert_eq!(state_of(&client, &newer).await, "active");
    // Releasing the last lease parks it warm.
    match client
        .request(SandboxRequest::Release {
            sandbox_id: newer.clone(),
            owner: Some(owner("lead-2", "run-3")),
        })
        .await
    {
        SandboxReply::Released(Ok(())) => {}
        other => panic!("release: {other:?}"),
    }
    assert_eq!(state_of(&client, &newer).await, "warm");
}
