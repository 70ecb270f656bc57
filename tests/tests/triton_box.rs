//! A Triton kernel is a Python module whose top-level code runs in kilnd's Triton worker. Each
//! test here sends hostile modules to a real kilnd and checks that nothing they do leaves their
//! compile's box: no later compile sees their changes, no file outside their directory is
//! written or read, no socket connects, no process outlives the compile, and kilnd and its
//! worker keep serving.
//!
//! The targets are made reachable to the worker's user by file permissions (world-writable
//! directories, a world-readable file, a socket anyone may connect to), so that only the box
//! stops a module. On a kernel or under rights where a protection is missing these tests fail
//! with the module's own report of what it got through (`LEAK: ...`). They need root, as CI
//! runs them (the worker then runs as `nobody`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{Outcome, Tier, kernel::Source};
use kiln_tests::daemon::{Daemon, Options};
use kiln_tests::kernels::*;
use kiln_tests::{env, procs};
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One worker and one compile at a time, so every compile here goes to the same zygote.
fn one_worker() -> Options {
    Options { concurrency: 1, config: "triton_workers = 1\ncompile_timeout_secs = 6\n".into(), ..Options::default() }
}

/// Compiles `prefix` followed by examples/triton/kernels.py's add_kernel.
async fn compile_module(d: &Daemon, id: &str, prefix: &str) -> kiln_proto::pb::KernelResult {
    compile_block(d, id, prefix, 64).await
}

/// [`compile_module`] with add_kernel's BLOCK.
async fn compile_block(d: &Daemon, id: &str, prefix: &str, block: i64) -> kiln_proto::pb::KernelResult {
    let source = format!("{prefix}\n{}", triton_module());
    let t = triton(&source, "add_kernel", TRITON_ADD, &[("BLOCK", block)], 4);
    let job = d.client().await.compile(request("sm_90", vec![any_kernel(id, Source::Triton(t))])).await.unwrap();
    job.collect().await.unwrap().kernels.remove(0)
}

/// Asserts that `d` still compiles an ordinary module, whatever the module before it did.
async fn assert_still_serves_triton(d: &Daemon) {
    let after = compile_module(d, "after", "").await;
    assert_eq!(after.outcome(), Outcome::Ok, "kilnd stopped serving Triton: {}", after.log);
}

/// Polls `done` every 10 ms until it holds or a second has passed; the caller asserts after.
async fn up_to_a_second(mut done: impl FnMut() -> bool) {
    let bound = std::time::Instant::now() + Duration::from_secs(1);
    while !done() && std::time::Instant::now() < bound {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The one Triton worker of `d`.
fn zygote(d: &Daemon) -> u32 {
    let workers = procs::triton_workers(d.pid());
    assert_eq!(workers.len(), 1, "expected one Triton worker, found {workers:?}");
    workers[0]
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// add_kernel (BLOCK=1024, 4 warps, sm_90) straight through `triton.compile`.
fn direct_cubin(scratch: &Path) -> Vec<u8> {
    let direct = Command::new(env::python())
        .arg(env::repo_root().join("tests/triton_direct.py"))
        .arg(env::repo_root().join("examples/triton/kernels.py"))
        .env("TRITON_ALWAYS_COMPILE", "1")
        .env("TRITON_CACHE_DIR", scratch.join("direct-triton-cache"))
        .output()
        .unwrap();
    assert!(direct.status.success(), "{}", String::from_utf8_lossy(&direct.stderr));
    direct.stdout
}

/// A module that patches Triton, one that crashes and one that spins: each is its own compile's
/// failure or odd result, the worker that served them is the same process afterwards, and the
/// next ordinary compile gives exactly `triton.compile`'s bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patched_triton_a_crash_or_a_spin_never_reaches_the_next_compile() {
    let d = Daemon::start(one_worker());
    let patch = "import triton\n\
                 import triton.compiler.compiler as _compiler\n\
                 _real = triton.compile\n\
                 def _evil(*args, **kwargs):\n    \
                     kernel = _real(*args, **kwargs)\n    \
                     kernel.asm['cubin'] = b'EVIL' + kernel.asm['cubin']\n    \
                     return kernel\n\
                 triton.compile = _evil\n\
                 _compiler.compile = _evil\n";
    let patched = compile_module(&d, "patch", patch).await;
    assert_eq!(patched.outcome(), Outcome::Ok, "{}", patched.log);
    assert!(patched.artifact.starts_with(b"EVIL"), "the patch did not even apply to its own compile");
    let worker = zygote(&d);

    let crash = compile_module(&d, "crash", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n").await;
    assert_eq!(crash.outcome(), Outcome::Failed);
    assert!(crash.log.contains("SIGSEGV"), "{}", crash.log);
    let exit = compile_module(&d, "exit", "import os\nos._exit(7)\n").await;
    assert_eq!(exit.outcome(), Outcome::Failed);
    assert!(exit.log.contains("status 7"), "{}", exit.log);
    let spin = compile_module(&d, "spin", "while True:\n    pass\n").await;
    assert_eq!(spin.outcome(), Outcome::Failed);
    assert!(spin.log.contains("timeout") || spin.log.contains("CPU-time"), "{}", spin.log);
    assert_eq!(zygote(&d), worker, "a hostile compile cost the worker its life");

    let ordinary = triton(&triton_module(), "add_kernel", TRITON_ADD, &[("BLOCK", 1024)], 4);
    let job = d.client().await.compile(request("sm_90", vec![any_kernel("add", Source::Triton(ordinary))])).await;
    let next = job.unwrap().collect().await.unwrap().kernels.remove(0);
    assert_eq!(next.outcome(), Outcome::Ok, "{}", next.log);
    assert_eq!(next.tier(), Tier::Compiled);
    assert_eq!(next.artifact, direct_cubin(&d.dir), "the compile after the patch differs from triton.compile's");
    assert_eq!(zygote(&d), worker);
    d.stop();
}

/// Listeners a module must not reach: TCP on loopback, a Unix socket file anyone may connect
/// to, and an abstract Unix socket.
struct Listeners {
    tcp: std::net::TcpListener,
    unix: std::os::unix::net::UnixListener,
    abstract_name: String,
    abstract_unix: std::os::unix::net::UnixListener,
}

impl Listeners {
    fn open(dir: &Path) -> Listeners {
        use std::os::linux::net::SocketAddrExt;
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let unix_path = dir.join("listener.sock");
        let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        chmod(&unix_path, 0o777);
        let abstract_name = format!("kiln-box-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let abstract_unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        for l in [&unix, &abstract_unix] {
            l.set_nonblocking(true).unwrap();
        }
        tcp.set_nonblocking(true).unwrap();
        Listeners { tcp, unix, abstract_name, abstract_unix }
    }

    /// Asserts that no listener has a connection waiting.
    fn assert_untouched(&self) {
        assert_eq!(self.tcp.accept().err().map(|e| e.kind()), Some(ErrorKind::WouldBlock), "TCP got a connection");
        assert_eq!(self.unix.accept().err().map(|e| e.kind()), Some(ErrorKind::WouldBlock), "Unix got a connection");
        let abstract_accept = self.abstract_unix.accept().err().map(|e| e.kind());
        assert_eq!(abstract_accept, Some(ErrorKind::WouldBlock), "the abstract socket got a connection");
    }
}

/// A module that writes outside its directory, reads a token and a world-readable file, reads
/// kilnd's command line and connects to every listener it is told of. It reports what got
/// through by failing with `LEAK: ...`; the test checks the same from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_cannot_write_read_or_connect_outside_its_box() {
    let d = Daemon::start(one_worker());
    let outside = tempfile::tempdir().unwrap();
    chmod(outside.path(), 0o755);
    let open_dir = outside.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    chmod(&open_dir, 0o777);
    // A fleet token as kilnd keeps one (root's, 0600), and a file anyone may read.
    let token = outside.path().join("kiln-cache.token");
    std::fs::write(&token, "fleet-token-that-must-not-leak").unwrap();
    chmod(&token, 0o600);
    let public = outside.path().join("public.toml");
    std::fs::write(&public, "remote_token = \"must-not-leak-either\"\n").unwrap();
    chmod(&public, 0o644);
    let listeners = Listeners::open(&open_dir);
    let written = open_dir.join("escaped");
    let in_tmp = format!("/tmp/kiln-box-escape-{}", std::process::id());
    let module = format!(
        r#"import os, socket
leaks = []
def attempt(what, action):
    try:
        action()
        leaks.append(what)
    except OSError:
        pass
def write(path):
    with open(path, "w") as f:
        f.write("escaped")
def read(path):
    with open(path) as f:
        f.read()
def tcp(port):
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
def unix(address):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    s.connect(address)
    s.close()
attempt("wrote a world-writable directory", lambda: write({written:?}))
attempt("wrote /tmp", lambda: write({in_tmp:?}))
attempt("read the token", lambda: read({token:?}))
attempt("read a world-readable file", lambda: read({public:?}))
attempt("read kilnd's command line", lambda: read("/proc/{kilnd}/cmdline"))
attempt("listed the daemon's directory", lambda: os.listdir({daemon_dir:?}))
attempt("connected over TCP", lambda: tcp({port}))
attempt("connected to a Unix socket", lambda: unix({unix:?}))
attempt("connected to kilnd's socket", lambda: unix({kilnd_socket:?}))
attempt("connected to an abstract socket", lambda: unix("\0{abstract_name}"))
write("inside")  # its own directory stays writable: the box is not just broken
if leaks:
    raise RuntimeError("LEAK: " + "; ".join(leaks))
"#,
        written = written.display().to_string(),
        token = token.display().to_string(),
        public = public.display().to_string(),
        kilnd = d.pid(),
        daemon_dir = d.dir.display().to_string(),
        port = listeners.tcp.local_addr().unwrap().port(),
        unix = open_dir.join("listener.sock").display().to_string(),
        kilnd_socket = d.socket.display().to_string(),
        abstract_name = listeners.abstract_name,
    );
    let result = compile_module(&d, "hostile", &module).await;
    assert_eq!(result.outcome(), Outcome::Ok, "the module got out of its box: {}", result.log);
    listeners.assert_untouched();
    assert!(!written.exists(), "{} was written", written.display());
    assert!(!Path::new(&in_tmp).exists(), "{in_tmp} was written");
    assert_still_serves_triton(&d).await;
    d.stop();
}

/// A module that double-forks a process into a session of its own, which would sleep and then
/// try to connect: the process is killed before the next compile starts, and never connects.
///
/// The worker answers as soon as the compile child has sent its result, and sends SIGKILL to
/// what the compile left right after that answer, before it reads the next request, without
/// waiting for the kernel to tear it down (a process with SIGKILL pending never runs its code
/// again and cannot fork). So the escapee may still be dying when this test sees the result;
/// what must hold is that it is killed once a later compile has run, gone within a short bound,
/// and reaped by the idle worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_a_compile_starts_do_not_outlive_it() {
    let d = Daemon::start(one_worker());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let name = format!("kiln-esc-{}", std::process::id() % 100_000);
    let module = format!(
        r#"import ctypes, os, socket, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None).prctl(15, {name:?}.encode(), 0, 0, 0)
        time.sleep(3)
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
        except OSError:
            pass
        time.sleep(60)
        os._exit(0)
    os.write(w, str(pid).encode())
    os._exit(0)
os.close(w)
escapee = int(os.read(r, 32))
raise RuntimeError(f"ESCAPEE {{escapee}}")
"#,
        port = listener.local_addr().unwrap().port(),
    );
    let result = compile_module(&d, "fork", &module).await;
    assert_eq!(result.outcome(), Outcome::Failed);
    let escapee: u32 = result
        .log
        .rsplit("ESCAPEE ")
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("the module never reported its escapee: {}", result.log));
    // The worker sends SIGKILL to every process of a compile after its answer and before it
    // reads the next request, without waiting for the kernel to tear them down: by the time
    // the next compile has run, the escapee can never run its code again.
    let next = compile_module(&d, "next", "x = 1\n").await;
    assert_eq!(next.outcome(), Outcome::Ok, "{}", next.log);
    assert!(procs::killed_or_gone(escapee), "the escapee {escapee} was not killed before the next compile ran");
    up_to_a_second(|| !Path::new(&format!("/proc/{escapee}")).exists()).await;
    assert!(!Path::new(&format!("/proc/{escapee}")).exists(), "the escapee {escapee} outlived its compile");
    assert_eq!(procs::named(&name), Vec::<u32>::new(), "a process named {name} outlived its compile");
    // What the worker has left, once it has reaped the last compile's child (while it waits
    // for the next request), is at most its next spare, boxed and waiting, which ran no client
    // code.
    let spares_only = || {
        let children = procs::children(zygote(&d));
        let names: Vec<String> = children
            .iter()
            .map(|(pid, _)| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim_end().into())
            .collect();
        (children.len() <= 1 && names.iter().all(|n| n == "kiln-spare"), format!("{children:?} {names:?}"))
    };
    up_to_a_second(|| spares_only().0).await;
    let (ok, children) = spares_only();
    assert!(ok, "the worker has children other than its spare: {children}");
    // Past the escapee's sleep: nothing connects.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(listener.accept().err().map(|e| e.kind()), Some(ErrorKind::WouldBlock), "the escapee connected");
    assert_still_serves_triton(&d).await;
    d.stop();
}

/// Each compile's child reports where its module's functions end (the extents inspect found
/// for @triton.jit), and the worker hands them to the next compile of the same source, which
/// then need not tokenize the module again. They reach only compiles of that exact source; a
/// module that reports false ones misleads only itself; and a compile given them returns
/// `triton.compile`'s bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_extents_a_compile_reports_reach_only_its_own_source() {
    let d = Daemon::start(one_worker());
    // Marks its cubin with how many extents its child was handed before any function ran.
    let probe = |tag: &str| {
        format!(
            "# {tag}\n\
             import sys, triton\n\
             import triton.compiler.compiler as _compiler\n\
             _handed = len(sys._getframe(1).f_locals['known'])\n\
             _real = triton.compile\n\
             def _mark(*args, **kwargs):\n    \
                 kernel = _real(*args, **kwargs)\n    \
                 kernel.asm['cubin'] = b'HANDED=%d;' % _handed + kernel.asm['cubin']\n    \
                 return kernel\n\
             triton.compile = _mark\n\
             _compiler.compile = _mark\n"
        )
    };
    let handed = |r: &kiln_proto::pb::KernelResult| {
        assert_eq!(r.outcome(), Outcome::Ok, "{}", r.log);
        let text = String::from_utf8_lossy(&r.artifact[..r.artifact.len().min(16)]).into_owned();
        text.strip_prefix("HANDED=").and_then(|t| t.split(';').next()?.parse::<usize>().ok()).unwrap()
    };
    assert_eq!(handed(&compile_block(&d, "a-64", &probe("a"), 64).await), 0, "a first compile was handed extents");
    let functions = triton_module().matches("@triton.jit").count();
    let again = handed(&compile_block(&d, "a-128", &probe("a"), 128).await);
    assert_eq!(again, functions, "the second compile of one source was not handed its module's extents");
    assert_eq!(handed(&compile_block(&d, "b-64", &probe("b"), 64).await), 0, "another source was handed extents");

    // Once its functions are defined, reports each as one line long: its first compile
    // succeeds, its second is handed those extents and fails; nobody else's is touched.
    let liar = format!(
        "{}\n\
         import re, sys\n\
         _frame = sys._getframe(1).f_locals\n\
         for _i, _line in enumerate(_frame['lines']):\n    \
             if re.match(r'(def |@)', _line):\n        \
                 _frame['known'][_i] = 1\n",
        triton_module()
    );
    let mut outcomes = Vec::new();
    for (id, block) in [("liar-64", 64), ("liar-128", 128)] {
        let t = triton(&liar, "add_kernel", TRITON_ADD, &[("BLOCK", block)], 4);
        let job = d.client().await.compile(request("sm_90", vec![any_kernel(id, Source::Triton(t))])).await;
        outcomes.push(job.unwrap().collect().await.unwrap().kernels.remove(0).outcome());
    }
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Failed], "the false extents did not reach the liar's own next compile");
    // The second compile of examples/triton/kernels.py is handed the extents the first found.
    let mut results = Vec::new();
    for (id, block) in [("ordinary-64", 64), ("ordinary-1024", 1024)] {
        let t = triton(&triton_module(), "add_kernel", TRITON_ADD, &[("BLOCK", block)], 4);
        let job = d.client().await.compile(request("sm_90", vec![any_kernel(id, Source::Triton(t))])).await;
        let result = job.unwrap().collect().await.unwrap().kernels.remove(0);
        assert_eq!((result.outcome(), result.tier()), (Outcome::Ok, Tier::Compiled), "{}", result.log);
        results.push(result);
    }
    let second = results.pop().unwrap();
    assert_eq!(
        second.artifact,
        direct_cubin(&d.dir),
        "a compile handed its module's extents differs from triton.compile"
    );
    d.stop();
}

/// The scan for what a compile left behind reads only the processes created since its child
/// was forked (a `Mark`), and falls back to all of /proc when the process ids may have wrapped;
/// either way a double-forked escapee in a session of its own is killed. Run in a Python process
/// standing in for the zygote (tests/triton_procs_scan.py), with the worker's own triton_procs.py.
#[test]
fn the_scan_after_a_compile_reads_what_was_created_since_and_falls_back_when_ids_wrap() {
    let out = Command::new(env::python())
        .arg(env::repo_root().join("tests/triton_procs_scan.py"))
        .arg(env::repo_root().join("daemon/src/runtime/toolchain"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for check in ["range_scan", "range_killed", "wrap_falls_back", "wrap_killed"] {
        assert_eq!(report[check], true, "{check}: {report}");
    }
}
