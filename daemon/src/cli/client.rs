//! The operator CLI's client for the daemon's sockets: one HTTP/1.1 request per connection over a
//! std `UnixStream`, with timeouts (the CLI needs no async runtime for this). Requests and replies
//! are the typed `crate::api::types`, the same types the server uses.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::types::ErrorReply;

/// Why a request to the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {path} (is the daemon running? start it with `cmdgate up`)")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("talking to {path} failed")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the daemon's answer is not HTTP: {0}")]
    Garbled(String),
    #[error("the daemon answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the daemon's answer is not the expected JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A response: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Sends one request; `timeout` bounds connecting, writing and reading each.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Reply, ClientError> {
    let io = |source| ClientError::Io {
        path: socket.to_path_buf(),
        source,
    };
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.to_path_buf(),
        source,
    })?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let body = body.unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: cmdgate\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> Result<Reply, ClientError> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| ClientError::Garbled("no end of headers".into()))?;
    let head = std::str::from_utf8(&raw[..end])
        .map_err(|_| ClientError::Garbled("headers are not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ClientError::Garbled(format!("bad status line {status_line:?}")))?;
    let mut body = raw[end + 4..].to_vec();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                let n: usize = value
                    .trim()
                    .parse()
                    .map_err(|_| ClientError::Garbled("bad content-length".into()))?;
                if body.len() < n {
                    return Err(ClientError::Garbled(format!(
                        "body cut short ({} of {n} bytes)",
                        body.len()
                    )));
                }
                body.truncate(n);
            }
        }
    }
    Ok(Reply { status, body })
}

/// A decoded answer, and the reply as received: `--json` prints `raw`, so its output is the
/// daemon's reply verbatim.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub value: T,
    pub raw: serde_json::Value,
}

/// What one request came to: a 2xx answer, or the daemon's error reply and status.
#[derive(Debug, Clone)]
pub enum Outcome<T> {
    Done(Answer<T>),
    Refused { status: u16, reply: ErrorReply },
}

/// Sends `body` (typed: `api::types`) and decodes a 2xx answer as `T` (`()` for none); any other
/// status comes back as the daemon's `ErrorReply`.
pub fn send<B, T>(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&B>,
) -> Result<Outcome<T>, ClientError>
where
    B: Serialize + ?Sized,
    T: DeserializeOwned,
{
    let bytes = body.map(serde_json::to_vec).transpose()?;
    let reply = request(
        socket,
        method,
        path,
        bytes.as_deref(),
        Duration::from_secs(60),
    )?;
    if !(200..300).contains(&reply.status) {
        let reply_body =
            serde_json::from_slice::<ErrorReply>(&reply.body).unwrap_or_else(|_| ErrorReply {
                error: String::from_utf8_lossy(&reply.body).into_owned(),
                revision: None,
                expected: None,
            });
        return Ok(Outcome::Refused {
            status: reply.status,
            reply: reply_body,
        });
    }
    let raw = if reply.body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&reply.body)?
    };
    let value = T::deserialize(&raw)?;
    Ok(Outcome::Done(Answer { value, raw }))
}

/// [`send`], with an error reply as [`ClientError::Status`].
pub fn call<B, T>(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&B>,
) -> Result<Answer<T>, ClientError>
where
    B: Serialize + ?Sized,
    T: DeserializeOwned,
{
    match send(socket, method, path, body)? {
        Outcome::Done(answer) => Ok(answer),
        Outcome::Refused { status, reply } => Err(ClientError::Status {
            status,
            message: reply.error,
        }),
    }
}

/// [`call`] without a body.
pub fn get<T: DeserializeOwned>(socket: &Path, path: &str) -> Result<Answer<T>, ClientError> {
    call::<(), T>(socket, "GET", path, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bodies_by_content_length() {
        let r = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}junk").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, b"{}".as_slice()));
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}").is_err());
        assert!(parse(b"garbage").is_err());
    }
}
