//! Include directives in untrusted source.
//!
//! NVRTC resolves `#include` against the headers given by content, its include path and the file
//! system. A client must not make the compiler read a host path (`#include "/etc/passwd"` would
//! echo the file into the log; `/dev/zero` would hang), so every directive must name a relative
//! path with no `..`, and a computed include (`#include MACRO`) is refused, since its name is
//! only known after expansion. The check runs after line splicing and comment removal, the same
//! translation phases the preprocessor applies before it sees directives. The workers also run in
//! an empty directory, so a relative name finds only the given headers and the toolkit's.

/// Why a source was refused. The caller names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct IncludeError {
    pub line: usize,
    pub reason: String,
}

/// Checks every preprocessing directive that can open a file.
pub fn check(source: &str) -> Result<(), IncludeError> {
    for (line, text) in logical_lines(source) {
        let Some(rest) = text.trim_start().strip_prefix('#') else {
            continue;
        };
        let rest = rest.trim_start();
        let directive: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let err = |reason: String| Err(IncludeError { line, reason });
        match directive.as_str() {
            "include" => {}
            "include_next" | "import" | "embed" => {
                return err(format!("#{directive} is not allowed"));
            }
            _ => continue,
        }
        let operand = rest[directive.len()..].trim();
        let name = match operand.chars().next() {
            Some('"') => operand[1..].split('"').next(),
            Some('<') => operand[1..].split('>').next(),
            _ => return err("computed #include is not allowed: name the header in quotes or angle brackets".into()),
        };
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return err("malformed #include".into());
        };
        if name.starts_with('/') || name.contains('\\') || name.split('/').any(|part| part == "..") {
            let shown: String = name.chars().take(80).collect();
            return err(format!("#include \"{shown}\" names a path outside the given headers"));
        }
    }
    Ok(())
}

/// Splices backslash-newlines and blanks out comments, yielding (first physical line, text).
fn logical_lines(source: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start_line = 1;
    let mut line = 1;
    let mut chars = source.chars().peekable();
    let mut in_block = false;
    let mut in_string: Option<char> = None;
    while let Some(c) = chars.next() {
        if c == '\\' && matches!(chars.peek(), Some('\n')) {
            chars.next();
            line += 1;
            continue;
        }
        if c == '\n' {
            if !in_block {
                out.push((start_line, std::mem::take(&mut current)));
                start_line = line + 1;
            }
            in_string = None;
            line += 1;
            continue;
        }
        if in_block {
            if c == '*' && matches!(chars.peek(), Some('/')) {
                chars.next();
                in_block = false;
                current.push(' ');
            }
            continue;
        }
        if let Some(q) = in_string {
            current.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            } else if c == q {
                in_string = None;
            }
            continue;
        }
        match c {
            '/' if matches!(chars.peek(), Some('*')) => {
                chars.next();
                in_block = true;
            }
            '/' if matches!(chars.peek(), Some('/')) => {
                while chars.peek().is_some_and(|n| *n != '\n') {
                    chars.next();
                }
            }
            '"' | '\'' => {
                in_string = Some(c);
                current.push(c);
            }
            _ => current.push(c),
        }
    }
    out.push((start_line, current));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_includes_pass() {
        let src = "#include <cuda_fp16.h>\n#include \"my/local.h\"\n  #  include <cooperative_groups.h>\nint x = 1; // #include \"/etc/passwd\"\n";
        assert_eq!(check(src), Ok(()));
        assert_eq!(check("/* #include \"/etc/passwd\" */ int y;"), Ok(()));
    }

    #[test]
    fn host_paths_are_refused() {
        for bad in [
            "#include \"/etc/passwd\"",
            "#include </dev/zero>",
            "#include \"../../etc/shadow\"",
            "#include \"a/../../b.h\"",
            "#inc\\\nlude \"/etc/passwd\"",
            "#/**/include \"/etc/passwd\"",
            "#define P \"/etc/passwd\"\n#include P",
            "#include_next <x.h>",
            "#embed \"/dev/zero\"",
        ] {
            assert!(check(bad).is_err(), "{bad:?} passed");
        }
        assert_eq!(check("int a;\n\n#include \"/etc/passwd\"").unwrap_err().line, 3);
    }
}
