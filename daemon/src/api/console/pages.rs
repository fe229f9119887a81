//! The console's HTML, rendered on the server with maud (every value is escaped unless marked
//! otherwise, and nothing here marks a value otherwise). Pages link one stylesheet and one script,
//! both served by the console itself: no CDN, no inline script (the CSP forbids it).

use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use cmdgate_policy::decide::canonical_key;
use cmdgate_policy::shell::{self, Analysis, Limits};

use super::routes::HistoryFilter;
use crate::engine::pending::PendingInfo;
use crate::store::audit::{AuditRow, AuditSource, Kind};
use crate::store::state::StoredRule;
use cmdgate_policy::wire::{Source, Verdict};

/// Which tab is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Pending,
    History,
    Profile,
}

/// What every page carries for its script: the rules' revision and the newest audit row the page
/// was rendered from (a stale edit is reported against them).
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    pub revision: Option<i64>,
    pub audit: Option<i64>,
}

fn layout(title: &str, tab: Tab, seen: Seen, body: Markup) -> Markup {
    let nav = |t: Tab, href: &str, name: &str| {
        html! { a href=(href) class=[(t == tab).then_some("active")] { (name) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "cmdgate · " (title) }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body data-page=(title.to_lowercase())
                 data-revision=[seen.revision] data-seen-audit=[seen.audit] {
                header.top {
                    span.brand { "cmdgate" }
                    nav {
                        (nav(Tab::Pending, "/pending", "Pending"))
                        (nav(Tab::History, "/history", "History"))
                        (nav(Tab::Profile, "/profile", "Profile"))
                    }
                    span.live id="live" { }
                }
                main { (body) }
                div id="toast" role="status" aria-live="polite" {}
            }
        }
    }
}

/// A refusal or an error, as a whole page.
pub fn message_page(status: u16, message: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "cmdgate console" }
                link rel="stylesheet" href="/static/console.css";
            }
            body {
                header.top { span.brand { "cmdgate" } }
                main { section.refused { h1 { (status) } p { (message) } } }
            }
        }
    }
}

pub fn time(ms: i64) -> String {
    // UTC, to the second: the audit's clock, independent of the browser's zone.
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The exact-command key a remembered rule would hold (the engine's `canonical_key`).
fn rule_key(command: &str) -> Option<String> {
    match shell::analyze(command, &Limits::default()) {
        Analysis::Parsed(script) => Some(canonical_key(&script)),
        Analysis::Unanalyzable(_) => None,
    }
}

fn badge(decision: Option<&str>) -> Markup {
    let d = decision.unwrap_or("—");
    html! { span class={ "badge " (d) } { (d) } }
}

/// One mirror-run summary line from an audit row's `sandbox` JSON.
fn mirror(sandbox: Option<&str>) -> Markup {
    let Some(raw) = sandbox else {
        return html! { span.muted { "no mirror run" } };
    };
    let v: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let verdict = v.get("verdict").map(|x| match x {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    html! {
        @if let Some(verdict) = verdict { span { (verdict) } " · " }
        details.inline { summary { "effects" } pre.json { (pretty(raw)) } }
    }
}

fn pretty(raw: &str) -> String {
    serde_json::from_str::<Value>(raw)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| raw.to_owned())
}

// ----- Pending ----------------------------------------------------------------------------------

pub fn pending_page(cards: &[(PendingInfo, Option<AuditRow>)], now_ms: i64) -> Markup {
    let body = html! {
        section.intro {
            h1 { "Pending approvals" }
            p.muted {
                "Requests held for a person. An unanswered request is denied at its deadline. "
                "New requests appear here without a reload."
            }
        }
        div id="cards" {
            @for (info, ask) in cards { (card(info, ask.as_ref(), now_ms)) }
        }
        p.empty id="empty" hidden[!cards.is_empty()] { "Nothing is waiting for an answer." }
    };
    layout("Pending", Tab::Pending, Seen::default(), body)
}

/// One held request.
pub fn card(info: &PendingInfo, ask: Option<&AuditRow>, now_ms: i64) -> Markup {
    let e = ask.map(|a| &a.entry);
    let left = (info.deadline_ms - now_ms).max(0) / 1000;
    let project = info.project.as_deref().unwrap_or("(no project)");
    let command = info.command.as_deref().unwrap_or(&info.tool);
    let revision = e.and_then(|e| e.tiermap_revision);
    html! {
        article.card id={ "card-" (info.id) } data-id=(info.id) data-deadline=(info.deadline_ms) {
            header {
                span.id { "#" (info.id) }
                span.tool { (info.tool) }
                span.tier { "tier " (e.and_then(|e| e.tier).map_or("unknown", |t| t.as_str())) }
                span.deadline { "denied in " span.left { (left) } " s unless answered" }
            }
            pre.command { (command) }
            dl {
                dt { "Project" } dd { code { (project) } }
                dt { "Session" } dd { code { (info.session) } }
                dt { "Rule" } dd { (e.and_then(|e| e.rule.as_deref()).unwrap_or("—")) }
                dt { "Why" } dd { (info.reason) }
                dt { "Mirror run" } dd { (mirror(e.and_then(|e| e.sandbox.as_deref()))) }
                dt { "Reviewer" }
                @if let Some(e) = e.filter(|e| e.source == Some(Source::Reviewer.into())) {
                    // The model reviewer left it to a person (docs/reviewer.md): its words.
                    dd { (e.note.as_deref().or(e.reason.as_deref()).unwrap_or("left it to a person")) }
                } @else {
                    dd.muted { "no reviewer opinion (off, or not asked)" }
                }
            }
            @if info.rememberable {
                details.scope {
                    summary { "What “remember” creates" }
                    p {
                        "A rule for " b { "this exact command" } " in " code { (project) }
                        " (not a pattern; other projects are unaffected), under tier map revision "
                        (revision.map_or("—".to_owned(), |r| r.to_string())) ". Its key:"
                    }
                    pre.key { (info.command.as_deref().and_then(rule_key).unwrap_or_default()) }
                    p.muted {
                        "An approval never overrides tier 3, the circuit breaker or a remembered rejection. "
                        "Profile lists the rule; disable or remove it there."
                    }
                }
            } @else {
                p.muted.scope { "Only an exact Bash command of one project can be remembered: answer it once." }
            }
            label.note {
                span { "Note for the agent (optional)" }
                textarea name="note" rows="2" maxlength="2000" {}
            }
            div.actions {
                button.approve data-act="approve" { "Approve once" }
                button.approve data-act="approve" data-remember="1" disabled[!info.rememberable] { "Approve and remember" }
                button.reject data-act="reject" { "Reject once" }
                button.reject data-act="reject" data-remember="1" disabled[!info.rememberable] { "Reject and remember" }
            }
            p.outcome {}
        }
    }
}

/// What became of a request that left the registry, from the decision rows after its ask.
pub fn ending(info: &PendingInfo, later: &[AuditRow]) -> String {
    let row = later
        .iter()
        .rev()
        .find(|r| r.entry.tool_use_id.as_deref() == Some(info.tool_use_id.as_str()));
    let Some(r) = row else {
        return "No longer waiting: its agent stopped waiting (or the daemon is stopping).".into();
    };
    let e = &r.entry;
    match (e.source, e.verdict()) {
        (Some(AuditSource::Wire(Source::Human)), Some(v)) => format!(
            "Answered: {} by the operator at {}{}{}.",
            if v == Verdict::Allow {
                "approved"
            } else {
                "rejected"
            },
            time(e.at_ms),
            e.rule
                .as_deref()
                .map(|r| format!(", remembered as {r}"))
                .unwrap_or_default(),
            e.note
                .as_deref()
                .map(|n| format!(" — note: {n}"))
                .unwrap_or_default()
        ),
        _ => format!(
            "Expired: denied at {} ({}).",
            time(e.at_ms),
            e.note
                .as_deref()
                .or(e.reason.as_deref())
                .unwrap_or("no answer")
        ),
    }
}

// ----- History ----------------------------------------------------------------------------------

const DECISIONS: &[&str] = &["allow", "ask", "deny"];

fn select(name: &str, options: &[&str], current: Option<&str>, any: &str) -> Markup {
    html! {
        select name=(name) {
            option value="" { (any) }
            @for o in options {
                option value=(o) selected[current == Some(*o)] { (o) }
            }
        }
    }
}

pub fn history_page(rows: &[AuditRow], f: &HistoryFilter, seen: Seen) -> Markup {
    let body = html! {
        section.intro {
            h1 { "History" }
            p.muted { "The audit, newest first. Open a row for its evidence; remember a past decision as a rule." }
        }
        form.filters method="get" action="/history" {
            input name="project" placeholder="project" value=[f.project.as_deref()];
            input name="session" placeholder="session" value=[f.session.as_deref()];
            (select("decision", DECISIONS, f.decision.as_deref(), "any decision"))
            (select("source", &AuditSource::all().map(AuditSource::as_str).collect::<Vec<_>>(), f.source.as_deref(), "any source"))
            input name="text" placeholder="command contains" value=[f.text.as_deref()];
            (select("kind", &["all"], f.kind.as_deref(), "decisions"))
            button type="submit" { "Filter" }
            a.clear href="/history" { "clear" }
        }
        @if rows.is_empty() {
            p.empty { "No audit rows match." }
        }
        div.rows {
            @for r in rows { (history_row(r)) }
        }
    };
    layout("History", Tab::History, seen, body)
}

fn history_row(r: &AuditRow) -> Markup {
    let e = &r.entry;
    html! {
        details.row id={ "row-" (r.id) } data-id=(r.id) {
            summary {
                span.id { "#" (r.id) }
                span.when { (time(e.at_ms)) }
                (badge(e.decision.as_ref().map(|d| d.text()).as_deref()))
                span.source { (e.source.map_or(e.kind.as_str(), AuditSource::as_str)) }
                code.cmd { (e.command.as_deref().or(e.tool.as_deref()).unwrap_or("")) }
                span.rule { (e.rule.as_deref().unwrap_or("")) }
            }
            div.evidence { span.muted { "loading…" } }
        }
    }
}

/// A History row's evidence (loaded when the row is opened).
pub fn evidence(row: &AuditRow, outcomes: &[AuditRow]) -> Markup {
    let e = &row.entry;
    let field = |name: &str, v: Option<String>| {
        html! { @if let Some(v) = v { dt { (name) } dd { (v) } } }
    };
    let rememberable = e.kind == Kind::Decision
        && e.tool.as_deref() == Some("Bash")
        && e.project.is_some()
        && e.command.as_deref().and_then(rule_key).is_some();
    html! {
        dl {
            (field("Kind", Some(e.kind.to_string())))
            (field("Project", e.project.clone()))
            (field("Working dir", e.cwd.clone()))
            (field("Session", e.session.clone()))
            (field("Tool use", e.tool_use_id.clone()))
            (field("Tier", e.tier.map(|t| t.to_string())))
            (field("Decided by", e.rule.clone().or_else(|| e.source.map(|s| s.as_str().to_owned()))))
            (field("Reason", e.reason.clone()))
            (field("Note", e.note.clone()))
            (field("Tier map revision", e.tiermap_revision.map(|r| r.to_string())))
            (field("Permission mode", e.permission_mode.clone()))
            (field("Latency", e.latency_us.map(|u| format!("{:.1} ms", u as f64 / 1000.0))))
        }
        @if let Some(parts) = e.parts.as_deref() { details.inline { summary { "parsed parts" } pre.json { (pretty(parts)) } } }
        @if e.sandbox.is_some() { p { "Mirror run: " (mirror(e.sandbox.as_deref())) } }
        @if let Some(input) = e.tool_input.as_deref() { details.inline { summary { "tool input" } pre.json { (pretty(input)) } } }
        @for o in outcomes {
            p.outcome-row {
                "Outcome #" (o.id) ": "
                @match o.entry.success { Some(true) => "succeeded", Some(false) => "failed", None => "reported" }
                @if let Some(code) = o.entry.exit_code { " (exit " (code) ")" }
                @if let Some(err) = o.entry.error.as_deref() { " — " (err) }
            }
        }
        p.hash.muted { "chain " code { (row.hash.get(..16).unwrap_or(&row.hash)) } }
        @if rememberable {
            div.remember data-id=(row.id) {
                label.note { span { "Remember this decision (exact command, this project) — note:" }
                    input name="note" maxlength="2000"; }
                div.actions {
                    button.approve data-kind="approve" { "Remember: approve" }
                    button.reject data-kind="reject" { "Remember: reject" }
                    button data-kind="always_ask" { "Remember: always ask" }
                }
                p.outcome {}
            }
        }
    }
}

// ----- Profile ----------------------------------------------------------------------------------

pub fn profile_page(revision: i64, rules: &[StoredRule], status: &Value, seen: Seen) -> Markup {
    let (learned, operator): (Vec<&StoredRule>, Vec<&StoredRule>) =
        rules.iter().partition(|r| r.kind == "learned");
    let body = html! {
        section.intro {
            h1 { "Profile" }
            p.muted {
                "What cmdgate remembers, its breakers and the tier maps in force. Rules revision "
                b id="revision" { (revision) } ": an edit made against an older revision is refused and says what changed."
            }
        }
        h2 { "Remembered decisions" }
        (rules_table(&operator))
        h2 { "Learned entries" }
        p.muted { "Commands promoted after clean mirror runs. Only system binaries working on project paths (mkdir, touch) then skip the mirror; everything else learned still runs in it." }
        (rules_table(&learned))
        h2 { "Circuit breakers" }
        (breakers(&status["breakers"]))
        h2 { "Tier maps" }
        (tiermaps(&status["projects"]))
    };
    layout("Profile", Tab::Profile, seen, body)
}

fn rules_table(rules: &[&StoredRule]) -> Markup {
    html! {
        @if rules.is_empty() { p.empty { "None." } }
        @for r in rules {
            details.rule id={ "rule-" (r.id) } data-id=(r.id) {
                summary {
                    span.id { "rule #" (r.id) }
                    span class={ "badge " (r.kind) } { (r.kind.replace('_', " ")) }
                    span class={ "state " @if r.enabled { "on" } @else { "off" } } {
                        @if r.enabled { "enabled" } @else { "disabled" }
                    }
                    code.cmd { (r.key) }
                    span.proj { (r.project) }
                }
                div.rule-body {
                    dl {
                        dt { "Note" } dd { (r.note.as_deref().unwrap_or("—")) }
                        dt { "Created" } dd { (time(r.created_ms)) " by " (r.created_by) }
                        dt { "From audit rows" } dd {
                            @if r.provenance.is_empty() { "—" }
                            @for (i, a) in r.provenance.iter().enumerate() {
                                @if i > 0 { ", " } "#" (a)
                            }
                        }
                    }
                    div.actions {
                        @if r.enabled { button data-act="disable" { "Disable" } }
                        @else { button data-act="enable" { "Enable" } }
                        button.reject data-act="remove" { "Remove" }
                        @if r.kind == "approve" || r.kind == "learned" {
                            button data-act="always-ask" { "Always ask instead" }
                        }
                    }
                    p.outcome {}
                    div.detail { span.muted { "loading…" } }
                }
            }
        }
    }
}

/// A rule's provenance, history and the later requests it matched (loaded when opened).
pub fn rule_detail(v: &Value) -> Markup {
    let rows =
        |k: &str| -> Vec<AuditRow> { serde_json::from_value(v[k].clone()).unwrap_or_default() };
    let list = |title: &str, rows: Vec<AuditRow>| {
        html! {
            h4 { (title) " (" (rows.len()) ")" }
            @if rows.is_empty() { p.muted { "none" } }
            ul.mini {
                @for r in rows.iter().take(20) {
                    li {
                        a href={ "/history?text=" (urlencode(r.entry.command.as_deref().unwrap_or(""))) } { "#" (r.id) }
                        " " (time(r.entry.at_ms)) " " (badge(r.entry.decision.as_ref().map(|d| d.text()).as_deref())) " "
                        code { (r.entry.command.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    };
    html! {
        (list("Came from", rows("sources")))
        (list("History", rows("history")))
        (list("Later requests it matched", rows("matched")))
    }
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn breakers(b: &Value) -> Markup {
    let one = |v: &Value| {
        let scope = v["scope"].as_str().unwrap_or("?").to_owned();
        // `policy::breaker::State` serialises as `{"state": "open", ...}`.
        let state = match &v["state"] {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .get("state")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| o.keys().next().cloned())
                .unwrap_or_default(),
            other => other.to_string(),
        };
        html! {
            tr {
                td { code { (scope) } }
                td { span class={ "state " (state.to_lowercase()) } { (state) } }
                td { (v["score"]) " / " (v["threshold"]) }
                td { button data-scope=(scope) { "Reset" } }
            }
        }
    };
    html! {
        table.breakers {
            thead { tr { th { "Scope" } th { "State" } th { "Score" } th {} } }
            tbody {
                (one(&b["global"]))
                @for s in b["sessions"].as_array().into_iter().flatten() { (one(s)) }
            }
        }
        p.outcome id="breaker-outcome" {}
    }
}

fn tiermaps(p: &Value) -> Markup {
    html! {
        @if p.as_array().is_none_or(|a| a.is_empty()) {
            p.empty { "No project has asked for a decision since the daemon started." }
        }
        table.maps {
            @for m in p.as_array().into_iter().flatten() {
                tr {
                    td { code { (m["project"].as_str().unwrap_or("?")) } }
                    td.nowrap { "revision " (m["revision"].as_u64().map_or("—".into(), |r| r.to_string())) }
                    td { (m["active"].as_str().unwrap_or("")) }
                    td.problem { (m["problem"].as_str().unwrap_or("")) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(1_764_547_200_000 + 3_661_000), "2025-12-01 01:01:01");
    }

    #[test]
    fn values_are_escaped() {
        let info = PendingInfo {
            id: 1,
            at_ms: 0,
            deadline_ms: 0,
            session: "<s>".into(),
            tool_use_id: "t".into(),
            project: Some("/p".into()),
            cwd: None,
            tool: "Bash".into(),
            command: Some("echo '<script>alert(1)</script>'".into()),
            reason: "\"why\"".into(),
            rememberable: true,
        };
        let html = card(&info, None, 0).into_string();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;s&gt;"), "{html}");
    }
}
