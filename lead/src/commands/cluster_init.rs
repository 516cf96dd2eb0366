//! `antler cluster init DIR`: the files cluster mode's mutual TLS needs, in the shape of a
//! Kubernetes Secret (one file per key): the cluster CA (`ca.crt`, `ca.key`), a
//! certificate and key per role (`lead`, `mcp-host`, `sandbox-host`, `subagent`, `cli`),
//! each naming its role as `<role>.antler.cluster`, the cluster `token`, and the key the
//! mcp-host replicas seal their shared OAuth credentials with (`mcp-oauth.key`, for
//! mcp-host's `--oauth-key-file` only: the lead never needs it). Files are
//! 0600 in a 0700 directory; a non-empty directory is overwritten only with `--force`.

use std::{
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
    process::ExitCode,
};

use antler_protocol::{
    runtime_dir::write_private,
    tls::{role_dns_name, ROLE_DOMAIN},
    Role,
};
use anyhow::{bail, Context};
use clap::Subcommand;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// The roles `cluster init` writes a certificate for, in order.
pub const ROLES: [Role; 5] = [
    Role::Lead,
    Role::McpHost,
    Role::SandboxHost,
    Role::Subagent,
    Role::Cli,
];

/// The file of mcp-host's OAuth sealing key (64 hex digits).
pub const MCP_OAUTH_KEY: &str = "mcp-oauth.key";

/// The longest validity `--days` accepts (about 100 years).
pub const MAX_DAYS: u32 = 36_500;

/// `antler cluster ...`: cluster mode's files.
#[derive(Debug, Subcommand)]
pub enum ClusterModeCommand {
    /// Write a new cluster CA, a certificate and key for each role (lead, mcp-host,
    /// sandbox-host, subagent, cli) and a cluster token into DIR, files named as the keys
    /// of a Kubernetes Secret (`kubectl create secret generic antler-cluster
    /// --from-file=DIR`).
    Init {
        /// The directory to write (created 0700; files 0600).
        dir: PathBuf,
        /// Days the CA and the certificates are valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Overwrite the files of a directory that is not empty.
        #[arg(long)]
        force: bool,
    },
}

pub fn run(command: ClusterModeCommand) -> anyhow::Result<ExitCode> {
    match command {
        ClusterModeCommand::Init { dir, days, force } => {
            let written = init(&dir, days, force)?;
            println!(
                "wrote {} files to {} (valid {days} days):",
                written.len(),
                dir.display()
            );
            for f in &written {
                println!("  {f}");
            }
            println!(
                "each process takes ca.crt, its role's .crt and .key (--tls-ca, --tls-cert, \
                 --tls-key, or antler.tls for the lead) and token (--token-file); keep ca.key \
                 off the cluster's machines"
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The CA's identity (its distinguished name and usages, no dates): the same every time,
/// so a certificate issued later with `ca.key` chains to `ca.crt`.
pub fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Antler");
    dn.push(
        DnType::CommonName,
        format!("Antler cluster CA ({ROLE_DOMAIN})"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The parameters of a certificate for `role`: its DNS name, both TLS usages.
pub fn role_params(role: Role) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(vec![role_dns_name(role)])?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Antler");
    dn.push(DnType::OrganizationalUnitName, role.as_str());
    dn.push(DnType::CommonName, role_dns_name(role));
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// Writes the files and returns their names.
pub fn init(dir: &Path, days: u32, force: bool) -> anyhow::Result<Vec<String>> {
    if !(1..=MAX_DAYS).contains(&days) {
        bail!("--days: expected a number of days from 1 to {MAX_DAYS}");
    }
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => bail!("{} exists and is not a directory", dir.display()),
        Ok(_) => {
            let non_empty = std::fs::read_dir(dir)
                .with_context(|| format!("cannot read {}", dir.display()))?
                .next()
                .is_some();
            if non_empty && !force {
                bail!(
                    "{} is not empty: pass --force to overwrite its cluster files",
                    dir.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private", dir.display()))?;

    let now = time::OffsetDateTime::now_utc();
    // A minute of slack for clocks a little behind this one.
    let not_before = now - time::Duration::minutes(1);
    let not_after = now + time::Duration::days(i64::from(days));
    let ca_key = KeyPair::generate().context("cannot generate the CA key")?;
    let mut ca = ca_params();
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_cert = ca
        .self_signed(&ca_key)
        .context("cannot sign the CA certificate")?;
    let issuer = Issuer::new(ca, &ca_key);
    let mut files: Vec<(String, String)> = vec![
        ("ca.crt".into(), ca_cert.pem()),
        ("ca.key".into(), ca_key.serialize_pem()),
    ];
    for role in ROLES {
        let key = KeyPair::generate().with_context(|| format!("cannot generate the {role} key"))?;
        let mut params = role_params(role)?;
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params
            .signed_by(&key, &issuer)
            .with_context(|| format!("cannot sign the {role} certificate"))?;
        files.push((format!("{role}.crt"), cert.pem()));
        files.push((format!("{role}.key"), key.serialize_pem()));
    }
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    files.push(("token".into(), token));
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key).context("the system gave no randomness for the key")?;
    files.push((MCP_OAUTH_KEY.into(), hex::encode(key) + "\n"));
    for (name, text) in &files {
        let path = dir.join(name);
        write_private(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(files.into_iter().map(|(name, _)| name).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use antler_protocol::tls::{ClusterTls, TlsFiles};

    #[test]
    fn every_role_gets_a_certificate_that_loads_for_that_role_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("secret");
        let names = init(&dir, 30, false).unwrap();
        assert_eq!(names.len(), 2 + 2 * ROLES.len() + 2);
        let key = std::fs::read_to_string(dir.join(MCP_OAUTH_KEY)).unwrap();
        assert_eq!(hex::decode(key.trim()).unwrap().len(), 32);
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        for name in &names {
            let mode = std::fs::metadata(dir.join(name))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        for role in ROLES {
            let files = TlsFiles {
                ca: dir.join("ca.crt"),
                cert: dir.join(format!("{role}.crt")),
                key: dir.join(format!("{role}.key")),
            };
            assert_eq!(ClusterTls::load(&files, role).unwrap().role(), role);
            let other = if role == Role::Lead {
                Role::Subagent
            } else {
                Role::Lead
            };
            let e = ClusterTls::load(&files, other).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "names role {role}, not this process's role {other}"
                )),
                "{e}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("token")).unwrap().len(),
            64
        );
    }

    #[test]
    fn a_non_empty_directory_needs_force() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("ca.crt"), "old").unwrap();
        let e = init(tmp.path(), 30, false).unwrap_err().to_string();
        assert!(e.contains("is not empty: pass --force"), "{e}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("ca.crt")).unwrap(),
            "old"
        );
        init(tmp.path(), 30, true).unwrap();
        assert!(std::fs::read_to_string(tmp.path().join("ca.crt"))
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----"));
        let e = init(&tmp.path().join("x"), 0, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--days"), "{e}");
    }
}
