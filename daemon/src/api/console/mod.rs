//! The operator's web console: Pending, History and Profile pages served by `cmdgated` on loopback
//! (see `docs/console.md`).
//!
//! The console holds no authority of its own: every page and action is an [`ApiRequest`] of the
//! admin socket, handed to the same [`Handler`] with [`Role::Admin`], so it can do exactly what
//! `cmdgate` can and goes through the same checks (revision-checked rule edits, answers taken
//! once). What it adds is the protection a browser-reachable port needs (`auth`): loopback only,
//! single-use login codes minted on the admin socket, a `SameSite=Strict; HttpOnly` session
//! cookie, `Host` checked on every request (DNS rebinding), `Origin` and a JSON body on every
//! change (CSRF), no CORS, and a CSP that allows only the console's own script and stylesheet.
//!
//! [`run`] takes its listener and shutdown signal from outside, like the socket server.

pub mod auth;
pub mod pages;
pub mod routes;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use maud::Markup;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::api::types::{AddRule, AnswerPending, PendingAnswer, ResetBreaker, RuleEdit};
use crate::api::{ApiRequest, ApiResponse, Handler, Peer, Role};
use crate::clock;
use crate::engine::pending::PendingInfo;
use crate::store::audit::{AuditDecision, AuditRow, Query, RuleChange};
use crate::store::state::StoredRule;
use auth::{Auth, Headers, Refusal};
use pages::Seen;
use routes::{Asset, EditBody, HistoryFilter, Route, RuleAction};

/// Largest request body a console change may carry (a note and a few numbers).
const MAX_BODY: usize = 64 * 1024;
/// How long a browser may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle event stream gets a comment this often, so a closed tab is noticed.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Most rows the History page shows.
const HISTORY_ROWS: u32 = 200;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// What the console needs beyond the admin API: word of changes to the pending requests.
pub trait Backend: Handler {
    /// Changes (its value is a generation) whenever a request is held or leaves the registry.
    fn pending_changes(&self) -> watch::Receiver<u64>;
}

/// The console of one daemon start.
pub struct Console<B> {
    backend: Arc<B>,
    pub auth: Auth,
    /// Who the console's requests are from in the engine's eyes: the daemon's own user (the
    /// browser has no `SO_PEERCRED`; the session cookie stands for the operator who minted it).
    peer: Peer,
}

impl<B: Backend> Console<B> {
    pub fn new(backend: Arc<B>, port: u16, peer: Peer) -> Console<B> {
        Console {
            backend,
            auth: Auth::new(port),
            peer,
        }
    }

    /// A one-time login link (the admin socket's `POST /admin/console/login`).
    pub fn login_url(&self) -> Result<String, getrandom::Error> {
        let code = self.auth.mint_code(Instant::now())?;
        Ok(format!(
            "http://127.0.0.1:{}/login?code={code}",
            self.auth.port()
        ))
    }

    async fn admin(&self, request: ApiRequest) -> ApiResponse {
        self.backend.handle(Role::Admin, self.peer, request).await
    }

    /// An admin request whose 200 answer is `T`; anything else is the daemon's message.
    async fn fetch<T: DeserializeOwned>(&self, request: ApiRequest) -> Result<T, (u16, String)> {
        let r = self.admin(request).await;
        let body = r.body.unwrap_or_default();
        if r.status != 200 {
            return Err((r.status, error_text(&body)));
        }
        serde_json::from_slice(&body).map_err(|e| (500, format!("unexpected answer: {e}")))
    }
}

fn error_text(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}

/// Serves `listener` until `shutdown` turns true. Connections from outside loopback are closed
/// unanswered (the listener is bound to loopback; this is the second check).
pub async fn run<B: Backend>(
    listener: TcpListener,
    console: Arc<Console<B>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, from)) if from.ip().is_loopback() => {
                    connections.spawn(serve_connection(stream, console.clone(), shutdown.clone()));
                }
                Ok((_, from)) => eprintln!("cmdgated: console: refused a connection from {from}"),
                Err(e) => {
                    eprintln!("cmdgated: console: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => {}
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    // Event streams end with the shutdown signal; page requests finish.
    while connections.join_next().await.is_some() {}
}

type ConsoleBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn serve_connection<B: Backend>(
    stream: TcpStream,
    console: Arc<Console<B>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let stop = shutdown.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let console = console.clone();
        let stop = stop.clone();
        async move { Ok::<_, Infallible>(answer(&console, req, stop).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = stopping(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
        }
    }
}

async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// A response under construction: status, content type, body, and extra headers.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: ConsoleBody,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn full(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            content_type,
            body: Full::new(body.into()).boxed(),
            headers: Vec::new(),
        }
    }

    fn html(status: u16, m: Markup) -> Reply {
        Reply::full(status, "text/html; charset=utf-8", m.into_string())
    }

    fn json(status: u16, v: &Value) -> Reply {
        Reply::full(status, "application/json", v.to_string())
    }

    /// The answer to a change: `ok`, a message for the page, and whatever else it needs.
    fn outcome(status: u16, message: &str, extra: Value) -> Reply {
        let mut v = json!({"ok": status == 200, "message": message});
        if let (Some(o), Value::Object(extra)) = (v.as_object_mut(), extra) {
            o.extend(extra);
        }
        Reply::json(status, &v)
    }

    fn redirect(to: &str) -> Reply {
        let mut r = Reply::full(303, "text/plain; charset=utf-8", "");
        r.headers.push(("location", to.to_owned()));
        r
    }

    fn into_hyper(self) -> Response<ConsoleBody> {
        let mut resp = Response::new(self.body);
        *resp.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let h = resp.headers_mut();
        let mut set = |k: &'static str, v: &str| {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.append(k, v);
            }
        };
        set("content-type", self.content_type);
        // Only the console's own script and stylesheet; no framing, no referrer, no caching.
        set(
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        );
        set("x-frame-options", "DENY");
        set("x-content-type-options", "nosniff");
        set("referrer-policy", "no-referrer");
        set("cache-control", "no-store");
        set("cross-origin-resource-policy", "same-origin");
        set("cross-origin-opener-policy", "same-origin");
        for (k, v) in &self.headers {
            set(k, v);
        }
        resp
    }
}

fn header<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn answer<B: Backend>(
    console: &Console<B>,
    req: Request<Incoming>,
    shutdown: watch::Receiver<bool>,
) -> Response<ConsoleBody> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    // Owned copies: the body is read after the checks.
    let host = header(&req, "host").map(str::to_owned);
    let origin = header(&req, "origin").map(str::to_owned);
    let site = header(&req, "sec-fetch-site").map(str::to_owned);
    let content_type = header(&req, "content-type").map(str::to_owned);
    let cookie = header(&req, "cookie").map(str::to_owned);
    let headers = Headers {
        host: host.as_deref(),
        origin: origin.as_deref(),
        sec_fetch_site: site.as_deref(),
        content_type: content_type.as_deref(),
        cookie: cookie.as_deref(),
    };
    let refused = |r: Refusal| {
        let reply = if method == "GET" {
            Reply::html(r.status(), pages::message_page(r.status(), &r.message()))
        } else {
            Reply::outcome(r.status(), &r.message(), Value::Null)
        };
        reply.into_hyper()
    };
    // Host first, before the body is read or a login code is looked at.
    if !console.auth.host_ok(host.as_deref().unwrap_or("")) {
        return refused(Refusal::Host(host.unwrap_or_default()));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Reply::outcome(413, &format!("body refused: {e}"), Value::Null).into_hyper()
        }
    };
    let route = match Route::parse(&method, &path, &query, &body) {
        Ok(r) => r,
        Err(bad) => {
            // Unknown paths get the session check first: without a session nothing is revealed.
            if let Err(r) = console.auth.check(&headers, method != "GET") {
                return refused(r);
            }
            return Reply::html(bad.status, pages::message_page(bad.status, &bad.message))
                .into_hyper();
        }
    };
    if let Route::Login { code } = &route {
        return match console.auth.login(code, Instant::now()) {
            Some(session) => {
                let mut r = Reply::redirect("/pending");
                r.headers
                    .push(("set-cookie", console.auth.set_cookie(&session)));
                r.into_hyper()
            }
            None => refused(Refusal::NoSession),
        };
    }
    if let Err(r) = console.auth.check(&headers, route.state_changing()) {
        return refused(r);
    }
    handle(console, route, shutdown).await.into_hyper()
}

async fn handle<B: Backend>(
    console: &Console<B>,
    route: Route,
    shutdown: watch::Receiver<bool>,
) -> Reply {
    let page_error = |(status, message): (u16, String)| {
        Reply::html(status, pages::message_page(status, &message))
    };
    match route {
        Route::Login { .. } => Reply::redirect("/pending"),
        Route::Root => Reply::redirect("/pending"),
        Route::Asset(Asset::Css) => Reply::full(200, "text/css; charset=utf-8", CSS),
        Route::Asset(Asset::Js) => Reply::full(200, "text/javascript; charset=utf-8", JS),
        Route::Pending => match pending_cards(console).await {
            Ok(cards) => Reply::html(200, pages::pending_page(&cards, clock::now_ms())),
            Err(e) => page_error(e),
        },
        Route::Events { known } => events(console, known, shutdown).await,
        Route::Answer { id, approve, body } => {
            let r = console
                .admin(ApiRequest::AnswerPending(PendingAnswer {
                    id,
                    approve,
                    body: AnswerPending {
                        remember: body.remember,
                        note: body.note,
                    },
                }))
                .await;
            let v: Value = serde_json::from_slice(r.body.as_deref().unwrap_or_default())
                .unwrap_or(Value::Null);
            if r.status != 200 {
                return Reply::outcome(
                    r.status,
                    &error_text(r.body.as_deref().unwrap_or_default()),
                    Value::Null,
                );
            }
            let verb = if approve { "Approved" } else { "Rejected" };
            let message = format!(
                "{verb}{}{}{}",
                v["rule"]
                    .as_i64()
                    .map(|r| format!(" and remembered as rule #{r}"))
                    .unwrap_or_default(),
                v["note"]
                    .as_str()
                    .map(|n| format!(" — note: {n}"))
                    .unwrap_or_default(),
                if v["delivered"] == false {
                    " (its agent had stopped waiting)"
                } else {
                    "."
                }
            );
            Reply::outcome(200, &message, json!({"answer": v}))
        }
        Route::History(filter) => history(console, filter).await.unwrap_or_else(page_error),
        Route::Evidence(id) => match console.fetch::<Value>(ApiRequest::AuditShow(id)).await {
            Ok(v) => {
                let row: Option<AuditRow> = serde_json::from_value(v["row"].clone()).ok();
                let outcomes: Vec<AuditRow> =
                    serde_json::from_value(v["outcomes"].clone()).unwrap_or_default();
                match row {
                    Some(row) => Reply::html(200, pages::evidence(&row, &outcomes)),
                    None => page_error((500, "unexpected answer".into())),
                }
            }
            Err(e) => page_error(e),
        },
        Route::Remember { id, body } => {
            let row = match console.fetch::<Value>(ApiRequest::AuditShow(id)).await {
                Ok(v) => serde_json::from_value::<AuditRow>(v["row"].clone()).ok(),
                Err((s, m)) => return Reply::outcome(s, &m, Value::Null),
            };
            let Some((project, command)) =
                row.and_then(|r| Some((r.entry.project?, r.entry.command?)))
            else {
                return Reply::outcome(
                    400,
                    &format!("audit row #{id} has no project and command to remember"),
                    Value::Null,
                );
            };
            // The same request `cmdgate rules remember` sends.
            let add = AddRule {
                kind: body.kind,
                project,
                command,
                note: body.note.filter(|n| !n.trim().is_empty()),
                if_revision: Some(body.if_revision),
            };
            rule_change(
                console,
                ApiRequest::AddRule(add),
                body.seen_audit,
                body.if_revision,
            )
            .await
        }
        Route::Profile => profile(console).await.unwrap_or_else(page_error),
        Route::RuleDetail(id) => match console.fetch::<Value>(ApiRequest::RuleShow(id)).await {
            Ok(v) => Reply::html(200, pages::rule_detail(&v)),
            Err(e) => page_error(e),
        },
        Route::RuleEdit { id, action, body } => rule_edit(console, id, action, body).await,
        Route::ResetBreaker(b) => {
            let r = console
                .admin(ApiRequest::ResetBreaker(ResetBreaker { scope: b.scope }))
                .await;
            let v: Value = serde_json::from_slice(r.body.as_deref().unwrap_or_default())
                .unwrap_or(Value::Null);
            if r.status == 200 {
                Reply::outcome(200, &format!("Reset: {}", v["reset"]), Value::Null)
            } else {
                Reply::outcome(
                    r.status,
                    &error_text(r.body.as_deref().unwrap_or_default()),
                    Value::Null,
                )
            }
        }
    }
}

/// The held requests with their ask rows (classification, rule, mirror run).
async fn pending_cards<B: Backend>(
    console: &Console<B>,
) -> Result<Vec<(PendingInfo, Option<AuditRow>)>, (u16, String)> {
    let list: Vec<PendingInfo> = console.fetch(ApiRequest::Pending).await?;
    let mut cards = Vec::with_capacity(list.len());
    for info in list {
        let ask = ask_row(console, info.id).await;
        cards.push((info, ask));
    }
    Ok(cards)
}

async fn ask_row<B: Backend>(console: &Console<B>, id: i64) -> Option<AuditRow> {
    let v: Value = console.fetch(ApiRequest::AuditShow(id)).await.ok()?;
    serde_json::from_value(v["row"].clone()).ok()
}

/// The newest audit row id and the rules' revision, for a page's stale-edit checks.
async fn seen<B: Backend>(console: &Console<B>) -> Seen {
    let newest: Vec<AuditRow> = console
        .fetch(ApiRequest::AuditQuery(Query {
            limit: Some(1),
            newest: true,
            ..Query::default()
        }))
        .await
        .unwrap_or_default();
    let rules: Option<Value> = console.fetch(ApiRequest::Rules).await.ok();
    Seen {
        revision: rules.and_then(|v| v["revision"].as_i64()),
        audit: newest.last().map(|r| r.id),
    }
}

async fn history<B: Backend>(
    console: &Console<B>,
    f: HistoryFilter,
) -> Result<Reply, (u16, String)> {
    let seen = seen(console).await;
    let rows: Vec<AuditRow> = console
        .fetch(ApiRequest::AuditQuery(Query {
            kind: match f.kind.as_deref() {
                Some("all") => None,
                Some(k) => Some(k.to_owned()),
                None => Some("decision".into()),
            },
            session: f.session.clone(),
            project: f.project.clone(),
            decision: f.decision.clone(),
            source: f.source.clone(),
            contains: f.text.clone(),
            limit: Some(HISTORY_ROWS),
            newest: true,
            ..Query::default()
        }))
        .await?;
    let newest_first: Vec<AuditRow> = rows.into_iter().rev().collect();
    Ok(Reply::html(
        200,
        pages::history_page(&newest_first, &f, seen),
    ))
}

async fn profile<B: Backend>(console: &Console<B>) -> Result<Reply, (u16, String)> {
    let seen = seen(console).await;
    let rules: Value = console.fetch(ApiRequest::Rules).await?;
    let status: Value = console.fetch(ApiRequest::Status).await?;
    let list: Vec<StoredRule> = serde_json::from_value(rules["rules"].clone())
        .map_err(|e| (500, format!("unexpected rules: {e}")))?;
    let revision = rules["revision"].as_i64().unwrap_or(0);
    // The page's revision is the one its rules were read at.
    let seen = Seen {
        revision: Some(revision),
        ..seen
    };
    Ok(Reply::html(
        200,
        pages::profile_page(revision, &list, &status, seen),
    ))
}

async fn rule_edit<B: Backend>(
    console: &Console<B>,
    id: i64,
    action: RuleAction,
    body: EditBody,
) -> Reply {
    let edit = RuleEdit {
        if_revision: Some(body.if_revision),
    };
    let request = match action {
        RuleAction::Enable | RuleAction::Disable => ApiRequest::SetRuleEnabled {
            id,
            enabled: action == RuleAction::Enable,
            edit,
        },
        RuleAction::Remove => ApiRequest::RemoveRule { id, edit },
        RuleAction::AlwaysAsk => {
            let rule = match console.fetch::<Value>(ApiRequest::RuleShow(id)).await {
                Ok(v) => serde_json::from_value::<StoredRule>(v["rule"].clone()).ok(),
                Err((s, m)) => return Reply::outcome(s, &m, Value::Null),
            };
            let Some(rule) = rule else {
                return Reply::outcome(500, "unexpected rule", Value::Null);
            };
            ApiRequest::AddRule(AddRule {
                kind: "always_ask".into(),
                project: rule.project,
                command: rule.key,
                note: body.note.filter(|n| !n.trim().is_empty()),
                if_revision: Some(body.if_revision),
            })
        }
    };
    rule_change(console, request, body.seen_audit, body.if_revision).await
}

/// Applies a revision-checked rule change; a conflict says what changed since the page was read.
async fn rule_change<B: Backend>(
    console: &Console<B>,
    request: ApiRequest,
    seen_audit: Option<i64>,
    expected: i64,
) -> Reply {
    let r = console.admin(request).await;
    let body = r.body.unwrap_or_default();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match r.status {
        200 => Reply::outcome(
            200,
            "Done.",
            json!({"result": v, "revision": v["revision"]}),
        ),
        409 => {
            let changes = changes_since(console, seen_audit).await;
            let current = v["revision"].as_i64().unwrap_or(0);
            let mut message = format!(
                "Not applied: the rules changed since this page was loaded (you saw revision {expected}, \
                 they are at revision {current})."
            );
            if changes.is_empty() {
                message.push_str(" Reload to see them.");
            } else {
                message.push_str(" What changed: ");
                message.push_str(&changes.join("; "));
                message.push_str(". Reload, then decide again.");
            }
            Reply::outcome(
                409,
                &message,
                json!({"revision": current, "changes": changes}),
            )
        }
        status => Reply::outcome(status, &error_text(&body), Value::Null),
    }
}

/// The rule changes (operator edits, promotions, demotions) audited after `after`.
async fn changes_since<B: Backend>(console: &Console<B>, after: Option<i64>) -> Vec<String> {
    let mut out = Vec::new();
    for kind in ["rule", "learn"] {
        let rows: Vec<AuditRow> = console
            .fetch(ApiRequest::AuditQuery(Query {
                after_id: after,
                kind: Some(kind.into()),
                limit: Some(20),
                ..Query::default()
            }))
            .await
            .unwrap_or_default();
        for r in rows {
            let e = r.entry;
            out.push((
                r.id,
                format!(
                    "#{} {} {} {}",
                    r.id,
                    e.rule.as_deref().unwrap_or("a rule"),
                    match &e.decision {
                        Some(AuditDecision::Rule(RuleChange::Enable)) => "enabled".to_owned(),
                        Some(AuditDecision::Rule(RuleChange::Disable)) => "disabled".to_owned(),
                        Some(AuditDecision::Rule(RuleChange::Remove)) => "removed".to_owned(),
                        Some(other) => format!("{other} added"),
                        None => "changed".to_owned(),
                    },
                    e.command.map(|c| format!("(`{c}`)")).unwrap_or_default()
                ),
            ));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    out.into_iter().map(|(_, s)| s).collect()
}

// ----- server-sent events ------------------------------------------------------------------------

/// A streamed body fed by a channel: each message is one event.
struct EventBody {
    rx: mpsc::Receiver<Bytes>,
}

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|m| m.map(|b| Ok(Frame::data(b))))
    }
}

/// One SSE event; `data` may span lines (each gets its own `data:`).
fn sse(event: &str, data: &str) -> Bytes {
    let mut s = format!("event: {event}\n");
    for line in data.lines() {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}

/// `GET /events`: a `card` event (the card's HTML) for each request held after the page was
/// rendered, a `gone` event (what became of it) for each that left; ends at shutdown or when the
/// browser goes away.
async fn events<B: Backend>(
    console: &Console<B>,
    known: Vec<i64>,
    mut shutdown: watch::Receiver<bool>,
) -> Reply {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let backend = console.backend.clone();
    let peer = console.peer;
    let port = console.auth.port();
    let mut changes = backend.pending_changes();
    tokio::spawn(async move {
        // A console of its own for the task (the same backend and peer; no sessions needed).
        let c = Console::new(backend, port, peer);
        let mut shown: std::collections::BTreeMap<i64, Option<PendingInfo>> =
            known.into_iter().map(|id| (id, None)).collect();
        if tx
            .send(Bytes::from_static(b"retry: 2000\n\n"))
            .await
            .is_err()
        {
            return;
        }
        loop {
            changes.borrow_and_update();
            let Ok(list) = c.fetch::<Vec<PendingInfo>>(ApiRequest::Pending).await else {
                return;
            };
            let now: std::collections::BTreeSet<i64> = list.iter().map(|p| p.id).collect();
            for info in &list {
                if shown.get(&info.id).is_some_and(Option::is_some) {
                    continue;
                }
                if !shown.contains_key(&info.id) {
                    let ask = ask_row(&c, info.id).await;
                    let html = pages::card(info, ask.as_ref(), clock::now_ms()).into_string();
                    let data = json!({"id": info.id, "html": html}).to_string();
                    if tx.send(sse("card", &data)).await.is_err() {
                        return;
                    }
                }
                shown.insert(info.id, Some(info.clone()));
            }
            let gone: Vec<i64> = shown
                .keys()
                .filter(|id| !now.contains(id))
                .copied()
                .collect();
            for id in gone {
                let Some(info) = shown.remove(&id).flatten() else {
                    // Rendered before we looked and already gone: the page asks on its own.
                    let data = json!({"id": id, "text": "No longer waiting."}).to_string();
                    if tx.send(sse("gone", &data)).await.is_err() {
                        return;
                    }
                    continue;
                };
                let text = ending(&c, &info).await;
                let data = json!({"id": id, "text": text}).to_string();
                if tx.send(sse("gone", &data)).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                () = tokio::time::sleep(KEEPALIVE) => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        return;
                    }
                }
                () = stopping(&mut shutdown) => return,
            }
        }
    });
    Reply {
        status: 200,
        content_type: "text/event-stream",
        body: EventBody { rx }.boxed(),
        headers: Vec::new(),
    }
}

/// What became of a request that left the registry. Its answer row is written just after it
/// leaves (the operator's `take` comes first): look again a few times before calling it withdrawn.
async fn ending<B: Backend>(c: &Console<B>, info: &PendingInfo) -> String {
    for attempt in 0..=ENDING_TRIES {
        let later: Vec<AuditRow> = c
            .fetch(ApiRequest::AuditQuery(Query {
                after_id: Some(info.id),
                kind: Some("decision".into()),
                session: Some(info.session.clone()),
                limit: Some(200),
                ..Query::default()
            }))
            .await
            .unwrap_or_default();
        let found = later
            .iter()
            .any(|r| r.entry.tool_use_id.as_deref() == Some(info.tool_use_id.as_str()));
        if found || attempt == ENDING_TRIES {
            return pages::ending(info, &later);
        }
        tokio::time::sleep(ENDING_PAUSE).await;
    }
    pages::ending(info, &[])
}

/// How often and how long `ending` looks for the answer row of a request that just left.
const ENDING_TRIES: u32 = 20;
const ENDING_PAUSE: Duration = Duration::from_millis(250);

/// The address the console binds: loopback only. Anything else in the config is refused at load.
pub fn loopback(addr: SocketAddr) -> Result<SocketAddr, String> {
    if addr.ip().is_loopback() {
        Ok(addr)
    } else {
        Err(format!(
            "console.listen = {addr}: the console listens on loopback only (127.0.0.1 or [::1])"
        ))
    }
}

impl Backend for crate::engine::Engine {
    fn pending_changes(&self) -> watch::Receiver<u64> {
        self.pending.subscribe()
    }
}

/// The admin socket's handler with the console in front: `POST /admin/console/login` mints a
/// login link; everything else goes to the engine unchanged.
pub struct WithConsole<B> {
    pub inner: Arc<B>,
    /// `None` when the console is off.
    pub console: Option<Arc<Console<B>>>,
}

impl<B: Backend> Handler for WithConsole<B> {
    fn allowed(&self, role: Role, peer: &Peer, groups: &[u32]) -> bool {
        self.inner.allowed(role, peer, groups)
    }

    async fn refused(&self, role: Role, peer: Peer) {
        self.inner.refused(role, peer).await
    }

    async fn handle(&self, role: Role, peer: Peer, request: ApiRequest) -> ApiResponse {
        match (role, request, &self.console) {
            (Role::Admin, ApiRequest::ConsoleLogin, Some(c)) => match c.login_url() {
                Ok(url) => ApiResponse::json(
                    200,
                    &json!({"url": url, "port": c.auth.port(), "valid_s": auth::LOGIN_TTL.as_secs()}),
                ),
                Err(e) => ApiResponse::error(500, &format!("no randomness for a login code: {e}")),
            },
            (role, request, _) => self.inner.handle(role, peer, request).await,
        }
    }

    async fn rejected(
        &self,
        role: Role,
        peer: Peer,
        rejection: crate::api::routes::Rejection,
    ) -> ApiResponse {
        self.inner.rejected(role, peer, rejection).await
    }
}
