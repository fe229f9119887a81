//! Wire types of a mirrored run: the ticket the daemon hands the hook, the redemption request the
//! `cmdgate-run` client sends, and the framed stream of the run's output and end.
//!
//! # Flow
//!
//! 1. `POST /v1/decide` for a Bash call the daemon would test-run answers a [`crate::wire::DecideResponse`]
//!    whose `run` is a [`RunTicket`] and whose `decision` is `ask`: a hook that does not know `run`
//!    falls back to asking, never to running the command on the host. A hook that knows it answers
//!    Claude Code `allow` with `updatedInput` whose `command` is [`client_command`].
//! 2. Claude Code's Bash tool runs `cmdgate-run <ticket>`, which `POST`s a [`RunRequest`] to
//!    [`RUN_PATH`] on the same (decide) socket.
//! 3. The daemon checks the ticket (known, unexpired, unused, same uid as the decide call's peer, same
//!    working directory, tier map revision unchanged) and answers either an error status with an
//!    [`crate::wire::ErrorBody`] (the client prints it and exits [`EXIT_REFUSED`]) or `200` with a
//!    chunked body of [`Frame`]s: output as it is produced, a heartbeat while the command is quiet,
//!    and one final [`RunEnd`].
//!
//! A client that goes away (the Bash tool's timeout, Ctrl-C, kill) is noticed at the next frame the
//! daemon writes (at most [`HEARTBEAT_MS`] later): the run is killed and nothing is committed. A
//! stream that ends without a [`RunEnd`] means the daemon died: the client says so and exits
//! [`EXIT_DAEMON_LOST`].
//!
//! # Frame encoding
//!
//! `kind: u8`, `len: u32` big-endian, then `len` bytes of payload; `len` ≤ [`MAX_FRAME_PAYLOAD`].
//! Kinds: [`FRAME_STDOUT`], [`FRAME_STDERR`] (raw bytes), [`FRAME_HEARTBEAT`] (empty),
//! [`FRAME_END`] (a JSON [`RunEnd`]). Anything else is a protocol error.

use serde::{Deserialize, Serialize};

/// `POST` a [`RunRequest`] on the decide socket; the answer is a stream of [`Frame`]s.
pub const RUN_PATH: &str = "/v1/run";

/// The content type of the framed answer.
pub const RUN_CONTENT_TYPE: &str = "application/x-cmdgate-run";

/// The client's name beside the hook: `<dir of cmdgate-hook>/cmdgate-run`.
pub const CLIENT_NAME: &str = "cmdgate-run";

/// How long a ticket stays redeemable by default: Claude Code runs the tool right after the hook
/// answers, so anything older was not redeemed by the call it was issued for.
pub const DEFAULT_TICKET_TTL_MS: u64 = 60_000;

/// The daemon writes a heartbeat after this long without output, so a client that went away is
/// noticed (its run killed) even while the command prints nothing.
pub const HEARTBEAT_MS: u64 = 500;

/// Largest frame payload.
pub const MAX_FRAME_PAYLOAD: usize = 64 * 1024;

/// Exit status of the client when the daemon refused the ticket (nothing ran).
pub const EXIT_REFUSED: i32 = 126;
/// Exit status of the client when the daemon could not be reached or went away mid-run.
pub const EXIT_DAEMON_LOST: i32 = 125;

pub const FRAME_STDOUT: u8 = 1;
pub const FRAME_STDERR: u8 = 2;
pub const FRAME_HEARTBEAT: u8 = 3;
pub const FRAME_END: u8 = 4;

/// Tickets are `cgt-` and 64 lowercase hex digits (32 random bytes): shell-safe, fixed length.
pub const TICKET_PREFIX: &str = "cgt-";

/// In a [`crate::wire::DecideResponse`]: run this call through the client with this ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTicket {
    /// The one-use ticket (see [`is_ticket`]).
    pub ticket: String,
    /// A leading `cd DIR &&` of the command, kept outside the client so Claude Code's shell still
    /// ends up in `DIR`: the directory as written (the hook quotes it). The ticket is bound to the
    /// directory it resolves to, and the daemon runs the rest of the command there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cd: Option<String>,
    /// What the ticket runs (the command without its leading `cd`), for the reason shown.
    pub command: String,
    /// Milliseconds from issue until the ticket can no longer be redeemed.
    pub expires_in_ms: u64,
}

/// `POST /v1/run`: the client redeems a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    /// [`crate::wire::WIRE_VERSION`].
    pub v: u32,
    pub ticket: String,
    /// The client's working directory (`getcwd`): must be the directory the ticket was issued for.
    pub cwd: String,
    /// The client's environment (UTF-8 entries only); the daemon filters it before the run sees it.
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

/// What became of a run's effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Clean: its effects are in the workspace now (possibly none).
    Committed,
    /// Dirty: nothing it did reached the host.
    RolledBack,
    /// Clean, but a target changed on the host while it ran: nothing of it was committed.
    Conflict,
    /// The run could not be finished or judged (sandbox error, limit, daemon shutdown): nothing was
    /// committed.
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Committed => "committed",
            RunStatus::RolledBack => "rolled_back",
            RunStatus::Conflict => "conflict",
            RunStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        match s {
            "committed" => Some(RunStatus::Committed),
            "rolled_back" => Some(RunStatus::RolledBack),
            "conflict" => Some(RunStatus::Conflict),
            "failed" => Some(RunStatus::Failed),
            _ => None,
        }
    }
}

/// The last frame of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd {
    /// [`crate::wire::WIRE_VERSION`].
    pub v: u32,
    /// The run's id (`cmdgate runs show RUN`, `cmdgate undo RUN`).
    pub run_id: String,
    /// The command's exit code when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// The signal that ended it when it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub status: RunStatus,
    /// The client prints this as its last stderr line when not empty: what was refused and what the
    /// agent can do, or a note (e.g. writes to /tmp stayed in the mirror).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl RunEnd {
    /// The client's exit status: the command's, as a shell reports it (`128 + n` for a signal), and
    /// never 0 when the effects were not committed.
    pub fn exit_status(&self) -> i32 {
        let command = match (self.exit, self.signal) {
            (Some(code), _) => code & 0xff,
            (None, Some(sig)) => 128 + (sig & 0x7f),
            (None, None) => 1,
        };
        match self.status {
            RunStatus::Committed => command,
            RunStatus::RolledBack | RunStatus::Conflict | RunStatus::Failed if command == 0 => 1,
            RunStatus::RolledBack | RunStatus::Conflict | RunStatus::Failed => command,
        }
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Heartbeat,
    End(RunEnd),
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    UnknownKind(u8),
    TooLong(usize),
    BadEnd(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            FrameError::TooLong(n) => write!(f, "frame of {n} bytes exceeds {MAX_FRAME_PAYLOAD}"),
            FrameError::BadEnd(e) => write!(f, "unreadable end frame: {e}"),
        }
    }
}

impl Frame {
    /// The frame's bytes. Output longer than [`MAX_FRAME_PAYLOAD`] must be split by the caller
    /// ([`output_frames`]).
    pub fn encode(&self) -> Vec<u8> {
        let (kind, payload): (u8, std::borrow::Cow<'_, [u8]>) = match self {
            Frame::Stdout(b) => (FRAME_STDOUT, b.into()),
            Frame::Stderr(b) => (FRAME_STDERR, b.into()),
            Frame::Heartbeat => (FRAME_HEARTBEAT, (&[][..]).into()),
            Frame::End(end) => (
                FRAME_END,
                serde_json::to_vec(end).unwrap_or_default().into(),
            ),
        };
        let mut out = Vec::with_capacity(5 + payload.len());
        out.push(kind);
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Decodes one frame from the front of `buf`: `Ok(None)` when more bytes are needed, else the
    /// frame and how many bytes it used.
    pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
        let Some((&kind, rest)) = buf.split_first() else {
            return Ok(None);
        };
        if !matches!(
            kind,
            FRAME_STDOUT | FRAME_STDERR | FRAME_HEARTBEAT | FRAME_END
        ) {
            return Err(FrameError::UnknownKind(kind));
        }
        let Some(len) = rest.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        // An end frame is small JSON; output is split at the limit.
        if len > MAX_FRAME_PAYLOAD {
            return Err(FrameError::TooLong(len));
        }
        let Some(payload) = rest.get(4..4 + len) else {
            return Ok(None);
        };
        let frame = match kind {
            FRAME_STDOUT => Frame::Stdout(payload.to_vec()),
            FRAME_STDERR => Frame::Stderr(payload.to_vec()),
            FRAME_HEARTBEAT => Frame::Heartbeat,
            _ => Frame::End(
                serde_json::from_slice(payload).map_err(|e| FrameError::BadEnd(e.to_string()))?,
            ),
        };
        Ok(Some((frame, 5 + len)))
    }
}

/// Output bytes as frames of at most [`MAX_FRAME_PAYLOAD`] bytes each, encoded back to back.
pub fn output_frames(stderr: bool, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 5 * (1 + bytes.len() / MAX_FRAME_PAYLOAD));
    for chunk in bytes.chunks(MAX_FRAME_PAYLOAD) {
        let f = if stderr {
            Frame::Stderr(chunk.to_vec())
        } else {
            Frame::Stdout(chunk.to_vec())
        };
        out.extend_from_slice(&f.encode());
    }
    out
}

/// Whether `s` has the shape of a ticket (the client refuses anything else before connecting).
pub fn is_ticket(s: &str) -> bool {
    s.strip_prefix(TICKET_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A ticket from 32 random bytes (the daemon supplies the randomness).
pub fn ticket_from(bytes: &[u8; 32]) -> String {
    let mut s = String::with_capacity(TICKET_PREFIX.len() + 64);
    s.push_str(TICKET_PREFIX);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Single-quotes `s` for a POSIX shell unless it is made only of characters no shell treats
/// specially.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command Claude Code runs instead of the agent's: `[cd DIR && ]/abs/cmdgate-run
/// [--socket PATH] TICKET` (`socket` when the hook's socket is not the client's default, as in
/// system mode, where the hook's comes from its registered command line).
pub fn client_command(client: &str, socket: Option<&str>, ticket: &RunTicket) -> String {
    let run = match socket {
        Some(s) => format!(
            "{} --socket {} {}",
            shell_quote(client),
            shell_quote(s),
            ticket.ticket
        ),
        None => format!("{} {}", shell_quote(client), ticket.ticket),
    };
    match &ticket.cd {
        Some(dir) => format!("cd {} && {run}", shell_quote(dir)),
        None => run,
    }
}

/// Whether a command Claude Code reports having run (PostToolUse's `tool_input.command`) is the
/// client redeeming `ticket`: the ticket is the client's last argument.
pub fn ran_through_client(reported: &str, ticket: &str) -> bool {
    let words: Vec<&str> = reported.split_whitespace().collect();
    words.iter().enumerate().any(|(i, w)| {
        let is_client = w
            .trim_matches('\'')
            .rsplit('/')
            .next()
            .is_some_and(|name| name == CLIENT_NAME);
        is_client
            && match &words[i + 1..] {
                [t, ..] if *t == ticket => true,
                ["--socket", _, t, ..] => *t == ticket,
                _ => false,
            }
    })
}

/// Splits a leading `cd DIR &&` off a command when `DIR` is one plainly written word (no
/// expansion: no `$`, backquote, `~`, glob, or escape; single quotes allowed around it), and the
/// rest is not empty. Returns `(DIR, rest)`. Anything else is `None`: the whole command runs in the
/// mirror (Claude Code then stays in its directory).
pub fn split_leading_cd(command: &str) -> Option<(String, &str)> {
    let s = command.trim_start_matches([' ', '\t']);
    let s = s.strip_prefix("cd")?;
    if !s.starts_with([' ', '\t']) {
        return None;
    }
    let s = s.trim_start_matches([' ', '\t']);
    let (dir, rest) = if let Some(quoted) = s.strip_prefix('\'') {
        let end = quoted.find('\'')?;
        (quoted[..end].to_string(), &quoted[end + 1..])
    } else {
        let end = s.find([' ', '\t']).unwrap_or(s.len());
        let word = &s[..end];
        if !word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b))
        {
            return None;
        }
        (word.to_string(), &s[end..])
    };
    if dir.is_empty() || dir == "-" || dir.starts_with('-') || dir.contains('\n') {
        return None;
    }
    // The quoted word must end the word: `cd 'a'b` is not split.
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let rest = rest.trim_start_matches([' ', '\t']).strip_prefix("&&")?;
    let rest = rest.trim_start_matches([' ', '\t', '\n']);
    if rest.trim().is_empty() || rest.starts_with('&') {
        return None;
    }
    Some((dir, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(exit: Option<i32>, signal: Option<i32>, status: RunStatus) -> RunEnd {
        RunEnd {
            v: 1,
            run_id: "r1".into(),
            exit,
            signal,
            status,
            message: String::new(),
        }
    }

    #[test]
    fn exit_statuses_are_a_shells() {
        use RunStatus::*;
        for (exit, signal, status, want) in [
            (Some(0), None, Committed, 0),
            (Some(2), None, Committed, 2),
            (Some(101), None, Committed, 101),
            (None, Some(9), Committed, 137),
            (None, Some(15), Failed, 143),
            (Some(0), None, RolledBack, 1),
            (Some(3), None, RolledBack, 3),
            (Some(0), None, Conflict, 1),
            (None, None, Failed, 1),
        ] {
            assert_eq!(
                end(exit, signal, status).exit_status(),
                want,
                "{exit:?} {signal:?} {status:?}"
            );
        }
    }

    #[test]
    fn frames_round_trip_and_split() {
        let e = end(Some(1), None, RunStatus::RolledBack);
        let mut bytes = Frame::Stdout(b"hi".to_vec()).encode();
        bytes.extend(Frame::Heartbeat.encode());
        bytes.extend(Frame::End(e.clone()).encode());
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((f, n)) = Frame::decode(&bytes[at..]).unwrap() {
            got.push(f);
            at += n;
        }
        assert_eq!(at, bytes.len());
        assert_eq!(
            got,
            [
                Frame::Stdout(b"hi".to_vec()),
                Frame::Heartbeat,
                Frame::End(e)
            ]
        );
        // Partial input asks for more.
        assert_eq!(Frame::decode(&bytes[..3]).unwrap(), None);
        assert_eq!(Frame::decode(&[]).unwrap(), None);
        assert!(Frame::decode(&[9, 0, 0, 0, 0]).is_err());
        assert!(Frame::decode(&[1, 0xff, 0, 0, 0]).is_err());
        let big = output_frames(true, &vec![7u8; MAX_FRAME_PAYLOAD + 1]);
        let (first, n) = Frame::decode(&big).unwrap().unwrap();
        assert!(matches!(first, Frame::Stderr(b) if b.len() == MAX_FRAME_PAYLOAD));
        assert!(
            matches!(Frame::decode(&big[n..]).unwrap().unwrap().0, Frame::Stderr(b) if b.len() == 1)
        );
    }

    #[test]
    fn tickets() {
        let t = ticket_from(&[0xab; 32]);
        assert!(is_ticket(&t), "{t}");
        assert!(!is_ticket("cgt-"));
        assert!(!is_ticket(&t.to_uppercase()));
        assert!(!is_ticket(&format!("{t}0")));
        assert!(!is_ticket(&t.replace("cgt-", "cgx-")));
    }

    #[test]
    fn client_commands_and_the_integrity_check() {
        let t = ticket_from(&[1; 32]);
        let ticket = RunTicket {
            ticket: t.clone(),
            cd: Some("my dir".into()),
            command: "make".into(),
            expires_in_ms: 1,
        };
        let cmd = client_command("/opt/cmd gate/cmdgate-run", None, &ticket);
        assert_eq!(
            cmd,
            format!("cd 'my dir' && '/opt/cmd gate/cmdgate-run' {t}")
        );
        assert!(ran_through_client(&cmd, &t));
        assert!(ran_through_client(&format!("/usr/bin/cmdgate-run {t}"), &t));
        let sys = client_command(
            "/usr/bin/cmdgate-run",
            Some("/run/cmdgate/cmdgate.sock"),
            &ticket,
        );
        assert_eq!(
            sys,
            format!("cd 'my dir' && /usr/bin/cmdgate-run --socket /run/cmdgate/cmdgate.sock {t}")
        );
        assert!(ran_through_client(&sys, &t));
        assert!(!ran_through_client("make", &t));
        assert!(!ran_through_client(&format!("echo {t}"), &t));
        assert!(!ran_through_client(
            &format!("/usr/bin/cmdgate-run {}", ticket_from(&[2; 32])),
            &t
        ));
    }

    #[test]
    fn leading_cd() {
        assert_eq!(
            split_leading_cd("cd sub && make"),
            Some(("sub".into(), "make"))
        );
        assert_eq!(
            split_leading_cd("cd '/a b' &&  make test"),
            Some(("/a b".into(), "make test"))
        );
        assert_eq!(
            split_leading_cd("cd ../x&&make"),
            None,
            "a word runs into && without a space: not split"
        );
        for no in [
            "make",
            "cd sub",
            "cd sub && ",
            "cd sub; make",
            "cd sub || make",
            "cd $HOME && make",
            "cd ~ && make",
            "cd ~/x && make",
            "cd - && make",
            "cd \"sub\" && make",
            "cd 'a'b && make",
            "cd sub && & make",
            "cdsub && make",
            "cd a\\ b && make",
            "cd * && make",
        ] {
            assert_eq!(split_leading_cd(no), None, "{no}");
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/usr/bin/x"), "/usr/bin/x");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
