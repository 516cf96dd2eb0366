//! `FixedGrant`: DeerFlow's OAuth (spec 5.4), a fixed `token_url`: the grant's immutable
//! config and HTTP client, and the token request. The token, its expiry and the (possibly
//! rotated) refresh token are the server's `TokenActor`'s (`token`), which reuses a token
//! until `expires_at - skew` and runs one fetch at a time however many calls wait. Tokens
//! and secrets never appear in logs or errors.

use std::{
    sync::Arc,
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

/// A token fetched from the token endpoint.
pub struct Fetched {
    /// The `Authorization` value.
    pub header: String,
    /// Reused until then (`expires_at - skew`).
    pub fresh_until: Instant,
    /// The refresh token the endpoint rotated to, if it sent one.
    pub rotated: Option<String>,
}

/// One server's fixed grant: its config and HTTP client.
pub struct FixedGrant {
    config: McpOAuthConfig,
    /// `None` when no client could be built (every fetch then fails with why).
    http: Option<reqwest::Client>,
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
        Arc::new(Self {
            // The form carries the client secret: a redirect never takes it elsewhere.
            http: reqwest::Client::builder()
                .timeout(TOKEN_TIMEOUT)
                .redirect(crate::transport::origin::redirect_policy())
                .build()
                .ok(),
            config,
        })
    }

    /// The configured refresh token (the first one, before any rotation).
    pub fn configured_refresh_token(&self) -> Option<String> {
        self.config.refresh_token.clone()
    }

    /// The token request's form, with `refresh_token` for the refresh_token grant.
    fn form(&self, refresh_token: Option<&str>) -> Result<String, OAuthError> {
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
                let rt = refresh_token.filter(|r| !r.is_empty());
                if rt.is_none() {
                    return Err(OAuthError::MissingRefreshToken);
                }
                set("refresh_token", rt.map(str::to_owned));
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

    /// Fetches a token now (with `refresh_token` for the refresh_token grant).
    pub async fn fetch(&self, refresh_token: Option<String>) -> Result<Fetched, OAuthError> {
        let c = &self.config;
        let body = self.form(refresh_token.as_deref())?;
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
        let rotated = json
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        // "Bearer" is written with a capital B whatever case the server used.
        let token_type = if token_type.eq_ignore_ascii_case("bearer") {
            "Bearer"
        } else {
            token_type
        };
        let expires_at = Instant::now() + Duration::from_secs(expires_in);
        let skew = Duration::from_secs(c.refresh_skew_seconds.max(0) as u64);
        Ok(Fetched {
            header: format!("{token_type} {access}"),
            fresh_until: expires_at.checked_sub(skew).unwrap_or_else(Instant::now),
            rotated,
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
        let form = a.form(None).unwrap();
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
        assert_eq!(
            a.form(None).err(),
            Some(OAuthError::MissingClientCredentials)
        );
        let b = actor(r#"{"token_url": "http://x/t", "grant_type": "refresh_token"}"#);
        assert_eq!(
            b.form(b.configured_refresh_token().as_deref()).err(),
            Some(OAuthError::MissingRefreshToken)
        );
    }
}
