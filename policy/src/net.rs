//! Network by domain (issue 14): the host patterns a tier-map entry's `network=` option lists, how
//! a requested host and port are normalised and matched against them, and which addresses count
//! as internal. Pure: the daemon's proxy (`daemon/src/engine/proxy.rs`) resolves names and
//! connects; this module only decides.
//!
//! Decisions (docs/tiermap.md, "Network by domain"):
//! - A pattern is a fully qualified host name (`registry.npmjs.org`) or a wildcard over its
//!   subdomains (`*.crates.io`: one or more labels before `crates.io`, never `crates.io` itself),
//!   optionally with one port (`registry.test:8080`). Without a port, ports 80 and 443 are allowed.
//! - Names are ASCII: letters, digits, `-` (and `_`, seen in real host names), compared after ASCII
//!   lowercasing with a trailing dot removed. Internationalised names are written as A-labels
//!   (`xn--…`), which is what clients send; a request host with any other byte is refused, so no
//!   IDNA mapping (homographs, 2003 vs 2008 rules) stands between what was reviewed and what is
//!   reached.
//! - No bare `*`, no wildcard over a single label (`*.io`), no wildcard inside a label, no single-
//!   label names (`localhost`, search domains), no IP addresses: the proxy's defence against a name
//!   resolving to an internal address (DNS rebinding) works on names, and registries' addresses
//!   change.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Ports a pattern without an explicit port allows: plain HTTP and HTTPS.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// Longest host name (RFC 1035, without the trailing dot).
const MAX_NAME: usize = 253;
/// Longest label.
const MAX_LABEL: usize = 63;

/// One allowed host (or subdomain wildcard), optionally with a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPattern {
    /// `*.` in front: subdomains of `domain` (at any depth), not `domain` itself.
    pub wildcard: bool,
    /// Lowercase ASCII name without a trailing dot.
    pub domain: String,
    /// `None`: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.domain)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

impl HostPattern {
    /// Parses one pattern as written in a tier map (`registry.npmjs.org`, `*.crates.io`,
    /// `registry.test:8080`). The error says what to write instead.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("empty host in `network=`".into());
        }
        if t.contains("://") || t.contains('/') {
            return Err(format!(
                "`{t}`: write the host alone, without a scheme or path (`registry.npmjs.org`)"
            ));
        }
        if !t.is_ascii() {
            return Err(format!(
                "`{t}`: write an internationalised name in its A-label (punycode) form, \
                 `xn--…`, which is what clients send"
            ));
        }
        if t.starts_with('[') || t.parse::<IpAddr>().is_ok() {
            return Err(ip_refusal(t));
        }
        let (name, port) = match t.rsplit_once(':') {
            Some((n, p)) => (n, Some(parse_port(p).map_err(|e| format!("`{t}`: {e}"))?)),
            None => (t, None),
        };
        if name == "*" {
            return Err(
                "a bare `*` would allow every host: list the hosts (`registry.npmjs.org`) or \
                 their subdomains (`*.crates.io`)"
                    .into(),
            );
        }
        let (wildcard, domain) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, name),
        };
        if domain.contains('*') {
            return Err(format!(
                "`{t}`: a wildcard is only allowed as the whole first label (`*.example.com`)"
            ));
        }
        let domain = domain
            .strip_suffix('.')
            .unwrap_or(domain)
            .to_ascii_lowercase();
        if domain.parse::<Ipv4Addr>().is_ok() || numeric_tail(&domain) {
            return Err(ip_refusal(t));
        }
        check_name(&domain).map_err(|e| format!("`{t}`: {e}"))?;
        let labels = domain.split('.').count();
        if wildcard && labels < 2 {
            return Err(format!(
                "`{t}` is too wide: a wildcard needs at least two labels after it (`*.crates.io`)"
            ));
        }
        if labels < 2 {
            return Err(format!(
                "`{t}`: a single-label name is resolved through search domains and local files; \
                 name a fully qualified host (`registry.example.com`)"
            ));
        }
        Ok(HostPattern {
            wildcard,
            domain,
            port,
        })
    }

    /// Whether this pattern allows `host` (normalised by [`normalize_host`]) on `port`.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        if !port_ok {
            return false;
        }
        if self.wildcard {
            host.len() > self.domain.len() + 1
                && host.ends_with(&self.domain)
                && host.as_bytes()[host.len() - self.domain.len() - 1] == b'.'
        } else {
            host == self.domain
        }
    }
}

fn ip_refusal(t: &str) -> String {
    format!(
        "`{t}`: IP addresses are not allowed, name the host: the proxy refuses names that resolve \
         to internal addresses (DNS rebinding), which an address would bypass, and registries' \
         addresses change"
    )
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("`{p}` is not a port (1–65535)")),
        Ok(n) if p.starts_with('0') || p.starts_with('+') => Err(format!(
            "write the port `{n}` without a sign or leading zeros"
        )),
        Ok(n) => Ok(n),
    }
}

/// A name whose last label is all digits: an address in one of the many forms resolvers accept
/// (`127.1`, `2130706433`, `0x7f.1` ends in a digit label too).
fn numeric_tail(name: &str) -> bool {
    name.rsplit('.')
        .next()
        .is_some_and(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        || name.rsplit('.').next().is_some_and(|l| l.starts_with("0x"))
}

/// Lowercase ASCII labels of letters, digits, `-`, `_`; no empty label, no label starting or
/// ending with `-`; at most 253 bytes.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err("not a host name (1–253 characters)".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > MAX_LABEL {
            return Err("a label is empty or longer than 63 characters".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "`{label}` is not a host-name label (letters, digits, `-`)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("`{label}` starts or ends with `-`"));
        }
    }
    Ok(())
}

/// Why a requested host is refused before any pattern is consulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRefusal {
    /// An IP address, or a numeric form a resolver would read as one.
    Address,
    /// Not an ASCII host name (non-ASCII bytes, bad characters, too long).
    Malformed(String),
}

impl fmt::Display for HostRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostRefusal::Address => f.write_str(
                "an IP address (tier-map entries list host names; connections go by name \
                 through cmdgate's proxy)",
            ),
            HostRefusal::Malformed(why) => write!(f, "not a host name: {why}"),
        }
    }
}

/// The requested host as the patterns see it: ASCII-lowercased, trailing dot removed. IP literals
/// (also bracketed IPv6 and numeric forms like `2130706433`) and anything that is not an ASCII
/// host name are refused.
pub fn normalize_host(raw: &str) -> Result<String, HostRefusal> {
    if !raw.is_ascii() {
        return Err(HostRefusal::Malformed(
            "non-ASCII bytes (clients send A-labels, `xn--…`)".into(),
        ));
    }
    let inner = raw
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(raw);
    if inner.parse::<IpAddr>().is_ok() {
        return Err(HostRefusal::Address);
    }
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    if numeric_tail(&name) {
        return Err(HostRefusal::Address);
    }
    check_name(&name).map_err(HostRefusal::Malformed)?;
    Ok(name)
}

/// Splits `host:port` (an HTTP CONNECT target or URL authority; `[v6]:port` too). `default_port`
/// is used when the authority has none (a URL); a CONNECT target must name its port.
pub fn split_authority(authority: &str, default_port: Option<u16>) -> Result<(&str, u16), String> {
    if authority.is_empty() {
        return Err("no host".into());
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']').ok_or("unclosed `[`")?;
        let host = &authority[..end + 2];
        match &rest[end + 1..] {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or("junk after `]`")?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match (port, default_port) {
        (Some(p), _) => parse_port(p)?,
        (None, Some(d)) => d,
        (None, None) => return Err("no port".into()),
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    Ok((host, port))
}

/// The first pattern allowing `host` (normalised) on `port`.
pub fn allowed<'a>(patterns: &'a [HostPattern], host: &str, port: u16) -> Option<&'a HostPattern> {
    patterns.iter().find(|p| p.matches(host, port))
}

/// Why an address is internal (not on the public internet), or `None`: loopback, private
/// (RFC 1918, unique local), link-local (cloud metadata lives at 169.254.169.254), carrier-grade
/// NAT, unspecified, multicast, broadcast, documentation and benchmarking ranges, IPv4-mapped and
/// NAT64/6to4 forms of any of those. A name resolving to one of these is refused unless the
/// operator allowed it: DNS rebinding aims a public name at the machine's own services (cmdgate's
/// console listens on loopback).
pub fn internal_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_unspecified() || o[0] == 0 {
        Some("unspecified (\"this network\")")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("carrier-grade NAT")
    } else if ip.is_multicast() || o[0] >= 240 {
        Some("multicast, reserved or broadcast")
    } else if ip.is_documentation() || (o[0] == 198 && (o[1] & 0xfe) == 18) {
        Some("documentation or benchmarking")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        Some("IETF protocol assignments")
    } else {
        None
    }
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4);
    }
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if (s[0] & 0xfe00) == 0xfc00 {
        Some("unique local (private)")
    } else if (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        Some("documentation")
    } else if s[0] == 0x0064 && s[1] == 0xff9b {
        // NAT64: the embedded IPv4 address decides.
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        internal_v4(v4)
    } else if s[0] == 0x2002 {
        // 6to4: the embedded IPv4 address decides.
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        internal_v4(v4)
    } else if s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0 && s[4] == 0 && s[5] == 0 {
        // IPv4-compatible (deprecated) ::a.b.c.d.
        Some("IPv4-compatible (deprecated)")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn patterns_parse_and_print_normalised() {
        assert_eq!(p("registry.npmjs.org").to_string(), "registry.npmjs.org");
        assert_eq!(p("*.Crates.IO.").to_string(), "*.crates.io");
        assert_eq!(p("registry.test:8080").port, Some(8080));
        assert_eq!(p("xn--bcher-kva.example").domain, "xn--bcher-kva.example");
    }

    #[test]
    fn bad_patterns_are_refused_with_what_to_write() {
        for (bad, says) in [
            ("*", "bare `*`"),
            ("*.io", "too wide"),
            ("a*.example.com", "whole first label"),
            ("foo.*.com", "whole first label"),
            ("*.*.example.com", "whole first label"),
            ("10.0.0.1", "IP addresses"),
            ("127.0.0.1:80", "IP addresses"),
            ("[::1]:443", "IP addresses"),
            ("::1", "IP addresses"),
            ("2130706433.x.0", "IP addresses"),
            ("127.1", "IP addresses"),
            ("localhost", "single-label"),
            ("https://registry.npmjs.org", "without a scheme"),
            ("registry.npmjs.org/path", "without a scheme"),
            ("bücher.example", "A-label"),
            ("registry.test:0", "not a port"),
            ("registry.test:65536", "not a port"),
            ("registry.test:x", "not a port"),
            ("registry.test:080", "leading zeros"),
            ("-bad.example.com", "starts or ends"),
            ("a..b.com", "empty"),
            ("a b.com", "not a host-name label"),
            ("", "empty"),
        ] {
            let e = HostPattern::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn hosts_match_by_name_wildcard_and_port() {
        let exact = p("registry.npmjs.org");
        assert!(exact.matches("registry.npmjs.org", 443));
        assert!(exact.matches("registry.npmjs.org", 80));
        assert!(!exact.matches("registry.npmjs.org", 22));
        assert!(!exact.matches("registry.npmjs.org", 8443));
        assert!(!exact.matches("x.registry.npmjs.org", 443));
        assert!(!exact.matches("registry.npmjs.org.evil.com", 443));
        assert!(!exact.matches("evilregistry.npmjs.org", 443));
        let wild = p("*.crates.io");
        assert!(wild.matches("static.crates.io", 443));
        assert!(wild.matches("a.b.crates.io", 443));
        assert!(
            !wild.matches("crates.io", 443),
            "the wildcard is subdomains only"
        );
        assert!(!wild.matches("evilcrates.io", 443));
        assert!(!wild.matches(".crates.io", 443));
        let port = p("registry.test:8080");
        assert!(port.matches("registry.test", 8080));
        assert!(!port.matches("registry.test", 443));
        assert!(!port.matches("registry.test", 80));
    }

    #[test]
    fn requested_hosts_are_normalised_or_refused() {
        assert_eq!(
            normalize_host("Registry.NPMJS.org.").as_deref(),
            Ok("registry.npmjs.org")
        );
        for ip in [
            "127.0.0.1",
            "[::1]",
            "::ffff:127.0.0.1",
            "2130706433",
            "127.1",
            "0x7f.1",
            "0177.0.0.1",
        ] {
            assert_eq!(normalize_host(ip), Err(HostRefusal::Address), "{ip}");
        }
        for bad in [
            "bücher.example",
            "a b.com",
            "a..b",
            "evil.com\r\nX: y",
            "",
            "a.com:80",
        ] {
            assert!(
                matches!(normalize_host(bad), Err(HostRefusal::Malformed(_))),
                "{bad}"
            );
        }
        let pats = [p("registry.npmjs.org"), p("*.crates.io")];
        let host = normalize_host("STATIC.crates.io.").unwrap();
        assert_eq!(allowed(&pats, &host, 443), Some(&pats[1]));
        assert_eq!(allowed(&pats, "example.com", 443), None);
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        assert_eq!(split_authority("a.com:443", None), Ok(("a.com", 443)));
        assert_eq!(split_authority("a.com", Some(80)), Ok(("a.com", 80)));
        assert_eq!(split_authority("[::1]:8080", None), Ok(("[::1]", 8080)));
        assert!(split_authority("a.com", None).is_err());
        assert!(split_authority("a.com:99999", None).is_err());
        assert!(split_authority(":443", None).is_err());
        assert!(split_authority("[::1", None).is_err());
    }

    #[test]
    fn internal_addresses_are_named() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "carrier-grade"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "multicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique local"),
            ("fe80::1", "link-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::", "loopback"),
            ("::127.0.0.1", "IPv4-compatible"),
        ] {
            let got = internal_address(ip.parse().unwrap());
            assert!(got.is_some_and(|g| g.contains(kind)), "{ip}: {got:?}");
        }
        for public in [
            "93.184.216.34",
            "151.101.1.63",
            "2606:4700::6810:84e5",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::",
        ] {
            assert_eq!(internal_address(public.parse().unwrap()), None, "{public}");
        }
    }
}
