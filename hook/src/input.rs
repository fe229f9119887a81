//! Raw stdin → validated [`HookCall`]: bounded read, strict JSON (no duplicate keys, bounded depth,
//! valid UTF-8), required fields checked, unknown fields ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use cmdgate_policy::wire::{AgentRef, HookEvent};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Largest stdin accepted. Claude Code sends one JSON object with the tool input (a Write of a large
/// file is the biggest); past this the call is denied rather than read into memory without bound.
pub const MAX_STDIN_BYTES: usize = 4 * 1024 * 1024;

/// Why stdin could not become a [`HookCall`]. Each one ends in the fail-closed answer.
#[derive(Debug)]
pub enum InputError {
    /// Reading stdin failed.
    Read(std::io::Error),
    /// More than [`MAX_STDIN_BYTES`].
    TooLarge,
    /// Empty stdin.
    Empty,
    /// Not JSON, not UTF-8, duplicate keys, nesting too deep, trailing data.
    Json(serde_json::Error),
    /// JSON, but not the shape Claude Code sends (missing or mistyped field, unknown event).
    Shape(String),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Read(e) => write!(f, "failed to read the hook input: {e}"),
            InputError::TooLarge => write!(f, "hook input is larger than {MAX_STDIN_BYTES} bytes"),
            InputError::Empty => write!(f, "hook input is empty"),
            InputError::Json(e) => write!(f, "hook input is not valid JSON: {e}"),
            InputError::Shape(why) => write!(f, "hook input is malformed: {why}"),
        }
    }
}

/// Reads at most [`MAX_STDIN_BYTES`] (+1 to detect overflow) from `r`. A writer that never closes
/// its end is cut off by the hook's deadline, not by this function.
pub fn read_bounded(mut r: impl Read) -> Result<Vec<u8>, InputError> {
    let mut buf = Vec::with_capacity(8 * 1024);
    (&mut r)
        .take(MAX_STDIN_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(InputError::Read)?;
    if buf.len() > MAX_STDIN_BYTES {
        return Err(InputError::TooLarge);
    }
    if buf.iter().all(u8::is_ascii_whitespace) {
        return Err(InputError::Empty);
    }
    Ok(buf)
}

/// A JSON value parsed with duplicate object keys refused at every depth. Claude Code (JavaScript)
/// keeps the last of duplicate keys; a reader that kept the first would judge a different command
/// than the one that runs, so any duplicate is bad input.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict::deserialize(d).map(|s| s.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// Parses bytes as one strict JSON value (serde_json's own recursion limit, 128, bounds nesting).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, InputError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Strict(v) = Strict::deserialize(&mut de).map_err(InputError::Json)?;
    de.end().map_err(InputError::Json)?;
    Ok(v)
}

/// Best effort for the fail-closed path: which event was this, if the input says so at all? Used only
/// to choose the shape of the fail-closed answer (a Post event gets no output), never to allow.
pub fn sniff_event(bytes: &[u8]) -> Option<HookEvent> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    HookEvent::from_name(v.get("hook_event_name")?.as_str()?)
}

/// What a PostToolUse/PostToolUseFailure adds.
#[derive(Debug, Clone, PartialEq)]
pub struct PostInfo {
    /// The tool's response (PostToolUse): for Bash `stdout`, `stderr`, `interrupted`, ...
    pub tool_response: Option<Value>,
    /// PostToolUseFailure's `error` text.
    pub error: Option<String>,
    /// PostToolUseFailure's `is_interrupt`.
    pub is_interrupt: Option<bool>,
    /// Claude Code's `duration_ms`.
    pub duration_ms: Option<u64>,
}

/// One validated hook invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct HookCall {
    pub event: HookEvent,
    pub agent: AgentRef,
    pub tool_use_id: String,
    /// Absolute working directory of the agent.
    pub cwd: String,
    pub tool_name: String,
    /// Always a JSON object.
    pub tool_input: Value,
    /// Present for the Post events.
    pub post: Option<PostInfo>,
    /// Claude Code's transcript of the session (read for the model reviewer on routed calls).
    pub transcript_path: Option<String>,
}

fn take_string(obj: &mut BTreeMap<String, Value>, key: &str) -> Result<String, InputError> {
    match obj.remove(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(InputError::Shape(format!("`{key}` is empty"))),
        Some(_) => Err(InputError::Shape(format!("`{key}` is not a string"))),
        None => Err(InputError::Shape(format!("`{key}` is missing"))),
    }
}

fn take_opt_string(
    obj: &mut BTreeMap<String, Value>,
    key: &str,
) -> Result<Option<String>, InputError> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(InputError::Shape(format!("`{key}` is not a string"))),
    }
}

/// Validates Claude Code's hook input. Required: `hook_event_name` (one of the three events cmdgate
/// is registered for), `session_id`, `cwd` (absolute), `tool_name`, `tool_input` (an object),
/// `tool_use_id`. Optional and type-checked when present: `permission_mode`, `agent_id`, `agent_type`,
/// and for Post events `tool_response`, `error`, `is_interrupt`, `duration_ms`. Anything else is ignored.
pub fn parse_call(bytes: &[u8]) -> Result<HookCall, InputError> {
    let Value::Object(map) = parse_strict(bytes)? else {
        return Err(InputError::Shape("not a JSON object".into()));
    };
    let mut obj: BTreeMap<String, Value> = map.into_iter().collect();
    let event_name = take_string(&mut obj, "hook_event_name")?;
    let event = HookEvent::from_name(&event_name)
        .ok_or_else(|| InputError::Shape(format!("unsupported hook event {event_name:?}")))?;
    let session_id = take_string(&mut obj, "session_id")?;
    let cwd = take_string(&mut obj, "cwd")?;
    if !cwd.starts_with('/') {
        return Err(InputError::Shape(format!("`cwd` is not absolute: {cwd:?}")));
    }
    let tool_name = take_string(&mut obj, "tool_name")?;
    let tool_use_id = take_string(&mut obj, "tool_use_id")?;
    let tool_input = match obj.remove("tool_input") {
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(InputError::Shape("`tool_input` is not an object".into())),
        None => return Err(InputError::Shape("`tool_input` is missing".into())),
    };
    let agent = AgentRef {
        session_id,
        agent_id: take_opt_string(&mut obj, "agent_id")?,
        agent_type: take_opt_string(&mut obj, "agent_type")?,
        permission_mode: take_opt_string(&mut obj, "permission_mode")?,
    };
    let post = match event {
        HookEvent::PreToolUse => None,
        HookEvent::PostToolUse | HookEvent::PostToolUseFailure => {
            let duration_ms = match obj.remove("duration_ms") {
                None | Some(Value::Null) => None,
                Some(Value::Number(n)) => n.as_u64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.is_finite() && *f >= 0.0)
                        .map(|f| f as u64)
                }),
                Some(_) => return Err(InputError::Shape("`duration_ms` is not a number".into())),
            };
            let error = match obj.remove("error") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s),
                Some(other) => Some(other.to_string()),
            };
            let is_interrupt = match obj.remove("is_interrupt") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(b)) => Some(b),
                Some(_) => return Err(InputError::Shape("`is_interrupt` is not a boolean".into())),
            };
            Some(PostInfo {
                tool_response: obj.remove("tool_response"),
                error,
                is_interrupt,
                duration_ms,
            })
        }
    };
    let transcript_path = take_opt_string(&mut obj, "transcript_path")?;
    Ok(HookCall {
        event,
        agent,
        tool_use_id,
        cwd,
        tool_name,
        tool_input,
        post,
        transcript_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(extra: &str) -> String {
        format!(
            r#"{{"session_id":"s","transcript_path":"/t","cwd":"/w","permission_mode":"default",
                "hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{{"command":"ls"}},
                "tool_use_id":"toolu_1"{extra}}}"#
        )
    }

    #[test]
    fn accepts_claude_code_input_and_ignores_unknown_fields() {
        let call = parse_call(pre(r#","prompt_id":"p","effort":"high","new":{"x":1}"#).as_bytes())
            .unwrap();
        assert_eq!(call.event, HookEvent::PreToolUse);
        assert_eq!(call.tool_input["command"], "ls");
        assert_eq!(call.agent.permission_mode.as_deref(), Some("default"));
        assert!(call.post.is_none());
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth() {
        assert!(matches!(
            parse_strict(br#"{"a":1,"a":2}"#),
            Err(InputError::Json(_))
        ));
        let nested = pre("").replace(
            r#"{"command":"ls"}"#,
            r#"{"command":"ls","command":"rm -rf /"}"#,
        );
        assert!(matches!(
            parse_call(nested.as_bytes()),
            Err(InputError::Json(_))
        ));
    }

    #[test]
    fn refuses_deep_nesting_and_bad_utf8() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse_strict(deep.as_bytes()),
            Err(InputError::Json(_))
        ));
        assert!(matches!(
            parse_strict(b"\"\xff\""),
            Err(InputError::Json(_))
        ));
    }

    #[test]
    fn missing_or_mistyped_fields_are_shape_errors() {
        for (from, to) in [
            (r#""tool_use_id":"toolu_1""#, r#""x":1"#),
            (r#""cwd":"/w""#, r#""cwd":"w""#),
            (r#""tool_input":{"command":"ls"}"#, r#""tool_input":"ls""#),
            (
                r#""hook_event_name":"PreToolUse""#,
                r#""hook_event_name":"Stop""#,
            ),
            (r#""session_id":"s""#, r#""session_id":3"#),
        ] {
            let text = pre("").replace(from, to);
            assert!(
                matches!(parse_call(text.as_bytes()), Err(InputError::Shape(_))),
                "{to}"
            );
        }
    }

    #[test]
    fn bounded_read() {
        assert!(matches!(read_bounded(&b"  \n"[..]), Err(InputError::Empty)));
        let big = vec![b' '; MAX_STDIN_BYTES + 10];
        assert!(matches!(read_bounded(&big[..]), Err(InputError::TooLarge)));
    }

    #[test]
    fn post_fields() {
        let text = pre(r#","error":"Exit code 3","is_interrupt":false,"duration_ms":12"#)
            .replace("PreToolUse", "PostToolUseFailure");
        let call = parse_call(text.as_bytes()).unwrap();
        let post = call.post.unwrap();
        assert_eq!(post.error.as_deref(), Some("Exit code 3"));
        assert_eq!(post.duration_ms, Some(12));
        assert_eq!(
            sniff_event(text.as_bytes()),
            Some(HookEvent::PostToolUseFailure)
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;
        use serde_json::json;

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                ".{0,8}".prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 32, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    proptest::collection::btree_map("[a-z]{0,4}", inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_call(&bytes);
                let _ = sniff_event(&bytes);
            }

            #[test]
            fn strict_reader_agrees_with_serde_json_when_keys_are_unique(v in arb_json()) {
                let text = serde_json::to_vec(&v).unwrap();
                prop_assert_eq!(parse_strict(&text).unwrap(), v);
            }

            #[test]
            fn any_command_round_trips(command in ".{0,200}", session in "[a-z0-9-]{1,20}") {
                let input = json!({
                    "session_id": session, "cwd": "/w", "hook_event_name": "PreToolUse",
                    "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "t",
                });
                let call = parse_call(&serde_json::to_vec(&input).unwrap()).unwrap();
                prop_assert_eq!(call.tool_input["command"].as_str(), Some(command.as_str()));
            }
        }
    }
}
