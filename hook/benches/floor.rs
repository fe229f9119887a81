//! Whole-process benchmark of the hook against the floor any hook can reach: a static C program
//! that reads its stdin and prints `{}` (the issue's floor: linked against glibc; and the same
//! program linked against musl when `musl-gcc` or rustc's musl target is there, so a musl hook is
//! also read against a floor with the same C start-up: every row shows both). Same stdin, a
//! signed starter `CLAUDE_CMDS.md` in the project with its key pinned and its revision published
//! (the normal case: tier 0 vouches, the replay record is read), daemon absent (the denial is the
//! fail-closed path).
//!
//! Each round runs every program once (the floor and each hook) in an order taken from a balanced
//! Latin square (`orders`): every program runs in every slot and right after every other program
//! equally often. A process started right after a hook pays part of that hook's exit (~10–30 µs;
//! docs/benchmarks.md, "A fair order"), so a fixed order favours whichever build follows the
//! floor. Reports per-build medians, the median of the per-round paired ratios (and differences)
//! against the floor, with several hooks the per-round ratio to hook 1, and then each program's
//! median per slot of the round and per program run just before (the effects the order cancels).
//! Peak RSS from `/usr/bin/time -f %M`; with `HOOK_BENCH_CALLGRIND=1` also the instructions of one
//! run of each under callgrind (independent of machine load). Prints Markdown for
//! docs/benchmarks.md, then what one minor page fault and one `statx` cost on this machine (a small
//! static C program) and the load average at the end.
//!
//! Run: `cargo bench -p cmdgate-hook --bench floor`. Variables: `HOOK_BENCH_RUNS=N` rounds
//! (default 400); `HOOK_BENCH_BIN=path` another build of the hook (`path arg…` with arguments),
//! `path:path…` several in the same rounds, a row each (a before/after on a loaded machine);
//! `HOOK_BENCH_SPLIT=1` adds, before the hooks, the floor without a C runtime, a minimal
//! static-PIE Rust program (for the host's target and, when installed, its musl target) and the
//! first hook with an unknown argument (its start without the work), to split the time over the
//! floor;
//! `HOOK_BENCH_ORDER=fixed` the old order (floor, hook 1, hook 2 … in every round);
//! `HOOK_BENCH_GAP_US=N` a sleep before each run (to see the position effect go);
//! `HOOK_BENCH_DIR=dir` builds the project there and keeps it, with each case's stdin as
//! `case-N.json` and its environment as `env`, for `strace` or `perf` by hand. Needs `cc` with a
//! static libc (`libc6-dev`), and `rustc` for the split.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cmdgate_policy::tiermap::published::{self, Published};
use cmdgate_policy::tiermap::{self, PinnedKeys, SeenRevision, STARTER_MAP};
use ed25519_dalek::SigningKey;
use serde_json::json;

/// The 400-character compound read (the same string as `benches/hook.rs`).
const COMPOUND: &str =
    "git status --short && git log --oneline -20 | head -5; ls -la src | grep -v target | sort | \
     uniq -c | head -20; cat Cargo.toml | grep -E '^(name|version)'; grep -rn 'fn main' src | \
     head -3; git diff --stat HEAD | tail -1; head -n 20 README.md | wc -l; wc -l src/main.rs \
     src/lib.rs | sort -n; git branch --list | head; test -f Cargo.lock && echo locked; \
     git show --stat HEAD | head -3; ls -1 docs | head -3";

/// Cases: name, command, goal (hook median / floor median).
const CASES: &[(&str, &str, f64)] = &[
    ("`ls -la`", "ls -la", 1.2),
    ("`git status`", "git status", 1.2),
    ("400-char compound read", COMPOUND, 1.4),
    (
        "denial (`rm -rf build`, daemon absent)",
        "rm -rf build",
        1.3,
    ),
];

const FLOOR_C: &str = r#"#include <unistd.h>
int main(void) {
    char buf[65536];
    while (read(0, buf, sizeof buf) > 0) {}
    write(1, "{}\n", 3);
    return 0;
}
"#;

/// What one unit of the hook's remaining excess over the floor costs in this machine: a minor page
/// fault (an anonymous page's first touch, and a private file page's first write: the static-PIE
/// relocation's kind), and one `statx` of a path (what each of cmdgate's own paths costs to
/// resolve), and one `cpuid` instruction (a virtual machine traps it to the hypervisor; std's and
/// glibc's CPU feature detection run it at start). Medians of 201 rounds of 64 (16 for file pages,
/// 8 for `cpuid`).
const COST_C: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
#if defined(__x86_64__)
#include <cpuid.h>
static void one_cpuid(void) { unsigned a, b, c, d; __cpuid_count(7, 0, a, b, c, d); __asm__ volatile("" :: "r"(a), "r"(b), "r"(c), "r"(d)); }
#else
static void one_cpuid(void) {}
#endif
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    enum { REPS = 201, PAGES = 64, FILE_PAGES = 16, STATS = 64 };
    static double anon[REPS], file[REPS], stx[REPS], cpu[REPS];
    for (int r = 0; r < REPS; r++) {
        char *p = mmap(0, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        double t0 = now();
        for (int i = 0; i < PAGES; i++) p[i * 4096] = 1;
        anon[r] = (now() - t0) / PAGES;
        munmap(p, PAGES * 4096);
        int fd = open(argv[0], O_RDONLY);
        char *q = mmap(0, FILE_PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        t0 = now();
        for (int i = 0; i < FILE_PAGES; i++) q[i * 4096] ^= 1;
        file[r] = (now() - t0) / FILE_PAGES;
        munmap(q, FILE_PAGES * 4096);
        close(fd);
        struct statx sx;
        t0 = now();
        for (int i = 0; i < STATS; i++) statx(AT_FDCWD, argv[1], AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx);
        stx[r] = (now() - t0) / STATS;
        t0 = now();
        for (int i = 0; i < 8; i++) one_cpuid();
        cpu[r] = (now() - t0) / 8;
    }
    qsort(anon, REPS, sizeof *anon, cmp); qsort(file, REPS, sizeof *file, cmp); qsort(stx, REPS, sizeof *stx, cmp);
    qsort(cpu, REPS, sizeof *cpu, cmp);
    printf("%.0f %.0f %.0f %.0f\n", anon[REPS / 2], file[REPS / 2], stx[REPS / 2], cpu[REPS / 2]);
    return 0;
}
"#;

/// Builds and runs [`COST_C`] in `dir` (`statx` of `path`): nanoseconds of an anonymous fault, a
/// file page's copy-on-write fault, a `statx` and a `cpuid`.
fn unit_costs(dir: &Path, path: &Path) -> Option<(u64, u64, u64, u64)> {
    let src = dir.join("cost.c");
    let bin = dir.join("cost");
    std::fs::write(&src, COST_C).ok()?;
    let built = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?;
    if !built.success() {
        return None;
    }
    let out = Command::new(&bin).arg(path).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = text.split_whitespace().filter_map(|n| n.parse().ok());
    Some((v.next()?, v.next()?, v.next()?, v.next()?))
}

/// A program to time: a path and its arguments (`HOOK_BENCH_BIN` entries are split on spaces).
#[derive(Clone)]
struct Prog {
    path: PathBuf,
    args: Vec<String>,
}

impl Prog {
    fn parse(entry: &str) -> Prog {
        let mut words = entry.split_whitespace();
        Prog {
            path: PathBuf::from(words.next().unwrap_or_default()),
            args: words.map(str::to_string).collect(),
        }
    }

    fn show(&self) -> String {
        let mut s = self.path.display().to_string();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

fn run_once(program: &Prog, env: &[(String, String)], stdin: &[u8]) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut child = Command::new(&program.path)
        .args(&program.args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(stdin).expect("write stdin");
    drop(pipe);
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("read");
    let status = child.wait().expect("wait");
    let took = start.elapsed();
    assert!(status.success(), "{} exited {status:?}", program.show());
    (took, out)
}

/// Runs `program` under `wrapper` (`/usr/bin/time -f %M`, callgrind) and returns its stderr.
fn wrapped(
    wrapper: &[&str],
    program: &Prog,
    env: &[(String, String)],
    stdin: &[u8],
) -> Option<String> {
    let mut child = Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(&program.path)
        .args(&program.args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut pipe = child.stdin.take()?;
    let _ = pipe.write_all(stdin);
    drop(pipe);
    let out = child.wait_with_output().ok()?;
    Some(String::from_utf8_lossy(&out.stderr).into_owned())
}

fn peak_rss_kib(program: &Prog, env: &[(String, String)], stdin: &[u8]) -> Option<u64> {
    wrapped(&["/usr/bin/time", "-f", "%M"], program, env, stdin)?
        .lines()
        .last()?
        .trim()
        .parse()
        .ok()
}

/// Instructions executed by one run (callgrind's `Collected`), all threads; the profile goes to
/// `$HOOK_BENCH_CALLGRIND_OUT` (for `callgrind_annotate`), else nowhere.
fn instructions(program: &Prog, env: &[(String, String)], stdin: &[u8]) -> Option<u64> {
    let err = wrapped(
        &[
            "valgrind",
            "--tool=callgrind",
            &format!(
                "--callgrind-out-file={}",
                std::env::var("HOOK_BENCH_CALLGRIND_OUT").unwrap_or_else(|_| "/dev/null".into())
            ),
        ],
        program,
        env,
        stdin,
    )?;
    let line = err.lines().find(|l| l.contains("Collected :"))?;
    line.rsplit(':').next()?.trim().parse().ok()
}

/// The least a Rust hook built like this one costs: `#![no_main]` (as the hook), reads stdin to its
/// end with std and writes `{}` with one `write(2)`; built by `rustc` with the `hook` profile's
/// settings (LTO, one codegen unit, `panic = "abort"`, stripped) and linked static-PIE
/// (`+crt-static`), as `.ci/build-release` builds the hook.
const RUST_MIN: &str = r#"#![no_main]
use std::io::Read;
extern "C" {
    fn write(fd: i32, buf: *const u8, n: usize) -> isize;
}
#[no_mangle]
extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    let mut buf = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut buf);
    // SAFETY: a valid buffer of 3 bytes.
    unsafe { write(1, b"{}\n".as_ptr(), 3) };
    0
}
"#;

/// The host's target triple (`rustc -vV`).
fn host_triple() -> Option<String> {
    let host = String::from_utf8(Command::new("rustc").arg("-vV").output().ok()?.stdout).ok()?;
    Some(
        host.lines()
            .find_map(|l| l.strip_prefix("host: "))?
            .to_string(),
    )
}

/// Builds [`RUST_MIN`] in `dir` for `target` (`None` without `rustc` or the target).
fn build_rust_min(dir: &Path, target: &str) -> Option<PathBuf> {
    let src = dir.join("rust_min.rs");
    let bin = dir.join(format!("rust-min-{target}"));
    std::fs::write(&src, RUST_MIN).ok()?;
    let host = target;
    let built = Command::new("rustc")
        .args([
            "--edition",
            "2021",
            "-C",
            "opt-level=3",
            "-C",
            "panic=abort",
            "-C",
            "lto",
        ])
        .args(["-C", "codegen-units=1", "-C", "strip=symbols"])
        .args(["-C", "target-feature=+crt-static", "--target", host, "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?;
    built.success().then_some(bin)
}

/// The floor without a C runtime: the same work as [`FLOOR_C`] in raw system calls from `_start`
/// (x86-64 Linux), so no libc start (glibc's probes the CPU with `cpuid`, which a virtual machine
/// traps: most of the static glibc floor's time on the development VM).
const RAW_C: &str = r#"#include <sys/syscall.h>
static long sys3(long n, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}
static char buf[65536];
void _start(void) {
    while (sys3(SYS_read, 0, (long)buf, sizeof buf) > 0) {}
    sys3(SYS_write, 1, (long)"{}\n", 3);
    sys3(SYS_exit_group, 0, 0, 0);
    for (;;) {}
}
"#;

/// Builds [`RAW_C`] in `dir` (`None` off x86-64 or without `cc`).
fn build_raw(dir: &Path) -> Option<PathBuf> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let src = dir.join("raw.c");
    let bin = dir.join("no-libc");
    std::fs::write(&src, RAW_C).ok()?;
    let built = Command::new("cc")
        .args(["-O2", "-static", "-nostdlib", "-fno-stack-protector", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .ok()?;
    built.success().then_some(bin)
}

/// Builds the floor program (static) in `dir`.
fn build_floor(dir: &Path) -> PathBuf {
    let src = dir.join("floor.c");
    let bin = dir.join("floor");
    std::fs::write(&src, FLOOR_C).expect("write floor.c");
    let status = Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(
        status.success(),
        "cc -static failed (is libc6-dev installed?)"
    );
    bin
}

/// Builds [`FLOOR_C`] linked against musl in `dir` (static), or says why it cannot: with
/// `musl-gcc` when present, else with `cc -static -nostdlib` and the C runtime files of rustc's
/// musl target (its `self-contained` directory: `crt1.o`, `crti.o`, `crtn.o`, `libc.a`). The
/// issue's floor is the glibc one; this one shows what a C program pays without glibc's start
/// (which probes the CPU with `cpuid`, trapped by a virtual machine), so a hook linked against
/// musl is not read as having less work than it has.
fn build_floor_musl(dir: &Path) -> Result<PathBuf, String> {
    let src = dir.join("floor-musl.c");
    let bin = dir.join("floor-musl");
    std::fs::write(&src, FLOOR_C).map_err(|e| format!("write floor-musl.c: {e}"))?;
    let built = |status: std::io::Result<std::process::ExitStatus>, how: &str| match status {
        Ok(s) if s.success() => Ok(bin.clone()),
        Ok(s) => Err(format!("{how} exited {s}")),
        Err(e) => Err(format!("{how}: {e}")),
    };
    if Command::new("musl-gcc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        let status = Command::new("musl-gcc")
            .args(["-O2", "-static", "-o"])
            .arg(&bin)
            .arg(&src)
            .status();
        return built(status, "musl-gcc");
    }
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("no musl-gcc, and rustc --print sysroot: {e}"))?;
    let host = host_triple().ok_or("no musl-gcc, and rustc -vV names no host")?;
    let musl = host.replace("-gnu", "-musl");
    if musl == host {
        return Err(format!("no musl-gcc, and the host {host} has no musl twin"));
    }
    let crt = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join(format!("lib/rustlib/{musl}/lib/self-contained"));
    let files = [
        "crt1.o",
        "crti.o",
        "crtbegin.o",
        "libc.a",
        "crtend.o",
        "crtn.o",
    ];
    if let Some(missing) = files.iter().find(|f| !crt.join(f).exists()) {
        return Err(format!(
            "no musl-gcc, and no {} (rustup target add {musl})",
            crt.join(missing).display()
        ));
    }
    // glibc's headers declare `read` and `write` as musl defines them; no fortified `_chk`
    // variants or stack protector, which musl's libc.a may not provide.
    let status = Command::new("cc")
        .args(["-O2", "-static", "-nostdlib", "-fno-stack-protector"])
        .args(["-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=0", "-o"])
        .arg(&bin)
        .args([
            crt.join("crt1.o"),
            crt.join("crti.o"),
            crt.join("crtbegin.o"),
        ])
        .arg(&src)
        .arg(crt.join("libc.a"))
        .arg("-lgcc")
        .args([crt.join("crtend.o"), crt.join("crtn.o")])
        .status();
    built(status, "cc -static -nostdlib with musl's crt files")
}

/// A project with the signed starter map, the key pinned and the revision published as accepted.
fn signed_project(root: &Path, work: &Path) {
    for sub in ["src", "docs"] {
        std::fs::create_dir_all(work.join(sub)).expect("mkdir");
    }
    std::fs::create_dir_all(work.join(".git")).expect("mkdir .git");
    let key = SigningKey::from_bytes(&[7; 32]);
    let signed = tiermap::sign(STARTER_MAP, "cmdgate-tiermap", 1, &key).expect("sign");
    std::fs::write(work.join(tiermap::FILE_NAME), &signed).expect("write map");
    let mut keys = PinnedKeys::new();
    keys.pin("cmdgate-tiermap", 1, key.verifying_key())
        .expect("pin");
    std::fs::create_dir_all(root.join("config")).expect("mkdir config");
    std::fs::write(root.join("config/trusted-keys"), keys.to_file_string()).expect("keys");
    let verified = tiermap::verify(&signed, &keys).expect("the map verifies");
    let canon = std::fs::canonicalize(work).expect("canonicalize");
    let record = published::render(&[Published {
        root: canon.display().to_string(),
        seen: SeenRevision {
            revision: verified.revision,
            content_hash: verified.content_hash,
        },
    }]);
    std::fs::create_dir_all(root.join("data")).expect("mkdir data");
    std::fs::write(root.join("data/tiermap-revisions"), record).expect("revisions");
}

/// The order of the programs in each round: a Williams design (a balanced Latin square) over the
/// `n` programs (floor first, then each hook). Over its rows every program runs in every position
/// equally often and directly after every other program equally often, so neither a slot of the
/// round nor the program that ran just before favours one build. `n` rows for an even `n`, `2n`
/// (each row and its reverse) for an odd one. `HOOK_BENCH_ORDER=fixed` keeps the old order (floor,
/// hook 1, hook 2 … in every round) to show the position effect.
fn orders(n: usize, fixed: bool) -> Vec<Vec<usize>> {
    if fixed || n == 1 {
        return vec![(0..n).collect()];
    }
    // First row 0, 1, n-1, 2, n-2 …; row r adds r to each (mod n).
    let mut first = vec![0];
    let (mut lo, mut hi) = (1, n - 1);
    while first.len() < n {
        first.push(lo);
        lo += 1;
        if first.len() < n {
            first.push(hi);
            hi -= 1;
        }
    }
    let mut rows: Vec<Vec<usize>> = (0..n)
        .map(|r| first.iter().map(|&p| (p + r) % n).collect())
        .collect();
    if n % 2 == 1 {
        let reversed: Vec<Vec<usize>> = rows
            .iter()
            .map(|r| r.iter().rev().copied().collect())
            .collect();
        rows.extend(reversed);
    }
    rows
}

fn median_f(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("HOOK_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let hooks: Vec<Prog> = match std::env::var("HOOK_BENCH_BIN") {
        Ok(list) => list.split(':').map(Prog::parse).collect(),
        Err(_) => vec![Prog::parse(env!("CARGO_BIN_EXE_cmdgate-hook"))],
    };
    let callgrind = std::env::var_os("HOOK_BENCH_CALLGRIND").is_some_and(|v| v == "1");
    let fixed = std::env::var_os("HOOK_BENCH_ORDER").is_some_and(|v| v == "fixed");
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = std::env::var_os("HOOK_BENCH_DIR").map(PathBuf::from);
    if let Some(k) = &kept {
        std::fs::create_dir_all(k).expect("HOOK_BENCH_DIR");
    }
    let root = kept.as_deref().unwrap_or(dir.path());
    let floor = Prog {
        path: build_floor(root),
        args: Vec::new(),
    };
    // The same floor linked against musl: a row of its own, and every program's paired ratio
    // against it beside the one against the issue's (glibc) floor.
    let floor_musl = match build_floor_musl(root) {
        Ok(path) => Some(Prog {
            path,
            args: Vec::new(),
        }),
        Err(why) => {
            println!("no musl floor row: {why}\n");
            None
        }
    };
    let work = root.join("work");
    signed_project(root, &work);
    let path = |rel: &str| root.join(rel).display().to_string();
    let env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("HOME".into(), path("home")),
        ("CMDGATE_SOCKET".into(), path("absent.sock")),
        ("CMDGATE_SPOOL_DIR".into(), path("spool")),
        ("CMDGATE_CONFIG_DIR".into(), path("config")),
        ("CMDGATE_HOME".into(), path("data")),
        ("CLAUDE_PROJECT_DIR".into(), work.display().to_string()),
    ];
    if kept.is_some() {
        let lines: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(root.join("env"), lines.concat()).expect("write env");
    }
    // Program 0 is the (glibc) floor, program 1 the musl floor when it was built, then hook 1 …
    let mut programs = vec![floor.clone()];
    programs.extend(floor_musl.iter().cloned());
    let floors = programs.len();
    programs.extend(hooks.iter().cloned());
    // `HOOK_BENCH_SPLIT=1`: programs before the hooks that split the hook's time over the floor
    // into the C runtime's start, Rust's, this binary's image, and the work (docs/benchmarks.md):
    // the floor without a C runtime, the minimal Rust program for the host's target and (when
    // installed) its musl target, and the first hook without its work.
    let mut first_hook = floors;
    if std::env::var_os("HOOK_BENCH_SPLIT").is_some_and(|v| v == "1") {
        let prog = |path| Prog {
            path,
            args: Vec::new(),
        };
        let host = host_triple().expect("rustc -vV names the host");
        let mut split: Vec<Prog> = build_raw(root).into_iter().map(prog).collect();
        split.push(prog(
            build_rust_min(root, &host).expect("rustc builds the minimal Rust program"),
        ));
        let musl = host.replace("-gnu", "-musl");
        if musl != host {
            split.extend(build_rust_min(root, &musl).map(prog));
        }
        // An unknown argument: the hook starts (the whole image, its relocations, the deadline
        // timer), reads and parses stdin, and prints the fail-closed answer for an unusable
        // configuration; none of the work (map, analysis, paths, spool).
        let mut no_work = hooks[0].clone();
        no_work.args.push("--bench-no-work".into());
        split.push(no_work);
        first_hook = floors + split.len();
        split.extend(programs.drain(floors..));
        programs.extend(split);
    }
    let n = programs.len();
    // Who program `p` is, in the tables.
    let who = |p: usize| match p {
        0 => "glibc floor".to_string(),
        1 if floors == 2 => "musl floor".to_string(),
        _ => format!("hook {}", p - floors + 1),
    };
    let design = orders(n, fixed);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    for (p, prog) in programs.iter().enumerate() {
        println!("program {p} ({}): {}", who(p), prog.show());
    }
    println!(
        "\n{runs} rounds per case after 20 warm-up rounds, each round every program once, in the \
         order {} (rows used in turn, of the program numbers above); load average at start: {}\n",
        if fixed {
            "fixed (HOOK_BENCH_ORDER=fixed)".to_string()
        } else {
            format!(
                "of a balanced Latin square {}",
                design
                    .iter()
                    .map(|r| r.iter().map(|p| p.to_string()).collect::<String>())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        },
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "Hook and floor medians of all rounds; *paired*: the median over rounds of the hook's time \
         divided by (minus) the floor's in the same round; *glibc floor*: the issue's floor (a \
         static glibc C program; its start probes the CPU with `cpuid`, which a virtual machine \
         traps), the goals are against it; *musl floor*: the same C program linked against musl \
         (no such probing): a hook linked against musl skips that probing too, so read its ratio \
         to the musl floor for the hook's own cost; *vs hook 1*: the median of the per-round ratio \
         to hook 1.\n"
    );
    println!("| case | decision | median | glibc floor median | ratio of medians | paired ratio, glibc floor | paired excess, glibc floor | musl floor median | paired ratio, musl floor | paired excess, musl floor | vs hook 1 | goal (glibc floor) | peak RSS | floors' peak RSS (glibc / musl) | instructions / glibc floor / musl floor |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // Per case, per program, per slot of the round: the times (for the position table).
    let mut by_slot: Vec<Vec<Vec<Vec<f64>>>> = Vec::new();
    let mut same_answers = Vec::new();
    let mut by_pred: Vec<Vec<Vec<Vec<f64>>>> = Vec::new();
    for (case, (name, command, goal)) in CASES.iter().enumerate() {
        let stdin = serde_json::to_vec(&json!({
            "session_id": "bench", "transcript_path": "/dev/null", "cwd": work.display().to_string(),
            "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "bench"}, "tool_use_id": "toolu_bench",
        }))
        .expect("encode");
        if kept.is_some() {
            std::fs::write(root.join(format!("case-{case}.json")), &stdin).expect("write stdin");
        }
        for round in 0..20 {
            for &p in &design[round % design.len()] {
                run_once(&programs[p], &env, &stdin);
            }
        }
        // t[p][round] in seconds; slots[p][slot] the times of program p run in that slot.
        let mut t: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); n];
        let mut slots: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n]; n];
        // after[p][q]: the times of program p run right after program q.
        let mut after: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n]; n];
        let mut answers: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut last = *design[(runs + 19) % design.len()]
            .last()
            .expect("a program");
        let gap = std::env::var("HOOK_BENCH_GAP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros);
        for round in 0..runs {
            for (slot, &p) in design[round % design.len()].iter().enumerate() {
                if let Some(gap) = gap {
                    std::thread::sleep(gap);
                }
                let (d, out) = run_once(&programs[p], &env, &stdin);
                t[p].push(d.as_secs_f64());
                slots[p][slot].push(d.as_secs_f64());
                after[p][last].push(d.as_secs_f64());
                last = p;
                answers[p].get_or_insert(out);
            }
        }
        by_pred.push(after);
        same_answers.push(answers[first_hook..].windows(2).all(|w| w[0] == w[1]));
        let fm = median_f(&mut t[0].clone());
        let rss =
            |p| peak_rss_kib(p, &env, &stdin).map_or("n/a".to_string(), |k| format!("{k} KiB"));
        let floors_rss = format!(
            "{} / {}",
            rss(&floor),
            floor_musl.as_ref().map_or("-".to_string(), rss)
        );
        let count =
            |p: &Prog| instructions(p, &env, &stdin).map_or("n/a".to_string(), |i| i.to_string());
        let floors_ir = if callgrind {
            format!(
                "{} / {}",
                count(&floor),
                floor_musl.as_ref().map_or("-".to_string(), count)
            )
        } else {
            String::new()
        };
        // The per-round ratio and difference of program `p` against program `q`.
        let paired = |p: usize, q: usize| {
            let mut ratio: Vec<f64> = t[p].iter().zip(&t[q]).map(|(h, f)| h / f).collect();
            let mut excess: Vec<f64> = t[p].iter().zip(&t[q]).map(|(h, f)| h - f).collect();
            (median_f(&mut ratio), median_f(&mut excess))
        };
        for (p, hook) in programs.iter().enumerate().skip(1) {
            let hm = median_f(&mut t[p].clone());
            let (ratio, excess) = paired(p, 0);
            let vs_musl = if floors == 2 && p > 1 {
                let (r, e) = paired(p, 1);
                format!(
                    "{:.0} µs | {r:.2}× | {:.0} µs",
                    median_f(&mut t[1].clone()) * 1e6,
                    e * 1e6
                )
            } else {
                "- | - | -".into()
            };
            let vs_first = if p > floors {
                let mut r: Vec<f64> = t[p].iter().zip(&t[floors]).map(|(h, a)| h / a).collect();
                format!("{:.3}×", median_f(&mut r))
            } else {
                "-".into()
            };
            let decision = answers[p]
                .as_deref()
                .and_then(|out| serde_json::from_slice::<serde_json::Value>(out).ok())
                .and_then(|v| {
                    v["hookSpecificOutput"]["permissionDecision"]
                        .as_str()
                        .map(str::to_string)
                })
                .unwrap_or_else(|| if p < floors { "-" } else { "?" }.into());
            let ir = if callgrind {
                format!("{} / {floors_ir}", count(hook))
            } else {
                "-".into()
            };
            let label = if n > 2 {
                format!("{name} ({})", who(p))
            } else {
                (*name).to_string()
            };
            let goal = if p >= floors {
                format!("≤ {goal}×")
            } else {
                "-".into()
            };
            println!(
                "| {label} | {decision} | {:.0} µs | {:.0} µs | {:.2}× | {ratio:.2}× | {:.0} µs | {vs_musl} | {vs_first} | {goal} | {} | {floors_rss} | {ir} |",
                hm * 1e6,
                fm * 1e6,
                hm / fm,
                excess * 1e6,
                rss(hook),
            );
        }
        by_slot.push(slots);
    }
    println!(
        "\nAnswers byte-identical across the hooks (from {}), per case: {}",
        who(first_hook),
        same_answers
            .iter()
            .map(|s| if *s { "yes" } else { "NO" })
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The position effect: each program's median in each slot of the round, minus its median
    // over all slots (µs). With a balanced order it cancels in the medians above; with
    // `HOOK_BENCH_ORDER=fixed` every program has one slot and this table is empty of contrast.
    println!("\nPosition effect (median in that slot of the round minus the program's overall median, µs; case: program: slots 0..):");
    print_offsets(&by_slot, &who);
    println!("\nWhat ran before (median after that program minus the program's overall median, µs; case: program: after program 0..):");
    print_offsets(&by_pred, &who);
    match unit_costs(root, &work.join(tiermap::FILE_NAME)) {
        Some((anon, file, statx, cpuid)) => println!(
            "\nThis machine: a minor fault {anon} ns (anonymous page, first touch), {file} ns (a \
             private file page's first write, as a relocation makes); one statx {statx} ns; one \
             cpuid {cpuid} ns."
        ),
        None => println!("\n(the unit costs need cc and a static libc)"),
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average at the end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// One table of the position diagnostics: for each case and program, the median of each group of
/// its times (a slot of the round, or what ran before it) minus its median over all groups, µs.
fn print_offsets(groups: &[Vec<Vec<Vec<f64>>>], who: &dyn Fn(usize) -> String) {
    for (case, programs) in groups.iter().enumerate() {
        for (p, per_group) in programs.iter().enumerate() {
            let mut all: Vec<f64> = per_group.iter().flatten().copied().collect();
            let overall = median_f(&mut all);
            let cells: Vec<String> = per_group
                .iter()
                .map(|v| {
                    if v.is_empty() {
                        "-".into()
                    } else {
                        format!("{:+.0}", (median_f(&mut v.clone()) - overall) * 1e6)
                    }
                })
                .collect();
            println!("  case {case}: {}: {}", who(p), cells.join(" "));
        }
    }
}
