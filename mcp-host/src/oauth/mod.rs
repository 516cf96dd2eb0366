//! OAuth for MCP servers over HTTP. `Authorizer` is one (server, user)'s token source:
//! DeerFlow's fixed `token_url` grant (`fixed`), or endpoints discovered from the server per
//! the MCP authorization spec (`discovered`: client_credentials, or a user's login).
//! `OAuthBroker` owns every authorizer of this host and the token store they share, so a
//! login, the server's session and the gateway reach the same one. Tokens and secrets
//! never appear in logs, errors or replies.

pub mod discovered;
pub mod fixed;
pub mod jwt;
pub mod login;
pub mod share;
pub mod store;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use antler_protocol::config::{McpOAuthConfig, OAuthFlow};

pub use discovered::DiscoveredAuth;
pub use fixed::FixedGrant;
pub use store::TokenStore;

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

/// One (server, user)'s token source.
#[derive(Debug, Clone)]
pub enum Authorizer {
    Fixed(Arc<FixedGrant>),
    Discovered(Arc<DiscoveredAuth>),
}

impl Authorizer {
    /// The cached `Authorization` value while fresh (no await, no request).
    pub fn fresh(&self) -> Option<String> {
        match self {
            Authorizer::Fixed(f) => f.fresh(),
            Authorizer::Discovered(d) => d.fresh(),
        }
    }

    /// The `Authorization` value; `Ok(None)`: none until a user logs in.
    pub async fn authorization(&self) -> Result<Option<String>, OAuthError> {
        match self {
            Authorizer::Fixed(f) => f.authorization().await.map(Some),
            Authorizer::Discovered(d) => d.authorization().await,
        }
    }

    /// Forgets `rejected` (the server answered 401 with it).
    pub fn invalidate(&self, rejected: &str) {
        match self {
            Authorizer::Fixed(f) => f.invalidate(rejected),
            Authorizer::Discovered(d) => d.invalidate(rejected),
        }
    }

    /// Records the server's challenge (`WWW-Authenticate` of a 401 or 403).
    pub fn set_challenge(&self, challenge: Option<String>) {
        if let Authorizer::Discovered(d) = self {
            d.set_challenge(challenge);
        }
    }

    pub fn discovered(&self) -> Option<&Arc<DiscoveredAuth>> {
        match self {
            Authorizer::Discovered(d) => Some(d),
            Authorizer::Fixed(_) => None,
        }
    }
}

struct Entry {
    config: McpOAuthConfig,
    url: String,
    authorizer: Authorizer,
}

/// Every authorizer of this host, by (server, user), and their token store.
pub struct OAuthBroker {
    store: Arc<TokenStore>,
    entries: Mutex<HashMap<(String, String), Entry>>,
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
            entries: Mutex::new(HashMap::new()),
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

    /// The authorizer of (`server`, `user`) for `config` at `url`; a changed config gets
    /// a new one (the stored tokens stay).
    pub fn authorizer(
        &self,
        server: &str,
        user: Option<&str>,
        url: &str,
        config: &McpOAuthConfig,
    ) -> Authorizer {
        let user = user.unwrap_or(DEFAULT_USER);
        let key = (server.to_owned(), user.to_owned());
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get(&key) {
            if &e.config == config && e.url == url {
                return e.authorizer.clone();
            }
        }
        let authorizer = match config.flow() {
            OAuthFlow::Fixed(_) => Authorizer::Fixed(FixedGrant::new(config.clone())),
            OAuthFlow::DiscoveredClientCredentials
            | OAuthFlow::AuthorizationCode
            | OAuthFlow::EnterpriseManaged => Authorizer::Discovered(DiscoveredAuth::new(
                server,
                user,
                url,
                config.clone(),
                self.store.clone(),
            )),
        };
        entries.insert(
            key,
            Entry {
                config: config.clone(),
                url: url.to_owned(),
                authorizer: authorizer.clone(),
            },
        );
        authorizer
    }
}
