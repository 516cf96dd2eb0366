//! `private_key_jwt` for client_credentials (RFC 7523, SEP-1046): a client assertion signed
//! with the configured PEM key, sent to the discovered token endpoint with the scopes and
//! `resource`. The key and the token never reach a log or an error.

use std::time::Duration;

use antler_protocol::config::SIGNING_ALGORITHMS;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{header::CONTENT_TYPE, Url};
use rmcp::transport::auth::{AuthorizationMetadata, OAuthTokenResponse};
use serde::Serialize;

use super::OAuthError;

/// How long an assertion is valid.
const ASSERTION_LIFETIME: Duration = Duration::from_secs(300);
const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    jti: String,
}

fn algorithm(name: Option<&str>) -> Result<Algorithm, OAuthError> {
    Ok(match name.unwrap_or("RS256") {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        other => {
            return Err(OAuthError::Config(format!(
                "oauth.signing_algorithm `{other}` is not one of {}",
                SIGNING_ALGORITHMS.join(", ")
            )))
        }
    })
}

/// The signed assertion for `client_id` at `audience`.
pub fn assertion(
    client_id: &str,
    pem: &str,
    alg: Option<&str>,
    audience: &str,
) -> Result<String, OAuthError> {
    let alg = algorithm(alg)?;
    let key = match alg {
        Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .map_err(|_| {
        OAuthError::Config("oauth.private_key_pem is not a PEM key of its algorithm".into())
    })?;
    let now = antler_protocol::sys::unix_ms() / 1000;
    let claims = Claims {
        iss: client_id,
        sub: client_id,
        aud: audience,
        iat: now,
        exp: now + ASSERTION_LIFETIME.as_secs(),
        jti: format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)),
    };
    let mut header = Header::new(alg);
    header.typ = Some("JWT".into());
    jsonwebtoken::encode(&header, &claims, &key)
        .map_err(|_| OAuthError::Config("cannot sign the client assertion".into()))
}

/// Fetches a token with a client assertion at `metadata`'s token endpoint.
pub async fn exchange(
    metadata: &AuthorizationMetadata,
    client_id: &str,
    pem: &str,
    alg: Option<&str>,
    scopes: &[String],
    resource: &str,
) -> Result<OAuthTokenResponse, OAuthError> {
    let url = metadata.token_endpoint.clone();
    let audience = metadata.issuer.as_deref().unwrap_or(&url);
    let assertion = assertion(client_id, pem, alg, audience)?;
    let mut form = Url::parse("http://form.invalid/").map_err(|_| OAuthError::NotJson)?;
    {
        let mut q = form.query_pairs_mut();
        q.append_pair("grant_type", "client_credentials");
        q.append_pair("client_assertion_type", ASSERTION_TYPE);
        q.append_pair("client_assertion", &assertion);
        if !scopes.is_empty() {
            q.append_pair("scope", &scopes.join(" "));
        }
        q.append_pair("resource", resource);
    }
    let http = super::discovered::oauth_http(&url)?;
    let resp = http
        .post(&url)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form.query().unwrap_or("").to_owned())
        .send()
        .await
        .map_err(|_| OAuthError::Request {
            url: url.clone(),
            reason: "request failed".into(),
        })?;
    if !resp.status().is_success() {
        return Err(OAuthError::Status {
            url,
            status: resp.status().as_u16(),
        });
    }
    resp.json().await.map_err(|_| OAuthError::NotJson)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_key_or_algorithm_is_said_without_the_key() {
        let e = assertion("c", "-----BEGIN PRIVATE KEY-----\nnope\n", None, "a").unwrap_err();
        assert!(e.to_string().contains("oauth.private_key_pem"), "{e}");
        assert!(!e.to_string().contains("nope"));
        let e = assertion("c", "x", Some("HS256"), "a").unwrap_err();
        assert!(e.to_string().contains("RS256"), "{e}");
    }
}
