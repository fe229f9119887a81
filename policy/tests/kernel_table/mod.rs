//! The kernel-paths case table (`cases.txt`), parsed once for the policy's table test and the
//! end-to-end test (which includes this file by path), so both run the same cases.

/// One setup step, relative paths under the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    File(String),
    Dir(String),
    Symlink { target: String, link: String },
    HardLink { target: String, link: String },
    GitInit(String),
    GitInitBare(String),
}

/// One case.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub setup: Vec<Step>,
    pub tool: String,
    pub arg: String,
    pub verdict: String,
}

impl Case {
    /// The tool input Claude Code would send.
    pub fn input(&self) -> serde_json::Value {
        let key = match self.tool.as_str() {
            "Bash" => "command",
            "Grep" | "LS" | "Glob" => "path",
            "NotebookEdit" => "notebook_path",
            _ => "file_path",
        };
        let mut v = serde_json::json!({ key: self.arg });
        match self.tool.as_str() {
            "Grep" => v["pattern"] = "x".into(),
            "Glob" => v["pattern"] = "*".into(),
            "Write" => v["content"] = "x\n".into(),
            "MultiEdit" => v["edits"] = serde_json::json!([{"old_string": "a", "new_string": "b"}]),
            "NotebookEdit" => v["new_source"] = "x".into(),
            "Edit" => {
                v["old_string"] = "a".into();
                v["new_string"] = "b".into();
            }
            _ => {}
        }
        v
    }
}

/// The cases, with `$W` replaced by `w` (the directory holding home, proj, conf and data).
pub fn cases(w: &str) -> Vec<Case> {
    let text = include_str!("cases.txt");
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<String> = line
            .split(" | ")
            .map(|c| c.trim().replace("$W", w))
            .collect();
        assert_eq!(cols.len(), 5, "bad case line: {line}");
        let setup = cols[1]
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                let words: Vec<&str> = s.split_whitespace().collect();
                match words.as_slice() {
                    ["file", p] => Step::File((*p).into()),
                    ["dir", p] => Step::Dir((*p).into()),
                    ["ln", "-s", t, l] => Step::Symlink {
                        target: (*t).into(),
                        link: (*l).into(),
                    },
                    ["ln", t, l] => Step::HardLink {
                        target: (*t).into(),
                        link: (*l).into(),
                    },
                    ["git-init", d] => Step::GitInit((*d).into()),
                    ["git-init-bare", d] => Step::GitInitBare((*d).into()),
                    _ => panic!("bad setup step {s:?} in {line}"),
                }
            })
            .collect();
        out.push(Case {
            name: cols[0].clone(),
            setup,
            tool: cols[2].clone(),
            arg: cols[3].clone(),
            verdict: cols[4].clone(),
        });
    }
    out
}

/// Lays out the gate's directories under `w` (home, a git project with one tracked file, cmdgate's
/// config with its keys, data with its store) as the in-memory file system of the policy's test
/// does. The end-to-end gate makes its own; the hook's test uses this.
pub fn make_gate(w: &std::path::Path) {
    for d in ["home", "proj", "conf", "data"] {
        std::fs::create_dir_all(w.join(d)).unwrap();
    }
    git(&w.join("proj"), &["init", "-q", "."]);
    std::fs::write(w.join("proj/tracked.txt"), "precious\n").unwrap();
    std::fs::write(w.join("conf/trusted-keys"), "").unwrap();
    std::fs::write(w.join("conf/dev-signing-key"), "secret\n").unwrap();
    std::fs::write(w.join("data/cmdgate.db"), "").unwrap();
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "git {args:?} in {}", dir.display());
}

/// Applies one setup step on the real file system, relative paths under `proj`.
pub fn apply_real(proj: &std::path::Path, step: &Step) {
    let abs = |p: &str| proj.join(p);
    let parent = |p: &std::path::Path| std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    match step {
        Step::File(p) => {
            parent(&abs(p));
            std::fs::write(abs(p), "x\n").unwrap();
        }
        Step::Dir(p) => std::fs::create_dir_all(abs(p)).unwrap(),
        Step::Symlink { target, link } => {
            parent(&abs(link));
            std::os::unix::fs::symlink(target, abs(link)).unwrap();
        }
        Step::HardLink { target, link } => {
            parent(&abs(link));
            std::fs::hard_link(abs(target), abs(link)).unwrap();
        }
        Step::GitInit(d) => {
            std::fs::create_dir_all(abs(d)).unwrap();
            git(&abs(d), &["init", "-q", "."]);
        }
        Step::GitInitBare(d) => {
            std::fs::create_dir_all(abs(d)).unwrap();
            git(&abs(d), &["init", "-q", "--bare", "."]);
        }
    }
}
