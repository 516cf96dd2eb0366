//! OAuth for MCP servers over HTTP. Each (server, user)'s tokens are owned by a
//! `TokenActor` (`token`; its address is an `Authorizer`) over one grant: DeerFlow's fixed
//! `token_url` grant (`fixed`), or endpoints discovered from the server per the MCP
//! authorization spec (`discovered`: client_credentials, enterprise-managed, or a user's
//! login). `OAuthBroker` keeps every authorizer of this host (a concurrent map, read from
//! many tasks) and the token store they share, so a login, the server's session and the
//! gateway reach the same actor. Tokens and secrets never appear in logs, errors or replies.

pub mod discovered;
pub mod fixed;
pub mod jwt;
pub mod login;
pub mod share;
pub mod store;
pub mod token;

use std::{path::PathBuf, sync::Arc};

use antler_protocol::config::{McpOAuthConfig, OAuthFlow};
use dashmap::DashMap;

pub use discovered::DiscoveredGrant;
pub use fixed::FixedGrant;
pub use store::TokenStore;
pub use token::{Authorizer, TokenActor};

/// The user a call without one runs for (`antler mcp call`, `antler mcp login`).
pub const DEFAULT_USER: &str = "default";

/// Why no token could be had. The texts never carry a secret or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("OAuth client_credentials grant requires client_id and client_secret")]
    MissingClientCredentials,
    #[error("OAuth refresh_token grant requires refresh_token")]
    MissingRefreshToken,
    #[error("OAuth token request to {url} failed: {reason}")]
    Request { url: String, reason: String },
    #[error("OAuth token endpoint {url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("OAuth token response is not JSON")]
    NotJson,
    #[error("OAuth token response missing '{0}'")]
    MissingField(String),
    #[error("OAuth discovery for MCP server '{server}' failed: {reason}")]
    Discovery { server: String, reason: String },
    #[error("{0}")]
    Config(String),
    #[error("OAuth login failed: {0}")]
    Login(String),
    #[error("MCP server '{server}' needs a login for user '{user}' ({reason}): run `antler mcp login {server}{}`, or through the gateway `POST /api/mcp/{server}/oauth/start` as that user and open the URL it returns", user_flag(.user))]
    LoginNeeded {
        server: String,
        user: String,
        reason: String,
    },
}

fn user_flag(user: &str) -> String {
    if user == DEFAULT_USER {
        String::new()
    } else {
        format!(" --user {user}")
    }
}

struct Entry {
    config: McpOAuthConfig,
    url: String,
    authorizer: Option<Authorizer>,
}

/// Every authorizer of this host, by (server, user), and their token store.
pub struct OAuthBroker {
    store: Arc<TokenStore>,
    entries: DashMap<(String, String), Entry>,
    /// The key the credentials are sealed with to be shared (`--oauth-key-file`).
    sealer: Option<Arc<share::Sealer>>,
}

impl std::fmt::Debug for OAuthBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBroker").finish_non_exhaustive()
    }
}

impl OAuthBroker {
    /// How many users have logged in to `server` (hold its credentials).
    pub fn logged_in(&self, server: &str) -> usize {
        self.store.users_of(server)
    }

    /// The broker of a host whose data directory is `data_dir` (`None`: tokens in memory).
    #[cfg(test)]
    pub fn new(data_dir: Option<PathBuf>) -> Arc<Self> {
        Self::sharing(data_dir, None)
    }

    /// [`OAuthBroker::new`], sharing its credentials with the other replicas sealed with
    /// `sealer` (`None`: not shared).
    pub fn sharing(data_dir: Option<PathBuf>, sealer: Option<share::Sealer>) -> Arc<Self> {
        Arc::new(Self {
            store: TokenStore::open(data_dir),
            entries: DashMap::new(),
            sealer: sealer.map(Arc::new),
        })
    }

    /// The token store every authorizer of this host shares.
    pub fn store(&self) -> &Arc<TokenStore> {
        &self.store
    }

    /// The replicas' sealing key, when this host shares its credentials.
    pub fn sealer(&self) -> Option<&Arc<share::Sealer>> {
        self.sealer.as_ref()
    }

    /// The authorizer of (`server`, `user`) for `config` at `url`, its token actor
    /// started when there is none; a changed config gets a new one (the stored tokens
    /// stay). Call inside an actix system.
    pub fn authorizer(
        &self,
        server: &str,
        user: Option<&str>,
        url: &str,
        config: &McpOAuthConfig,
    ) -> Authorizer {
        let user = user.unwrap_or(DEFAULT_USER);
        let key = (server.to_owned(), user.to_owned());
        // The entry is held for the check and the insert: two callers get one actor.
        let mut entry = self.entries.entry(key).or_insert_with(|| Entry {
            config: config.clone(),
            url: url.to_owned(),
            authorizer: None,
        });
        if entry.config != *config || entry.url != url {
            *entry = Entry {
                config: config.clone(),
                url: url.to_owned(),
                authorizer: None,
            };
        }
        if let Some(a) = &entry.authorizer {
            return a.clone();
        }
        let authorizer = match config.flow() {
            OAuthFlow::Fixed(_) => TokenActor::fixed(FixedGrant::new(config.clone())),
            OAuthFlow::DiscoveredClientCredentials
            | OAuthFlow::AuthorizationCode
            | OAuthFlow::EnterpriseManaged => TokenActor::discovered(DiscoveredGrant::new(
                server,
                user,
                url,
                config.clone(),
                self.store.clone(),
            )),
        };
        entry.authorizer = Some(authorizer.clone());
        authorizer
    }
}
