//! The `cmdgate-run` client's logic: redeem a ticket on the decide socket and relay the framed
//! stream of the run (see `cmdgate_policy::wire::run`) to stdout/stderr as it arrives. It never runs
//! anything itself: without a daemon that accepts the ticket, nothing runs.
//!
//! The HTTP is the hook's (`client.rs`): one request per connection, a deadline on connecting and
//! on the response head; the body is `Transfer-Encoding: chunked` (its length is not known while the
//! command runs), decoded here. While the run goes on, a silence longer than [`STALL`] (the daemon
//! writes a heartbeat every `HEARTBEAT_MS`) means the daemon is stuck: the client gives up.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use cmdgate_policy::locations::Locations;
use cmdgate_policy::wire::run::{
    is_ticket, Frame, RunEnd, RunRequest, EXIT_DAEMON_LOST, EXIT_REFUSED, RUN_PATH,
};
use cmdgate_policy::wire::{ErrorBody, WIRE_VERSION};

use crate::client::{parse_head_fields, ClientError};

/// How long the daemon may take to accept the ticket and start answering.
const HEAD_DEADLINE: Duration = Duration::from_secs(30);
/// Silence on a running stream (no output, no heartbeat) after which the daemon counts as stuck.
pub const STALL: Duration = Duration::from_secs(30);
/// Largest response head, and largest error body read.
const MAX_HEAD: usize = 16 * 1024;
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Where the relayed bytes go (stdout and stderr in the binary; buffers in tests).
pub trait Sink {
    fn stdout(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn stderr(&mut self, bytes: &[u8]) -> io::Result<()>;
}

/// The process's own stdout and stderr, unbuffered: output appears as the command prints it.
pub struct StdSink;

impl Sink for StdSink {
    fn stdout(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(bytes)?;
        out.flush()
    }
    fn stderr(&mut self, bytes: &[u8]) -> io::Result<()> {
        io::stderr().lock().write_all(bytes)
    }
}

/// Runs the client: `args` are the arguments after the program name. Returns the exit status.
pub fn main_with(
    args: &[OsString],
    env: impl Fn(&str) -> Option<OsString>,
    cwd: io::Result<std::path::PathBuf>,
    vars: Vec<(OsString, OsString)>,
    sink: &mut dyn Sink,
) -> i32 {
    let say = |sink: &mut dyn Sink, text: String| {
        let _ = sink.stderr(format!("cmdgate-run: {text}\n").as_bytes());
    };
    let (socket_arg, args) = match args {
        [flag, socket, rest @ ..] if flag == "--socket" => (Some(socket.clone()), rest),
        _ => (None, args),
    };
    let ticket = match args {
        [t] => match t.to_str() {
            Some(t) if is_ticket(t) => t.to_string(),
            _ => {
                say(
                    sink,
                    "the argument is not a cmdgate ticket. cmdgate-run only redeems tickets the \
                     cmdgate hook issued; it never runs a command itself."
                        .into(),
                );
                return EXIT_REFUSED;
            }
        },
        _ => {
            say(
                sink,
                "usage: cmdgate-run [--socket PATH] TICKET (the cmdgate hook writes this command; \
                 it is not run by hand)"
                    .into(),
            );
            return EXIT_REFUSED;
        }
    };
    let cwd = match cwd {
        Ok(c) => c.to_string_lossy().into_owned(),
        Err(e) => {
            say(
                sink,
                format!("cannot read the working directory: {e}; nothing ran"),
            );
            return EXIT_REFUSED;
        }
    };
    let env_pairs = vars
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let request = RunRequest {
        v: WIRE_VERSION,
        ticket,
        cwd,
        env: env_pairs,
    };
    // The hook passes `--socket` when its socket is not what the environment says (system mode).
    let socket = match socket_arg {
        Some(s) => std::path::PathBuf::from(s),
        None => std::path::PathBuf::from(
            Locations::from_env(|k| env(k).and_then(|v| v.into_string().ok())).socket,
        ),
    };
    match redeem(&socket, &request, sink) {
        Ok(end) => {
            if !end.message.is_empty() {
                let _ = sink.stderr(format!("{}\n", end.message.trim_end()).as_bytes());
            }
            end.exit_status()
        }
        Err(Failure::Refused(why)) => {
            say(
                sink,
                format!("the cmdgate daemon refused this run: {why}. Nothing ran."),
            );
            EXIT_REFUSED
        }
        Err(Failure::Lost(why)) => {
            say(
                sink,
                format!(
                    "{why}. The command's effects were not committed (the daemon commits nothing of \
                     a run it did not finish); check `cmdgate status` and `cmdgate runs`."
                ),
            );
            EXIT_DAEMON_LOST
        }
    }
}

/// Why a redemption did not end in a [`RunEnd`].
#[derive(Debug)]
pub enum Failure {
    /// The daemon answered, and the answer was no (nothing ran).
    Refused(String),
    /// The daemon could not be reached, or went away / stalled mid-run.
    Lost(String),
}

fn lost(what: &str, e: impl std::fmt::Display) -> Failure {
    Failure::Lost(format!("{what}: {e}"))
}

/// Redeems the ticket and relays the stream until its end frame.
pub fn redeem(socket: &Path, request: &RunRequest, sink: &mut dyn Sink) -> Result<RunEnd, Failure> {
    let body = serde_json::to_vec(request).map_err(|e| lost("cannot encode the request", e))?;
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        lost(
            &format!(
                "the cmdgate daemon is not reachable at {}",
                socket.display()
            ),
            e,
        )
    })?;
    // Head and body in one write: the daemon reads the whole request in one wake-up, not the
    // head first and the body on a second one.
    let mut request = format!(
        "POST {RUN_PATH} HTTP/1.1\r\nHost: cmdgate\r\nUser-Agent: cmdgate-run\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let deadline = Instant::now() + HEAD_DEADLINE;
    stream
        .set_write_timeout(Some(HEAD_DEADLINE))
        .map_err(|e| lost("socket", e))?;
    stream
        .write_all(&request)
        .map_err(|e| lost("cannot send the request to the cmdgate daemon", e))?;

    // The response head.
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD {
            return Err(Failure::Lost(
                "the daemon's answer head is too large".into(),
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::Lost(
                "the cmdgate daemon did not start the run in time".into(),
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| lost("socket", e))?;
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(Failure::Lost(
                    "the cmdgate daemon closed the connection before answering".into(),
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(lost("no answer from the cmdgate daemon", e)),
        }
    };
    let fields = parse_head_fields(&buf[..head_end]).map_err(|e| lost("bad answer", e))?;
    let mut rest = buf.split_off(head_end + 4);

    if fields.status != 200 {
        // A refusal: a whole JSON body with a Content-Length.
        let len = fields.content_length.unwrap_or(0).min(MAX_ERROR_BODY);
        while rest.len() < len {
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => rest.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        rest.truncate(len);
        let why = match serde_json::from_slice::<ErrorBody>(&rest) {
            Ok(b) => b.error,
            Err(_) => String::from_utf8_lossy(&rest).into_owned(),
        };
        return Err(Failure::Refused(format!("HTTP {}: {why}", fields.status)));
    }
    if !fields.chunked {
        return Err(Failure::Lost(
            "the daemon's answer is not a chunked stream".into(),
        ));
    }

    // The stream: chunked transfer coding around frames.
    stream
        .set_read_timeout(Some(STALL))
        .map_err(|e| lost("socket", e))?;
    let mut chunks = Chunked::default();
    let mut frames: Vec<u8> = Vec::new();
    let mut feed = rest;
    loop {
        chunks
            .push(&feed, &mut frames)
            .map_err(|e| Failure::Lost(format!("the daemon's stream is malformed: {e}")))?;
        feed.clear();
        let mut at = 0;
        while let Some((frame, used)) = Frame::decode(&frames[at..])
            .map_err(|e| Failure::Lost(format!("the daemon's stream is malformed: {e}")))?
        {
            at += used;
            match frame {
                Frame::Stdout(b) => sink
                    .stdout(&b)
                    .map_err(|e| lost("cannot write stdout", e))?,
                Frame::Stderr(b) => sink
                    .stderr(&b)
                    .map_err(|e| lost("cannot write stderr", e))?,
                Frame::Heartbeat => {}
                Frame::End(end) => return Ok(end),
            }
        }
        frames.drain(..at);
        if chunks.done {
            return Err(Failure::Lost(
                "the cmdgate daemon ended the stream without the run's result".into(),
            ));
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(Failure::Lost(
                    "the cmdgate daemon went away while the command was running".into(),
                ))
            }
            Ok(n) => feed.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Failure::Lost(format!(
                    "the cmdgate daemon sent nothing for {} s (not even a heartbeat) while the \
                     command was running",
                    STALL.as_secs()
                )))
            }
            Err(e) => return Err(lost("the connection to the cmdgate daemon failed", e)),
        }
    }
}

/// An incremental decoder of HTTP/1.1 chunked transfer coding (RFC 9112 §7.1): sizes in hex,
/// extensions ignored, trailers skipped.
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    line: Vec<u8>,
    /// The last chunk (size 0) and its trailers were read.
    pub done: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading a size line.
    #[default]
    Size,
    /// Reading this many more data bytes.
    Data(usize),
    /// Expecting the CRLF after data.
    DataEnd,
    /// Reading trailer lines until an empty one.
    Trailer,
}

/// Largest chunk-size or trailer line.
const MAX_CHUNK_LINE: usize = 4096;

impl Chunked {
    /// Decodes `input`, appending the data to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Malformed(format!("chunked body: {why}"));
        let mut i = 0;
        while i < input.len() {
            if self.done {
                return Err(bad("bytes after the last chunk"));
            }
            match self.state {
                ChunkState::Data(n) => {
                    let take = n.min(input.len() - i);
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    self.state = if take == n {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(n - take)
                    };
                }
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let b = input[i];
                    i += 1;
                    if b != b'\n' {
                        if self.state == ChunkState::DataEnd
                            && (b != b'\r' || !self.line.is_empty())
                        {
                            return Err(bad("no CRLF after chunk data"));
                        }
                        self.line.push(b);
                        if self.line.len() > MAX_CHUNK_LINE {
                            return Err(bad("line too long"));
                        }
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    match self.state {
                        ChunkState::DataEnd => {
                            if !line.is_empty() {
                                return Err(bad("no CRLF after chunk data"));
                            }
                            self.state = ChunkState::Size;
                        }
                        ChunkState::Size => {
                            let size = line.split(|&c| c == b';').next().unwrap_or_default();
                            let size = std::str::from_utf8(size)
                                .ok()
                                .map(str::trim)
                                .filter(|s| !s.is_empty() && s.len() <= 8)
                                .and_then(|s| usize::from_str_radix(s, 16).ok())
                                .ok_or_else(|| bad("bad chunk size"))?;
                            self.state = if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            };
                        }
                        ChunkState::Trailer => {
                            if line.is_empty() {
                                self.done = true;
                            }
                        }
                        ChunkState::Data(_) => unreachable!("handled above"),
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(parts: &[&[u8]]) -> Result<(Vec<u8>, bool), ClientError> {
        let mut c = Chunked::default();
        let mut out = Vec::new();
        for p in parts {
            c.push(p, &mut out)?;
        }
        Ok((out, c.done))
    }

    #[test]
    fn chunked_decoding() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
        assert_eq!(
            decode_all(&[body]).unwrap(),
            (b"hello world".to_vec(), true)
        );
        // Byte at a time.
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(decode_all(&bytes).unwrap(), (b"hello world".to_vec(), true));
        // Unfinished.
        assert_eq!(
            decode_all(&[b"5\r\nhel"]).unwrap(),
            (b"hel".to_vec(), false)
        );
        for bad in [
            &b"zz\r\n"[..],
            b"5\r\nhelloXX",
            b"123456789\r\n",
            b"0\r\n\r\nextra",
        ] {
            assert!(
                decode_all(&[bad]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    struct Buf(Vec<u8>, Vec<u8>);
    impl Sink for Buf {
        fn stdout(&mut self, b: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(b);
            Ok(())
        }
        fn stderr(&mut self, b: &[u8]) -> io::Result<()> {
            self.1.extend_from_slice(b);
            Ok(())
        }
    }

    #[test]
    fn refuses_anything_but_a_ticket_before_connecting() {
        let mut sink = Buf(Vec::new(), Vec::new());
        let code = main_with(
            &["rm -rf /".into()],
            |_| Some("/nonexistent/socket".into()),
            Ok("/".into()),
            Vec::new(),
            &mut sink,
        );
        assert_eq!(code, EXIT_REFUSED);
        assert!(String::from_utf8_lossy(&sink.1).contains("not a cmdgate ticket"));
        assert!(sink.0.is_empty());
    }

    #[test]
    fn no_daemon_is_a_loss_not_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("none.sock");
        let mut sink = Buf(Vec::new(), Vec::new());
        let ticket = cmdgate_policy::wire::run::ticket_from(&[3; 32]);
        let code = main_with(
            &[ticket.into()],
            |k| (k == "CMDGATE_SOCKET").then(|| socket.clone().into_os_string()),
            Ok("/".into()),
            Vec::new(),
            &mut sink,
        );
        assert_eq!(code, EXIT_DAEMON_LOST);
        let err = String::from_utf8_lossy(&sink.1);
        assert!(err.contains("not reachable"), "{err}");
    }
}
