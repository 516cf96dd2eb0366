//! An MCP server's `oauth:` block (`McpOAuthConfig`, spec §5.4, and the MCP authorization
//! spec): where and how to get a token, and which response fields carry it. With a
//! `token_url` it is DeerFlow's fixed grant (its defaults); without one the endpoints are
//! discovered from the server (`OAuthFlow`). Fetching, caching, storing and refreshing
//! tokens belong to the MCP host, not here.

use serde::Deserialize;

use super::shapes::{null_as_default, NamedMap};

/// The OAuth grant used at the token endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantType {
    /// `client_credentials` (the default): needs `client_id` and `client_secret`.
    #[default]
    ClientCredentials,
    /// `refresh_token`: needs `refresh_token`.
    RefreshToken,
    /// `authorization_code` with PKCE: a user logs in (`antler mcp login`).
    AuthorizationCode,
    /// Enterprise-managed authorization (MCP SEP-990): the user's identity-provider ID
    /// token (`subject_token`) is exchanged at `idp_token_endpoint` for an identity
    /// assertion grant (ID-JAG), which the MCP server's authorization server takes as a
    /// JWT bearer grant from this client (`client_id`, `client_secret`).
    JwtBearer,
}

impl GrantType {
    /// The form value sent as `grant_type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientCredentials => "client_credentials",
            Self::RefreshToken => "refresh_token",
            Self::AuthorizationCode => "authorization_code",
            Self::JwtBearer => JWT_BEARER_GRANT,
        }
    }
}

/// The JWT bearer grant's `grant_type` (RFC 7523).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// How a server's token is had, from its `oauth` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthFlow {
    /// DeerFlow's: a fixed `token_url` and a `client_credentials` or `refresh_token` grant.
    Fixed(GrantType),
    /// `client_credentials` at a token endpoint discovered from the server.
    DiscoveredClientCredentials,
    /// A user's login (authorization code + PKCE) at discovered endpoints.
    AuthorizationCode,
    /// SEP-990: an ID token exchanged for an ID-JAG, then a JWT bearer grant at the
    /// discovered token endpoint.
    EnterpriseManaged,
}

/// `oauth.signing_algorithm` values for `private_key_jwt`.
pub const SIGNING_ALGORITHMS: [&str; 5] = ["RS256", "RS384", "RS512", "ES256", "ES384"];

/// `mcpServers.<name>.oauth`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "an oauth mapping")]
pub struct McpOAuthConfig {
    /// Whether the token is fetched and sent.
    #[serde(default = "super::shapes::default_true")]
    pub enabled: bool,
    /// The token endpoint; `None`: discovered from the server's metadata.
    #[serde(default)]
    pub token_url: Option<String>,
    /// `client_credentials`, `refresh_token` or `authorization_code`; unset: the first
    /// with a `token_url` (DeerFlow's default), the last without.
    #[serde(default)]
    pub grant_type: Option<GrantType>,
    /// The client id.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The client secret.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// The refresh token (a rotated one replaces it in memory only).
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// The requested scope.
    #[serde(default)]
    pub scope: Option<String>,
    /// The requested audience.
    #[serde(default)]
    pub audience: Option<String>,
    /// The response field holding the token.
    #[serde(default = "default_token_field")]
    pub token_field: String,
    /// The response field holding the token type.
    #[serde(default = "default_token_type_field")]
    pub token_type_field: String,
    /// The response field holding the lifetime in seconds.
    #[serde(default = "default_expires_in_field")]
    pub expires_in_field: String,
    /// The token type when the response has none.
    #[serde(default = "default_token_type")]
    pub default_token_type: String,
    /// Refresh this many seconds before expiry.
    #[serde(default = "default_refresh_skew")]
    pub refresh_skew_seconds: i64,
    /// Extra form fields; the reserved ones override them.
    #[serde(default, deserialize_with = "null_as_default")]
    pub extra_token_params: NamedMap<String>,
    /// The HTTPS URL of this client's metadata document (a URL client id), used when the
    /// authorization server supports it and no `client_id` is configured.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// A PEM private key (RSA or EC): `client_credentials` authenticates with a signed
    /// JWT (`private_key_jwt`) instead of the secret.
    #[serde(default)]
    pub private_key_pem: Option<String>,
    /// The JWT's algorithm for `private_key_pem` (`RS256` when unset).
    #[serde(default)]
    pub signing_algorithm: Option<String>,
    /// `jwt_bearer`: the identity provider's token endpoint (RFC 8693 token exchange).
    #[serde(default)]
    pub idp_token_endpoint: Option<String>,
    /// `jwt_bearer`: this client's id at the identity provider.
    #[serde(default)]
    pub idp_client_id: Option<String>,
    /// `jwt_bearer`: this client's secret at the identity provider, if it has one.
    #[serde(default)]
    pub idp_client_secret: Option<String>,
    /// `jwt_bearer`: the user's ID token from the identity provider.
    #[serde(default)]
    pub subject_token: Option<String>,
}

impl McpOAuthConfig {
    /// The flow this block configures (see `grant_type`).
    pub fn flow(&self) -> OAuthFlow {
        match (self.token_url.as_deref(), self.grant_type) {
            (_, Some(GrantType::AuthorizationCode)) => OAuthFlow::AuthorizationCode,
            (_, Some(GrantType::JwtBearer)) => OAuthFlow::EnterpriseManaged,
            (Some(_), g) => OAuthFlow::Fixed(g.unwrap_or_default()),
            (None, Some(GrantType::ClientCredentials)) => OAuthFlow::DiscoveredClientCredentials,
            (None, Some(GrantType::RefreshToken)) => OAuthFlow::Fixed(GrantType::RefreshToken),
            (None, None) => OAuthFlow::AuthorizationCode,
        }
    }

    /// What is wrong with this block, said for the operator; `None`: nothing.
    pub fn problem(&self) -> Option<String> {
        if self.flow() == OAuthFlow::Fixed(GrantType::RefreshToken) && self.token_url.is_none() {
            return Some("oauth.grant_type refresh_token needs oauth.token_url".into());
        }
        if self.flow() == OAuthFlow::EnterpriseManaged {
            for (field, value) in [
                ("idp_token_endpoint", &self.idp_token_endpoint),
                ("subject_token", &self.subject_token),
                ("client_id", &self.client_id),
            ] {
                if value.as_deref().is_none_or(str::is_empty) {
                    return Some(format!("oauth.grant_type jwt_bearer needs oauth.{field}"));
                }
            }
        }
        if let Some(alg) = self.signing_algorithm.as_deref() {
            if !SIGNING_ALGORITHMS.contains(&alg) {
                return Some(format!(
                    "oauth.signing_algorithm `{alg}` is not one of {}",
                    SIGNING_ALGORITHMS.join(", ")
                ));
            }
        }
        None
    }

    /// A block for a server that asked for OAuth with none configured: a user's login
    /// with dynamic registration.
    pub fn login_default() -> Self {
        // Every field has a default: an empty mapping always parses.
        serde_json::from_str("{}").unwrap_or_else(|_| unreachable!("an empty oauth block parses"))
    }
}

fn default_token_field() -> String {
    "access_token".to_owned()
}

fn default_token_type_field() -> String {
    "token_type".to_owned()
}

fn default_expires_in_field() -> String {
    "expires_in".to_owned()
}

fn default_token_type() -> String {
    "Bearer".to_owned()
}

fn default_refresh_skew() -> i64 {
    60
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_spec_5_4() {
        let o: McpOAuthConfig =
            serde_json::from_str(r#"{"token_url": "https://auth.example/token"}"#).unwrap();
        assert!(o.enabled);
        assert_eq!(o.flow(), OAuthFlow::Fixed(GrantType::ClientCredentials));
        assert_eq!(
            (
                o.token_field.as_str(),
                o.token_type_field.as_str(),
                o.expires_in_field.as_str(),
                o.default_token_type.as_str()
            ),
            ("access_token", "token_type", "expires_in", "Bearer")
        );
        assert_eq!(o.refresh_skew_seconds, 60);
        assert!(o.extra_token_params.is_empty());
    }

    #[test]
    fn grant_type_names_the_accepted_values() {
        let err = serde_json::from_str::<McpOAuthConfig>(
            r#"{"token_url": "u", "grant_type": "password"}"#,
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains(
            "expected one of `client_credentials`, `refresh_token`, `authorization_code`"
        ));
    }

    #[test]
    fn without_a_token_url_the_endpoints_are_discovered() {
        let parse = |j: &str| serde_json::from_str::<McpOAuthConfig>(j).unwrap();
        assert_eq!(parse("{}").flow(), OAuthFlow::AuthorizationCode);
        assert_eq!(
            parse(r#"{"client_id": "a", "client_secret": "b"}"#).flow(),
            OAuthFlow::AuthorizationCode
        );
        assert_eq!(
            parse(r#"{"grant_type": "client_credentials", "client_id": "a"}"#).flow(),
            OAuthFlow::DiscoveredClientCredentials
        );
        assert!(parse(r#"{"grant_type": "refresh_token"}"#)
            .problem()
            .is_some());
        assert!(parse(r#"{"signing_algorithm": "HS256"}"#)
            .problem()
            .unwrap()
            .contains("RS256"));
    }
}
