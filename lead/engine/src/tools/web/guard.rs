//! The address guard of every fetching web tool (DeerFlow's `validate_public_http_url`, on
//! every backend and every redirect hop): only http(s) URLs, and only hosts whose every
//! address is public. A name is resolved once here and the connection is pinned to the
//! addresses checked, so DNS cannot answer differently between the check and the connect.
//! `allow_private_addresses: true` skips every check but the scheme; `allowed_private_hosts`
//! lets named `host` or `host:port` entries through while the rest stays guarded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;

/// A non-http(s) URL, or one with no authority.
pub const ONLY_HTTP: &str = "Error: Only http:// and https:// URLs are supported";
/// A URL whose host could not be parsed.
pub const HOST_UNPARSED: &str = "Error: URL host could not be parsed";
/// `localhost`, `*.localhost` and the cloud metadata names.
pub const PRIVATE_NAME: &str = "Error: Refusing to {action} a private or loopback address";
/// A name that does not resolve.
pub const HOST_UNRESOLVED: &str = "Error: URL host could not be resolved";
/// A literal or resolved address that is not public.
pub const PRIVATE_ADDRESS: &str =
    "Error: Refusing to {action} a private, loopback, or metadata address";

/// Host names refused before any lookup.
const PRIVATE_NAMES: &[&str] = &["localhost", "metadata.google.internal", "metadata"];

/// What the guard lets through beyond public addresses (per tool entry).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardPolicy {
    /// `allow_private_addresses: true`: only the scheme is checked.
    pub allow_private: bool,
    /// `allowed_private_hosts`: `host` or `host:port` entries allowed even when private.
    pub allowed_hosts: Vec<String>,
}

/// Why a URL was refused; `Display` is the text the model reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{ONLY_HTTP}")]
    Scheme,
    #[error("{HOST_UNPARSED}")]
    NoHost,
    #[error("{}", PRIVATE_NAME.replace("{action}", .0))]
    PrivateName(&'static str),
    #[error("{HOST_UNRESOLVED}")]
    Unresolved,
    #[error("{}", PRIVATE_ADDRESS.replace("{action}", .0))]
    PrivateAddress(&'static str),
}

/// Where a checked URL may be connected to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A name, with the addresses it resolved to (the connection must use only these).
    Pinned {
        host: String,
        addrs: Vec<SocketAddr>,
    },
    /// An IP literal, or a policy that lets the resolver pick (`allow_private_addresses`).
    Direct,
}

/// Parses `raw` and checks its scheme (the one check nothing skips).
pub fn parse_http_url(raw: &str) -> Result<Url, Refusal> {
    let url = Url::parse(raw.trim()).map_err(|e| match e {
        url::ParseError::EmptyHost
        | url::ParseError::InvalidIpv4Address
        | url::ParseError::InvalidIpv6Address
        | url::ParseError::InvalidDomainCharacter
        | url::ParseError::IdnaError
            if raw.trim_start().to_ascii_lowercase().starts_with("http") =>
        {
            Refusal::NoHost
        }
        _ => Refusal::Scheme,
    })?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_authority() {
        return Err(Refusal::Scheme);
    }
    if url.host().is_none() {
        return Err(Refusal::NoHost);
    }
    Ok(url)
}

/// DeerFlow's `validate_public_http_url`: the refusal text for `raw`, or `None` when it may
/// be fetched (remote readers use it on the URL they are asked to read).
pub async fn validate_public_http_url(
    raw: &str,
    policy: &GuardPolicy,
    action: &'static str,
) -> Option<String> {
    let url = match parse_http_url(raw) {
        Ok(url) => url,
        Err(refusal) => return Some(refusal.to_string()),
    };
    policy
        .check(&url, action)
        .await
        .err()
        .map(|r| r.to_string())
}

impl GuardPolicy {
    /// Checks `url` (already http(s)) for `action` (`fetch`): refuses private names and
    /// addresses, resolving a name once. The answer says where to connect.
    pub async fn check(&self, url: &Url, action: &'static str) -> Result<Target, Refusal> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refusal::Scheme);
        }
        if self.allow_private {
            return Ok(Target::Direct);
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let allowed = self.allows(url, port);
        match url.host() {
            None => Err(Refusal::NoHost),
            Some(url::Host::Ipv4(ip)) => check_ip(IpAddr::V4(ip), allowed, action),
            Some(url::Host::Ipv6(ip)) => check_ip(IpAddr::V6(ip), allowed, action),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                if !allowed
                    && (PRIVATE_NAMES.contains(&name.as_str()) || name.ends_with(".localhost"))
                {
                    return Err(Refusal::PrivateName(action));
                }
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                    .await
                    .map_err(|_| Refusal::Unresolved)?
                    .collect();
                if addrs.is_empty() {
                    return Err(Refusal::Unresolved);
                }
                if !allowed && addrs.iter().any(|a| !is_public(a.ip())) {
                    return Err(Refusal::PrivateAddress(action));
                }
                Ok(Target::Pinned {
                    host: url.host_str().unwrap_or_default().to_owned(),
                    addrs,
                })
            }
        }
    }

    fn allows(&self, url: &Url, port: u16) -> bool {
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        self.allowed_hosts.iter().any(|entry| {
            let entry = entry.trim().to_ascii_lowercase();
            entry == host || entry == bare || entry == format!("{host}:{port}")
        })
    }
}

fn check_ip(ip: IpAddr, allowed: bool, action: &'static str) -> Result<Target, Refusal> {
    if allowed || is_public(ip) {
        Ok(Target::Direct)
    } else {
        Err(Refusal::PrivateAddress(action))
    }
}

/// Whether `ip` is a globally routable unicast address: not loopback, private, CGNAT,
/// link-local (the 169.254.169.254 metadata service), documentation, benchmarking,
/// reserved, multicast, broadcast or unspecified; an IPv6 address embedding an IPv4 one
/// (mapped, compatible, NAT64, 6to4) is judged by that address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 192 && b == 88 && c == 99)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and the unspecified/loopback addresses.
    if s[..6] == [0, 0, 0, 0, 0, 0] {
        return s[6] != 0 && is_public_v4(embedded_v4(s[6], s[7]));
    }
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its low 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded_v4(s[6], s[7]));
    }
    // 6to4 (2002::/16) carries one in bits 16..48.
    if s[0] == 0x2002 {
        return is_public_v4(embedded_v4(s[1], s[2]));
    }
    !((s[0] & 0xfe00) == 0xfc00 // unique local (fd00:ec2::254, the EC2 metadata service)
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard
        || (s[0] == 0x2001 && s[1] < 0x0200)) // IETF protocol assignments, Teredo
}

fn embedded_v4(hi: u16, lo: u16) -> Ipv4Addr {
    let [a, b] = hi.to_be_bytes();
    let [c, d] = lo.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for s in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "ff02::1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip(s)), "{s} must not be public");
        }
        for s in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(ip(s)), "{s} is public");
        }
    }

    #[test]
    fn scheme_and_host_errors_have_deerflows_texts() {
        assert_eq!(
            parse_http_url("file:///etc/passwd")
                .unwrap_err()
                .to_string(),
            ONLY_HTTP
        );
        assert_eq!(
            parse_http_url("ftp://example.com/")
                .unwrap_err()
                .to_string(),
            ONLY_HTTP
        );
        assert_eq!(
            parse_http_url("example.com").unwrap_err().to_string(),
            ONLY_HTTP
        );
        assert_eq!(
            parse_http_url("http://").unwrap_err().to_string(),
            HOST_UNPARSED
        );
    }

    #[tokio::test]
    async fn names_and_literals_are_refused_unless_allowed() {
        let guard = GuardPolicy::default();
        let check = |u: &str| {
            let url = parse_http_url(u).expect("url");
            let guard = guard.clone();
            async move { guard.check(&url, "fetch").await }
        };
        assert_eq!(
            check("http://localhost:8080/")
                .await
                .unwrap_err()
                .to_string(),
            "Error: Refusing to fetch a private or loopback address"
        );
        assert_eq!(
            check("http://169.254.169.254/latest/meta-data/")
                .await
                .unwrap_err()
                .to_string(),
            "Error: Refusing to fetch a private, loopback, or metadata address"
        );
        assert_eq!(check("http://93.184.216.34/").await, Ok(Target::Direct));
        let allowed = GuardPolicy {
            allow_private: false,
            allowed_hosts: vec!["127.0.0.1:9".into()],
        };
        let url = parse_http_url("http://127.0.0.1:9/").expect("url");
        assert_eq!(allowed.check(&url, "fetch").await, Ok(Target::Direct));
        let other = parse_http_url("http://127.0.0.1:10/").expect("url");
        assert!(allowed.check(&other, "fetch").await.is_err());
    }
}
