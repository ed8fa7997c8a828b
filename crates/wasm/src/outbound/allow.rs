//! Who a guest may reach: the allow-list (`allowed_outbound_hosts`, in Spin's form) and the
//! address rules checked on every address a request would connect to.
//!
//! An entry is `scheme://host[:port]`:
//! - scheme: `http`, `https` or `*`;
//! - host: a name (`api.example.com`), a subdomain wildcard (`*.example.com`: any name
//!   below it, not the name itself), `*` (any host), an IPv4 literal, a bracketed IPv6
//!   literal, or `localhost`;
//! - port: a number, a range `8000-8099`, or `*`; absent, the scheme's own (80 or 443).
//!
//! The list says which URLs a guest may ask for. Which addresses it may then reach is
//! decided on the resolved addresses: an address that is not public (loopback, private,
//! link-local with the cloud metadata address, unique-local, CGNAT, unspecified, multicast)
//! or that is the server's own listen address is refused unless the entry that allowed the
//! URL names it explicitly (its literal address, or `localhost` for loopback). So a name
//! that resolves (or is made to resolve) to an internal address gets nowhere.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One `allowed_outbound_hosts` entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    scheme: SchemePattern,
    host: HostPattern,
    ports: PortPattern,
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemePattern {
    Http,
    Https,
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// Any host (never an address that is not public, unless named).
    Any,
    /// A name, lower case, without a trailing dot.
    Name(String),
    /// `*.suffix`: names strictly below `suffix`.
    Below(String),
    /// A literal address.
    Ip(IpAddr),
    /// `localhost`: the loopback addresses.
    Localhost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortPattern {
    /// The scheme's own port.
    Default,
    Range(u16, u16),
    Any,
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An allow-list entry that does not parse, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not an allowed outbound host: {why}")]
pub struct BadEntry {
    /// The entry, as written.
    pub entry: String,
    /// What is wrong with it.
    pub why: String,
}

impl AllowedHost {
    /// Parses one entry; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, BadEntry> {
        let bad = |why: &str| BadEntry {
            entry: text.to_owned(),
            why: why.to_owned(),
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://host[:port], e.g. https://api.example.com"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => SchemePattern::Http,
            "https" => SchemePattern::Https,
            "*" => SchemePattern::Any,
            _ => return Err(bad("the scheme must be http, https or *")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') || rest.contains('@') || rest.contains('#') {
            return Err(bad(
                "an entry names a scheme, a host and a port: no path, query or user",
            ));
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address needs its closing bracket"))?;
            let ip: Ipv6Addr = addr.parse().map_err(|_| bad("not an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected :port after the address"))?,
                ),
            };
            (HostPattern::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            };
            (parse_host(host).map_err(|w| bad(&w))?, port)
        };
        let ports = match port {
            None => PortPattern::Default,
            Some("*") => PortPattern::Any,
            Some(p) => {
                let num = |s: &str| s.parse::<u16>().ok().filter(|n| *n > 0);
                match p.split_once('-') {
                    Some((a, b)) => match (num(a), num(b)) {
                        (Some(a), Some(b)) if a <= b => PortPattern::Range(a, b),
                        _ => return Err(bad("a port range is two ports, low-high")),
                    },
                    None => {
                        let n =
                            num(p).ok_or_else(|| bad("the port must be 1-65535, a range or *"))?;
                        PortPattern::Range(n, n)
                    }
                }
            }
        };
        Ok(Self {
            scheme,
            host,
            ports,
            text: text.to_owned(),
        })
    }

    /// Whether this entry allows a request for `scheme://host:port`. `host` is the URL's
    /// host as the guest wrote it (a name or an address).
    pub(crate) fn allows_url(&self, https: bool, host: &Host, port: u16) -> bool {
        let scheme_ok = match self.scheme {
            SchemePattern::Http => !https,
            SchemePattern::Https => https,
            SchemePattern::Any => true,
        };
        let port_ok = match self.ports {
            PortPattern::Default => port == if https { 443 } else { 80 },
            PortPattern::Range(a, b) => (a..=b).contains(&port),
            PortPattern::Any => true,
        };
        let host_ok = match (&self.host, host) {
            // Any host, a literal address too: the address rules still refuse what is not
            // public unless an entry names it.
            (HostPattern::Any, _) => true,
            (HostPattern::Name(n), Host::Name(h)) => n == h,
            // `suffix` starts with its dot: what is left is the labels below it.
            (HostPattern::Below(suffix), Host::Name(h)) => h
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| !head.is_empty()),
            (HostPattern::Ip(a), Host::Ip(b)) => a == b,
            (HostPattern::Localhost, Host::Name(h)) => h == "localhost",
            _ => false,
        };
        scheme_ok && port_ok && host_ok
    }

    /// Whether some URL matches both this entry and `other`: an `inject` entry no
    /// allow-list entry overlaps never adds its header, since no request to it goes out.
    pub fn overlaps(&self, other: &AllowedHost) -> bool {
        use HostPattern::{Any, Below, Ip, Localhost, Name};
        // The ports each may reach, for each scheme both allow.
        let ports = |p: PortPattern, https: bool| match p {
            PortPattern::Default => {
                let d = if https { 443 } else { 80 };
                (d, d)
            }
            PortPattern::Range(a, b) => (a, b),
            PortPattern::Any => (1, u16::MAX),
        };
        let scheme_allows = |s: SchemePattern, https: bool| match s {
            SchemePattern::Http => !https,
            SchemePattern::Https => https,
            SchemePattern::Any => true,
        };
        let ports_meet = [false, true].into_iter().any(|https| {
            let (a, b) = ports(self.ports, https);
            let (c, d) = ports(other.ports, https);
            scheme_allows(self.scheme, https)
                && scheme_allows(other.scheme, https)
                && a <= d
                && c <= b
        });
        let below = |suffix: &str, name: &str| {
            name.strip_suffix(suffix)
                .is_some_and(|head| !head.is_empty())
        };
        let hosts = match (&self.host, &other.host) {
            (Any, _) | (_, Any) => true,
            (Name(a), Name(b)) => a == b,
            (Below(s), Name(n)) | (Name(n), Below(s)) => below(s, n),
            // Two wildcards share the names below the longer suffix.
            (Below(a), Below(b)) => a.ends_with(b.as_str()) || b.ends_with(a.as_str()),
            (Ip(a), Ip(b)) => a == b,
            (Localhost, Localhost) => true,
            _ => false,
        };
        ports_meet && hosts
    }

    /// Whether the entry's host is `localhost`, which matches only URLs that name
    /// localhost: not `127.0.0.1` or `[::1]`, which need entries of their own.
    pub fn is_localhost(&self) -> bool {
        self.host == HostPattern::Localhost
    }

    /// Whether this entry names `addr` explicitly, so that it may be reached even though
    /// it is not public or is the server's own.
    fn names(&self, addr: IpAddr) -> bool {
        match &self.host {
            HostPattern::Ip(ip) => canonical(*ip) == canonical(addr),
            HostPattern::Localhost => canonical(addr).is_loopback(),
            _ => false,
        }
    }

    /// Whether this entry names `addr` to the port: its address (or `localhost`) and that
    /// one port, not a range or `*`. Only such an entry reaches the server's own address.
    fn names_exactly(&self, addr: SocketAddr) -> bool {
        self.names(addr.ip()) && self.ports == PortPattern::Range(addr.port(), addr.port())
    }
}

fn parse_host(host: &str) -> Result<HostPattern, String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    if host == "*" {
        return Ok(HostPattern::Any);
    }
    if host == "localhost" {
        return Ok(HostPattern::Localhost);
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Ip(IpAddr::V4(ip)));
    }
    let (below, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host.as_str()),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err("the host must be a DNS name, *.name, *, an address or localhost".into());
    }
    Ok(if below {
        HostPattern::Below(format!(".{name}"))
    } else {
        HostPattern::Name(name.to_owned())
    })
}

/// A URL's host as the guest wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A DNS name, lower case, without a trailing dot.
    Name(String),
    /// A literal address.
    Ip(IpAddr),
}

impl Host {
    /// The host of a URL authority's host part (`api.example.com`, `10.0.0.1`, `[::1]`).
    pub(crate) fn parse(host: &str) -> Option<Self> {
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return v6
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| Host::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Some(Host::Ip(IpAddr::V4(ip)));
        }
        match parse_host(host).ok()? {
            HostPattern::Name(n) => Some(Host::Name(n)),
            HostPattern::Localhost => Some(Host::Name("localhost".into())),
            _ => None,
        }
    }
}

/// Why the host refused a request before anything was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tool has no outbound grant.
    NotGranted,
    /// No entry of the allow-list allows the URL.
    NotAllowed,
    /// An address the name resolved to (or the literal address) is not public and no
    /// entry names it.
    Address(IpAddr),
    /// The address is the server's own listen address.
    OwnAddress(SocketAddr),
    /// The URL is not one the host sends (no authority, a scheme other than http/https).
    BadUrl,
}

impl Refusal {
    /// The `reason` label of `snodo_outbound_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NotGranted => "not_granted",
            Refusal::NotAllowed => "not_allowed",
            Refusal::Address(_) => "address",
            Refusal::OwnAddress(_) => "own_address",
            Refusal::BadUrl => "bad_url",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotGranted => f.write_str("the tool is not granted outbound HTTP"),
            Refusal::NotAllowed => f.write_str("no allowed_outbound_hosts entry allows the URL"),
            Refusal::Address(ip) => write!(
                f,
                "{ip} is not a public address and no allowed_outbound_hosts entry names it"
            ),
            Refusal::OwnAddress(a) => write!(f, "{a} is this server's own listen address"),
            Refusal::BadUrl => f.write_str("the URL has no host or an unsupported scheme"),
        }
    }
}

/// An allow-list: what one tool may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<AllowedHost>,
}

impl AllowList {
    /// Parses every entry; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, BadEntry> {
        let entries = entries
            .iter()
            .map(|e| AllowedHost::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { entries })
    }

    /// No entries: everything refused.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, as written.
    pub fn entries(&self) -> &[AllowedHost] {
        &self.entries
    }

    /// The entries that allow `scheme://host:port`, or the refusal.
    pub(crate) fn check_url(
        &self,
        https: bool,
        host: &Host,
        port: u16,
    ) -> Result<Vec<&AllowedHost>, Refusal> {
        let allowing: Vec<&AllowedHost> = self
            .entries
            .iter()
            .filter(|e| e.allows_url(https, host, port))
            .collect();
        if allowing.is_empty() {
            Err(Refusal::NotAllowed)
        } else {
            Ok(allowing)
        }
    }
}

/// Checks one resolved address against the address rules, given the entries that allowed
/// the URL and the server's own listen addresses.
pub(crate) fn check_address(
    allowing: &[&AllowedHost],
    addr: SocketAddr,
    own: &[SocketAddr],
) -> Result<(), Refusal> {
    let ip = canonical(addr.ip());
    let named = allowing.iter().any(|e| e.names(ip));
    // A server listening on every interface (0.0.0.0 or [::]) is reached through every
    // address of this machine on its port: loopback, the unspecified address, and each
    // interface's address.
    let is_own = own.iter().any(|o| {
        o.port() == addr.port()
            && (canonical(o.ip()) == ip
                || (o.ip().is_unspecified()
                    && (ip.is_loopback() || ip.is_unspecified() || is_local(ip))))
    });
    if is_own && !allowing.iter().any(|e| e.names_exactly(addr)) {
        return Err(Refusal::OwnAddress(SocketAddr::new(ip, addr.port())));
    }
    if !is_public(ip) && !named {
        return Err(Refusal::Address(ip));
    }
    Ok(())
}

/// Whether `ip` is an address of this machine: the system lets a socket bind to it only
/// then. This asks the kernel about the interfaces as they are now, without a list that
/// could go stale; it is asked only for an address on the port of a server listening on
/// every interface. A system that allows binding to any address (`ip_nonlocal_bind`)
/// makes every address on that port count as the server's own: refused, never let through.
fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// An IPv4-mapped or IPv4-compatible IPv6 address as the IPv4 address it carries, so the
/// rules cannot be dodged by writing `[::ffff:127.0.0.1]`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                // ::a.b.c.d (deprecated IPv4-compatible), but not :: or ::1.
                if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
                    IpAddr::V4(Ipv4Addr::new(
                        (s[6] >> 8) as u8,
                        s[6] as u8,
                        (s[7] >> 8) as u8,
                        s[7] as u8,
                    ))
                } else {
                    IpAddr::V6(v6)
                }
            }
        },
        v4 => v4,
    }
}

/// Whether `ip` is an address on the public internet: not loopback, private, link-local
/// (169.254.0.0/16 holds the cloud metadata address), shared (CGNAT), unspecified,
/// broadcast, multicast, documentation, benchmarking or reserved; for IPv6 also not
/// unique-local (fc00::/7), link-local (fe80::/10), site-local, NAT64 of a non-public
/// address, 6to4 of one, or Teredo.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_loopback() || v6.is_unspecified() || v6.is_multicast() {
                return false;
            }
            if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
                return false;
            }
            // Documentation (2001:db8::/32), Teredo (2001::/32), ORCHID and benchmarking.
            if (s[0] == 0x2001 && (s[1] == 0xdb8 || s[1] == 0 || s[1] < 0x200))
                || (s[0] == 0x3fff && s[1] < 0x1000)
            {
                return false;
            }
            // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address.
            if s[0] == 0x64 && s[1] == 0xff9b {
                let v4 =
                    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
                return is_public(IpAddr::V4(v4));
            }
            if s[0] == 0x2002 {
                let v4 =
                    Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
                return is_public(IpAddr::V4(v4));
            }
            // Only global unicast (2000::/3) is routed on the internet.
            (s[0] & 0xe000) == 0x2000
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(entries).expect("valid entries")
    }

    fn url(list: &AllowList, https: bool, host: &str, port: u16) -> bool {
        list.check_url(https, &Host::parse(host).expect("a host"), port)
            .is_ok()
    }

    #[test]
    fn entries_match_scheme_host_and_port() {
        let l = list(&[
            "https://api.example.com",
            "https://*.example.org:8443",
            "http://127.0.0.1:8080",
            "*://svc.test:9000-9010",
        ]);
        assert!(url(&l, true, "api.example.com", 443));
        assert!(
            url(&l, true, "API.Example.com.", 443),
            "case and the root dot"
        );
        assert!(
            !url(&l, false, "api.example.com", 80),
            "the scheme is part of the entry"
        );
        assert!(
            !url(&l, true, "api.example.com", 8443),
            "the default port only"
        );
        assert!(!url(&l, true, "evil-api.example.com", 443));
        assert!(url(&l, true, "a.b.example.org", 8443));
        assert!(
            !url(&l, true, "example.org", 8443),
            "a wildcard is below the name"
        );
        assert!(!url(&l, true, "xexample.org", 8443));
        assert!(url(&l, false, "127.0.0.1", 8080));
        assert!(!url(&l, false, "127.0.0.1", 8081));
        assert!(url(&l, false, "svc.test", 9005) && url(&l, true, "svc.test", 9010));
        assert!(!url(&l, false, "svc.test", 9011));
        assert!(!url(&AllowList::default(), true, "api.example.com", 443));
    }

    #[test]
    fn two_entries_overlap_when_some_url_matches_both() {
        let e = |s: &str| AllowedHost::parse(s).expect(s);
        for (a, b) in [
            ("https://api.example.com", "https://api.example.com"),
            ("https://api.example.com", "*://*:*"),
            ("https://api.example.com", "https://*.example.com"),
            ("https://*.a.example.com", "https://*.example.com"),
            ("http://127.0.0.1:8000-8080", "*://127.0.0.1:8080"),
            ("http://localhost:9000", "http://localhost:*"),
            ("*://api.example.com", "https://api.example.com:443"),
        ] {
            assert!(e(a).overlaps(&e(b)) && e(b).overlaps(&e(a)), "{a} {b}");
        }
        for (a, b) in [
            ("https://api.example.com", "https://api.example.org"),
            ("https://api.example.com", "http://api.example.com"),
            ("https://api.example.com", "https://api.example.com:8443"),
            ("https://example.com", "https://*.example.com"),
            ("http://localhost:8080", "http://127.0.0.1:8080"),
            ("http://127.0.0.1:80-90", "http://127.0.0.1:91-99"),
            ("https://*.a.example.com", "https://*.b.example.com"),
        ] {
            assert!(!e(a).overlaps(&e(b)) && !e(b).overlaps(&e(a)), "{a} {b}");
        }
        assert!(e("http://localhost:1").is_localhost());
        assert!(!e("http://127.0.0.1:1").is_localhost());
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (entry, why) in [
            ("api.example.com", "scheme://host"),
            ("ftp://x.test", "http, https or *"),
            ("https://x.test/path", "no path"),
            ("https://x.test:0", "1-65535"),
            ("https://x.test:9-1", "low-high"),
            ("https://[::1", "closing bracket"),
            ("https://bad_name.test", "DNS name"),
            ("https://", "empty"),
        ] {
            let err = AllowedHost::parse(entry).expect_err(entry);
            assert_eq!(err.entry, entry);
            assert!(err.why.contains(why), "{entry}: {err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("{entry:?} is not an allowed outbound host: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn addresses_that_are_not_public_need_an_entry_naming_them() {
        let l = list(&[
            "https://*:*",
            "http://127.0.0.1:8080",
            "http://localhost:9000",
        ]);
        let addr = |s: &str| s.parse::<SocketAddr>().expect("an address");
        let check = |host: &str, port: u16, to: &str| {
            let host = Host::parse(host).expect("a host");
            let allowing =
                l.check_url(host == Host::Name("x".into()) || port == 443, &host, port)?;
            check_address(&allowing, addr(to), &[])
        };
        // A public name resolving to each kind of internal address.
        for internal in [
            "169.254.169.254:443",
            "127.0.0.1:443",
            "10.1.2.3:443",
            "172.16.0.1:443",
            "192.168.1.1:443",
            "100.64.0.1:443",
            "0.0.0.0:443",
            "[::1]:443",
            "[fd00::1]:443",
            "[fe80::1]:443",
            "[::ffff:127.0.0.1]:443",
            "[::127.0.0.1]:443",
            "[64:ff9b::a00:1]:443",
            "[2002:a00:1::]:443",
        ] {
            assert!(
                matches!(
                    check("api.example.com", 443, internal),
                    Err(Refusal::Address(_))
                ),
                "{internal}"
            );
        }
        assert_eq!(check("api.example.com", 443, "93.184.215.14:443"), Ok(()));
        assert_eq!(
            check("api.example.com", 443, "[2606:2800:21f:cb07::1]:443"),
            Ok(())
        );
        // Named explicitly: the literal and localhost.
        let named = list(&["http://127.0.0.1:8080", "http://localhost:9000"]);
        let host = Host::parse("127.0.0.1").expect("a host");
        let allowing = named.check_url(false, &host, 8080).expect("allowed");
        assert_eq!(
            check_address(&allowing, addr("127.0.0.1:8080"), &[]),
            Ok(())
        );
        let host = Host::parse("localhost").expect("a host");
        let allowing = named.check_url(false, &host, 9000).expect("allowed");
        assert_eq!(check_address(&allowing, addr("[::1]:9000"), &[]), Ok(()));
        assert!(check_address(&allowing, addr("10.0.0.1:9000"), &[]).is_err());
    }

    #[test]
    fn the_servers_own_address_is_refused_unless_named() {
        let own = ["0.0.0.0:4000".parse().expect("addr")];
        let l = list(&["http://*:4000", "http://127.0.0.1:4000"]);
        let host = Host::parse("public.test").expect("a host");
        let allowing = l.check_url(false, &host, 4000).expect("allowed");
        assert!(matches!(
            check_address(&allowing, "127.0.0.1:4000".parse().expect("addr"), &own),
            Err(Refusal::OwnAddress(_))
        ));
        assert_eq!(
            check_address(&allowing, "93.184.215.14:4000".parse().expect("addr"), &own),
            Ok(()),
            "another host on the same port is not this server"
        );
        let host = Host::parse("127.0.0.1").expect("a host");
        let allowing = l.check_url(false, &host, 4000).expect("allowed");
        assert_eq!(
            check_address(&allowing, "127.0.0.1:4000".parse().expect("addr"), &own),
            Ok(())
        );
        // Naming the address with any port is not naming the server.
        let l = list(&["http://127.0.0.1:*"]);
        let allowing = l.check_url(false, &host, 4000).expect("allowed");
        assert!(matches!(
            check_address(&allowing, "127.0.0.1:4000".parse().expect("addr"), &own),
            Err(Refusal::OwnAddress(_))
        ));
        assert_eq!(
            check_address(&allowing, "127.0.0.1:4001".parse().expect("addr"), &own),
            Ok(())
        );
    }

    /// An address of one of this machine's interfaces other than loopback: the one the
    /// system would send from towards a documentation address (a UDP `connect` sends
    /// nothing), or none on a machine without a route.
    fn an_interface_address() -> Option<IpAddr> {
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        probe.connect("192.0.2.1:9").ok()?;
        let ip = probe.local_addr().ok()?.ip();
        (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
    }

    #[test]
    fn a_server_on_every_interface_owns_every_address_of_the_machine() {
        for listening in ["0.0.0.0:4000", "[::]:4000"] {
            let own = [listening.parse().expect("addr")];
            let l = list(&["http://*:*"]);
            let host = Host::parse("public.test").expect("a host");
            let allowing = l.check_url(false, &host, 4000).expect("allowed");
            for at in ["127.0.0.2:4000", "0.0.0.0:4000", "[::]:4000"] {
                assert!(
                    matches!(
                        check_address(&allowing, at.parse().expect("addr"), &own),
                        Err(Refusal::OwnAddress(_))
                    ),
                    "{at} on a server at {listening}"
                );
            }
            let ip = an_interface_address()
                .expect("the machine has an interface address besides loopback");
            // Named by an entry, so only the own-address rule can refuse it.
            let named = list(&[&format!("http://{ip}:*")]);
            let host = Host::parse(&ip.to_string()).expect("a host");
            let allowing = named.check_url(false, &host, 4000).expect("allowed");
            assert_eq!(
                check_address(&allowing, SocketAddr::new(ip, 4000), &own),
                Err(Refusal::OwnAddress(SocketAddr::new(ip, 4000))),
                "{ip} on a server at {listening}"
            );
            assert_eq!(
                check_address(&allowing, SocketAddr::new(ip, 4001), &own),
                Ok(()),
                "another port of the machine is not the server"
            );
            // An address that is not the machine's is not the server's.
            let other: IpAddr = "93.184.215.14".parse().expect("ip");
            let allowing = l.check_url(false, &host, 4000).expect("allowed");
            assert_eq!(
                check_address(&allowing, SocketAddr::new(other, 4000), &own),
                Ok(())
            );
        }
    }
}
