//! The kernel-paths table (`kernel_table/cases.txt`) through the policy, on an in-memory file
//! system laid out as the end-to-end gate lays out its temp dir. The same cases run end to end in
//! `tests/tests/kernel_paths.rs`.

// The table stays beside this binary: the hook and the end-to-end tests include it by path too.
#[allow(dead_code)] // the real-file-system half is for the hook and end-to-end tests
#[path = "../kernel_table/mod.rs"]
mod kernel_table;

use std::cell::RefCell;
use std::collections::BTreeMap;

use cmdgate_policy::decide::kernel::{Kind, Resolution};
use cmdgate_policy::decide::paths::normalise;
use cmdgate_policy::decide::{decide_with, Context, Request, RuleSet, Step, Tool};
use cmdgate_policy::shell::{read::ReadPolicy, Limits};
use cmdgate_policy::tiermap::{sign, PinnedKeys, Snapshot};
use ed25519_dalek::SigningKey;
use kernel_table::Step as Setup;

const W: &str = "/w";
const HOME: &str = "/w/home";
const PROJ: &str = "/w/proj";

#[derive(Debug, Clone)]
enum Node {
    Dir,
    File { ino: u64 },
    Link(String),
}

/// An in-memory file system: absolute normalised path → node; hard links share an inode.
#[derive(Default)]
struct Fs {
    nodes: BTreeMap<String, Node>,
    next_ino: u64,
}

impl Fs {
    fn dir(&mut self, p: &str) {
        let mut at = String::new();
        for part in p.split('/').filter(|s| !s.is_empty()) {
            at = format!("{at}/{part}");
            self.nodes.entry(at.clone()).or_insert(Node::Dir);
        }
    }
    fn file(&mut self, p: &str) {
        self.dir(p.rsplit_once('/').unwrap().0);
        self.next_ino += 1;
        self.nodes
            .insert(p.to_owned(), Node::File { ino: self.next_ino });
    }
    fn abs(p: &str) -> String {
        if p.starts_with('/') {
            normalise(p)
        } else {
            normalise(&format!("{PROJ}/{p}"))
        }
    }

    /// Component by component, as the kernel walks: links followed (the last one too), `..`
    /// after a link goes to the link target's parent.
    fn resolve(&self, path: &str) -> Resolution {
        let mut todo: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .rev()
            .map(str::to_owned)
            .collect();
        let mut cur = String::new();
        let mut hops = 0;
        while let Some(part) = todo.pop() {
            match part.as_str() {
                "." => continue,
                ".." => {
                    cur = cur
                        .rsplit_once('/')
                        .map(|(a, _)| a.to_owned())
                        .unwrap_or_default();
                    continue;
                }
                _ => {}
            }
            let cand = format!("{cur}/{part}");
            match self.nodes.get(&cand) {
                None => {
                    let mut rest = cand;
                    while let Some(p) = todo.pop() {
                        rest = format!("{rest}/{p}");
                    }
                    return Resolution::Missing {
                        real: normalise(&rest),
                    };
                }
                Some(Node::Link(target)) => {
                    hops += 1;
                    if hops > 40 {
                        return Resolution::Unknown { why: "loop".into() };
                    }
                    for p in target.split('/').filter(|s| !s.is_empty()).rev() {
                        todo.push(p.to_owned());
                    }
                    if target.starts_with('/') {
                        cur = String::new();
                    }
                }
                Some(Node::File { .. }) if !todo.is_empty() => {
                    return Resolution::Unknown {
                        why: "not a directory".into(),
                    }
                }
                Some(_) => cur = cand,
            }
        }
        let real = if cur.is_empty() { "/".to_owned() } else { cur };
        match self.nodes.get(&real) {
            Some(Node::File { ino }) => {
                let links = self
                    .nodes
                    .values()
                    .filter(|n| matches!(n, Node::File { ino: i } if i == ino))
                    .count() as u64;
                Resolution::Exists {
                    real,
                    kind: Kind::File,
                    links,
                    id: (1, *ino),
                }
            }
            _ => Resolution::Exists {
                real,
                kind: Kind::Dir,
                links: 1,
                id: (1, 0),
            },
        }
    }

    fn apply(&mut self, step: &Setup) {
        match step {
            Setup::File(p) => self.file(&Fs::abs(p)),
            Setup::Dir(p) => self.dir(&Fs::abs(p)),
            Setup::Symlink { target, link } => {
                let link = Fs::abs(link);
                self.dir(link.rsplit_once('/').unwrap().0);
                self.nodes.insert(link, Node::Link(target.clone()));
            }
            Setup::HardLink { target, link } => {
                let node = self
                    .nodes
                    .get(&Fs::abs(target))
                    .cloned()
                    .expect("hard link target");
                self.nodes.insert(Fs::abs(link), node);
            }
            Setup::GitInit(d) => {
                let d = Fs::abs(d);
                for f in ["HEAD", "config"] {
                    self.file(&format!("{d}/.git/{f}"));
                }
                for s in ["hooks", "info", "objects", "refs"] {
                    self.dir(&format!("{d}/.git/{s}"));
                }
            }
            Setup::GitInitBare(d) => {
                let d = Fs::abs(d);
                for f in ["HEAD", "config"] {
                    self.file(&format!("{d}/{f}"));
                }
                for s in ["hooks", "objects", "refs"] {
                    self.dir(&format!("{d}/{s}"));
                }
            }
        }
    }

    /// The gate's layout: home, a git project, cmdgate's config (keys) and data (store).
    fn gate() -> Fs {
        let mut fs = Fs::default();
        fs.dir(HOME);
        fs.apply(&Setup::GitInit(PROJ.into()));
        fs.file(&format!("{PROJ}/tracked.txt"));
        fs.file(&format!("{W}/conf/trusted-keys"));
        fs.file(&format!("{W}/conf/dev-signing-key"));
        fs.file(&format!("{W}/data/cmdgate.db"));
        fs.dir("/proc/self");
        fs.nodes
            .insert("/proc/self/root".into(), Node::Link("/".into()));
        fs
    }
}

fn snapshot() -> Snapshot {
    let key = SigningKey::from_bytes(&[7; 32]);
    let mut keys = PinnedKeys::new();
    keys.pin("ops", 1, key.verifying_key()).unwrap();
    let map = "---\nrevision: 1\n---\n# t\n\n## Tier 0 — read\n- `make -n *`\n";
    Snapshot::load(Some(&sign(map, "ops", 1, &key).unwrap()), &keys, None)
}

#[test]
fn kernel_paths_table() {
    let snapshot = snapshot();
    assert!(snapshot.verified().is_some());
    let rules = RuleSet::default();
    let policy = ReadPolicy::new(HOME);
    // cmdgate's own paths as the hook and the daemon compute them for the gate's environment.
    let own = cmdgate_policy::locations::Locations::from_env(|k| match k {
        "HOME" => Some(HOME.to_owned()),
        "CMDGATE_CONFIG_DIR" => Some(format!("{W}/conf")),
        "CMDGATE_HOME" => Some(format!("{W}/data")),
        _ => None,
    })
    .own_paths(HOME);
    let mut failures = Vec::new();
    for case in kernel_table::cases(W) {
        let fs = RefCell::new(Fs::gate());
        for s in &case.setup {
            fs.borrow_mut().apply(s);
        }
        let kernel = |p: &str| fs.borrow().resolve(p);
        let tool = Tool::from_claude(&case.tool, &case.input()).unwrap();
        let ctx = Context {
            snapshot: &snapshot,
            rules: &rules,
            breaker_open: false,
            read_policy: &policy,
            limits: Limits::default(),
            home: HOME,
            own_paths: &own,
        };
        let req = Request {
            tool: &tool,
            project_root: PROJ,
            cwd: PROJ,
        };
        let (got, why) = match decide_with(req, ctx, &kernel) {
            Step::Decided(d) => (d.verb().to_owned(), d.evidence().reason.clone()),
            Step::TestRun(p) => ("test-run".to_owned(), p.why),
        };
        if got != case.verdict {
            failures.push(format!(
                "{}: {} {:?} => {got}, want {} ({why})",
                case.name, case.tool, case.arg, case.verdict
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
