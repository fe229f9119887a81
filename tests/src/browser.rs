//! A real browser for the console tests: Debian's headless Chromium driven by `chromedriver` over
//! the W3C WebDriver protocol — plain HTTP/1.1 with JSON bodies on loopback, spoken here with std
//! (about a hundred lines; no WebDriver crate needed).
//!
//! `chromedriver --port=0` picks its own port and prints it; [`Browser::start`] waits for that line
//! (an event, not a sleep). Waiting for the page is done inside the browser: [`Browser::wait_for`]
//! runs an async script that resolves when a `MutationObserver` sees the condition hold, bounded
//! by the session's script timeout. Everything is killed on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// How long one WebDriver command may take (navigation included).
const COMMAND_BOUND: Duration = Duration::from_secs(60);
/// The longest a [`Browser::wait_for`] waits.
pub const WAIT_BOUND_MS: u64 = 60_000;
/// The element key of the W3C protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// An element found on the page.
#[derive(Debug, Clone)]
pub struct Element(String);

fn need(bin: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()));
    assert!(
        found,
        "`{bin}` is not installed: run .ci/install (it installs Debian's chromium and chromium-driver)"
    );
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of `width` x `height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Browser {
        need("chromedriver");
        need("chromium");
        let mut driver = Command::new("chromedriver")
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let stdout = driver.stdout.take().expect("chromedriver stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .and_then(Result::ok)
                .expect("chromedriver exited before saying its port");
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest
                    .trim_end_matches('.')
                    .trim()
                    .parse::<u16>()
                    .expect("chromedriver's port");
            }
        };
        // Drain the rest so chromedriver never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let profile = tempfile::tempdir().expect("tempdir");
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", b._profile.path().display()),
                ]
            },
            "timeouts": {"script": WAIT_BOUND_MS, "pageLoad": 60_000, "implicit": 0}
        }}});
        let v = b
            .call("POST", "/session", Some(&caps))
            .expect("new session");
        b.session = v["sessionId"].as_str().expect("sessionId").to_owned();
        b
    }

    /// One WebDriver command: its `value`, or the error's message.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(COMMAND_BOUND))
            .map_err(|e| e.to_string())?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
        s.write_all(body.as_bytes()).map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open after its answer: read the head, then exactly
        // Content-Length bytes.
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let head_end = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed before the head".into());
            }
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())
                    .flatten()
            })
            .ok_or("no Content-Length")?;
        while raw.len() < head_end + len {
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed inside the body".into());
            }
            raw.extend_from_slice(&buf[..n]);
        }
        let body = String::from_utf8_lossy(&raw[head_end..head_end + len]).into_owned();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("no status")?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if status == 200 {
            Ok(v["value"].clone())
        } else {
            Err(format!("{status}: {}", v["value"]))
        }
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let p = format!("/session/{}{path}", self.session);
        self.call(method, &p, body.as_ref())
            .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.session_call("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn url(&self) -> String {
        self.session_call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page's visible text.
    pub fn text(&self) -> String {
        self.script(
            "return document.body ? document.body.innerText : '';",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The first element matching `css` (fails the test when there is none).
    pub fn find(&self, css: &str) -> Element {
        let v = self.session_call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        Element(
            v[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("no element for {css}: {v}"))
                .to_owned(),
        )
    }

    pub fn click(&self, css: &str) {
        let e = self.find(css);
        self.session_call("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.session_call(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        );
    }

    /// Runs `body` as a function with `args`; returns its value.
    pub fn script(&self, body: &str, args: Value) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(json!({"script": body, "args": args})),
        )
    }

    /// Waits, inside the page, until `condition` (a JS expression) is truthy; returns its value.
    /// Re-checked on every DOM change, so nothing is polled on a timer; bounded by [`WAIT_BOUND_MS`]
    /// (then the test fails with the page's text).
    pub fn wait_for(&self, condition: &str) -> Value {
        let script = format!(
            "const done = arguments[arguments.length - 1];
             const check = () => {{ try {{ return ({condition}); }} catch (e) {{ return false; }} }};
             let v = check();
             if (v) {{ done(v); return; }}
             // A navigation away ends this page's wait: say so, and the wait goes on in the next page.
             window.addEventListener('beforeunload', () => done('__navigating__'));
             window.addEventListener('pagehide', () => done('__navigating__'));
             const o = new MutationObserver(() => {{ const v = check(); if (v) {{ o.disconnect(); done(v); }} }});
             o.observe(document, {{subtree: true, childList: true, characterData: true, attributes: true}});"
        );
        let p = format!("/session/{}/execute/async", self.session);
        // A navigation while waiting ends the script with an error: wait again in the new page.
        for _ in 0..20 {
            match self.call("POST", &p, Some(&json!({"script": script, "args": []}))) {
                Ok(v) if v == "__navigating__" => continue,
                Ok(v) => return v,
                Err(e)
                    if e.contains("unload") || e.contains("context") || e.contains("navigat") =>
                {
                    continue
                }
                Err(e) => panic!("waited for {condition}: {e}\npage:\n{}", self.text()),
            }
        }
        panic!(
            "waited for {condition}: the page kept navigating\npage:\n{}",
            self.text()
        )
    }

    /// A PNG of the viewport, written to `path`.
    pub fn screenshot(&self, path: &Path) {
        let v = self.session_call("GET", "/screenshot", None);
        let png = base64_decode(v.as_str().expect("base64 screenshot"));
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Resizes the window so the whole page fits (for full-page screenshots), keeping the width.
    pub fn fit_height(&self, width: u32) {
        // The page's height plus whatever the window adds around the viewport.
        let h = self
            .script(
                "return Math.ceil(document.documentElement.scrollHeight + (window.outerHeight - window.innerHeight));",
                json!([]),
            )
            .as_u64()
            .unwrap_or(900)
            .clamp(600, 4000);
        // The window's frame adds to the viewport; headless has none worth counting.
        self.session_call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": h + 10})),
        );
    }
}

/// Standard base64 (the screenshot), decoded by hand: the harness keeps to std and serde_json.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_round() {
        assert_eq!(super::base64_decode("aGVsbG8="), b"hello");
        assert_eq!(super::base64_decode("aGk="), b"hi");
    }
}
