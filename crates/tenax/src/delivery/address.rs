//! Refusing webhook endpoints that are not on the public internet (SSRF protection).
//!
//! A subscriber chooses the URL that the server POSTs to, so without a guard anyone who can create
//! a subscription can make the server reach its own loopback, the private network it sits in, or a
//! cloud metadata service. The guard has two halves:
//!
//! - [`parse_endpoint`] and [`check_endpoint`] run when a subscription is created or changed, so a
//!   bad endpoint is a 400 naming the rule it broke.
//! - [`GlobalOnlyResolver`] and [`ip_literal_allowed`] run at every delivery, because a name that
//!   resolved to a public address yesterday may resolve to `127.0.0.1` now (DNS rebinding). The
//!   resolver sees every name reqwest connects to; reqwest does not call it for IP literals,
//!   which is why those are checked by [`ip_literal_allowed`].
//!
//! Invariants:
//! - An address is refused if [`is_global`] is false for it, unless `allow_private` is set (the
//!   `--allow-private-endpoints` flag, for development and trusted networks).
//! - A name is refused if ANY of its addresses is refused: the connector may pick any of them.
//! - IPv6 addresses that embed an IPv4 address (IPv4-mapped, -compatible and -translated,
//!   NAT64, 6to4, Teredo, ISATAP) are judged by the IPv4 address they lead to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::{Host, Url};

/// The longest endpoint URL accepted, in bytes.
pub const MAX_ENDPOINT_LEN: usize = 2048;

/// IPv4 ranges that do not reach the public internet, as (network, prefix length).
const NON_GLOBAL_V4: [(Ipv4Addr, u32); 14] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8), // "this network", including unspecified
    (Ipv4Addr::new(10, 0, 0, 0), 8), // private
    (Ipv4Addr::new(100, 64, 0, 0), 10), // shared address space (carrier-grade NAT)
    (Ipv4Addr::new(127, 0, 0, 0), 8), // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16), // link-local, including cloud metadata services
    (Ipv4Addr::new(172, 16, 0, 0), 12), // private
    (Ipv4Addr::new(192, 0, 0, 0), 24), // IETF protocol assignments
    (Ipv4Addr::new(192, 0, 2, 0), 24), // documentation (TEST-NET-1)
    (Ipv4Addr::new(192, 168, 0, 0), 16), // private
    (Ipv4Addr::new(198, 18, 0, 0), 15), // benchmarking
    (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation (TEST-NET-2)
    (Ipv4Addr::new(203, 0, 113, 0), 24), // documentation (TEST-NET-3)
    (Ipv4Addr::new(224, 0, 0, 0), 4), // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4), // reserved, including broadcast
];

/// IPv6 ranges that do not reach the public internet and embed no IPv4 address to judge instead.
const NON_GLOBAL_V6: [(Ipv6Addr, u32); 9] = [
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use NAT64
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64),     // discard-only
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23),    // IETF protocol assignments, Teredo
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20),    // documentation
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),     // unique local
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),    // link-local
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),    // site-local (deprecated)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),     // multicast
];

/// IPv6 ranges whose last 32 bits are an IPv4 address the traffic ends up at.
const EMBEDS_V4_AT_END: [(Ipv6Addr, u32); 4] = [
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96), // IPv4-compatible, including :: and ::1
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96), // IPv4-mapped
    (Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96), // IPv4-translated (SIIT)
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96), // NAT64 well-known prefix
];

/// 6to4: `2002:AABB:CCDD::/48` leads to the IPv4 address `AA.BB.CC.DD`.
const SIX_TO_FOUR: (Ipv6Addr, u32) = (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);

/// Teredo: `2001:0:SSSS:SSSS:flags:port:CCCC:CCCC`, the server's IPv4 address in clear and the
/// client's (where the traffic ends up) with every bit inverted.
const TEREDO: (Ipv6Addr, u32) = (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32);

/// ISATAP interface identifiers (`::0:5efe:a.b.c.d`, `::200:5efe:a.b.c.d`) carry the IPv4
/// address of the host behind the site's router, in any prefix.
const ISATAP_IDS: [u32; 2] = [0x0000_5efe, 0x0200_5efe];

/// Why an endpoint URL is refused. Each message is a rule for the `endpoint` field of a 400.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EndpointError {
    #[error("must be an absolute http or https URL ({0})")]
    Unparseable(String),
    #[error("must be at most {MAX_ENDPOINT_LEN} characters, got {0}")]
    TooLong(usize),
    #[error("must use http or https, got {0:?}")]
    Scheme(String),
    #[error("must name a host")]
    MissingHost,
    #[error("must not contain a username or password")]
    Credentials,
    #[error("must name a host that resolves, but {host:?} did not: {message}")]
    Dns { host: String, message: String },
    #[error("must name a host that resolves, but {host:?} resolves to no address")]
    NoAddress { host: String },
    #[error(
        "must reach a public address, but {host:?} is {address}; \
         start the server with --allow-private-endpoints to allow it"
    )]
    NonGlobal { host: String, address: IpAddr },
}

/// Whether `ip` is reachable on the public internet: false for loopback, private, link-local,
/// shared, documentation, benchmarking, reserved, multicast and broadcast ranges, and for IPv6
/// addresses that lead to such an IPv4 address.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    !NON_GLOBAL_V4
        .iter()
        .any(|&(net, len)| in_prefix_v4(bits, u32::from(net), len))
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    let octets = ip.octets();
    if EMBEDS_V4_AT_END
        .iter()
        .any(|&(net, len)| in_prefix_v6(bits, u128::from(net), len))
    {
        return is_global_v4(Ipv4Addr::new(
            octets[12], octets[13], octets[14], octets[15],
        ));
    }
    if in_prefix_v6(bits, u128::from(SIX_TO_FOUR.0), SIX_TO_FOUR.1) {
        return is_global_v4(Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]));
    }
    let last = Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
    if in_prefix_v6(bits, u128::from(TEREDO.0), TEREDO.1) {
        let server = Ipv4Addr::new(octets[4], octets[5], octets[6], octets[7]);
        let client = Ipv4Addr::from(!u32::from(last));
        return is_global_v4(server) && is_global_v4(client);
    }
    let interface = u32::from_be_bytes([octets[8], octets[9], octets[10], octets[11]]);
    if ISATAP_IDS.contains(&interface) && !is_global_v4(last) {
        return false;
    }
    !NON_GLOBAL_V6
        .iter()
        .any(|&(net, len)| in_prefix_v6(bits, u128::from(net), len))
}

/// Whether the top `len` bits of `bits` equal those of `net` (`len` at most 32).
fn in_prefix_v4(bits: u32, net: u32, len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    bits & mask == net & mask
}

/// Whether the top `len` bits of `bits` equal those of `net` (`len` at most 128).
fn in_prefix_v6(bits: u128, net: u128, len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    bits & mask == net & mask
}

/// The endpoint in `text`: an absolute http or https URL of at most [`MAX_ENDPOINT_LEN`]
/// characters, with a host and without a username or password. Where it leads is checked by
/// [`check_endpoint`].
pub fn parse_endpoint(text: &str) -> Result<Url, EndpointError> {
    if text.len() > MAX_ENDPOINT_LEN {
        return Err(EndpointError::TooLong(text.len()));
    }
    let url = Url::parse(text).map_err(|error| EndpointError::Unparseable(error.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(EndpointError::Scheme(url.scheme().to_owned()));
    }
    if url.host().is_none() {
        return Err(EndpointError::MissingHost);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EndpointError::Credentials);
    }
    Ok(url)
}

/// How long [`check_endpoint`] waits for a name to resolve.
pub const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What [`check_endpoint`] learnt about an endpoint it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// An IP literal or a name whose addresses are all allowed.
    Allowed,
    /// A name that does not resolve now (or not within [`RESOLVE_TIMEOUT`]). It is allowed:
    /// addresses change, and the guard that matters runs at connect time, where the resolver
    /// refuses any non-global address it gets.
    Unresolved(String),
}

/// [`check_endpoint`] for an endpoint a subscription is about to get: refused with the rule it
/// broke, accepted when it leads where deliveries may go, and accepted (and logged) when its
/// host does not resolve yet, since the connect-time guard judges it when it does.
pub async fn vet_endpoint(url: &Url, allow_private: bool) -> Result<(), EndpointError> {
    if let Reach::Unresolved(why) = check_endpoint(url, allow_private).await? {
        tracing::info!(endpoint = %url, %why, "subscribing an endpoint whose host does not resolve yet");
    }
    Ok(())
}

/// Whether `url` may be subscribed: an IP literal is judged as it is; a name is resolved and
/// refused if any of its addresses is not global (unless `allow_private`), and allowed if it
/// does not resolve yet ([`Reach::Unresolved`]).
pub async fn check_endpoint(url: &Url, allow_private: bool) -> Result<Reach, EndpointError> {
    match url.host().ok_or(EndpointError::MissingHost)? {
        Host::Ipv4(ip) => judge_literal(IpAddr::V4(ip), allow_private).map(|()| Reach::Allowed),
        Host::Ipv6(ip) => judge_literal(IpAddr::V6(ip), allow_private).map(|()| Reach::Allowed),
        Host::Domain(name) => {
            let port = url.port_or_known_default().unwrap_or(0);
            let addrs = match tokio::time::timeout(RESOLVE_TIMEOUT, resolve(name, port)).await {
                Ok(Ok(addrs)) if !addrs.is_empty() => addrs,
                Ok(Ok(_)) => return Ok(Reach::Unresolved("it has no address".into())),
                Ok(Err(error)) => return Ok(Reach::Unresolved(error.to_string())),
                Err(_) => {
                    return Ok(Reach::Unresolved(format!(
                        "it did not resolve within {} s",
                        RESOLVE_TIMEOUT.as_secs()
                    )));
                }
            };
            judge_resolved(name, addrs.iter().map(SocketAddr::ip), allow_private)
                .map(|()| Reach::Allowed)
        }
    }
}

/// Whether `url`'s host is allowed if it is an IP literal; a name passes here (the
/// [`GlobalOnlyResolver`] judges names). reqwest does not consult the resolver for IP literals,
/// so every delivery calls this before connecting.
pub fn ip_literal_allowed(url: &Url, allow_private: bool) -> Result<(), EndpointError> {
    match url.host().ok_or(EndpointError::MissingHost)? {
        Host::Ipv4(ip) => judge_literal(IpAddr::V4(ip), allow_private),
        Host::Ipv6(ip) => judge_literal(IpAddr::V6(ip), allow_private),
        Host::Domain(_) => Ok(()),
    }
}

fn judge_literal(ip: IpAddr, allow_private: bool) -> Result<(), EndpointError> {
    judge_resolved(&ip.to_string(), [ip], allow_private)
}

/// Refuses `host` if it has no address, or if any address is not global and private addresses
/// are not allowed.
pub(crate) fn judge_resolved(
    host: &str,
    addrs: impl IntoIterator<Item = IpAddr>,
    allow_private: bool,
) -> Result<(), EndpointError> {
    let mut addrs = addrs.into_iter().peekable();
    if addrs.peek().is_none() {
        return Err(EndpointError::NoAddress {
            host: host.to_owned(),
        });
    }
    match addrs.find(|&ip| !allow_private && !is_global(ip)) {
        Some(address) => Err(EndpointError::NonGlobal {
            host: host.to_owned(),
            address,
        }),
        None => Ok(()),
    }
}

pub(crate) async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, EndpointError> {
    tokio::net::lookup_host((host, port))
        .await
        .map(Iterator::collect)
        .map_err(|error| EndpointError::Dns {
            host: host.to_owned(),
            message: error.to_string(),
        })
}

/// A reqwest resolver that refuses names with any non-global address (unless `allow_private`),
/// so that a delivery cannot be steered to a private address by changing DNS after the endpoint
/// was checked. Install it with `reqwest::ClientBuilder::dns_resolver`.
#[derive(Debug, Clone, Default)]
pub struct GlobalOnlyResolver {
    /// Accept non-global addresses too (`--allow-private-endpoints`).
    pub allow_private: bool,
    /// A name resolved without judging: the host of `--delivery-proxy`, which the operator
    /// chose (through a proxy, endpoint names are judged before the request: `send`).
    pub exempt: Option<String>,
}

impl reqwest::dns::Resolve for GlobalOnlyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        let allow_private =
            self.allow_private || self.exempt.as_deref().is_some_and(|exempt| exempt == host);
        Box::pin(async move {
            // Port 0: reqwest replaces it with the URL's port or the scheme's default.
            let addrs = resolve(&host, 0).await.map_err(refusal)?;
            judge_resolved(&host, addrs.iter().map(SocketAddr::ip), allow_private)
                .map_err(refusal)?;
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The error a resolver returns to reqwest: an `io::Error` whose message is the rule broken.
fn refusal(error: EndpointError) -> Box<dyn std::error::Error + Send + Sync> {
    let kind = match error {
        EndpointError::NonGlobal { .. } => std::io::ErrorKind::PermissionDenied,
        _ => std::io::ErrorKind::NotFound,
    };
    Box::new(std::io::Error::new(kind, error))
}

#[cfg(test)]
mod tests {
    use reqwest::dns::Resolve;

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn judges_ipv4_ranges() {
        let cases = [
            ("0.0.0.0", false),
            ("0.1.2.3", false),
            ("10.0.0.1", false),
            ("10.255.255.255", false),
            ("100.63.255.255", true),
            ("100.64.0.1", false),
            ("100.127.255.255", false),
            ("100.128.0.0", true),
            ("127.0.0.1", false),
            ("127.255.255.254", false),
            ("169.254.169.254", false),
            ("172.15.255.255", true),
            ("172.16.0.1", false),
            ("172.31.255.255", false),
            ("172.32.0.0", true),
            ("192.0.0.1", false),
            ("192.0.0.9", false),
            ("192.0.0.10", false),
            ("192.0.1.1", true),
            ("192.0.2.1", false),
            ("192.168.1.1", false),
            ("198.17.255.255", true),
            ("198.18.0.1", false),
            ("198.19.255.255", false),
            ("198.20.0.0", true),
            ("198.51.100.7", false),
            ("203.0.113.7", false),
            ("203.0.114.7", true),
            ("224.0.0.1", false),
            ("239.255.255.255", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            ("1.1.1.1", true),
            ("8.8.8.8", true),
            ("93.184.216.34", true),
            ("223.255.255.255", true),
        ];
        for (text, global) in cases {
            assert_eq!(is_global(ip(text)), global, "{text}");
        }
    }

    #[test]
    fn judges_ipv6_ranges() {
        let cases = [
            ("::", false),
            ("::1", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:10.0.0.1", false),
            ("::ffff:8.8.8.8", true),
            // IPv4-translated: ::ffff:0:a.b.c.d.
            ("::ffff:0:7f00:1", false),
            ("::ffff:0:a9fe:a9fe", false),
            ("::ffff:0:808:808", true),
            // Teredo: the server in clear, the client inverted (127.0.0.1 is 80ff:fffe).
            ("2001:0:808:808::80ff:fffe", false),
            ("2001:0:a00:1::f7f7:f7f7", false),
            ("2001:0:808:808::f7f7:f7f7", true),
            // ISATAP: a global prefix with a private host behind it.
            ("2a00:1450::5efe:a00:1", false),
            ("2a00:1450::200:5efe:7f00:1", false),
            ("2a00:1450::5efe:808:808", true),
            ("::127.0.0.1", false),
            ("::8.8.8.8", true),
            ("64:ff9b::169.254.169.254", false),
            ("64:ff9b::8.8.8.8", true),
            ("64:ff9b:1::8.8.8.8", false),
            ("100::1", false),
            ("100:0:0:1::1", true),
            ("2001::1", false),
            ("2001:1ff:ffff::1", false),
            ("2001:200::1", true),
            ("2001:db8::1", false),
            ("2001:db9::1", true),
            ("2002:7f00:1::1", false),
            ("2002:c0a8:101::1", false),
            ("2002:808:808::1", true),
            ("3fff::1", false),
            ("fc00::1", false),
            ("fd12:3456::1", false),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("ff02::1", false),
            ("ff0e::1", false),
            ("2606:4700:4700::1111", true),
            ("2a00:1450:4001:80b::200e", true),
        ];
        for (text, global) in cases {
            assert_eq!(is_global(ip(text)), global, "{text}");
        }
    }

    #[test]
    fn prefix_of_zero_bits_matches_everything() {
        assert!(in_prefix_v4(u32::MAX, 0, 0));
        assert!(in_prefix_v6(u128::MAX, 0, 0));
        assert!(in_prefix_v4(1, 1, 32));
        assert!(!in_prefix_v4(1, 0, 32));
    }

    #[test]
    fn parses_http_and_https_endpoints() {
        for text in [
            "http://example.com/hook",
            "https://example.com:8443/hook?x=1",
            "https://[2606:4700::1]/hook",
        ] {
            assert_eq!(parse_endpoint(text).unwrap().as_str(), text);
        }
    }

    #[test]
    fn refuses_other_schemes() {
        for (text, scheme) in [
            ("ftp://example.com/", "ftp"),
            ("file:///etc/passwd", "file"),
            ("gopher://example.com/", "gopher"),
            ("mailto:a@example.com", "mailto"),
        ] {
            assert_eq!(
                parse_endpoint(text),
                Err(EndpointError::Scheme(scheme.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_unparseable_urls() {
        for text in [
            "",
            "example.com/hook",
            "/hook",
            "http://",
            "http://exa mple.com/",
        ] {
            assert!(
                matches!(parse_endpoint(text), Err(EndpointError::Unparseable(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_credentials() {
        for text in [
            "https://user@example.com/",
            "https://user:pass@example.com/",
            "https://:pass@example.com/",
        ] {
            assert_eq!(
                parse_endpoint(text),
                Err(EndpointError::Credentials),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_long_urls() {
        let path = "a".repeat(MAX_ENDPOINT_LEN);
        let text = format!("https://example.com/{path}");
        assert_eq!(
            parse_endpoint(&text),
            Err(EndpointError::TooLong(text.len()))
        );
        let fits = format!("https://example.com/{}", &path[20..]);
        assert_eq!(fits.len(), MAX_ENDPOINT_LEN);
        assert!(parse_endpoint(&fits).is_ok());
    }

    #[tokio::test]
    async fn refuses_private_literals_unless_allowed() {
        for text in [
            "http://127.0.0.1/",
            "http://127.1:8080/",
            "http://0x7f000001/",
            "http://[::1]/",
            "http://[::ffff:0:7f00:1]:8080/",
            "http://[2001:0:808:808::80ff:fffe]/",
            "http://[::ffff:127.0.0.1]/",
            "https://10.1.2.3/",
            "http://169.254.169.254/latest/meta-data/",
        ] {
            let url = parse_endpoint(text).unwrap();
            let refused = check_endpoint(&url, false).await.unwrap_err();
            assert!(matches!(refused, EndpointError::NonGlobal { .. }), "{text}");
            assert_eq!(ip_literal_allowed(&url, false), Err(refused), "{text}");
            assert_eq!(
                check_endpoint(&url, true).await,
                Ok(Reach::Allowed),
                "{text}"
            );
            assert_eq!(ip_literal_allowed(&url, true), Ok(()), "{text}");
        }
    }

    #[tokio::test]
    async fn accepts_public_literals_without_dns() {
        for text in ["http://8.8.8.8/", "https://[2606:4700:4700::1111]:8443/"] {
            let url = parse_endpoint(text).unwrap();
            assert_eq!(
                check_endpoint(&url, false).await,
                Ok(Reach::Allowed),
                "{text}"
            );
            assert_eq!(ip_literal_allowed(&url, false), Ok(()), "{text}");
        }
    }

    #[tokio::test]
    async fn refuses_localhost_by_name() {
        let url = parse_endpoint("http://localhost:9000/hook").unwrap();
        let refused = check_endpoint(&url, false).await.unwrap_err();
        let EndpointError::NonGlobal { host, address } = &refused else {
            panic!("expected NonGlobal, got {refused:?}");
        };
        assert_eq!(host, "localhost");
        assert!(address.is_loopback());
        assert_eq!(check_endpoint(&url, true).await, Ok(Reach::Allowed));
        // Names are left to the resolver.
        assert_eq!(ip_literal_allowed(&url, false), Ok(()));
    }

    #[tokio::test]
    async fn names_that_do_not_resolve_yet_are_allowed() {
        // `.invalid` is reserved never to resolve (RFC 2606); Zaqar's tests use `fake`.
        for endpoint in ["https://no-such-host.invalid/", "http://fake:8080/"] {
            let url = parse_endpoint(endpoint).unwrap();
            for allow_private in [false, true] {
                let reach = check_endpoint(&url, allow_private).await.unwrap();
                assert!(
                    matches!(reach, Reach::Unresolved(_)),
                    "{endpoint}: {reach:?}"
                );
            }
        }
    }

    #[test]
    fn judges_every_resolved_address() {
        let public = ip("8.8.8.8");
        let private = ip("10.0.0.1");
        assert_eq!(judge_resolved("a", [public, public], false), Ok(()));
        assert_eq!(
            judge_resolved("a", [public, private], false),
            Err(EndpointError::NonGlobal {
                host: "a".to_owned(),
                address: private
            })
        );
        assert_eq!(judge_resolved("a", [public, private], true), Ok(()));
        assert_eq!(
            judge_resolved("a", [], true),
            Err(EndpointError::NoAddress {
                host: "a".to_owned()
            })
        );
    }

    #[test]
    fn messages_are_rules() {
        let error = EndpointError::NonGlobal {
            host: "internal.example".to_owned(),
            address: ip("10.0.0.1"),
        };
        assert_eq!(
            error.to_string(),
            "must reach a public address, but \"internal.example\" is 10.0.0.1; \
             start the server with --allow-private-endpoints to allow it"
        );
        assert_eq!(
            EndpointError::Scheme("ftp".to_owned()).to_string(),
            "must use http or https, got \"ftp\""
        );
        assert!(EndpointError::Credentials.to_string().starts_with("must "));
    }

    #[tokio::test]
    async fn the_resolver_refuses_private_names() {
        let resolver = GlobalOnlyResolver::default();
        let error = match resolver.resolve("localhost".parse().unwrap()).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(error) => error,
        };
        let io = error.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(error.to_string().contains("localhost"), "{error}");
        assert!(
            error.to_string().contains("--allow-private-endpoints"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_resolver_allows_private_names_when_asked() {
        let resolver = GlobalOnlyResolver {
            allow_private: true,
            exempt: None,
        };
        let addrs: Vec<SocketAddr> = resolver
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|addr| addr.ip().is_loopback()));
    }
}
