//! The typed control calls every peer answers: ping, health, and chaos mode's stop.

use std::future::Future;
use std::time::Duration;

use super::{ask, reply_kind, Requester};
use crate::messages::{ActorRef, ControlReply, ControlRequest, Health, Reply, Request};

/// One method per [`ControlRequest`], on any [`Requester`].
pub trait ControlCalls: Requester {
    /// [`ControlRequest::Ping`]: the echoed payload.
    fn ping(
        &self,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, Self::Error>> + Send {
        let request = Request::Control(ControlRequest::Ping { payload });
        ask(self, request, timeout, |reply| match reply {
            Reply::Control(ControlReply::Pong { payload }) => Ok(payload),
            other => Err(reply_kind(&other)),
        })
    }

    /// [`ControlRequest::Health`].
    fn health(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Health, Self::Error>> + Send {
        ask(
            self,
            Request::Control(ControlRequest::Health),
            timeout,
            |reply| match reply {
                Reply::Control(ControlReply::Health(health)) => Ok(health),
                other => Err(reply_kind(&other)),
            },
        )
    }

    /// [`ControlRequest::ChaosStop`]: how many actors were stopped, and what their
    /// supervisor does next.
    fn chaos_stop(
        &self,
        actor: ActorRef,
        timeout: Duration,
    ) -> impl Future<Output = Result<(u32, String), Self::Error>> + Send {
        let request = Request::Control(ControlRequest::ChaosStop { actor });
        ask(self, request, timeout, |reply| match reply {
            Reply::Control(ControlReply::ChaosStopped { stopped, detail }) => Ok((stopped, detail)),
            other => Err(reply_kind(&other)),
        })
    }
}

impl<R: Requester + ?Sized> ControlCalls for R {}
