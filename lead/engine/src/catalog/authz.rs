//! Authorization layer 1: which tools a principal (user, role, agent) may see at all.
//! Runs at assembly, before deferral, so a denied tool never enters the catalog or the
//! deferred set and `tool_search` cannot bring it back. A policy that cannot be evaluated
//! fails closed (unless `authorization.fail_closed` is false).
//!
//! Policy (`authorization.provider`, `use: antler.authz:AllowlistPolicy`, or DeerFlow's
//! `...:AllowlistProvider`): `config: {default, roles: {R: rules}, users: {U: rules},
//! agents: {A: rules}}`, each `rules` being `{allowed_tools: [..] | null, denied_tools: [..]}`.
//! Every rule set that applies must allow a tool; `null` allows all, `[]` allows none;
//! a name ending in `*` matches by prefix.

use antler_protocol::config::AuthorizationConfig;
use serde::Deserialize;
use serde_json::Value;

/// Who a run acts for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Principal {
    pub user: Option<String>,
    pub role: Option<String>,
    pub agent: Option<String>,
}

/// One allow/deny pair.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rules {
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    pub denied_tools: Vec<String>,
}

impl Rules {
    fn allows(&self, tool: &str) -> bool {
        let listed = |list: &[String]| list.iter().any(|p| pattern_matches(p, tool));
        self.allowed_tools.as_deref().is_none_or(listed) && !listed(&self.denied_tools)
    }
}

fn pattern_matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyDocument {
    #[serde(default)]
    default: Option<Rules>,
    #[serde(default)]
    roles: std::collections::BTreeMap<String, Rules>,
    #[serde(default)]
    users: std::collections::BTreeMap<String, Rules>,
    #[serde(default)]
    agents: std::collections::BTreeMap<String, Rules>,
}

/// The provider ids this policy answers to.
pub(crate) fn is_allowlist_provider(use_: &str) -> bool {
    use_ == "antler.authz:AllowlistPolicy" || use_.ends_with(":AllowlistProvider")
}

/// The decision for one principal: a filter over tool names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Authorization is off: everything is visible.
    AllowAll,
    /// Only tools every applicable rule set allows.
    Rules(Vec<Rules>),
    /// The policy could not be evaluated and fails closed: nothing is visible.
    DenyAll { reason: String },
}

impl Decision {
    pub(crate) fn allows(&self, tool: &str) -> bool {
        match self {
            Decision::AllowAll => true,
            Decision::Rules(sets) => sets.iter().all(|r| r.allows(tool)),
            Decision::DenyAll { .. } => false,
        }
    }
}

/// Evaluates the `authorization` section for `principal`.
pub(crate) fn decide(config: &AuthorizationConfig, principal: &Principal) -> Decision {
    if !config.enabled {
        return Decision::AllowAll;
    }
    let failed = |reason: String| {
        if config.fail_closed {
            Decision::DenyAll { reason }
        } else {
            tracing::warn!(%reason, "authorization cannot be evaluated; fail_closed is false, allowing");
            Decision::AllowAll
        }
    };
    let Some(provider) = &config.provider else {
        return failed("authorization is enabled but no provider is configured".into());
    };
    if !is_allowlist_provider(&provider.use_) {
        return failed(format!(
            "unknown authorization provider `{}` (expected antler.authz:AllowlistPolicy)",
            provider.use_
        ));
    }
    let doc: PolicyDocument = match serde_json::from_value(Value::Object(provider.config.clone())) {
        Ok(d) => d,
        Err(e) => return failed(format!("authorization policy does not parse: {e}")),
    };
    if principal.user.is_none()
        && principal.role.is_none()
        && principal.agent.is_none()
        && config.fail_closed
        && config.default_role.is_none()
        && doc.default.is_none()
    {
        return failed("no principal to authorize and no default rules".into());
    }
    let mut sets = Vec::new();
    if let Some(d) = doc.default {
        sets.push(d);
    }
    let role = principal
        .role
        .clone()
        .or_else(|| config.default_role.clone());
    for (key, table) in [
        (role.as_deref(), &doc.roles),
        (principal.user.as_deref(), &doc.users),
        (principal.agent.as_deref(), &doc.agents),
    ] {
        if let Some(k) = key {
            if let Some(r) = table.get(k) {
                sets.push(r.clone());
            }
        }
    }
    Decision::Rules(sets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use antler_protocol::config::ProviderConfig;
    use serde_json::{json, Map};

    /// Builds the provider config map, for tests.
    fn policy_config(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn config(policy: Value) -> AuthorizationConfig {
        AuthorizationConfig {
            enabled: true,
            fail_closed: true,
            default_role: Some("member".into()),
            provider: Some(ProviderConfig {
                use_: "antler.authz:AllowlistPolicy".into(),
                config: policy_config(policy),
            }),
        }
    }

    #[test]
    fn every_applicable_rule_set_must_allow() {
        let c = config(json!({
            "default": {"denied_tools": ["bash"]},
            "roles": {"member": {"allowed_tools": ["read_file", "web_*", "bash"]}, "admin": {"allowed_tools": null}},
            "users": {"eve": {"denied_tools": ["web_search"]}}
        }));
        let member = decide(
            &c,
            &Principal {
                user: Some("bob".into()),
                ..Principal::default()
            },
        );
        assert!(member.allows("read_file") && member.allows("web_fetch"));
        assert!(
            !member.allows("bash"),
            "default denial applies to every role"
        );
        assert!(!member.allows("write_file"));
        let eve = decide(
            &c,
            &Principal {
                user: Some("eve".into()),
                ..Principal::default()
            },
        );
        assert!(!eve.allows("web_search") && eve.allows("web_fetch"));
        let admin = decide(
            &c,
            &Principal {
                role: Some("admin".into()),
                ..Principal::default()
            },
        );
        assert!(admin.allows("write_file") && !admin.allows("bash"));
    }

    #[test]
    fn a_policy_that_cannot_be_evaluated_fails_closed() {
        let bad = config(json!({"roles": {"member": {"allowed_tools": "not a list"}}}));
        assert!(matches!(
            decide(&bad, &Principal::default()),
            Decision::DenyAll { .. }
        ));
        let mut unknown = config(json!({}));
        if let Some(p) = unknown.provider.as_mut() {
            p.use_ = "my.company:Opa".into();
        }
        let d = decide(&unknown, &Principal::default());
        assert!(!d.allows("read_file"));
        let mut none = config(json!({}));
        none.provider = None;
        assert!(matches!(
            decide(&none, &Principal::default()),
            Decision::DenyAll { .. }
        ));
        none.fail_closed = false;
        assert_eq!(decide(&none, &Principal::default()), Decision::AllowAll);
    }

    #[test]
    fn disabled_authorization_allows_everything() {
        let mut c = config(json!({"default": {"allowed_tools": []}}));
        c.enabled = false;
        assert!(decide(&c, &Principal::default()).allows("bash"));
        c.enabled = true;
        assert!(!decide(&c, &Principal::default()).allows("bash"));
    }
}
