//! Network by domain (issue 14): the HTTP proxy a mirrored run with a `network=<hosts>` entry
//! reaches, and nothing else. The run's pid 1 makes the listening socket inside the mirror's own
//! network namespace (loopback only) and hands it to us (`cmdgate_sandbox::net`); we accept on it
//! and connect from the host side.
//!
//! Why here and not in the privileged sandbox helper: this code parses hostile input (the
//! command writes the requests), so it runs in the least privileged process that can do the job.
//! In system mode the daemon holds no capabilities while the helper holds CAP_SYS_ADMIN and
//! friends; the daemon also has an async runtime for many connections, the operator's config,
//! and the run's audit row, where every attempt is recorded.
//!
//! Per connection: read the request head (≤ 16 KiB, 10 s), then
//! - `CONNECT host:port` (a tunnel; HTTPS) or an absolute-form request `GET http://host[:port]/…`
//!   (plain HTTP; forwarded in origin form with `Host` set from the URL and `Connection: close`);
//!   anything else is refused;
//! - the host is normalised and matched against the entry's patterns
//!   (`cmdgate_policy::net`: ASCII only, case and a trailing dot ignored, IP literals refused,
//!   ports 80/443 unless the pattern names one);
//! - the name is resolved here — `[network] hosts` first (fixed addresses for offline mirrors
//!   and tests), else DNS — and an address that is loopback, private, link-local, … is refused
//!   unless it came from `hosts` or `[network] allow_internal` is set (DNS rebinding: a public
//!   name pointed at cmdgate's console or another local service);
//! - the connection goes to the address resolved, never resolved again.
//!
//! Every attempt, allowed or refused, is recorded ([`Attempt`]) for the run's audit row; a refused
//! one gets a 403 whose body says why and makes the run dirty (`engine/runs.rs`).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cmdgate_policy::net::{self as hosts, HostPattern, HostRefusal};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

/// Longest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Name resolution and the upstream connect, each.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections served at once per run; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 64;
/// Distinct attempts kept per run (host, port, verdict); more are counted, not listed.
const MAX_ATTEMPTS: usize = 200;
/// How long the end of a run waits for requests already sent to be judged.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// `[network]` in config.toml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Names the proxy resolves to a fixed address instead of asking DNS: for offline mirrors
    /// (a local registry) and tests. A mapped name may be an internal address (the operator
    /// wrote it); the entry must still list the name.
    pub hosts: BTreeMap<String, IpAddr>,
    /// Let names resolve to internal addresses (loopback, private, link-local, …). Off: such a
    /// name is refused, since DNS rebinding would otherwise reach local services.
    pub allow_internal: bool,
}

impl NetworkConfig {
    /// Problems for `Config::problems`.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for name in self.hosts.keys() {
            match hosts::normalize_host(name) {
                Ok(n) if n == *name => {}
                Ok(n) => p.push(format!(
                    "network.hosts: write {name:?} as {n:?} (lowercase, no trailing dot)"
                )),
                Err(e) => p.push(format!("network.hosts: {name:?} is {e}")),
            }
        }
        p
    }
}

/// One kind of connection attempt the run made through the proxy (repeats are counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The host as requested (normalised when it was a host name).
    pub host: String,
    pub port: u16,
    /// `connect` (a CONNECT tunnel) or `http` (a plain HTTP request); `other` when unparsable.
    pub via: &'static str,
    /// Whether the entry's list (and the address rules) allowed it.
    pub allowed: bool,
    /// Why it was refused, or what became of an allowed one (the address reached, or why not).
    pub detail: String,
    pub count: u32,
}

impl Attempt {
    /// The client's last line for a refused attempt.
    pub fn refusal(&self) -> String {
        if self.detail.starts_with("not in the list") {
            format!(
                "tried to reach {}:{}, which this command's tier-map entry does not allow",
                self.host, self.port
            )
        } else {
            format!(
                "tried to reach {}:{}, refused: {}",
                self.host, self.port, self.detail
            )
        }
    }
}

#[derive(Default)]
struct Record {
    attempts: Vec<Attempt>,
    /// Attempts past [`MAX_ATTEMPTS`] distinct ones, and how many of them were refused.
    more: u32,
    more_refused: u32,
}

impl Record {
    fn add(&mut self, a: Attempt) {
        if let Some(same) = self.attempts.iter_mut().find(|b| {
            b.host == a.host
                && b.port == a.port
                && b.via == a.via
                && b.allowed == a.allowed
                && b.detail == a.detail
        }) {
            same.count = same.count.saturating_add(1);
        } else if self.attempts.len() < MAX_ATTEMPTS {
            self.attempts.push(a);
        } else {
            self.more = self.more.saturating_add(1);
            if !a.allowed {
                self.more_refused = self.more_refused.saturating_add(1);
            }
        }
    }
}

/// What a run did through its proxy.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub attempts: Vec<Attempt>,
    /// Attempts not listed (past the bound), and how many of those were refused.
    pub more: u32,
    pub more_refused: u32,
}

impl Report {
    /// The refused attempts' lines for the client (the run is dirty when there is one).
    pub fn refusals(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .attempts
            .iter()
            .filter(|a| !a.allowed)
            .map(Attempt::refusal)
            .collect();
        if self.more_refused > 0 {
            out.push(format!("{} more refused attempts", self.more_refused));
        }
        out
    }
}

struct Shared {
    patterns: Vec<HostPattern>,
    config: NetworkConfig,
    record: Mutex<Record>,
    /// Accepted connections not yet judged (the end of a run waits for them).
    unjudged: Mutex<usize>,
    judged: Notify,
}

impl Shared {
    fn record(&self, a: Attempt) {
        if let Ok(mut r) = self.record.lock() {
            r.add(a);
        }
    }

    fn judged_one(&self) {
        if let Ok(mut n) = self.unjudged.lock() {
            *n = n.saturating_sub(1);
        }
        self.judged.notify_waiters();
    }
}

/// A running proxy for one mirrored run.
pub struct Proxy {
    shared: Arc<Shared>,
    /// A second handle on the listener, for draining the backlog at the end.
    drain: std::net::TcpListener,
    accept: tokio::task::JoinHandle<JoinSet<()>>,
    stop: Arc<Notify>,
}

impl Proxy {
    /// Starts serving `listener` (made in the mirror, see `cmdgate_sandbox::net`) for a run whose
    /// entry allows `patterns`.
    pub fn start(
        listener: std::net::TcpListener,
        patterns: Vec<HostPattern>,
        config: NetworkConfig,
    ) -> std::io::Result<Proxy> {
        listener.set_nonblocking(true)?;
        let drain = listener.try_clone()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shared = Arc::new(Shared {
            patterns,
            config,
            record: Mutex::new(Record::default()),
            unjudged: Mutex::new(0),
            judged: Notify::new(),
        });
        let stop = Arc::new(Notify::new());
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), stop.clone()));
        Ok(Proxy {
            shared,
            drain,
            accept,
            stop,
        })
    }

    /// Call once the run is over (its processes are gone): requests already sent are judged
    /// (bounded wait), every connection is closed, and the attempts are returned.
    pub async fn finish(self) -> Report {
        self.stop.notify_one();
        let mut tasks = self.accept.await.unwrap_or_default();
        // Connections still in the backlog: their requests were made while the run ran.
        while let Ok((stream, _)) = self.drain.accept() {
            let accepted = stream
                .set_nonblocking(true)
                .and_then(|()| TcpStream::from_std(stream));
            if let Ok(stream) = accepted {
                if let Ok(mut n) = self.shared.unjudged.lock() {
                    *n += 1;
                }
                tasks.spawn(serve(stream, self.shared.clone()));
            }
        }
        let shared = self.shared.clone();
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, async move {
            loop {
                let waiting = shared.judged.notified();
                if shared.unjudged.lock().map_or(true, |n| *n == 0) {
                    return;
                }
                waiting.await;
            }
        })
        .await;
        tasks.shutdown().await;
        let record =
            std::mem::take(&mut *self.shared.record.lock().unwrap_or_else(|e| e.into_inner()));
        Report {
            attempts: record.attempts,
            more: record.more,
            more_refused: record.more_refused,
        }
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    stop: Arc<Notify>,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = stop.notified() => break,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let accepted = tokio::select! {
            _ = stop.notified() => break,
            a = listener.accept() => a,
        };
        // Reap finished connections as we go.
        while tasks.try_join_next().is_some() {}
        match accepted {
            Ok((stream, _)) => {
                if let Ok(mut n) = shared.unjudged.lock() {
                    *n += 1;
                }
                let shared = shared.clone();
                tasks.spawn(async move {
                    serve(stream, shared).await;
                    drop(permit);
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    tasks
}

/// One client connection.
async fn serve(mut client: TcpStream, shared: Arc<Shared>) {
    let mut judged = Judged(&shared, false);
    let Some((head, rest)) = read_head(&mut client).await else {
        return; // nothing asked (closed early, too slow, or no head within the bound)
    };
    let request = match parse(&head) {
        Ok(r) => r,
        Err(why) => {
            shared.record(Attempt {
                host: String::new(),
                port: 0,
                via: "other",
                allowed: false,
                detail: why.clone(),
                count: 1,
            });
            judged.done();
            let _ = refuse(
                &mut client,
                400,
                &format!("cmdgate's proxy refused the request: {why}"),
            )
            .await;
            return;
        }
    };
    let mut attempt = Attempt {
        host: request.host.clone(),
        port: request.port,
        via: if request.connect { "connect" } else { "http" },
        allowed: false,
        detail: String::new(),
        count: 1,
    };
    let host = match hosts::normalize_host(&request.host) {
        Ok(h) => h,
        Err(e) => {
            attempt.detail = match e {
                HostRefusal::Address => format!("{e}"),
                HostRefusal::Malformed(_) => format!("{e}"),
            };
            return refused(client, attempt, &shared, judged).await;
        }
    };
    attempt.host = host.clone();
    let Some(pattern) = hosts::allowed(&shared.patterns, &host, request.port) else {
        attempt.detail = format!(
            "not in the list ({})",
            shared
                .patterns
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return refused(client, attempt, &shared, judged).await;
    };
    let pattern = pattern.to_string();
    let addresses = match resolve(&shared.config, &host, request.port).await {
        Ok(a) => a,
        Err(Resolve::Internal(ip, kind)) => {
            attempt.detail = format!(
                "{host} resolves to {ip}, a {kind} address (DNS rebinding is how a name reaches \
                 local services; the operator can map the name in `[network] hosts`)"
            );
            return refused(client, attempt, &shared, judged).await;
        }
        Err(Resolve::Failed(why)) => {
            attempt.allowed = true;
            attempt.detail = format!("allowed by `{pattern}`; {why}");
            shared.record(attempt);
            judged.done();
            let _ = refuse(&mut client, 502, &format!("cmdgate's proxy: {why}")).await;
            return;
        }
    };
    attempt.allowed = true;
    let upstream = connect(&addresses).await;
    attempt.detail = match &upstream {
        Ok((_, addr)) => format!("allowed by `{pattern}`; connected to {addr}"),
        Err(e) => format!("allowed by `{pattern}`; could not connect: {e}"),
    };
    shared.record(attempt);
    judged.done();
    let Ok((mut upstream, _)) = upstream else {
        let _ = refuse(
            &mut client,
            502,
            "cmdgate's proxy could not connect upstream",
        )
        .await;
        return;
    };
    let start = if request.connect {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
    } else {
        upstream.write_all(&request.forward).await
    };
    if start.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Marks the connection judged (once) when dropped, so the end of a run never waits for it.
struct Judged<'a>(&'a Shared, bool);

impl Judged<'_> {
    fn done(&mut self) {
        if !self.1 {
            self.1 = true;
            self.0.judged_one();
        }
    }
}

impl Drop for Judged<'_> {
    fn drop(&mut self) {
        self.done();
    }
}

async fn refused(mut client: TcpStream, attempt: Attempt, shared: &Shared, mut judged: Judged<'_>) {
    let line = format!("cmdgate: {}", attempt.refusal());
    shared.record(attempt);
    judged.done();
    let _ = refuse(&mut client, 403, &line).await;
}

async fn refuse(client: &mut TcpStream, status: u16, message: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("{message}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

/// The head (up to and including the blank line) and whatever followed it in the same reads.
async fn read_head(client: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = client.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let rest = buf.split_off(end + 4);
                return Some((std::mem::take(&mut buf), rest));
            }
            if buf.len() > MAX_HEAD {
                // Judged as a request: a head this long is refused, not ignored.
                return Some((std::mem::take(&mut buf), Vec::new()));
            }
        }
    };
    tokio::time::timeout(HEAD_TIMEOUT, read)
        .await
        .ok()
        .flatten()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A parsed proxy request.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    connect: bool,
    /// As written (not yet normalised).
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin form, `Host` from the URL,
    /// `Connection: close`, no proxy headers).
    forward: Vec<u8>,
}

fn parse(head: &[u8]) -> Result<Request, String> {
    if head.len() > MAX_HEAD || !head.ends_with(b"\r\n\r\n") {
        return Err(format!("a request head longer than {MAX_HEAD} bytes"));
    }
    let text = std::str::from_utf8(head).map_err(|_| "a request head that is not UTF-8")?;
    let mut lines = text[..text.len() - 4].split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err("a malformed request line".into());
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(format!("protocol {version:?} (HTTP/1.x only)"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("a malformed method".into());
    }
    if method == "CONNECT" {
        let (host, port) = hosts::split_authority(target, None)?;
        return Ok(Request {
            connect: true,
            host: host.to_owned(),
            port,
            forward: Vec::new(),
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(if target.starts_with("https://") {
            "an https:// URL in a plain request (use CONNECT)".into()
        } else {
            "not a proxy request (an absolute http:// URL or CONNECT)".into()
        });
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err("credentials in the URL".into());
    }
    let (host, port) = hosts::split_authority(authority, Some(80))?;
    let path = match path {
        "" => "/".to_owned(),
        p if p.starts_with('/') => p.split('#').next().unwrap_or("/").to_owned(),
        p => format!("/{}", p.split('#').next().unwrap_or_default()),
    };
    let mut forward = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n");
    for h in lines {
        let name = h.split(':').next().unwrap_or_default().trim();
        if h.starts_with([' ', '\t']) {
            return Err("a folded header line".into());
        }
        let hop = [
            "host",
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
        ];
        if hop.iter().any(|x| name.eq_ignore_ascii_case(x)) {
            continue;
        }
        forward.push_str(h);
        forward.push_str("\r\n");
    }
    forward.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        connect: false,
        host: host.to_owned(),
        port,
        forward: forward.into_bytes(),
    })
}

enum Resolve {
    /// Every address the name has is internal (and that is not allowed).
    Internal(IpAddr, &'static str),
    /// DNS said nothing usable: not a policy refusal.
    Failed(String),
}

/// The addresses to connect to: `[network] hosts`, else DNS with internal addresses dropped
/// (refused when nothing else is left).
async fn resolve(
    config: &NetworkConfig,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Resolve> {
    if let Some(ip) = config.hosts.get(host) {
        return Ok(vec![SocketAddr::new(*ip, port)]);
    }
    let found = tokio::time::timeout(UPSTREAM_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| Resolve::Failed(format!("resolving {host} timed out")))?
        .map_err(|e| Resolve::Failed(format!("could not resolve {host}: {e}")))?;
    let mut public = Vec::new();
    let mut internal = None;
    for addr in found {
        match hosts::internal_address(addr.ip()) {
            Some(kind) if !config.allow_internal => {
                internal.get_or_insert((addr.ip(), kind));
            }
            _ => public.push(addr),
        }
    }
    match (public.is_empty(), internal) {
        (false, _) => Ok(public),
        (true, Some((ip, kind))) => Err(Resolve::Internal(ip, kind)),
        (true, None) => Err(Resolve::Failed(format!("{host} has no address"))),
    }
}

async fn connect(addresses: &[SocketAddr]) -> std::io::Result<(TcpStream, SocketAddr)> {
    let mut last = std::io::Error::other("no address");
    for addr in addresses {
        match tokio::time::timeout(UPSTREAM_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok((s, *addr)),
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_into_host_port_and_the_forwarded_head() {
        let r = parse(b"CONNECT registry.test:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(r.connect);
        assert_eq!((r.host.as_str(), r.port), ("registry.test", 443));
        let r = parse(
            b"GET http://Registry.Test:8080/a/b?c=d HTTP/1.1\r\nHost: evil.example\r\n\
              Proxy-Authorization: x\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert!(!r.connect);
        assert_eq!((r.host.as_str(), r.port), ("Registry.Test", 8080));
        assert_eq!(
            String::from_utf8(r.forward).unwrap(),
            "GET /a/b?c=d HTTP/1.1\r\nHost: Registry.Test:8080\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
        let r = parse(b"GET http://a.example.com HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.port, 80);
        assert!(String::from_utf8(r.forward)
            .unwrap()
            .starts_with("GET / HTTP/1.1\r\n"));
        for (bad, says) in [
            (
                &b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n"[..],
                "not a proxy request",
            ),
            (
                b"GET https://a.example.com/ HTTP/1.1\r\n\r\n",
                "use CONNECT",
            ),
            (b"CONNECT a.example.com HTTP/1.1\r\n\r\n", "no port"),
            (
                b"GET http://u:p@a.example.com/ HTTP/1.1\r\n\r\n",
                "credentials",
            ),
            (b"GET http://a.example.com/ HTTP/2\r\n\r\n", "HTTP/1.x"),
            (b"get http://a.example.com/ HTTP/1.1\r\n\r\n", "method"),
            (
                b"GET  http://a.example.com/ HTTP/1.1\r\n\r\n",
                "request line",
            ),
            (
                b"GET http://a.example.com/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
                "folded",
            ),
        ] {
            let e = parse(bad).expect_err(std::str::from_utf8(bad).unwrap());
            assert!(e.contains(says), "{e}");
        }
    }

    #[tokio::test]
    async fn internal_addresses_are_refused_unless_mapped_or_allowed() {
        let mut config = NetworkConfig::default();
        assert!(matches!(
            resolve(&config, "localhost", 443).await,
            Err(Resolve::Internal(_, "loopback"))
        ));
        config
            .hosts
            .insert("registry.test".into(), "127.0.0.1".parse().unwrap());
        assert_eq!(
            resolve(&config, "registry.test", 8080).await.ok(),
            Some(vec!["127.0.0.1:8080".parse().unwrap()])
        );
        config.allow_internal = true;
        assert!(resolve(&config, "localhost", 443).await.is_ok());
    }

    #[test]
    fn the_config_wants_normalised_names() {
        let mut c = NetworkConfig::default();
        c.hosts
            .insert("Registry.Test.".into(), "127.0.0.1".parse().unwrap());
        c.hosts
            .insert("10.0.0.1".into(), "127.0.0.1".parse().unwrap());
        c.hosts
            .insert("ok.test".into(), "127.0.0.1".parse().unwrap());
        let p = c.problems();
        assert_eq!(p.len(), 2, "{p:?}");
    }

    #[test]
    fn attempts_are_counted_and_bounded() {
        let mut r = Record::default();
        let a = |host: &str, allowed: bool| Attempt {
            host: host.into(),
            port: 443,
            via: "connect",
            allowed,
            detail: if allowed {
                "ok".into()
            } else {
                "not in the list (x)".into()
            },
            count: 1,
        };
        r.add(a("a.test", true));
        r.add(a("a.test", true));
        r.add(a("b.test", false));
        assert_eq!(r.attempts.len(), 2);
        assert_eq!(r.attempts[0].count, 2);
        for i in 0..MAX_ATTEMPTS {
            r.add(a(&format!("h{i}.test"), false));
        }
        assert_eq!(r.attempts.len(), MAX_ATTEMPTS);
        assert_eq!((r.more, r.more_refused), (2, 2));
        let report = Report {
            attempts: r.attempts,
            more: r.more,
            more_refused: r.more_refused,
        };
        assert_eq!(
            report.refusals()[0],
            "tried to reach b.test:443, which this command's tier-map entry does not allow"
        );
        assert_eq!(report.refusals().last().unwrap(), "2 more refused attempts");
    }
}
