//! `TokenStore`: the OAuth credentials of every (server, user) this host holds, kept across
//! restarts in one 0600 JSON file of the data directory (`mcp-oauth.json`), written
//! atomically on each change on a blocking thread. A missing or unreadable file is an empty
//! store. The file holds tokens: nothing here logs a value.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

/// The file's name in the data directory.
pub const STORE_FILE: &str = "mcp-oauth.json";

/// One (server, user) key, as the file writes it.
fn key(server: &str, user: &str) -> String {
    format!("{server}\u{1f}{user}")
}

/// Every stored credential, in memory and (when a data directory is set) on disk.
#[derive(Debug)]
pub struct TokenStore {
    path: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, StoredCredentials>>,
    /// Orders the file writes (the latest state wins).
    write_gate: tokio::sync::Mutex<()>,
}

impl TokenStore {
    /// The store of `dir` (`None`: in memory only), read now.
    pub fn open(dir: Option<PathBuf>) -> Arc<Self> {
        let path = dir.map(|d| d.join(STORE_FILE));
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| match serde_json::from_slice(&b) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!("the OAuth token store does not parse ({e}); starting empty");
                    None
                }
            })
            .unwrap_or_default();
        Arc::new(Self {
            path,
            entries: Mutex::new(entries),
            write_gate: tokio::sync::Mutex::new(()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, StoredCredentials>> {
        // Held only for map operations, never across an await.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many users hold credentials for `server`.
    pub fn users_of(&self, server: &str) -> usize {
        let prefix = format!("{server}\u{1f}");
        self.lock()
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .count()
    }

    /// The credentials of `(server, user)`.
    pub fn get(&self, server: &str, user: &str) -> Option<StoredCredentials> {
        self.lock().get(&key(server, user)).cloned()
    }

    async fn set(
        &self,
        server: &str,
        user: &str,
        value: Option<StoredCredentials>,
    ) -> Result<(), AuthError> {
        let _gate = self.write_gate.lock().await;
        let snapshot = {
            let mut map = self.lock();
            match value {
                Some(v) => map.insert(key(server, user), v),
                None => map.remove(&key(server, user)),
            };
            serde_json::to_vec_pretty(&*map)
                .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
        };
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            antler_protocol::runtime_dir::write_private(&path, &snapshot)
        })
        .await
        .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
        .map_err(|e| AuthError::CredentialStoreError(format!("cannot write the token store: {e}")))
    }

    /// The rmcp credential store of one (server, user).
    pub fn slot(self: &Arc<Self>, server: &str, user: &str) -> StoreSlot {
        StoreSlot {
            store: self.clone(),
            server: server.to_owned(),
            user: user.to_owned(),
        }
    }
}

/// One (server, user)'s place in the store, as rmcp's `CredentialStore`.
#[derive(Debug, Clone)]
pub struct StoreSlot {
    store: Arc<TokenStore>,
    server: String,
    user: String,
}

#[async_trait]
impl CredentialStore for StoreSlot {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.store.get(&self.server, &self.user))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.store
            .set(&self.server, &self.user, Some(credentials))
            .await
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store.set(&self.server, &self.user, None).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn credentials_survive_a_reopen_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(Some(dir.path().to_owned()));
        let slot = store.slot("srv", "alice");
        let creds = StoredCredentials::new("client-1".into(), None, vec!["mcp".into()], Some(1));
        slot.save(creds).await.unwrap();
        let path = dir.path().join(STORE_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = TokenStore::open(Some(dir.path().to_owned()));
        assert_eq!(again.get("srv", "alice").unwrap().client_id, "client-1");
        assert!(again.get("srv", "bob").is_none());
        again.slot("srv", "alice").clear().await.unwrap();
        assert!(TokenStore::open(Some(dir.path().to_owned()))
            .get("srv", "alice")
            .is_none());
    }
}
