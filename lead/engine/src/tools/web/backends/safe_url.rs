//! DeerFlow's `_safe_public_url` for image results (Brave, Serper): a URL the model may be
//! handed, or `""`: only http(s), no `localhost`, no IP literal that is not global (the URL
//! parser already reads decimal, hex and octal IPv4 and v4-in-v6 forms as addresses).

use crate::tools::web::guard::is_public;

pub fn safe_public_url(raw: &str) -> String {
    let Ok(url) = reqwest::Url::parse(raw.trim()) else {
        return String::new();
    };
    if !matches!(url.scheme(), "http" | "https") {
        return String::new();
    }
    let safe = match url.host() {
        Some(url::Host::Ipv4(ip)) => is_public(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_public(ip.into()),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name != "localhost" && !name.ends_with(".localhost")
        }
        None => false,
    };
    if safe {
        raw.trim().to_owned()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_odd_forms_are_blanked() {
        for bad in [
            "http://127.0.0.1/a.png",
            "http://0x7f000001/a.png",
            "http://2130706433/",
            "http://[::ffff:10.0.0.1]/",
            "ftp://x.example/a",
            "http://localhost/a",
            "javascript:alert(1)",
        ] {
            assert_eq!(safe_public_url(bad), "", "{bad}");
        }
        assert_eq!(
            safe_public_url("https://img.example/a.png"),
            "https://img.example/a.png"
        );
    }
}
