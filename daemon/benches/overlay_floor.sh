#!/usr/bin/env bash
# The floor under a mirrored build: the same command run bare, in a plain kernel overlay of the
# project (no cmdgate at all: `mount -t overlay`, cmdgate's options), in a memory cgroup child
# with cmdgate's default limit, in a cpu cgroup child with no quota (cmdgate's default), and in
# new pid and mount namespaces — each round runs every side once, in turn, and the table gives
# the median of each side's difference from the bare run of the same round, with its quartiles
# (docs/benchmarks.md, "session 16" and "session 17").
#
#   sudo [FLOOR_SIDES="memcg cpucg"] daemon/benches/overlay_floor.sh PROJECT [ROUNDS] [COMMAND]
#
# FLOOR_SIDES picks the sides (bare is always one). For a cargo build, `-j 1` in COMMAND takes
# cargo's own random choice of which dependency to start first out of the times.
#
# PROJECT is copied to a fresh tmpfs (lower and upper both on it, so the filesystem under the
# overlay is the bare run's); COMMAND (default `cargo build --offline -q`) must build it without
# the network; before every run of every side, `target` is removed. Needs root (mount, cgroups).
set -euo pipefail
proj="${1:?usage: overlay_floor.sh PROJECT [ROUNDS] [COMMAND]}"
rounds="${2:-30}"
command="${3:-cargo build --offline -q}"
[ "$(id -u)" = 0 ] || { echo "overlay_floor.sh: needs root (mount, cgroups)" >&2; exit 2; }
[ -d "$proj" ] || { echo "overlay_floor.sh: no directory $proj" >&2; exit 2; }
case "$rounds" in '' | *[!0-9]*) echo "overlay_floor.sh: ROUNDS must be a number" >&2; exit 2 ;; esac

work="$(mktemp -d /tmp/overlay-floor.XXXXXX)"
mount -t tmpfs -o size=8g tmpfs "$work"
memcg=""
cleanup() {
    mountpoint -q "$work/ov" 2>/dev/null && umount "$work/ov"
    umount "$work" 2>/dev/null || true
    rmdir "$work" 2>/dev/null || true
    [ -n "$memcg" ] && rmdir "$memcg" 2>/dev/null || true
    [ -n "$cpucg" ] && rmdir "$cpucg" 2>/dev/null || true
}
trap cleanup EXIT
cp -a "$proj" "$work/p"
rm -rf "$work/p/target"

# A child of our own memory cgroup (v1 or v2), limited to three quarters of the machine's
# memory as cmdgate's runs are by default; skipped where there is no memory controller.
total_kb="$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)"
limit=$((total_kb * 1024 / 4 * 3))
if [ -d /sys/fs/cgroup/memory ]; then
    own="$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)"
    memcg="/sys/fs/cgroup/memory${own%/}/overlay-floor-$$"
    mkdir "$memcg" && echo "$limit" > "$memcg/memory.limit_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    own="$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)"
    memcg="/sys/fs/cgroup${own%/}/overlay-floor-$$"
    mkdir "$memcg" && echo "$limit" > "$memcg/memory.max"
fi
# A child of our own cpu cgroup with no quota (cmdgate's default: `cpu.cfs_quota_us` -1, or
# `cpu.max` "max"): the run is its own CFS task group, with no limit.
cpucg=""
if [ -d /sys/fs/cgroup/cpu ]; then
    own="$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' /proc/self/cgroup)"
    cpucg="/sys/fs/cgroup/cpu${own%/}/overlay-floor-$$"
    mkdir "$cpucg" && echo -1 > "$cpucg/cpu.cfs_quota_us"
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    own="$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)"
    cpucg="/sys/fs/cgroup${own%/}/overlay-floor-cpu-$$"
    mkdir "$cpucg" && echo max > "$cpucg/cpu.max"
fi
join_cpucg() { [ -f "$cpucg/tasks" ] && echo "$1" > "$cpucg/tasks" || echo "$1" > "$cpucg/cgroup.procs"; }
join_memcg() { [ -f "$memcg/tasks" ] && echo "$1" > "$memcg/tasks" || echo "$1" > "$memcg/cgroup.procs"; }
sides="bare overlay ns"
[ -n "$memcg" ] && sides="$sides memcg"
[ -n "$cpucg" ] && sides="$sides cpucg"
# FLOOR_SIDES="bare cpucg" (say) runs only those sides; bare is always among them.
if [ -n "${FLOOR_SIDES:-}" ]; then
    for s in $FLOOR_SIDES; do
        case " $sides " in *" $s "*) ;; *) echo "overlay_floor.sh: no side $s here (have: $sides)" >&2; exit 2 ;; esac
    done
    case " $FLOOR_SIDES " in *" bare "*) sides="$FLOOR_SIDES" ;; *) sides="bare $FLOOR_SIDES" ;; esac
fi

# Seconds the command took (bash's own clock, so no external `time` is needed).
timed() { local s e; s=$EPOCHREALTIME; "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; e=$EPOCHREALTIME; echo "$s $e" | awk '{printf "%.1f", ($2 - $1) * 1000}'; }
run_side() {
    rm -rf "$work/p/target"
    case "$1" in
        bare) (cd "$work/p" && timed bash -c "$command") ;;
        overlay)
            rm -rf "$work/upper" "$work/wd" && mkdir -p "$work/upper" "$work/wd" "$work/ov"
            mount -t overlay overlay -o "lowerdir=$work/p,upperdir=$work/upper,workdir=$work/wd,redirect_dir=off,metacopy=off,index=off,volatile" "$work/ov"
            (cd "$work/ov" && timed bash -c "$command")
            umount "$work/ov" ;;
        memcg) (join_memcg $BASHPID && cd "$work/p" && timed bash -c "$command") ;;
        cpucg) (join_cpucg $BASHPID && cd "$work/p" && timed bash -c "$command") ;;
        ns) CMD="$command" DIR="$work/p" unshare -m -p -f --mount-proc \
                bash -c "$(declare -f timed)"'; cd "$DIR" && timed bash -c "$CMD"' ;;
    esac
}

declare -A all
echo "overlay_floor: $rounds rounds of \`$command\` in a copy of $proj (sides: $sides)" >&2
for r in $(seq 1 "$rounds"); do
    line="round $r/$rounds:"
    for side in $sides; do
        ms="$(run_side "$side")"
        # A side that failed prints no time (its subshell's `exit` may be masked by what follows
        # it, as the overlay's unmount): stop rather than pair the wrong rounds.
        [ -n "$ms" ] || { echo "overlay_floor.sh: the $side side failed in round $r" >&2; exit 1; }
        all[$side]+="$ms "
        line+=" $side $ms"
    done
    echo "$line ms" >&2
done
ordered=()
for side in $sides; do ordered+=("${all[$side]}"); done
python3 - "$sides" "${ordered[@]}" <<'PY'
import sys, statistics as st
sides = sys.argv[1].split()
runs = {s: [float(x) for x in v.split()] for s, v in zip(sides, sys.argv[2:])}
bare = runs["bare"]
q = lambda v: (sorted(v)[len(v) // 4], st.median(v), sorted(v)[3 * len(v) // 4])
print("| side | rounds | median | − bare, same round: q1 / median / q3 | ratio of medians |")
print("|---|---:|---:|---:|---:|")
for s in sides:
    d = [a - b for a, b in zip(runs[s], bare)]
    q1, m, q3 = q(d)
    print(f"| {s} | {len(runs[s])} | {st.median(runs[s]):.1f} ms | {q1:+.1f} / {m:+.1f} / {q3:+.1f} ms | {st.median(runs[s]) / st.median(bare):.3f}× |")
PY
