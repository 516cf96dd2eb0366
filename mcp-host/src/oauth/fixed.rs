//! `FixedGrant`: DeerFlow's OAuth (spec 5.4), a fixed `token_url`. Owns the access token, its expiry and the
//! (possibly rotated) refresh token. A cached token is reused until `expires_at - skew`;
//! one fetch runs at a time per server however many calls wait (the fetch gate is the only
//! lock held across an await, and only by the one caller doing the fetch). Tokens and
//! secrets never appear in logs or errors.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use antler_protocol::config::{GrantType, McpOAuthConfig, OAuthFlow};

use super::OAuthError;
use reqwest::{header::CONTENT_TYPE, Url};
use serde_json::Value;

/// The token endpoint's timeout (DeerFlow's httpx timeout).
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);
/// `expires_in` when the response has none or an invalid one.
const DEFAULT_EXPIRES_IN: u64 = 3600;

#[derive(Clone)]
struct Token {
    header: String,
    expires_at: Instant,
}

/// The token state of one server.
pub struct FixedGrant {
    config: McpOAuthConfig,
    /// `None` when no client could be built (every fetch then fails with why).
    http: Option<reqwest::Client>,
    cached: Mutex<Option<Token>>,
    refresh_token: Mutex<Option<String>>,
    fetch_gate: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for FixedGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedGrant")
            .field("token_url", &self.config.token_url)
            .finish_non_exhaustive()
    }
}

impl FixedGrant {
    pub fn new(config: McpOAuthConfig) -> Arc<Self> {
        let refresh = config.refresh_token.clone();
        Arc::new(Self {
            // The form carries the client secret: a redirect never takes it elsewhere.
            http: reqwest::Client::builder()
                .timeout(TOKEN_TIMEOUT)
                .redirect(crate::transport::origin::redirect_policy())
                .build()
                .ok(),
            config,
            cached: Mutex::new(None),
            refresh_token: Mutex::new(refresh),
            fetch_gate: tokio::sync::Mutex::new(()),
        })
    }

    pub fn fresh(&self) -> Option<String> {
        let skew = Duration::from_secs(self.config.refresh_skew_seconds.max(0) as u64);
        let cached = self.cached.lock().ok()?;
        cached
            .as_ref()
            .filter(|t| t.expires_at > Instant::now() + skew)
            .map(|t| t.header.clone())
    }

    /// The `Authorization` value: the cached token while fresh, else one fetched now.
    pub async fn authorization(&self) -> Result<String, OAuthError> {
        if let Some(h) = self.fresh() {
            return Ok(h);
        }
        let _gate = self.fetch_gate.lock().await;
        if let Some(h) = self.fresh() {
            return Ok(h);
        }
        let token = self.fetch().await?;
        let header = token.header.clone();
        if let Ok(mut c) = self.cached.lock() {
            *c = Some(token);
        }
        Ok(header)
    }

    /// Forgets the cached token if it is still `rejected` (the server answered 401 with it),
    /// so the next `authorization` fetches a new one.
    pub fn invalidate(&self, rejected: &str) {
        if let Ok(mut c) = self.cached.lock() {
            if c.as_ref().is_some_and(|t| t.header == rejected) {
                *c = None;
            }
        }
    }

    fn form(&self) -> Result<String, OAuthError> {
        let c = &self.config;
        let mut fields: Vec<(String, String)> = c
            .extra_token_params
            .iter()
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect();
        let mut set = |k: &str, v: Option<String>| {
            fields.retain(|(key, _)| key != k);
            if let Some(v) = v {
                fields.push((k.to_owned(), v));
            }
        };
        let grant = match c.flow() {
            OAuthFlow::Fixed(g) => g,
            _ => GrantType::ClientCredentials,
        };
        set("grant_type", Some(grant.as_str().to_owned()));
        match grant {
            GrantType::ClientCredentials => {
                if c.client_id.as_deref().unwrap_or("").is_empty()
                    || c.client_secret.as_deref().unwrap_or("").is_empty()
                {
                    return Err(OAuthError::MissingClientCredentials);
                }
            }
            GrantType::RefreshToken => {
                let rt = self.refresh_token.lock().ok().and_then(|r| r.clone());
                if rt.as_deref().unwrap_or("").is_empty() {
                    return Err(OAuthError::MissingRefreshToken);
                }
                set("refresh_token", rt);
            }
            GrantType::AuthorizationCode | GrantType::JwtBearer => {}
        }
        set("scope", c.scope.clone());
        set("audience", c.audience.clone());
        set("client_id", c.client_id.clone());
        set("client_secret", c.client_secret.clone());
        let mut u = Url::parse("http://form.invalid/").map_err(|_| OAuthError::NotJson)?;
        u.query_pairs_mut().extend_pairs(fields.iter());
        Ok(u.query().unwrap_or("").to_owned())
    }

    async fn fetch(&self) -> Result<Token, OAuthError> {
        let c = &self.config;
        let body = self.form()?;
        let url = c.token_url.clone().unwrap_or_default();
        let http = self.http.as_ref().ok_or_else(|| OAuthError::Request {
            url: url.clone(),
            reason: "cannot build an HTTP client".into(),
        })?;
        let resp = http
            .post(&url)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| OAuthError::Request {
                url: url.clone(),
                reason: if e.is_timeout() {
                    "timed out".into()
                } else if e.is_redirect() {
                    "refused a redirect to another origin".into()
                } else if e.is_connect() {
                    "cannot connect".into()
                } else {
                    "request failed".into()
                },
            })?;
        if !resp.status().is_success() {
            return Err(OAuthError::Status {
                url,
                status: resp.status().as_u16(),
            });
        }
        let json: Value = resp.json().await.map_err(|_| OAuthError::NotJson)?;
        let access = json
            .get(&c.token_field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| OAuthError::MissingField(c.token_field.clone()))?;
        let token_type = json
            .get(&c.token_type_field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(&c.default_token_type);
        let expires_in = match json.get(&c.expires_in_field) {
            Some(Value::Number(n)) => n.as_f64().filter(|x| *x > 0.0).map(|x| x as u64),
            Some(Value::String(s)) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0)
                .map(|x| x as u64),
            _ => None,
        }
        .unwrap_or(DEFAULT_EXPIRES_IN)
        .max(1);
        if let Some(rotated) = json
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            if let Ok(mut r) = self.refresh_token.lock() {
                *r = Some(rotated.to_owned());
            }
        }
        // "Bearer" is written with a capital B whatever case the server used.
        let token_type = if token_type.eq_ignore_ascii_case("bearer") {
            "Bearer"
        } else {
            token_type
        };
        Ok(Token {
            header: format!("{token_type} {access}"),
            expires_at: Instant::now() + Duration::from_secs(expires_in),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn actor(json: &str) -> Arc<FixedGrant> {
        FixedGrant::new(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn reserved_fields_override_the_extras() {
        let a = actor(
            r#"{"token_url": "http://127.0.0.1:1/t", "client_id": "id", "client_secret": "s",
                "scope": "read", "extra_token_params": {"scope": "evil", "grant_type": "password", "resource": "r"}}"#,
        );
        let form = a.form().unwrap();
        assert!(form.contains("resource=r"), "{form}");
        assert!(
            form.contains("scope=read") && !form.contains("evil"),
            "{form}"
        );
        assert!(
            form.contains("grant_type=client_credentials") && !form.contains("password"),
            "{form}"
        );
    }

    #[test]
    fn grants_need_their_fields() {
        let a = actor(r#"{"token_url": "http://x/t", "client_id": "id"}"#);
        assert_eq!(a.form().err(), Some(OAuthError::MissingClientCredentials));
        let b = actor(r#"{"token_url": "http://x/t", "grant_type": "refresh_token"}"#);
        assert_eq!(b.form().err(), Some(OAuthError::MissingRefreshToken));
    }
}
