//! Proving a sed script harmless: only commands that print, edit the pattern space or branch.
//! `e`, `w`, `W`, `r`, `R`, and the `s///e` / `s///w` flags execute or touch files; anything we
//! cannot parse is not proven harmless.

/// `Ok` when `script` only uses harmless commands; `Err` says why not.
pub(super) fn check(script: &str) -> Result<(), &'static str> {
    let b: Vec<char> = script.chars().collect();
    let mut i = 0;
    let unproven = "is a sed script that cannot be proven harmless";
    loop {
        while i < b.len() && (b[i].is_whitespace() || b[i] == ';') {
            i += 1;
        }
        if i >= b.len() {
            return Ok(());
        }
        // Addresses: `N`, `$`, `/re/`, `\cREc`, `first~step`, `addr,addr`, `addr,+N`, `addr,~N`.
        for k in 0..2 {
            i = address(&b, i).ok_or(unproven)?;
            while i < b.len() && b[i] == ' ' {
                i += 1;
            }
            if k == 0 && i < b.len() && b[i] == ',' {
                i += 1;
                continue;
            }
            break;
        }
        while i < b.len() && (b[i] == '!' || b[i] == ' ') {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            return Err(unproven);
        };
        i += 1;
        match c {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'l' | 'q' | 'Q' | 'L' => {
                while i < b.len() && (b[i] == ' ' || b[i].is_ascii_digit()) {
                    i += 1;
                }
            }
            ':' | 'b' | 't' | 'T' | 'v' => {
                while i < b.len() && b[i] != ';' && b[i] != '\n' && b[i] != '}' {
                    i += 1;
                }
            }
            '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line; `\` continues it on the next line.
                while i < b.len() && b[i] != '\n' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            's' | 'y' => {
                let delim = *b.get(i).ok_or(unproven)?;
                if delim == '\n' || delim == '\\' {
                    return Err(unproven);
                }
                i += 1;
                for _ in 0..2 {
                    while i < b.len() && b[i] != delim {
                        if b[i] == '\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                    if i >= b.len() {
                        return Err(unproven);
                    }
                    i += 1;
                }
                if c == 's' {
                    while i < b.len() {
                        match b[i] {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                            'e' => return Err("is a sed script whose s///e flag runs the pattern space as a command"),
                            'w' => return Err("is a sed script whose s///w flag writes a file"),
                            _ => break,
                        }
                    }
                }
            }
            'e' => return Err("is a sed script whose `e` command runs a shell command"),
            'w' | 'W' => return Err("is a sed script whose `w` command writes a file"),
            'r' | 'R' => {
                return Err("is a sed script whose `r` command reads a file that is not checked")
            }
            _ => return Err(unproven),
        }
    }
}

/// Skip one (possibly absent) address starting at `i`.
fn address(b: &[char], mut i: usize) -> Option<usize> {
    match b.get(i) {
        Some(c) if c.is_ascii_digit() => {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i < b.len() && b[i] == '~' {
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
        }
        Some('+') | Some('~') => {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
        Some('$') => i += 1,
        Some('/') | Some('\\') => {
            let delim = if b[i] == '\\' {
                i += 1;
                *b.get(i)?
            } else {
                '/'
            };
            i += 1;
            while i < b.len() && b[i] != delim {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            if i >= b.len() {
                return None;
            }
            i += 1;
            while i < b.len() && (b[i] == 'I' || b[i] == 'M') {
                i += 1;
            }
        }
        _ => {}
    }
    Some(i)
}
