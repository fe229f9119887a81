//! A minimal built-in catastrophic list, checked on argv lists from the shell analysis. It exists for
//! the escape hatch, where the daemon is not asked but "tier 3 still denies": these commands destroy a
//! machine or a home directory and no escape hatch makes them intended. (The daemon has its own,
//! fuller list; the hook's is deliberately small and literal.)

/// Targets whose recursive removal, chmod or chown is catastrophic.
const ROOTS: &[&str] = &[
    "/", "/*", "~", "~/", "~/*", "$HOME", "${HOME}", "$HOME/", "${HOME}/", "$HOME/*", "/home",
    "/root", "/etc", "/usr", "/var", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/opt", "/srv",
    "/dev", "/proc", "/sys", "/home/*", ".", "..", "./", "../", "*",
];

fn is_root_target(arg: &str) -> bool {
    let trimmed = if arg.len() > 1 {
        arg.trim_end_matches('/')
    } else {
        arg
    };
    ROOTS.contains(&arg) || ROOTS.contains(&trimmed)
}

/// A root target other than the working directory itself (`find . -name x -delete` is routine).
fn is_system_root(arg: &str) -> bool {
    is_root_target(arg) && !matches!(arg, "." | ".." | "./" | "../" | "*")
}

fn base(cmd: &str) -> &str {
    cmd.rsplit('/').next().unwrap_or(cmd)
}

fn has_flag(args: &[&str], short: char, long: &str) -> bool {
    args.iter().any(|a| {
        *a == long || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains(short))
    })
}

/// Why `argv` (as the program receives it; dynamic words as their source text) is catastrophic, or
/// `None`.
pub fn check(argv: &[&str]) -> Option<String> {
    let (cmd, args) = argv.split_first()?;
    let name = base(cmd);
    let targets: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-') || *a == "-")
        .collect();
    let any_root = targets.iter().any(|t| is_root_target(t));
    match name {
        "rm" if (has_flag(args, 'r', "--recursive") || has_flag(args, 'R', "--recursive"))
            && any_root =>
        {
            Some(format!("recursive removal of {}", targets.join(" ")))
        }
        "rm" if args.contains(&"--no-preserve-root") => Some("rm --no-preserve-root".into()),
        "chmod" | "chown" | "chgrp" if has_flag(args, 'R', "--recursive") && any_root => {
            Some(format!("recursive {name} of {}", targets.join(" ")))
        }
        "find"
            if args
                .iter()
                .any(|a| *a == "-delete" || *a == "-exec" && args.contains(&"rm"))
                && targets.first().is_some_and(|t| is_system_root(t)) =>
        {
            Some(format!("find {} with deletion", targets[0]))
        }
        "dd" if args
            .iter()
            .any(|a| a.starts_with("of=/dev/") && !is_harmless_dev(&a[3..])) =>
        {
            Some("dd onto a device".into())
        }
        "shred" | "wipefs" | "mkswap" | "fdisk" | "sfdisk" | "parted" | "blkdiscard"
            if args
                .iter()
                .any(|a| a.starts_with("/dev/") && !is_harmless_dev(a)) =>
        {
            Some(format!("{name} on a device"))
        }
        n if n.starts_with("mkfs") => Some(format!("{name} (formats a file system)")),
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(format!("{name} of the machine")),
        "init" | "telinit" if matches!(args.first(), Some(&"0") | Some(&"6")) => {
            Some("init 0/6 (halts or reboots the machine)".into())
        }
        "systemctl"
            if args
                .iter()
                .any(|a| matches!(*a, "poweroff" | "reboot" | "halt" | "kexec")) =>
        {
            Some("systemctl poweroff/reboot".into())
        }
        _ => None,
    }
}

fn is_harmless_dev(path: &str) -> bool {
    matches!(
        path,
        "/dev/null" | "/dev/zero" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
    )
}

/// A redirection writing to a block device (`> /dev/sda`) is catastrophic.
pub fn check_write_target(target: &str) -> Option<String> {
    (target.starts_with("/dev/") && !is_harmless_dev(target) && !target.starts_with("/dev/fd/"))
        .then(|| format!("writing to the device {target}"))
}

/// The classic fork bomb, which the grammar parses as an ordinary function definition.
pub fn check_source(command: &str) -> Option<String> {
    let squeezed: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    squeezed
        .contains(":(){:|:&};:")
        .then(|| "a fork bomb".into())
}

#[cfg(test)]
mod tests {
    use super::check;

    macro_rules! deny {
        ($($arg:expr),+) => { assert!(check(&[$($arg),+]).is_some(), "{:?}", [$($arg),+]) };
    }
    macro_rules! pass {
        ($($arg:expr),+) => { assert!(check(&[$($arg),+]).is_none(), "{:?}", [$($arg),+]) };
    }

    #[test]
    fn table() {
        deny!("rm", "-rf", "/");
        deny!("/bin/rm", "-r", "-f", "~");
        deny!("rm", "-fr", "$HOME/");
        deny!("rm", "--recursive", "/etc");
        deny!("rm", "-rf", "--no-preserve-root", "/");
        deny!("rm", "-Rf", "*");
        deny!("chmod", "-R", "777", "/");
        deny!("find", "/", "-delete");
        deny!("dd", "if=/dev/zero", "of=/dev/sda");
        deny!("mkfs.ext4", "/dev/sdb1");
        deny!("shutdown", "-h", "now");
        deny!("systemctl", "reboot");
        pass!("rm", "-rf", "target");
        pass!("rm", "notes.txt");
        pass!("rm", "/");
        pass!("chmod", "644", "file");
        pass!("dd", "if=a", "of=/dev/null");
        pass!("find", ".", "-name", "x");
        pass!("find", ".", "-name", "*.o", "-delete");
        pass!("ls", "-la", "/");
    }
}
