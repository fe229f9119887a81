#!/usr/bin/env bash
# Load-independent cost of one routed decision of a daemon build (docs/benchmarks.md, "Why a
# routed decision cost more after the reshape"): `git push origin main` (tier 2 => ask, cached
# map, audited, no test-run), one client, sequential. A fresh `cmdgate init --sign` store; 50
# warm-up decisions, then N counted ones: system calls from `strace -f -c` attached to every
# thread of the daemon, and instructions from `valgrind --tool=callgrind` (zeroed after the
# warm-up, dumped after the N), each divided by N. Prints a Markdown table, a row per build.
#
#   daemon/benches/routing_counts.sh BIN_DIR...
#
# Each BIN_DIR holds one build's `cmdgate` and `cmdgated` (release, for the instruction count);
# the row is named after the directory. ROUTING_COUNTS_N sets N (default 200). Needs strace,
# valgrind (callgrind_control) and python3. Every path is under a temp dir. Instructions and
# system calls do not depend on the machine's load; nothing here is a time.
set -euo pipefail
n=${ROUTING_COUNTS_N:-200}
top=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$top"
}
trap cleanup EXIT

# N sequential decisions on the decide socket, ids from FIRST (a 200 each, the first an ask).
decide() { # SOCKET PROJ N FIRST
    python3 - "$@" <<'EOF'
import json, socket, sys
sock, proj, n, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(first, first + n):
    body = json.dumps({"v": 1, "event": "PreToolUse", "session_id": "c-%d" % (i % 8),
                       "tool_use_id": "c%d" % i, "cwd": proj, "project_dir": proj,
                       "tool_name": "Bash", "tool_input": {"command": "git push origin main"}}).encode()
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"POST /v1/decide HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    raw = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        raw += c
    s.close()
    assert raw[9:12] == b"200", raw[:200]
    if i == first:
        assert b'"decision":"ask"' in raw, raw[-400:]
EOF
}

# start MODE: a fresh store and a daemon (under callgrind for MODE=callgrind); sets d and pid.
start() {
    d=$(mktemp -d "$top/run.XXXX")
    mkdir -p "$d/home" "$d/conf" "$d/data" "$d/proj"
    export HOME=$d/home CMDGATE_HOME=$d/data CMDGATE_CONFIG_DIR=$d/conf \
        CMDGATE_SPOOL_DIR=$d/spool CLAUDE_PROJECT_DIR=$d/proj
    unset XDG_RUNTIME_DIR XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME CMDGATE_MODE CMDGATE_SOCKET
    "$bin/cmdgate" init --sign --project "$d/proj" >/dev/null 2>&1
    if [ "$1" = callgrind ]; then
        valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" "$bin/cmdgated" >"$d/log" 2>&1 &
    else
        "$bin/cmdgated" >"$d/log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 1 1200); do [ -S "$d/data/admin.sock" ] && break; sleep 0.1; done
    [ -S "$d/data/admin.sock" ] || { cat "$d/log" >&2; exit 1; }
    decide "$d/data/cmdgate.sock" "$d/proj" 50 1000000
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

# count BIN_DIR: one row.
count() {
    bin=$(cd "$1" && pwd)
    label=$(basename "$bin")
    start strace
    strace -f -c -o "$d/strace.txt" -p "$(ls /proc/$pid/task | paste -sd,)" 2>/dev/null &
    sp=$!
    # strace prints nothing until it has attached; its summary counts only what follows.
    sleep 1
    decide "$d/data/cmdgate.sock" "$d/proj" "$n" 0
    kill -INT $sp
    wait $sp || true
    stop
    per() { awk -v s="$1" -v n="$n" '$NF == s { printf "%.1f", $4 / n; f = 1 } END { if (!f) printf "0" }' "$d/strace.txt"; }
    statx=$(per statx) futex=$(per futex) fsync=$(per fsync) readlink=$(per readlink)
    pwrite=$(per pwrite64) epoll=$(per epoll_wait)

    start callgrind
    callgrind_control -z "$pid" >/dev/null 2>&1
    decide "$d/data/cmdgate.sock" "$d/proj" "$n" 0
    callgrind_control -d "$pid" >/dev/null 2>&1
    stop
    # The dump after the N: every thread's instructions since the zeroing.
    instr=$(awk '/^summary:/ { s = $2 } END { printf "%.0f", s }' "$d/cg.out.1")
    printf '| %s | %d k | %s | %s | %s | %s | %s | %s |\n' "$label" $((instr / n / 1000)) \
        "$statx" "$readlink" "$futex" "$epoll" "$fsync" "$pwrite"
}

echo "| build | instructions | \`statx\` | \`readlink\` | \`futex\` | \`epoll_wait\` | \`fsync\` | \`pwrite64\` |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for b in "$@"; do count "$b"; done
