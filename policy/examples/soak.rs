//! A long soak of the shell analyzer on the property tests' "shell soup"
//! (`tests/it/shell_properties.rs`, atoms in `tests/it/soup_atoms.rs`): millions of inputs, where
//! the tests take 2 000 a run. brush-parser has looped forever,
//! allocating, on inputs about one in 30 000 of these (`analyze.rs`, `plain_heredoc_delimiter`);
//! a run of the tests in CI found the last ones. Run it after touching the pre-checks or updating
//! brush-parser:
//!
//! ```text
//! cargo run --release -p cmdgate-policy --example soak -- [INPUTS] [SEED] [--more] [--trace]
//! ```
//!
//! With `--trace` each input is printed to stderr before it is analyzed, so the last line names
//! the culprit when the process dies; run it under `ulimit -v` (4 GB: a loop dies in
//! seconds). Inputs slower than 20 ms are printed as they are found; `--more` adds blanks, tabs,
//! here-document operators and tags, and closers to the soup.

use cmdgate_policy::shell::read::{classify_analysis, ReadPolicy};
use cmdgate_policy::shell::{analyze, Limits};
use std::time::Instant;

include!("../tests/it/soup_atoms.rs");

const MORE: &[&str] = &[
    "  ", "\t", "<<-", "<<", "$[", "$((", "'EOF'", "EOF", "\n", "}", ")", "${", "$(", "\\\n",
    "<<EOF", "\"", "'",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let mut numbers = args.iter().filter(|a| !a.starts_with("--"));
    let parse = |what: &str, s: Option<&String>, default: u64| -> u64 {
        s.map_or(default, |s| {
            s.parse().unwrap_or_else(|_| {
                eprintln!("soak: {what} must be a whole number, not {s:?}");
                std::process::exit(2)
            })
        })
    };
    let inputs = parse("INPUTS", numbers.next(), 1_000_000);
    let mut seed = parse("SEED", numbers.next(), 1).max(1);
    let trace = flag("--trace");
    let mut atoms = SOUP_ATOMS.to_vec();
    if flag("--more") {
        atoms.extend_from_slice(MORE);
    }
    // xorshift64: reproducible from the seed, no dependency.
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let policy = ReadPolicy::new("/home/agent");
    let mut worst = 0u128;
    let started = Instant::now();
    for i in 0..inputs {
        let len = (next() % 40) as usize;
        let words: Vec<&str> = (0..len)
            .map(|_| atoms[(next() % atoms.len() as u64) as usize])
            .collect();
        let input = words.join(" ");
        if trace {
            eprintln!("{i}\t{input:?}");
        }
        let t = Instant::now();
        let analysis = analyze(&input, &Limits::default());
        let _ = classify_analysis(&analysis, &policy);
        let us = t.elapsed().as_micros();
        worst = worst.max(us);
        if us > 20_000 {
            println!("slow: {us} µs for input {i}: {input:?}");
        }
        if (i + 1) % 1_000_000 == 0 {
            println!("{} inputs, {:.0?}", i + 1, started.elapsed());
        }
    }
    println!(
        "{inputs} inputs in {:.1?}, the slowest took {worst} µs",
        started.elapsed()
    );
}
