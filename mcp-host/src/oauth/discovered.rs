//! `DiscoveredAuth`: the token of one (server, user) at endpoints discovered from the
//! server, per the MCP authorization spec, on rmcp's `AuthorizationManager`: protected
//! resource metadata (the challenge's `resource_metadata`, then the well-known paths),
//! authorization-server or OpenID metadata, then a client (pre-registered, a metadata
//! document URL, or dynamic registration), PKCE S256 and `resource`. `DiscoveredGrant`
//! is what never changes (the server, user, URL, config and the shared store) and the
//! requests; what changes (the configured manager, the refused token, the last challenge,
//! step-up scopes, the logins waiting for their redirect) is [`DiscoveredState`], owned by
//! the (server, user)'s `TokenActor`, which caches the `Authorization` value until
//! `expires_at - skew` and then refreshes it (or, for client_credentials, fetches it
//! again) once however many calls wait. Tokens live in the `TokenStore`.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{login, store::TokenStore, OAuthError};
use antler_protocol::config::{McpOAuthConfig, OAuthFlow};
use oauth2::TokenResponse;
use rmcp::transport::auth::CredentialStore;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, ClientCredentialsConfig, OAuthClientConfig, OAuthTokenResponse,
    StoredCredentials,
};

/// Scope step-ups tried for one token before a 403 is final.
pub const MAX_STEP_UPS: u32 = 2;
/// The client name sent in dynamic registration.
const CLIENT_NAME: &str = "Antler";

/// Where a login of this (server, user) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginState {
    Idle,
    Pending,
    Done,
    Failed(String),
}

/// A token the grant got: its `Authorization` value and until when it is reused.
pub struct Fetched {
    pub header: String,
    pub fresh_until: Instant,
    /// It came from the token endpoint (not the store): a refused token is forgotten.
    pub from_endpoint: bool,
}

/// What changes for one (server, user)'s discovered grant, owned by its `TokenActor`.
#[derive(Default)]
pub struct DiscoveredState {
    /// An `Authorization` value the server refused: the next fetch does not return it.
    pub rejected: Option<String>,
    /// The last `WWW-Authenticate` challenge the server sent.
    pub challenge: Option<String>,
    /// Scopes a 403 asked for beyond the configured ones.
    pub extra_scopes: Vec<String>,
    pub step_ups: u32,
    /// The configured manager (out of the state while a refresh uses it).
    pub manager: Option<AuthorizationManager>,
    /// The logins waiting for their redirect, by their `state` (each has its own PKCE
    /// verifier: a redirect completes the login that sent it, never another).
    pub sessions: HashMap<String, AuthorizationSession>,
}

/// What a token request needs of the state, copied (and the manager taken) out of it.
pub struct Ask {
    pub rejected: Option<String>,
    pub challenge: Option<String>,
    pub scopes: Vec<String>,
    pub manager: Option<AuthorizationManager>,
}

/// The discovered-endpoint grant of one (server, user): what never changes.
pub struct DiscoveredGrant {
    server: String,
    user: String,
    url: String,
    config: McpOAuthConfig,
    store: Arc<TokenStore>,
}

impl std::fmt::Debug for DiscoveredGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveredGrant")
            .field("server", &self.server)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

fn now_secs() -> u64 {
    antler_protocol::sys::unix_ms() / 1000
}

/// A said-for-the-operator text of an rmcp auth error (never carries a token).
fn said(e: &AuthError) -> String {
    e.to_string()
}

impl DiscoveredGrant {
    pub fn new(
        server: &str,
        user: &str,
        url: &str,
        config: McpOAuthConfig,
        store: Arc<TokenStore>,
    ) -> Arc<Self> {
        Arc::new(Self {
            server: server.to_owned(),
            user: user.to_owned(),
            url: url.to_owned(),
            config,
            store,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn is_login(&self) -> bool {
        self.config.flow() == OAuthFlow::AuthorizationCode
    }

    fn skew(&self) -> u64 {
        self.config.refresh_skew_seconds.max(0) as u64
    }

    /// The token of a token endpoint's answer, reused until `expires_in - skew`.
    pub fn fetched(&self, t: &OAuthTokenResponse) -> Fetched {
        let header = format!("Bearer {}", t.access_token().secret());
        let e = t.expires_in().map(|d| d.as_secs()).unwrap_or(3600).max(1);
        let left = e.saturating_sub(self.skew().min(e / 2)).max(1);
        Fetched {
            header,
            fresh_until: Instant::now() + Duration::from_secs(left),
            from_endpoint: true,
        }
    }

    /// The `Authorization` value: stored, refreshed or (client_credentials, enterprise)
    /// fetched. `Ok(None)`: no token, and only a login gets one. The manager goes back to
    /// the state with the answer (`None`: it is to be configured again).
    pub async fn fetch(
        self: Arc<Self>,
        ask: Ask,
    ) -> (
        Result<Option<Fetched>, OAuthError>,
        Option<AuthorizationManager>,
    ) {
        let Ask {
            rejected,
            challenge,
            scopes,
            mut manager,
        } = ask;
        let stored = self.store.get(&self.server, &self.user);
        let usable = stored.as_ref().and_then(|s| {
            let t = s.token_response.as_ref()?;
            let header = format!("Bearer {}", t.access_token().secret());
            if rejected.as_deref() == Some(header.as_str()) {
                return None;
            }
            let left = match (t.expires_in(), s.token_received_at) {
                (Some(e), Some(at)) => {
                    let e = e.as_secs();
                    let left = e.saturating_sub(now_secs().saturating_sub(at));
                    let buffer = self.skew().min(e / 2);
                    Some(left.saturating_sub(buffer))
                }
                _ => None,
            };
            match left {
                Some(0) => None,
                Some(s) => Some((header, Duration::from_secs(s))),
                None => Some((header, Duration::from_secs(3600))),
            }
        });
        if let Some((header, left)) = usable {
            let fetched = Fetched {
                header,
                fresh_until: Instant::now() + left,
                from_endpoint: false,
            };
            return (Ok(Some(fetched)), manager);
        }
        // Refresh when there is a refresh token; else fetch (client_credentials) or login.
        let has_refresh = stored
            .as_ref()
            .and_then(|s| s.token_response.as_ref())
            .is_some_and(|t| t.refresh_token().is_some());
        if has_refresh {
            if manager.is_none() {
                match self.restore(stored.as_ref(), challenge.as_deref()).await {
                    Ok(m) => manager = Some(m),
                    Err(e) => return (Err(e), None),
                }
            }
            if let Some(m) = manager.as_ref() {
                match m.refresh_token().await {
                    Ok(t) => return (Ok(Some(self.fetched(&t))), manager),
                    Err(e) => {
                        tracing::warn!(server = %self.server, "OAuth refresh failed: {}", said(&e));
                        if !self.is_login() {
                            manager = None;
                        } else {
                            let needed = OAuthError::LoginNeeded {
                                server: self.server.clone(),
                                user: self.user.clone(),
                                reason: format!("the refresh failed ({})", said(&e)),
                            };
                            return (Err(needed), manager);
                        }
                    }
                }
            }
        }
        let got = match self.config.flow() {
            OAuthFlow::DiscoveredClientCredentials => {
                self.client_credentials(challenge.as_deref(), scopes).await
            }
            OAuthFlow::EnterpriseManaged => {
                self.enterprise_managed(challenge.as_deref(), &scopes).await
            }
            _ => return (Ok(None), manager),
        };
        (got.map(|t| Some(self.fetched(&t))), manager)
    }

    /// A manager with discovered metadata, bound to this (server, user)'s store slot.
    async fn discover(
        &self,
        challenge: Option<&str>,
    ) -> Result<(AuthorizationManager, AuthorizationMetadata), OAuthError> {
        let fail = |e: AuthError| OAuthError::Discovery {
            server: self.server.clone(),
            reason: said(&e),
        };
        let mut m = AuthorizationManager::new(self.url.as_str())
            .await
            .map_err(fail)?;
        m.set_credential_store(self.store.slot(&self.server, &self.user));
        let metadata = match m.resolve_metadata_from_challenge(challenge).await {
            Ok(resolved) => resolved.metadata,
            Err(e @ AuthError::AuthorizationServerMismatch { .. }) => {
                // A 2025-03-26 server: no protected-resource metadata, and the
                // authorization server's metadata at the root of the MCP server's own
                // origin, whose issuer that revision did not ask to match. It is the
                // server's own word, so it is taken (with a warning), not refused.
                let Some(md) = self.origin_metadata().await else {
                    return Err(fail(e));
                };
                tracing::warn!(
                    server = %self.server,
                    "the authorization server metadata at the MCP server's origin names another issuer ({}); using it as MCP 2025-03-26 did",
                    said(&e)
                );
                md
            }
            Err(e) => return Err(fail(e)),
        };
        m.set_metadata(metadata.clone());
        Ok((m, metadata))
    }

    /// Enterprise-managed authorization (SEP-990): the configured ID token exchanged at
    /// the identity provider for an ID-JAG (RFC 8693, audience the MCP server's
    /// authorization server, resource the MCP server), then that assertion presented at
    /// the discovered token endpoint as a JWT bearer grant (RFC 7523), this client
    /// authenticated with its secret (HTTP Basic, else in the form).
    async fn enterprise_managed(
        &self,
        challenge: Option<&str>,
        scopes: &[String],
    ) -> Result<OAuthTokenResponse, OAuthError> {
        const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
        const ID_TOKEN: &str = "urn:ietf:params:oauth:token-type:id_token";
        const ID_JAG: &str = "urn:ietf:params:oauth:token-type:id-jag";
        let c = &self.config;
        let (Some(idp), Some(subject), Some(client_id)) = (
            c.idp_token_endpoint.as_deref(),
            c.subject_token.as_deref(),
            c.client_id.as_deref(),
        ) else {
            return Err(OAuthError::Config(
                "oauth.grant_type jwt_bearer needs idp_token_endpoint, subject_token and client_id"
                    .into(),
            ));
        };
        let (_, metadata) = self.discover(challenge).await?;
        let audience = metadata
            .issuer
            .clone()
            .unwrap_or_else(|| metadata.authorization_endpoint.clone());
        let http = oauth_http(idp)?;
        let scope = scopes.join(" ");
        let mut exchange = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", subject),
            ("subject_token_type", ID_TOKEN),
            ("requested_token_type", ID_JAG),
            ("audience", audience.as_str()),
            ("resource", self.url.as_str()),
        ];
        if !scope.is_empty() {
            exchange.push(("scope", scope.as_str()));
        }
        let mut req = http.post(idp);
        match (c.idp_client_id.as_deref(), c.idp_client_secret.as_deref()) {
            (Some(id), Some(secret)) => req = req.basic_auth(id, Some(secret)),
            (Some(id), None) => exchange.push(("client_id", id)),
            _ => {}
        }
        let assertion = token_post(with_form(req, &exchange), idp).await?;
        let assertion = assertion["access_token"]
            .as_str()
            .ok_or_else(|| OAuthError::MissingField("access_token".into()))?
            .to_owned();
        let token_url = metadata.token_endpoint.clone();
        let mut grant = vec![
            ("grant_type", antler_protocol::config::JWT_BEARER_GRANT),
            ("assertion", assertion.as_str()),
            ("resource", self.url.as_str()),
        ];
        if !scope.is_empty() {
            grant.push(("scope", scope.as_str()));
        }
        let mut req = http.post(&token_url);
        match c.client_secret.as_deref() {
            Some(secret) => req = req.basic_auth(client_id, Some(secret)),
            None => grant.push(("client_id", client_id)),
        }
        let token = token_post(with_form(req, &grant), &token_url).await?;
        serde_json::from_value(token).map_err(|_| OAuthError::MissingField("access_token".into()))
    }

    /// The authorization server metadata at `/.well-known/oauth-authorization-server`
    /// of the MCP server's origin (MCP 2025-03-26's authorization base URL).
    async fn origin_metadata(&self) -> Option<AuthorizationMetadata> {
        let mut url = url::Url::parse(&self.url).ok()?;
        url.set_path("/.well-known/oauth-authorization-server");
        url.set_query(None);
        url.set_fragment(None);
        let http = oauth_http(url.as_str()).ok()?;
        let resp = http.get(url).send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let md: AuthorizationMetadata = serde_json::from_slice(&resp.bytes().await.ok()?).ok()?;
        (!md.authorization_endpoint.is_empty() && !md.token_endpoint.is_empty()).then_some(md)
    }

    /// The manager for stored credentials (after a restart): metadata again, the stored
    /// client id, and the configured secret if the client is the configured one.
    async fn restore(
        &self,
        stored: Option<&StoredCredentials>,
        challenge: Option<&str>,
    ) -> Result<AuthorizationManager, OAuthError> {
        let (mut m, _) = self.discover(challenge).await?;
        if let Some(s) = stored {
            let mut client = OAuthClientConfig::new(s.client_id.clone(), self.url.clone());
            if self.config.client_id.as_deref() == Some(s.client_id.as_str()) {
                if let Some(secret) = self.config.client_secret.clone() {
                    client = client.with_client_secret(secret);
                }
            }
            m.configure_client(client)
                .map_err(|e| OAuthError::Discovery {
                    server: self.server.clone(),
                    reason: said(&e),
                })?;
        }
        Ok(m)
    }

    /// The configured scopes, then those step-ups added (`extra`).
    pub fn scopes(&self, extra: &[String]) -> Vec<String> {
        let mut s: Vec<String> = self
            .config
            .scope
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        for x in extra {
            if !s.contains(x) {
                s.push(x.clone());
            }
        }
        s
    }

    /// client_credentials at the discovered token endpoint: the secret (basic or post, as
    /// the metadata names) or a signed JWT (`private_key_jwt`).
    async fn client_credentials(
        &self,
        challenge: Option<&str>,
        mut scopes: Vec<String>,
    ) -> Result<OAuthTokenResponse, OAuthError> {
        let c = &self.config;
        let client_id = c
            .client_id
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or(OAuthError::MissingClientCredentials)?;
        let (mut m, metadata) = self.discover(challenge).await?;
        let fail = |e: AuthError| OAuthError::Request {
            url: self.url.clone(),
            reason: said(&e),
        };
        if scopes.is_empty() {
            if let Some(challenged) = challenge.and_then(challenge_scope) {
                scopes = challenged;
            }
        }
        if let Some(pem) = c.private_key_pem.clone().filter(|p| !p.trim().is_empty()) {
            let t = super::jwt::exchange(
                &metadata,
                &client_id,
                &pem,
                c.signing_algorithm.as_deref(),
                &scopes,
                &self.url,
            )
            .await?;
            let stored =
                StoredCredentials::new(client_id, Some(t.clone()), scopes, Some(now_secs()));
            self.store
                .slot(&self.server, &self.user)
                .save(stored)
                .await
                .map_err(fail)?;
            return Ok(t);
        }
        let secret = c
            .client_secret
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or(OAuthError::MissingClientCredentials)?;
        let cc = ClientCredentialsConfig::ClientSecret {
            client_id,
            client_secret: secret,
            scopes,
            resource: Some(self.url.clone()),
        };
        if let Err(e) = m.validate_client_credentials_metadata(&cc) {
            // Metadata that names no secret method (`none` only) is a hint, not a refusal:
            // the configured secret is sent, as the operator asked.
            tracing::warn!(server = %self.server, "{}", said(&e));
        }
        m.configure_client_credentials(&cc).map_err(fail)?;
        m.exchange_client_credentials(&cc).await.map_err(fail)
    }

    /// A 403 `insufficient_scope`: the challenged scopes are added to `state` and the
    /// token held is refused, so a new one is fetched (client_credentials), at most
    /// [`MAX_STEP_UPS`] times. True: try again.
    pub fn step_up(&self, state: &mut DiscoveredState, challenge: &str) -> bool {
        let Some(wanted) = challenge_scope(challenge) else {
            return false;
        };
        if state.step_ups >= MAX_STEP_UPS {
            return false;
        }
        state.step_ups += 1;
        for s in wanted {
            if !state.extra_scopes.contains(&s) {
                state.extra_scopes.push(s);
            }
        }
        state.challenge = Some(challenge.to_owned());
        if let Some(s) = self.store.get(&self.server, &self.user) {
            if let Some(t) = s.token_response.as_ref() {
                state.rejected = Some(format!("Bearer {}", t.access_token().secret()));
            }
        }
        true
    }

    /// Starts a login: discovery, a client, and the authorization URL (PKCE S256,
    /// `resource`, `scopes` by the spec's rules plus `offline_access` when offered). With
    /// no `redirect_uri` a loopback listener is started to take the redirect: the answer
    /// carries the redirect it receives.
    pub async fn start_login(
        self: Arc<Self>,
        redirect_uri: Option<String>,
        challenge: Option<String>,
        scopes: Vec<String>,
    ) -> Result<LoginStarted, OAuthError> {
        let (redirect_uri, callback) = match redirect_uri {
            Some(r) => (r, None),
            None => {
                let cb = login::listen(login::LOGIN_DEADLINE)
                    .await
                    .map_err(|e| OAuthError::Login(format!("cannot listen on loopback: {e}")))?;
                (cb.redirect_uri.clone(), Some(cb.redirected))
            }
        };
        let (m, _) = self.discover(challenge.as_deref()).await?;
        let c = &self.config;
        let mut request = AuthorizationRequest::new(redirect_uri).with_client_name(CLIENT_NAME);
        if let Some(id) = c.client_id.clone().filter(|s| !s.is_empty()) {
            request = request.with_preregistered_client(id);
            if let Some(secret) = c.client_secret.clone().filter(|s| !s.is_empty()) {
                request = request.with_client_secret(secret);
            }
        } else if let Some(u) = c.client_metadata_url.clone() {
            request = request.with_client_metadata_url(u);
        }
        if !scopes.is_empty() {
            request = request.with_scopes(scopes);
        } else {
            request = request.with_initial_scope_selection();
        }
        let session = AuthorizationSession::new(m, request)
            .await
            .map_err(|(_, e)| OAuthError::Login(said(&e)))?;
        let url = session.get_authorization_url().to_owned();
        let state = query_param(&url, "state").unwrap_or_default();
        Ok(LoginStarted {
            session,
            url,
            state,
            callback,
        })
    }

    /// Completes `session` with the redirect URL the browser was sent to: its token and
    /// the configured manager, or why not.
    pub async fn complete_login(
        session: AuthorizationSession,
        redirected: String,
    ) -> Result<(OAuthTokenResponse, AuthorizationManager), OAuthError> {
        match session.handle_callback_url(&redirected).await {
            Ok(t) => Ok((t, session.auth_manager)),
            Err(e) => Err(OAuthError::Login(said(&e))),
        }
    }
}

/// A login started: its session (waiting for the redirect), the URL to open, its `state`,
/// and the loopback listener's redirect when no `redirect_uri` was given.
pub struct LoginStarted {
    pub session: AuthorizationSession,
    pub url: String,
    pub state: String,
    pub callback: Option<tokio::sync::oneshot::Receiver<String>>,
}

/// The HTTP client of this host's own OAuth requests (metadata, token endpoints): a
/// deadline, and the origin-checked redirect policy every MCP request has.
pub(super) fn oauth_http(url: &str) -> Result<reqwest::Client, OAuthError> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .redirect(crate::transport::origin::redirect_policy())
        .build()
        .map_err(|_| OAuthError::Request {
            url: url.to_owned(),
            reason: "cannot build an HTTP client".into(),
        })
}

/// `req` with `pairs` as its `application/x-www-form-urlencoded` body.
fn with_form(req: reqwest::RequestBuilder, pairs: &[(&str, &str)]) -> reqwest::RequestBuilder {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    req.header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body)
}

/// A token endpoint's JSON answer, or why there is none (its `error` said, never the
/// request's secrets).
async fn token_post(
    req: reqwest::RequestBuilder,
    url: &str,
) -> Result<serde_json::Value, OAuthError> {
    let failed = |reason: String| OAuthError::Request {
        url: url.to_owned(),
        reason,
    };
    let resp = req
        .send()
        .await
        .map_err(|e| failed(e.without_url().to_string()))?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.map_err(|_| OAuthError::NotJson)?;
    if !status.is_success() {
        let error = body["error"].as_str().unwrap_or("error");
        let description = body["error_description"].as_str().unwrap_or("");
        return Err(failed(
            format!("HTTP {status}: {error} {description}")
                .trim()
                .to_owned(),
        ));
    }
    Ok(body)
}

/// Logins waiting for a redirect at most, per (server, user).
pub const MAX_PENDING_LOGINS: usize = 16;

/// A query parameter of a URL.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The `scope` of a `WWW-Authenticate` challenge, split.
pub fn challenge_scope(challenge: &str) -> Option<Vec<String>> {
    let at = challenge.find("scope=")?;
    let rest = &challenge[at + "scope=".len()..];
    let value = if let Some(q) = rest.strip_prefix('"') {
        q.split('"').next().unwrap_or("")
    } else {
        rest.split([',', ' ']).next().unwrap_or("")
    };
    let v: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
    (!v.is_empty()).then_some(v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_names_the_scopes() {
        assert_eq!(
            challenge_scope(
                r#"Bearer error="insufficient_scope", scope="mcp admin", resource_metadata="x""#
            ),
            Some(vec!["mcp".to_owned(), "admin".to_owned()])
        );
        assert_eq!(challenge_scope(r#"Bearer resource_metadata="x""#), None);
        assert_eq!(
            challenge_scope("Bearer scope=mcp, error=insufficient_scope"),
            Some(vec!["mcp".to_owned()])
        );
    }
}
