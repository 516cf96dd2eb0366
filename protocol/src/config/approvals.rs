//! PLACEHOLDER of branch `approve` only (replaced by branch `policy` at merge).
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    #[default]
    Allow,
    Ask,
    Deny,
}
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalsConfig {
    pub defaults: bool,
    pub deadline_seconds: u64,
    pub unparsed: Decision,
    pub rules: Vec<RuleConfig>,
    pub roles: BTreeMap<String, Vec<RuleConfig>>,
}
impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            defaults: true,
            deadline_seconds: 600,
            unparsed: Decision::Ask,
            rules: Vec::new(),
            roles: BTreeMap::new(),
        }
    }
}
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleConfig {
    pub name: String,
    #[serde(default)]
    pub tool: Option<String>,
    pub decision: Decision,
    #[serde(default)]
    pub justification: Option<String>,
}
