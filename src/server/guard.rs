//! Who may call the listener. Three checks in front of every route, so that no web page a
//! user visits can drive slate through their browser:
//!
//! - **Host** must name the listener itself (the address it is bound to, or `localhost` with
//!   its port) or a name the operator listed (`--allowed-host`, `daemon.allowed_hosts`): a page
//!   of another site that rebinds its DNS name to 127.0.0.1 (DNS rebinding) sends its own name
//!   and is refused. A listener on a non-loopback address takes any Host unless names are
//!   listed (it needs a token anyway).
//! - **Origin**, when a browser sends one, must be such a host too.
//! - Every state-changing API request (`POST`, `PUT`, `PATCH`) needs
//!   `Content-Type: application/json`, which a page cannot send to another origin without a
//!   CORS preflight (that slate never grants); the webhook routes keep the types Event Grid
//!   and Pub/Sub send. `DELETE` needs a preflight in any case.
//!
//! Then the tokens ([`Access`]): the API's bearer token (configured, or made at start on
//! loopback and printed with the dashboard's URL), and the webhook intake's own.

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};

/// Shortest token accepted: 22 characters carry 128 bits when drawn from base64's alphabet.
pub const MIN_TOKEN_CHARS: usize = 22;

/// The listener's tokens.
#[derive(Clone, Default)]
pub struct Access {
    /// The API's bearer token: configured, or made at start (see `made`). None only with
    /// `--no-token` on loopback.
    pub token: Option<String>,
    /// The token was made by this process (printed once with the dashboard's URL).
    pub made: bool,
    /// The webhook intake's own token (`--webhook-token-file`, `SLATE_WEBHOOK_TOKEN`).
    pub webhook_token: Option<String>,
    /// Host names the operator listed (lower case; with or without a port).
    pub allowed_hosts: Vec<String>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never a token
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("made", &self.made)
            .field(
                "webhook_token",
                &self.webhook_token.as_ref().map(|_| "(set)"),
            )
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

/// A token of 256 bits from the operating system's generator, as 64 hex digits.
pub fn make_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A configured token too short to be one (one line naming the option).
pub fn check_token(token: &str) -> Result<(), String> {
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "the token has {} characters; at least {MIN_TOKEN_CHARS} are needed (128 bits; \
             e.g. `openssl rand -hex 32`)",
            token.chars().count()
        ));
    }
    Ok(())
}

/// The host part of a `Host` value or an origin's authority, and its port if any.
fn split_host(h: &str) -> (String, Option<&str>) {
    let h = h.trim();
    if let Some(rest) = h.strip_prefix('[') {
        // [v6]:port
        if let Some((ip, after)) = rest.split_once(']') {
            return (
                format!("[{}]", ip.to_ascii_lowercase()),
                after.strip_prefix(':'),
            );
        }
    }
    match h.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name.to_ascii_lowercase(), Some(port)),
        _ => (h.to_ascii_lowercase(), None),
    }
}

/// Whether `host` (a `Host` header, `name[:port]`) names this listener.
pub fn host_allowed(host: &str, bound: SocketAddr, listed: &[String]) -> bool {
    let (name, port) = split_host(host);
    let port_ok = |p: Option<&str>| p.is_none_or(|p| p == bound.port().to_string());
    let own = match bound.ip() {
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    if listed.iter().any(|l| {
        let (lname, lport) = split_host(l);
        lname == name && (lport.is_none() || lport == port)
    }) {
        return true;
    }
    if !bound.ip().is_loopback() && listed.is_empty() {
        // a listener on the network: its clients use names slate cannot know (it needs a token)
        return true;
    }
    port_ok(port) && (name == own || (bound.ip().is_loopback() && name == "localhost"))
}

/// Whether an `Origin` (`scheme://host[:port]`) is this listener's own.
fn origin_allowed(origin: &str, bound: SocketAddr, listed: &[String]) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false; // "null", other schemes
    };
    !rest.contains('/') && host_allowed(rest, bound, listed)
}

/// The webhook routes: deliveries from the clouds, with their own content types and token.
pub fn is_intake(path: &str) -> bool {
    path.starts_with("/events/")
}

/// Content types the webhook routes take (Event Grid's schema, CloudEvents', Pub/Sub push).
fn intake_type(ct: &str) -> bool {
    [
        "application/json",
        "application/cloudevents+json",
        "application/cloudevents-batch+json",
    ]
    .iter()
    .any(|t| ct.eq_ignore_ascii_case(t))
}

/// The three checks on one request; `Err` is the status and a one-line reason.
pub fn check(
    method: &Method,
    path: &str,
    host: Option<&str>,
    origin: Option<&str>,
    content_type: Option<&str>,
    bound: SocketAddr,
    listed: &[String],
) -> Result<(), (StatusCode, String)> {
    let Some(host) = host else {
        return Err((StatusCode::FORBIDDEN, "a Host header is required".into()));
    };
    if !host_allowed(host, bound, listed) {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "Host '{}' is not this listener's ({bound}); list the name with --allowed-host",
                printable(host)
            ),
        ));
    }
    if let Some(o) = origin {
        if !origin_allowed(o, bound, listed) {
            return Err((
                StatusCode::FORBIDDEN,
                format!("requests from origin '{}' are refused", printable(o)),
            ));
        }
    }
    let changes = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if changes {
        let ct = content_type
            .map(|c| c.split(';').next().unwrap_or("").trim())
            .unwrap_or("");
        let ok = if is_intake(path) {
            // Pub/Sub push sends application/json; some senders none at all
            ct.is_empty() || intake_type(ct)
        } else {
            ct.eq_ignore_ascii_case("application/json")
        };
        if !ok {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "{method} {path} needs Content-Type: application/json (got '{}')",
                    printable(ct)
                ),
            ));
        }
    }
    Ok(())
}

/// A header value as it may be shown in an answer: printable ASCII only, bounded.
fn printable(s: &str) -> String {
    s.chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_origins_and_content_types() {
        let lo: SocketAddr = "127.0.0.1:3030".parse().unwrap();
        let lo6: SocketAddr = "[::1]:3030".parse().unwrap();
        let net: SocketAddr = "0.0.0.0:3030".parse().unwrap();
        let listed = vec!["slate.example.com".to_string()];
        let json = Some("application/json");
        // (method, path, host, origin, content type, bound, listed, Ok or status)
        type Case<'a> = (
            Method,
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
            SocketAddr,
            &'a [String],
            u16,
        );
        let none: &[String] = &[];
        let cases: Vec<Case> = vec![
            (
                Method::GET,
                "/jobs",
                Some("127.0.0.1:3030"),
                None,
                None,
                lo,
                none,
                200,
            ),
            (
                Method::GET,
                "/jobs",
                Some("localhost:3030"),
                None,
                None,
                lo,
                none,
                200,
            ),
            (
                Method::GET,
                "/jobs",
                Some("LOCALHOST:3030"),
                None,
                None,
                lo,
                none,
                200,
            ),
            (
                Method::GET,
                "/jobs",
                Some("127.0.0.1"),
                None,
                None,
                lo,
                none,
                200,
            ),
            (
                Method::GET,
                "/jobs",
                Some("[::1]:3030"),
                None,
                None,
                lo6,
                none,
                200,
            ),
            // DNS rebinding: another site's name, or this host's on another port
            (
                Method::GET,
                "/jobs",
                Some("evil.example:3030"),
                None,
                None,
                lo,
                none,
                403,
            ),
            (
                Method::GET,
                "/jobs",
                Some("localhost:8080"),
                None,
                None,
                lo,
                none,
                403,
            ),
            (
                Method::GET,
                "/jobs",
                Some("127.0.0.2:3030"),
                None,
                None,
                lo,
                none,
                403,
            ),
            (Method::GET, "/jobs", None, None, None, lo, none, 403),
            (
                Method::GET,
                "/jobs",
                Some("slate.example.com"),
                None,
                None,
                lo,
                &listed,
                200,
            ),
            (
                Method::GET,
                "/jobs",
                Some("slate.example.com:443"),
                None,
                None,
                lo,
                &listed,
                200,
            ),
            // a listener on the network takes any name unless names are listed
            (
                Method::GET,
                "/jobs",
                Some("anything:3030"),
                None,
                None,
                net,
                none,
                200,
            ),
            (
                Method::GET,
                "/jobs",
                Some("anything:3030"),
                None,
                None,
                net,
                &listed,
                403,
            ),
            // origins
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                Some("http://127.0.0.1:3030"),
                json,
                lo,
                none,
                200,
            ),
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                Some("http://localhost:3030"),
                json,
                lo,
                none,
                200,
            ),
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                Some("https://evil.example"),
                json,
                lo,
                none,
                403,
            ),
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                Some("null"),
                json,
                lo,
                none,
                403,
            ),
            (
                Method::GET,
                "/pairs",
                Some("127.0.0.1:3030"),
                Some("http://evil.example"),
                None,
                lo,
                none,
                403,
            ),
            // content types of state-changing requests
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                None,
                Some("text/plain"),
                lo,
                none,
                415,
            ),
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                None,
                None,
                lo,
                none,
                415,
            ),
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                None,
                Some("application/x-www-form-urlencoded"),
                lo,
                none,
                415,
            ),
            (
                Method::POST,
                "/jobs",
                Some("127.0.0.1:3030"),
                None,
                Some("application/json; charset=utf-8"),
                lo,
                none,
                200,
            ),
            (
                Method::POST,
                "/jobs/1/resume",
                Some("127.0.0.1:3030"),
                None,
                None,
                lo,
                none,
                415,
            ),
            (
                Method::DELETE,
                "/jobs/1",
                Some("127.0.0.1:3030"),
                None,
                None,
                lo,
                none,
                200,
            ),
            // the webhook keeps the clouds' types
            (
                Method::POST,
                "/events/eventgrid",
                Some("127.0.0.1:3030"),
                None,
                Some("application/cloudevents+json; charset=utf-8"),
                lo,
                none,
                200,
            ),
            (
                Method::POST,
                "/events/eventgrid",
                Some("127.0.0.1:3030"),
                None,
                Some("application/cloudevents-batch+json"),
                lo,
                none,
                200,
            ),
            (
                Method::POST,
                "/events/pubsub",
                Some("127.0.0.1:3030"),
                None,
                None,
                lo,
                none,
                200,
            ),
            (
                Method::POST,
                "/events/pubsub",
                Some("127.0.0.1:3030"),
                None,
                Some("text/plain"),
                lo,
                none,
                415,
            ),
        ];
        for (i, (m, path, host, origin, ct, bound, listed, want)) in cases.into_iter().enumerate() {
            let got = match check(&m, path, host, origin, ct, bound, listed) {
                Ok(()) => 200,
                Err((s, _)) => s.as_u16(),
            };
            assert_eq!(
                got, want,
                "case {i}: {m} {path} host {host:?} origin {origin:?} type {ct:?}"
            );
        }
    }

    #[test]
    fn tokens_are_long_enough_and_made_ones_are_random() {
        assert!(check_token("short").is_err());
        assert!(check_token(&"x".repeat(MIN_TOKEN_CHARS)).is_ok());
        let (a, b) = (make_token().unwrap(), make_token().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        let shown = format!(
            "{:?}",
            Access {
                token: Some(a.clone()),
                ..Default::default()
            }
        );
        assert!(!shown.contains(&a), "{shown}");
    }
}
