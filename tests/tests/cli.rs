//! The `kiln` command line against a real kilnd: header resolution on the client, NDJSON, --out,
//! exit codes, lookup, submit/watch, --graph and doctor.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_tests::daemon::{Daemon, Options};
use kiln_tests::elf::Cubin;
use kiln_tests::env;
use serde_json::Value;
use std::process::{Command, Output};

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("NDJSON line")).collect()
}

fn kernel_line<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines.iter().find(|l| l["id"] == id).unwrap_or_else(|| panic!("no line for {id} in {lines:?}"))
}

#[test]
fn compile_resolves_headers_by_content_and_never_serves_a_stale_artifact() {
    let d = Daemon::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("inc/nested")).unwrap();
    std::fs::write(dir.path().join("inc/scale.h"), "#include \"nested/factor.h\"\n#define SCALE (FACTOR * 2.0f)\n")
        .unwrap();
    std::fs::write(dir.path().join("inc/nested/factor.h"), "#define FACTOR 3.0f\n").unwrap();
    std::fs::write(
        dir.path().join("scale.cu"),
        "#include \"scale.h\"\nextern \"C\" __global__ void scale(float* x) { x[0] *= SCALE; }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("plain.cu"), kiln_tests::kernels::vector_add(7)).unwrap();
    let args = ["compile", "--target", "sm_90", "-I", "inc", "--json", "--out", "out", "scale.cu", "plain.cu"];

    let first = d.kiln(&args, dir.path());
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let l = lines(&first);
    assert_eq!(l.len(), 3, "two kernels and a summary");
    let scale = kernel_line(&l, "scale");
    for field in ["id", "key", "outcome", "tier", "compile_ms", "elapsed_ms", "bytes", "lowered_names", "log"] {
        assert!(scale.get(field).is_some(), "missing {field} in {scale}");
    }
    assert_eq!(scale["outcome"], "ok");
    assert_eq!(scale["tier"], "compiled");
    assert_eq!(l[2]["kernel_keys"].as_array().unwrap().len(), 2);
    assert!(l[2]["graph_key"].as_str().unwrap().len() == 64);
    let cubin = std::fs::read(dir.path().join("out/scale.cubin")).unwrap();
    assert!(Cubin::parse(&cubin).unwrap().symbols.iter().any(|s| s == "scale"));

    let warm = lines(&d.kiln(&args, dir.path()));
    assert_eq!(kernel_line(&warm, "scale")["tier"], "memory");

    // Edit a nested header: the key must change and the kernel must be compiled again.
    std::fs::write(dir.path().join("inc/nested/factor.h"), "#define FACTOR 5.0f\n").unwrap();
    let edited = lines(&d.kiln(&args, dir.path()));
    let after = kernel_line(&edited, "scale");
    assert_ne!(after["key"], scale["key"], "a header edit left the key unchanged");
    assert_eq!(after["tier"], "compiled", "a stale artifact was served");
    assert_eq!(kernel_line(&edited, "plain")["tier"], "memory");
    let new_cubin = std::fs::read(dir.path().join("out/scale.cubin")).unwrap();
    assert_ne!(new_cubin, cubin, "--out still holds the old cubin");
    d.stop();
}

#[test]
fn exit_codes_lookup_submit_watch_and_graph_files() {
    let d = Daemon::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.cu"), "extern \"C\" __global__ void b() { nope(); }\n").unwrap();
    std::fs::write(dir.path().join("good.cu"), kiln_tests::kernels::vector_add(9)).unwrap();

    let miss = d.kiln(&["lookup", "--target", "sm_90", "--json", "good.cu"], dir.path());
    assert_eq!(miss.status.code(), Some(1), "a miss is a non-zero exit");
    assert_eq!(lines(&miss)[0]["outcome"], "miss");

    let failed = d.kiln(&["compile", "--target", "sm_90", "bad.cu", "good.cu"], dir.path());
    assert_eq!(failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failed.stdout).contains("nope"), "the log is printed");

    let hit = d.kiln(&["lookup", "--target", "sm_90", "--json", "good.cu"], dir.path());
    assert!(hit.status.success());
    assert_eq!(lines(&hit)[0]["tier"], "memory");

    let submitted = d.kiln(&["submit", "--target", "sm_90", "--json", "good.cu"], dir.path());
    assert!(submitted.status.success());
    let job = lines(&submitted)[0]["job_id"].as_str().unwrap().to_string();
    let watched = d.kiln(&["watch", "--json", &job], dir.path());
    assert!(watched.status.success(), "{}", String::from_utf8_lossy(&watched.stderr));
    assert_eq!(lines(&watched)[0]["outcome"], "ok");

    let graph = env::repo_root().join("examples/cuda.graph.json");
    let from_graph = d.kiln(&["compile", "--json", "--graph", graph.to_str().unwrap()], dir.path());
    assert!(from_graph.status.success(), "{}", String::from_utf8_lossy(&from_graph.stdout));
    let softmax = kernel_line(&lines(&from_graph), "softmax").clone();
    assert_eq!(softmax["lowered_names"]["softmax_rows<float>"], "_Z12softmax_rowsIfEvPKT_PS0_i");

    let refused = d.kiln(&["compile", "--target", "sm_90", "good.cu", "--", "-I/etc"], dir.path());
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("invalid argument"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    d.stop();
}

#[test]
fn doctor_reports_the_toolchain_with_and_without_a_daemon() {
    let d = Daemon::start(Options::default());
    let here = env::repo_root();
    let up = d.kiln(&["doctor"], &here);
    let text = String::from_utf8_lossy(&up.stdout).to_string();
    assert!(up.status.success(), "{text}");
    assert!(text.contains("fingerprint") && text.contains("13.0"), "{text}");
    // Each toolchain compiled its tiny kernel through the daemon; the next doctor finds them cached.
    for (toolchain, what) in
        [("nvrtc", "compiled a tiny kernel"), ("ptxas", "assembled a tiny PTX"), ("triton", "compiled a tiny kernel")]
    {
        assert!(text.contains(&format!("{toolchain:<15} ok: {what} in ")), "{toolchain}: {text}");
    }
    assert!(text.contains("  triton 3.6.0"), "Stats asked after the probes shows Triton started: {text}");
    let again = d.kiln(&["doctor"], &here);
    let text = String::from_utf8_lossy(&again.stdout).to_string();
    assert!(again.status.success(), "{text}");
    assert!(text.contains("triton          ok: its tiny kernel was a hit (memory)"), "{text}");
    let uri = d.uri();
    d.stop();
    let down = Command::new(env::binary("kiln"))
        .env("KILN_DAEMON", &uri)
        .env("KILN_CUDA_ROOT", env::cuda_root())
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&down.stdout).to_string() + &String::from_utf8_lossy(&down.stderr);
    assert!(!down.status.success(), "doctor must fail when the daemon is down");
    assert!(text.contains("cannot reach kilnd"), "{text}");
    assert!(text.contains("nvrtc") && text.contains("13.0"), "the local check ran: {text}");
}

/// A kilnd whose cuda_root has no ptxas and whose python has no triton starts (NVRTC works), and
/// `kiln doctor` fails on its two broken toolchains, each with the fix kilnd names.
#[test]
fn doctor_fails_on_a_daemon_with_a_broken_toolchain_and_says_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let root = kiln_tests::toolkits::without_ptxas_root(dir.path());
    let python = kiln_tests::toolkits::python_without_triton(dir.path());
    let d = Daemon::start(Options {
        cuda_root: root.clone(),
        extra_env: vec![("KILN_PYTHON".into(), python.display().to_string())],
        ..Options::default()
    });
    let out = d.kiln(&["doctor"], &env::repo_root());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("nvrtc           ok: compiled a tiny kernel"), "{text}");
    assert!(text.contains("problem: kilnd cannot compile with ptxas: "), "{text}");
    assert!(text.contains(&format!("no bin/ptxas under {}", root.display())), "{text}");
    assert!(text.contains("nvidia-cuda-nvcc==13.0.88"), "the fix names the pinned wheel: {text}");
    assert!(text.contains("problem: kilnd cannot compile with triton: "), "{text}");
    assert!(text.contains(&format!("`{} -m pip install triton==3.6.0`", python.display())), "{text}");
    d.stop();
}

/// nvcc-style code: a `../` include compiles (sent under a name of its content), two checkouts at
/// different paths share the key, and errors and compile logs name the user's files and list
/// what is supported.
#[test]
fn parent_includes_compile_and_errors_name_the_users_files() {
    let d = Daemon::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    let checkout = |at: &str| {
        let root = dir.path().join(at);
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("include")).unwrap();
        std::fs::write(root.join("include/scale.cuh"), "#pragma once\n#define SCALE 2.0f\n").unwrap();
        std::fs::write(
            root.join("src/scale.cu"),
            "#include \"../include/scale.cuh\"\nextern \"C\" __global__ void scale(float* x) { x[0] *= SCALE; }\n",
        )
        .unwrap();
        root
    };
    let (a, b) = (checkout("a"), checkout("deeper/b"));
    let compile = |cwd: &std::path::Path| d.kiln(&["compile", "--target", "sm_90", "--json", "src/scale.cu"], cwd);
    let first = compile(&a);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let second = compile(&b);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let (la, lb) = (lines(&first), lines(&second));
    assert_eq!(kernel_line(&la, "scale")["key"], kernel_line(&lb, "scale")["key"], "another checkout, another key");
    assert_eq!(kernel_line(&lb, "scale")["tier"], "memory");

    // A compile error in the header and in the source: the log names both of the user's files.
    std::fs::write(a.join("include/scale.cuh"), "#pragma once\n#define SCALE undefined_thing\n").unwrap();
    let failed = d.kiln(&["compile", "--target", "sm_90", "src/scale.cu"], &a);
    assert_eq!(failed.status.code(), Some(1));
    let out = String::from_utf8_lossy(&failed.stdout);
    assert!(out.contains("src/scale.cu(2): error"), "{out}");
    assert!(!out.contains("kernel.cu(") && !out.contains("kiln-up/"), "{out}");

    // Unsupported targets and options list what is supported.
    let err = |args: &[&str]| {
        let out = d.kiln(args, &b);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let target = err(&["compile", "--target", "sm_999", "src/scale.cu"]);
    assert!(
        target.contains("sm_999 is not supported") && target.contains("supported: ") && target.contains("sm_90"),
        "{target}"
    );
    let option = err(&["compile", "--target", "sm_90", "src/scale.cu", "--", "-O9"]);
    assert!(option.contains("`-O9` is not on the NVRTC option allowlist; allowed: -G "), "{option}");
    assert!(option.contains("(graph.kernels[0] is src/scale.cu)"), "{option}");
    // A directory and a missing `../` header are named.
    let directory = err(&["compile", "src"]);
    assert!(directory.contains("src: is a directory"), "{directory}");
    std::fs::remove_file(b.join("include/scale.cuh")).unwrap();
    let missing = err(&["compile", "src/scale.cu"]);
    assert!(missing.contains("src/scale.cu: #include \"../include/scale.cuh\" was found neither"), "{missing}");
}
