//! A web user's OAuth login to an MCP server through the gateway. `POST
//! /api/mcp/{server}/oauth/start` asks mcp-host for the authorization URL of the calling
//! principal's login, with the gateway's own callback as the redirect; the URL's `state`
//! is kept here ([`LoginStates`]), bound to that principal, the server and the mcp-host
//! replica, until its deadline. `GET /api/mcp/oauth/callback` is the browser coming back
//! from the authorization server: it takes the state once (unknown, expired or reused: 400)
//! and, in the browser that started the login only, shows who is being linked and asks to
//! confirm; `POST /api/mcp/oauth/confirm` (same origin, that browser's cookie) has mcp-host
//! complete that principal's login. The start binds the state to the starting browser with
//! an HttpOnly cookie, so a login link handed to another person completes nothing for the
//! sender (login CSRF). Its pages never show a code or token.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use actix::Addr;
use actix_web::{http::StatusCode, web, HttpRequest, HttpResponse};
use antler_protocol::{
    calls::{LinkError, Linked, McpCalls},
    messages::McpOAuthLogin,
    Role, RpcError,
};
use serde_json::json;

use super::{error, principal_of, Refusal, State};
use crate::cluster::supervisor::{GetLinks, Supervisor};

/// The gateway's callback route: the `redirect_uri` of every login it starts.
pub const CALLBACK_PATH: &str = "/api/mcp/oauth/callback";
/// Where the callback's confirmation form posts.
pub const CONFIRM_PATH: &str = "/api/mcp/oauth/confirm";
/// The path the binding cookies are sent to (the callback and the confirmation).
const COOKIE_PATH: &str = "/api/mcp/oauth/";
/// The binding cookie of one login: this prefix and a digest of its state.
const COOKIE_PREFIX: &str = "antler_login_";
/// The page for a login link opened in a browser other than the one that started it.
pub const OTHER_BROWSER: &str = "This login was started in another browser, for Antler user '{user}'. Nothing was linked: to link your own account, start the login yourself, signed in as yourself.";
/// How long a started login's `state` may come back.
pub const STATE_DEADLINE: Duration = Duration::from_secs(300);
/// How long mcp-host may take to start a login (discovery, client registration).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long mcp-host may take to complete one (the token request).
const COMPLETE_TIMEOUT: Duration = Duration::from_secs(30);
/// Started logins kept at most; past it the oldest is forgotten.
const MAX_STATES: usize = 4096;

/// A login started through the gateway, waiting for its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingLogin {
    pub server: String,
    /// The principal's user (`None`: the operator, who logs in as the default user).
    pub user: Option<String>,
    /// The mcp-host replica holding the login's session.
    pub replica: u32,
    pub redirect_uri: String,
    pub deadline: Instant,
    /// The secret of the starting browser's cookie.
    pub binding: String,
}

/// A login called back in its own browser, waiting for the user's confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirming {
    pub login: PendingLogin,
    /// The callback's query, as the authorization server sent it.
    pub query: String,
}

/// Why a callback's `state` completes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateRefusal {
    #[error("the callback carries no state")]
    Missing,
    #[error("the login state is unknown or was already used: start the login again")]
    Unknown,
    #[error("the login state expired: start the login again")]
    Expired,
}

/// The `state` of every login started here and not yet called back. Each is taken once.
#[derive(Debug, Default)]
pub struct LoginStates {
    pending: Mutex<HashMap<String, PendingLogin>>,
    /// Called back and shown to the user, by the confirmation form's nonce.
    confirming: Mutex<HashMap<String, Confirming>>,
}

impl LoginStates {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PendingLogin>> {
        // Held only for map operations, never across an await.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `state` for `login`; states long past their deadline are dropped.
    pub fn issue(&self, state: String, login: PendingLogin) {
        let now = Instant::now();
        let mut map = self.lock();
        // An expired state stays one more deadline, so its callback says "expired".
        map.retain(|_, p| p.deadline + STATE_DEADLINE > now);
        while map.len() >= MAX_STATES {
            let Some(oldest) = map
                .iter()
                .min_by_key(|(_, p)| p.deadline)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            map.remove(&oldest);
        }
        map.insert(state, login);
    }

    /// Takes `state`'s login: it cannot be taken again.
    pub fn take(&self, state: &str) -> Result<PendingLogin, StateRefusal> {
        if state.is_empty() {
            return Err(StateRefusal::Missing);
        }
        let login = self.lock().remove(state).ok_or(StateRefusal::Unknown)?;
        if login.deadline <= Instant::now() {
            return Err(StateRefusal::Expired);
        }
        Ok(login)
    }

    /// Keeps a called-back login for its confirmation; the nonce the form sends.
    pub fn hold(&self, confirming: Confirming) -> String {
        let nonce = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let now = Instant::now();
        let mut map = self.confirming.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, c| c.login.deadline > now);
        if map.len() < MAX_STATES {
            map.insert(nonce.clone(), confirming);
        }
        nonce
    }

    /// Takes the login a confirmation names, once.
    pub fn confirm(&self, nonce: &str) -> Result<Confirming, StateRefusal> {
        let held = self
            .confirming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(nonce)
            .ok_or(StateRefusal::Unknown)?;
        if held.login.deadline <= Instant::now() {
            return Err(StateRefusal::Expired);
        }
        Ok(held)
    }
}

/// The binding cookie's name for `state`.
fn cookie_name(state: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(state.as_bytes());
    format!("{COOKIE_PREFIX}{}", &hex::encode(digest)[..16])
}

/// Whether `req` carries the binding cookie of `login` (started for `state`).
fn same_browser(req: &HttpRequest, state: &str, login: &PendingLogin) -> bool {
    req.cookie(&cookie_name(state))
        .is_some_and(|c| super::principal::same(c.value(), &login.binding))
}

/// Why mcp-host gave no usable answer.
#[derive(Debug, thiserror::Error)]
enum HostError {
    /// No mcp-host, or it did not answer in time.
    #[error("mcp-host is unavailable: {0}")]
    Unavailable(String),
    /// mcp-host answered with an error (no such server, not a login server, a refused
    /// token request).
    #[error("{0}")]
    Refused(String),
    #[error("unexpected reply from mcp-host: {0}")]
    Unexpected(String),
}

impl HostError {
    fn status(&self) -> StatusCode {
        match self {
            HostError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            HostError::Refused(_) => StatusCode::BAD_REQUEST,
            HostError::Unexpected(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

/// One typed call (`call`) to mcp-host replica `replica` (`None`: the first), and the
/// replica asked.
async fn mcp_host_call<T>(
    supervisor: &Addr<Supervisor>,
    replica: Option<u32>,
    call: impl AsyncFnOnce(&Linked<'_>) -> Result<T, LinkError>,
) -> Result<(u32, T), HostError> {
    let mut links = supervisor
        .send(GetLinks)
        .await
        .map_err(|e| HostError::Unavailable(e.to_string()))?;
    links.retain(|(r, i, ..)| *r == Role::McpHost && replica.is_none_or(|want| *i == want));
    links.sort_by_key(|(_, i, ..)| *i);
    let Some((_, index, _, link)) = links.into_iter().next() else {
        return Err(HostError::Unavailable("no mcp-host in this cluster".into()));
    };
    match call(&Linked::new(&link)).await {
        Ok(answer) => Ok((index, answer)),
        Err(LinkError::Gone(e)) => Err(HostError::Unavailable(e.to_string())),
        Err(LinkError::Rpc(RpcError::Unexpected(e))) => {
            Err(HostError::Unexpected(e.reply.to_owned()))
        }
        Err(LinkError::Rpc(RpcError::Remote(e))) => Err(HostError::Refused(e.to_string())),
        Err(LinkError::Rpc(e)) => Err(HostError::Unavailable(e.to_string())),
    }
}

/// `http(s)://HOST/api/mcp/oauth/callback` for the gateway `req` reached (its `Host`
/// passed the guard).
fn redirect_uri(req: &HttpRequest) -> String {
    let host = req
        .headers()
        .get(actix_web::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    let scheme = req.connection_info().scheme().to_owned();
    format!("{scheme}://{host}{CALLBACK_PATH}")
}

/// `POST /api/mcp/{server}/oauth/start`: the authorization URL of the calling principal's
/// login to `server` (`{"authorization_url", "expires_in_s"}`).
pub async fn start(
    state: web::Data<State>,
    req: HttpRequest,
    server: web::Path<String>,
) -> HttpResponse {
    let Some(principal) = principal_of(&req) else {
        return Refusal::Credential.response();
    };
    let server = server.into_inner();
    let redirect_uri = redirect_uri(&req);
    let user = principal.user.clone();
    let start = McpOAuthLogin {
        server: server.clone(),
        user: user.clone(),
        redirect_uri: Some(redirect_uri.clone()),
    };
    let started = mcp_host_call(&state.supervisor, None, async |host| {
        host.oauth_start(start, START_TIMEOUT).await
    })
    .await;
    let (replica, url) = match started {
        Ok(started) => started,
        Err(e) => return error(e.status(), e.to_string()),
    };
    let Some(login_state) = reqwest::Url::parse(&url).ok().and_then(|u| {
        u.query_pairs()
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v.into_owned())
    }) else {
        return error(
            StatusCode::BAD_GATEWAY,
            "the authorization URL from mcp-host carries no state",
        );
    };
    let binding = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let cookie = actix_web::cookie::Cookie::build(cookie_name(&login_state), binding.clone())
        .path(COOKIE_PATH)
        .http_only(true)
        .same_site(actix_web::cookie::SameSite::Lax)
        .secure(req.connection_info().scheme() == "https")
        .max_age(actix_web::cookie::time::Duration::seconds(
            STATE_DEADLINE.as_secs() as i64,
        ))
        .finish();
    state.logins.issue(
        login_state,
        PendingLogin {
            server: server.clone(),
            user: user.clone(),
            replica,
            redirect_uri,
            deadline: Instant::now() + STATE_DEADLINE,
            binding,
        },
    );
    tracing::info!(%server, user = user.as_deref().unwrap_or("default"), "OAuth login started through the gateway");
    HttpResponse::Ok()
        .insert_header(("cache-control", "no-store"))
        .cookie(cookie)
        .json(json!({"authorization_url": url, "expires_in_s": STATE_DEADLINE.as_secs()}))
}

/// The query of a callback, as the authorization server sends it.
#[derive(Debug, serde::Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    error: Option<String>,
}

/// `GET /api/mcp/oauth/callback?code&state`: in the browser that started the login, a page
/// naming the server and the Antler user being linked, with a button that confirms; in any
/// other browser, a refusal naming the user the link was made for (nothing is linked).
pub async fn callback(
    state: web::Data<State>,
    req: HttpRequest,
    query: web::Query<CallbackQuery>,
) -> HttpResponse {
    let login = match state.logins.take(&query.state) {
        Ok(l) => l,
        Err(refusal) => return page(StatusCode::BAD_REQUEST, &refusal.to_string()),
    };
    let user = login
        .user
        .clone()
        .unwrap_or_else(|| antler_protocol::config::OPERATOR_USER.to_owned());
    if !same_browser(&req, &query.state, &login) {
        tracing::warn!(server = %login.server, %user, "an OAuth login link came back in another browser: refused");
        return page(
            StatusCode::FORBIDDEN,
            &OTHER_BROWSER.replacen("{user}", &user, 1),
        );
    }
    if let Some(e) = &query.error {
        return page(
            StatusCode::BAD_REQUEST,
            &format!(
                "the authorization server refused the login to '{}' ({e})",
                login.server
            ),
        );
    }
    let server = login.server.clone();
    let cookie = cookie_name(&query.state);
    let nonce = state.logins.hold(Confirming {
        login,
        query: req.query_string().to_owned(),
    });
    confirm_page(&server, &user, &nonce, &cookie)
}

/// The form of `POST /api/mcp/oauth/confirm`.
#[derive(Debug, serde::Deserialize)]
pub struct ConfirmForm {
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    cookie: String,
}

/// `POST /api/mcp/oauth/confirm` (a same-origin form, the starting browser's cookie): has
/// mcp-host complete the login the page named.
pub async fn confirm(
    state: web::Data<State>,
    req: HttpRequest,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let held = match state.logins.confirm(&form.nonce) {
        Ok(held) => held,
        Err(refusal) => return page(StatusCode::BAD_REQUEST, &refusal.to_string()),
    };
    let login = held.login;
    let bound = form.cookie.starts_with(COOKIE_PREFIX)
        && req
            .cookie(&form.cookie)
            .is_some_and(|c| super::principal::same(c.value(), &login.binding));
    if !bound {
        let user = login
            .user
            .clone()
            .unwrap_or_else(|| antler_protocol::config::OPERATOR_USER.to_owned());
        return page(
            StatusCode::FORBIDDEN,
            &OTHER_BROWSER.replacen("{user}", &user, 1),
        );
    }
    let redirected = format!("{}?{}", login.redirect_uri, held.query);
    let (server, user) = (login.server.clone(), login.user.clone());
    let completed = mcp_host_call(&state.supervisor, Some(login.replica), async |host| {
        host.oauth_complete(server, user, redirected, COMPLETE_TIMEOUT)
            .await
    })
    .await;
    match completed {
        Ok((_, (server, user))) => {
            tracing::info!(%server, %user, "OAuth login completed through the gateway");
            page(
                StatusCode::OK,
                &format!("Logged in to '{server}' as '{user}'. You can close this window."),
            )
        }
        Err(e) => page(e.status(), &format!("The login did not complete: {e}")),
    }
}

/// The page that names who is being linked and asks to confirm (a form posting to
/// [`CONFIRM_PATH`]; no script).
fn confirm_page(server: &str, user: &str, nonce: &str, cookie: &str) -> HttpResponse {
    let title = "Antler: confirm the login";
    HttpResponse::Ok()
        .insert_header(("content-type", "text/html; charset=utf-8"))
        .insert_header(("cache-control", "no-store"))
        .insert_header(("referrer-policy", "no-referrer"))
        .insert_header((
            "content-security-policy",
            "default-src 'none'; form-action 'self'; frame-ancestors 'none'",
        ))
        .body(format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
             <body><h1>{title}</h1><p>{}</p>\
             <form method=\"post\" action=\"{CONFIRM_PATH}\">\
             <input type=\"hidden\" name=\"nonce\" value=\"{}\">\
             <input type=\"hidden\" name=\"cookie\" value=\"{}\">\
             <button type=\"submit\">Link</button></form></body></html>\n",
            escape(&format!(
                "Link your account at '{server}' to Antler user '{user}'?"
            )),
            escape(nonce),
            escape(cookie)
        ))
}

/// A small HTML page that says `text` (escaped), never cached, sending no referrer on.
fn page(status: StatusCode, text: &str) -> HttpResponse {
    let text = escape(text);
    let title = if status.is_success() {
        "Antler: logged in"
    } else {
        "Antler: login failed"
    };
    HttpResponse::build(status)
        .insert_header(("content-type", "text/html; charset=utf-8"))
        .insert_header(("cache-control", "no-store"))
        .insert_header(("referrer-policy", "no-referrer"))
        .insert_header(("content-security-policy", "default-src 'none'"))
        .body(format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
             <body><h1>{title}</h1><p>{text}</p></body></html>\n"
        ))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn login(deadline: Instant) -> PendingLogin {
        PendingLogin {
            server: "notes".into(),
            user: Some("alice".into()),
            replica: 0,
            redirect_uri: "http://127.0.0.1:1/api/mcp/oauth/callback".into(),
            deadline,
            binding: "b".into(),
        }
    }

    #[test]
    fn a_state_is_taken_once_and_an_expired_one_is_refused() {
        let states = LoginStates::default();
        states.issue("s1".into(), login(Instant::now() + STATE_DEADLINE));
        assert_eq!(states.take("s1").unwrap().user.as_deref(), Some("alice"));
        assert_eq!(states.take("s1"), Err(StateRefusal::Unknown));
        assert_eq!(states.take("forged"), Err(StateRefusal::Unknown));
        assert_eq!(states.take(""), Err(StateRefusal::Missing));
        states.issue("old".into(), login(Instant::now() - Duration::from_secs(1)));
        assert_eq!(states.take("old"), Err(StateRefusal::Expired));
    }

    #[test]
    fn the_page_escapes_what_it_says() {
        use actix_web::body::MessageBody;
        let p = page(StatusCode::BAD_REQUEST, "<script>x</script>");
        let body = p.into_body().try_into_bytes().unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("&lt;script&gt;"), "{body}");
        assert!(!body.contains("<script>"), "{body}");
    }
}
