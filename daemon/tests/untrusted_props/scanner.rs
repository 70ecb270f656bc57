//! The include scanner that keeps host paths out of NVRTC: any text gets a verdict, never a
//! panic, and an include or a `__has_include` probe of a path outside the headers given by
//! content is refused however it is spaced, commented or split across lines.

use crate::CORPUS;
use crate::support::config;
use kiln_daemon::runtime::toolchain::includes::check;
use proptest::prelude::*;

/// Source text as a soup of the pieces the scanner treats specially, and any other characters,
/// multi-byte ones included.
pub(crate) fn soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => prop::sample::select(vec![
            "#", "include", "include_next", "embed", "import", "if", "define", "__has_include",
            "__has_include_next", "(", ")", "<", ">", "\"", "'", "\\", "\\\n", "\n", "/*", "*/", "//",
            "/", "..", "../", "/etc/passwd", "a.h", " ", "\t", "é", "€", "𝄞", "\u{0}", "\r\n",
        ])
        .prop_map(String::from),
        1 => any::<char>().prop_map(String::from),
        1 => ".{0,8}",
    ];
    prop::collection::vec(piece, 0..48).prop_map(|v| v.concat())
}

/// Horizontal space as the preprocessor sees it: blanks, comments, line splices.
fn gap() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["", " ", "\t", "/**/", "/* x */", "\\\n", " \\\n "]), 0..3)
        .prop_map(|v| v.concat())
}

/// Lines before a directive that leave no comment or string open.
fn preamble() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "int x;\n",
            "// #include \"/etc/passwd\"\n",
            "/* #include </etc/shadow> */\n",
            "const char* s = \"#include </etc/passwd>\";\n",
            "#define A 1\n",
            "#include <cuda_fp16.h>\n",
            "\n",
            "char c = '\"';\n",
        ]),
        0..4,
    )
    .prop_map(|v| v.concat())
}

/// Relative names with no `..` part: what the headers given by content are called.
pub(crate) fn relative_name() -> impl Strategy<Value = String> {
    prop::collection::vec("[A-Za-z0-9_][A-Za-z0-9_.+-]{0,8}".prop_filter("not ..", |p| p != ".."), 1..4)
        .prop_map(|parts| parts.join("/"))
}

/// Names that reach outside the given headers: absolute, or with a `..` part.
pub(crate) fn outside_name() -> impl Strategy<Value = String> {
    (relative_name(), relative_name(), 0u8..3).prop_map(|(a, b, how)| match how {
        0 => format!("/{a}"),
        1 => format!("../{a}"),
        _ => format!("{a}/../{b}"),
    })
}

/// Splices a backslash-newline in at `at` (a char boundary), which the preprocessor removes.
fn splice(name: &str, at: prop::sample::Index) -> String {
    let bounds: Vec<usize> = name.char_indices().map(|(i, _)| i).chain([name.len()]).collect();
    let i = bounds[at.index(bounds.len())];
    format!("{}\\\n{}", &name[..i], &name[i..])
}

fn quoted(name: &str, angle: bool) -> String {
    if angle { format!("<{name}>") } else { format!("\"{name}\"") }
}

/// Found by `the_scanner_never_panics`: a multi-byte character before `__has_include` put the
/// probe search inside the character, and slicing the text there panicked (a client could fail
/// kilnd's request handler with `é__has_include`).
#[test]
fn regression_multibyte_character_before_a_probe() {
    assert_eq!(
        check("é__has_include"),
        Err(kiln_daemon::runtime::toolchain::includes::IncludeError {
            line: 1,
            reason: "computed __has_include is not allowed: name the header in quotes or angle brackets".into(),
        })
    );
    assert!(check("€ #if __has_include(</etc/shadow>)\n#endif").is_err());
    assert_eq!(check("𝄞x __has_include(<a.h>) é\\\"ü\" é__has_include(\"b.h\")"), Ok(()));
    assert!(check("'é\\é' 𝄞__has_include(<../x>)").is_err());
}

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// Any text gets a verdict, never a panic, and the same verdict every time (the memo).
    #[test]
    fn the_scanner_never_panics(s in soup()) {
        let first = check(&s);
        prop_assert_eq!(check(&s), first);
    }

    /// `#include` of a path outside the given headers is refused, however the directive is
    /// spaced, commented or split across lines.
    #[test]
    fn outside_includes_are_refused(
        pre in preamble(), name in outside_name(), angle in any::<bool>(),
        g1 in gap(), g2 in gap(), g3 in gap(), split in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let name = split.map_or(name.clone(), |at| splice(&name, at));
        let src = format!("{pre}{g1}#{g2}include{g3}{}\nint y;\n", quoted(&name, angle));
        let line = pre.matches('\n').count() + 1;
        let e = check(&src).unwrap_err();
        prop_assert!(e.line <= line, "{:?}: line {}", src, e.line);
    }

    /// `__has_include` probes of such paths are refused too, in `#if`, `#elif` and macros.
    #[test]
    fn outside_probes_are_refused(
        pre in preamble(), name in outside_name(), angle in any::<bool>(), g in gap(),
        how in prop::sample::select(vec!["#if ", "#elif defined(X) || ", "#define P "]),
        split in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let name = split.map_or(name.clone(), |at| splice(&name, at));
        let src = format!("{pre}{how}__has_include({g}{})\n#endif\n", quoted(&name, angle));
        prop_assert!(check(&src).is_err(), "{:?} passed", src);
    }

    /// Plain relative includes and probes pass, and so does any directive hidden in a comment.
    #[test]
    fn relative_includes_pass(
        pre in preamble(), names in prop::collection::vec((relative_name(), any::<bool>()), 1..4),
        g1 in gap(), g2 in gap(), g3 in gap(), hidden in outside_name(),
    ) {
        let mut src = pre;
        for (name, angle) in &names {
            src += &format!("{g1}#{g2}include{g3}{}\n", quoted(name, *angle));
            src += &format!("#if __has_include({})\n#endif\n", quoted(name, !*angle));
        }
        src += &format!("// #include \"{hidden}\"\n/* #include <{hidden}>\n#if __has_include(<{hidden}>) */\n");
        prop_assert_eq!(check(&src), Ok(()), "{:?}", src);
    }
}
