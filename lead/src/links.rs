//! [`HostLinks`]: the links to the hosts and the state of their processes, as the lead's
//! supervisor keeps them. Runs, their readiness and the subagent dispatcher reach the
//! hosts through this trait, never through the supervisor itself (`cluster::supervisor`
//! implements it for its address); it sits below `runs` and `subagents` so that neither
//! depends on the other for it.

use actix::Addr;
use antler_protocol::link::HostLink;
use antler_protocol::messages::ProcessStatus;
use antler_protocol::Role;
use futures::future::BoxFuture;

/// Every link to a host now: its role, index, address and link actor.
pub type Links = Vec<(Role, u32, String, Addr<HostLink>)>;

/// The links to the hosts and the state of their processes, as the lead's supervisor
/// keeps them. Runs, their readiness and the subagent dispatcher reach the hosts through
/// this, never through the supervisor itself (`cluster::supervisor` implements it for its
/// address).
pub trait HostLinks: Send + Sync + 'static {
    /// Every link now (`Err`: the supervisor is gone, and why).
    fn links(&self) -> BoxFuture<'static, Result<Links, String>>;
    /// The status of the host processes, as `antler status` shows it.
    fn processes(&self) -> BoxFuture<'static, Vec<ProcessStatus>>;
}
