//! The DSN's TLS settings, as libpq reads them: `sslmode` (disable, prefer, require,
//! verify-ca, verify-full) and `sslrootcert` (a PEM file of CAs, or `system`). tokio-postgres's
//! own parser knows only three modes and no `sslrootcert`, so [`split`] takes both out of the
//! DSN, in either form (`postgres://…?sslmode=…` or `host=… sslmode=…`), and hands the rest
//! to tokio-postgres unchanged. Nothing here echoes the DSN: errors name the setting only.

use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use super::HaError;

/// The DSN keys this module owns.
const SSLMODE: &str = "sslmode";
const SSLROOTCERT: &str = "sslrootcert";
/// `sslrootcert=system`: the system's trusted CAs (libpq 16).
const SYSTEM: &str = "system";

/// How much TLS the DSN asks for (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is not checked
    /// (unless `sslrootcert` names a file).
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless `sslrootcert` names a
    /// file, as libpq does when it finds a root certificate).
    Require,
    /// TLS; the server's certificate chains to a trusted CA, whatever host it names.
    VerifyCa,
    /// TLS; the certificate chains to a trusted CA and names the host dialed.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<Self, HaError> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(HaError::Tls(format!(
                    "sslmode={other} is not supported: use disable, prefer, require, \
                     verify-ca or verify-full"
                )))
            }
        })
    }
}

/// The CAs a verifying mode trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The PEM file `sslrootcert` names.
    File(PathBuf),
    /// The system's trusted CAs (`sslrootcert=system`, or no `sslrootcert` at all).
    System,
}

/// The TLS settings of one DSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslSettings {
    pub mode: SslMode,
    /// `None`: not given.
    pub root_cert: Option<Roots>,
}

impl SslSettings {
    /// Whether the certificate's chain is checked, and the host name too: `(chain, name)`.
    pub fn checks(&self) -> (bool, bool) {
        match (self.mode, &self.root_cert) {
            (SslMode::Disable, _) => (false, false),
            (SslMode::Prefer | SslMode::Require, Some(Roots::File(_))) => (true, false),
            (SslMode::Prefer | SslMode::Require, _) => (false, false),
            (SslMode::VerifyCa, _) => (true, false),
            (SslMode::VerifyFull, _) => (true, true),
        }
    }

    /// The CAs a checked chain must reach.
    pub fn roots(&self) -> Roots {
        self.root_cert.clone().unwrap_or(Roots::System)
    }
}

/// The DSN without `sslmode` and `sslrootcert`, and what they said (libpq's defaults:
/// `prefer`, or `verify-full` with `sslrootcert=system`, which refuses weaker modes).
pub fn split(dsn: &str) -> Result<(String, SslSettings), HaError> {
    let (rest, mode, root_cert) = match url_body(dsn) {
        Some(body) => split_url(dsn, body),
        None => split_key_values(dsn),
    };
    let root_cert = root_cert.map(|v| {
        if v == SYSTEM {
            Roots::System
        } else {
            Roots::File(PathBuf::from(v))
        }
    });
    let mode = match (mode.as_deref().map(SslMode::parse).transpose()?, &root_cert) {
        (Some(mode), _) => mode,
        (None, Some(Roots::System)) => SslMode::VerifyFull,
        (None, _) => SslMode::Prefer,
    };
    if root_cert == Some(Roots::System) && mode != SslMode::VerifyFull {
        return Err(HaError::Tls(format!(
            "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
            mode.as_str()
        )));
    }
    Ok((rest, SslSettings { mode, root_cert }))
}

/// What follows `postgres://` or `postgresql://`, if the DSN is a URL.
fn url_body(dsn: &str) -> Option<&str> {
    ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| dsn.strip_prefix(prefix))
}

type Split = (String, Option<String>, Option<String>);

/// A URL's query parameters: the credentials run to the first `@` (as tokio-postgres reads
/// them, so a `?` in a password is not mistaken for the query).
fn split_url(dsn: &str, body: &str) -> Split {
    let prefix_len = dsn.len() - body.len();
    let after_credentials = body.find('@').map_or(0, |at| at + 1);
    let Some(question) = body[after_credentials..].find('?') else {
        return (dsn.to_owned(), None, None);
    };
    let query_at = prefix_len + after_credentials + question;
    let (mut mode, mut root_cert) = (None, None);
    let mut kept = Vec::new();
    for param in dsn[query_at + 1..].split('&') {
        let key = param.split_once('=').map(|(k, v)| (decode(k), v));
        match key {
            Some((k, v)) if k == SSLMODE => mode = Some(decode(v)),
            Some((k, v)) if k == SSLROOTCERT => root_cert = Some(decode(v)),
            _ => kept.push(param),
        }
    }
    let mut rest = dsn[..query_at].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    (rest, mode, root_cert)
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// `key=value` pairs (values quoted with `'`, `\` escaping), rewritten without the two
/// keys. A string that does not tokenize is passed on whole, for tokio-postgres to refuse
/// with its own message.
fn split_key_values(dsn: &str) -> Split {
    let Some(pairs) = key_values(dsn) else {
        return (dsn.to_owned(), None, None);
    };
    let (mut mode, mut root_cert) = (None, None);
    let mut kept = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            SSLMODE => mode = Some(value),
            SSLROOTCERT => root_cert = Some(value),
            _ => {
                let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
                kept.push(format!("{key}='{quoted}'"));
            }
        }
    }
    (kept.join(" "), mode, root_cert)
}

/// The pairs of a key-value DSN, read as tokio-postgres (and libpq) read them.
fn key_values(dsn: &str) -> Option<Vec<(String, String)>> {
    let mut chars = dsn.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            return chars.peek().is_none().then_some(pairs);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
            if value.is_empty() {
                return None;
            }
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn settings(mode: SslMode, root_cert: Option<Roots>) -> SslSettings {
        SslSettings { mode, root_cert }
    }

    #[test]
    fn a_url_loses_the_two_keys_and_keeps_the_rest() {
        let (rest, ssl) = split(
            "postgres://u:p%3Fw@db.example:5433/antler?connect_timeout=3&sslmode=verify-full\
             &sslrootcert=%2Fetc%2Fca%20x.crt&application_name=a",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%3Fw@db.example:5433/antler?connect_timeout=3&application_name=a"
        );
        assert_eq!(
            ssl,
            settings(
                SslMode::VerifyFull,
                Some(Roots::File("/etc/ca x.crt".into()))
            )
        );
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        let (rest, ssl) = split("postgresql://u:a?b@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgresql://u:a?b@h/db");
        assert_eq!(ssl, settings(SslMode::Require, None));
        let (rest, ssl) = split("postgres://u:a?b@h/db").unwrap();
        assert_eq!(rest, "postgres://u:a?b@h/db");
        assert_eq!(ssl, settings(SslMode::Prefer, None));
    }

    #[test]
    fn key_values_are_rewritten_quoted() {
        let (rest, ssl) = split(
            "host=db user=antler password='it''s' sslmode=verify-ca sslrootcert='/a b/ca.crt'",
        )
        .unwrap_or_else(|_| panic!("parse"));
        // `'it''` then `s'`: not a valid value; tokio-postgres would refuse it, so the
        // string is passed on whole.
        assert_eq!(ssl.mode, SslMode::Prefer);
        assert!(rest.contains("sslmode"));

        let (rest, ssl) = split(
            r"host=db user=antler password='it\'s a\\b' sslmode = verify-ca sslrootcert='/a b/ca.crt'",
        )
        .unwrap();
        assert_eq!(rest, r"host='db' user='antler' password='it\'s a\\b'");
        assert_eq!(
            ssl,
            settings(SslMode::VerifyCa, Some(Roots::File("/a b/ca.crt".into())))
        );
        let config: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_password(), Some(&br"it's a\b"[..]));
    }

    #[test]
    fn system_roots_default_to_verify_full_and_refuse_weaker_modes() {
        let (_, ssl) = split("host=db sslrootcert=system").unwrap();
        assert_eq!(ssl, settings(SslMode::VerifyFull, Some(Roots::System)));
        let err = split("postgres://db/x?sslrootcert=system&sslmode=require").unwrap_err();
        assert_eq!(
            err.to_string(),
            "PostgreSQL TLS: weak sslmode \"require\" may not be used with sslrootcert=system \
             (use \"verify-full\")"
        );
    }

    #[test]
    fn an_unknown_mode_is_named_without_the_dsn() {
        let err = split("postgres://u:secret@db/x?sslmode=allow").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sslmode=allow is not supported"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn what_each_mode_checks() {
        let file = Some(Roots::File("/ca.crt".into()));
        assert_eq!(
            settings(SslMode::Disable, file.clone()).checks(),
            (false, false)
        );
        assert_eq!(settings(SslMode::Require, None).checks(), (false, false));
        assert_eq!(
            settings(SslMode::Require, file.clone()).checks(),
            (true, false)
        );
        assert_eq!(settings(SslMode::VerifyCa, None).checks(), (true, false));
        assert_eq!(settings(SslMode::VerifyFull, file).checks(), (true, true));
        assert_eq!(settings(SslMode::VerifyFull, None).roots(), Roots::System);
    }
}
