//! Packs for cloud CLIs: `aws`, `gcloud`, `az`.

use super::{not_read, read, secret, unknown_global, unsafe_, Grammar, Line, PackVerdict};

// ---- aws (AWS CLI v2 command reference: awscli.amazonaws.com/v2/documentation/api/latest) ----

const AWS: Grammar = Grammar {
    valued: &[
        "--profile",
        "--region",
        "--output",
        "--query",
        "--endpoint-url",
        "--color",
        "--ca-bundle",
        "--cli-read-timeout",
        "--cli-connect-timeout",
        "--cli-binary-format",
        "--max-items",
        "--page-size",
        "--starting-token",
        "--secret-id",
        "--name",
        "--names",
        "--path",
        "--bucket",
        "--key",
        "--filters",
        "--instance-ids",
        "--function-name",
        "--log-group-name",
        "--stack-name",
        "--cluster",
        "--since",
        "--format",
    ],
    global: &[
        "--profile",
        "--region",
        "--output",
        "--query",
        "--endpoint-url",
        "--no-verify-ssl",
        "--no-paginate",
        "--color",
        "--no-cli-pager",
        "--cli-auto-prompt",
        "--no-cli-auto-prompt",
        "--ca-bundle",
        "--cli-read-timeout",
        "--cli-connect-timeout",
        "--no-sign-request",
        "--version",
        "--help",
    ],
};

/// Operations whose answer is a secret or a credential (service, operation).
const AWS_SECRET_OPS: &[(&str, &str)] = &[
    ("secretsmanager", "get-secret-value"),
    ("secretsmanager", "batch-get-secret-value"),
    ("sts", "get-session-token"),
    ("sts", "get-federation-token"),
    ("sts", "assume-role"),
    ("sts", "assume-role-with-web-identity"),
    ("sts", "assume-role-with-saml"),
    ("ecr", "get-login-password"),
    ("ecr", "get-authorization-token"),
    ("ecr-public", "get-login-password"),
    ("ecr-public", "get-authorization-token"),
    ("codeartifact", "get-authorization-token"),
    ("eks", "get-token"),
    ("rds", "generate-db-auth-token"),
    ("ec2", "get-password-data"),
    ("lambda", "get-function"),
    ("lambda", "get-function-configuration"),
    ("iam", "get-credential-report"),
    ("cognito-identity", "get-credentials-for-identity"),
    ("sso", "get-role-credentials"),
    ("configure", "get"),
    ("configure", "export-credentials"),
    ("kms", "decrypt"),
    ("ssm", "get-parameters-by-path"),
];

pub(super) fn aws(args: &[&str]) -> PackVerdict {
    let line = match Line::parse(args, &AWS) {
        Ok(l) => l,
        Err(o) => return unknown_global("aws", &o),
    };
    if let Some(d) = line.find(&["--debug"]) {
        return secret(format!("`aws {d}` logs signed requests and session tokens"));
    }
    for f in line.values(&["--output"]) {
        if !matches!(f, "json" | "text" | "table" | "yaml" | "yaml-stream") {
            return unsafe_(f, "is not an output format");
        }
    }
    let (Some(service), op) = (line.pos(0), line.pos(1)) else {
        return if line.has(&["--version", "--help"]) {
            read("aws --version")
        } else {
            not_read("aws")
        };
    };
    let Some(op) = op else {
        return not_read(format!("aws {service}"));
    };
    if AWS_SECRET_OPS.contains(&(service, op))
        || (op.starts_with("get-parameter") && line.has(&["--with-decryption"]))
        || line.has(&["--include-value", "--include-values"])
    {
        return secret(format!(
            "`aws {service} {op}` returns a secret or credentials"
        ));
    }
    match (service, op) {
        ("s3", "ls") => read("aws s3 ls"),
        ("s3", _) => not_read(format!(
            "aws s3 {op} (copies, syncs, moves, removes or presigns)"
        )),
        ("s3api", "get-object" | "get-object-torrent") => not_read(format!(
            "aws s3api {op} (writes the object to a local file)"
        )),
        ("logs", "tail") => read("aws logs tail"),
        ("configure", "list" | "list-profiles") => read("aws configure list (keys masked)"),
        (_, "help") => read("aws … help"),
        (_, "wait") => read("aws … wait (polls a describe call)"),
        (_, op)
            if op.starts_with("list-") || op.starts_with("describe-") || op.starts_with("get-") =>
        {
            read("aws … list-*/describe-*/get-*")
        }
        _ => not_read(format!("aws {service} {op} (changes remote state)")),
    }
}

// ---- gcloud (cloud.google.com/sdk/gcloud/reference) ----

pub(super) fn gcloud(args: &[&str]) -> PackVerdict {
    if let Some(f) = args.iter().find(|a| a.starts_with("--log-http")) {
        return secret(format!(
            "`gcloud {f}` logs requests with their access tokens"
        ));
    }
    if let Some(f) = args.iter().find(|a| a.starts_with("--flags-file")) {
        return not_read(format!(
            "gcloud {f} (flags from a file that cannot be checked)"
        ));
    }
    // The command path: the words before the first option (gcloud puts flags after it).
    let path: Vec<&str> = args
        .iter()
        .copied()
        .take_while(|a| !a.starts_with('-'))
        .collect();
    let path: Vec<&str> = path
        .into_iter()
        .skip_while(|w| matches!(*w, "alpha" | "beta" | "preview"))
        .collect();
    if path.is_empty() {
        return if args
            .iter()
            .any(|a| *a == "--version" || *a == "-v" || *a == "--help")
        {
            read("gcloud --version")
        } else {
            not_read("gcloud")
        };
    }
    let joined = path.join(" ");
    if joined.starts_with("auth print-")
        || joined.starts_with("auth application-default print-")
        || joined.starts_with("secrets versions access")
        || joined.contains("get-credentials")
        || joined.starts_with("iam service-accounts keys create")
        || joined.starts_with("sql generate-login-token")
        || joined.starts_with("config config-helper")
    {
        return secret(format!(
            "`gcloud {joined}` prints a token, a key or a secret's value"
        ));
    }
    match path.as_slice() {
        ["info" | "version" | "help", ..] => return read("gcloud info/version/help"),
        ["config", "list" | "get-value" | "get", ..]
        | ["config", "configurations", "list" | "describe", ..] => {
            return read("gcloud config list/get")
        }
        ["auth", "list"] => return read("gcloud auth list (accounts only)"),
        ["logging", "read", ..] | ["logging", "logs", "list"] => {
            return read("gcloud logging read")
        }
        ["components", "list"] => return read("gcloud components list"),
        _ => {}
    }
    // GROUP… VERB [NAME]: groups are nouns; the first read verb ends them. A word before it that
    // is a known command (a verb that changes something) makes it that command's argument.
    const MUTATING: &[&str] = &[
        "create",
        "delete",
        "update",
        "set",
        "unset",
        "add",
        "remove",
        "deploy",
        "ssh",
        "scp",
        "start",
        "stop",
        "reset",
        "resize",
        "import",
        "export",
        "patch",
        "replace",
        "enable",
        "disable",
        "submit",
        "cancel",
        "attach",
        "detach",
        "move",
        "restore",
        "rollback",
        "apply",
        "login",
        "activate",
        "revoke",
        "copy-files",
        "connect",
        "cp",
        "rm",
        "mv",
        "rsync",
        "execute",
        "call",
        "publish",
        "undelete",
        "upgrade",
        "install",
        "reinstall",
        "suspend",
        "resume",
        "clone",
        "sign",
        "encrypt",
        "decrypt",
        "access",
        "tunnel",
        "proxy",
        "init",
    ];
    const READ_VERBS: &[&str] = &[
        "list",
        "describe",
        "get-iam-policy",
        "list-grantable-roles",
        "ls",
    ];
    let verb_at = path.iter().position(|w| {
        READ_VERBS.contains(w) || w.starts_with("list-") || w.starts_with("describe-")
    });
    match verb_at {
        Some(i)
            if i >= 1
                && path.len() - i <= 2
                && path[..i].iter().all(|w| {
                    !MUTATING.contains(w)
                        && w.bytes()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                }) =>
        {
            read("gcloud … list/describe/get-iam-policy")
        }
        _ => not_read(format!(
            "gcloud {joined} (changes resources, opens sessions, or writes files)"
        )),
    }
}

// ---- az (learn.microsoft.com/cli/azure/reference-index) ----

pub(super) fn az(args: &[&str]) -> PackVerdict {
    if let Some(d) = args.iter().find(|a| **a == "--debug") {
        return secret(format!("`az {d}` logs requests with their access tokens"));
    }
    let path: Vec<&str> = args
        .iter()
        .copied()
        .take_while(|a| !a.starts_with('-'))
        .collect();
    if path.is_empty() {
        return if args
            .iter()
            .any(|a| *a == "--version" || *a == "--help" || *a == "-h")
        {
            read("az --version")
        } else {
            not_read("az")
        };
    }
    for f in args
        .windows(2)
        .filter(|w| w[0] == "-o" || w[0] == "--output")
        .map(|w| w[1])
    {
        if !matches!(
            f,
            "json" | "jsonc" | "table" | "tsv" | "yaml" | "yamlc" | "none"
        ) {
            return unsafe_(f, "is not an output format");
        }
    }
    let joined = path.join(" ");
    let last = *path.last().unwrap_or(&"");
    let secretive = [
        "get-access-token",
        "show-connection-string",
        "list-keys",
        "list-connection-strings",
        "keys",
        "credential",
        "credentials",
        "appsettings",
        "connection-string",
        "get-credentials",
        "list-secrets",
        "generate-sas",
    ];
    if path.iter().any(|w| secretive.contains(w))
        || (path.contains(&"secret") && matches!(last, "show" | "download" | "show-deleted"))
    {
        return secret(format!(
            "`az {joined}` returns a token, a key or a secret's value"
        ));
    }
    match (path.as_slice(), last) {
        (["version" | "find" | "help"], _) => read("az version"),
        (["account", "show" | "list"], _) => read("az account show/list"),
        (
            _,
            "show" | "list" | "list-locations" | "list-skus" | "list-sizes" | "list-usage"
            | "exists",
        ) if path.len() > 1 => read("az … show/list"),
        _ => not_read(format!(
            "az {joined} (changes resources, or is an extension)"
        )),
    }
}
