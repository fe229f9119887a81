//! Bash commands: shell analysis, then the read classifier (built-in read list, extended by tier 0
//! of the verified tier map). Also finds tier-3 and built-in catastrophic commands, which matter when
//! the escape hatch is on (the daemon makes its own, fuller check otherwise).
//!
//! The tier map's signature is checked only when the map could change the answer (see
//! [`classify`]); otherwise the command is answered by the built-in lists, exactly as with no map.

use std::cell::{Cell, RefCell};
use std::path::Path;

use cmdgate_policy::decide::catastrophic::{self, Guarded};
use cmdgate_policy::decide::paths::Base;
use cmdgate_policy::shell::read::{self, Pack, ReadPolicy, ReadVerdict, SecretPaths};
use cmdgate_policy::shell::Script;
use cmdgate_policy::shell::{self, Analysis, Limits, Unanalyzable, Word};
use cmdgate_policy::tiermap::{self, Sketch, Tier};

use crate::config::Config;
use crate::memo::Memo;
use crate::reads::Local;
use crate::tier::{self, MapState, Seen};

/// What follows the last `/` of `w` (all of it without one): what `w.rsplit('/').next()` gives,
/// without the char searcher ([`crate::bytes::rsplit_slash`]), for every word of the string.
fn last_component(w: &str) -> &str {
    crate::bytes::rsplit_slash(w).map_or(w, |(_, name)| name)
}

/// Words of an argv as text (a dynamic word as its source text, which the checks compare literally).
fn texts(words: &[Word]) -> Vec<&str> {
    words.iter().map(Word::text).collect()
}

/// Says why a string could not be analysed, for the model and the audit.
fn describe(u: &Unanalyzable) -> String {
    match u {
        Unanalyzable::TooLarge { len, max } => {
            format!("it is {len} bytes, over the {max}-byte limit")
        }
        Unanalyzable::TooDeep { max } => format!("it nests deeper than {max} levels"),
        Unanalyzable::TooManyCommands { max } => format!("it runs more than {max} commands"),
        Unanalyzable::ParseError { message } => format!("it does not parse as shell: {message}"),
        Unanalyzable::BadInput { message } => {
            format!("it contains input the analyzer refuses: {message}")
        }
    }
}

/// Classifies a Bash `command` string run in `cwd`.
///
/// The project's map is first sketched (`tiermap::sketch`: only its entries for the command words
/// the string names, unverified), and parsed whole and verified only when what it says could
/// change the answer; otherwise the built-in lists answer, as they do with no map. A map changes
/// the answer when
/// - an entry of tier 1, 2 or 3 matches a command (it routes or denies what the built-in lists
///   may allow), or its `read-packs-off:` switches off the pack of a command: checked first;
/// - or its tier 0 would vouch for a command the read classifier asks about, and the built-in
///   lists alone do not make the whole string a read: tier 0 only ever adds reads (a vouched
///   command gets a subset of the built-in checks, `policy::shell::read`), so a string that is a
///   read without it stays one with it.
///
/// For a map that parses, the sketch answers both questions exactly as the whole map would for
/// every command of the string (its promise, tested in `policy/tests/it/tiermap_props.rs`); a
/// text the sketch already finds invalid is verified (and so refused) the old way, for the
/// reason it gives. An unverified map never widens anything: when it matters it is verified (or,
/// failing that, treated as absent) and the string is classified again with it.
pub fn classify(command: &str, cwd: &Path, project_dir: &Path, cfg: &Config) -> Local {
    let analysis = shell::analyze(command, &Limits::default());
    let script = match &analysis {
        Analysis::Parsed(script) => script,
        Analysis::Unanalyzable(u) => return Local::Unanalyzable(describe(u)),
    };
    let seen = tier::read(cfg.keys_path.as_deref(), project_dir);
    let mut secrets = None;
    let kernel = Memo::default();
    let at = Place {
        cwd,
        project_dir,
        kernel: &kernel,
    };
    // The words an entry could match as a command word: every word as written and its last
    // component (the restricting tiers match a command given by its path, `/bin/rm`; the read
    // classifier also judges a command without a glob that matches nothing, so any word can be
    // `argv[0]` of what tier 0 is asked about).
    let words: Vec<&str> = script
        .commands
        .iter()
        .flat_map(|c| c.argv.iter().map(Word::text))
        .flat_map(|w| [w, last_component(w)])
        .collect();
    let probe = seen.text().map(|text| Probe {
        sketch: tiermap::sketch(text, &|w| words.contains(&w)),
        words: &words,
    });
    if probe
        .as_ref()
        .is_some_and(|p| p.sketch.invalid() || restricts(&p.sketch, script, cfg))
    {
        let map = tier::verify(cfg.keys_path.as_deref(), project_dir, seen);
        return decide(script, &map, None, &at, cfg, &mut secrets).0;
    }
    let unused = match &seen {
        Seen::Found(_) => {
            MapState::Absent("CLAUDE_CMDS.md was not verified: none of its entries applies".into())
        }
        Seen::Absent(why) => MapState::Absent(why.clone()),
    };
    let (local, would_vouch) = decide(script, &unused, probe.as_ref(), &at, cfg, &mut secrets);
    if would_vouch && !matches!(local, Local::Read { .. }) {
        let map = tier::verify(cfg.keys_path.as_deref(), project_dir, seen);
        return decide(script, &map, None, &at, cfg, &mut secrets).0;
    }
    local
}

/// The map's sketch for the words of one command string, asked what tier 0 would say.
struct Probe<'w> {
    sketch: Sketch,
    /// The words the sketch was made for.
    words: &'w [&'w str],
}

impl Probe<'_> {
    /// Whether tier 0 of the whole map might vouch for `argv`: the sketch's answer, and yes for
    /// an argv whose command word it was not made for (none is expected: every word is in it).
    fn may_vouch(&self, argv: &[&str]) -> bool {
        let covered = |w: &str| self.words.contains(&w);
        match argv.first() {
            Some(&w) if !covered(w) || !covered(last_component(w)) => true,
            _ => self.sketch.classify(argv) == Some(Tier::Read),
        }
    }
}

/// Whether `map` (a sketch, unverified) routes or denies a command of `script` (tiers 1–3), or
/// switches off a read pack one of its commands belongs to: the lookups [`decide`] makes with a
/// verified map (the read classifier judges a pack by the command's name, the last component of
/// `argv[0]`).
fn restricts(map: &Sketch, script: &Script, cfg: &Config) -> bool {
    let on = map.read_packs(cfg.read_packs);
    let switched_off: Vec<&str> = Pack::ALL
        .iter()
        .filter(|p| cfg.read_packs.contains(**p) && !on.contains(**p))
        .flat_map(|p| p.commands().iter().copied())
        .collect();
    script.commands.iter().any(|cmd| {
        let argv = texts(&cmd.argv);
        let name = argv.first().copied().map(last_component);
        name.is_some_and(|n| switched_off.contains(&n))
            || matches!(map.classify(&argv), Some(tier) if tier != Tier::Read)
    })
}

/// Classifies `script` with `map` (verified, or absent with why). With `probe` (the map's
/// unverified sketch, only beside an absent map) the second value says, when the first is not a
/// read, whether its tier 0 would have vouched for a command the read classifier asked about
/// (for a read it is `false`: nothing to widen); it is never used to decide.
/// `secrets` keeps the compiled secret table between calls.
fn decide(
    script: &Script,
    map: &MapState,
    probe: Option<&Probe<'_>>,
    at: &Place<'_>,
    cfg: &Config,
    secrets: &mut Option<SecretPaths>,
) -> (Local, bool) {
    let Place {
        cwd, project_dir, ..
    } = *at;
    let verified = map.verified();

    // Strictest first: tier 3 and the built-in catastrophic list; any tier-1/2 entry means the
    // operator wants the daemon to decide, even for a command the built-in list calls a read.
    let mut operator_routes: Option<String> = None;
    for cmd in &script.commands {
        let argv = texts(&cmd.argv);
        if let Some((tier, entry)) = verified.and_then(|v| v.map.classify(&argv)) {
            match tier {
                Tier::Deny => {
                    return (
                        Local::Catastrophic(format!("tier 3 rule {}", entry.rule())),
                        false,
                    )
                }
                Tier::Ask | Tier::Sandbox => {
                    operator_routes.get_or_insert_with(|| format!("{tier} rule {}", entry.rule()));
                }
                Tier::Read => {}
            }
        }
    }
    // The policy's built-in catastrophic list (the daemon checks the same list first).
    let home = cfg
        .home
        .as_ref()
        .map_or_else(|| "/nonexistent".to_string(), |h| h.display().to_string());
    let cwd_s = cwd.display().to_string();
    let root_s = project_dir.display().to_string();
    let own_paths = crate::own::own_paths(cfg);
    let guarded = Guarded {
        base: Base {
            home: &home,
            cwd: &cwd_s,
        },
        project_root: &root_s,
        own_paths: &own_paths,
    };
    // Words judged where they resolve too: a link or hard link to cmdgate's own files is them.
    if let Some(c) = catastrophic::find_with(script, guarded, at.kernel) {
        return (
            Local::Catastrophic(format!("{} (built-in:{})", c.what, c.rule)),
            false,
        );
    }
    if let Some(why) = operator_routes {
        return (
            Local::Route(format!("the tier map puts it in {why}")),
            false,
        );
    }

    // Built field by field: `ReadPolicy::new` would compile the secret table once more only to
    // have it replaced (a compile is ~360 k instructions, a third of a fast-path call).
    let mut policy = ReadPolicy {
        home: home.trim_end_matches('/').to_owned(),
        cwd: Some(cwd.display().to_string()),
        project: Some(root_s.clone()),
        secrets: std::borrow::Cow::Owned(secrets.take().unwrap_or_else(|| {
            crate::secrets::policy_secrets(&home, &cfg.extra_secrets, cfg.passwd_home.as_deref())
        })),
        extension: None,
        listing: None,
        packs: cfg.read_packs,
    };
    // The operator's switches, and the verified map's `read-packs-off:` for this project.
    policy.packs = verified.map_or(cfg.read_packs, |v| v.map.read_packs(cfg.read_packs));
    // Whether tier 0 vouched for any command: only then is the map what makes it a read.
    let vouched = Cell::new(false);
    let tier0 = |argv: &[&str]| {
        let read = verified.is_some_and(|v| matches!(v.map.classify(argv), Some((Tier::Read, _))));
        if read {
            vouched.set(true);
        }
        read
    };
    // The unverified map's tier 0, asked the same question and never believed. The commands
    // are kept and the sketch asked about them at the end, only when the answer matters (the
    // string is not a read by the built-in lists): looking a command up in the sketch costs
    // ~2 k instructions, a copy of its words a few hundred.
    let asked: RefCell<Vec<Vec<String>>> = RefCell::new(Vec::new());
    let probe_tier0 = |argv: &[&str]| {
        if probe.is_some() {
            asked
                .borrow_mut()
                .push(argv.iter().map(|w| (*w).to_owned()).collect());
        }
        false
    };
    if verified.is_some() {
        policy.extension = Some(&tier0);
    } else if probe.is_some() {
        policy.extension = Some(&probe_tier0);
    }
    // A recursive search of the working directory or project root is judged by listing it
    // (the policy's recursive rule 3). The listing is made only when it decides: a first pass
    // answers "nothing secret there", and only if the whole command is then a read is the
    // directory listed and the command classified again.
    let listing_asked = Cell::new(false);
    let optimistic = |_: &str| -> Option<Vec<String>> {
        listing_asked.set(true);
        Some(Vec::new())
    };
    let listing = crate::secrets::list_dir;
    policy.listing = Some(&optimistic);
    let mut verdict = read::classify(script, &policy);
    if listing_asked.get() {
        policy.listing = Some(&listing);
        if verdict == ReadVerdict::PureRead {
            verdict = read::classify(script, &policy);
        }
    }
    let local = judge(script, verdict, map, &vouched, &mut policy, at, cfg);
    *secrets = Some(policy.secrets.into_owned());
    // Only asked for an answer that is not a read: the caller verifies the map then.
    let would_vouch = !matches!(local, Local::Read { .. })
        && probe.is_some_and(|p| {
            asked.borrow().iter().any(|argv| {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                p.may_vouch(&argv)
            })
        });
    (local, would_vouch)
}

/// Where the command runs, and the file system as this call sees it.
struct Place<'a> {
    cwd: &'a Path,
    project_dir: &'a Path,
    kernel: &'a Memo,
}

/// The answer for the read classifier's `verdict`.
fn judge(
    script: &Script,
    verdict: ReadVerdict,
    map: &MapState,
    vouched: &Cell<bool>,
    policy: &mut ReadPolicy<'_>,
    at: &Place<'_>,
    cfg: &Config,
) -> Local {
    let project_dir = at.project_dir;
    // What the words are on disk (links, hard links) and where `git` runs.
    if verdict == ReadVerdict::PureRead {
        if let Some(why) =
            crate::own::bash_read(script, at.cwd, project_dir, cfg, &policy.secrets, at.kernel)
        {
            return Local::Route(format!("not a read as the file system resolves it: {why}"));
        }
    }
    match verdict {
        ReadVerdict::PureRead => match map {
            // About to allow on the map's word: it must not be a replay of an older revision.
            MapState::Verified(v) if vouched.get() => {
                match crate::replay::check(
                    cfg.revisions_path.as_deref(),
                    cfg.revisions_required,
                    project_dir,
                    v,
                ) {
                    Ok(()) => Local::Read {
                        rule: format!(
                            "built-in read list + tier 0 of CLAUDE_CMDS.md revision {}",
                            v.revision
                        ),
                        tiermap_revision: Some(v.revision),
                    },
                    Err(why) => {
                        // The built-in read list alone, as with no map.
                        policy.extension = None;
                        let unused = format!(
                            "tier 0 of CLAUDE_CMDS.md revision {} is not used by the hook: {why}",
                            v.revision
                        );
                        match read::classify(script, policy) {
                            ReadVerdict::PureRead => Local::Read {
                                rule: format!("built-in read list ({unused})"),
                                tiermap_revision: None,
                            },
                            ReadVerdict::NotRead { reason, .. } => {
                                Local::Route(format!("not a read: {reason}; {unused}"))
                            }
                        }
                    }
                }
            }
            MapState::Verified(v) => Local::Read {
                rule: format!(
                    "built-in read list + tier 0 of CLAUDE_CMDS.md revision {}",
                    v.revision
                ),
                tiermap_revision: Some(v.revision),
            },
            MapState::Absent(_) => Local::Read {
                rule: "built-in read list".into(),
                tiermap_revision: None,
            },
        },
        ReadVerdict::NotRead { reason, .. } => match map {
            MapState::Verified(_) => Local::Route(format!("not a read: {reason}")),
            MapState::Absent(why) => Local::Route(format!(
                "not a read: {reason}; no verified tier map extends the reads: {why}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::last_component;

    #[test]
    fn last_component_is_what_rsplit_gives() {
        for w in ["", "/", "a", "/bin/rm", "./x", "a/b/", "//x", "é/ü", "a/é"] {
            assert_eq!(last_component(w), w.rsplit('/').next().unwrap_or(w), "{w}");
        }
    }
}
