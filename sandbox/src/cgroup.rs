//! Per-run cgroups (memory, pids, cpu) on cgroup v1 controllers or the cgroup2 hierarchy.
//!
//! Each run gets `cmdgate-<run id>` under the helper's own cgroup in each controller, so the
//! daemon's (systemd's) limits still apply above it. The run's pid 1 joins before it runs anything.

use crate::model::Effect;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::config::Limits;

/// A cgroup problem; the run refuses to start without its limits.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No hierarchy offers the controller.
    #[error("no cgroup hierarchy offers the {0} controller (limits cannot be enforced)")]
    NoController(&'static str),
    /// Creating, configuring or joining failed.
    #[error("failed to {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or dir.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Which kind of hierarchy a directory belongs to (file names differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Flavor {
    /// cgroup v1: one hierarchy per controller.
    V1,
    /// cgroup2: one unified hierarchy.
    V2,
}

/// The run's cgroup directories (one per v1 controller, or one cgroup2 dir).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunCgroup {
    /// (controller, flavor, directory).
    pub dirs: Vec<(String, Flavor, PathBuf)>,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io {
        action,
        path,
        source,
    }
}

/// Where each controller lives for this process: (controller, flavor, absolute dir of our cgroup).
fn locate() -> Vec<(String, Flavor, PathBuf)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        // "id parent maj:min root mountpoint opts ... - fstype source superopts"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).unwrap_or("");
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let superopts = r.nth(1).unwrap_or("");
        if fstype == "cgroup" {
            for ctrl in ["memory", "pids", "cpu"] {
                if superopts.split(',').any(|o| o == ctrl) {
                    let rel = own.lines().find_map(|l| {
                        let mut parts = l.splitn(3, ':');
                        let _id = parts.next()?;
                        let ctrls = parts.next()?;
                        let path = parts.next()?;
                        ctrls
                            .split(',')
                            .any(|c| c == ctrl)
                            .then(|| path.to_string())
                    });
                    if let Some(rel) = rel {
                        let dir = Path::new(mount_point).join(rel.trim_start_matches('/'));
                        found.push((ctrl.to_string(), Flavor::V1, dir));
                    }
                }
            }
        } else if fstype == "cgroup2" {
            let rel = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            let dir = Path::new(mount_point).join(rel.trim_start_matches('/'));
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            for ctrl in ["memory", "pids", "cpu"] {
                if enabled.split_whitespace().any(|c| c == ctrl) {
                    found.push((ctrl.to_string(), Flavor::V2, dir.clone()));
                }
            }
        }
    }
    found
}

impl RunCgroup {
    /// Create the run's cgroups (no limits yet). Prefers v1 controllers, then cgroup2.
    pub fn create(run_id: &str) -> Result<RunCgroup, CgroupError> {
        let located = locate();
        let name = format!("cmdgate-{run_id}");
        let mut dirs: Vec<(String, Flavor, PathBuf)> = Vec::new();
        for ctrl in ["memory", "pids", "cpu"] {
            let pick = located
                .iter()
                .find(|(c, f, _)| c == ctrl && *f == Flavor::V1)
                .or_else(|| located.iter().find(|(c, _, _)| c == ctrl))
                .ok_or(CgroupError::NoController(ctrl))?;
            let dir = pick.2.join(&name);
            if !dirs.iter().any(|(_, _, d)| *d == dir) {
                std::fs::create_dir(&dir).map_err(io("create", &dir))?;
            }
            dirs.push((ctrl.to_string(), pick.1, dir));
        }
        Ok(RunCgroup { dirs })
    }

    /// The directories a run with this id would have (existing ones only), for cleaning up
    /// after a crash that happened before their paths were written down.
    pub fn existing_for(run_id: &str) -> RunCgroup {
        let name = format!("cmdgate-{run_id}");
        let mut dirs: Vec<(String, Flavor, PathBuf)> = Vec::new();
        for (ctrl, flavor, parent) in locate() {
            let dir = parent.join(&name);
            if dir.is_dir() && !dirs.iter().any(|(_, _, d)| *d == dir) {
                dirs.push((ctrl, flavor, dir));
            }
        }
        RunCgroup { dirs }
    }

    /// Write the run's limits (before anything of the command runs).
    pub fn set_limits(&self, limits: &Limits) -> Result<(), CgroupError> {
        let memory = crate::config::memory_limit(limits.memory_bytes);
        let write = |dir: &Path, file: &str, value: String| -> Result<(), CgroupError> {
            let p = dir.join(file);
            std::fs::write(&p, value).map_err(io("write", &p))
        };
        for (ctrl, flavor, dir) in &self.dirs {
            match (ctrl.as_str(), flavor) {
                ("memory", Flavor::V1) => {
                    write(dir, "memory.limit_in_bytes", memory.to_string())?;
                    // With swap, memsw caps memory+swap; absent when swap accounting is off.
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write(dir, "memory.memsw.limit_in_bytes", memory.to_string())?;
                    }
                }
                ("memory", Flavor::V2) => {
                    write(dir, "memory.max", memory.to_string())?;
                    if dir.join("memory.swap.max").exists() {
                        write(dir, "memory.swap.max", "0".into())?;
                    }
                }
                ("pids", _) => write(dir, "pids.max", limits.pids.to_string())?,
                // 0: no quota, every CPU as on the host (the run is the real run).
                ("cpu", Flavor::V1) => {
                    write(dir, "cpu.cfs_period_us", "100000".into())?;
                    let quota = match limits.cpu_millis {
                        0 => "-1".to_string(),
                        millis => (millis * 100).to_string(),
                    };
                    write(dir, "cpu.cfs_quota_us", quota)?;
                }
                ("cpu", Flavor::V2) => {
                    let quota = match limits.cpu_millis {
                        0 => "max".to_string(),
                        millis => (millis * 100).to_string(),
                    };
                    write(dir, "cpu.max", format!("{quota} 100000"))?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Move `pid` into every run cgroup (before it runs anything).
    pub fn join(&self, pid: i32) -> Result<(), CgroupError> {
        let mut done: Vec<&Path> = Vec::new();
        for (_, _, dir) in &self.dirs {
            if done.contains(&dir.as_path()) {
                continue;
            }
            let p = dir.join("cgroup.procs");
            std::fs::write(&p, pid.to_string()).map_err(io("join", &p))?;
            done.push(dir);
        }
        Ok(())
    }

    /// Move `pid` back into the cgroups above the run's (so the run's can be removed while it
    /// lives on).
    pub fn leave(&self, pid: i32) -> Result<(), CgroupError> {
        let mut done: Vec<&Path> = Vec::new();
        for (_, _, dir) in &self.dirs {
            if done.contains(&dir.as_path()) {
                continue;
            }
            let Some(parent) = dir.parent() else { continue };
            let p = parent.join("cgroup.procs");
            std::fs::write(&p, pid.to_string()).map_err(io("leave", &p))?;
            done.push(dir);
        }
        Ok(())
    }

    /// Limits that were hit, read from the kernel's counters (call before [`RunCgroup::remove`]).
    pub fn limit_hits(&self) -> Vec<Effect> {
        let mut hits = Vec::new();
        let counter = |text: &str, key: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        for (ctrl, flavor, dir) in &self.dirs {
            let (file, key) = match (ctrl.as_str(), flavor) {
                ("memory", Flavor::V1) => ("memory.oom_control", "oom_kill "),
                ("memory", Flavor::V2) => ("memory.events", "oom_kill "),
                ("pids", _) => ("pids.events", "max "),
                _ => continue,
            };
            let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            let n = counter(&text, key);
            if n > 0 {
                hits.push(Effect::LimitHit {
                    limit: ctrl.clone(),
                    detail: format!("{}{n}", key),
                });
            }
        }
        hits
    }

    /// Kill anything still inside (a crashed run) and remove the directories.
    pub fn remove(&self) -> bool {
        remove_dirs(self.dirs.iter().map(|(_, _, d)| d.as_path()))
    }
}

/// Remove the empty run cgroups (`cmdgate-<pid>-…`, beside ours) whose creating process is gone:
/// a daemon killed while a helper of its was still preparing or exiting, with its state dir (and
/// so the lock file naming them) deleted after it. Only empty ones: `rmdir` refuses the others.
/// Returns how many went.
pub fn reap_orphans() -> usize {
    let mut reaped = 0;
    let mut seen: Vec<PathBuf> = Vec::new();
    for (_, _, parent) in locate() {
        if seen.contains(&parent) {
            continue;
        }
        seen.push(parent.clone());
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("cmdgate-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
                .filter(|p| *p > 0)
            else {
                continue;
            };
            let gone = matches!(
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                Err(nix::errno::Errno::ESRCH)
            );
            let empty = std::fs::read_to_string(entry.path().join("cgroup.procs"))
                .is_ok_and(|p| p.trim().is_empty());
            if gone && empty && std::fs::remove_dir(entry.path()).is_ok() {
                reaped += 1;
            }
        }
    }
    reaped
}

/// SIGKILL every process listed in each dir's `cgroup.procs`, then rmdir (retrying briefly while
/// the kernel finishes tearing the tasks down). Returns whether every dir is gone.
pub fn remove_dirs<'a>(dirs: impl Iterator<Item = &'a Path>) -> bool {
    let mut all_gone = true;
    for dir in dirs {
        for _ in 0..200 {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // Only pids that the kernel lists inside this run's own cgroup: never anything else.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        all_gone &= !dir.exists();
    }
    all_gone
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU quota the run's cgroup has: `None` for none.
    fn quota(cg: &RunCgroup) -> Option<u64> {
        let (_, flavor, dir) = cg.dirs.iter().find(|(c, _, _)| c == "cpu").expect("cpu");
        let text = match flavor {
            Flavor::V1 => std::fs::read_to_string(dir.join("cpu.cfs_quota_us")),
            Flavor::V2 => std::fs::read_to_string(dir.join("cpu.max")),
        }
        .expect("read the quota");
        let first = text.split_whitespace().next().expect("a value");
        (first != "-1" && first != "max").then(|| first.parse().expect("a number"))
    }

    /// A run gets every CPU by default (it is the real run: a build in the mirror must not take
    /// twice as long on two CPUs); a configured share is its quota.
    #[test]
    fn no_cpu_quota_by_default_and_a_configured_share_is_one() {
        let cg = RunCgroup::create(&format!("test-cpu-{}", std::process::id())).expect("create");
        cg.set_limits(&Limits {
            cpu_millis: 500,
            ..Limits::default()
        })
        .expect("limits");
        assert_eq!(quota(&cg), Some(50_000));
        cg.set_limits(&Limits::default()).expect("limits");
        assert_eq!(quota(&cg), None);
        assert!(cg.remove());
    }

    /// The memory limit the run's cgroup has.
    fn memory_max(cg: &RunCgroup) -> u64 {
        let (_, flavor, dir) = cg
            .dirs
            .iter()
            .find(|(c, _, _)| c == "memory")
            .expect("memory");
        let file = match flavor {
            Flavor::V1 => "memory.limit_in_bytes",
            Flavor::V2 => "memory.max",
        };
        let text = std::fs::read_to_string(dir.join(file)).expect("read the memory limit");
        text.trim().parse().expect("a number")
    }

    /// A run's memory limit is three quarters of the machine's by default (a build in the
    /// mirror is the real run: 2 GiB killed builds the host ran), and a configured one as set.
    #[test]
    fn the_default_memory_limit_is_three_quarters_of_the_machines() {
        let cg = RunCgroup::create(&format!("test-mem-{}", std::process::id())).expect("create");
        cg.set_limits(&Limits::default()).expect("limits");
        let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
        let kb: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("MemTotal");
        let page = 4096;
        let want = kb * 1024 / 4 * 3;
        assert_eq!(memory_max(&cg) / page, want / page, "{kb} kB");
        cg.set_limits(&Limits {
            memory_bytes: 512 << 20,
            ..Limits::default()
        })
        .expect("limits");
        assert_eq!(memory_max(&cg), 512 << 20);
        assert!(cg.remove());
    }
}
