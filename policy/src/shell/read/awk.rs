//! Proving an awk program harmless: no `system()`, no pipes (`print | "cmd"`, `"cmd" | getline`,
//! `|&`), no `getline` at all (it can read any file), no output redirection inside `print`/`printf`,
//! no gawk `@` directives or indirect calls.

/// `Ok` when `program` cannot run commands or write files; `Err` says why not.
pub(super) fn check(program: &str) -> Result<(), &'static str> {
    let code = strip_literals(program);
    let b = code.as_bytes();
    let mut i = 0;
    // Inside a print/printf statement, at paren depth `print_depth`.
    let mut in_print = false;
    let mut depth: i32 = 0;
    let mut print_depth: i32 = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            match &code[start..i] {
                "system" => {
                    return Err("is an awk program that calls system(), which runs a shell command")
                }
                "getline" => return Err(
                    "is an awk program that uses getline, which can run a command or read any file",
                ),
                "print" | "printf" => {
                    in_print = true;
                    print_depth = depth;
                }
                _ => {}
            }
            continue;
        }
        match c {
            b'@' => return Err("is an awk program with gawk @-directives or indirect calls"),
            b'|' => {
                if b.get(i + 1) == Some(&b'|') {
                    i += 2;
                    continue;
                }
                return Err("is an awk program that pipes to or from a command");
            }
            b'>' if in_print && depth == print_depth => {
                return Err("is an awk program that redirects print output to a file");
            }
            b'(' => depth += 1,
            b')' => depth -= 1,
            b';' | b'\n' | b'{' | b'}' => in_print = false,
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Replace string and regex literals by empty ones so their text is not mistaken for code.
fn strip_literals(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = String::with_capacity(p.len());
    let mut i = 0;
    // The last significant byte: decides whether `/` starts a regex or divides.
    let mut last: u8 = b'(';
    while i < b.len() {
        let c = b[i];
        if c == b'"'
            || (c == b'/'
                && !(last.is_ascii_alphanumeric() || matches!(last, b')' | b']' | b'_' | b'$')))
        {
            let delim = c;
            i += 1;
            while i < b.len() && b[i] != delim {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str(if delim == b'"' { "\"\"" } else { "//" });
            last = b'"';
            continue;
        }
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if !c.is_ascii_whitespace() {
            last = c;
        }
        // Keep multi-byte characters intact.
        let len = p[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&p[i..i + len]);
        i += len;
    }
    out
}
