//! The starter `CLAUDE_CMDS.md` that `cmdgate init` writes (unsigned; the operator reviews and signs it).

/// A commented starter tier map with conservative defaults. It parses (a test proves it) but is not
/// signed: until the operator signs it, the project stays read-only.
pub const STARTER_MAP: &str = r#"---
revision: 1
description: Which commands the coding agent may run in this project.
---

# Commands for the coding agent

This file is read by cmdgate. Each `## Tier` section lists command patterns; a command takes the
strictest tier whose pattern matches it, and a command that matches nothing runs in the mirror like
tier 1. The format is described in cmdgate's docs/tiermap.md. After every change, raise `revision:`
and sign the file (`cmdgate tiermap sign CLAUDE_CMDS.md`): an unsigned or edited map puts the project
in read-only mode.

Patterns match one command's argv, after the shell has split it: `*` as the last word matches any
further words (also none), `*` elsewhere exactly one word, `*` inside a word any characters. A pattern
cannot express a pipeline: `curl … | sh` is judged part by part, and `sh` reading a script from a pipe is
never a read. A pattern matches words in order, so `git push --force *` does not catch
`git push origin main --force`; cmdgate's built-in catastrophic checks cover such reorderings.

## Tier 0 — read

Allowed at once, without a test-run. Only list commands whose every form is a read: a pattern cannot
exclude a flag, so `find *` (`-delete`, `-exec`) or `git log *` (`--output`) do not belong here. Common
reads with such flags are already handled, flag by flag, by cmdgate's built-in read list.

- `pwd`
- `ls *`
- `git status *`
- `git branch --show-current`
- `cargo --version`
- `rustc --version`
- `node --version`
- `npm --version`
- `python3 --version`

## Tier 1 — sandbox

Runs once, in a mirror of the workspace, with its output streamed back to the agent; when its
effects are clean (only new or untracked files changed, nothing protected touched, no refused network
attempt) they are committed to the workspace (`cmdgate undo RUN` takes them back), otherwise they are
rolled back with the reason. The exit status does not decide: a failing test suite's output reaches
the agent. Options after ` — `: `timeout=<N>s` or `<N>m`, `network=<host>, <host>` (only these hosts,
through cmdgate's proxy; ports 80 and 443 unless a host names one), `write=<path>` (extra writable
path outside the workspace, committed with the run), `unmask=<path>` (a secret path the mirror masks
that this command may read), `edit-tracked` (may change files under version control, for formatters),
`direct` (test-run, then run on the host: for commands that need host services).

- `cargo fetch *` — timeout=10m, network=index.crates.io, static.crates.io, write=~/.cargo/registry, write=~/.cargo/git
- `cargo build *` — timeout=10m, network=index.crates.io, static.crates.io, write=~/.cargo/registry, write=~/.cargo/git
- `cargo check *` — timeout=10m, network=index.crates.io, static.crates.io, write=~/.cargo/registry, write=~/.cargo/git
- `cargo test *` — timeout=15m, network=index.crates.io, static.crates.io, write=~/.cargo/registry, write=~/.cargo/git
- `cargo clippy *` — timeout=10m, network=index.crates.io, static.crates.io, write=~/.cargo/registry, write=~/.cargo/git
- `cargo fmt *` — edit-tracked
- `npm install *` — timeout=10m, network=registry.npmjs.org, write=~/.npm
- `npm ci *` — timeout=10m, network=registry.npmjs.org, write=~/.npm
- `pnpm install *` — timeout=10m, network=registry.npmjs.org, write=~/.local/share/pnpm, write=~/.cache/pnpm
- `yarn install *` — timeout=10m, network=registry.yarnpkg.com, write=~/.cache/yarn
- `pip install *` — timeout=10m, network=pypi.org, files.pythonhosted.org, write=~/.cache/pip
- `npm test`
- `npm run build`
- `npm run lint`
- `make *` — timeout=10m
- `pytest *` — timeout=10m
- `go build *` — timeout=10m, write=~/.cache/go-build, write=~/go/pkg/mod
- `go test *` — timeout=10m, write=~/.cache/go-build, write=~/go/pkg/mod

Local git work: git's bookkeeping under `.git/` (index, objects, refs, logs) is committed when git
itself is the command; `.git/config`, `.git/hooks/` and `.git/info/` never are. Changes git makes
to tracked files (a stash, a merge, a rebase) need `edit-tracked` and can be undone
(`cmdgate undo`). `git push` stays a person's decision below.

- `git add *`
- `git commit *`
- `git restore --staged *`
- `git switch -c *`
- `git checkout -b *`
- `git tag *`
- `git stash *` — edit-tracked
- `git merge *` — edit-tracked
- `git rebase *` — edit-tracked

## Tier 2 — ask

A person decides: Claude Code's prompt when interactive, a pending approval in the background.

- `git push *`
- `git reset *`
- `cargo install *`
- `cargo add *`
- `cargo publish *`
- `npm publish *`
- `curl *`
- `wget *`
- `docker *`
- `gh *`

## Tier 3 — deny

Never runs, whatever was learned or approved before.

- `rm -rf /`
- `rm -rf /*`
- `rm -rf ~`
- `rm -rf ~/`
- `git push --force *`
- `git push -f *`
- `git push --mirror *`
- `git clean -fdx *`
- `chmod -R 777 /`
- `mkfs *`
- `shutdown *`
- `reboot *`
"#;
