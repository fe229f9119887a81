//! Microbenchmark: shell analysis, and analysis plus read classification, on a ~200-byte and a
//! ~1 KiB command. Prints median and p90 per call. `cargo bench -p cmdgate-policy --bench analyze`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use cmdgate_policy::shell::read::{classify_analysis, ReadPolicy};
use cmdgate_policy::shell::{analyze, Limits};

/// A realistic ~200-byte read: a pipeline with a substitution, quoting and a redirection.
const SHORT: &str = "cd /work/main && git log --oneline -n 20 --author=\"$(git config --get user.email)\" \
                     -- src/ | grep -v 'Merge' | sed -n '1,10p' | awk '{print $1}' | sort | uniq -c 2>/dev/null";

fn long_command() -> String {
    // ~1 KiB: a mix of reads, loops, heredocs and re-entry.
    let mut s = String::new();
    let parts = [
        "for f in src/*.rs; do wc -l \"$f\"; done",
        "find . -name '*.toml' -not -path './target/*' -print | head -n 20",
        "rg -n 'fn (analyze|classify)' policy/src --type rust | cut -d: -f1 | sort -u",
        "bash -c 'git status --short && git diff --stat HEAD~3'",
        "if [ -f Cargo.lock ]; then grep -c '^name = ' Cargo.lock; else echo none; fi",
        "cat <<'EOF' | tr a-z A-Z\nhello world\nEOF",
        "jq -r '.packages[] | .name' metadata.json 2>/dev/null || true",
        "git branch -a -vv | awk '$1 != \"*\" {print $1}' | xargs -n1 echo",
    ];
    while s.len() < 1000 {
        for p in parts {
            if !s.is_empty() {
                s.push('\n');
            }
            s.push_str(p);
        }
    }
    s.truncate(s[..1024.min(s.len())].rfind('\n').unwrap_or(s.len()));
    s
}

fn measure(mut f: impl FnMut(), iterations: usize) -> (Duration, Duration) {
    for _ in 0..iterations / 10 {
        f();
    }
    let mut samples: Vec<Duration> = (0..iterations)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() * 9 / 10])
}

fn main() {
    let limits = Limits::default();
    let mut policy = ReadPolicy::new("/home/agent");
    policy.cwd = Some("/home/agent/project".to_owned());
    let long = long_command();
    let iterations = 20_000;
    println!("| input | bytes | commands | step | median | p90 |");
    println!("|---|---:|---:|---|---:|---:|");
    for (label, cmd) in [("short", SHORT), ("long", long.as_str())] {
        let commands = match analyze(cmd, &limits) {
            cmdgate_policy::shell::Analysis::Parsed(s) => s.commands.len(),
            cmdgate_policy::shell::Analysis::Unanalyzable(u) => {
                panic!("benchmark input unanalyzable: {u:?}")
            }
        };
        let (m, p) = measure(
            || drop(black_box(analyze(black_box(cmd), &limits))),
            iterations,
        );
        println!(
            "| {label} | {} | {commands} | analyze | {m:.1?} | {p:.1?} |",
            cmd.len()
        );
        let (m, p) = measure(
            || {
                let a = analyze(black_box(cmd), &limits);
                let _ = black_box(classify_analysis(&a, &policy));
            },
            iterations,
        );
        println!(
            "| {label} | {} | {commands} | analyze + classify | {m:.1?} | {p:.1?} |",
            cmd.len()
        );
    }
}
