//! Environment dumps: commands that print the environment (or a variable that looks like a
//! secret) read secrets as surely as `cat ~/.aws/credentials` does, because agents run with tokens
//! in their environment. They are never reads; the daemon asks a person (`reads_secret`).

use crate::secrets::secret_env_name;
use crate::shell::types::Word;

/// What `name args` prints of the environment, when it prints any of it: `Some(what)` for a dump.
pub(super) fn dump(name: &str, args: &[Word]) -> Option<String> {
    let texts: Vec<&str> = args.iter().map(Word::text).collect();
    let operands: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-') && !a.starts_with('+'))
        .collect();
    let whole = || Some("prints the whole environment".to_owned());
    match name {
        // A command word `env` has no command to run (the wrapper form was peeled): it prints.
        "env" => whole(),
        "printenv" => {
            if operands.is_empty() {
                return whole();
            }
            secret_operand(args)
        }
        "export" => {
            // `export`, `export -p`: every exported variable. `export X=1` is an assignment.
            operands
                .is_empty()
                .then(|| "prints every exported variable".to_owned())
        }
        "declare" | "typeset" | "readonly" | "local" => {
            let functions_only = texts
                .iter()
                .any(|a| a.starts_with('-') && (a.contains('f') || a.contains('F')));
            if operands.is_empty() {
                return (!functions_only).then(|| "prints shell and environment variables".into());
            }
            if texts.iter().any(|a| a.starts_with('-') && a.contains('p')) {
                return secret_operand(args);
            }
            None
        }
        // `set` alone prints every variable; `set -e`, `set -o pipefail` set options.
        "set" => texts
            .is_empty()
            .then(|| "prints every shell variable".to_owned()),
        "ps" => ps_environment(&texts).then(|| "shows other processes' environments".to_owned()),
        _ => None,
    }
}

/// The first operand that names a secret-looking variable, or is only known at run time.
fn secret_operand(args: &[Word]) -> Option<String> {
    args.iter().find_map(|a| match a {
        Word::Static(s) if s.starts_with('-') => None,
        Word::Static(s) => {
            let var = s.split_once('=').map_or(s.as_str(), |(n, _)| n);
            secret_env_name(var).then(|| format!("prints `{var}`, which looks like a secret"))
        }
        Word::Dynamic(raw) => Some(format!(
            "prints a variable named by `{raw}`, which is only known at run time"
        )),
    })
}

/// Does a `ps` command line show environments: a BSD-style option word (no dash) with `e`
/// (`ps e`, `ps auxeww`), or a format naming `environ`?
fn ps_environment(texts: &[&str]) -> bool {
    // Options whose value follows as the next word (their value is not a BSD option word).
    const TAKES_VALUE: &[&str] = &[
        "-o", "-O", "-p", "-q", "-u", "-U", "-g", "-G", "-t", "-C", "-s", "--sort", "-k", "--pid",
        "--ppid", "--user", "--group", "--format", "-N",
    ];
    let mut prev: Option<&str> = None;
    for &a in texts {
        let value_of_prev = prev.is_some_and(|p| TAKES_VALUE.contains(&p));
        if a.to_ascii_lowercase().contains("environ") {
            return true;
        }
        if !value_of_prev
            && !a.starts_with('-')
            && !a.is_empty()
            && a.chars().all(|c| c.is_ascii_alphabetic())
            && a.contains('e')
        {
            return true;
        }
        prev = Some(a);
    }
    false
}

/// The first variable a dynamic word expands that looks like a secret (`$GITHUB_TOKEN`,
/// `"${AWS_SECRET_ACCESS_KEY}"`, `${DB_PASSWORD:-x}`).
pub(super) fn secret_reference(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i] == b'$' {
            let mut j = i + 1;
            if bytes.get(j) == Some(&b'{') {
                j += 1;
                // `${!prefix*}` and `${!name}` (indirection) name variables at run time.
                if bytes.get(j) == Some(&b'!') {
                    return Some(raw[i..].chars().take(32).collect());
                }
            }
            let start = j;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                j += 1;
            }
            let var = &raw[start..j];
            if !var.is_empty() && secret_env_name(var) {
                return Some(var.to_owned());
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        assert_eq!(
            secret_reference("$GITHUB_TOKEN").as_deref(),
            Some("GITHUB_TOKEN")
        );
        assert_eq!(
            secret_reference("\"${AWS_SECRET_ACCESS_KEY}\"").as_deref(),
            Some("AWS_SECRET_ACCESS_KEY")
        );
        assert!(secret_reference("${!GH*}").is_some());
        assert_eq!(secret_reference("$HOME/src"), None);
        assert_eq!(secret_reference("\\$TOKEN"), None);
        assert_eq!(secret_reference("$PWD"), None);
    }

    #[test]
    fn ps_forms() {
        assert!(ps_environment(&["e"]));
        assert!(ps_environment(&["auxeww"]));
        assert!(ps_environment(&["-o", "pid,environ"]));
        assert!(!ps_environment(&["aux"]));
        assert!(!ps_environment(&["-ef"]));
        assert!(!ps_environment(&["-o", "user"]));
        assert!(!ps_environment(&["-p", "1234"]));
    }
}
