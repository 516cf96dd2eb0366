//! `TokenStore`: the OAuth credentials of every (server, user) this host holds, kept across
//! restarts in one 0600 JSON file of the data directory (`mcp-oauth.json`), written
//! atomically on each change on a blocking thread. A missing or unreadable file is an empty
//! store. The file holds tokens: nothing here logs a value.
//!
//! Each entry carries when it was stored (`updated_ms`), and a removal stays as an empty
//! entry, so the replicas of a cluster can share their credentials through the lead
//! (`share`): a change made here is sent to [`TokenStore::subscribe`]rs, and one another
//! replica made is taken ([`TokenStore::take`]) when it is newer than the one held.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// The file's name in the data directory.
pub const STORE_FILE: &str = "mcp-oauth.json";

/// One (server, user) key, as the file writes it.
fn key(server: &str, user: &str) -> String {
    format!("{server}\u{1f}{user}")
}

/// One (server, user)'s credentials (`None`: removed) and when they were stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub updated_ms: u64,
    pub credentials: Option<StoredCredentials>,
}

/// A change of one (server, user)'s credentials.
#[derive(Debug, Clone)]
pub struct Change {
    pub server: String,
    pub user: String,
    pub entry: Entry,
}

/// The file: its version and the entries by key.
#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    entries: BTreeMap<String, Entry>,
}

const FILE_VERSION: u32 = 2;

fn parse(bytes: &[u8]) -> Option<BTreeMap<String, Entry>> {
    if let Ok(file) = serde_json::from_slice::<File>(bytes) {
        return Some(file.entries);
    }
    // The first version: the credentials by key, with no time (any shared copy is newer).
    match serde_json::from_slice::<BTreeMap<String, StoredCredentials>>(bytes) {
        Ok(old) => Some(
            old.into_iter()
                .map(|(k, c)| {
                    let entry = Entry {
                        updated_ms: 0,
                        credentials: Some(c),
                    };
                    (k, entry)
                })
                .collect(),
        ),
        Err(e) => {
            tracing::warn!("the OAuth token store does not parse ({e}); starting empty");
            None
        }
    }
}

/// Every stored credential, in memory and (when a data directory is set) on disk.
#[derive(Debug)]
pub struct TokenStore {
    path: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Orders the file writes (the latest state wins).
    write_gate: tokio::sync::Mutex<()>,
    /// The changes made on this host (not those taken from another replica).
    changes: broadcast::Sender<Change>,
}

impl TokenStore {
    /// The store of `dir` (`None`: in memory only), read now.
    pub fn open(dir: Option<PathBuf>) -> Arc<Self> {
        let path = dir.map(|d| d.join(STORE_FILE));
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| parse(&b))
            .unwrap_or_default();
        Arc::new(Self {
            path,
            entries: Mutex::new(entries),
            write_gate: tokio::sync::Mutex::new(()),
            changes: broadcast::channel(256).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        // Held only for map operations, never across an await.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many users hold credentials for `server`.
    pub fn users_of(&self, server: &str) -> usize {
        let prefix = format!("{server}\u{1f}");
        self.lock()
            .iter()
            .filter(|(k, e)| k.starts_with(&prefix) && e.credentials.is_some())
            .count()
    }

    /// The credentials of `(server, user)`.
    pub fn get(&self, server: &str, user: &str) -> Option<StoredCredentials> {
        self.lock()
            .get(&key(server, user))
            .and_then(|e| e.credentials.clone())
    }

    /// Every entry, removals included, as changes (what a new subscriber starts from).
    pub fn snapshot(&self) -> Vec<Change> {
        self.lock()
            .iter()
            .filter_map(|(k, entry)| {
                let (server, user) = k.split_once('\u{1f}')?;
                Some(Change {
                    server: server.to_owned(),
                    user: user.to_owned(),
                    entry: entry.clone(),
                })
            })
            .collect()
    }

    /// The changes made on this host from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    async fn set(
        &self,
        server: &str,
        user: &str,
        value: Option<StoredCredentials>,
    ) -> Result<(), AuthError> {
        let _gate = self.write_gate.lock().await;
        let (snapshot, entry) = {
            let mut map = self.lock();
            let k = key(server, user);
            // Later than the entry held, whatever the clock did.
            let after = map.get(&k).map_or(0, |e| e.updated_ms + 1);
            let entry = Entry {
                updated_ms: antler_protocol::sys::unix_ms().max(after),
                credentials: value,
            };
            map.insert(k, entry.clone());
            (Self::encode(&map)?, entry)
        };
        let _ = self.changes.send(Change {
            server: server.to_owned(),
            user: user.to_owned(),
            entry,
        });
        self.write(snapshot).await
    }

    /// Takes another replica's entry when it is newer than the one held; whether it did.
    pub async fn take(&self, change: Change) -> Result<bool, AuthError> {
        let _gate = self.write_gate.lock().await;
        let snapshot = {
            let mut map = self.lock();
            let k = key(&change.server, &change.user);
            if map
                .get(&k)
                .is_some_and(|held| held.updated_ms >= change.entry.updated_ms)
            {
                return Ok(false);
            }
            map.insert(k, change.entry);
            Self::encode(&map)?
        };
        self.write(snapshot).await?;
        Ok(true)
    }

    fn encode(map: &BTreeMap<String, Entry>) -> Result<Vec<u8>, AuthError> {
        let file = serde_json::json!({"version": FILE_VERSION, "entries": map});
        serde_json::to_vec_pretty(&file).map_err(|e| AuthError::CredentialStoreError(e.to_string()))
    }

    async fn write(&self, snapshot: Vec<u8>) -> Result<(), AuthError> {
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

    /// What a replica shares: its changes go to subscribers with a time; another
    /// replica's entry is taken only when newer, and is not sent on again.
    #[tokio::test]
    async fn changes_are_sent_and_newer_entries_from_elsewhere_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(Some(dir.path().to_owned()));
        let mut changes = store.subscribe();
        let creds = |id: &str| StoredCredentials::new(id.into(), None, vec![], Some(1));
        store
            .slot("srv", "alice")
            .save(creds("mine"))
            .await
            .unwrap();
        let sent = changes.recv().await.unwrap();
        assert_eq!((sent.server.as_str(), sent.user.as_str()), ("srv", "alice"));
        let mine_at = sent.entry.updated_ms;
        assert!(mine_at > 0);

        let older = Change {
            server: "srv".into(),
            user: "alice".into(),
            entry: Entry {
                updated_ms: mine_at - 1,
                credentials: Some(creds("older")),
            },
        };
        assert!(!store.take(older).await.unwrap());
        assert_eq!(store.get("srv", "alice").unwrap().client_id, "mine");
        let newer = Change {
            server: "srv".into(),
            user: "alice".into(),
            entry: Entry {
                updated_ms: mine_at + 5,
                credentials: Some(creds("theirs")),
            },
        };
        assert!(store.take(newer).await.unwrap());
        assert_eq!(store.get("srv", "alice").unwrap().client_id, "theirs");
        assert!(changes.try_recv().is_err(), "a taken entry is not sent on");
        // Kept across a reopen, with its time; a removal stays as an empty entry.
        let again = TokenStore::open(Some(dir.path().to_owned()));
        assert_eq!(again.get("srv", "alice").unwrap().client_id, "theirs");
        again.slot("srv", "alice").clear().await.unwrap();
        let removed = &again.snapshot()[0];
        assert!(removed.entry.credentials.is_none());
        assert!(removed.entry.updated_ms > mine_at + 5);
        assert_eq!(again.users_of("srv"), 0);
    }

    #[test]
    fn a_first_version_file_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let creds = StoredCredentials::new("old".into(), None, vec![], Some(1));
        let old = serde_json::json!({ "srv\u{1f}alice": creds });
        std::fs::write(dir.path().join(STORE_FILE), old.to_string()).unwrap();
        let store = TokenStore::open(Some(dir.path().to_owned()));
        assert_eq!(store.get("srv", "alice").unwrap().client_id, "old");
        assert_eq!(store.snapshot()[0].entry.updated_ms, 0);
    }
}
