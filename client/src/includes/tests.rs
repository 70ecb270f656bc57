use super::*;
use std::fs;

/// Writes `files` (relative path, content) under a fresh temporary directory.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
    dir
}

fn resolve(dir: &Path, main: &str, include_dirs: &[&str]) -> Result<Vec<(String, String)>, IncludeError> {
    let path = dir.join(main);
    let source = fs::read_to_string(&path).unwrap();
    let dirs: Vec<PathBuf> = include_dirs.iter().map(|d| dir.join(d)).collect();
    let headers = resolve_headers(&path, &source, &dirs)?;
    Ok(headers.into_iter().map(|h| (h.name, h.content)).collect())
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items.iter().map(|(n, c)| (n.to_string(), c.to_string())).collect()
}

#[test]
fn follows_nested_includes_with_names_as_spelled() {
    let dir = tree(&[
        ("k.cu", "#include \"common/math.h\"\n__global__ void k() {}\n"),
        ("common/math.h", "#pragma once\n#include \"detail.h\"\n"),
        ("common/detail.h", "#pragma once\n#include <cuda_fp16.h>\n"),
    ]);
    let headers = resolve(dir.path(), "k.cu", &[]).unwrap();
    assert_eq!(
        headers,
        pairs(&[
            ("common/math.h", "#pragma once\n#include \"detail.h\"\n"),
            ("detail.h", "#pragma once\n#include <cuda_fp16.h>\n"),
        ])
    );
}

#[test]
fn quoted_includes_look_beside_the_file_before_the_include_dirs() {
    let dir = tree(&[("src/k.cu", "#include \"cfg.h\"\n"), ("src/cfg.h", "beside"), ("inc/cfg.h", "from -I")]);
    assert_eq!(resolve(dir.path(), "src/k.cu", &["inc"]).unwrap(), pairs(&[("cfg.h", "beside")]));
}

#[test]
fn include_dirs_are_searched_in_order() {
    let dir = tree(&[
        ("k.cu", "#include \"cfg.h\"\n#include <lib.h>\n"),
        ("first/lib.h", "first lib"),
        ("second/cfg.h", "second cfg"),
        ("second/lib.h", "second lib"),
    ]);
    assert_eq!(
        resolve(dir.path(), "k.cu", &["first", "second"]).unwrap(),
        pairs(&[("cfg.h", "second cfg"), ("lib.h", "first lib")])
    );
    assert_eq!(
        resolve(dir.path(), "k.cu", &["second", "first"]).unwrap(),
        pairs(&[("cfg.h", "second cfg"), ("lib.h", "second lib")])
    );
}

#[test]
fn angle_includes_do_not_look_beside_the_file() {
    let dir = tree(&[("k.cu", "#include <near.h>\n"), ("near.h", "x")]);
    assert_eq!(resolve(dir.path(), "k.cu", &[]).unwrap(), vec![]);
}

#[test]
fn headers_found_nowhere_are_left_to_the_daemon() {
    let dir = tree(&[("k.cu", "#include <cuda_runtime.h>\n#include \"missing.h\"\n#include \"/etc/hostname\"\n")]);
    assert_eq!(resolve(dir.path(), "k.cu", &[]).unwrap(), vec![]);
}

#[test]
fn includes_hidden_in_comments_are_ignored() {
    let dir = tree(&[
        ("k.cu", "// #include \"a.h\"\n/*\n#include \"b.h\"\n*/\n#include \"c.h\"\n"),
        ("a.h", "a"),
        ("b.h", "b"),
        ("c.h", "c"),
    ]);
    assert_eq!(resolve(dir.path(), "k.cu", &[]).unwrap(), pairs(&[("c.h", "c")]));
}

#[test]
fn an_edited_header_is_read_afresh() {
    let dir = tree(&[("k.cu", "#include \"v.h\"\n"), ("v.h", "#define V 1\n")]);
    let before = resolve(dir.path(), "k.cu", &[]).unwrap();
    fs::write(dir.path().join("v.h"), "#define V 2\n").unwrap();
    let after = resolve(dir.path(), "k.cu", &[]).unwrap();
    assert_eq!(before, pairs(&[("v.h", "#define V 1\n")]));
    assert_eq!(after, pairs(&[("v.h", "#define V 2\n")]));
}

#[test]
fn include_cycles_end() {
    let dir = tree(&[("k.cu", "#include \"a.h\"\n"), ("a.h", "#include \"b.h\"\n"), ("b.h", "#include \"a.h\"\n")]);
    let names: Vec<String> = resolve(dir.path(), "k.cu", &[]).unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["a.h", "b.h"]);
}

#[test]
fn one_name_with_two_contents_is_an_error() {
    let dir = tree(&[
        ("k.cu", "#include \"a/x.h\"\n#include \"b/x.h\"\n"),
        ("a/x.h", "#include \"util.h\"\n"),
        ("a/util.h", "a's util"),
        ("b/x.h", "#include \"util.h\"\n"),
        ("b/util.h", "b's util"),
    ]);
    let err = resolve(dir.path(), "k.cu", &[]).unwrap_err();
    match &err {
        IncludeError::Conflict { name, .. } => assert_eq!(name, "util.h"),
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("a/util.h") && text.contains("b/util.h"), "{text}");
}

#[test]
fn one_name_with_the_same_content_twice_is_fine() {
    let dir = tree(&[
        ("k.cu", "#include \"a/x.h\"\n#include \"b/x.h\"\n"),
        ("a/x.h", "#include \"util.h\"\n"),
        ("a/util.h", "same"),
        ("b/x.h", "#include \"util.h\"\n"),
        ("b/util.h", "same"),
    ]);
    let names: Vec<String> = resolve(dir.path(), "k.cu", &[]).unwrap().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["a/x.h", "b/x.h", "util.h"]);
}

#[test]
fn a_header_that_is_not_utf8_is_an_error() {
    let dir = tree(&[("k.cu", "#include \"bin.h\"\n")]);
    fs::write(dir.path().join("bin.h"), [0xff, 0xfe, 0x00]).unwrap();
    assert!(matches!(resolve(dir.path(), "k.cu", &[]), Err(IncludeError::NotUtf8 { .. })));
}

#[test]
fn parent_includes_are_sent_under_a_content_name_and_the_directive_is_rewritten() {
    let dir = tree(&[
        ("src/k.cu", "#include \"../include/scale.cuh\"\n__global__ void k() { scale(); }\n"),
        ("include/scale.cuh", "#pragma once\n#include \"../include/detail/base.cuh\"\n#include \"near.cuh\"\n"),
        ("include/detail/base.cuh", "// base\n"),
        ("include/near.cuh", "// near\n"),
    ]);
    let path = dir.path().join("src/k.cu");
    let source = fs::read_to_string(&path).unwrap();
    let r = super::resolve(&path, &source, &[]).unwrap();
    let names: Vec<&str> = r.headers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let scale = r.headers.iter().find(|h| h.name.ends_with("/scale.cuh")).unwrap();
    let base = r.headers.iter().find(|h| h.name.ends_with("/base.cuh")).unwrap();
    assert!(scale.name.starts_with(UP_PREFIX) && base.name.starts_with(UP_PREFIX), "{names:?}");
    assert!(names.contains(&"near.cuh"), "{names:?}");
    // Every name is one the daemon takes, and every directive was rewritten to it.
    assert!(r.headers.iter().all(|h| !h.name.split('/').any(|p| p == "..")));
    assert_eq!(r.source, format!("#include \"{}\"\n__global__ void k() {{ scale(); }}\n", scale.name));
    assert_eq!(scale.content, format!("#pragma once\n#include \"{}\"\n#include \"near.cuh\"\n", base.name));
    assert_eq!(base.content, "// base\n");
    // The names lead back to the user's files.
    let scale_path = r.paths.iter().find(|(n, _)| *n == scale.name).map(|(_, p)| p).unwrap();
    assert!(scale_path.ends_with("src/../include/scale.cuh"), "{}", scale_path.display());
}

#[test]
fn parent_includes_send_the_same_bytes_from_any_checkout() {
    let files = [
        ("a/src/k.cu", "#include \"../include/scale.cuh\"\n"),
        ("a/include/scale.cuh", "// scale\n"),
        ("elsewhere/deeper/b/src/k.cu", "#include \"../include/scale.cuh\"\n"),
        ("elsewhere/deeper/b/include/scale.cuh", "// scale\n"),
    ];
    let dir = tree(&files);
    let one = |p: &str| {
        let path = dir.path().join(p);
        super::resolve(&path, &fs::read_to_string(&path).unwrap(), &[]).unwrap()
    };
    let (a, b) = (one("a/src/k.cu"), one("elsewhere/deeper/b/src/k.cu"));
    assert_eq!((a.source, a.headers), (b.source, b.headers));
}

#[test]
fn a_parent_include_found_nowhere_names_the_file_and_the_directive() {
    let dir = tree(&[("src/k.cu", "#include \"../missing.cuh\"\n")]);
    let err = resolve(dir.path(), "src/k.cu", &[]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("src/k.cu") && text.contains("../missing.cuh") && text.contains("-I"), "{text}");
}
