//! Read packs: the read-only subcommands and flags of remote and package CLIs that agents run all
//! day (`gh pr view`, `kubectl get pods`, `docker ps`, `aws s3 ls`, `npm view`, `cargo tree`, …).
//! They run on the host (they need the network and credentials and write nothing locally), so the
//! hook allows them as reads; every form that writes, executes, uploads or changes remote state is
//! refused the way `find -exec` is, and every form that prints a secret (`gh auth token`,
//! `kubectl get secret -o yaml`, `aws secretsmanager get-secret-value`, `docker login`) is a secret
//! read: the daemon asks a person.
//!
//! Each pack is derived from its CLI's reference documentation (docs/reads.md names the pages and
//! lists what is read and refused, and why) and can be switched off: [`PackSet`] in
//! [`super::ReadPolicy`], from the daemon's `config.toml`, the hook's `CMDGATE_READ_PACKS_OFF`, or
//! the tier map's `read-packs-off:` front matter. A switched-off pack's commands are simply not on
//! the read list.
//!
//! Rules are conservative where a CLI's own parser could read a word differently: before the
//! subcommand only known global options are accepted (an unknown one could take the next word as
//! its value and hide the real subcommand), and an unknown subcommand is never a read (CLIs run
//! plugins and extensions for names they do not know).

mod cloud;
mod cluster;
mod dev;

use std::fmt;

/// One CLI family's read pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pack {
    Gh,
    GitRemote,
    Kubectl,
    Helm,
    Docker,
    Aws,
    Gcloud,
    Az,
    Terraform,
    Npm,
    Pip,
    Cargo,
    Brew,
    Systemd,
}

impl Pack {
    /// Every pack.
    pub const ALL: &'static [Pack] = &[
        Pack::Gh,
        Pack::GitRemote,
        Pack::Kubectl,
        Pack::Helm,
        Pack::Docker,
        Pack::Aws,
        Pack::Gcloud,
        Pack::Az,
        Pack::Terraform,
        Pack::Npm,
        Pack::Pip,
        Pack::Cargo,
        Pack::Brew,
        Pack::Systemd,
    ];

    /// The pack's name in config, the tier map and reasons.
    pub fn name(self) -> &'static str {
        match self {
            Pack::Gh => "gh",
            Pack::GitRemote => "git-remote",
            Pack::Kubectl => "kubectl",
            Pack::Helm => "helm",
            Pack::Docker => "docker",
            Pack::Aws => "aws",
            Pack::Gcloud => "gcloud",
            Pack::Az => "az",
            Pack::Terraform => "terraform",
            Pack::Npm => "npm",
            Pack::Pip => "pip",
            Pack::Cargo => "cargo",
            Pack::Brew => "brew",
            Pack::Systemd => "systemd",
        }
    }

    /// The pack named `name` (as in [`Pack::name`]).
    pub fn parse(name: &str) -> Option<Pack> {
        Pack::ALL.iter().copied().find(|p| p.name() == name)
    }

    /// The command names the pack covers.
    pub fn commands(self) -> &'static [&'static str] {
        match self {
            Pack::Gh => &["gh"],
            Pack::GitRemote => &["git"],
            Pack::Kubectl => &["kubectl", "oc"],
            Pack::Helm => &["helm"],
            Pack::Docker => &["docker", "podman"],
            Pack::Aws => &["aws"],
            Pack::Gcloud => &["gcloud"],
            Pack::Az => &["az"],
            Pack::Terraform => &["terraform", "tofu"],
            Pack::Npm => &["npm", "pnpm", "yarn"],
            Pack::Pip => &["pip", "pip3", "uv"],
            Pack::Cargo => &["cargo"],
            Pack::Brew => &["brew"],
            Pack::Systemd => &["systemctl", "journalctl"],
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for Pack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which packs are on. The default is all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackSet(u32);

impl Default for PackSet {
    fn default() -> Self {
        PackSet::all()
    }
}

impl PackSet {
    pub fn all() -> PackSet {
        PackSet(Pack::ALL.iter().fold(0, |acc, p| acc | p.bit()))
    }

    pub fn none() -> PackSet {
        PackSet(0)
    }

    pub fn contains(self, p: Pack) -> bool {
        self.0 & p.bit() != 0
    }

    #[must_use]
    pub fn without(self, p: Pack) -> PackSet {
        PackSet(self.0 & !p.bit())
    }

    /// This set minus the packs named in `names` (comma or white-space separated). An unknown name
    /// is an error (a typo must not leave a pack on unnoticed).
    pub fn without_named(self, names: &str) -> Result<PackSet, String> {
        let mut out = self;
        for n in names
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|n| !n.is_empty())
        {
            let p = Pack::parse(n).ok_or_else(|| {
                let known: Vec<&str> = Pack::ALL.iter().map(|p| p.name()).collect();
                format!("unknown read pack `{n}` (known: {})", known.join(", "))
            })?;
            out = out.without(p);
        }
        Ok(out)
    }
}

/// A pack's judgement of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackVerdict {
    /// Only reads; `rule` names the form (`kubectl get`), for `explain` and the audit.
    Read { rule: &'static str },
    /// This form is not a read (writes, runs code, changes remote state, or is not known).
    NotRead { what: String },
    /// This argument writes, executes or uploads.
    Unsafe { argument: String, why: &'static str },
    /// This form prints a secret (a token, a password, a secret's value): a person decides.
    Secret { what: String },
}

/// The pack covering `name` with `args` (all static words), and its verdict; `None` when no pack
/// covers the command (or, for `git`, the subcommand: git's local reads are the built-in list's).
pub fn judge(name: &str, args: &[&str]) -> Option<(Pack, PackVerdict)> {
    let pack = match name {
        "gh" => Pack::Gh,
        "git" => return dev::git_remote(args).map(|v| (Pack::GitRemote, v)),
        "kubectl" | "oc" => Pack::Kubectl,
        "helm" => Pack::Helm,
        "docker" | "podman" => Pack::Docker,
        "aws" => Pack::Aws,
        "gcloud" => Pack::Gcloud,
        "az" => Pack::Az,
        "terraform" | "tofu" => Pack::Terraform,
        "npm" | "pnpm" | "yarn" => Pack::Npm,
        "pip" | "pip3" | "uv" => Pack::Pip,
        "cargo" => Pack::Cargo,
        "brew" => Pack::Brew,
        "systemctl" | "journalctl" => Pack::Systemd,
        _ => return None,
    };
    let verdict = match pack {
        Pack::Gh => dev::gh(args),
        Pack::Kubectl => cluster::kubectl(args),
        Pack::Helm => cluster::helm(args),
        Pack::Docker => cluster::docker(args),
        Pack::Terraform => cluster::terraform(args),
        Pack::Aws => cloud::aws(args),
        Pack::Gcloud => cloud::gcloud(args),
        Pack::Az => cloud::az(args),
        Pack::Npm => dev::npm(name, args),
        Pack::Pip => dev::pip(name, args),
        Pack::Cargo => dev::cargo(args),
        Pack::Brew => dev::brew(args),
        Pack::Systemd => dev::systemd(name, args),
        Pack::GitRemote => unreachable_git(),
    };
    Some((pack, verdict))
}

/// `git` returned above; kept as a value so the match stays exhaustive without a panic path.
fn unreachable_git() -> PackVerdict {
    PackVerdict::NotRead { what: "git".into() }
}

// ---- shared helpers ----

/// A command line split by a CLI's option grammar: leading global options, then positionals and
/// options in order.
pub(super) struct Line<'a> {
    /// Positional words (subcommands, resources, names), in order.
    pub(super) positionals: Vec<&'a str>,
    /// Options as (name with dashes, value): `--x=v` and `--x v` (when known to take a value)
    /// give `Some(v)`.
    pub(super) opts: Vec<(&'a str, Option<&'a str>)>,
}

/// The option grammar of one CLI.
pub(super) struct Grammar {
    /// Options that take a value as the next word (`-n`, `--namespace`).
    pub(super) valued: &'static [&'static str],
    /// Options accepted before the first positional (the subcommand). Any other option there makes
    /// the line unknown: it could take the subcommand as its value.
    pub(super) global: &'static [&'static str],
}

impl<'a> Line<'a> {
    /// Splits `args` by `g`; `Err(option)` for an option before the subcommand that is not global.
    pub(super) fn parse(args: &[&'a str], g: &Grammar) -> Result<Line<'a>, String> {
        let mut out = Line {
            positionals: Vec::new(),
            opts: Vec::new(),
        };
        let mut it = args.iter().copied();
        while let Some(a) = it.next() {
            if a == "--" {
                out.positionals.extend(it.by_ref());
                break;
            }
            if a.starts_with('-') && a.len() > 1 {
                let (name, value) = match a.split_once('=') {
                    Some((n, v)) if n.starts_with("--") => (n, Some(v)),
                    _ => (a, None),
                };
                if out.positionals.is_empty() && !g.global.contains(&name) {
                    return Err(a.to_owned());
                }
                let value = if value.is_none() && g.valued.contains(&name) {
                    it.next()
                } else {
                    value
                };
                out.opts.push((name, value));
                continue;
            }
            out.positionals.push(a);
        }
        Ok(out)
    }

    pub(super) fn pos(&self, i: usize) -> Option<&'a str> {
        self.positionals.get(i).copied()
    }

    /// Is any of `names` given (as `--x`, `--x=v` or a short flag `-x`)?
    pub(super) fn has(&self, names: &[&str]) -> bool {
        self.opts.iter().any(|(n, _)| names.contains(n))
    }

    /// The first option among `names` that is given.
    pub(super) fn find(&self, names: &[&str]) -> Option<&'a str> {
        self.opts
            .iter()
            .find(|(n, _)| names.contains(n))
            .map(|(n, _)| *n)
    }

    /// Values of the options `names`.
    pub(super) fn values(&self, names: &[&str]) -> Vec<&'a str> {
        self.opts
            .iter()
            .filter(|(n, _)| names.contains(n))
            .filter_map(|(_, v)| *v)
            .collect()
    }
}

pub(super) fn read(rule: &'static str) -> PackVerdict {
    PackVerdict::Read { rule }
}

pub(super) fn not_read(what: impl Into<String>) -> PackVerdict {
    PackVerdict::NotRead { what: what.into() }
}

pub(super) fn unsafe_(argument: &str, why: &'static str) -> PackVerdict {
    PackVerdict::Unsafe {
        argument: argument.to_owned(),
        why,
    }
}

pub(super) fn secret(what: impl Into<String>) -> PackVerdict {
    PackVerdict::Secret { what: what.into() }
}

/// `Err(option)` from [`Line::parse`] as a verdict.
pub(super) fn unknown_global(cmd: &str, opt: &str) -> PackVerdict {
    not_read(format!(
        "{cmd} with `{opt}` before its subcommand (not a known global option)"
    ))
}
