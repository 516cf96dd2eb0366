//! Who a sandbox belongs to: the `SandboxId` (the first 16 hex characters of
//! sha256(`user:thread`), the same in every process and after every restart), the user and
//! thread id rules of spec 6.2, and acquire-time authorization (`authorization.enabled`).

use antler_protocol::{
    config::AuthorizationConfig,
    messages::{Principal, SandboxError},
};
use serde_json::Value;

/// A deterministic sandbox id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId(String);

impl SandboxId {
    /// The id of (user, thread).
    pub fn for_thread(user_id: &str, thread_id: &str) -> Self {
        SandboxId(antler_protocol::placement::sandbox_id(user_id, thread_id))
    }

    /// An id for something that is not bound to a thread (a pre-warmed slot).
    pub fn unbound(name: &str) -> Self {
        SandboxId(name.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SandboxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Thread ids: 1–64 characters of `[A-Za-z0-9_-]`; user ids: `[A-Za-z0-9_-]`, at most 128.
pub fn validate(principal: &Principal) -> Result<(), SandboxError> {
    let t = &principal.thread_id;
    if t.is_empty() || t.len() > 64 || !t.chars().all(is_id_char) {
        return Err(SandboxError::InvalidIdentity(format!(
            "Invalid thread_id '{t}': expected 1-64 characters from [A-Za-z0-9_-]"
        )));
    }
    let u = &principal.user_id;
    if u.is_empty() || u.len() > 128 || !u.chars().all(is_id_char) {
        return Err(SandboxError::InvalidIdentity(format!(
            "Invalid user_id '{u}': expected 1-128 characters from [A-Za-z0-9_-]"
        )));
    }
    Ok(())
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    })
}

/// Whether the principal may use a sandbox. Off unless `authorization.enabled`. The rule
/// lives in `authorization.provider.config`: `sandbox_users` and `sandbox_roles` (either
/// admits), `deny_users` (always refused). Without a rule every identified user is allowed;
/// an unidentified one is refused when `fail_closed`.
pub fn authorize(auth: &AuthorizationConfig, p: &Principal) -> Result<(), SandboxError> {
    if !auth.enabled {
        return Ok(());
    }
    let refused = || SandboxError::Unauthorized {
        user_id: p.user_id.clone(),
    };
    if p.user_id.is_empty() {
        return if auth.fail_closed {
            Err(refused())
        } else {
            Ok(())
        };
    }
    let config = auth.provider.as_ref().map(|pr| &pr.config);
    let users = strings(config.and_then(|c| c.get("sandbox_users")));
    let roles = strings(config.and_then(|c| c.get("sandbox_roles")));
    let denied = strings(config.and_then(|c| c.get("deny_users"))).unwrap_or_default();
    if denied.contains(&p.user_id) {
        return Err(refused());
    }
    if users.is_none() && roles.is_none() {
        return Ok(());
    }
    let mut my_roles = p.roles.clone();
    if my_roles.is_empty() {
        my_roles.extend(auth.default_role.clone());
    }
    let by_user = users.is_some_and(|u| u.contains(&p.user_id));
    let by_role = roles.is_some_and(|r| r.iter().any(|x| my_roles.contains(x)));
    if by_user || by_role {
        Ok(())
    } else {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn id_is_the_sha256_prefix_of_user_colon_thread() {
        // sha256("alice:thread-1")
        let id = SandboxId::for_thread("alice", "thread-1");
        assert_eq!(id.as_str().len(), 16);
        let full = hex::encode(Sha256::digest(b"alice:thread-1"));
        assert_eq!(id.as_str(), &full[..16]);
        assert_ne!(id, SandboxId::for_thread("alice", "thread-2"));
    }

    #[test]
    fn identity_rules() {
        let p = |u: &str, t: &str| Principal {
            user_id: u.into(),
            thread_id: t.into(),
            roles: vec![],
        };
        assert!(validate(&p("u_1", "t-1")).is_ok());
        assert!(validate(&p("u", "")).is_err());
        assert!(validate(&p("u", &"x".repeat(65))).is_err());
        assert!(validate(&p("u", "../x")).is_err());
        assert!(validate(&p("a b", "t")).is_err());
    }
}
