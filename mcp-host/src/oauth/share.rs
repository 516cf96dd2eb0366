//! `Sealer`: the key the mcp-host replicas of a cluster share (`--oauth-key-file`, written
//! by `antler cluster init`), with which a replica seals the OAuth credentials it stores
//! before they leave it, so the lead can keep them for the other replicas and for a
//! replica that starts with an empty disk, without being able to read them. AES-256-GCM
//! with a random nonce per seal; the (server, user) is the associated data, so a sealed
//! credential opens only as the one it was sealed as.

use std::path::Path;

use antler_protocol::messages::SealedCredential;

use aws_lc_rs::{
    aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN},
    rand::{SecureRandom, SystemRandom},
};

/// The key file's content: 32 bytes as 64 hex digits.
pub const KEY_HEX_LEN: usize = 64;

/// Why a key file cannot be used. The texts never quote the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: cannot read the OAuth sealing key: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: the OAuth sealing key must be {KEY_HEX_LEN} hex digits (antler cluster init writes one)")]
    Shape { path: String },
}

/// The replicas' shared sealing key.
pub struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

fn aad(server: &str, user: &str) -> Vec<u8> {
    format!("antler mcp-oauth v1\u{1f}{server}\u{1f}{user}").into_bytes()
}

impl Sealer {
    /// The key in `path` (64 hex digits, surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Sealer, KeyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: shown.clone(),
            source,
        })?;
        let bytes = hex::decode(text.trim())
            .ok()
            .filter(|b| b.len() == KEY_HEX_LEN / 2)
            .ok_or(KeyError::Shape { path: shown })?;
        Ok(Sealer::from_bytes(&bytes))
    }

    fn from_bytes(bytes: &[u8]) -> Sealer {
        // 32 bytes is AES-256's key length, so the key is always accepted.
        #[allow(clippy::expect_used)]
        let key = UnboundKey::new(&AES_256_GCM, bytes).expect("a 32-byte AES-256 key");
        Sealer {
            key: LessSafeKey::new(key),
            random: SystemRandom::new(),
        }
    }

    /// `plain` sealed for (`server`, `user`): nonce, then ciphertext and tag. `None` only
    /// when the system has no randomness to give.
    pub fn seal(&self, server: &str, user: &str, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).ok()?;
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(server, user)),
                &mut body,
            )
            .ok()?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&body);
        Some(out)
    }

    /// What [`Sealer::seal`] sealed for (`server`, `user`); `None` when it was sealed
    /// with another key, as another (server, user), or altered.
    pub fn open(&self, server: &str, user: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad(server, user)), &mut body)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// A change of this host's store, sealed to leave it (`None`: it does not encode).
pub fn seal_change(sealer: &Sealer, change: &super::store::Change) -> Option<SealedCredential> {
    let sealed = match &change.entry.credentials {
        None => None,
        Some(c) => {
            let plain = serde_json::to_vec(c).ok()?;
            Some(sealer.seal(&change.server, &change.user, &plain)?)
        }
    };
    Some(SealedCredential {
        server: change.server.clone(),
        user: change.user.clone(),
        updated_ms: change.entry.updated_ms,
        sealed,
    })
}

/// Another replica's sealed credential, opened (`None`: not sealed with this key, or
/// altered; a warning says so without a byte of it).
pub fn open_sealed(sealer: &Sealer, sealed: &SealedCredential) -> Option<super::store::Change> {
    let credentials = match &sealed.sealed {
        None => None,
        Some(bytes) => {
            let plain = sealer.open(&sealed.server, &sealed.user, bytes);
            let parsed = plain.and_then(|p| serde_json::from_slice(&p).ok());
            if parsed.is_none() {
                tracing::warn!(
                    server = %sealed.server,
                    "a shared OAuth credential does not open with this host's key (another cluster's key, or altered); ignored"
                );
                return None;
            }
            parsed
        }
    };
    Some(super::store::Change {
        server: sealed.server.clone(),
        user: sealed.user.clone(),
        entry: super::store::Entry {
            updated_ms: sealed.updated_ms,
            credentials,
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_only_with_its_key_and_as_its_server_and_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        let sealer = Sealer::from_file(&path).unwrap();
        let sealed = sealer.seal("srv", "alice", b"token-json").unwrap();
        assert!(!sealed.windows(10).any(|w| w == b"token-json"));
        assert_eq!(
            sealer.open("srv", "alice", &sealed).as_deref(),
            Some(&b"token-json"[..])
        );
        assert_eq!(sealer.open("srv", "bob", &sealed), None);
        assert_eq!(sealer.open("other", "alice", &sealed), None);
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(sealer.open("srv", "alice", &altered), None);
        let other = Sealer::from_bytes(&[7u8; 32]);
        assert_eq!(other.open("srv", "alice", &sealed), None);
        assert_eq!(sealer.open("srv", "alice", b"short"), None);
    }

    #[test]
    fn a_bad_key_file_is_refused_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "not-a-key-secret-value").unwrap();
        let e = Sealer::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("64 hex digits"), "{e}");
        assert!(!e.contains("secret-value"), "{e}");
        let e = Sealer::from_file(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read"), "{e}");
    }
}
