//! An MCP server's `oauth:` block (`McpOAuthConfig`, spec §5.4): where and how to fetch a
//! token, and which response fields carry it. Defaults are DeerFlow's. Fetching, caching
//! and refreshing tokens belong to the MCP host, not here.

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
}

impl GrantType {
    /// The form value sent as `grant_type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientCredentials => "client_credentials",
            Self::RefreshToken => "refresh_token",
        }
    }
}

/// `mcpServers.<name>.oauth`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(expecting = "an oauth mapping with at least token_url")]
pub struct McpOAuthConfig {
    /// Whether the token is fetched and sent.
    #[serde(default = "super::shapes::default_true")]
    pub enabled: bool,
    /// The token endpoint.
    pub token_url: String,
    /// `client_credentials` or `refresh_token`.
    #[serde(default)]
    pub grant_type: GrantType,
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
        assert_eq!(o.grant_type, GrantType::ClientCredentials);
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
        assert!(err
            .to_string()
            .contains("expected `client_credentials` or `refresh_token`"));
    }
}
