//! `antler.gateway`: who may use the lead's HTTP gateway. Principals are static bearer
//! tokens mapped to users (`tokens`), and JWT bearer tokens verified against a JWKS
//! (`jwt`: a file or a URL; issuer, audience, expiry; RS256 and ES256), the user taken from
//! a configured claim. A principal whose role is `operator_role` sees every run; any other
//! sees only its own. The cluster's own gateway token (`ANTLER_GATEWAY_TOKEN`, or
//! `gateway.token` on loopback) stays the operator's.

use std::path::PathBuf;

use serde::Deserialize;

use super::diagnostics::FieldPath;

/// The keys of `antler.gateway`.
pub const GATEWAY_KEYS: &[&str] = &[
    "operator_role",
    "tokens",
    "jwt",
    "allow_stdio_mcp",
    "allow_scripted_models",
    "allow_shared_user_ids",
    "limits",
    "mcp_server",
];
/// The keys of `antler.gateway.mcp_server`.
pub const MCP_SERVER_KEYS: &[&str] = &["session_idle_s"];
/// The keys of `antler.gateway.limits`.
pub const LIMITS_KEYS: &[&str] = &[
    "concurrent_runs",
    "submissions_per_minute",
    "event_streams",
    "connections",
];
/// The user id of the operator's own runs (the cluster's token names no user): no
/// principal of the config may take it.
pub const OPERATOR_USER: &str = "default";
/// The keys of `antler.gateway.jwt`.
pub const JWT_KEYS: &[&str] = &[
    "jwks_file",
    "jwks_url",
    "issuer",
    "audience",
    "user_claim",
    "role_claim",
    "algorithms",
    "leeway_s",
    "refresh_s",
    "user_prefix",
];
/// The signature algorithms a JWT principal may use.
pub const JWT_ALGORITHMS: &[&str] = &["RS256", "ES256"];

/// `antler.gateway`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping of gateway settings")]
pub struct GatewaySection {
    /// The role whose principals see and answer every run (and may use `/metrics` and the
    /// MCP config routes).
    pub operator_role: String,
    /// Static bearer tokens, each mapped to a user.
    pub tokens: Vec<StaticPrincipal>,
    /// JWT bearer tokens.
    pub jwt: Option<JwtSection>,
    /// Whether `PUT /api/mcp/config` may add or change a stdio server (a command mcp-host
    /// runs as the operator's Unix user, outside any sandbox). Off: commands come only
    /// from the file the operator edits.
    pub allow_stdio_mcp: bool,
    /// Whether a gateway principal other than the operator may run a scripted model
    /// (`playbook`, `playbook_yaml`): a test and demo facility that scripts every call.
    pub allow_scripted_models: bool,
    /// Whether a JWT `user_prefix` may map JWT users onto the names of static tokens.
    pub allow_shared_user_ids: bool,
    /// Per-user limits.
    pub limits: LimitsSection,
    /// Antler's own MCP server (`/mcp`).
    pub mcp_server: McpServerSection,
}

/// `antler.gateway.mcp_server`: the sessions of Antler's MCP server at `/mcp`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping of MCP server settings")]
pub struct McpServerSection {
    /// A session without a request for this many seconds ends: its run ends, its sandbox
    /// goes back to its pool and its thread is free (a client that never closes its
    /// session holds them until then). At least 1.
    pub session_idle_s: u64,
}

impl Default for McpServerSection {
    fn default() -> Self {
        McpServerSection {
            session_idle_s: 300,
        }
    }
}

/// `antler.gateway.limits`: what one user may hold of the cluster (the operator is not
/// limited). A user over its own limit gets 429 with `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, expecting = "a mapping of per-user limits")]
pub struct LimitsSection {
    /// Runs of one user running at once (one waiting for an answer does not count).
    pub concurrent_runs: u32,
    /// Runs one user may submit per minute (a burst of as many, refilled evenly).
    pub submissions_per_minute: u32,
    /// Open `/events` streams of one user.
    pub event_streams: u32,
    /// Open connections to the gateway in all (beyond them, new ones wait in the
    /// kernel's backlog).
    pub connections: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            concurrent_runs: 16,
            submissions_per_minute: 120,
            event_streams: 32,
            connections: 2048,
        }
    }
}

impl Default for GatewaySection {
    fn default() -> Self {
        GatewaySection {
            operator_role: "operator".into(),
            tokens: Vec::new(),
            jwt: None,
            allow_stdio_mcp: false,
            allow_scripted_models: false,
            allow_shared_user_ids: false,
            limits: LimitsSection::default(),
            mcp_server: McpServerSection::default(),
        }
    }
}

/// One static token of `antler.gateway.tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping with token, user and role")]
pub struct StaticPrincipal {
    /// The bearer token (`$VAR` reads the environment).
    pub token: String,
    /// The user the token acts as: its runs are this user's.
    pub user: String,
    /// The role, for the catalog's authorization policy and `operator_role`.
    #[serde(default)]
    pub role: Option<String>,
}

/// `antler.gateway.jwt`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    default,
    expecting = "a mapping with jwks_file or jwks_url, issuer and audience"
)]
pub struct JwtSection {
    /// A JWKS document on the lead's disk (relative to config.yaml's directory).
    pub jwks_file: Option<PathBuf>,
    /// A JWKS document fetched over HTTP(S), again every `refresh_s` and when a token
    /// names a key it does not hold.
    pub jwks_url: Option<String>,
    /// The `iss` a token must carry.
    pub issuer: String,
    /// An `aud` a token must carry.
    pub audience: String,
    /// The claim naming the user (`sub`).
    pub user_claim: String,
    /// The claim naming the role (a string, or a list whose first entry is taken).
    pub role_claim: Option<String>,
    /// Accepted algorithms, of RS256 and ES256 (both by default).
    pub algorithms: Vec<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    pub leeway_s: u64,
    /// Seconds between fetches of `jwks_url`.
    pub refresh_s: u64,
    /// Put before the user claim's value to make the user id, so a JWT's `sub` never
    /// names a static token's user or the operator's own (`jwt-` by default).
    pub user_prefix: String,
}

/// The default [`JwtSection::user_prefix`].
pub const DEFAULT_JWT_USER_PREFIX: &str = "jwt-";

impl Default for JwtSection {
    fn default() -> Self {
        JwtSection {
            jwks_file: None,
            jwks_url: None,
            issuer: String::new(),
            audience: String::new(),
            user_claim: "sub".into(),
            role_claim: None,
            algorithms: JWT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect(),
            leeway_s: 30,
            refresh_s: 300,
            user_prefix: DEFAULT_JWT_USER_PREFIX.into(),
        }
    }
}

impl GatewaySection {
    /// Values the gateway cannot work with.
    pub(crate) fn check(&self, base: &FieldPath) -> Vec<(FieldPath, &'static str)> {
        let base = base.key("gateway");
        let mut problems = Vec::new();
        if self.operator_role.trim().is_empty() {
            problems.push((base.key("operator_role"), "expected a role name"));
        }
        for (i, t) in self.tokens.iter().enumerate() {
            let at = base.key("tokens").index(i);
            if t.token.len() < 16 {
                problems.push((
                    at.key("token"),
                    "expected a token of at least 16 characters (is its $VAR set?)",
                ));
            }
            if !valid_user(&t.user) {
                problems.push((
                    at.key("user"),
                    "expected a user id of letters, digits, - and _ (at most 128)",
                ));
            }
            if self.tokens[..i].iter().any(|o| o.token == t.token) {
                problems.push((at.key("token"), "expected a token no other entry uses"));
            }
            if t.user == OPERATOR_USER {
                problems.push((
                    at.key("user"),
                    "expected a user other than `default` (the operator's own runs)",
                ));
            }
        }
        let limits = base.key("limits");
        for (key, value) in [
            ("concurrent_runs", self.limits.concurrent_runs),
            ("submissions_per_minute", self.limits.submissions_per_minute),
            ("event_streams", self.limits.event_streams),
            ("connections", self.limits.connections),
        ] {
            if value == 0 {
                problems.push((limits.key(key), "expected an integer of at least 1"));
            }
        }
        if self.mcp_server.session_idle_s == 0 {
            problems.push((
                base.key("mcp_server").key("session_idle_s"),
                "expected an integer of at least 1",
            ));
        }
        if let Some(jwt) = &self.jwt {
            let at = base.key("jwt");
            if jwt.jwks_file.is_some() == jwt.jwks_url.is_some() {
                problems.push((at.clone(), "expected exactly one of jwks_file and jwks_url"));
            }
            if let Some(url) = &jwt.jwks_url {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    problems.push((at.key("jwks_url"), "expected an http(s) URL"));
                }
            }
            if jwt.issuer.is_empty() {
                problems.push((at.key("issuer"), "expected the issuer tokens must name"));
            }
            if jwt.audience.is_empty() {
                problems.push((at.key("audience"), "expected the audience tokens must name"));
            }
            if jwt.user_claim.is_empty() {
                problems.push((at.key("user_claim"), "expected a claim name"));
            }
            if jwt.algorithms.is_empty()
                || jwt
                    .algorithms
                    .iter()
                    .any(|a| !JWT_ALGORITHMS.contains(&a.as_str()))
            {
                problems.push((at.key("algorithms"), "expected a list of RS256 and ES256"));
            }
            if jwt.refresh_s == 0 {
                problems.push((at.key("refresh_s"), "expected an integer of at least 1"));
            }
            if !jwt.user_prefix.is_empty() && !valid_user(&jwt.user_prefix) {
                problems.push((
                    at.key("user_prefix"),
                    "expected letters, digits, - and _ (or empty, with allow_shared_user_ids)",
                ));
            }
            // Two login sources onto one name: a JWT's `sub` would act as a static user.
            let shared = jwt.user_prefix.is_empty()
                || self
                    .tokens
                    .iter()
                    .any(|t| t.user.starts_with(jwt.user_prefix.as_str()));
            if shared && !self.allow_shared_user_ids {
                problems.push((
                    at.key("user_prefix"),
                    "expected a prefix no static token's user starts with (JWT users and static users would share ids; set allow_shared_user_ids: true to allow it)",
                ));
            }
        }
        problems
    }
}

/// A user id that is safe as a directory name (the lead's rule for runs' users).
pub fn valid_user(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= 128
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_full_section_parse() {
        let g: GatewaySection = serde_yaml::from_str("{}").unwrap();
        assert_eq!(g, GatewaySection::default());
        let g: GatewaySection = serde_yaml::from_str(
            "tokens:\n  - {token: aaaaaaaaaaaaaaaaaaaa, user: alice}\n  - {token: bbbbbbbbbbbbbbbbbbbb, user: ops, role: operator}\njwt:\n  jwks_file: jwks.json\n  issuer: https://idp\n  audience: antler\n",
        )
        .unwrap();
        assert!(g.check(&FieldPath::root()).is_empty());
        assert_eq!(g.tokens[1].role.as_deref(), Some("operator"));
        assert_eq!(g.jwt.as_ref().unwrap().user_claim, "sub");
        assert_eq!(g.mcp_server.session_idle_s, 300);
        let g: GatewaySection = serde_yaml::from_str("mcp_server: {session_idle_s: 0}").unwrap();
        let problems = g.check(&FieldPath::root());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0]
            .0
            .to_string()
            .ends_with("mcp_server.session_idle_s"));
    }

    #[test]
    fn bad_values_are_named() {
        let g: GatewaySection = serde_yaml::from_str(
            "tokens:\n  - {token: short, user: 'a/b'}\njwt:\n  jwks_url: ftp://x\n  jwks_file: f\n  algorithms: [HS256]\n",
        )
        .unwrap();
        let problems: Vec<String> = g
            .check(&FieldPath::root())
            .into_iter()
            .map(|(p, m)| format!("{p}: {m}"))
            .collect();
        let all = problems.join("\n");
        for needle in [
            "tokens[0].token",
            "tokens[0].user",
            "exactly one of jwks_file and jwks_url",
            "jwks_url: expected an http(s) URL",
            "issuer",
            "audience",
            "algorithms",
        ] {
            assert!(all.contains(needle), "{needle} not in\n{all}");
        }
    }
}
