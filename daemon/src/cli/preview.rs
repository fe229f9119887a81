//! `cmdgate tiermap preview NEW_MAP` and `cmdgate rules preview …`: which retained past requests
//! a proposed tier map or rule change would decide differently (allow ↔ test-run ↔ ask ↔ deny),
//! grouped by pattern with counts and examples — replayed through the pure policy, nothing run
//! (see `engine::preview`). Also the expansion `cmdgate tiermap sign` prints before it signs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _};
use cmdgate_policy::decide::{Rule, RuleKind, RuleSet};
use cmdgate_policy::replay::Past;
use cmdgate_policy::tiermap::{self, expansion, Snapshot, VerifiedMap};
use serde_json::json;

use crate::api::serve;
use crate::engine::preview::{self, Fixed, Preview, Side};
use crate::engine::project;

/// Arguments of `cmdgate tiermap preview`.
#[derive(Debug, clap::Args)]
pub struct TiermapPreviewArgs {
    /// The proposed map (need not be signed; its examples must hold).
    pub path: PathBuf,
    /// The project it is for (default: the project root of the map's directory).
    #[arg(long)]
    pub project: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// A proposed rule change for `cmdgate rules preview`.
#[derive(Debug, clap::Subcommand)]
pub enum RuleChange {
    /// Remember a decision for one exact command (`rules remember` / `rules always-ask`).
    Remember {
        #[arg(value_enum)]
        kind: PreviewKind,
        /// The project (default: the project root of the current directory).
        #[arg(long)]
        project: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Disable, enable or remove a rule.
    Disable {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    Enable {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    Remove {
        id: i64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreviewKind {
    Approve,
    Reject,
    AlwaysAsk,
}

fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// The agent's home, cmdgate's own paths and the configured secret paths, as the daemon uses them.
fn fixed() -> anyhow::Result<(Fixed, PathBuf, cmdgate_policy::locations::Locations)> {
    let (config, paths) = serve::load(None)?;
    let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
    let own = paths.locations.own_paths(&home);
    let mut fixed = Fixed::new(home, own, &config.secret_paths);
    fixed.packs = config
        .read_packs()
        .map_err(|e| anyhow::anyhow!("read_packs_off: {e}"))?;
    Ok((fixed, paths.db.clone(), paths.locations.clone()))
}

fn open(db: &Path) -> anyhow::Result<rusqlite::Connection> {
    crate::store::open_read_only(db)
        .with_context(|| format!("cannot open the audit store {}", db.display()))
}

/// A parsed (not necessarily signed) map as the snapshot the policy would use once it is signed.
pub fn unsigned_snapshot(text: &str, shown: &str) -> anyhow::Result<Snapshot> {
    let map = tiermap::parse(text).map_err(|diags| {
        let lines: Vec<String> = diags
            .into_iter()
            .map(|d| d.in_file(shown).to_string())
            .collect();
        anyhow::anyhow!("{shown} does not parse:\n{}", lines.join("\n"))
    })?;
    Ok(Snapshot::Verified(VerifiedMap {
        revision: map.revision,
        map,
        key: "(unsigned preview)".into(),
        key_version: 0,
        content_hash: tiermap::content_hash(text),
    }))
}

pub fn tiermap_preview(args: TiermapPreviewArgs) -> anyhow::Result<ExitCode> {
    let shown = args.path.display().to_string();
    let text =
        std::fs::read_to_string(&args.path).with_context(|| format!("cannot read {shown}"))?;
    let proposed = unsigned_snapshot(&text, &shown)?;
    let root = match &args.project {
        Some(p) => PathBuf::from(canonical(p)),
        None => {
            let dir = args
                .path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            project::project_root(dir, None).0
        }
    };
    let (fixed, db, locations) = fixed()?;
    let keys = project::load_pinned_keys(&locations);
    let current = project::load_snapshot(&root, keys.as_ref().map_err(String::as_str), None);
    let conn = open(&db)?;
    let started = Instant::now();
    let root_s = root.to_string_lossy().into_owned();
    let history = preview::history(&conn, Some(&root_s))?;
    let rules = preview::rules(&conn)?;
    let p = preview::preview(
        &history,
        &fixed,
        Side {
            snapshot: &current,
            rules: &rules,
        },
        Side {
            snapshot: &proposed,
            rules: &rules,
        },
        |_| true,
    );
    let took = started.elapsed();
    let current_desc = match &current {
        Snapshot::Verified(v) => format!("signed revision {}", v.revision),
        Snapshot::ReadOnly { reason } => format!("no valid map (read-only: {reason})"),
    };
    print(
        &p,
        &format!("{shown} against {current_desc} of {root_s}"),
        args.json,
        took,
    )
}

pub fn rules_preview(change: RuleChange) -> anyhow::Result<ExitCode> {
    let (fixed, db, locations) = fixed()?;
    let conn = open(&db)?;
    let started = Instant::now();
    let current = preview::rules(&conn)?;
    let all: Vec<Rule> = current.rules().to_vec();
    let (proposed, project, what, json): (Vec<Rule>, Option<String>, String, bool) = match change {
        RuleChange::Remember {
            kind,
            project,
            json,
            command,
        } => {
            let root = match project {
                Some(p) => canonical(&p),
                None => project::project_root(&std::env::current_dir()?, None)
                    .0
                    .to_string_lossy()
                    .into_owned(),
            };
            let command = command.join(" ");
            let key = match cmdgate_policy::shell::analyze(&command, &Default::default()) {
                cmdgate_policy::shell::Analysis::Parsed(s) => {
                    cmdgate_policy::decide::canonical_key(&s)
                }
                cmdgate_policy::shell::Analysis::Unanalyzable(why) => {
                    bail!("`{command}` cannot be analysed: {why:?}")
                }
            };
            let kind = match kind {
                PreviewKind::Approve => RuleKind::Approve,
                PreviewKind::Reject => RuleKind::Reject,
                PreviewKind::AlwaysAsk => RuleKind::AlwaysAsk,
            };
            let mut rules = all.clone();
            rules.push(Rule {
                id: i64::MAX,
                kind,
                project: root.clone(),
                key,
                enabled: true,
                note: None,
            });
            (
                rules,
                Some(root),
                format!("remembering {kind:?} for `{command}`"),
                json,
            )
        }
        RuleChange::Disable { id, json } => edit(&all, id, Some(false), json)?,
        RuleChange::Enable { id, json } => edit(&all, id, Some(true), json)?,
        RuleChange::Remove { id, json } => edit(&all, id, None, json)?,
    };
    let proposed = RuleSet::new(proposed);
    let keys = project::load_pinned_keys(&locations);
    let history = preview::history(&conn, project.as_deref())?;
    // One snapshot per project, as the daemon would load it now.
    let mut snapshots: std::collections::HashMap<String, Snapshot> = Default::default();
    for p in &history.past {
        snapshots.entry(p.project.clone()).or_insert_with(|| {
            project::load_snapshot(
                Path::new(&p.project),
                keys.as_ref().map_err(String::as_str),
                None,
            )
        });
    }
    let mut report = Preview {
        report: Default::default(),
        skipped: history.skipped,
        oldest_id: history.oldest_id,
    };
    for (proj, snap) in &snapshots {
        let p = preview::preview(
            &history,
            &fixed,
            Side {
                snapshot: snap,
                rules: &current,
            },
            Side {
                snapshot: snap,
                rules: &proposed,
            },
            |past: &Past| &past.project == proj,
        );
        report.report.replayed += p.report.replayed;
        report.report.changed += p.report.changed;
        report.report.groups.extend(p.report.groups);
    }
    report
        .report
        .groups
        .sort_by_key(|g| std::cmp::Reverse(g.count));
    print(&report, &what, json, started.elapsed())
}

/// The rules with rule `id` set to `enabled`, or removed (`None`).
fn edit(
    all: &[Rule],
    id: i64,
    enabled: Option<bool>,
    json: bool,
) -> anyhow::Result<(Vec<Rule>, Option<String>, String, bool)> {
    let Some(rule) = all.iter().find(|r| r.id == id) else {
        bail!("no rule {id} (`cmdgate rules list`)");
    };
    let project = Some(rule.project.clone());
    let rules = all
        .iter()
        .filter_map(|r| match (r.id == id, enabled) {
            (false, _) => Some(r.clone()),
            (true, Some(enabled)) => Some(Rule {
                enabled,
                ..r.clone()
            }),
            (true, None) => None,
        })
        .collect();
    let verb = match enabled {
        Some(true) => "enabling",
        Some(false) => "disabling",
        None => "removing",
    };
    Ok((rules, project, format!("{verb} rule #{id}"), json))
}

fn print(
    p: &Preview,
    what: &str,
    json: bool,
    took: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    if json {
        let mut v = serde_json::to_value(p)?;
        v["what"] = json!(what);
        v["more_permissive"] = json!(p.report.more_permissive());
        v["elapsed_ms"] = json!(took.as_millis());
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{what}: replayed {} past requests in {} ms; {} would be decided differently ({} more permissive)",
        p.report.replayed,
        took.as_millis(),
        p.report.changed,
        p.report.more_permissive()
    );
    for g in &p.report.groups {
        println!(
            "  {:>8} → {:<8} ×{:<5} {}",
            g.from.as_str(),
            g.to.as_str(),
            g.count,
            g.pattern
        );
        for (id, cmd) in &g.examples {
            println!("      #{id} {}", cmd.replace('\n', " ; "));
        }
    }
    if p.skipped > 0 {
        println!(
            "({} audit rows could not be rebuilt into a request and were not replayed)",
            p.skipped
        );
    }
    if let Some(oldest) = p.oldest_id {
        println!("(the retained history starts at audit row #{oldest}: anything pruned before it is not replayed)");
    }
    Ok(ExitCode::SUCCESS)
}

// ----- tiermap sign: the expansion ------------------------------------------------------------

/// Where the last map signed from `path` on this machine is kept, to compare the next one with.
pub fn signed_copy(config_dir: &Path, path: &Path) -> PathBuf {
    let abs = canonical(path);
    let digest = tiermap::content_hash(&abs).to_string();
    config_dir
        .join("signed-maps")
        .join(format!("{}.md", digest.get(..16).unwrap_or(&digest)))
}

/// The previous revision's text: the copy kept at the last sign, else the file in git's HEAD.
pub fn previous_text(config_dir: &Path, path: &Path) -> Option<(String, String)> {
    let copy = signed_copy(config_dir, path);
    if let Ok(t) = std::fs::read_to_string(&copy) {
        return Some((t, "the last map signed here".into()));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name()?.to_string_lossy().into_owned();
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "core.fsmonitor=false",
            "show",
            &format!("HEAD:./{name}"),
        ])
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            "git HEAD".into(),
        )
    })
}

/// The expansion of the map at `path` against its previous revision, in lines, and where the
/// previous revision came from; `None` when the map does not parse (signing then fails with the
/// diagnostics anyway).
pub fn expansion_lines(config_dir: &Path, path: &Path) -> Option<(Vec<String>, Option<String>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let new = tiermap::parse(&text).ok()?;
    let previous = previous_text(config_dir, path);
    let old = previous.as_ref().and_then(|(t, _)| tiermap::parse(t).ok());
    let x = expansion::expansion(old.as_ref(), &new);
    Some((expansion::describe(&x), previous.map(|(_, from)| from)))
}

/// Prints the expansion before a sign.
pub fn print_expansion(config_dir: &Path, path: &Path) {
    let Some((lines, against)) = expansion_lines(config_dir, path) else {
        return;
    };
    match against {
        Some(from) => println!("expansion of {} against {from}:", path.display()),
        None => println!(
            "expansion of {} (no previous revision found here or in git: every entry is new):",
            path.display()
        ),
    }
    if lines.is_empty() {
        println!("  nothing more permissive, no shadowed or dead entry, no pattern in two tiers");
    }
    for l in lines {
        println!("  {l}");
    }
}

/// Keeps a copy of a just-signed map for the next sign's comparison (best effort).
pub fn keep_signed(config_dir: &Path, path: &Path) {
    let copy = signed_copy(config_dir, path);
    if let Some(dir) = copy.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(text) = std::fs::read_to_string(path) {
        let _ = std::fs::write(copy, text);
    }
}
