//! kilnd's listeners as clients meet them: any gRPC client over the Unix socket (grpcio sends the
//! socket path as `:authority`), and the TCP listener's TLS and bearer tokens, read-only and
//! read-write, through the Rust client, the `kiln` CLI and the Python client.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use hyper_util::rt::TokioIo;
use kiln_client::{ConnectOptions, connect_with};
use kiln_proto::pb::{self, Outcome, Tier};
use kiln_tests::daemon::{Daemon, Options, compile_job, lookup_job};
use kiln_tests::env;
use kiln_tests::kernels::*;
use kiln_tests::tls::TestCert;
use std::path::Path;
use std::process::Command;
use tonic::Code;
use tonic::transport::{Endpoint, Uri};

const READ: &str = "kilnd-read-token-0123456789";
const WRITE: &str = "kilnd-write-token-0123456789";

/// Runs `script` with the pinned interpreter and the repository's Python package (its generated
/// stubs included) on the path; returns stdout, failing with stderr.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new(env::python())
        .arg("-c")
        .arg(script)
        .args(args)
        .env("PYTHONPATH", env::repo_root().join("client/python/src"))
        .env_remove("KILN_TOKEN_FILE")
        .env_remove("KILN_CA_FILE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// A stock grpcio channel, default options (no `grpc.default_authority`): Stats three times,
/// Compile once, Lookup three times, over the generated stubs. Prints each result's outcome and
/// tier, one call per line.
const GRPCIO_CALLS: &str = r#"
import sys, grpc
from google.protobuf import json_format
from kiln._proto import kiln_pb2 as pb, kiln_pb2_grpc

channel = grpc.insecure_channel("unix://" + sys.argv[1])
stub = kiln_pb2_grpc.CompilerStub(channel)
request = json_format.Parse(sys.argv[2], pb.CompileRequest())

def results(events):
    out = []
    for e in events:
        if e.HasField("kernels"):
            out += e.kernels.results
        elif e.HasField("kernel"):
            out.append(e.kernel)
    return " ".join(f"{pb.Outcome.Name(r.outcome)}/{pb.Tier.Name(r.tier)}" for r in out)

for _ in range(3):
    print("stats", stub.Stats(pb.StatsRequest(), timeout=30).version)
print("compile", results(stub.Compile(request, timeout=120)))
for _ in range(3):
    print("lookup", results(stub.Lookup(request, timeout=30)))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_grpcio_client_calls_kilnd_over_its_unix_socket() {
    let d = Daemon::start(Options::default());
    let request = vector_graph("sm_90", 2);
    let json = serde_json::to_string(&request).unwrap();
    let out = python(GRPCIO_CALLS, &[d.socket.to_str().unwrap(), &json]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    assert!(lines[..3].iter().all(|l| l.starts_with("stats ") && l.len() > "stats ".len()), "{out}");
    assert_eq!(lines[3], "compile OUTCOME_OK/TIER_COMPILED OUTCOME_OK/TIER_COMPILED", "{out}");
    for l in &lines[4..] {
        assert_eq!(*l, "lookup OUTCOME_OK/TIER_MEMORY OUTCOME_OK/TIER_MEMORY", "{out}");
    }
    // What grpcio compiled is what kiln's own client finds.
    let job = lookup_job(&d.client().await, request).await;
    assert!(job.kernels.iter().all(|r| r.outcome() == Outcome::Ok && tier(r) == Tier::Memory), "{job:?}");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_tonic_client_calls_kilnd_over_its_unix_socket() {
    let d = Daemon::start(Options::default());
    // No origin or authority option: the URI is the only authority tonic sends.
    let socket = d.socket.clone();
    let channel = Endpoint::from_static("http://kilnd")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?)) }
        }))
        .await
        .unwrap();
    let mut compiler = pb::compiler_client::CompilerClient::new(channel);
    let stats = compiler.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert!(!stats.version.is_empty());
    let mut events = compiler.compile(vector_graph("sm_90", 1)).await.unwrap().into_inner();
    let mut ok = 0;
    while let Some(event) = events.message().await.unwrap() {
        if let Some(pb::job_event::Event::Kernel(r)) = event.event {
            assert_eq!(r.outcome(), Outcome::Ok, "{r:?}");
            ok += 1;
        }
    }
    assert_eq!(ok, 1);
    d.stop();
}

/// A kilnd whose TCP listener serves TLS with a fresh certificate and takes the read and write
/// tokens, on all interfaces (a non-loopback address, which tokens and TLS make allowed). Returns
/// the certificate, the directory of the tokens file, the daemon and its `https://` URI.
fn tls_daemon() -> (TestCert, tempfile::TempDir, Daemon, String) {
    let cert = TestCert::localhost();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("# kilnd tokens\nread:{READ}\nwrite:{WRITE}\n")).unwrap();
    let port = kiln_tests::ports::free();
    let config = format!(
        "listen = \"0.0.0.0:{port}\"\ntokens_file = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        tokens.display(),
        cert.cert.display(),
        cert.key.display()
    );
    let d = Daemon::start(Options { config, ..Options::default() });
    (cert, dir, d, format!("https://localhost:{port}"))
}

fn with_token(cert: &TestCert, token: &str) -> ConnectOptions {
    ConnectOptions { token: token.into(), ca_pem: Some(cert.ca_pem.clone()) }
}

fn code<T: std::fmt::Debug>(r: Result<T, kiln_client::ClientError>) -> Code {
    r.unwrap_err().code().unwrap_or(Code::Unknown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_listener_serves_tls_and_checks_tokens() {
    let (cert, _dir, d, uri) = tls_daemon();

    // A read-write token compiles; a read-only token looks up and reads stats, but cannot compile.
    let writer = connect_with(&uri, &with_token(&cert, WRITE)).await.unwrap();
    let job = compile_job(&writer, vector_graph("sm_90", 1)).await;
    assert!(job.all_ok(), "{job:?}");
    let reader = connect_with(&uri, &with_token(&cert, READ)).await.unwrap();
    let found = lookup_job(&reader, vector_graph("sm_90", 1)).await;
    assert!(found.kernels.iter().all(|r| r.outcome() == Outcome::Ok), "{found:?}");
    assert!(!reader.stats().await.unwrap().version.is_empty());
    let denied = reader.compile(vector_graph("sm_90", 1)).await.unwrap_err();
    assert_eq!(denied.code(), Some(Code::PermissionDenied), "{denied}");
    assert!(denied.to_string().contains("kiln.v1.Compiler/Compile needs a read-write token"), "{denied}");

    // No token, or one kilnd does not know: UNAUTHENTICATED, for reads too.
    let anonymous = connect_with(&uri, &with_token(&cert, "")).await.unwrap();
    assert_eq!(code(anonymous.stats().await), Code::Unauthenticated);
    let stranger = connect_with(&uri, &with_token(&cert, "not-a-kilnd-token-0123456789")).await.unwrap();
    assert_eq!(code(stranger.stats().await), Code::Unauthenticated);

    // Plain text to the TLS listener gets nowhere, token or not.
    let plain_text = ConnectOptions { token: WRITE.into(), ca_pem: None };
    let plain = connect_with(&uri.replace("https://localhost", "http://127.0.0.1"), &plain_text).await;
    // Connecting succeeds (HTTP/2's preface needs no answer), and the first call meets the TLS
    // listener closing the connection: INTERNAL, CANCELLED when the close lands before the
    // request is written, or a transport error with no gRPC status at all (`code` reads it as
    // UNKNOWN) when the connection is gone before the call starts. Never an answer of kilnd's.
    let plain = plain.expect("a plain-text connection is made before anything is sent");
    let refused = code(plain.stats().await);
    assert!(matches!(refused, Code::Internal | Code::Cancelled | Code::Unknown), "{refused:?}");
    // Without the CA the certificate is not trusted: the TLS handshake, made on connecting, fails.
    let untrusted = connect_with(&uri, &ConnectOptions { token: WRITE.into(), ca_pem: None }).await;
    match untrusted {
        Err(kiln_client::ClientError::Unreachable { cause, .. }) => assert!(cause.contains("UnknownIssuer"), "{cause}"),
        other => panic!("an untrusted certificate was not refused on connecting: {:?}", other.map(|_| ())),
    }

    // The Unix socket needs no token.
    assert!(!d.client().await.stats().await.unwrap().version.is_empty());
    d.stop();
}

/// `kiln` with `args` against `uri`, the token and CA named by KILN_TOKEN_FILE and KILN_CA_FILE.
fn kiln(uri: &str, token_file: &Path, ca_file: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env::binary("kiln"))
        .args(args)
        .env("KILN_DAEMON", uri)
        .env("KILN_TOKEN_FILE", token_file)
        .env("KILN_CA_FILE", ca_file)
        .output()
        .unwrap()
}

/// The Python client over https with a token file: stats with the read token, and a compile
/// refused for it; then a compile with the write token.
const PYTHON_TLS: &str = r#"
import sys, grpc, kiln
from kiln.graph import CudaSource, Kernel
uri, ca, read, write, source = sys.argv[1:6]
graph = [Kernel(id="k", source=CudaSource(source=source))]
with kiln.Client(uri, token_file=read, ca_file=ca) as c:
    print("stats", bool(c.stats()))
    try:
        c.compile(graph, target="sm_90")
        print("compile allowed")
    except kiln.KilnError as e:
        print("compile", e.code.name)
with kiln.Client(uri, token_file=write, ca_file=ca) as c:
    print("compile", [r.outcome.name for r in c.compile(graph, target="sm_90").kernels])
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_python_client_reach_a_tls_listener_with_a_token() {
    let (cert, dir, d, uri) = tls_daemon();
    let (read, write) = (dir.path().join("read.token"), dir.path().join("write.token"));
    std::fs::write(&read, format!("{READ}\n")).unwrap();
    std::fs::write(&write, format!("{WRITE}\n")).unwrap();
    let cu = dir.path().join("add.cu");
    std::fs::write(&cu, vector_add(7)).unwrap();
    let cu = cu.to_str().unwrap();

    let stats = kiln(&uri, &read, &cert.ca_file, &["stats", "--json"]);
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let denied = kiln(&uri, &read, &cert.ca_file, &["compile", "--target", "sm_90", cu]);
    assert_eq!(denied.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("permission denied"), "{denied:?}");
    let compiled = kiln(&uri, &write, &cert.ca_file, &["compile", "--target", "sm_90", cu]);
    assert!(compiled.status.success(), "{}", String::from_utf8_lossy(&compiled.stderr));

    let out = python(
        PYTHON_TLS,
        &[&uri, cert.ca_file.to_str().unwrap(), read.to_str().unwrap(), write.to_str().unwrap(), &vector_add(8)],
    );
    assert_eq!(out, "stats True\ncompile PERMISSION_DENIED\ncompile ['OK']\n");
    d.stop();
}
