//! kilnd's pool of torch workers (`torch_worker.py`, shipped inside kilnd): long-lived Python
//! processes that imported torch, Dynamo and Inductor before their first request, each compiling
//! every graph in a child forked for it alone. The pool starts lazily, on the first graph request
//! or kiln.torch's warm call, since importing torch costs seconds and most hosts that run kilnd
//! never send a graph; once its first worker is up, the others start together in the background.

use crate::runtime::toolchain::triton_box;
use crate::runtime::worker::confine::Confinement;
use crate::runtime::worker::frame;
use crate::runtime::worker::pool::{Protocol, WorkerPool, WorkerSpec};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORKER_SCRIPT: &str = include_str!("torch_worker.py");
/// The worker's payload reader (what a client's payload may hold), which the worker imports from
/// beside it: written next to the script, and hashed with it into every graph's key.
const PAYLOAD_READER: &str = include_str!("torch_payload_reader.py");
/// How long past a compile's timeout kilnd waits for the worker's answer: the worker ends a child
/// that runs out of time itself and says so, and is killed only when it does not.
const TIMEOUT_GRACE: Duration = Duration::from_secs(10);

/// How to run the workers.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The interpreter with torch installed (`--python`, `KILN_PYTHON`).
    pub python: PathBuf,
    /// Workers at most: each holds torch in memory, and each compile is a process of its own.
    pub max_workers: usize,
}

/// A started pool and what its workers are.
#[derive(Debug)]
pub struct TorchWorkers {
    /// The worker's environment: torch, Triton, Python and CUDA versions (see [`Environment`]).
    pub environment: Environment,
    pool: Arc<WorkerPool<TorchProtocol>>,
    /// Holds the script and the workers' home, removed when the pool is dropped.
    _dir: tempfile::TempDir,
}

/// What a graph's compile depends on besides the graph: the versions of torch, Triton, Python
/// and CUDA a process runs. The client declares its own and the workers report theirs; a worker
/// compiles only for a client of the same environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    pub torch: String,
    pub triton: String,
    pub python: String,
    pub cuda: String,
}

impl Environment {
    /// The environment and the worker script, hashed: part of every graph's key, so a new worker
    /// script or another torch never serves an old answer.
    pub fn identity(&self) -> blake3::Hash {
        let mut h = blake3::Hasher::new();
        for part in [&self.torch, &self.triton, &self.python, &self.cuda] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        for script in [WORKER_SCRIPT, PAYLOAD_READER] {
            h.update(&(script.len() as u64).to_le_bytes());
            h.update(script.as_bytes());
        }
        h.finalize()
    }

    /// The first field where `other` differs, with both values, as the request names it.
    pub fn difference(&self, other: &Environment) -> Option<(&'static str, String, String)> {
        [
            ("torch_version", &self.torch, &other.torch),
            ("triton_version", &self.triton, &other.triton),
            ("python_version", &self.python, &other.python),
            ("cuda_version", &self.cuda, &other.cuda),
        ]
        .into_iter()
        .find(|(_, a, b)| a != b)
        .map(|(field, a, b)| (field, a.clone(), b.clone()))
    }
}

/// One compile's answer.
#[derive(Debug, Deserialize)]
pub struct Answer {
    pub ok: bool,
    #[serde(default)]
    pub log: String,
    #[serde(default)]
    pub compile_micros: u64,
    /// Seconds by step of the child's compile (read, compile, save, bundle), for the log.
    #[serde(default)]
    pub phases: BTreeMap<String, f64>,
    #[serde(skip)]
    pub artifacts: Bytes,
}

impl Answer {
    fn failed(log: String, started: Instant) -> Self {
        let compile_micros = started.elapsed().as_micros() as u64;
        Answer { ok: false, log, compile_micros, phases: BTreeMap::new(), artifacts: Bytes::new() }
    }
}

/// A request on the pipe: a u32 length and a JSON header, then the payload.
#[derive(Debug)]
pub struct Request {
    header: Json,
    payload: Bytes,
}

#[derive(Debug)]
pub struct TorchProtocol;

impl Protocol for TorchProtocol {
    type Hello = Json;
    type Request = Request;
    type Response = Answer;

    fn encode_request(request: &Request) -> std::io::Result<Vec<u8>> {
        let header = serde_json::to_vec(&request.header).map_err(std::io::Error::other)?;
        let len = u32::try_from(header.len()).map_err(std::io::Error::other)?;
        let mut out = Vec::with_capacity(4 + header.len() + request.payload.len());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&request.payload);
        Ok(out)
    }

    fn decode_response(bytes: &[u8]) -> std::io::Result<Answer> {
        let (mut answer, body): (Answer, _) = frame::json_header_and_body(bytes, "torch worker's")?;
        answer.artifacts = Bytes::copy_from_slice(body);
        Ok(answer)
    }
}

/// The worker's environment: what torch, Inductor, Triton and CUDA read, and nothing of
/// kilnd's own (tokens, the fleet's address).
/// Inductor's compile processes for each compile's child: the host's cores shared among the
/// workers, since each of them has a child with a pool of its own. Inductor's default, a pool as
/// large as the host, would start `workers` times the cores in processes that each import torch.
fn compile_threads(max_workers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / max_workers.max(1)).max(1)
}

fn worker_env(home: &Path, max_workers: usize) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            let passed = ["TORCH", "TORCHINDUCTOR_", "TRITON_", "CUDA_", "NVIDIA_", "OMP_", "CC", "CXX"];
            (passed.iter().any(|p| k.starts_with(p))
                && !k.contains("CACHE_DIR")
                && !k.starts_with("TRITON_CACHE_MANAGER"))
                || ["PATH", "LANG", "LD_LIBRARY_PATH", "TMPDIR"].contains(&k.as_ref())
        })
        .filter(|(k, _)| !k.to_string_lossy().starts_with("TRITON_REMOTE_CACHE"))
        .collect();
    env.extend([
        ("HOME".into(), home.as_os_str().to_owned()),
        ("TRITON_CACHE_DIR".into(), home.join("triton-cache").into_os_string()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("PYTHONNOUSERSITE".into(), "1".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        // Inductor asks torch.cuda.is_available() at import, which initialises CUDA and so
        // forbids it in every forked child; asked through NVML instead, it leaves fork usable.
        ("PYTORCH_NVML_BASED_CUDA_CHECK".into(), "1".into()),
    ]);
    if !env.iter().any(|(k, _)| k == "TORCHINDUCTOR_COMPILE_THREADS") {
        env.push(("TORCHINDUCTOR_COMPILE_THREADS".into(), compile_threads(max_workers).to_string().into()));
    }
    env
}

/// The user workers run as: `nobody` when kilnd is root, since a graph's payload is untrusted.
fn worker_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no failure mode and no side effects.
    (unsafe { libc::geteuid() } == 0).then_some((65534, 65534))
}

impl TorchWorkers {
    /// Starts the first worker, which imports torch and reports what it is.
    pub async fn start(settings: &Settings) -> Result<Self, String> {
        use std::os::unix::fs::PermissionsExt;
        let io = |e: std::io::Error| e.to_string();
        let dir = tempfile::Builder::new().prefix("kiln-torch-").tempdir().map_err(io)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        let script = dir.path().join("torch_worker.py");
        std::fs::write(&script, WORKER_SCRIPT).map_err(io)?;
        std::fs::write(dir.path().join("torch_payload_reader.py"), PAYLOAD_READER).map_err(io)?;
        let home = dir.path().join("home");
        std::fs::create_dir(&home).map_err(io)?;
        let user = worker_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&home, Some(uid), Some(gid)).map_err(io)?;
        }
        // A network namespace of its own where this host gives one; no seccomp filter: Inductor
        // runs a C++ compiler and a pool of its own processes, which the Triton filter refuses.
        let network = triton_box::protections().confinement().new_network;
        let spec = WorkerSpec {
            exe: settings.python.clone(),
            args: vec!["-u".into(), script.into_os_string()],
            env: Some(worker_env(&home, settings.max_workers)),
            user,
            confine: Some(Confinement { new_network: network, seccomp: None }),
            start_timeout: Duration::from_secs(300),
        };
        let (pool, hello) = WorkerPool::<TorchProtocol>::start(spec, settings.max_workers)
            .await
            .map_err(|e| format!("{}: {e}", settings.python.display()))?;
        let fingerprint = hello.get("fingerprint").ok_or("the torch worker's hello has no fingerprint")?;
        let text = |k: &str| fingerprint.get(k).and_then(Json::as_str).unwrap_or_default().to_string();
        let environment =
            Environment { torch: text("torch"), triton: text("triton"), python: text("python"), cuda: text("cuda") };
        tracing::info!(?environment, network_namespace = network, "torch workers ready");
        // The rest of the pool starts now, in the background: the pieces of a DDP graph come all
        // at once, and each would otherwise wait seconds for a worker of its own to import torch
        // while the first one compiles the others in turn.
        let pool = Arc::new(pool);
        let growing = Arc::clone(&pool);
        let more = settings.max_workers.saturating_sub(1);
        if more > 0 {
            tokio::spawn(async move { growing.grow(more).await });
        }
        Ok(TorchWorkers { environment, pool, _dir: dir })
    }

    /// Whether a compile asked for now would start at once in a warm worker.
    pub fn has_idle(&self) -> bool {
        self.pool.has_idle()
    }

    /// Compiles one graph's payload in a worker's child.
    pub async fn compile(&self, payload: Bytes, timeout: Duration) -> Answer {
        self.run(json!({"timeout_seconds": timeout.as_secs().max(1)}), payload, timeout).await
    }

    /// `kilnd check`'s probe: a worker's child compiles a tiny function with torch.compile, runs
    /// it and checks it against eager, where a graph's compile runs (its box, the GPU if any).
    pub async fn check(&self, timeout: Duration) -> Answer {
        self.run(json!({"timeout_seconds": timeout.as_secs().max(1), "check": true}), Bytes::new(), timeout).await
    }

    async fn run(&self, header: Json, payload: Bytes, timeout: Duration) -> Answer {
        let started = Instant::now();
        match self.pool.run(&Request { header, payload }, timeout + TIMEOUT_GRACE).await {
            Ok(answer) => answer,
            Err(failure) => Answer::failed(failure.to_string(), started),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_header_then_the_payload_and_an_answer_the_same() {
        let r = Request { header: json!({"timeout_seconds": 5}), payload: Bytes::from_static(b"PAYLOAD") };
        let bytes = TorchProtocol::encode_request(&r).unwrap();
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(&bytes[4..4 + len], br#"{"timeout_seconds":5}"#);
        assert_eq!(&bytes[4 + len..], b"PAYLOAD");

        let header = br#"{"ok":true,"compile_micros":7}"#;
        let mut frame = (header.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(header);
        frame.extend_from_slice(b"ARTIFACTS");
        let a = TorchProtocol::decode_response(&frame).unwrap();
        assert!(a.ok && a.compile_micros == 7 && a.artifacts.as_ref() == b"ARTIFACTS");
        assert!(TorchProtocol::decode_response(&frame[..6]).is_err());
    }

    #[test]
    fn the_environment_keeps_no_cache_or_remote_setting_of_kilnd() {
        let env = worker_env(Path::new("/h"), 4);
        let names: Vec<String> = env.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        assert!(names.contains(&"HOME".to_string()));
        assert!(!names.iter().any(|n| n.starts_with("KILN_")), "{names:?}");
        assert!(!names.iter().any(|n| n == "TORCHINDUCTOR_CACHE_DIR"), "{names:?}");
        assert!(names.iter().any(|n| n == "TORCHINDUCTOR_COMPILE_THREADS"), "{names:?}");
        assert!(compile_threads(usize::MAX) == 1 && compile_threads(0) >= 1);
    }
}
