//! sandbox-host runs a call once by (sandbox, run, call id): the same call sent again
//! (a lead that lost the reply, a resumed lead whose host outlived it) gets the first
//! result and its command does not run again, while it runs or after; another call id
//! runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::sandbox_support::{SandboxHost, BWRAP_CONFIG};
use antler_protocol::messages::{LeaseOwner, SandboxReply, SandboxRequest, ToolCall};

fn counted(call_id: &str) -> SandboxRequest {
    SandboxRequest::Call {
        sandbox_id: String::new(),
        call: ToolCall {
            tool: "bash".into(),
            args: serde_json::json!({
                "description": "count",
                "command": "echo ran >> /mnt/user-data/outputs/count.txt; sleep 1; wc -l < /mnt/user-data/outputs/count.txt"
            })
            .into(),
            secrets: vec![],
            clearance: None,
        },
        owner: Some(LeaseOwner {
            incarnation: "lead-1".into(),
            run_id: "run-1".into(),
        }),
        call_id: Some(call_id.into()),
    }
}

fn with_sandbox(request: SandboxRequest, id: &str) -> SandboxRequest {
    match request {
        SandboxRequest::Call {
            call,
            owner,
            call_id,
            ..
        } => SandboxRequest::Call {
            sandbox_id: id.into(),
            call,
            owner,
            call_id,
        },
        other => other,
    }
}

#[tokio::test]
async fn a_repeated_call_id_runs_once_and_gets_the_first_result() {
    let host = SandboxHost::start(BWRAP_CONFIG);
    let client = host.connect().await;
    let id = client.acquire("alice", "t1").await.unwrap().sandbox_id;
    // The same call twice at once, then once more after it finished.
    let (first, second) = futures::join!(
        client.request(with_sandbox(counted("c1"), &id)),
        client.request(with_sandbox(counted("c1"), &id))
    );
    let third = client.request(with_sandbox(counted("c1"), &id)).await;
    let text = |r: SandboxReply| match r {
        SandboxReply::ToolResult(Ok(r)) => r.content,
        other => panic!("unexpected {other:?}"),
    };
    let (first, second, third) = (text(first), text(second), text(third));
    assert_eq!(first.trim(), "1", "{first}");
    assert_eq!(second, first);
    assert_eq!(third, first);
    let counter = host.user_data("alice", "t1").join("outputs/count.txt");
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
    // Another call id is another call.
    let other = text(client.request(with_sandbox(counted("c2"), &id)).await);
    assert_eq!(other.trim(), "2", "{other}");
}
