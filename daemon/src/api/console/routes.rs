//! The console's routes, parsed once from method, path, query and body into a [`Route`] (the
//! handlers never see hyper). Bodies of changes are strict JSON.

use serde::Deserialize;

/// `POST /pending/{id}/approve|reject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    #[serde(default)]
    pub remember: bool,
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST /history/{id}/remember`: a rule from a past decision (the path of `cmdgate rules remember`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RememberBody {
    /// `approve`, `reject` or `always_ask`.
    pub kind: String,
    #[serde(default)]
    pub note: Option<String>,
    /// The rules' revision the page showed.
    pub if_revision: i64,
    /// The newest audit row the page knew: a conflict lists the rule changes after it.
    #[serde(default)]
    pub seen_audit: Option<i64>,
}

/// `POST /rules/{id}/enable|disable|remove|always-ask`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    /// The rules' revision the page showed: the edit applies only if it is still current.
    pub if_revision: i64,
    #[serde(default)]
    pub seen_audit: Option<i64>,
    /// `always-ask` only: kept with the new rule.
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST /breaker/reset`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetBody {
    /// `global`, `session:ID`; none resets every breaker.
    #[serde(default)]
    pub scope: Option<String>,
}

/// What an operator can do to a rule from the Profile page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    Enable,
    Disable,
    Remove,
    /// A new always-ask rule for the same command and project.
    AlwaysAsk,
}

/// History's filters (all optional, exact match except `text`, a substring of the command).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    pub project: Option<String>,
    pub session: Option<String>,
    pub decision: Option<String>,
    pub source: Option<String>,
    pub text: Option<String>,
    /// `decision` unless `all` is asked for.
    pub kind: Option<String>,
}

/// One parsed console request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /login?code=C`: the only route without a session.
    Login {
        code: String,
    },
    /// `GET /`: to the Pending page.
    Root,
    Pending,
    /// `GET /events?known=1,2`: server-sent events for the Pending page.
    Events {
        known: Vec<i64>,
    },
    Answer {
        id: i64,
        approve: bool,
        body: AnswerBody,
    },
    History(HistoryFilter),
    /// `GET /history/{id}/evidence`: the expandable part of a History row (HTML fragment).
    Evidence(i64),
    Remember {
        id: i64,
        body: RememberBody,
    },
    Profile,
    /// `GET /rules/{id}/detail`: where a rule came from and what it matched (HTML fragment).
    RuleDetail(i64),
    RuleEdit {
        id: i64,
        action: RuleAction,
        body: EditBody,
    },
    ResetBreaker(ResetBody),
    /// `GET /static/console.css|console.js`.
    Asset(Asset),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    Css,
    Js,
}

/// A request that does not parse: its status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    pub status: u16,
    pub message: String,
}

fn bad(status: u16, message: impl Into<String>) -> BadRequest {
    BadRequest {
        status,
        message: message.into(),
    }
}

fn json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, BadRequest> {
    serde_json::from_slice(body).map_err(|e| bad(400, format!("bad JSON body: {e}")))
}

fn id(s: &str) -> Result<i64, BadRequest> {
    s.parse()
        .map_err(|_| bad(400, format!("{s:?} is not an id")))
}

fn query_pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn nonempty(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl Route {
    /// Whether the route changes state: such requests get the CSRF checks.
    pub fn state_changing(&self) -> bool {
        matches!(
            self,
            Route::Answer { .. }
                | Route::Remember { .. }
                | Route::RuleEdit { .. }
                | Route::ResetBreaker(_)
        )
    }

    pub fn parse(method: &str, path: &str, query: &str, body: &[u8]) -> Result<Route, BadRequest> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let pairs = || query_pairs(query);
        match (method, segments.as_slice()) {
            ("GET", ["login"]) => Ok(Route::Login {
                code: nonempty(&pairs(), "code").unwrap_or_default(),
            }),
            ("GET", [""]) => Ok(Route::Root),
            ("GET", ["pending"]) => Ok(Route::Pending),
            ("GET", ["events"]) => {
                let known = nonempty(&pairs(), "known").unwrap_or_default();
                let known = known
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(id)
                    .collect::<Result<_, _>>()?;
                Ok(Route::Events { known })
            }
            ("POST", ["pending", n, action @ ("approve" | "reject")]) => Ok(Route::Answer {
                id: id(n)?,
                approve: *action == "approve",
                body: json(body)?,
            }),
            ("GET", ["history"]) => {
                let p = pairs();
                Ok(Route::History(HistoryFilter {
                    project: nonempty(&p, "project"),
                    session: nonempty(&p, "session"),
                    decision: nonempty(&p, "decision"),
                    source: nonempty(&p, "source"),
                    text: nonempty(&p, "text"),
                    kind: nonempty(&p, "kind"),
                }))
            }
            ("GET", ["history", n, "evidence"]) => Ok(Route::Evidence(id(n)?)),
            ("POST", ["history", n, "remember"]) => Ok(Route::Remember {
                id: id(n)?,
                body: json(body)?,
            }),
            ("GET", ["profile"]) => Ok(Route::Profile),
            ("GET", ["rules", n, "detail"]) => Ok(Route::RuleDetail(id(n)?)),
            ("POST", ["rules", n, action]) => {
                let action = match *action {
                    "enable" => RuleAction::Enable,
                    "disable" => RuleAction::Disable,
                    "remove" => RuleAction::Remove,
                    "always-ask" => RuleAction::AlwaysAsk,
                    other => return Err(bad(404, format!("no rule action {other:?}"))),
                };
                Ok(Route::RuleEdit {
                    id: id(n)?,
                    action,
                    body: json(body)?,
                })
            }
            ("POST", ["breaker", "reset"]) => Ok(Route::ResetBreaker(if body.is_empty() {
                ResetBody::default()
            } else {
                json(body)?
            })),
            ("GET", ["static", "console.css"]) => Ok(Route::Asset(Asset::Css)),
            ("GET", ["static", "console.js"]) => Ok(Route::Asset(Asset::Js)),
            (_, _) => Err(bad(404, format!("no page {method} {path}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path: &str, query: &str, body: &str) -> Result<Route, BadRequest> {
        Route::parse(method, path, query, body.as_bytes())
    }

    #[test]
    fn routes() {
        assert_eq!(
            parse("GET", "/login", "code=ab%20c", ""),
            Ok(Route::Login {
                code: "ab c".into()
            })
        );
        assert_eq!(
            parse("GET", "/events", "known=3,4", ""),
            Ok(Route::Events { known: vec![3, 4] })
        );
        assert_eq!(
            parse(
                "POST",
                "/pending/7/approve",
                "",
                r#"{"remember":true,"note":"ok"}"#
            ),
            Ok(Route::Answer {
                id: 7,
                approve: true,
                body: AnswerBody {
                    remember: true,
                    note: Some("ok".into())
                }
            })
        );
        let h = parse(
            "GET",
            "/history",
            "project=%2Fp&text=git+push&decision=",
            "",
        )
        .unwrap();
        assert_eq!(
            h,
            Route::History(HistoryFilter {
                project: Some("/p".into()),
                text: Some("git push".into()),
                ..HistoryFilter::default()
            })
        );
        assert!(!h.state_changing());
        let edit = parse("POST", "/rules/3/disable", "", r#"{"if_revision":4}"#).unwrap();
        assert!(edit.state_changing());
    }

    #[test]
    fn changes_are_posts_with_strict_bodies() {
        // A GET never changes anything.
        assert_eq!(
            parse("GET", "/pending/7/approve", "", "")
                .unwrap_err()
                .status,
            404
        );
        // An edit without the revision it was made against is refused, not applied unchecked.
        assert_eq!(
            parse("POST", "/rules/3/disable", "", "{}")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            parse("POST", "/pending/7/reject", "", r#"{"remeber":true}"#)
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            parse("POST", "/pending/7/reject", "", "")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            parse("POST", "/rules/3/explode", "", "{}")
                .unwrap_err()
                .status,
            404
        );
    }
}
