//! `cmdgate breaker status | reset`: the operator looks at and closes circuit breakers (the verb
//! denial reasons tell the model about). Through the admin socket; resets are audited by the
//! daemon. `status` reads the `breakers` part of `GET /admin/status`.

use std::process::ExitCode;

use cmdgate_policy::breaker::Transition;

use crate::api::serve;
use crate::api::types::{BreakerReset, BreakersSummary, ResetBreaker, Status};
use crate::cli::client;
use crate::cli::status::name_of;

/// Arguments of `cmdgate breaker`.
#[derive(Debug, clap::Args)]
pub struct BreakerArgs {
    #[command(subcommand)]
    pub command: BreakerCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum BreakerCommand {
    /// Each breaker that is not closed, has a score or made a transition, and the global one:
    /// state, score, when it opened, when it goes half-open, its last transition.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Close breakers: one session's, the global one, one scope (`global`, `session:ID`), or, with
    /// none of these, every breaker.
    Reset {
        /// The agent session's breaker (scope `session:ID`).
        #[arg(long, conflicts_with_all = ["scope", "global"])]
        session: Option<String>,
        /// The global breaker.
        #[arg(long, conflicts_with = "scope")]
        global: bool,
        /// A scope by name: `global` or `session:ID`.
        #[arg(long)]
        scope: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: BreakerArgs) -> anyhow::Result<ExitCode> {
    let (_, paths) = serve::load(None)?;
    match args.command {
        BreakerCommand::Status { json } => {
            let status = client::get::<Status>(&paths.admin_socket, "/admin/status")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status.raw["breakers"])?);
            } else {
                print!("{}", render(&status.value.breakers));
            }
            Ok(ExitCode::SUCCESS)
        }
        BreakerCommand::Reset {
            session,
            global,
            scope,
            json,
        } => {
            let scope = scope_of(session, global, scope);
            let answer = client::call::<_, BreakerReset>(
                &paths.admin_socket,
                "POST",
                "/admin/breaker/reset",
                Some(&ResetBreaker { scope }),
            )?;
            if json {
                println!("{}", answer.raw);
                return Ok(ExitCode::SUCCESS);
            }
            let scopes = answer.value.reset;
            if scopes.is_empty() {
                // Nothing matched a named scope: say so, and fail, so a typo is not mistaken for
                // a reset.
                println!("no breaker matched");
                return Ok(ExitCode::FAILURE);
            }
            println!("reset: {}", scopes.join(", "));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The scope the reset asks for; `None` resets every breaker.
fn scope_of(session: Option<String>, global: bool, scope: Option<String>) -> Option<String> {
    match (session, global, scope) {
        (Some(s), _, _) => Some(format!("session:{s}")),
        (None, true, _) => Some("global".into()),
        (None, false, scope) => scope,
    }
}

/// One block per breaker, for people.
fn render(breakers: &BreakersSummary) -> String {
    let mut out = String::new();
    for b in std::iter::once(&breakers.global).chain(&breakers.sessions) {
        out.push_str(&format!(
            "{:<24} {:<9} score {}/{}\n",
            b.scope,
            name_of(&b.state).replace('_', "-"),
            b.score,
            b.threshold
        ));
        if let Some(at) = b.opened_at_ms {
            out.push_str(&format!("  opened      {}\n", when(at.0)));
            match b.half_open_at_ms {
                Some(h) => out.push_str(&format!("  half-opens  {}\n", when(h.0))),
                None => {
                    out.push_str("  half-opens  never: only `cmdgate breaker reset` closes it\n")
                }
            }
        }
        if let Some(at) = b.half_open_since_ms {
            out.push_str(&format!("  half-open since {}\n", when(at.0)));
        }
        if let Some(t) = &b.last_transition {
            out.push_str(&format!(
                "  last        {} at {}\n",
                transition_name(&t.transition).replace('_', "-"),
                when(t.at_ms.0)
            ));
        }
    }
    out
}

/// A transition's serialized tag (`tripped`, `half_opened`, …).
fn transition_name(t: &Transition) -> String {
    match serde_json::to_value(t) {
        Ok(v) => v["transition"].as_str().unwrap_or("?").to_owned(),
        Err(_) => "?".to_owned(),
    }
}

/// A Unix-millisecond time as UTC, and how far from now.
fn when(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    let rel = if ms >= now {
        format!("in {} s", (ms - now) / 1000)
    } else {
        format!("{} s ago", (now - ms) / 1000)
    };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC ({rel})",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_flags_name_one_scope() {
        assert_eq!(
            scope_of(Some("abc".into()), false, None).as_deref(),
            Some("session:abc")
        );
        assert_eq!(scope_of(None, true, None).as_deref(), Some("global"));
        assert_eq!(
            scope_of(None, false, Some("session:x".into())).as_deref(),
            Some("session:x")
        );
        assert_eq!(scope_of(None, false, None), None);
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(civil(19_782), (2024, 2, 29));
    }

    #[test]
    fn an_open_breaker_says_when_it_half_opens() {
        let text = render(&serde_json::from_value(serde_json::json!({
            "global": {"scope": "global", "state": {"state": "closed"}, "score": 0, "threshold": 50},
            "sessions": [{"scope": "session:s", "session": "s",
                "state": {"state": "open", "since": 1, "score": 3, "half_open_at": 2},
                "score": 3, "threshold": 2, "opened_at_ms": 1000, "half_open_at_ms": 2000,
                "last_transition": {"at_ms": 1000, "transition": {"transition": "tripped", "score": 3}}}]
        })).unwrap());
        assert!(text.contains("session:s"), "{text}");
        assert!(text.contains("open      score 3/2"), "{text}");
        assert!(
            text.contains("half-opens  1970-01-01 00:00:02 UTC"),
            "{text}"
        );
        assert!(
            text.contains("last        tripped at 1970-01-01 00:00:01 UTC"),
            "{text}"
        );
    }
}
