//! The worker side: `kilnd worker`. It limits its own resources, moves into an empty directory,
//! loads NVRTC, says hello (version and targets, or why it cannot), then serves one request at a
//! time until its input closes. It holds no state between requests besides the loaded library.

use super::{frame, limits, nvrtc_ffi};
use crate::runtime::toolchain::Toolchain;
use kiln_proto::pb::{WorkerHello, WorkerRequest, WorkerResponse};
use std::fs::File;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::time::Instant;

/// Runs the worker; the return value is the process exit code.
pub fn run(nvrtc: &Path, builtins: &Path, memory_mb: u64) -> i32 {
    let Some(mut protocol_out) = take_stdout() else {
        eprintln!("kilnd worker: cannot set up its output pipe");
        return 2;
    };
    let mut input = std::io::stdin().lock();
    let scratch = std::env::temp_dir().join(format!("kiln-worker-{}", std::process::id()));
    let hello = match prepare(nvrtc, builtins, memory_mb, &scratch) {
        Ok(hello) => hello,
        Err(error) => WorkerHello { toolchain: Toolchain::Nvrtc.as_str().into(), error, ..Default::default() },
    };
    let failed = !hello.error.is_empty();
    let code = if frame::write_blocking(&mut protocol_out, &hello).is_err() || failed {
        1
    } else {
        serve(&mut input, &mut protocol_out)
    };
    let _ = std::fs::remove_dir(&scratch);
    code
}

fn prepare(nvrtc: &Path, builtins: &Path, memory_mb: u64, scratch: &Path) -> Result<WorkerHello, String> {
    limits::limit_memory(memory_mb).map_err(|e| format!("setting the memory limit: {e}"))?;
    // An empty working directory: a relative include can then find only the given headers and
    // the toolkit's include path, never a file that happens to sit where kilnd was started.
    std::fs::create_dir_all(scratch).map_err(|e| format!("creating {}: {e}", scratch.display()))?;
    std::env::set_current_dir(scratch).map_err(|e| format!("entering {}: {e}", scratch.display()))?;
    let loaded = nvrtc_ffi::load(nvrtc, builtins)?;
    // The libraries stay loaded until the process exits.
    std::mem::forget(loaded);
    Ok(WorkerHello {
        toolchain: Toolchain::Nvrtc.as_str().into(),
        version: nvrtc_ffi::version()?,
        supported_targets: nvrtc_ffi::supported_targets()?,
        error: String::new(),
    })
}

fn serve(input: &mut impl std::io::Read, output: &mut File) -> i32 {
    loop {
        let request: WorkerRequest = match frame::read_blocking(input) {
            Ok(Some(r)) => r,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("kilnd worker: bad request frame: {e}");
                return 3;
            }
        };
        let response = handle(&request);
        if frame::write_blocking(output, &response).is_err() {
            return 0;
        }
    }
}

fn handle(request: &WorkerRequest) -> WorkerResponse {
    if let Err(e) = limits::limit_cpu_from_now(request.cpu_seconds) {
        return WorkerResponse { log: format!("setting the CPU limit: {e}"), ..Default::default() };
    }
    let Some(source) = &request.cuda else {
        return WorkerResponse { log: "request carries no source".into(), ..Default::default() };
    };
    let started = Instant::now();
    let result = nvrtc_ffi::compile(source, &request.target, &request.system_include_dirs);
    let compile_micros = started.elapsed().as_micros() as u64;
    match result {
        Ok(c) => {
            WorkerResponse { ok: c.ok, cubin: c.cubin, log: c.log, lowered_names: c.lowered_names, compile_micros }
        }
        Err(log) => WorkerResponse { log, compile_micros, ..Default::default() },
    }
}

/// Moves the protocol onto a private copy of fd 1 and points fd 1 at stderr, so that anything
/// the compiler library prints can never corrupt a frame.
fn take_stdout() -> Option<File> {
    // SAFETY: dup and dup2 on the process's own standard descriptors; the new fd is owned by the
    // returned File and closed exactly once.
    unsafe {
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            return None;
        }
        Some(File::from_raw_fd(fd))
    }
}
