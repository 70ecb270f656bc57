//! Finds the `#include` directives of one CUDA C++ text.
//!
//! This is not a preprocessor: it does not evaluate `#if` or expand macros, so `#include MACRO`
//! is skipped and a header under `#if 0` is still found. Sending a header the compile does not
//! need costs a few bytes; missing one fails the compile, so erring towards more is right.

/// How a directive spells its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delimiter {
    /// `#include "name"`: searched next to the including file first.
    Quoted,
    /// `#include <name>`: searched on the include path only.
    Angle,
}

/// One `#include` directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The name exactly as spelled between the delimiters.
    pub name: String,
    pub delimiter: Delimiter,
}

/// The include directives of `text`, in order, ignoring those inside comments.
pub fn directives(text: &str) -> Vec<Directive> {
    strip_comments(&splice_lines(text)).lines().filter_map(parse_directive).collect()
}

/// Joins lines ending in a backslash with the next line (translation phase 2), so a directive
/// split over lines is seen whole.
fn splice_lines(text: &str) -> String {
    text.replace("\\\r\n", "").replace("\\\n", "")
}

/// Replaces each comment with one space (translation phase 3), leaving string and character
/// literals alone so that `"http://x"` is not taken for a comment. A block comment keeps none of
/// its newlines, as in C, so text after it stays on the line where the comment began.
fn strip_comments(text: &str) -> String {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Code,
        LineComment,
        BlockComment,
        Literal(char),
    }

    let mut out = String::with_capacity(text.len());
    let mut state = State::Code;
    let mut prev = '\0';
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match state {
            State::Code => match c {
                '/' if chars.peek() == Some(&'/') => {
                    chars.next();
                    state = State::LineComment;
                    out.push(' ');
                }
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    state = State::BlockComment;
                    out.push(' ');
                }
                // A quote after a digit is a C++14 digit separator (1'000), not a literal.
                '\'' if prev.is_ascii_digit() => out.push(c),
                '"' | '\'' => {
                    state = State::Literal(c);
                    out.push(c);
                }
                _ => out.push(c),
            },
            State::LineComment => {
                if c == '\n' {
                    state = State::Code;
                    out.push(c);
                }
            }
            State::BlockComment => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    state = State::Code;
                }
            }
            State::Literal(quote) => {
                out.push(c);
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        out.push(escaped);
                    }
                } else if c == quote || c == '\n' {
                    // A newline ends an unterminated literal, so one stray quote spoils one line.
                    state = State::Code;
                }
            }
        }
        prev = c;
    }
    out
}

/// Parses `#  include "name"` or `# include <name>` from one comment-free line.
fn parse_directive(line: &str) -> Option<Directive> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest.strip_prefix("include")?;
    // `#include_next` and `#includefoo` are not `#include`.
    if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let rest = rest.trim_start();
    let (delimiter, close) = match rest.chars().next()? {
        '"' => (Delimiter::Quoted, '"'),
        '<' => (Delimiter::Angle, '>'),
        _ => return None,
    };
    let inner = &rest[1..];
    let name = &inner[..inner.find(close)?];
    if name.is_empty() {
        return None;
    }
    Some(Directive { name: name.to_owned(), delimiter })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(name: &str) -> Directive {
        Directive { name: name.into(), delimiter: Delimiter::Quoted }
    }

    fn angle(name: &str) -> Directive {
        Directive { name: name.into(), delimiter: Delimiter::Angle }
    }

    /// Each case: what it shows, a source text, and the directives a preprocessor would follow.
    #[test]
    fn finds_the_includes_a_preprocessor_would_follow() {
        let cases = [
            (
                "both kinds, with any spacing",
                "#include \"a.h\"\n  #  include <b/c.h>\n#include\t\"d.h\" // trailing\nint x;\n",
                vec![quoted("a.h"), angle("b/c.h"), quoted("d.h")],
            ),
            (
                "includes in comments are ignored",
                "// #include \"line.h\"\n/* #include \"block.h\"\n #include <x.h> */\n#include \"real.h\"\n",
                vec![quoted("real.h")],
            ),
            (
                // As in C: the comment becomes one space, so the directive is not at the start of a line.
                "text after a multi-line comment continues its first line",
                "int x; /* a\n */ #include \"not.h\"\n/* b\n */ #include \"yes.h\"\n",
                vec![quoted("yes.h")],
            ),
            (
                "comment markers inside literals are not comments",
                "const char* u = \"http://x/*\";\n#include \"a.h\"\nchar c = '\"';\n#include \"b.h\"\n",
                vec![quoted("a.h"), quoted("b.h")],
            ),
            ("digit separators do not open literals", "int n = 1'000;\n#include \"a.h\"\n", vec![quoted("a.h")]),
            (
                "continued lines are joined",
                "#include \\\n  \"split.h\"\n#inc\\\nlude <joined.h>\n",
                vec![quoted("split.h"), angle("joined.h")],
            ),
            (
                "what is not a plain include is skipped",
                "#include_next <n.h>\n#include MACRO\n#include \"\"\n#include \"open\n#define include \"x.h\"\n",
                vec![],
            ),
        ];
        for (what, text, found) in cases {
            assert_eq!(directives(text), found, "{what}");
        }
    }
}
