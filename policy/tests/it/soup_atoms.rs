// The "shell soup" atoms: fragments that exercise the grammar (quoting, substitutions, wrappers,
// re-entry, redirections). Included by `shell_properties.rs` and by `examples/soak.rs`, which
// runs the same soup by the million.
const SOUP_ATOMS: &[&str] = &[
    "ls", "rm", "cat", "git", "log", "sudo", "env", "bash", "-c", "eval", "xargs", "find", "-exec",
    "sed", "-i", "awk", "'", "\"", "`", "$(", ")", "${", "}", "(", "{", ";", "&&", "||", "|", "&",
    ">", ">>", "<", "<<", "<<<", "<(", ">(", "2>&1", "\n", " ", "$x", "~", "~/.ssh", "*", "?", "[",
    "]", "\\", "$'", "if", "then", "fi", "for", "in", "do", "done", "case", "esac", "))", "((",
    "=", "FOO=1", "#", "EOF", "!",
];
