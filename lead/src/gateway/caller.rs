//! Who a LangGraph-compatible route acts for, as handler arguments: [`Caller`] (the
//! principal's user: a member its own, the operator `default`) and [`OwnThread`] (the
//! caller's thread named by the route's `{tid}`: its row; its state read on demand). A request
//! without a credential gets the credential refusal, a bad thread id DeerFlow's 422, and a
//! missing thread and another user's the same 404 (the store is asked by (user, thread)),
//! before the handler runs.

use actix_web::{dev::Payload, web, FromRequest, HttpRequest, HttpResponse};
use futures::future::{ready, LocalBoxFuture, Ready};

use super::langgraph::{check_thread_id, on_store, thread_not_found, user_of, Refused};
use super::State;
use crate::runs::store::ThreadRow;
use antler_engine::ThreadState;

/// The refusal as actix's error: the response is sent as it is.
fn refused(response: HttpResponse) -> actix_web::Error {
    actix_web::error::InternalError::from_response("refused", response).into()
}

/// The caller's user.
pub(super) struct Caller(pub String);

impl FromRequest for Caller {
    type Error = actix_web::Error;
    type Future = Ready<Result<Caller, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            user_of(req)
                .map(Caller)
                .map_err(|r: Refused| refused(r.into())),
        )
    }
}

/// The caller's own thread `{tid}`.
pub(super) struct OwnThread {
    pub user: String,
    pub id: String,
    pub row: ThreadRow,
}

impl OwnThread {
    /// The thread's latest state (none before its first run or state write).
    pub async fn state(&self, app: &State) -> Result<Option<ThreadState>, HttpResponse> {
        let (user, id) = (self.user.clone(), self.id.clone());
        on_store(app, move |store| store.thread_state(&user, &id)).await
    }
}

impl FromRequest for OwnThread {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<OwnThread, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let user = user_of(&req).map_err(|r: Refused| refused(r.into()))?;
            let id = req.match_info().get("tid").unwrap_or_default().to_owned();
            check_thread_id(&id).map_err(|r: Refused| refused(r.into()))?;
            let Some(app) = req.app_data::<web::Data<State>>() else {
                return Err(refused(HttpResponse::InternalServerError().finish()));
            };
            let (owner, thread) = (user.clone(), id.clone());
            let row = on_store(app, move |store| store.thread(&owner, &thread))
                .await
                .map_err(refused)?
                .ok_or_else(|| refused(thread_not_found(&id)))?;
            Ok(OwnThread { user, id, row })
        })
    }
}
