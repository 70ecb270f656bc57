//! Triton kernels, compiled by a pool of long-lived Python workers that run `triton.compile`
//! with an explicit `GPUTarget`, so no GPU is needed. The pool starts lazily, on the first Triton
//! request: a worker imports Triton once (about a second), and most hosts never see Triton work.
//! The worker script ships inside kilnd (`triton_worker.py`); each worker is a zygote that
//! compiles every request in a child of its own, inside the box of `triton_box.py`
//! ([`super::triton_box`] says which protections this host gives it); `triton_procs.py` finds,
//! kills and reaps what a compile left behind.

use super::{Compiled, Output, Toolchain, ToolchainError, triton_box};
use crate::runtime::worker::frame;
use crate::runtime::worker::pool::{Protocol, WorkerPool, WorkerSpec};
use kiln_proto::pb::{ToolchainInfo, TritonSource, triton_constexpr::Value};
use kiln_proto::{Fingerprint, Target};
use serde::Deserialize;
use serde_json::{Value as Json, json};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const WORKER_SCRIPT: &str = include_str!("triton_worker.py");
const BOX_SCRIPT: &str = include_str!("triton_box.py");
const PROCS_SCRIPT: &str = include_str!("triton_procs.py");
/// How long past a compile's timeout kilnd waits for the worker's answer: the worker ends a
/// compile that runs out of time itself and says so, and is killed only when it does not.
const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// How to run the workers.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The interpreter that has `triton` installed (`KILN_PYTHON`).
    pub python: PathBuf,
    /// Workers at most; each holds Triton and LLVM in memory (hundreds of MB).
    pub max_workers: usize,
    pub memory_mb: u64,
}

#[derive(Debug)]
pub struct Triton {
    pub version: String,
    pub location: String,
    pub fingerprint: Fingerprint,
    pool: WorkerPool<TritonProtocol>,
    /// Holds the worker script and the workers' home (their private TRITON_CACHE_DIR), removed
    /// when the toolchain is dropped.
    _dir: tempfile::TempDir,
}

#[derive(Debug)]
pub struct TritonProtocol;

/// A worker's answer to one request: a u32 length and the JSON of these fields, then the
/// cubin's bytes (`triton_box.encode_answer`).
#[derive(Debug, Deserialize)]
pub struct Response {
    ok: bool,
    #[serde(skip)]
    cubin: Vec<u8>,
    #[serde(default)]
    ptx: String,
    #[serde(default)]
    metadata_json: String,
    #[serde(default)]
    log: String,
    #[serde(default)]
    compile_micros: u64,
}

impl Protocol for TritonProtocol {
    type Hello = Json;
    type Request = Json;
    type Response = Response;

    fn encode_request(request: &Json) -> std::io::Result<Vec<u8>> {
        serde_json::to_vec(request).map_err(std::io::Error::other)
    }

    fn decode_response(bytes: &[u8]) -> std::io::Result<Response> {
        let (mut response, cubin): (Response, _) = frame::json_header_and_body(bytes, "Triton")?;
        response.cubin = cubin.to_vec();
        Ok(response)
    }
}

/// The user workers run as: `nobody` when kilnd is root, since workers run client code.
fn worker_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no failure mode and no side effects.
    (unsafe { libc::geteuid() } == 0).then_some((65534, 65534))
}

fn worker_env(home: &std::path::Path, memory_mb: u64) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            (k.starts_with("TRITON_") && k != "TRITON_CACHE_DIR" && k != "TRITON_ALWAYS_COMPILE")
                || k == "PATH"
                || k == "LANG"
        })
        .collect();
    let cache = home.join("triton-cache");
    env.extend([
        ("HOME".into(), home.as_os_str().to_owned()),
        ("TRITON_CACHE_DIR".into(), cache.into_os_string()),
        ("TRITON_ALWAYS_COMPILE".into(), "1".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("PYTHONNOUSERSITE".into(), "1".into()),
        ("KILN_WORKER_MEMORY_MB".into(), memory_mb.to_string().into()),
    ]);
    env
}

impl Triton {
    /// Starts the first worker, which imports Triton and reports what it is.
    pub async fn start(settings: &Settings) -> Result<Self, ToolchainError> {
        use std::os::unix::fs::PermissionsExt;
        let broken = |reason: String| ToolchainError::Broken {
            toolchain: Toolchain::Triton,
            path: settings.python.display().to_string(),
            reason,
        };
        let dir = tempfile::Builder::new().prefix("kiln-triton-").tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let script = dir.path().join("triton_worker.py");
        std::fs::write(&script, WORKER_SCRIPT)?;
        std::fs::write(dir.path().join("triton_box.py"), BOX_SCRIPT)?;
        std::fs::write(dir.path().join("triton_procs.py"), PROCS_SCRIPT)?;
        let home = dir.path().join("home");
        std::fs::create_dir(&home)?;
        let user = worker_user();
        let protections = triton_box::protections();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&home, Some(uid), Some(gid))?;
        }
        let spec = WorkerSpec {
            exe: settings.python.clone(),
            args: vec!["-u".into(), script.into_os_string()],
            env: Some(worker_env(&home, settings.memory_mb)),
            user,
            confine: Some(protections.confinement()),
            start_timeout: Duration::from_secs(120),
        };
        let (pool, hello) =
            WorkerPool::<TritonProtocol>::start(spec, settings.max_workers).await.map_err(|e| broken(e.to_string()))?;
        protections.verify(hello.get("box")).map_err(|e| broken(format!("the Triton box is incomplete: {e}")))?;
        let identity =
            hello.get("fingerprint").ok_or_else(|| broken("the worker's hello has no fingerprint".into()))?;
        let mut h = blake3::Hasher::new();
        h.update(Toolchain::Triton.as_str().as_bytes());
        // serde_json maps are sorted by key, so this text is canonical.
        h.update(identity.to_string().as_bytes());
        h.update(WORKER_SCRIPT.as_bytes());
        h.update(BOX_SCRIPT.as_bytes());
        let fingerprint = Fingerprint::from_bytes(*h.finalize().as_bytes());
        let text = |k: &str| hello.get(k).and_then(Json::as_str).unwrap_or_default().to_string();
        tracing::info!(version = %text("version"), sandbox = %protections.summary(), "Triton ready");
        Ok(Triton { version: text("version"), location: text("location"), fingerprint, pool, _dir: dir })
    }

    pub fn info(&self) -> ToolchainInfo {
        ToolchainInfo {
            name: Toolchain::Triton.as_str().into(),
            version: self.version.clone(),
            fingerprint: self.fingerprint.to_hex(),
            location: self.location.clone(),
            ..Default::default()
        }
    }

    pub async fn compile(&self, src: &TritonSource, target: &Target, timeout: Duration) -> Compiled {
        let started = Instant::now();
        let request = request_json(src, target, timeout);
        let r = match self.pool.run(&request, timeout + TIMEOUT_GRACE).await {
            Ok(r) => r,
            Err(failure) => return Compiled::failed(failure.to_string(), started),
        };
        Compiled::from_answer(
            r.ok && !r.cubin.is_empty(),
            Output {
                cubin: r.cubin,
                log: r.log,
                compile_micros: r.compile_micros.max(1),
                metadata_json: r.metadata_json,
                ptx: r.ptx,
                ..Default::default()
            },
        )
    }
}

/// The request as the worker reads it.
fn request_json(src: &TritonSource, target: &Target, timeout: Duration) -> Json {
    let constexprs: Vec<Json> = src
        .constexprs
        .iter()
        .map(|c| match &c.value {
            Some(Value::IntValue(v)) => json!({"name": c.name, "int": v}),
            Some(Value::FloatValue(v)) => json!({"name": c.name, "float": v}),
            Some(Value::BoolValue(v)) => json!({"name": c.name, "bool": v}),
            Some(Value::StringValue(v)) => json!({"name": c.name, "string": v}),
            None => json!({"name": c.name}),
        })
        .collect();
    let mut options = serde_json::Map::new();
    if let Some(o) = &src.options {
        for (k, v) in
            [("num_warps", o.num_warps), ("num_stages", o.num_stages), ("num_ctas", o.num_ctas), ("maxnreg", o.maxnreg)]
        {
            if v != 0 {
                options.insert(k.into(), json!(v));
            }
        }
        if o.enable_fp_fusion_set {
            options.insert("enable_fp_fusion".into(), json!(o.enable_fp_fusion));
        }
    }
    json!({
        "source": src.source,
        "kernel_name": src.kernel_name,
        "signature": src.signature.iter().map(|a| json!({"name": a.name, "type": a.r#type})).collect::<Vec<_>>(),
        "constexprs": constexprs,
        "attributes": src.attributes.iter().map(|a| json!({"arg_index": a.arg_index, "name": a.name, "value": a.value})).collect::<Vec<_>>(),
        "options": options,
        "capability": target.sm(),
        "cpu_seconds": timeout.as_secs().max(1),
        "wall_seconds": timeout.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::{Protocol, TritonProtocol};

    #[test]
    fn an_answer_is_a_json_header_then_the_cubin() {
        let header = br#"{"ok":true,"ptx":"p","metadata_json":"{}","log":"","compile_micros":5}"#;
        let mut frame = (header.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(header);
        frame.extend_from_slice(b"\x7fELF cubin");
        let r = TritonProtocol::decode_response(&frame).unwrap();
        assert!(r.ok);
        assert_eq!(r.cubin, b"\x7fELF cubin");
        assert_eq!((r.ptx.as_str(), r.compile_micros), ("p", 5));
        assert!(TritonProtocol::decode_response(&frame[..10]).is_err());
        assert!(TritonProtocol::decode_response(&[1, 0]).is_err());
    }
}
