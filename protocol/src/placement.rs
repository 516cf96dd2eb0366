//! Which replica of a host serves a request, the same in every process that asks:
//! the `SandboxId` of a (user, thread), the [`Route`] a request takes (pinned to one
//! replica by a key, spread over the healthy ones, or sent to every replica), and
//! rendezvous (highest random weight) hashing of a key over a replica set, so a thread
//! comes back to the same sandbox-host replica and its directories, and adding or
//! removing one replica moves only the threads that hash to it.

use sha2::{Digest, Sha256};

use crate::messages::{McpRequest, Request, SandboxRequest};

/// The deterministic sandbox id of (user, thread): the first 16 hex characters of
/// sha256(`user:thread`), the same in every process and after every restart.
pub fn sandbox_id(user_id: &str, thread_id: &str) -> String {
    let digest = Sha256::digest(format!("{user_id}:{thread_id}").as_bytes());
    hex::encode(digest)[..16].to_string()
}

/// How a request picks its replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Always the replica `key` hashes to, healthy or not: the state it needs lives
    /// there (a sandbox and its directories, a pooled stdio session).
    Pinned(String),
    /// Any healthy replica: they all serve it alike.
    Spread,
    /// Every replica (lease renewals: a run's leases may sit on any of them).
    Every,
}

/// The route of `request`.
pub fn route(request: &Request) -> Route {
    match request {
        Request::Sandbox(s) => match s {
            SandboxRequest::Acquire { principal, .. }
            | SandboxRequest::CallOnce { principal, .. }
            | SandboxRequest::ThreadFiles { principal, .. }
            | SandboxRequest::InvokeAcp(crate::messages::AcpInvocation { principal, .. }) => {
                Route::Pinned(sandbox_id(&principal.user_id, &principal.thread_id))
            }
            SandboxRequest::Release { sandbox_id, .. }
            | SandboxRequest::Call { sandbox_id, .. } => Route::Pinned(sandbox_id.clone()),
            SandboxRequest::RenewLease { .. } | SandboxRequest::UploadsUsage { .. } => Route::Every,
            SandboxRequest::Health | SandboxRequest::Status => Route::Spread,
        },
        Request::Mcp(McpRequest::CallTool(call)) => match (&call.user, &call.thread) {
            (Some(user), Some(thread)) => Route::Pinned(sandbox_id(user, thread)),
            _ => Route::Spread,
        },
        // The answer goes where the waiting call runs.
        Request::Mcp(McpRequest::AnswerElicitation(answer)) => {
            Route::Pinned(sandbox_id(&answer.user, &answer.thread))
        }
        _ => Route::Spread,
    }
}

/// The replica `key` goes to: the one whose name scores highest for it. `None` for an
/// empty set. Names are the replicas' stable identities (their configured addresses).
pub fn rendezvous<'a>(key: &str, replicas: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    replicas
        .into_iter()
        .enumerate()
        .map(|(i, name)| (score(key, name), i))
        .max()
        .map(|(_, i)| i)
}

fn score(key: &str, replica: &str) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    h.update(replica.as_bytes());
    let d = h.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{LeaseOwner, McpCall, Principal};

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("tcp:sandbox-host-{i}.sandbox-host:7103"))
            .collect()
    }

    #[test]
    fn sandbox_id_is_sha256_of_user_and_thread() {
        assert_eq!(sandbox_id("alice", "thread-1").len(), 16);
        assert_eq!(
            sandbox_id("alice", "thread-1"),
            sandbox_id("alice", "thread-1")
        );
        assert_ne!(
            sandbox_id("alice", "thread-1"),
            sandbox_id("bob", "thread-1")
        );
    }

    #[test]
    fn a_key_keeps_its_replica_and_spreads_evenly() {
        let set = names(3);
        let mut counts = [0usize; 3];
        for t in 0..3000 {
            let key = sandbox_id("u", &format!("t{t}"));
            let a = rendezvous(&key, set.iter().map(String::as_str)).unwrap();
            let b = rendezvous(&key, set.iter().map(String::as_str)).unwrap();
            assert_eq!(a, b);
            counts[a] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven spread: {counts:?}");
        }
    }

    #[test]
    fn adding_a_replica_moves_only_the_keys_it_takes() {
        let three = names(3);
        let four = names(4);
        let mut moved = 0;
        for t in 0..2000 {
            let key = sandbox_id("u", &format!("t{t}"));
            let before = rendezvous(&key, three.iter().map(String::as_str)).unwrap();
            let after = rendezvous(&key, four.iter().map(String::as_str)).unwrap();
            if before != after {
                assert_eq!(after, 3, "a key moved between old replicas");
                moved += 1;
            }
        }
        assert!((300..700).contains(&moved), "{moved} of 2000 moved");
        assert_eq!(rendezvous("k", std::iter::empty()), None);
    }

    #[test]
    fn requests_route_by_their_thread() {
        let p = Principal {
            user_id: "alice".into(),
            thread_id: "t1".into(),
            roles: vec![],
        };
        let id = sandbox_id("alice", "t1");
        let acquire = Request::Sandbox(SandboxRequest::Acquire {
            principal: p,
            known_id: None,
            owner: None,
        });
        assert_eq!(route(&acquire), Route::Pinned(id.clone()));
        let release = Request::Sandbox(SandboxRequest::Release {
            sandbox_id: id.clone(),
            owner: None,
        });
        assert_eq!(route(&release), Route::Pinned(id.clone()));
        let files = Request::Sandbox(SandboxRequest::ThreadFiles {
            principal: Principal {
                user_id: "alice".into(),
                thread_id: "t1".into(),
                roles: vec![],
            },
            op: crate::messages::ThreadFileOp::SnapshotOutputs,
        });
        assert_eq!(route(&files), Route::Pinned(id.clone()));
        let renew = Request::Sandbox(SandboxRequest::RenewLease {
            owner: LeaseOwner {
                incarnation: "i".into(),
                run_id: "r".into(),
            },
        });
        assert_eq!(route(&renew), Route::Every);
        let mut call = McpCall {
            server: "s".into(),
            tool: "t".into(),
            args: crate::json::Json::object(),
            user: Some("alice".into()),
            thread: Some("t1".into()),
            workspace: None,
            run_id: None,
            tool_call_id: None,
            clearance: None,
        };
        assert_eq!(
            route(&Request::Mcp(McpRequest::CallTool(call.clone()))),
            Route::Pinned(id)
        );
        let answer = crate::messages::McpElicitationAnswer {
            id: "e1".into(),
            user: "alice".into(),
            thread: "t1".into(),
            run_id: "r".into(),
            action: crate::messages::ElicitationAction::Decline,
            content: None,
        };
        assert_eq!(
            route(&Request::Mcp(McpRequest::AnswerElicitation(answer))),
            route(&Request::Mcp(McpRequest::CallTool(call.clone())))
        );
        call.thread = None;
        assert_eq!(
            route(&Request::Mcp(McpRequest::CallTool(call))),
            Route::Spread
        );
    }
}
