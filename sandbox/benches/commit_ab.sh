#!/usr/bin/env bash
# The commit bench (`sandbox/benches/commit.rs`, commit table only) for two builds side by side:
# the library of BEFORE (a git revision) and of the working tree, both under the working tree's
# harness, in alternating pairs so a change of load hits both alike. Prints one table: the
# median over the pairs of each build's median, the ratio after/before, the load before/after.
#
#   sandbox/benches/commit_ab.sh [BEFORE [PAIRS [ROUNDS]]]     (root; defaults 14c466c 3 3)
#
# BEFORE must have the APIs the harness uses (`mirror::Warm`: 14c466c or later); 14c466c is the
# library just before session 6's commit changes.
# Builds with the release profile made attributable (`strip = none`, line tables, no LTO: the
# same for both sides; callgrind can then name `commit::commit`). With CMDGATE_BENCH_LOCK=FILE it
# holds `flock FILE` while timing (two timing benches never overlap on a shared machine).
set -euo pipefail
before_rev=${1:-14c466c}
pairs=${2:-3}
rounds=${3:-3}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
target=${CARGO_TARGET_DIR:-$repo/target}
export CARGO_TARGET_DIR=$target CARGO_INCREMENTAL=0
export CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
export CARGO_PROFILE_RELEASE_LTO=false

bench_bin() { # build the commit bench in $1 with target dir $2, print its executable
    (cd "$1" && CARGO_TARGET_DIR=$2 cargo bench --no-run -p cmdgate-sandbox --bench commit \
        --message-format=json 2>/dev/null) |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | grep '/deps/commit-' | tail -1
}

src=$target/commit-ab/$before_rev
if [ ! -d "$src" ]; then
    mkdir -p "$src"
    git -C "$repo" archive "$before_rev" | tar -x -C "$src"
fi
# The same harness on both sides: only the library differs.
cp "$repo/sandbox/benches/commit.rs" "$src/sandbox/benches/commit.rs"
echo "building $before_rev and the working tree ($(git -C "$repo" rev-parse --short HEAD)+)" >&2
# Its own target dir: each bench runs the sandbox helper of its own build (a path built in).
before=$(bench_bin "$src" "$target/commit-ab/target")
cp "$before" "$target/commit-ab/before.bin"
after=$(bench_bin "$repo" "$target")
cp "$after" "$target/commit-ab/after.bin"

lock=()
[ -n "${CMDGATE_BENCH_LOCK:-}" ] && lock=(flock "$CMDGATE_BENCH_LOCK")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
out=$target/commit-ab/results.txt
: >"$out"
for i in $(seq 1 "$pairs"); do
    order="before after"
    [ $((i % 2)) -eq 0 ] && order="after before"
    for side in $order; do
        "${lock[@]}" env CMDGATE_BENCH_COMMIT_ONLY=1 CMDGATE_BENCH_ROUNDS="$rounds" \
            "$target/commit-ab/$side.bin" |
            awk -v side="$side" -F'|' '/ ms \|/ { gsub(/^ +| +$/, "", $2); v = $3; c = $5;
                gsub(/[^0-9.]/, "", v); gsub(/[^0-9.]/, "", c); print side "\t" $2 "\t" v "\t" c }' >>"$out"
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo "| commit, median of $pairs pairs × $rounds rounds | before ($before_rev) | after | after / before | CPU before | CPU after | CPU after / before |"
echo "|---|---:|---:|---:|---:|---:|---:|"
cut -f2 "$out" | awk '!seen[$0]++' | while IFS= read -r case; do
    med() { awk -F'\t' -v s="$1" -v c="$case" -v k="$2" '$1 == s && $2 == c { print $k }' "$out" |
        sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    awk -v c="$case" -v b="$(med before 3)" -v a="$(med after 3)" \
        -v cb="$(med before 4)" -v ca="$(med after 4)" \
        'BEGIN { printf "| %s | %.1f ms | %.1f ms | %.2f | %.1f ms | %.1f ms | %.2f |\n",
                 c, b, a, a / b, cb, ca, ca / cb }'
done
echo
echo "load average (1/5/15 min): before $load_before, after $load_after"
