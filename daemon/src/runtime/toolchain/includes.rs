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
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct IncludeError {
    pub line: usize,
    pub reason: String,
}

/// Checks every preprocessing directive that can open a file.
///
/// The verdict is a pure function of the text, and a warm graph sends the same sources on every
/// request, so the verdicts of recent texts are kept by their blake3: a repeat costs a hash
/// instead of a scan (the scan was an eighth of the daemon's CPU on a warm hit of 64 kernels).
pub fn check(source: &str) -> Result<(), IncludeError> {
    static VERDICTS: std::sync::LazyLock<moka::sync::Cache<[u8; 32], Result<(), IncludeError>>> =
        std::sync::LazyLock::new(|| moka::sync::Cache::new(16_384));
    let digest = *blake3::hash(source.as_bytes()).as_bytes();
    if let Some(verdict) = VERDICTS.get(&digest) {
        return verdict;
    }
    let verdict = scan(source);
    VERDICTS.insert(digest, verdict.clone());
    verdict
}

fn scan(source: &str) -> Result<(), IncludeError> {
    let lines = logical_lines(source);
    for (line, text) in &lines {
        let line = *line;
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
        if outside(name) {
            let shown: String = name.chars().take(80).collect();
            return err(format!("#include \"{shown}\" names a path outside the given headers"));
        }
    }
    for (line, text) in &lines {
        has_include_probes(text).map_err(|reason| IncludeError { line: *line, reason })?;
    }
    Ok(())
}

/// Whether an include name could reach a file other than the given headers and the toolkit's.
fn outside(name: &str) -> bool {
    name.starts_with('/') || name.contains('\\') || name.split('/').any(|part| part == "..")
}

/// `__has_include(NAME)` answers whether a file exists without opening it: a probe of a host
/// path (`#if __has_include(</etc/shadow>)`) would tell a client what the daemon's host holds.
/// Every use is checked like `#include`, in any line (a macro can carry one into an `#if`);
/// `__has_include_next` and computed operands are refused. String literals are skipped.
fn has_include_probes(text: &str) -> Result<(), String> {
    const PROBE: &str = "__has_include";
    if !text.contains(PROBE) {
        return Ok(());
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        if let Some(q) = quote {
            i += if b == b'\\' { 2 } else { 1 };
            if b == q {
                quote = None;
            }
            continue;
        }
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        // Bytes, not `text[i..]`: `i` steps by bytes and may sit inside a multi-byte character.
        if !(starts_word && bytes[i..].starts_with(PROBE.as_bytes())) {
            if b == b'"' || b == b'\'' {
                quote = Some(b);
            }
            i += 1;
            continue;
        }
        let word: String = text[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        i += word.len();
        match word.as_str() {
            "__has_include" => {}
            "__has_include_next" => return Err("__has_include_next is not allowed".into()),
            _ => continue,
        }
        let operand = text[i..].trim_start().strip_prefix('(').map(str::trim_start).unwrap_or("");
        let name = match operand.chars().next() {
            Some('"') => operand[1..].split('"').next(),
            Some('<') => operand[1..].split('>').next(),
            _ => {
                return Err("computed __has_include is not allowed: name the header in quotes or angle brackets".into());
            }
        };
        let name = name.unwrap_or_default();
        if name.is_empty() || outside(name) {
            let shown: String = name.chars().take(80).collect();
            return Err(format!("__has_include(\"{shown}\") names a path outside the given headers"));
        }
        // On past the operand's closing quote or bracket, so a quoted name is not taken for
        // the start of a string literal.
        i = text.len() - operand.len() + name.len() + 2;
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

    /// Each for its own reason, which names the path as it was read: a spliced or commented
    /// directive is still an include, and a `__has_include` probe of a host path is refused as
    /// an include of it would be.
    #[test]
    fn host_paths_and_probes_of_them_are_refused() {
        for (bad, why) in [
            ("#include \"/etc/passwd\"", "#include \"/etc/passwd\" names a path outside"),
            ("#include </dev/zero>", "#include \"/dev/zero\" names a path outside"),
            ("#include \"../../etc/shadow\"", "#include \"../../etc/shadow\" names a path outside"),
            ("#include \"a/../../b.h\"", "#include \"a/../../b.h\" names a path outside"),
            ("#inc\\\nlude \"/etc/passwd\"", "#include \"/etc/passwd\" names a path outside"),
            ("#/**/include \"/etc/passwd\"", "#include \"/etc/passwd\" names a path outside"),
            ("#define P \"/etc/passwd\"\n#include P", "computed #include is not allowed"),
            ("#include_next <x.h>", "#include_next is not allowed"),
            ("#embed \"/dev/zero\"", "#embed is not allowed"),
            ("#if __has_include(</etc/shadow>)\nint x;\n#endif", "__has_include(\"/etc/shadow\") names a path outside"),
            ("#if __has_include( \"/etc/shadow\" )\n#endif", "__has_include(\"/etc/shadow\") names a path outside"),
            ("#elif __has_include(\"../../etc/passwd\")", "__has_include(\"../../etc/passwd\") names a path outside"),
            (
                "#define HAS __has_include(</root/.ssh/id_rsa>)\n#if HAS\n#endif",
                "__has_include(\"/root/.ssh/id_rsa\") names a path outside",
            ),
            (
                "#if defined(X) && __has_in\\\nclude(</etc/shadow>)\n#endif",
                "__has_include(\"/etc/shadow\") names a path outside",
            ),
            ("#if __has_include_next(<cuda_fp16.h>)\n#endif", "__has_include_next is not allowed"),
            ("#define P </etc/shadow>\n#if __has_include(P)\n#endif", "computed __has_include is not allowed"),
        ] {
            let e = check(bad).expect_err(bad);
            assert!(e.reason.starts_with(why), "{bad:?}: {}", e.reason);
        }
        assert_eq!(check("int a;\n\n#include \"/etc/passwd\"").unwrap_err().line, 3);
        assert_eq!(check("int a;\n#if __has_include(</etc/shadow>)\n#endif").unwrap_err().line, 2);
    }

    #[test]
    fn has_include_of_headers_and_strings_mentioning_it_pass() {
        for good in [
            "#if __has_include(<cuda_fp16.h>)\n#include <cuda_fp16.h>\n#endif",
            "#if __has_include(\"local/a.h\") && __has_include(<b.h>)\n#endif",
            "const char* s = \"__has_include(</etc/shadow>)\";",
            "// __has_include(</etc/shadow>)\nint y;",
            "int my__has_include_x = 1;",
        ] {
            assert_eq!(check(good), Ok(()), "{good:?}");
        }
    }
}
