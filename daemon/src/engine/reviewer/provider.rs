//! The two wire formats the reviewer speaks: Anthropic's Messages API and OpenAI's chat completions
//! (which Ollama, vLLM and llama.cpp's server also serve), each streamed (server-sent events) or
//! not. One request per question; the reply text and the token counts come back, nothing else.
//!
//! The API key is sent in its header and nowhere else; errors never quote a request. Redirects are
//! not followed (a key must not travel to another host). The body read is bounded.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::evidence::Prompt;

/// Largest response body read (JSON or the whole event stream).
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Anthropic's API version header.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Which API the provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// `POST {base_url}/v1/messages` (`x-api-key`).
    #[default]
    Anthropic,
    /// `POST {base_url}/chat/completions` (`Authorization: Bearer`); the base URL includes `/v1`.
    Openai,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
        }
    }

    /// The endpoint for a base URL.
    pub fn endpoint(self, base_url: &str) -> String {
        let base = base_url.trim_end_matches('/');
        match self {
            ProviderKind::Anthropic => format!("{base}/v1/messages"),
            ProviderKind::Openai => format!("{base}/chat/completions"),
        }
    }

    /// The documented public endpoint's base URL.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Openai => "https://api.openai.com/v1",
        }
    }
}

/// Tokens as the provider counted them (`None` when it did not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub reply_tokens: Option<u64>,
    /// Prompt tokens served from the provider's prompt cache.
    pub cached_tokens: Option<u64>,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    pub usage: Usage,
    /// The model the provider says answered (else the one asked for).
    pub model: Option<String>,
}

/// Why no reply text came back.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider could not be reached ({0})")]
    Transport(String),
    #[error("the provider answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the provider's answer was over {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("the provider's answer could not be read ({0})")]
    BadBody(String),
    #[error("the provider reported an error: {0}")]
    Reported(String),
}

/// One question to one provider.
pub struct Call<'a> {
    pub kind: ProviderKind,
    pub endpoint: &'a str,
    pub model: &'a str,
    pub key: Option<&'a str>,
    pub stream: bool,
    pub max_tokens: u32,
    pub system: &'a str,
    pub prompt: &'a Prompt,
}

/// The request body for `call` (also what `cmdgate reviewer try --show-request` prints, without the key).
pub fn request_body(call: &Call<'_>) -> Value {
    match call.kind {
        // The system prompt and the turn's prefix are marked for prompt caching: both stay
        // byte-identical across the calls of one user turn.
        ProviderKind::Anthropic => json!({
            "model": call.model,
            "max_tokens": call.max_tokens,
            "stream": call.stream,
            "system": [{"type": "text", "text": call.system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": call.prompt.prefix, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": call.prompt.call},
            ]}],
        }),
        // OpenAI-compatible servers cache a repeated prefix on their own.
        ProviderKind::Openai => {
            let mut body = json!({
                "model": call.model,
                "max_tokens": call.max_tokens,
                "stream": call.stream,
                "messages": [
                    {"role": "system", "content": call.system},
                    {"role": "user", "content": format!("{}{}", call.prompt.prefix, call.prompt.call)},
                ],
            });
            if call.stream {
                body["stream_options"] = json!({"include_usage": true});
            }
            body
        }
    }
}

/// Sends `call` and reads the reply. The caller bounds the time (dropping this future closes the
/// connection: a late reply is never read).
pub async fn send(client: &reqwest::Client, call: &Call<'_>) -> Result<Reply, ProviderError> {
    let body = request_body(call).to_string();
    let mut req = client
        .post(call.endpoint)
        .header("content-type", "application/json")
        .body(body);
    match call.kind {
        ProviderKind::Anthropic => {
            req = req.header("anthropic-version", ANTHROPIC_VERSION);
            if let Some(k) = call.key {
                req = req.header("x-api-key", k);
            }
        }
        ProviderKind::Openai => {
            if let Some(k) = call.key {
                req = req.header("authorization", format!("Bearer {k}"));
            }
        }
    }
    let mut resp = req
        .send()
        .await
        .map_err(|e| ProviderError::Transport(without_url(&e)))?;
    let status = resp.status();
    let mut bytes = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ProviderError::Transport(without_url(&e)))?
    {
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ProviderError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&bytes);
    if !status.is_success() {
        return Err(ProviderError::Status {
            status: status.as_u16(),
            body: super::contract::bounded(&text, 300),
        });
    }
    let streamed = resp_is_sse(&text);
    match (call.kind, streamed) {
        (ProviderKind::Anthropic, false) => anthropic_message(&text),
        (ProviderKind::Anthropic, true) => anthropic_stream(&text),
        (ProviderKind::Openai, false) => openai_completion(&text),
        (ProviderKind::Openai, true) => openai_stream(&text),
    }
}

/// A transport error's text without the URL (the base URL is the operator's, but keep errors short).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "the body broke off"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {detail}")
    }
}

fn resp_is_sse(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("event:") || t.starts_with("data:") || t.starts_with(':')
}

/// The `data:` payloads of a server-sent event stream, in order (comments and other fields skipped).
fn sse_data(text: &str) -> Vec<String> {
    let normalized = text.replace("\r\n", "\n");
    normalized
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

fn parse(text: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(text).map_err(|e| ProviderError::BadBody(e.to_string()))
}

fn tokens(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn reported(v: &Value) -> Option<ProviderError> {
    let e = v.get("error")?;
    let msg = e
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| e.to_string());
    Some(ProviderError::Reported(super::contract::bounded(&msg, 300)))
}

fn anthropic_message(text: &str) -> Result<Reply, ProviderError> {
    let v = parse(text)?;
    if let Some(e) = reported(&v) {
        return Err(e);
    }
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::BadBody("no content".into()))?;
    let text: String = content
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    let usage = &v["usage"];
    Ok(Reply {
        text,
        usage: Usage {
            prompt_tokens: anthropic_prompt_tokens(usage),
            reply_tokens: tokens(usage, "output_tokens"),
            cached_tokens: tokens(usage, "cache_read_input_tokens"),
        },
        model: v["model"].as_str().map(str::to_owned),
    })
}

/// Anthropic counts cached and cache-written prompt tokens apart from `input_tokens`.
fn anthropic_prompt_tokens(usage: &Value) -> Option<u64> {
    let input = tokens(usage, "input_tokens")?;
    Some(
        input
            + tokens(usage, "cache_read_input_tokens").unwrap_or(0)
            + tokens(usage, "cache_creation_input_tokens").unwrap_or(0),
    )
}

fn anthropic_stream(text: &str) -> Result<Reply, ProviderError> {
    let mut out = String::new();
    let mut usage = Usage::default();
    let mut model = None;
    let mut stopped = false;
    for data in sse_data(text) {
        let v = parse(&data)?;
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let m = &v["message"];
                model = m["model"].as_str().map(str::to_owned);
                usage.prompt_tokens = anthropic_prompt_tokens(&m["usage"]);
                usage.cached_tokens = tokens(&m["usage"], "cache_read_input_tokens");
                usage.reply_tokens = tokens(&m["usage"], "output_tokens");
            }
            "content_block_delta" if v["delta"]["type"] == "text_delta" => {
                out.push_str(v["delta"]["text"].as_str().unwrap_or_default());
            }
            "message_delta" => {
                if let Some(n) = tokens(&v["usage"], "output_tokens") {
                    usage.reply_tokens = Some(n);
                }
            }
            "message_stop" => stopped = true,
            "error" => {
                return Err(reported(&v)
                    .unwrap_or_else(|| ProviderError::Reported("an error event".into())))
            }
            _ => {}
        }
    }
    if !stopped {
        return Err(ProviderError::BadBody(
            "the event stream ended before message_stop".into(),
        ));
    }
    Ok(Reply {
        text: out,
        usage,
        model,
    })
}

fn openai_usage(u: &Value) -> Usage {
    Usage {
        prompt_tokens: tokens(u, "prompt_tokens"),
        reply_tokens: tokens(u, "completion_tokens"),
        cached_tokens: u
            .get("prompt_tokens_details")
            .and_then(|d| tokens(d, "cached_tokens")),
    }
}

fn openai_completion(text: &str) -> Result<Reply, ProviderError> {
    let v = parse(text)?;
    if let Some(e) = reported(&v) {
        return Err(e);
    }
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .ok_or_else(|| ProviderError::BadBody("no choices[0].message.content".into()))?;
    Ok(Reply {
        text: content.to_owned(),
        usage: openai_usage(&v["usage"]),
        model: v["model"].as_str().map(str::to_owned),
    })
}

fn openai_stream(text: &str) -> Result<Reply, ProviderError> {
    let mut out = String::new();
    let mut usage = Usage::default();
    let mut model = None;
    let mut done = false;
    for data in sse_data(text) {
        if data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let v = parse(&data)?;
        if let Some(e) = reported(&v) {
            return Err(e);
        }
        if model.is_none() {
            model = v["model"].as_str().map(str::to_owned);
        }
        if let Some(piece) = v["choices"][0]["delta"]["content"].as_str() {
            out.push_str(piece);
        }
        if v["usage"].is_object() {
            usage = openai_usage(&v["usage"]);
        }
    }
    if !done {
        return Err(ProviderError::BadBody(
            "the event stream ended before [DONE]".into(),
        ));
    }
    Ok(Reply {
        text: out,
        usage,
        model,
    })
}

/// A client for the reviewer: no redirects, bounded connect time.
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(connect_timeout)
        .build()
        .map_err(|e| ProviderError::Transport(without_url(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_stream_collects_text_and_usage() {
        let sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"output_tokens\":1}}}\n\n\
                   event: ping\ndata: {\"type\":\"ping\"}\n\n\
                   event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"{\\\"decision\\\":\"}}\n\n\
                   event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\\\"ask\\\"}\"}}\n\n\
                   event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n\
                   event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let r = anthropic_stream(sse).unwrap();
        assert_eq!(r.text, "{\"decision\":\"ask\"}");
        assert_eq!(r.usage.prompt_tokens, Some(100));
        assert_eq!(r.usage.cached_tokens, Some(90));
        assert_eq!(r.usage.reply_tokens, Some(7));
        let cut = &sse[..sse.find("event: message_stop").unwrap()];
        assert!(anthropic_stream(cut).is_err());
    }

    #[test]
    fn openai_stream_collects_text_and_usage() {
        let sse = "data: {\"model\":\"llama\",\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n\
                   data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\r\n\r\n\
                   data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n\
                   data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\r\n\r\n\
                   data: [DONE]\r\n\r\n";
        let r = openai_stream(sse).unwrap();
        assert_eq!(r.text, "hello");
        assert_eq!(r.model.as_deref(), Some("llama"));
        assert_eq!(r.usage.prompt_tokens, Some(5));
        assert!(openai_stream(&sse[..sse.find("data: [DONE]").unwrap()]).is_err());
    }

    #[test]
    fn errors_in_bodies_are_reported() {
        assert!(matches!(
            anthropic_message(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            Err(ProviderError::Reported(m)) if m == "Overloaded"
        ));
        assert!(matches!(
            openai_completion(r#"{"choices":[]}"#),
            Err(ProviderError::BadBody(_))
        ));
    }
}
