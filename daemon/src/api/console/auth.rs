//! Who may use the web console: the checks every request passes before a page or an action runs.
//!
//! The console carries the admin socket's authority over TCP on loopback, where every local process
//! (and, through the browser, every web page) can reach it. So:
//!
//! - **Login codes** are minted only on the admin socket (`cmdgate console`, whose peer the daemon
//!   checks with `SO_PEERCRED`): 256 random bits, single use, valid [`LOGIN_TTL`]. A code is
//!   exchanged for a **session cookie** (another 256 random bits, `HttpOnly; SameSite=Strict`,
//!   valid until the daemon stops: every start begins with no session).
//! - **Host** must name the console's own loopback address and port (`127.0.0.1:P`, `localhost:P`,
//!   `[::1]:P`) on every request: a DNS-rebinding page reaches the port under its own host name and
//!   is refused before anything else happens.
//! - **State-changing requests** (every `POST`) also need an `Origin` equal to `http://` + that host,
//!   a `Sec-Fetch-Site` of `same-origin` when the browser sends one, and a JSON body
//!   (`Content-Type: application/json`, which no cross-site form can send without a CORS preflight
//!   — and the console answers no preflight and sends no CORS header).
//!
//! Everything here is pure and unit-tested; the server (`super`) applies it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a login code from `cmdgate console` stays usable.
pub const LOGIN_TTL: Duration = Duration::from_secs(300);

/// Most login codes outstanding at once (each `cmdgate console` mints one).
const MAX_CODES: usize = 64;

/// Why a request was refused. The message is shown in the refusal page; it never echoes a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` is missing or names another host or port (DNS rebinding, a proxy).
    Host(String),
    /// No valid session cookie (and no valid login code).
    NoSession,
    /// A state-changing request without a same-origin `Origin` (CSRF).
    Origin(String),
    /// A state-changing request whose body is not JSON.
    ContentType,
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Host(_) => 421,
            Refusal::NoSession | Refusal::Origin(_) => 403,
            Refusal::ContentType => 415,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Host(h) => format!(
                "refused: this console answers only to its own loopback address, not to host {h:?}"
            ),
            Refusal::NoSession => {
                "refused: no console session. Run `cmdgate console` and open the link it \
                                   prints (each link works once, for a few minutes)."
                    .into()
            }
            Refusal::Origin(o) => {
                format!("refused: a change must come from the console's own page (origin {o:?})")
            }
            Refusal::ContentType => {
                "refused: a change must be sent as JSON by the console's page".into()
            }
        }
    }
}

/// The request headers the checks look at, as the server read them.
#[derive(Debug, Default, Clone)]
pub struct Headers<'a> {
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub cookie: Option<&'a str>,
}

/// The console's secrets for one daemon start.
pub struct Auth {
    /// The port the console listens on: part of every allowed `Host` and `Origin`.
    port: u16,
    /// Outstanding login codes and when they stop working.
    codes: Mutex<HashMap<String, Instant>>,
    /// Session cookie values handed out since this start.
    sessions: Mutex<HashSet<String>>,
}

/// 256 bits from the OS, hex.
fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Auth {
    pub fn new(port: u16) -> Auth {
        Auth {
            port,
            codes: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashSet::new()),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The session cookie's name: cookies are not separated by port, so the port is in the name.
    pub fn cookie_name(&self) -> String {
        format!("cmdgate_console_{}", self.port)
    }

    /// A new single-use login code (`cmdgate console`).
    pub fn mint_code(&self, now: Instant) -> Result<String, getrandom::Error> {
        let code = random_token()?;
        let mut codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        codes.retain(|_, until| *until > now);
        if codes.len() >= MAX_CODES {
            // The oldest go first: a flood of `cmdgate console` cannot make the newest fail.
            let mut by_age: Vec<(String, Instant)> = codes.drain().collect();
            by_age.sort_by_key(|(_, until)| *until);
            codes.extend(by_age.into_iter().skip(MAX_CODES / 2));
        }
        codes.insert(code.clone(), now + LOGIN_TTL);
        Ok(code)
    }

    /// Exchanges a login code for a new session cookie value; `None` when the code is unknown,
    /// used or expired.
    pub fn login(&self, code: &str, now: Instant) -> Option<String> {
        let until = self
            .codes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(code)?;
        if until <= now {
            return None;
        }
        let session = random_token().ok()?;
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.clone());
        Some(session)
    }

    /// The `Set-Cookie` value for a session.
    pub fn set_cookie(&self, session: &str) -> String {
        format!(
            "{}={session}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name()
        )
    }

    /// Whether `host` is one of the console's own names (with its port).
    pub fn host_ok(&self, host: &str) -> bool {
        let p = self.port;
        [
            format!("127.0.0.1:{p}"),
            format!("localhost:{p}"),
            format!("[::1]:{p}"),
        ]
        .iter()
        .any(|h| h == host)
    }

    /// The checks every request passes; `state_changing` adds the CSRF checks. A request that
    /// passes carries a valid session.
    pub fn check(&self, h: &Headers<'_>, state_changing: bool) -> Result<(), Refusal> {
        let host = h.host.unwrap_or("");
        if !self.host_ok(host) {
            return Err(Refusal::Host(host.to_owned()));
        }
        if !self.has_session(h.cookie) {
            return Err(Refusal::NoSession);
        }
        if state_changing {
            self.same_origin(h, host)?;
            let json = h.content_type.is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
            if !json {
                return Err(Refusal::ContentType);
            }
        }
        Ok(())
    }

    /// `Origin` must be this very host; `Sec-Fetch-Site`, when sent, must be `same-origin`.
    fn same_origin(&self, h: &Headers<'_>, host: &str) -> Result<(), Refusal> {
        let origin = h.origin.unwrap_or("");
        if origin != format!("http://{host}") {
            return Err(Refusal::Origin(origin.to_owned()));
        }
        match h.sec_fetch_site {
            None | Some("same-origin") => Ok(()),
            Some(other) => Err(Refusal::Origin(format!("{origin} (fetch site {other})"))),
        }
    }

    fn has_session(&self, cookie: Option<&str>) -> bool {
        let Some(cookie) = cookie else {
            return false;
        };
        let name = self.cookie_name();
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        cookie
            .split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .any(|(k, v)| k == name && sessions.contains(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged_in(auth: &Auth) -> String {
        let now = Instant::now();
        let code = auth.mint_code(now).unwrap();
        let session = auth.login(&code, now).unwrap();
        format!("other=1; {}={session}", auth.cookie_name())
    }

    fn get<'a>(host: &'a str, cookie: &'a str) -> Headers<'a> {
        Headers {
            host: Some(host),
            cookie: Some(cookie),
            ..Headers::default()
        }
    }

    #[test]
    fn a_login_code_works_once_and_not_after_it_expires() {
        let auth = Auth::new(8123);
        let now = Instant::now();
        let code = auth.mint_code(now).unwrap();
        assert_eq!(code.len(), 64);
        assert!(auth.login(&code, now).is_some());
        assert!(auth.login(&code, now).is_none(), "a code is single use");
        let late = auth.mint_code(now).unwrap();
        assert!(auth.login(&late, now + LOGIN_TTL).is_none());
        assert!(auth.login("", now).is_none());
    }

    #[test]
    fn reads_need_the_console_host_and_a_session() {
        let auth = Auth::new(8123);
        let cookie = logged_in(&auth);
        assert_eq!(auth.check(&get("127.0.0.1:8123", &cookie), false), Ok(()));
        assert_eq!(auth.check(&get("localhost:8123", &cookie), false), Ok(()));
        // DNS rebinding: the attacker's name resolves to loopback, the Host header keeps the name.
        assert!(matches!(
            auth.check(&get("evil.example:8123", &cookie), false),
            Err(Refusal::Host(_))
        ));
        assert!(matches!(
            auth.check(&get("127.0.0.1:9999", &cookie), false),
            Err(Refusal::Host(_))
        ));
        assert_eq!(
            auth.check(&get("127.0.0.1:8123", "other=1"), false),
            Err(Refusal::NoSession)
        );
        // A cookie of another port's console (cookies ignore ports) is not this console's.
        let other = Auth::new(8124);
        assert_eq!(
            other.check(&get("127.0.0.1:8124", &cookie), false),
            Err(Refusal::NoSession)
        );
        let forged = format!("{}=00", auth.cookie_name());
        assert_eq!(
            auth.check(&get("127.0.0.1:8123", &forged), false),
            Err(Refusal::NoSession)
        );
    }

    #[test]
    fn changes_need_the_same_origin_and_a_json_body() {
        let auth = Auth::new(8123);
        let cookie = logged_in(&auth);
        let post =
            |origin: Option<&'static str>, site: Option<&'static str>, ct: Option<&'static str>| {
                let h = Headers {
                    host: Some("127.0.0.1:8123"),
                    origin,
                    sec_fetch_site: site,
                    content_type: ct,
                    cookie: Some(&cookie),
                };
                auth.check(&h, true)
            };
        let json = Some("application/json");
        assert_eq!(
            post(Some("http://127.0.0.1:8123"), Some("same-origin"), json),
            Ok(())
        );
        assert_eq!(
            post(
                Some("http://127.0.0.1:8123"),
                None,
                Some("application/json; charset=utf-8")
            ),
            Ok(())
        );
        for (origin, site) in [
            (None, None),
            (Some("null"), None),
            (Some("http://evil.example"), Some("cross-site")),
            (Some("http://localhost:8123"), None),
            (Some("http://127.0.0.1:8123"), Some("same-site")),
        ] {
            assert!(
                matches!(post(origin, site, json), Err(Refusal::Origin(_))),
                "{origin:?} {site:?}"
            );
        }
        assert_eq!(
            post(
                Some("http://127.0.0.1:8123"),
                None,
                Some("application/x-www-form-urlencoded")
            ),
            Err(Refusal::ContentType)
        );
        assert_eq!(
            post(Some("http://127.0.0.1:8123"), None, Some("text/plain")),
            Err(Refusal::ContentType)
        );
    }

    #[test]
    fn the_cookie_is_http_only_and_same_site_strict() {
        let auth = Auth::new(8123);
        let c = auth.set_cookie("abc");
        assert_eq!(
            c,
            "cmdgate_console_8123=abc; Path=/; HttpOnly; SameSite=Strict"
        );
    }
}
