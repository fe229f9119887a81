//! Packs for cluster and container CLIs: `kubectl`/`oc`, `helm`, `docker`/`podman`,
//! `terraform`/`tofu`.

use super::{not_read, read, secret, unknown_global, unsafe_, Grammar, Line, PackVerdict};

// ---- kubectl (kubernetes.io/docs/reference/kubectl) ----

const KUBECTL: Grammar = Grammar {
    valued: &[
        "-n",
        "--namespace",
        "--context",
        "--cluster",
        "--user",
        "--kubeconfig",
        "-s",
        "--server",
        "--as",
        "--as-group",
        "--token",
        "--request-timeout",
        "-o",
        "--output",
        "-l",
        "--selector",
        "--field-selector",
        "-c",
        "--container",
        "--since",
        "--since-time",
        "--tail",
        "--sort-by",
        "--template",
        "-L",
        "--label-columns",
        "--raw",
        "--chunk-size",
        "--output-directory",
        "--subresource",
        "--cache-dir",
        "--tls-server-name",
        "--certificate-authority",
        "--client-certificate",
        "--client-key",
        "-v",
        "--v",
        "--limit-bytes",
        "--max-log-requests",
        "--containers",
        "--sort",
    ],
    global: &[
        "-n",
        "--namespace",
        "--context",
        "--cluster",
        "--user",
        "--kubeconfig",
        "-s",
        "--server",
        "--as",
        "--as-group",
        "--request-timeout",
        "--insecure-skip-tls-verify",
        "--cache-dir",
        "--tls-server-name",
        "--certificate-authority",
        "-v",
        "--v",
        "--help",
        "-h",
    ],
};

/// Does a resource word name Secrets (`secrets`, `secret/db`, `secrets.v1.`, `po,secret`)?
fn names_secrets(word: &str) -> bool {
    word.split(',').any(|w| {
        w.to_ascii_lowercase().split(['/', '.']).next() == Some("secret")
            || w.to_ascii_lowercase().split(['/', '.']).next() == Some("secrets")
    })
}

pub(super) fn kubectl(args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &KUBECTL) {
        Ok(l) => l,
        Err(o) => return unknown_global("kubectl", &o),
    };
    if let Some(d) = line.find(&["--output-directory"]) {
        return unsafe_(d, "writes a dump to a directory");
    }
    let Some(verb) = line.pos(0) else {
        return not_read("kubectl");
    };
    let resources = &line.positionals[1..];
    match verb {
        "get" => {
            let formats = line.values(&["-o", "--output"]);
            let table = formats
                .iter()
                .all(|f| matches!(*f, "wide" | "name") || f.starts_with("custom-columns=NAME"));
            if resources.iter().any(|r| names_secrets(r)) && !table {
                return secret("`kubectl get secret` with an output format prints secret values");
            }
            if let Some(raw) = line.values(&["--raw"]).first() {
                if raw.to_ascii_lowercase().contains("secret") {
                    return secret("`kubectl get --raw` of a secrets path");
                }
            }
            read("kubectl get")
        }
        "describe" | "logs" | "top" | "explain" | "api-resources" | "api-versions" | "version"
        | "events" => read("kubectl describe/logs/top/explain/api-resources/version/events"),
        "cluster-info" => match resources.first().copied() {
            None => read("kubectl cluster-info"),
            Some("dump") => {
                not_read("kubectl cluster-info dump (prints every pod's logs and may write files)")
            }
            Some(other) => not_read(format!("kubectl cluster-info {other}")),
        },
        "auth" if matches!(resources.first().copied(), Some("can-i" | "whoami")) => {
            read("kubectl auth can-i/whoami")
        }
        "rollout" if matches!(resources.first().copied(), Some("status" | "history")) => {
            read("kubectl rollout status/history")
        }
        "config" => match resources.first().copied() {
            Some("view") if line.has(&["--raw"]) => {
                secret("`kubectl config view --raw` prints credentials")
            }
            Some("view" | "get-contexts" | "current-context" | "get-clusters" | "get-users") => {
                read("kubectl config view/get-contexts/current-context")
            }
            _ => not_read("kubectl config (changes the kubeconfig)"),
        },
        "exec" | "cp" | "port-forward" | "proxy" | "attach" | "debug" | "run" => unsafe_(
            verb,
            "runs commands in, copies from, or opens connections to the cluster",
        ),
        _ => not_read(format!(
            "kubectl {verb} (changes the cluster, or is a plugin)"
        )),
    }
}

// ---- helm (helm.sh/docs/helm) ----

const HELM: Grammar = Grammar {
    valued: &[
        "-n",
        "--namespace",
        "--kube-context",
        "--kubeconfig",
        "--registry-config",
        "--repository-config",
        "--repository-cache",
        "-o",
        "--output",
        "--revision",
        "--max",
        "-f",
        "--values",
        "--set",
        "--set-string",
        "--set-file",
        "--version",
        "--repo",
        "-l",
        "--selector",
        "--filter",
        "--kube-apiserver",
        "--kube-as-user",
        "--kube-token",
        "--burst-limit",
        "--post-renderer",
        "--output-dir",
        "--api-versions",
        "--kube-version",
        "-s",
        "--show-only",
    ],
    global: &[
        "-n",
        "--namespace",
        "--kube-context",
        "--kubeconfig",
        "--registry-config",
        "--repository-config",
        "--repository-cache",
        "--debug",
        "--help",
        "-h",
        "--kube-apiserver",
        "--kube-as-user",
        "--burst-limit",
        "--kube-insecure-skip-tls-verify",
    ],
};

pub(super) fn helm(args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &HELM) {
        Ok(l) => l,
        Err(o) => return unknown_global("helm", &o),
    };
    if let Some(o) = line.find(&["--post-renderer", "--output-dir"]) {
        return unsafe_(o, "runs a post-renderer program or writes files");
    }
    let Some(sub) = line.pos(0) else {
        return not_read("helm");
    };
    let next = line.pos(1);
    match (sub, next) {
        ("list" | "ls" | "status" | "history" | "hist" | "version" | "lint" | "verify", _) => {
            read("helm list/status/history/version/lint")
        }
        ("get", Some("notes" | "hooks" | "metadata")) => read("helm get notes/hooks/metadata"),
        ("get", Some(what @ ("values" | "manifest" | "all"))) => secret(format!(
            "`helm get {what}` prints release values and rendered Secrets"
        )),
        ("show" | "inspect", Some("chart" | "values" | "readme" | "crds" | "all")) => {
            read("helm show")
        }
        ("search", Some("repo" | "hub")) => read("helm search"),
        ("repo", Some("list" | "ls")) => read("helm repo list"),
        ("dependency" | "dep", Some("list" | "ls")) => read("helm dependency list"),
        ("plugin", Some("list" | "ls")) => read("helm plugin list"),
        ("template", _) => read("helm template (rendered to stdout)"),
        ("env", _) => read("helm env"),
        _ => not_read(format!(
            "helm {sub}{} (changes releases or repositories, or is a plugin)",
            next.map(|n| format!(" {n}")).unwrap_or_default()
        )),
    }
}

// ---- docker (docs.docker.com/reference/cli/docker), podman (docs.podman.io) ----

const DOCKER: Grammar = Grammar {
    valued: &[
        "-H",
        "--host",
        "-c",
        "--context",
        "--config",
        "-l",
        "--log-level",
        "-f",
        "--filter",
        "--format",
        "-n",
        "--last",
        "--tail",
        "--since",
        "--until",
        "-t",
        "--type",
        "--limit",
        "--url",
        "--connection",
        "--root",
        "--runroot",
        "--storage-driver",
        "--project-name",
        "-p",
        "--file",
    ],
    global: &[
        "-H",
        "--host",
        "-c",
        "--context",
        "--config",
        "-l",
        "--log-level",
        "-D",
        "--debug",
        "--tls",
        "--tlsverify",
        "--version",
        "-v",
        "--help",
        "--url",
        "--connection",
        "--remote",
        "-r",
    ],
};

/// `docker inspect` shows a container's environment (Config.Env) unless a `--format` picks
/// something else.
fn inspect(line: &Line<'_>) -> PackVerdict {
    let formats = line.values(&["-f", "--format"]);
    let shows_env = formats.is_empty()
        || formats.iter().any(|f| {
            let f = f.replace(' ', "");
            f.contains("Env")
                || f.contains("Config}}")
                || f.contains("json.}}")
                || f.contains("{{.}}")
                || f.contains("Config.")
                    && !f.contains("Config.Image")
                    && !f.contains("Config.Labels")
        });
    if shows_env {
        secret("`docker inspect` prints containers' environments (Config.Env); pick fields with --format")
    } else {
        read("docker inspect --format")
    }
}

pub(super) fn docker(args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &DOCKER) {
        Ok(l) => l,
        Err(o) => return unknown_global("docker", &o),
    };
    let Some(sub) = line.pos(0) else {
        return if line.has(&["--version", "-v", "--help"]) {
            read("docker --version")
        } else {
            not_read("docker")
        };
    };
    let next = line.pos(1);
    match (sub, next) {
        ("login", _) => secret("`docker login` handles a registry password"),
        ("inspect", _)
        | ("container" | "image" | "network" | "volume" | "pod", Some("inspect")) => {
            if sub == "image" || sub == "network" || sub == "volume" {
                read("docker image/network/volume inspect")
            } else {
                inspect(&line)
            }
        }
        (
            "ps" | "images" | "logs" | "version" | "info" | "top" | "stats" | "port" | "diff"
            | "history" | "events" | "search",
            _,
        ) => read("docker ps/images/logs/info/top/stats/port/diff/history/events"),
        ("container", Some("ls" | "list" | "ps" | "logs" | "top" | "stats" | "port" | "diff")) => {
            read("docker container ls/logs/top")
        }
        ("image", Some("ls" | "list" | "history")) => read("docker image ls/history"),
        ("network" | "volume" | "context" | "pod" | "machine", Some("ls" | "list" | "ps")) => {
            read("docker network/volume/context ls")
        }
        ("context", Some("show" | "inspect")) => read("docker context show/inspect"),
        ("system", Some("df" | "info")) => read("docker system df/info"),
        ("manifest", Some("inspect")) => read("docker manifest inspect"),
        ("buildx", Some("ls" | "version")) => read("docker buildx ls/version"),
        ("compose", Some("config")) => {
            secret("`docker compose config` prints the configuration with .env values interpolated")
        }
        ("compose", Some("ps" | "ls" | "logs" | "images" | "top" | "version")) => {
            read("docker compose ps/ls/logs/images/top")
        }
        (
            "run" | "exec" | "cp" | "build" | "push" | "pull" | "commit" | "save" | "export"
            | "import" | "load",
            _,
        ) => unsafe_(
            sub,
            "runs containers, copies files, builds, or moves images",
        ),
        _ => not_read(format!(
            "docker {sub}{} (changes containers, images or the engine, or is a plugin)",
            next.map(|n| format!(" {n}")).unwrap_or_default()
        )),
    }
}

// ---- terraform (developer.hashicorp.com/terraform/cli/commands), OpenTofu ----

pub(super) fn terraform(args: &[&str]) -> PackVerdict {
    let mut it = args.iter().copied().peekable();
    // Global options: only -chdir=DIR, -help, -version.
    while let Some(a) = it.peek().copied() {
        if a.starts_with("-chdir=") || matches!(a, "-help" | "--help" | "-h") {
            it.next();
        } else if matches!(a, "-version" | "--version" | "-v") {
            return read("terraform -version");
        } else {
            break;
        }
    }
    let Some(sub) = it.next() else {
        return not_read("terraform");
    };
    let rest: Vec<&str> = it.collect();
    let json = rest.iter().any(|a| *a == "-json" || *a == "--json");
    match sub {
        "version" | "validate" | "graph" => read("terraform version/validate/graph"),
        "providers" => match rest.iter().find(|a| !a.starts_with('-')).copied() {
            None => read("terraform providers"),
            Some("schema") => read("terraform providers schema"),
            Some(other) => not_read(format!(
                "terraform providers {other} (writes lock files or mirrors)"
            )),
        },
        "fmt" if rest.iter().any(|a| *a == "-check" || *a == "-write=false") => {
            read("terraform fmt -check")
        }
        "show" if json => secret("`terraform show -json` prints sensitive values in clear"),
        "show" => read("terraform show (sensitive values redacted)"),
        "output" if json || rest.contains(&"-raw") => {
            secret("`terraform output -json/-raw` prints sensitive outputs")
        }
        "output" => read("terraform output (sensitive outputs redacted)"),
        "state" => match rest.first().copied() {
            Some("list") => read("terraform state list"),
            Some("pull") => {
                secret("`terraform state pull` prints the whole state, secrets included")
            }
            Some("show") => {
                secret("`terraform state show` prints a resource's attributes, secrets included")
            }
            _ => not_read("terraform state (changes the state)"),
        },
        "workspace" if matches!(rest.first().copied(), Some("list" | "show")) => {
            read("terraform workspace list/show")
        }
        _ => not_read(format!(
            "terraform {sub} (plan/apply/init run providers and external programs, or change state)"
        )),
    }
}
