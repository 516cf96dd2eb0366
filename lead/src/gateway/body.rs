//! Reading a request's body: at most a route's limit (413 past it), within
//! [`BODY_DEADLINE`] (408 past it, and the connection is closed), so a slow or endless
//! upload holds no worker.

use std::time::Duration;

use actix_web::{http::StatusCode, web, HttpResponse};
use futures::StreamExt as _;

use super::error;

/// How long a request body may take to arrive.
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// Reads a request body of at most `limit` bytes within [`BODY_DEADLINE`]: 413 past the
/// limit, 408 past the deadline (the connection is closed).
pub async fn read_body(
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, HttpResponse> {
    let read = async {
        let mut body = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {e}"),
                )
            })?;
            if body.len() + chunk.len() > limit {
                return Err(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is larger than {limit} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    match tokio::time::timeout(BODY_DEADLINE, read).await {
        Ok(body) => body,
        Err(_) => {
            let mut response = error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} s",
                    BODY_DEADLINE.as_secs()
                ),
            );
            response
                .head_mut()
                .set_connection_type(actix_web::http::ConnectionType::Close);
            Err(response)
        }
    }
}
