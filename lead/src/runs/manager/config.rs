//! `CurrentConfig`: the cluster's config.yaml as runs see it now (parsed again only when
//! the file changed), for the gateway's routes that make one model call of their own
//! (suggestions, input polishing).

use std::sync::Arc;

use actix::prelude::*;
use antler_protocol::config::AppConfig;

use super::RunManager;
use crate::runs::prepare::PrepareError;

/// The cluster's config.yaml now.
#[derive(Message)]
#[rtype(result = "Result<Arc<AppConfig>, PrepareError>")]
pub struct CurrentConfig;

impl Handler<CurrentConfig> for RunManager {
    type Result = ResponseFuture<Result<Arc<AppConfig>, PrepareError>>;

    fn handle(&mut self, _: CurrentConfig, _: &mut Context<Self>) -> Self::Result {
        let env = Arc::clone(&self.env);
        Box::pin(async move { env.load_config(None).await })
    }
}
