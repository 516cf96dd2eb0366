//! `antler.ha`: several leads sharing their runs (issue 38, docs/ha.md). `leases_dsn` names
//! the PostgreSQL whose run leases say which lead drives each run (`$VAR` reads the
//! environment; `ANTLER_HA_DSN` overrides it); without one the lead drives its runs alone,
//! as it always did. `lease_ttl_ms` is how long a lead's lease lives unrenewed: a dead
//! lead's runs are taken over about that long after its last renewal. `advertise_url` is
//! the address other leads reach this lead's gateway at, to forward a write to a run it
//! drives (`ANTLER_HA_ADVERTISE_URL` overrides it; default `http://` + the bound address).
//! `lease_retention_ms` is how long the lease of a finished run is kept after its release,
//! and the row of a lead that stopped renewing after its last renewal, before a lead's
//! sweep removes them.

use std::time::Duration;

use serde::Deserialize;

use super::diagnostics::FieldPath;

/// The keys of `antler.ha`.
pub const HA_KEYS: &[&str] = &[
    "leases_dsn",
    "lease_ttl_ms",
    "advertise_url",
    "lease_retention_ms",
];

/// The environment variable that overrides `antler.ha.leases_dsn`.
pub const HA_DSN_ENV: &str = "ANTLER_HA_DSN";

/// The environment variable that overrides `antler.ha.advertise_url`.
pub const HA_ADVERTISE_URL_ENV: &str = "ANTLER_HA_ADVERTISE_URL";

/// The lease time to live by default: takeover within 5 s of a lead's death.
pub const DEFAULT_LEASE_TTL_MS: u64 = 3000;

/// How long released leases of finished runs and the rows of silent leads are kept by
/// default: an hour, as long as hosts and workers remember a run's epoch after its last
/// request (`fencing::IDLE_RETENTION`).
pub const DEFAULT_LEASE_RETENTION_MS: u64 = 3_600_000;

/// The shortest lease time to live: renewals every third of it must have time to land.
pub const MIN_LEASE_TTL_MS: u64 = 300;

/// Run leases on PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    default,
    expecting = "a mapping with leases_dsn, lease_ttl_ms, advertise_url and lease_retention_ms"
)]
pub struct HaSection {
    /// The leases' database (`postgres://…` or `host=… dbname=…`); `None`: one lead.
    pub leases_dsn: Option<String>,
    /// How long a lease lives unrenewed, in milliseconds.
    pub lease_ttl_ms: u64,
    /// This lead's gateway as other leads reach it (`http://10.0.0.7:8001`); `None`:
    /// `http://` + the address the gateway bound.
    pub advertise_url: Option<String>,
    /// How long a finished run's released lease, and a silent lead's row, are kept, in
    /// milliseconds.
    pub lease_retention_ms: u64,
}

impl Default for HaSection {
    fn default() -> Self {
        Self {
            leases_dsn: None,
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            advertise_url: None,
            lease_retention_ms: DEFAULT_LEASE_RETENTION_MS,
        }
    }
}

impl HaSection {
    /// The leases' DSN: `ANTLER_HA_DSN` when set and not empty, else the section's (an unset
    /// `$VAR` resolves to "", which is none).
    pub fn leases_dsn(&self) -> Option<String> {
        std::env::var(HA_DSN_ENV)
            .ok()
            .filter(|dsn| !dsn.trim().is_empty())
            .or_else(|| self.leases_dsn.clone().filter(|dsn| !dsn.trim().is_empty()))
    }

    /// This lead's gateway URL for other leads: `ANTLER_HA_ADVERTISE_URL` when set and not
    /// empty, else the section's (`None`: the caller uses the bound address).
    pub fn advertise_url(&self) -> Option<String> {
        std::env::var(HA_ADVERTISE_URL_ENV)
            .ok()
            .or_else(|| self.advertise_url.clone())
            .map(|url| url.trim().trim_end_matches('/').to_owned())
            .filter(|url| !url.is_empty())
    }

    /// The lease time to live.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }

    /// How long released leases of finished runs and silent leads' rows are kept.
    pub fn lease_retention(&self) -> Duration {
        Duration::from_millis(self.lease_retention_ms)
    }

    /// Values the lead cannot work with, as (path, expectation).
    pub(crate) fn check(&self, base: &FieldPath) -> Vec<(FieldPath, &'static str)> {
        if self.lease_ttl_ms < MIN_LEASE_TTL_MS {
            return vec![(
                base.key("ha").key("lease_ttl_ms"),
                "expected an integer of at least 300 (milliseconds)",
            )];
        }
        // A live lead's row is refreshed every third of a time to live: a retention shorter
        // than one would remove rows of leads that are merely slow.
        if self.lease_retention_ms < self.lease_ttl_ms {
            return vec![(
                base.key("ha").key("lease_retention_ms"),
                "expected an integer of at least lease_ttl_ms (milliseconds)",
            )];
        }
        Vec::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_off_unless_a_dsn_is_given() {
        let ha: HaSection = serde_yaml::from_str("{}").unwrap();
        assert_eq!(ha, HaSection::default());
        assert_eq!(ha.lease_ttl(), Duration::from_secs(3));
        assert!(ha.check(&FieldPath::root().key("antler")).is_empty());
        let ha: HaSection = serde_yaml::from_str("{leases_dsn: '', lease_ttl_ms: 100}").unwrap();
        if std::env::var(HA_DSN_ENV).is_err() {
            assert_eq!(ha.leases_dsn(), None);
        }
        assert_eq!(ha.check(&FieldPath::root().key("antler")).len(), 1);
    }

    #[test]
    fn retention_is_an_hour_by_default_and_at_least_a_ttl() {
        let ha: HaSection = serde_yaml::from_str("{}").unwrap();
        assert_eq!(ha.lease_retention(), Duration::from_secs(3600));
        let ha: HaSection =
            serde_yaml::from_str("{lease_ttl_ms: 3000, lease_retention_ms: 3000}").unwrap();
        assert!(ha.check(&FieldPath::root().key("antler")).is_empty());
        let ha: HaSection =
            serde_yaml::from_str("{lease_ttl_ms: 3000, lease_retention_ms: 2999}").unwrap();
        let problems = ha.check(&FieldPath::root().key("antler"));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0.to_string(), "antler.ha.lease_retention_ms");
    }
}
