//! Who a gateway request acts for. [`Authenticator`] maps a bearer token to a
//! [`Principal`]: the cluster's gateway token is the operator; a static token of
//! `antler.gateway.tokens` is its user; a JWT is verified against the configured JWKS
//! (signature by a key of the set, `iss`, `aud`, `exp` and `nbf` with the leeway, RS256 or
//! ES256 only; `exp`, `iss` and `aud` required) and acts as the user its user claim names,
//! behind the configured `user_prefix` (`jwt-`), so a JWT's `sub` never names a static
//! token's user or the operator's own (`default`). A JWKS from a URL is fetched at
//! start, every `refresh_s`, and when a token names a key the set lacks (at most every
//! [`MIN_REFETCH`]). Verification is synchronous and never waits on the network: a token
//! whose key is not known yet is refused, and the refetch it starts lets the next one in.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use antler_protocol::config::{valid_user, GatewaySection, JwtSection};
use jsonwebtoken::{jwk::JwkSet, Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// The least time between two fetches of a JWKS URL.
pub const MIN_REFETCH: Duration = Duration::from_secs(10);
/// How long a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// Who a request acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user its runs belong to; `None` for the cluster's own token (the operator, who
    /// names the user of a run it starts).
    pub user: Option<String>,
    /// Its role, for the catalog's authorization policy.
    pub role: Option<String>,
    /// Sees and answers every run; may use the MCP config routes and `/metrics`.
    pub operator: bool,
}

impl Principal {
    /// Whether this principal may see a run of `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        self.operator || self.user.as_deref() == Some(owner)
    }
}

/// Why a bearer token was refused (logged; the client sees only 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenRefusal {
    #[error("no bearer token")]
    Missing,
    #[error("the token matches no principal")]
    Unknown,
    #[error("the JWT does not verify: {0}")]
    Jwt(String),
    #[error("the JWT names key {0:?}, which the JWKS does not hold")]
    UnknownKey(String),
    #[error("the JWT's {claim} claim is not a user id (letters, digits, - and _)")]
    BadUser { claim: String },
}

/// Why the principals could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PrincipalsError {
    #[error("cannot read the JWKS {path}: {source}")]
    ReadJwks {
        path: String,
        source: std::io::Error,
    },
    #[error("the JWKS {origin} is not a JSON Web Key Set: {source}")]
    ParseJwks {
        origin: String,
        source: serde_json::Error,
    },
}

/// Maps bearer tokens to principals.
pub struct Authenticator {
    /// The cluster's gateway token: the operator.
    cluster_token: String,
    statics: Vec<(String, Principal)>,
    operator_role: String,
    jwt: Option<Arc<JwtVerifier>>,
}

impl Authenticator {
    /// The principals of `config` beside the cluster's `cluster_token`; a relative
    /// `jwks_file` is relative to `config_dir`. Starts the JWKS refresh when a URL is set
    /// (call inside a tokio runtime then).
    pub fn new(
        cluster_token: String,
        config: &GatewaySection,
        config_dir: &Path,
    ) -> Result<Authenticator, PrincipalsError> {
        let statics = config
            .tokens
            .iter()
            .map(|t| {
                (
                    t.token.clone(),
                    Principal {
                        user: Some(t.user.clone()),
                        role: t.role.clone(),
                        operator: t.role.as_deref() == Some(config.operator_role.as_str()),
                    },
                )
            })
            .collect();
        let jwt = match &config.jwt {
            Some(section) => Some(JwtVerifier::start(section, config_dir)?),
            None => None,
        };
        Ok(Authenticator {
            cluster_token,
            statics,
            operator_role: config.operator_role.clone(),
            jwt,
        })
    }

    /// Whether any user principal is configured (static tokens or JWTs): the gateway is
    /// shared, and loopback says nothing of who asks.
    pub fn has_users(&self) -> bool {
        !self.statics.is_empty() || self.jwt.is_some()
    }

    /// The principal of `bearer` (the `Authorization: Bearer` value).
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Principal, TokenRefusal> {
        let Some(given) = bearer.filter(|t| !t.is_empty()) else {
            return Err(TokenRefusal::Missing);
        };
        if same(given, &self.cluster_token) {
            return Ok(Principal {
                user: None,
                role: Some(self.operator_role.clone()),
                operator: true,
            });
        }
        // Every static token is compared, so the time taken says nothing of which matched.
        let mut found = None;
        for (token, principal) in &self.statics {
            if same(given, token) && found.is_none() {
                found = Some(principal.clone());
            }
        }
        if let Some(principal) = found {
            return Ok(principal);
        }
        match &self.jwt {
            Some(jwt) if given.matches('.').count() == 2 => jwt.verify(given, &self.operator_role),
            _ => Err(TokenRefusal::Unknown),
        }
    }
}

/// Compares in time independent of where the strings differ.
pub(super) fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Where the key set comes from.
enum Source {
    File,
    Url {
        url: String,
        client: reqwest::Client,
        last_fetch: Mutex<Option<Instant>>,
    },
}

/// Verifies JWTs against one key set.
pub struct JwtVerifier {
    keys: RwLock<JwkSet>,
    source: Source,
    issuer: String,
    audience: String,
    user_claim: String,
    /// Put before the user claim's value: JWT users live in their own namespace.
    user_prefix: String,
    role_claim: Option<String>,
    algorithms: Vec<Algorithm>,
    leeway: u64,
}

impl JwtVerifier {
    fn start(section: &JwtSection, config_dir: &Path) -> Result<Arc<JwtVerifier>, PrincipalsError> {
        let algorithms = section
            .algorithms
            .iter()
            .filter_map(|a| match a.as_str() {
                "RS256" => Some(Algorithm::RS256),
                "ES256" => Some(Algorithm::ES256),
                _ => None,
            })
            .collect();
        let (keys, source) = match (&section.jwks_file, &section.jwks_url) {
            (Some(file), _) => {
                let path = config_dir.join(file);
                let text = std::fs::read(&path).map_err(|source| PrincipalsError::ReadJwks {
                    path: path.display().to_string(),
                    source,
                })?;
                let keys =
                    serde_json::from_slice(&text).map_err(|source| PrincipalsError::ParseJwks {
                        origin: path.display().to_string(),
                        source,
                    })?;
                (keys, Source::File)
            }
            (None, Some(url)) => (
                JwkSet { keys: Vec::new() },
                Source::Url {
                    url: url.clone(),
                    client: reqwest::Client::builder()
                        .timeout(FETCH_TIMEOUT)
                        .build()
                        .unwrap_or_default(),
                    last_fetch: Mutex::new(None),
                },
            ),
            // `check` of the config refuses a section with neither.
            (None, None) => (JwkSet { keys: Vec::new() }, Source::File),
        };
        let verifier = Arc::new(JwtVerifier {
            keys: RwLock::new(keys),
            source,
            issuer: section.issuer.clone(),
            audience: section.audience.clone(),
            user_claim: section.user_claim.clone(),
            user_prefix: section.user_prefix.clone(),
            role_claim: section.role_claim.clone(),
            algorithms,
            leeway: section.leeway_s,
        });
        if matches!(verifier.source, Source::Url { .. }) {
            let every = Duration::from_secs(section.refresh_s.max(1));
            let weak = Arc::downgrade(&verifier);
            tokio::spawn(async move {
                loop {
                    let Some(verifier) = weak.upgrade() else {
                        return;
                    };
                    verifier.fetch().await;
                    drop(verifier);
                    tokio::time::sleep(every).await;
                }
            });
        }
        Ok(verifier)
    }

    /// Fetches the URL's key set and keeps it when it parses.
    async fn fetch(&self) {
        let Source::Url {
            url,
            client,
            last_fetch,
        } = &self.source
        else {
            return;
        };
        *last_fetch.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let fetched = async {
            let response = client.get(url).send().await.map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("HTTP {}", response.status()));
            }
            let body = response.bytes().await.map_err(|e| e.to_string())?;
            if body.len() > MAX_JWKS_BYTES {
                return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
            }
            serde_json::from_slice::<JwkSet>(&body).map_err(|e| e.to_string())
        };
        match fetched.await {
            Ok(keys) => {
                tracing::info!(%url, keys = keys.keys.len(), "JWKS fetched");
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
            }
            Err(reason) => {
                tracing::warn!(%url, %reason, "cannot fetch the JWKS; keeping the keys held")
            }
        }
    }

    /// Starts a fetch of the URL's keys unless one ran within [`MIN_REFETCH`].
    fn refetch_soon(self: &Arc<Self>) {
        let Source::Url { last_fetch, .. } = &self.source else {
            return;
        };
        {
            let mut last = last_fetch.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < MIN_REFETCH) {
                return;
            }
            *last = Some(Instant::now());
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let this = Arc::clone(self);
            handle.spawn(async move { this.fetch().await });
        }
    }

    fn verify(
        self: &Arc<Self>,
        token: &str,
        operator_role: &str,
    ) -> Result<Principal, TokenRefusal> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| TokenRefusal::Jwt(e.to_string()))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(TokenRefusal::Jwt(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        let key = {
            let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
            let jwk = match &header.kid {
                Some(kid) => keys.find(kid),
                // No key id: only a set of one key can say which.
                None if keys.keys.len() == 1 => keys.keys.first(),
                None => None,
            };
            jwk.map(DecodingKey::from_jwk)
        };
        let key = match key {
            Some(Ok(key)) => key,
            Some(Err(e)) => return Err(TokenRefusal::Jwt(format!("its key is unusable: {e}"))),
            None => {
                self.refetch_soon();
                return Err(TokenRefusal::UnknownKey(header.kid.unwrap_or_default()));
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        // Configured means required: a token without `iss` or `aud` is refused, as is one
        // that never expires.
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map_err(|e| TokenRefusal::Jwt(e.to_string()))?;
        let claims = data.claims;
        let user = claims
            .get(&self.user_claim)
            .and_then(Value::as_str)
            .map(|u| format!("{}{u}", self.user_prefix))
            .filter(|u| valid_user(u) && u != antler_protocol::config::OPERATOR_USER)
            .ok_or_else(|| TokenRefusal::BadUser {
                claim: self.user_claim.clone(),
            })?;
        let role = self
            .role_claim
            .as_ref()
            .and_then(|c| claims.get(c))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Array(items) => items.first().and_then(Value::as_str).map(str::to_owned),
                _ => None,
            });
        Ok(Principal {
            user: Some(user),
            operator: role.as_deref() == Some(operator_role),
            role,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn section(yaml: &str) -> GatewaySection {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_cluster_token_is_the_operator_and_static_tokens_their_users() {
        let auth = Authenticator::new(
            "cluster-token-0123456789".into(),
            &section("tokens:\n  - {token: alice-token-0123456789, user: alice, role: member}\n  - {token: ops-token-0123456789ab, user: ops, role: operator}\n"),
            Path::new("."),
        )
        .unwrap();
        let op = auth.authenticate(Some("cluster-token-0123456789")).unwrap();
        assert!(op.operator && op.user.is_none());
        let alice = auth.authenticate(Some("alice-token-0123456789")).unwrap();
        assert_eq!(alice.user.as_deref(), Some("alice"));
        assert_eq!(alice.role.as_deref(), Some("member"));
        assert!(!alice.operator);
        assert!(alice.may_see("alice") && !alice.may_see("bob"));
        let ops = auth.authenticate(Some("ops-token-0123456789ab")).unwrap();
        assert!(ops.operator && ops.may_see("bob"));
        assert_eq!(auth.authenticate(None), Err(TokenRefusal::Missing));
        assert_eq!(
            auth.authenticate(Some("alice-token-012345678")),
            Err(TokenRefusal::Unknown)
        );
        // Without a JWT section a JWT-shaped token is just unknown.
        assert_eq!(auth.authenticate(Some("a.b.c")), Err(TokenRefusal::Unknown));
    }

    #[test]
    fn a_jwks_file_that_is_not_a_key_set_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("jwks.json"), "{\"nope\": 1}").unwrap();
        let err = Authenticator::new(
            "cluster-token-0123456789".into(),
            &section("jwt:\n  jwks_file: jwks.json\n  issuer: i\n  audience: a\n"),
            dir.path(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("jwks.json"), "{err}");
    }
}
