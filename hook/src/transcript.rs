//! Reads the user's own turns from Claude Code's transcript for the daemon's model reviewer, on
//! routed calls only (never on the fast path). The hook runs as the agent and can read its
//! transcript; a daemon running as its own user (system mode) may not. Bounded: only the file's
//! last [`MAX_TAIL_BYTES`] are read; the parsing is the policy's (`policy::transcript`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

use cmdgate_policy::transcript::{newest_turns, NoTurns, MAX_TURN_CHARS};
use cmdgate_policy::wire::TranscriptTurns;

/// How much of the transcript's end is read.
pub const MAX_TAIL_BYTES: u64 = 4 << 20;

/// How long a routed call waits for Claude Code to write the transcript. Claude Code 2.1.332
/// writes it through a buffered queue: on a session's first tool call the file may not be on
/// disk yet when PreToolUse fires, or be there without the user's turn yet (with stream-json
/// input; tests/reviewer_claude_code.rs failed both ways). The wait is bounded well below the
/// hook's deadline.
pub const TRANSCRIPT_WAIT: Duration = Duration::from_millis(1500);

/// How often the transcript is looked at again while waiting for it.
const TRANSCRIPT_POLL: Duration = Duration::from_millis(15);

/// The newest user turns of the transcript at `path`, or why there are none. A transcript that
/// does not exist yet, or that was read whole and holds no user turn yet (only at a session's
/// start: Claude Code writes the prompt before it asks the model), is looked at again until
/// [`TRANSCRIPT_WAIT`] has passed. A tail without a user turn (a long run of tool output) is not
/// waited for: more output will not add one.
pub fn user_turns(path: Option<&str>) -> TranscriptTurns {
    user_turns_within(path, TRANSCRIPT_WAIT, || {
        std::thread::sleep(TRANSCRIPT_POLL)
    })
}

/// [`user_turns`] waiting at most `wait`, calling `between` between two looks.
fn user_turns_within(
    path: Option<&str>,
    wait: Duration,
    mut between: impl FnMut(),
) -> TranscriptTurns {
    let until = Instant::now() + wait;
    loop {
        let (found, not_yet) = user_turns_once(path);
        if !not_yet || Instant::now() >= until {
            return found;
        }
        between();
    }
}

/// One look at the transcript; `true` beside the answer when it is worth another look: the file
/// is missing, or was read whole and holds no user turn (Claude Code writes it moments later).
fn user_turns_once(path: Option<&str>) -> (TranscriptTurns, bool) {
    let Some(path) = path.filter(|p| p.starts_with('/')) else {
        return (
            TranscriptTurns::Unavailable("Claude Code named no transcript".into()),
            false,
        );
    };
    match read_tail(path) {
        Err(e) => (
            TranscriptTurns::Unavailable(format!("the transcript could not be read ({e})")),
            e.kind() == std::io::ErrorKind::NotFound,
        ),
        Ok((text, truncated)) => {
            let mut lines = text.lines();
            if truncated {
                // The first line of a tail is a fragment.
                lines.next();
            }
            match newest_turns(lines, truncated) {
                Ok(t) => (TranscriptTurns::Turns(t), false),
                Err(NoTurns::None) => (
                    TranscriptTurns::Unavailable("the transcript has no user turn".into()),
                    !truncated,
                ),
                Err(NoTurns::NewestTooLong { chars }) => (
                    TranscriptTurns::Unavailable(format!(
                        "the newest user turn is {chars} characters, over the {MAX_TURN_CHARS} a reviewer is shown"
                    )),
                    false,
                ),
            }
        }
    }
}

/// The hook runs as the agent, so the file grants nothing the agent could not read itself; still,
/// a FIFO or device at the path must not hang the hook (the watchdog would deny the call): only a
/// regular file, checked before opening, is read.
fn read_tail(path: &str) -> std::io::Result<(String, bool)> {
    if !std::fs::symlink_metadata(path)?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let len = meta.len();
    let start = len.saturating_sub(MAX_TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    Read::by_ref(&mut file as &mut File)
        .take(MAX_TAIL_BYTES)
        .read_to_end(&mut bytes)?;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), start > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_newest_user_turns_and_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let line = |t: &str| {
            format!(
                "{{\"type\":\"user\",\"uuid\":\"{t}\",\"message\":{{\"role\":\"user\",\"content\":\"{t}\"}}}}\n"
            )
        };
        std::fs::write(&path, format!("{}{}", line("one"), line("two"))).unwrap();
        match user_turns(path.to_str()) {
            TranscriptTurns::Turns(t) => assert_eq!(t.turns, vec!["one", "two"]),
            other => panic!("{other:?}"),
        }
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(
            user_turns(link.to_str()),
            TranscriptTurns::Unavailable(_)
        ));
        assert!(matches!(user_turns(None), TranscriptTurns::Unavailable(_)));
        std::fs::write(&path, "{\"type\":\"assistant\"}\n").unwrap();
        assert!(matches!(
            user_turns_within(path.to_str(), Duration::ZERO, || ()),
            TranscriptTurns::Unavailable(w) if w.contains("no user turn")
        ));
    }

    #[test]
    fn a_whole_transcript_without_a_user_turn_is_looked_at_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"type\":\"summary\"}\n").unwrap();
        let mut looks = 0;
        // Claude Code writes the user's turn after the first look.
        let found = user_turns_within(path.to_str(), Duration::from_secs(60), || {
            looks += 1;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            std::io::Write::write_all(
                &mut f,
                b"{\"type\":\"user\",\"uuid\":\"u1\",\"message\":{\"role\":\"user\",\"content\":\"go\"}}\n",
            )
            .unwrap();
        });
        assert_eq!(looks, 1);
        match found {
            TranscriptTurns::Turns(t) => assert_eq!(t.turns, vec!["go"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_tail_without_a_user_turn_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let filler = format!(
            "{{\"type\":\"assistant\",\"x\":\"{}\"}}\n",
            "a".repeat(1 << 20)
        );
        std::fs::write(&path, filler.repeat(5)).unwrap();
        let found = user_turns_within(path.to_str(), Duration::from_secs(60), || {
            panic!("a truncated tail is not looked at again")
        });
        assert!(matches!(found, TranscriptTurns::Unavailable(w) if w.contains("no user turn")));
    }
}
