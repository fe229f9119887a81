//! A tiny HTTP/1.1 client over a Unix socket (std `UnixStream`): one POST per connection, every
//! read and write bounded by a deadline, the response size bounded. Just enough for the daemon's two
//! endpoints (see `cmdgate_policy::wire`); anything unexpected is an error, and errors become denials.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Why a request to the daemon did not produce a usable response.
#[derive(Debug)]
pub enum ClientError {
    /// No socket, nobody listening, or no permission: the daemon is not running (for us).
    Connect(io::Error),
    /// The deadline passed before the response was complete.
    Timeout,
    /// Writing the request or reading the response failed.
    Io(io::Error),
    /// The response is not the HTTP we expect (status line, headers, Content-Length, size).
    Malformed(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect(e) => write!(f, "cannot connect: {e}"),
            ClientError::Timeout => write!(f, "no complete answer before the deadline"),
            ClientError::Io(e) => write!(f, "connection failed: {e}"),
            ClientError::Malformed(why) => write!(f, "malformed response: {why}"),
        }
    }
}

/// A parsed response: status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Largest header block accepted.
const MAX_HEAD_BYTES: usize = 16 * 1024;

fn remaining(deadline: Instant) -> Result<Duration, ClientError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        Err(ClientError::Timeout)
    } else {
        Ok(left)
    }
}

fn io_err(e: io::Error) -> ClientError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout,
        _ => ClientError::Io(e),
    }
}

/// `POST path` with a JSON `body` to the server on `socket`, finished by `deadline`, reading at most
/// `max_body` bytes of response body. Connecting to a Unix socket does not wait on the network: it
/// succeeds or fails at once (a full backlog is the exception, and the hook's watchdog bounds that).
pub fn post_json(
    socket: &Path,
    path: &str,
    body: &[u8],
    deadline: Instant,
    max_body: usize,
) -> Result<Response, ClientError> {
    let mut stream = UnixStream::connect(socket).map_err(ClientError::Connect)?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: cmdgate\r\nUser-Agent: cmdgate-hook\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = Vec::with_capacity(head.len() + body.len());
    request.extend_from_slice(head.as_bytes());
    request.extend_from_slice(body);
    stream
        .set_write_timeout(Some(remaining(deadline)?))
        .map_err(ClientError::Io)?;
    stream.write_all(&request).map_err(io_err)?;

    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut head_end: Option<usize> = None;
    let mut parsed: Option<(u16, usize)> = None;
    loop {
        if let (Some(end), Some((status, len))) = (head_end, parsed) {
            if buf.len() >= end + len {
                if buf.len() > end + len {
                    return Err(ClientError::Malformed(
                        "more bytes than Content-Length".into(),
                    ));
                }
                return Ok(Response {
                    status,
                    body: buf.split_off(end),
                });
            }
        }
        stream
            .set_read_timeout(Some(remaining(deadline)?))
            .map_err(ClientError::Io)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(e)),
        };
        if n == 0 {
            return Err(ClientError::Malformed(format!(
                "connection closed after {} bytes, before the response was complete",
                buf.len()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
        if head_end.is_none() {
            if let Some(pos) = find(&buf, b"\r\n\r\n") {
                head_end = Some(pos + 4);
                let (status, len) = parse_head(&buf[..pos])?;
                if len > max_body {
                    return Err(ClientError::Malformed(format!(
                        "body of {len} bytes exceeds the {max_body}-byte limit"
                    )));
                }
                parsed = Some((status, len));
            } else if buf.len() > MAX_HEAD_BYTES {
                return Err(ClientError::Malformed("header block too large".into()));
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The status and the framing headers of a response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadFields {
    pub status: u16,
    pub content_length: Option<usize>,
    /// `Transfer-Encoding: chunked` (the only coding accepted; any other is an error).
    pub chunked: bool,
}

/// Parses the status line and headers (`cmdgate-run` also reads chunked streams with it).
pub fn parse_head_fields(head: &[u8]) -> Result<HeadFields, ClientError> {
    let text = std::str::from_utf8(head)
        .map_err(|_| ClientError::Malformed("headers are not UTF-8".into()))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(ClientError::Malformed(format!(
            "bad status line {status_line:?}"
        )));
    }
    let status = parts
        .next()
        .filter(|s| s.len() == 3 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|code| (100..=599).contains(code))
        .ok_or_else(|| ClientError::Malformed(format!("bad status line {status_line:?}")))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| ClientError::Malformed(format!("bad header line {line:?}")))?;
        let name = name.trim();
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<usize>()
                .map_err(|_| ClientError::Malformed(format!("bad Content-Length {value:?}")))?;
            if length.is_some_and(|old| old != n) {
                return Err(ClientError::Malformed(
                    "conflicting Content-Length headers".into(),
                ));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") || chunked {
                return Err(ClientError::Malformed(format!(
                    "unsupported Transfer-Encoding {value:?}"
                )));
            }
            chunked = true;
        }
    }
    if chunked && length.is_some() {
        return Err(ClientError::Malformed(
            "both Content-Length and Transfer-Encoding".into(),
        ));
    }
    Ok(HeadFields {
        status,
        content_length: length,
        chunked,
    })
}

/// Parses the status line and headers; returns (status, body length). Requires Content-Length (except
/// on 204/304, which have no body) and refuses Transfer-Encoding: the daemon sends whole bodies.
pub fn parse_head(head: &[u8]) -> Result<(u16, usize), ClientError> {
    let fields = parse_head_fields(head)?;
    if fields.chunked {
        return Err(ClientError::Malformed(
            "unsupported Transfer-Encoding \"chunked\"".into(),
        ));
    }
    // 204 and 304 never have a body, and servers (hyper) send them without Content-Length.
    if fields.status == 204 || fields.status == 304 {
        return Ok((fields.status, 0));
    }
    let length = fields
        .content_length
        .ok_or_else(|| ClientError::Malformed("no Content-Length".into()))?;
    Ok((fields.status, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_parsing() {
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 12").unwrap(),
            (200, 12)
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 204 No Content\r\nContent-Length: 0").unwrap(),
            (204, 0)
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 204 No Content\r\ndate: x").unwrap(),
            (204, 0)
        );
        for bad in [
            &b"HTTP/1.1 200 OK"[..],
            b"HTTP/2 200\r\nContent-Length: 1",
            b"HTTP/1.1 20 OK\r\nContent-Length: 1",
            b"HTTP/1.1 +20 OK\r\nContent-Length: 1",
            b"HTTP/1.1 000 OK\r\nContent-Length: 1",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1",
            b"HTTP/1.1 200 OK\r\ngarbage",
            b"\xff\xfe",
        ] {
            assert!(
                parse_head(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn head_parser_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_head(&bytes);
        }
    }
}
