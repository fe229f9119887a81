//! The optional model reviewer (off by default): a model answers, in a person's seat, what the
//! deterministic policy left to a person ("ask") — never anything the policy denies, never an
//! always-ask rule, never an integrity failure. Its evidence is bounded, redacted and quoted
//! (`evidence`), its reply must keep a strict contract (`contract`), and every failure — an
//! unreachable provider, a timeout, a broken contract — leaves the decision to the person, who is
//! told why. An `allow-once` allows that one call and creates no rule, grant or learning evidence.
//!
//! Configuration is the operator's `[reviewer]` table (docs/reviewer.md). The API key is read from
//! the daemon's own environment (`api_key_env` names the variable) when the daemon starts, kept in
//! memory, and sent only in the provider's auth header: never to config, store, audit or log.

pub mod contract;
pub mod evidence;
mod gate;
pub mod provider;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmdgate_policy::wire::ReviewerMode;
use serde::{Deserialize, Serialize};

pub use contract::{Answer, ReviewDecision};
pub use evidence::{CallEvidence, Prompt, TurnEvidence};
pub use provider::{ProviderKind, Usage};

/// The fixed system prompt, shipped in the repository and reviewed like code.
pub const SYSTEM_PROMPT: &str = include_str!("system_prompt.md");

/// Longest `timeout_ms` accepted: the answer must reach the hook before its 45 s deadline.
pub const MAX_TIMEOUT_MS: u64 = 40_000;
/// Sessions whose per-turn evidence is kept (the oldest is dropped beyond this).
const MAX_CACHED_TURNS: usize = 256;

/// `[reviewer]` in config.toml.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReviewerConfig {
    /// Off by default. A session can turn a configured reviewer on or off with `CMDGATE_REVIEWER`.
    pub enabled: bool,
    /// `anthropic` (Messages API) or `openai` (chat completions; also Ollama, vLLM, llama.cpp).
    pub provider: ProviderKind,
    /// Default: the provider's public endpoint. `http://` is for local servers.
    pub base_url: Option<String>,
    /// The model name the provider knows.
    pub model: String,
    /// The name of an environment variable of the daemon holding the API key (never the key).
    pub api_key_env: Option<String>,
    /// How long one question may take, connection included; then the person decides.
    pub timeout_ms: u64,
    /// Ask for a streamed (server-sent events) answer.
    pub stream: bool,
    /// The reply's token budget (the contract needs a few dozen).
    pub max_tokens: u32,
}

impl Default for ReviewerConfig {
    fn default() -> Self {
        ReviewerConfig {
            enabled: false,
            provider: ProviderKind::Anthropic,
            base_url: None,
            model: String::new(),
            api_key_env: None,
            timeout_ms: 20_000,
            stream: false,
            max_tokens: 400,
        }
    }
}

impl ReviewerConfig {
    /// The base URL in use.
    pub fn base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or_else(|| self.provider.default_base_url())
    }

    /// Whether the operator configured a provider at all (a session may then turn it on).
    pub fn configured(&self) -> bool {
        !self.model.is_empty()
    }

    /// Every inconsistency (checked with the rest of the config).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.enabled && self.model.trim().is_empty() {
            p.push("reviewer.model must name a model when reviewer.enabled = true".into());
        }
        match url::Url::parse(self.base_url()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                if !u.username().is_empty() || u.password().is_some() {
                    p.push("reviewer.base_url must not carry credentials; use api_key_env".into());
                }
            }
            _ => p.push(format!(
                "reviewer.base_url = {:?} must be an http:// or https:// URL",
                self.base_url()
            )),
        }
        if let Some(name) = &self.api_key_env {
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !ok {
                p.push(format!(
                    "reviewer.api_key_env = {name:?} must be the NAME of an environment variable (A-Z, 0-9, _), never the key"
                ));
            }
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            p.push(format!(
                "reviewer.timeout_ms = {} must be above 0 and at most {MAX_TIMEOUT_MS}",
                self.timeout_ms
            ));
        }
        if !(16..=4096).contains(&self.max_tokens) {
            p.push(format!(
                "reviewer.max_tokens = {} must be between 16 and 4096",
                self.max_tokens
            ));
        }
        p
    }
}

/// The reviewer in `cmdgate status` (the key's variable name and whether it is set; never the key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewerStatus {
    pub enabled: bool,
    /// A provider and model are configured (a session may turn it on).
    pub configured: bool,
    pub provider: String,
    pub base_url: String,
    pub model: String,
    pub api_key_env: Option<String>,
    /// `set`, `missing` or `none configured`.
    pub api_key: String,
    pub timeout_ms: u64,
    pub stream: bool,
    /// Why it cannot answer even when enabled.
    pub problem: Option<String>,
}

/// The API key: in memory only, never printed.
struct Key(String);

/// Why the reviewer left the call to the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferral {
    /// What went wrong, or that the model chose "ask".
    pub why: String,
    /// What the model said, when it said something (bounded).
    pub said: Option<String>,
}

/// One question's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The model's contract-keeping answer, or why there is none. An `Ask` answer is an `Ok`.
    pub answer: Result<Answer, Deferral>,
    pub model: String,
    pub latency: Duration,
    /// The digest of everything the model was sent (system prompt and evidence).
    pub digest: String,
    pub usage: Usage,
}

/// The configured reviewer.
pub struct Reviewer {
    config: ReviewerConfig,
    client: Option<reqwest::Client>,
    key: Option<Key>,
    /// Why it cannot be used even when enabled (missing key, client error).
    problem: Option<String>,
    /// Per session: the prefix built for its newest user turn.
    turns: Mutex<HashMap<String, KeptTurn>>,
}

/// A session's prefix, with what it was built from (the rules as a digest: a few bytes per
/// session, whatever the rules hold).
struct KeptTurn {
    turn_id: String,
    rules: [u8; 32],
    prefix: Arc<String>,
}

/// The SHA-256 of the rules as JSON.
fn rules_digest(rules: &[evidence::SessionRule]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(rules).unwrap_or_default();
    Sha256::digest(json).into()
}

impl Reviewer {
    /// Reads the key from `env` (the daemon's environment) when the config names one.
    pub fn new(config: ReviewerConfig, env: impl Fn(&str) -> Option<String>) -> Reviewer {
        let mut problem = None;
        let key = match &config.api_key_env {
            Some(name) => match env(name).filter(|k| !k.trim().is_empty()) {
                Some(k) => Some(Key(k.trim().to_owned())),
                None => {
                    problem = Some(format!(
                        "the daemon's environment has no {name} (reviewer.api_key_env)"
                    ));
                    None
                }
            },
            None => None,
        };
        let client = if config.configured() {
            match provider::client(Duration::from_millis(config.timeout_ms.min(10_000))) {
                Ok(c) => Some(c),
                Err(e) => {
                    problem.get_or_insert(format!("no HTTP client: {e}"));
                    None
                }
            }
        } else {
            None
        };
        Reviewer {
            config,
            client,
            key,
            problem,
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// A reviewer that is off.
    pub fn off() -> Reviewer {
        Reviewer::new(ReviewerConfig::default(), |_| None)
    }

    pub fn config(&self) -> &ReviewerConfig {
        &self.config
    }

    /// Whether asks of a session with this override go to the reviewer. `off` always wins; `on`
    /// enables only a reviewer the operator configured.
    pub fn enabled_for(&self, mode: Option<ReviewerMode>) -> bool {
        match mode {
            Some(ReviewerMode::Off) => false,
            Some(ReviewerMode::On) => self.config.configured(),
            None => self.config.enabled,
        }
    }

    /// Why an enabled reviewer cannot answer (the person decides, told this).
    pub fn unavailable(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// For `cmdgate status` and `doctor` (names the key's variable, never the key).
    pub fn status(&self) -> ReviewerStatus {
        let c = &self.config;
        ReviewerStatus {
            enabled: c.enabled,
            configured: c.configured(),
            provider: c.provider.as_str().to_owned(),
            base_url: c.base_url().to_owned(),
            model: c.model.clone(),
            api_key_env: c.api_key_env.clone(),
            api_key: match (&c.api_key_env, &self.key) {
                (None, _) => "none configured",
                (Some(_), Some(_)) => "set",
                (Some(_), None) => "missing",
            }
            .to_owned(),
            timeout_ms: c.timeout_ms,
            stream: c.stream,
            problem: self.problem.clone(),
        }
    }

    /// The prefix for `session`'s user turn `turn_id` with `turn`'s evidence: the bytes kept for
    /// this turn as long as the session's rules stay the same, so every call of a turn sends the
    /// same prefix (prompt caching); rebuilt when a new user turn starts or a person decides
    /// something in the session (a note given mid-turn reaches the next question). When two calls
    /// of a turn race with the same rules, the first one kept wins.
    pub fn prefix(&self, session: &str, turn_id: &str, turn: &TurnEvidence) -> Arc<String> {
        let rules = rules_digest(&turn.session_rules);
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kept) = turns.get(session) {
            if kept.turn_id == turn_id && kept.rules == rules {
                return Arc::clone(&kept.prefix);
            }
        }
        if turns.len() >= MAX_CACHED_TURNS && !turns.contains_key(session) {
            turns.clear();
        }
        let rendered = Arc::new(evidence::render_prefix(turn));
        turns.insert(
            session.to_owned(),
            KeptTurn {
                turn_id: turn_id.to_owned(),
                rules,
                prefix: Arc::clone(&rendered),
            },
        );
        rendered
    }

    /// Asks the model, within `budget` (and the configured timeout). A late reply is dropped
    /// unread with its connection.
    pub async fn ask(&self, prompt: &Prompt, budget: Duration) -> Outcome {
        let started = Instant::now();
        let digest = prompt.digest(SYSTEM_PROMPT);
        let model = self.config.model.clone();
        let defer = |why: String, said: Option<String>| Outcome {
            answer: Err(Deferral { why, said }),
            model: model.clone(),
            latency: started.elapsed(),
            digest: digest.clone(),
            usage: Usage::default(),
        };
        if let Some(p) = &self.problem {
            return defer(format!("the reviewer is unavailable: {p}"), None);
        }
        let Some(client) = &self.client else {
            return defer("the reviewer is not configured".into(), None);
        };
        let endpoint = self.config.provider.endpoint(self.config.base_url());
        let call = provider::Call {
            kind: self.config.provider,
            endpoint: &endpoint,
            model: &self.config.model,
            key: self.key.as_ref().map(|k| k.0.as_str()),
            stream: self.config.stream,
            max_tokens: self.config.max_tokens,
            system: SYSTEM_PROMPT,
            prompt,
        };
        let limit = budget.min(Duration::from_millis(self.config.timeout_ms));
        let reply = match tokio::time::timeout(limit, provider::send(client, &call)).await {
            Err(_) => {
                return defer(
                    format!(
                        "the reviewer did not answer within {} ms",
                        limit.as_millis()
                    ),
                    None,
                )
            }
            Ok(Err(e)) => return defer(format!("the reviewer failed: {e}"), None),
            Ok(Ok(r)) => r,
        };
        let said = Some(contract::bounded(&reply.text, 300));
        let answer = contract::parse_reply(&reply.text).map_err(|e| Deferral {
            why: format!("the reviewer's reply broke the contract: {e}"),
            said,
        });
        Outcome {
            answer,
            model: reply.model.unwrap_or(model),
            latency: started.elapsed(),
            digest,
            usage: reply.usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_problems() {
        let d = ReviewerConfig::default();
        assert!(!d.enabled && d.problems().is_empty());
        assert_eq!(d.timeout_ms, 20_000);
        let bad = ReviewerConfig {
            enabled: true,
            base_url: Some("ftp://x".into()),
            api_key_env: Some("sk-ant-123".into()),
            timeout_ms: 0,
            ..ReviewerConfig::default()
        };
        let p = bad.problems().join("\n");
        for needle in [
            "reviewer.model",
            "reviewer.base_url",
            "api_key_env",
            "timeout_ms",
        ] {
            assert!(p.contains(needle), "{needle}: {p}");
        }
    }

    #[test]
    fn sessions_override_within_what_the_operator_configured() {
        let off = Reviewer::off();
        assert!(!off.enabled_for(None));
        assert!(
            !off.enabled_for(Some(ReviewerMode::On)),
            "nothing configured"
        );
        let configured = Reviewer::new(
            ReviewerConfig {
                model: "m".into(),
                ..ReviewerConfig::default()
            },
            |_| None,
        );
        assert!(!configured.enabled_for(None));
        assert!(configured.enabled_for(Some(ReviewerMode::On)));
        let on = Reviewer::new(
            ReviewerConfig {
                enabled: true,
                model: "m".into(),
                api_key_env: Some("K".into()),
                ..ReviewerConfig::default()
            },
            |name| (name == "K").then(|| "secret-value".to_owned()),
        );
        assert!(on.enabled_for(None) && !on.enabled_for(Some(ReviewerMode::Off)));
        let status = serde_json::to_string(&on.status()).unwrap();
        assert!(status.contains("\"api_key\":\"set\"") && !status.contains("secret-value"));
    }

    #[test]
    fn the_prefix_is_kept_for_a_turn_until_a_person_decides() {
        let r = Reviewer::off();
        let turn = |text: &str, rules: &[&str]| {
            let mut t = TurnEvidence::default();
            t.user_turns.turns.push(text.to_owned());
            t.session_rules = rules
                .iter()
                .map(|id| evidence::SessionRule {
                    id: (*id).to_owned(),
                    decision: "approved".into(),
                    command: "git push".into(),
                    note: Some(format!("note of {id}")),
                    agent: None,
                })
                .collect();
            t
        };
        let a = r.prefix("s", "turn1", &turn("one", &[]));
        let b = r.prefix("s", "turn1", &turn("changed", &[]));
        assert!(Arc::ptr_eq(&a, &b), "the first prefix of a turn stays");
        let c = r.prefix("s", "turn1", &turn("one", &["audit #4"]));
        assert!(c.contains("note of audit #4") && !Arc::ptr_eq(&a, &c));
        let d = r.prefix("s", "turn1", &turn("other", &["audit #4"]));
        assert!(Arc::ptr_eq(&c, &d), "kept again while the rules stay");
        let e = r.prefix("s", "turn2", &turn("two", &["audit #4"]));
        assert!(e.contains("two") && !Arc::ptr_eq(&d, &e));
        let other = r.prefix("s2", "turn2", &turn("two", &["audit #4"]));
        assert!(!Arc::ptr_eq(&e, &other), "sessions keep their own");
        assert_eq!(*e, *other);
    }
}
