//! A fake model provider for cmdgate's reviewer, speaking both real wire formats: Anthropic's
//! Messages API (`POST /v1/messages`) and OpenAI's chat completions (`POST /v1/chat/completions`),
//! each as one JSON body or as a server-sent event stream, as the request's `stream` asks.
//!
//! A test gives it a function from the request to a [`Reply`]. It records every request, counts
//! tokens (one per 4 bytes of text, rounded up: the fakes' counting that docs/reviewer.md quotes),
//! and checks each request against forbidden strings (a catastrophic command, a tier-3 command, a
//! secret value): a request carrying one is a violation the test asserts never happens.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

/// What the fake answers.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A contract reply `{"decision": …, "reason": …}`.
    Decision(&'static str, String),
    /// This exact reply text.
    Text(String),
    /// An HTTP error status with a provider-shaped error body.
    Status(u16),
    /// Wait, then answer (a reply after the reviewer's timeout).
    Late(Duration, Box<Reply>),
}

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The system prompt and every user text, joined: what the model read.
    pub text: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Script = dyn Fn(&Received) -> Reply + Send + Sync;

#[derive(Default)]
struct Log {
    received: Vec<Received>,
    violations: Vec<String>,
}

/// The running fake (stops with the test process).
pub struct FakeReviewer {
    pub port: u16,
    log: Arc<Mutex<Log>>,
}

impl FakeReviewer {
    /// Listens on 127.0.0.1; `forbidden` strings must never reach it.
    pub fn start(
        script: impl Fn(&Received) -> Reply + Send + Sync + 'static,
        forbidden: Vec<String>,
    ) -> FakeReviewer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake reviewer");
        let port = listener.local_addr().expect("addr").port();
        let log = Arc::new(Mutex::new(Log::default()));
        let shared = Arc::clone(&log);
        let script: Arc<Script> = Arc::new(script);
        let forbidden = Arc::new(forbidden);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = Arc::clone(&shared);
                let script = Arc::clone(&script);
                let forbidden = Arc::clone(&forbidden);
                thread::spawn(move || {
                    let _ = serve(stream, &*script, &log, &forbidden);
                });
            }
        });
        FakeReviewer { port, log }
    }

    /// The base URL for `anthropic` (`http://127.0.0.1:PORT`).
    pub fn anthropic_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The base URL for `openai` (`http://127.0.0.1:PORT/v1`).
    pub fn openai_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// Requests that carried a forbidden string (the string, then the request path).
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The fakes' token count of a text.
pub fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// A contract reply text.
pub fn decision_text(decision: &str, reason: &str) -> String {
    json!({"decision": decision, "reason": reason}).to_string()
}

/// Method, path, headers and body of one HTTP/1.1 request.
type RawRequest = (String, String, Vec<(String, String)>, Vec<u8>);

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<RawRequest>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim().to_string());
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok(Some((method, path, headers, body)))
}

/// The system prompt and user texts of either format, joined.
fn model_text(body: &Value) -> String {
    let mut out = Vec::new();
    let mut push = |v: &Value| match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(blocks) => {
            for b in blocks {
                if let Some(t) = b.get("text").and_then(Value::as_str) {
                    out.push(t.to_string());
                }
            }
        }
        _ => {}
    };
    push(&body["system"]);
    for m in body["messages"].as_array().into_iter().flatten() {
        push(&m["content"]);
    }
    out.join("\n")
}

fn serve(
    stream: TcpStream,
    script: &Script,
    log: &Mutex<Log>,
    forbidden: &[String],
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    while let Some((method, path, headers, body)) = read_request(&mut reader)? {
        let anthropic = path.starts_with("/v1/messages");
        let openai = path.starts_with("/v1/chat/completions");
        if method != "POST" || !(anthropic || openai) {
            writer.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        let raw = String::from_utf8_lossy(&body).to_string();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let received = Received {
            path: path.clone(),
            headers,
            text: model_text(&body),
            body: body.clone(),
        };
        {
            let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
            for f in forbidden {
                if raw.contains(f.as_str()) || received.text.contains(f.as_str()) {
                    l.violations.push(format!("{f} (in {path})"));
                }
            }
            l.received.push(received.clone());
        }
        let mut reply = script(&received);
        while let Reply::Late(wait, inner) = reply {
            thread::sleep(wait);
            reply = *inner;
        }
        let stream_it = body["stream"] == true;
        let model = body["model"].as_str().unwrap_or("fake").to_string();
        let prompt_tokens = tokens(&received.text);
        let (status, content_type, payload) = match reply {
            Reply::Status(code) => (
                code,
                "application/json",
                json!({"type": "error", "error": {"type": "api_error", "message": format!("fake status {code}")}})
                    .to_string(),
            ),
            Reply::Decision(d, r) => {
                let text = decision_text(d, &r);
                answer(anthropic, stream_it, &model, &text, prompt_tokens)
            }
            Reply::Text(text) => answer(anthropic, stream_it, &model, &text, prompt_tokens),
            Reply::Late(..) => unreachable!("unwrapped above"),
        };
        let reason = if status == 200 { "OK" } else { "Error" };
        write!(
            writer,
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            payload.len()
        )?;
        writer.write_all(payload.as_bytes())?;
        writer.flush()?;
    }
    Ok(())
}

fn answer(
    anthropic: bool,
    stream: bool,
    model: &str,
    text: &str,
    prompt_tokens: u64,
) -> (u16, &'static str, String) {
    let reply_tokens = tokens(text);
    match (anthropic, stream) {
        (true, false) => (
            200,
            "application/json",
            json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                   "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                   "stop_sequence": null,
                   "usage": {"input_tokens": prompt_tokens, "output_tokens": reply_tokens}})
            .to_string(),
        ),
        (true, true) => {
            // The text in two deltas, as a real stream splits it.
            let mid = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i);
            let events = [
                ("message_start", json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
                    "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": 1}}})),
                ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
                ("ping", json!({"type": "ping"})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": &text[..mid]}})),
                ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": &text[mid..]}})),
                ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
                ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                    "usage": {"output_tokens": reply_tokens}})),
                ("message_stop", json!({"type": "message_stop"})),
            ];
            let sse = events
                .iter()
                .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
                .collect();
            (200, "text/event-stream", sse)
        }
        (false, false) => (
            200,
            "application/json",
            json!({"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": reply_tokens,
                             "total_tokens": prompt_tokens + reply_tokens}})
            .to_string(),
        ),
        (false, true) => {
            let mid = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i);
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            };
            let lines = [
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"content": &text[..mid]}), Value::Null),
                chunk(json!({"content": &text[mid..]}), Value::Null),
                chunk(json!({}), json!("stop")),
                json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model, "choices": [],
                       "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": reply_tokens,
                                 "total_tokens": prompt_tokens + reply_tokens}}),
            ];
            let mut sse: String = lines.iter().map(|l| format!("data: {l}\n\n")).collect();
            sse.push_str("data: [DONE]\n\n");
            (200, "text/event-stream", sse)
        }
    }
}
