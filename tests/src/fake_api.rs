//! A scripted fake of the Anthropic Messages API for driving the real Claude Code CLI: it plays a
//! list of tool calls and records every request (so every `tool_result` the CLI sends back).
//!
//! Facts learned from Claude Code 2.1.332 (recorded by experiment against this fake):
//! - with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` the CLI sends only `POST /v1/messages?beta=true`
//!   (older versions also sent `HEAD /`, answered 200 here); requests are `"stream": true`, model
//!   `claude-opus-5-5` unless `--model` says otherwise, and carry `tools` (12 built-ins, including
//!   Bash, Read, Write, Edit, Glob, Grep);
//! - any model name in the response is accepted; one `tool_use` content block per turn with its input
//!   streamed as a single `input_json_delta` works, and `stop_reason: "tool_use"` makes the CLI run it;
//! - a PreToolUse hook denial comes back as a `tool_result` with `is_error: true` whose content is
//!   `"PreToolUse:Bash hook error: <permissionDecisionReason>"`; a hook's `ask` in `-p` mode is a
//!   denial too, and its tool_result is the bare reason (no prefix); both are listed in the result's
//!   `permission_denials`;
//! - a Bash command exiting non-zero fires PostToolUseFailure (not PostToolUse) with
//!   `error: "Exit code N\n<stderr>"`, `is_interrupt`, `duration_ms`, and its tool_result is that text;
//!   PostToolUse for Bash carries `tool_response: {stdout, stderr, interrupted, isImage,
//!   noOutputExpected}` and `duration_ms`; hook inputs also carry `prompt_id` and `effort` as an object
//!   (`{"level": "medium"}`);
//! - a hook's `allow` makes the CLI run a call its own rules would refuse in `-p` default mode
//!   (`rm` of a workspace file);
//! - a hook that prints only `{"systemMessage": ...}` makes no decision: Claude Code's own rules
//!   apply (in `-p` default mode `rm` of a workspace file is refused with "needs approval"; under
//!   `--permission-mode bypassPermissions` it runs); a PreToolUse-shaped answer printed for a Post
//!   event is ignored without error;
//! - as root, `bypassPermissions` is refused ("--dangerously-skip-permissions cannot be used with
//!   root/sudo privileges") unless `IS_SANDBOX=1` is set;
//! - subagents: the tool is `Agent` (input `description`, `prompt`, `subagent_type`,
//!   `run_in_background`; with `run_in_background: false` the parent waits for it). The subagent
//!   sends its own `/v1/messages` requests with `tools` (fewer than the parent's), whose first
//!   message carries the Agent call's `prompt`; its hooks' input has the **parent's**
//!   `session_id` and `transcript_path`, plus `agent_id` (e.g. `a2730ad58e13e927f`) and
//!   `agent_type` (`general-purpose`); `SubagentStart`/`SubagentStop` events carry the same ids
//!   (and `agent_transcript_path`, under `<session>/subagents/`).
//!
//! The turn to play is the number of assistant messages already in the request, which makes the
//! fake safe under client retries. A request whose first message carries a [`Subagent`]'s marker
//! (the `prompt` of a [`Step::agent`] call) plays that subagent's steps instead, with tool-use ids
//! of its own ([`subagent_tool_use_id`]). Requests without `tools` (side requests such as a title) get a
//! short text answer and do not advance the script.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

/// One scripted assistant turn.
#[derive(Debug, Clone)]
pub enum Step {
    /// Call `tool` with `input`.
    Tool { name: String, input: Value },
    /// Answer with text and end the turn.
    Text(String),
    /// The step [`When`] gives for the `tool_result`s so far, once it gives one: a turn ordered
    /// after an event outside the CLI (a background command's output, a file the test writes),
    /// or one whose input comes from an earlier result (a background task's id).
    When(When),
}

/// What a [`Step::When`] asks, given the `tool_result`s of the request being answered: polled
/// every 50 ms until it gives a step, for at most [`WHEN_BOUND`]; past it the turn says "gave
/// up waiting" and ends (the test's own checks then fail with the conversation).
#[derive(Clone)]
pub struct When(pub Arc<NextStep>);

/// The function inside a [`When`].
pub type NextStep = dyn Fn(&[ToolResult]) -> Option<Step> + Send + Sync;

impl std::fmt::Debug for When {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("When(..)")
    }
}

/// How long a [`Step::When`] waits at most.
pub const WHEN_BOUND: Duration = Duration::from_secs(120);

impl Step {
    pub fn bash(command: &str) -> Step {
        Step::Tool {
            name: "Bash".into(),
            input: json!({"command": command, "description": "scripted"}),
        }
    }
    pub fn read(path: &str) -> Step {
        Step::Tool {
            name: "Read".into(),
            input: json!({"file_path": path}),
        }
    }
    pub fn write(path: &str, content: &str) -> Step {
        Step::Tool {
            name: "Write".into(),
            input: json!({"file_path": path, "content": content}),
        }
    }
    /// A Bash call with more of the tool's input (`timeout`, `run_in_background`).
    pub fn bash_with(command: &str, more: Value) -> Step {
        let mut input = json!({"command": command, "description": "scripted"});
        if let (Some(input), Value::Object(more)) = (input.as_object_mut(), more) {
            input.extend(more);
        }
        Step::Tool {
            name: "Bash".into(),
            input,
        }
    }
    /// `then`, once `until` holds for the tool results the CLI has sent.
    pub fn hold(until: impl Fn(&[ToolResult]) -> bool + Send + Sync + 'static, then: Step) -> Step {
        Step::when(move |results| until(results).then(|| then.clone()))
    }
    /// The step `next` gives for the tool results the CLI has sent, once it gives one.
    pub fn when(next: impl Fn(&[ToolResult]) -> Option<Step> + Send + Sync + 'static) -> Step {
        Step::When(When(Arc::new(next)))
    }
    /// A foreground `Agent` call (a `general-purpose` subagent) whose task is `prompt`; give the
    /// subagent's steps with a [`Subagent`] whose marker is in `prompt`.
    pub fn agent(prompt: &str) -> Step {
        Step::Tool {
            name: "Agent".into(),
            input: json!({"description": "scripted subagent", "prompt": prompt,
                          "subagent_type": "general-purpose", "run_in_background": false}),
        }
    }
    pub fn edit(path: &str, old: &str, new: &str) -> Step {
        Step::Tool {
            name: "Edit".into(),
            input: json!({"file_path": path, "old_string": old, "new_string": new}),
        }
    }
}

/// The script of a subagent: the steps played for requests whose first message contains `marker`.
#[derive(Debug, Clone)]
pub struct Subagent {
    pub marker: String,
    pub steps: Vec<Step>,
}

/// A `tool_result` the CLI sent back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    pub tool_use_id: String,
    /// The result's text (text blocks joined).
    pub content: String,
    pub is_error: bool,
}

/// The running fake. It stops with the test process.
pub struct FakeApi {
    pub port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeApi {
    /// Listens on 127.0.0.1 (an ephemeral port) and plays `script`; after it, the model says "done".
    pub fn start(script: Vec<Step>) -> FakeApi {
        FakeApi::with_subagents(script, Vec::new())
    }

    /// [`FakeApi::start`], with the scripts of the subagents the script starts.
    pub fn with_subagents(script: Vec<Step>, subagents: Vec<Subagent>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake API");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requests);
        let script = Arc::new(Scripts {
            main: script,
            subagents,
        });
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = Arc::clone(&log);
                let script = Arc::clone(&script);
                thread::spawn(move || {
                    let _ = serve(stream, &script, &log);
                });
            }
        });
        FakeApi { port, requests }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every `POST /v1/messages` body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every distinct `tool_result` the CLI sent, in order of first appearance.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        let mut out: Vec<ToolResult> = Vec::new();
        for req in self.requests() {
            results_into(&req, &mut out);
        }
        out
    }

    /// The result for the tool call of scripted turn `turn` (ids are `toolu_fake_<turn>`).
    pub fn result_of(&self, turn: usize) -> Option<ToolResult> {
        let id = tool_use_id(turn);
        self.tool_results()
            .into_iter()
            .find(|r| r.tool_use_id == id)
    }

    /// The result for the tool call of turn `turn` of subagent `agent` (its index in the list).
    pub fn subagent_result_of(&self, agent: usize, turn: usize) -> Option<ToolResult> {
        let id = subagent_tool_use_id(agent, turn);
        self.tool_results()
            .into_iter()
            .find(|r| r.tool_use_id == id)
    }

    /// A readable account of the conversation, for test logs.
    pub fn transcript(&self) -> String {
        self.tool_results()
            .iter()
            .map(|r| format!("{} (error: {}): {}\n", r.tool_use_id, r.is_error, r.content))
            .collect()
    }
}

/// Appends the `tool_result`s of one request body not yet in `out` (by `tool_use_id`).
fn results_into(req: &Value, out: &mut Vec<ToolResult>) {
    let Some(messages) = req.get("messages").and_then(Value::as_array) else {
        return;
    };
    for m in messages {
        let Some(blocks) = m.get("content").and_then(Value::as_array) else {
            continue;
        };
        for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
            let id = b["tool_use_id"].as_str().unwrap_or_default().to_string();
            if out.iter().any(|r| r.tool_use_id == id) {
                continue;
            }
            let content = match &b["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                other => other.to_string(),
            };
            out.push(ToolResult {
                tool_use_id: id,
                content,
                is_error: b["is_error"] == true,
            });
        }
    }
}

/// The id the fake gives the tool call of turn `turn`.
pub fn tool_use_id(turn: usize) -> String {
    format!("toolu_fake_{turn:02}")
}

/// The id the fake gives the tool call of turn `turn` of subagent `agent`.
pub fn subagent_tool_use_id(agent: usize, turn: usize) -> String {
    format!("toolu_fake_sub{agent}_{turn:02}")
}

/// Everything the fake plays.
struct Scripts {
    main: Vec<Step>,
    subagents: Vec<Subagent>,
}

impl Scripts {
    /// The steps for a request and the id of its turn's tool call.
    fn for_request(&self, body: &Value, turn: usize) -> (&[Step], String) {
        let first = body
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|m| m.first())
            .map(Value::to_string)
            .unwrap_or_default();
        match self
            .subagents
            .iter()
            .position(|a| first.contains(a.marker.as_str()))
        {
            Some(k) => (&self.subagents[k].steps, subagent_tool_use_id(k, turn)),
            None => (&self.main, tool_use_id(turn)),
        }
    }
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    Ok(Some(Request { method, path, body }))
}

fn serve(stream: TcpStream, scripts: &Scripts, log: &Mutex<Vec<Value>>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader)? {
        if req.method == "HEAD" || req.method == "GET" {
            writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        if req.method != "POST" || !req.path.starts_with("/v1/messages") {
            writer.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let main_loop = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty());
        let turn = body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let (script, id) = scripts.for_request(&body, turn);
        let mut step = if main_loop {
            log.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(body.clone());
            script
                .get(turn)
                .cloned()
                .unwrap_or_else(|| Step::Text("done".into()))
        } else {
            Step::Text("ok".into())
        };
        while let Step::When(next) = step {
            let mut results = Vec::new();
            results_into(&body, &mut results);
            let started = std::time::Instant::now();
            step = loop {
                if let Some(s) = (next.0)(&results) {
                    break s;
                }
                if started.elapsed() > WHEN_BOUND {
                    break Step::Text("gave up waiting".into());
                }
                thread::sleep(Duration::from_millis(50));
            };
        }
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("claude-fake")
            .to_string();
        let stream = body.get("stream") == Some(&Value::Bool(true));
        let (content_type, payload) = respond(&step, &id, &model, stream);
        write!(
            writer,
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nrequest-id: req_fake_{turn}\r\n\r\n",
            payload.len()
        )?;
        writer.write_all(payload.as_bytes())?;
        writer.flush()?;
    }
    Ok(())
}

/// A text block: (start block, delta, whole block, stop reason).
fn text_parts(text: &str) -> (Value, Value, Value, &'static str) {
    (
        json!({"type": "text", "text": ""}),
        json!({"type": "text_delta", "text": text}),
        json!({"type": "text", "text": text}),
        "end_turn",
    )
}

/// The response for one turn: an SSE stream, or a whole message when the request did not stream.
fn respond(step: &Step, id: &str, model: &str, stream: bool) -> (&'static str, String) {
    let (block, delta, full, stop) = match step {
        Step::Tool { name, input } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            json!({"type": "tool_use", "id": id, "name": name, "input": input}),
            "tool_use",
        ),
        Step::Text(text) => text_parts(text),
        // `serve` resolves every `When` before it answers.
        Step::When(_) => text_parts(""),
    };
    let usage = json!({"input_tokens": 1, "output_tokens": 1});
    if !stream {
        let msg = json!({"id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": model,
            "content": [full], "stop_reason": stop, "stop_sequence": null, "usage": usage});
        return ("application/json", msg.to_string());
    }
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": format!("msg_{id}"),
            "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": usage}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 1}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let sse = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    ("text/event-stream", sse)
}
